//! Heaps placed straight into large chunks, as spead2's `ChunkRingStream` does.
//!
//! For the first packet of each heap a [`Place`] decides where the heap goes: a
//! chunk id, the heap's index in the chunk's `present` map and its byte offset in
//! the chunk. Every packet's payload is then copied once, from the packet to its
//! place in the chunk; a heap that fits in one packet takes a fast path that keeps
//! no per-heap state at all. A heap is marked present when all its bytes arrived
//! (or, with packet presence, each packet marks its own slot).
//!
//! Window (spead2's semantics): at most `max_chunks` consecutive chunk ids are
//! live, `head..tail`. A heap for a chunk before the head is too old (counted). A
//! heap for a chunk at or beyond the tail allocates the chunks up to it, flushing
//! the oldest chunks when the window would exceed `max_chunks`; a heap so far ahead
//! that the whole window is stale flushes it all and restarts the window so that its
//! chunk is the newest. Flushed chunks go to a ready queue ([`ChunkStream::poll_chunk`]);
//! the consumer gives them back with [`ChunkStream::add_free_chunk`], which zeroes
//! their `present` map. Chunks come only from that free ring, so memory stays
//! bounded: when it is empty the packet is not consumed and
//! [`Push::Stall`] tells the caller to return chunks and offer it again.
//!
//! Live multi-packet heaps are bounded by `max_heaps`; a new heap when all are
//! taken evicts the oldest (counted). A heap whose chunk is flushed while it is
//! incomplete is counted as flushed. Every discarded packet and heap is counted by
//! cause in [`ChunkStats`].

use std::collections::VecDeque;

use crate::buf::copy::{copy, CopyMode};

use super::wire::{self, ctrl, decode_visit, id};

mod buf;
mod place;
mod predict;
#[cfg(test)]
mod test;
mod window;

pub use buf::{Chunk, ChunkBuf};
pub use place::{KatgpucbfPlace, Place, PlaceInput, Placement, MAX_PLACE_ITEMS};
use predict::Predict;

/// Chunk stream parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Live chunks at once (the window), at least 1.
    pub max_chunks: usize,
    /// Chunks allocated in total (the free ring), at least `max_chunks` for
    /// throughput, plus whatever the consumer holds.
    pub n_chunks: usize,
    /// Bytes of data per chunk.
    pub chunk_bytes: usize,
    /// Entries of the `present` map per chunk.
    pub present_len: usize,
    /// Live multi-packet heaps at once.
    pub max_heaps: usize,
    /// Packet presence: `Some(payload_size)` marks `present[heap_index +
    /// payload_offset / payload_size]` per packet instead of one entry per heap.
    pub packet_presence: Option<usize>,
    /// How payloads are copied into chunks: ordinary stores (the default, best
    /// while the chunks in flight fit in the last-level cache) or non-temporal
    /// ones (best when they do not). See `BENCHMARKS.md`.
    pub copy: CopyMode,
}

/// Why a packet was not placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkDiscard {
    /// It did not decode ([`ChunkStream::last_error`] says why).
    Malformed,
    /// Already received.
    Duplicate,
    /// No heap length (a chunk stream needs it).
    Unsized,
    /// Heap length differs from its heap's.
    Inconsistent,
    /// Its heap's chunk is before the window.
    TooOld,
    /// The placement rejected its heap.
    Rejected,
    /// The placement pointed outside the chunk.
    OutOfBounds,
    /// It arrived after the end of stream.
    AfterStop,
}

/// The result of offering a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Push {
    /// Copied into a chunk.
    Accepted,
    /// Not used; counted.
    Discarded(ChunkDiscard),
    /// No free chunk: give chunks back and offer the packet again.
    Stall,
    /// An end-of-stream heap: everything was flushed.
    Stopped,
}

/// Counters by cause.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChunkStats {
    /// Packets offered (not counting stalled offers).
    pub packets: u64,
    /// Packets copied into chunks.
    pub packets_accepted: u64,
    /// Packets that did not decode.
    pub packets_malformed: u64,
    /// Duplicate packets.
    pub packets_duplicate: u64,
    /// Packets without a heap length.
    pub packets_unsized: u64,
    /// Packets whose heap length disagreed with their heap.
    pub packets_inconsistent: u64,
    /// Packets of too-old heaps.
    pub packets_too_old: u64,
    /// Packets of rejected or out-of-bounds heaps.
    pub packets_rejected: u64,
    /// Packets after the end of stream.
    pub packets_after_stop: u64,
    /// Packets that were part of heaps dropped incomplete.
    pub packets_in_incomplete_heaps: u64,
    /// Heaps placed complete.
    pub heaps_complete: u64,
    /// Of those, heaps of a single packet (fast path).
    pub heaps_single_packet: u64,
    /// Packets of multi-packet heaps recognised by header prediction (their
    /// header equal to the previous packet's but for the payload offset), which
    /// skips the item walk; also counted by what became of them.
    pub packets_predicted: u64,
    /// Incomplete heaps evicted to make room for newer ones.
    pub heaps_incomplete_evicted: u64,
    /// Incomplete heaps whose chunk was flushed.
    pub heaps_incomplete_flushed: u64,
    /// Heaps for chunks before the window.
    pub heaps_too_old: u64,
    /// Heaps the placement rejected or that pointed outside the chunk.
    pub heaps_rejected: u64,
    /// Chunks delivered.
    pub chunks: u64,
    /// Offers that found no free chunk.
    pub stalls: u64,
    /// `present` entries set in delivered chunks.
    pub present: u64,
    /// `present` entries in delivered chunks.
    pub present_slots: u64,
    /// Payload bytes copied into chunks.
    pub bytes: u64,
    /// Whether an end-of-stream heap arrived.
    pub stopped: bool,
}

impl ChunkStats {
    /// Counts a packet discarded for `why` (a single receiver's and a group
    /// member's count alike).
    #[inline]
    pub(crate) fn discarded(&mut self, why: ChunkDiscard) -> Push {
        match why {
            ChunkDiscard::Malformed => self.packets_malformed += 1,
            ChunkDiscard::Duplicate => self.packets_duplicate += 1,
            ChunkDiscard::Unsized => self.packets_unsized += 1,
            ChunkDiscard::Inconsistent => self.packets_inconsistent += 1,
            ChunkDiscard::TooOld => self.packets_too_old += 1,
            ChunkDiscard::Rejected | ChunkDiscard::OutOfBounds => self.packets_rejected += 1,
            ChunkDiscard::AfterStop => self.packets_after_stop += 1,
        }
        Push::Discarded(why)
    }

    /// Counts a heap discarded for `why` (its packet is counted by
    /// [`ChunkStats::discarded`]).
    #[inline]
    pub(crate) fn heap_discarded(&mut self, why: ChunkDiscard) {
        match why {
            ChunkDiscard::TooOld => self.heaps_too_old += 1,
            _ => self.heaps_rejected += 1,
        }
    }

    /// Fraction of `present` entries set in delivered chunks (1.0 when none yet).
    pub fn fraction_present(&self) -> f64 {
        if self.present_slots == 0 {
            1.0
        } else {
            self.present as f64 / self.present_slots as f64
        }
    }
}

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeapState {
    Placing {
        chunk_id: i64,
        heap_index: usize,
        heap_offset: usize,
    },
    Discarding(ChunkDiscard),
}

#[derive(Debug, Clone)]
struct LiveHeap {
    sender: u32,
    cnt: u64,
    state: HeapState,
    heap_length: u64,
    received: u64,
    offsets: Vec<u64>,
    age: u64,
}

/// Adds a packet's payload offset to its heap's sorted list; false when it is
/// there already (a duplicate). In-order packets append.
#[inline]
pub(crate) fn insert_offset(offsets: &mut Vec<u64>, offset: u64) -> bool {
    let at = match offsets.last() {
        Some(&last) if last < offset => offsets.len(),
        None => 0,
        _ => match offsets.binary_search(&offset) {
            Ok(_) => return false,
            Err(at) => at,
        },
    };
    offsets.insert(at, offset);
    true
}

/// The chunk stream: packets in, chunks out.
///
/// Call order: [`ChunkStream::push`] for each packet (on [`Push::Stall`], return
/// chunks and offer it again), drain [`ChunkStream::poll_chunk`], give chunks back
/// with [`ChunkStream::add_free_chunk`]; [`ChunkStream::flush`] at the end.
#[derive(Debug)]
pub struct ChunkStream<P: Place> {
    cfg: ChunkConfig,
    place: P,
    n_ids: usize,
    ids: [u64; MAX_PLACE_ITEMS],
    window: Vec<Option<Chunk>>,
    head: i64,
    tail: i64,
    head_pos: usize,
    tail_pos: usize,
    free: Vec<Chunk>,
    ready: VecDeque<Chunk>,
    live: Vec<LiveHeap>,
    n_live: usize,
    age: u64,
    stats: ChunkStats,
    last_error: Option<wire::Error>,
    predict: Predict,
}

impl<P: Place> ChunkStream<P> {
    /// A stream with `cfg.n_chunks` chunks allocated up front.
    pub fn new(cfg: ChunkConfig, place: P) -> ChunkStream<P> {
        let mut cfg = cfg;
        cfg.max_chunks = cfg.max_chunks.max(1);
        cfg.max_heaps = cfg.max_heaps.max(1);
        let mut ids = [0u64; MAX_PLACE_ITEMS];
        let n_ids = place.item_ids().len().min(MAX_PLACE_ITEMS);
        ids[..n_ids].copy_from_slice(&place.item_ids()[..n_ids]);
        let free = (0..cfg.n_chunks)
            .map(|_| Chunk::new(cfg.chunk_bytes, cfg.present_len))
            .collect();
        let live = (0..cfg.max_heaps)
            .map(|_| LiveHeap {
                sender: 0,
                cnt: 0,
                state: HeapState::Discarding(ChunkDiscard::Rejected),
                heap_length: 0,
                received: 0,
                offsets: Vec::with_capacity(64),
                age: 0,
            })
            .collect();
        ChunkStream {
            window: vec![None; cfg.max_chunks],
            cfg,
            place,
            n_ids,
            ids,
            head: 0,
            tail: 0,
            head_pos: 0,
            tail_pos: 0,
            free,
            ready: VecDeque::new(),
            live,
            n_live: 0,
            age: 0,
            stats: ChunkStats::default(),
            last_error: None,
            predict: Predict::NONE,
        }
    }

    /// Why the last malformed packet did not decode.
    pub fn last_error(&self) -> Option<wire::Error> {
        self.last_error
    }

    /// The counters.
    pub fn stats(&self) -> &ChunkStats {
        &self.stats
    }

    /// The placement.
    pub fn place(&self) -> &P {
        &self.place
    }

    /// The configuration.
    pub fn config(&self) -> &ChunkConfig {
        &self.cfg
    }

    /// The window `head..tail` of live chunk ids.
    pub fn window(&self) -> (i64, i64) {
        (self.head, self.tail)
    }

    /// Chunks in the free ring.
    pub fn free_chunks(&self) -> usize {
        self.free.len()
    }

    /// Live multi-packet heaps.
    pub fn live_heaps(&self) -> usize {
        self.n_live
    }

    fn remove_live(&mut self, i: usize) {
        // Indices move: forget the prediction (set again by the next heap's packet).
        self.predict.valid = false;
        self.n_live -= 1;
        self.live.swap(i, self.n_live);
    }

    fn new_live(&mut self, sender: u32, cnt: u64, heap_length: u64, state: HeapState) -> usize {
        if self.n_live == self.live.len() {
            let oldest = (0..self.n_live)
                .min_by_key(|&i| self.live[i].age)
                .unwrap_or(0);
            let l = &self.live[oldest];
            if matches!(l.state, HeapState::Placing { .. }) {
                self.stats.heaps_incomplete_evicted += 1;
                self.stats.packets_in_incomplete_heaps += l.offsets.len() as u64;
            }
            self.remove_live(oldest);
        }
        let i = self.n_live;
        self.n_live += 1;
        self.age += 1;
        let l = &mut self.live[i];
        l.sender = sender;
        l.cnt = cnt;
        l.state = state;
        l.heap_length = heap_length;
        l.received = 0;
        l.offsets.clear();
        l.age = self.age;
        i
    }

    fn discard(&mut self, why: ChunkDiscard) -> Push {
        self.stats.discarded(why)
    }

    /// Offers one packet from `sender`.
    pub fn push(&mut self, sender: u32, data: &[u8]) -> Push {
        self.push_len(sender, data).0
    }

    /// [`ChunkStream::push`] for a packet at the start of `data` (trailing bytes
    /// are ignored); also returns the packet's length (0 if it did not decode).
    pub fn push_len(&mut self, sender: u32, data: &[u8]) -> (Push, usize) {
        self.stats.packets += 1;
        if let Some(r) = self.predicted(sender, data) {
            return r;
        }
        let mut stop = false;
        let h = match decode_visit(data, |item, v| {
            stop |= item == id::STREAM_CTRL && v == ctrl::STOP;
        }) {
            Ok(h) => h,
            Err(e) => {
                self.last_error = Some(e);
                return (self.discard(ChunkDiscard::Malformed), 0);
            }
        };
        let len = h.packet_len();
        if self.stats.stopped {
            return (self.discard(ChunkDiscard::AfterStop), len);
        }
        if stop {
            self.stats.stopped = true;
            self.flush();
            return (Push::Stopped, len);
        }
        (self.place_packet(sender, data, &h), len)
    }

    /// Immediate values of the placement's items in a decoded packet.
    #[inline]
    fn item_values(&self, data: &[u8], h: &wire::Header) -> [Option<u64>; MAX_PLACE_ITEMS] {
        let mut vals = [None; MAX_PLACE_ITEMS];
        let f = h.flavour;
        let ids = &self.ids[..self.n_ids];
        for w in data[wire::WORD..h.payload_start()].chunks_exact(wire::WORD) {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            let p = wire::ItemPointer(u64::from_be_bytes(b));
            if p.is_immediate() {
                let item = p.id(f);
                for (k, &want) in ids.iter().enumerate() {
                    if want == item {
                        vals[k] = Some(p.value(f));
                    }
                }
            }
        }
        vals
    }

    #[inline]
    fn place_packet(&mut self, sender: u32, data: &[u8], h: &wire::Header) -> Push {
        let Some(heap_length) = h.heap_length else {
            return self.discard(ChunkDiscard::Unsized);
        };
        let start = h.payload_start();
        let payload = &data[start..start + h.payload_length as usize];

        // A heap already live?
        if h.payload_length != heap_length {
            if let Some(i) = (0..self.n_live)
                .find(|&i| self.live[i].cnt == h.heap_cnt && self.live[i].sender == sender)
            {
                self.learn(i, sender, data, h);
                return self.add_to_live(i, h.payload_offset, heap_length, payload);
            }
        }

        let vals = self.item_values(data, h);
        let input = PlaceInput {
            sender,
            heap_cnt: h.heap_cnt,
            heap_length,
            items: &vals[..self.n_ids],
            packet: data,
        };
        let single = h.payload_offset == 0 && h.payload_length == heap_length;
        let placement = match self.place.place(&input) {
            Some(p) if p.chunk_id >= 0 => p,
            _ => {
                return self.discard_heap(
                    single,
                    sender,
                    h.heap_cnt,
                    heap_length,
                    ChunkDiscard::Rejected,
                )
            }
        };
        let slot = match self.chunk_slot(placement.chunk_id) {
            Ok(s) => s,
            Err(Push::Stall) => {
                self.stats.packets -= 1;
                self.stats.stalls += 1;
                return Push::Stall;
            }
            Err(_) => {
                return self.discard_heap(
                    single,
                    sender,
                    h.heap_cnt,
                    heap_length,
                    ChunkDiscard::TooOld,
                )
            }
        };
        let last_present = match self.cfg.packet_presence {
            Some(ps) => placement.heap_index + (heap_length.max(1) as usize - 1) / ps.max(1),
            None => placement.heap_index,
        };
        if placement
            .heap_offset
            .checked_add(heap_length as usize)
            .is_none_or(|end| end > self.cfg.chunk_bytes)
            || last_present >= self.cfg.present_len
        {
            return self.discard_heap(
                single,
                sender,
                h.heap_cnt,
                heap_length,
                ChunkDiscard::OutOfBounds,
            );
        }
        if single {
            // Fast path: no per-heap state.
            let Some(chunk) = self.window[slot].as_mut() else {
                return self.discard(ChunkDiscard::Rejected);
            };
            if chunk.present[placement.heap_index] != 0 {
                return self.discard(ChunkDiscard::Duplicate);
            }
            copy(
                self.cfg.copy,
                &mut chunk.data[placement.heap_offset..placement.heap_offset + payload.len()],
                payload,
            );
            chunk.present[placement.heap_index] = 1;
            self.stats.packets_accepted += 1;
            self.stats.heaps_complete += 1;
            self.stats.heaps_single_packet += 1;
            self.stats.bytes += payload.len() as u64;
            return Push::Accepted;
        }
        let i = self.new_live(
            sender,
            h.heap_cnt,
            heap_length,
            HeapState::Placing {
                chunk_id: placement.chunk_id,
                heap_index: placement.heap_index,
                heap_offset: placement.heap_offset,
            },
        );
        self.learn(i, sender, data, h);
        self.add_to_live(i, h.payload_offset, heap_length, payload)
    }

    fn discard_heap(
        &mut self,
        single: bool,
        sender: u32,
        cnt: u64,
        heap_length: u64,
        why: ChunkDiscard,
    ) -> Push {
        self.stats.heap_discarded(why);
        if !single {
            // Remember the heap so its other packets are counted, not re-placed.
            self.new_live(sender, cnt, heap_length, HeapState::Discarding(why));
        }
        self.discard(why)
    }

    #[inline]
    fn add_to_live(&mut self, i: usize, offset: u64, heap_length: u64, payload: &[u8]) -> Push {
        let l = &mut self.live[i];
        let (chunk_id, heap_index, heap_offset) = match l.state {
            HeapState::Discarding(why) => return self.discard(why),
            HeapState::Placing {
                chunk_id,
                heap_index,
                heap_offset,
            } => (chunk_id, heap_index, heap_offset),
        };
        if l.heap_length != heap_length {
            return self.discard(ChunkDiscard::Inconsistent);
        }
        if !insert_offset(&mut l.offsets, offset) {
            return self.discard(ChunkDiscard::Duplicate);
        }
        l.received += payload.len() as u64;
        let complete = l.received == l.heap_length;
        // The heap's chunk is in the window: flushing a chunk removes its live heaps.
        let slot = self.slot_of(chunk_id);
        let Some(chunk) = self.window[slot].as_mut() else {
            return self.discard(ChunkDiscard::Rejected);
        };
        let dst = heap_offset + offset as usize;
        copy(
            self.cfg.copy,
            &mut chunk.data[dst..dst + payload.len()],
            payload,
        );
        if let Some(ps) = self.cfg.packet_presence {
            // An empty packet (possibly at the heap's very end) has no slot of its own.
            if !payload.is_empty() {
                if let Some(p) = chunk
                    .present
                    .get_mut(heap_index + offset as usize / ps.max(1))
                {
                    *p = 1;
                }
            }
        }
        self.stats.packets_accepted += 1;
        self.stats.bytes += payload.len() as u64;
        if complete {
            if self.cfg.packet_presence.is_none() {
                chunk.present[heap_index] = 1;
            }
            self.stats.heaps_complete += 1;
            self.remove_live(i);
        }
        Push::Accepted
    }

    /// Offers back-to-back packets from one buffer (spead2's buffer reader) until
    /// the first that does not decode; returns how many bytes were consumed.
    /// Stalls are the caller's business: this returns early on one.
    pub fn push_buffer(&mut self, buf: &[u8]) -> (usize, Push) {
        let mut at = 0;
        let mut last = Push::Accepted;
        while at < buf.len() {
            if self.predict.valid && self.predict.sender == 0 {
                // A run of the predicted heap's next packets, if any.
                let n = self.push_predicted_run(&buf[at..]);
                if n > 0 {
                    at += n;
                    last = Push::Accepted;
                    continue;
                }
            }
            let (r, len) = self.push_len(0, &buf[at..]);
            last = r;
            match r {
                Push::Stall => return (at, r),
                Push::Stopped => return (at + len, r),
                Push::Discarded(ChunkDiscard::Malformed) => return (at, r),
                _ => at += len,
            }
        }
        (at, last)
    }
}
