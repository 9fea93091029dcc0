//! Header prediction: the fast path for the next packets of a live heap
//! (the state it keeps is `Predict`, a part of [`Heaps`]).

use super::heaps::{ChunkSource, HeapState, Heaps, PREDICT_WORDS};
use super::{ChunkStream, Place, Push};
use crate::buf::copy::copy;
use crate::spead::wire::{self, id};

#[inline]
pub(super) fn be64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + wire::WORD]);
    u64::from_be_bytes(w)
}

impl<P: Place> Heaps<P> {
    /// The next packet of the predicted live heap, placed in `src`'s chunk, or
    /// `None` when `data` does not match the prediction (then the full path
    /// decides). A single receiver and a group member alike.
    #[inline]
    pub(crate) fn predicted<S: ChunkSource>(
        &mut self,
        src: &mut S,
        sender: u32,
        data: &[u8],
    ) -> Option<(Push, usize)> {
        let p = &self.predict;
        if !p.valid || p.sender != sender {
            return None;
        }
        let (n, at) = (p.len, p.offset_at);
        let end = n + p.payload_length as usize;
        if data.len() < end {
            return None;
        }
        // One pass of word compares, no branch per word.
        let mut diff = 0;
        for (w, (&want, &mask)) in data[..n]
            .chunks_exact(wire::WORD)
            .zip(p.words.iter().zip(&p.masks))
        {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            diff |= (u64::from_ne_bytes(b) ^ want) & mask;
        }
        if diff != 0 {
            return None;
        }
        let offset = be64_at(data, at) & p.value_mask;
        // The decoder's PayloadOverflowsHeap check (values have <= 56 bits).
        if offset + p.payload_length > p.heap_length {
            return None;
        }
        let (live, heap_length) = (p.live, p.heap_length);
        self.stats.packets_predicted += 1;
        Some((
            self.add_to_live(src, live, offset, heap_length, &data[n..end]),
            end,
        ))
    }

    /// Remembers `data`'s header for [`Heaps::predicted`]: live heap `i`
    /// is about to receive this packet.
    pub(super) fn learn(&mut self, i: usize, sender: u32, data: &[u8], h: &wire::Header) {
        let n = h.payload_start();
        let f = h.flavour;
        let offset_at = (1..=h.n_items).rev().map(|k| k * wire::WORD).find(|&at| {
            let p = wire::ItemPointer(be64_at(data, at));
            p.is_immediate() && p.id(f) == id::PAYLOAD_OFFSET
        });
        let (Some(offset_at), Some(heap_length)) = (offset_at, h.heap_length) else {
            self.predict.valid = false;
            return;
        };
        if n > PREDICT_WORDS * wire::WORD || h.payload_length == heap_length {
            self.predict.valid = false;
            return;
        }
        let p = &mut self.predict;
        for (k, w) in data[..n].chunks_exact(wire::WORD).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            p.words[k] = u64::from_ne_bytes(b);
            p.masks[k] = if k * wire::WORD == offset_at {
                // Big-endian value bits, in the loaded word's byte order.
                (!f.max_value()).to_be()
            } else {
                u64::MAX
            };
        }
        p.valid = true;
        p.sender = sender;
        p.live = i;
        p.len = n;
        p.offset_at = offset_at;
        p.value_mask = f.max_value();
        p.heap_length = heap_length;
        p.payload_length = h.payload_length;
    }
}

impl<P: Place> ChunkStream<P> {
    /// Places the longest run of back-to-back packets at the start of `buf` (from
    /// sender 0) that [`Heaps::predicted`] would take and that would each
    /// just be appended to the predicted live heap (a new highest offset, the
    /// heap not completed by it); returns the bytes consumed (0: none). The
    /// outcome is the same as pushing them one by one; the loop only keeps the
    /// heap, its chunk and the counters in locals between packets, so that the
    /// copies follow each other with little work in between (whatever ends the
    /// run, e.g. the heap's last packet, takes the packet-by-packet path).
    // Not inlined: `push_buffer`'s loop stays as lean as before for the packets
    // this does not take (single-packet heaps); one call per run.
    #[inline(never)]
    pub(super) fn push_predicted_run(&mut self, buf: &[u8]) -> usize {
        let (heaps, win) = (&mut self.heaps, &mut self.win);
        let p = &heaps.predict;
        if win.cfg.packet_presence.is_some() {
            return 0;
        }
        let (n, at_off, value_mask) = (p.len, p.offset_at, p.value_mask);
        let (heap_length, pl) = (p.heap_length, p.payload_length as usize);
        let end = n + pl;
        let l = &mut heaps.live[p.live];
        let HeapState::Placing {
            chunk_id,
            heap_offset,
            ..
        } = l.state
        else {
            return 0;
        };
        if l.heap_length != heap_length {
            return 0;
        }
        let slot = win.slot_of(chunk_id);
        let Some(chunk) = win.slots[slot].as_mut() else {
            return 0;
        };
        // Inside the chunk: checked when the heap was placed.
        let heap = &mut chunk.data[heap_offset..heap_offset + heap_length as usize];
        let (words, masks) = (&p.words[..n / wire::WORD], &p.masks[..n / wire::WORD]);
        let mut received = l.received;
        let mut last = l.offsets.last().copied();
        let mut at = 0;
        let mut count = 0u64;
        while buf.len() - at >= end {
            let data = &buf[at..at + end];
            let mut diff = 0;
            for (w, (&want, &mask)) in data[..n]
                .chunks_exact(wire::WORD)
                .zip(words.iter().zip(masks))
            {
                let mut b = [0u8; 8];
                b.copy_from_slice(w);
                diff |= (u64::from_ne_bytes(b) ^ want) & mask;
            }
            let offset = be64_at(data, at_off) & value_mask;
            if diff != 0
                || offset + pl as u64 > heap_length
                || last.is_some_and(|last| last >= offset)
                || received + pl as u64 == heap_length
            {
                break;
            }
            let o = offset as usize;
            copy(win.cfg.copy, &mut heap[o..o + pl], &data[n..]);
            l.offsets.push(offset);
            last = Some(offset);
            received += pl as u64;
            count += 1;
            at += end;
        }
        l.received = received;
        let stats = &mut heaps.stats;
        stats.packets += count;
        stats.packets_predicted += count;
        stats.packets_accepted += count;
        stats.bytes += count * pl as u64;
        at
    }
}
