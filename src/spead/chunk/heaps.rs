//! The placement routine both receivers share: a packet, from its decoded
//! header to bytes in a chunk, with the live multi-packet heaps, header
//! prediction and the counters. Where the chunks come from is a
//! [`ChunkSource`]: a single receiver's own window ([`super::ChunkStream`]) or
//! a receive group member's held chunks (`spead::group::Member`).

use super::MAX_PLACE_ITEMS;
use super::{insert_offset, ChunkDiscard, ChunkStats, Place, PlaceInput, Placement, Push};
use crate::spead::wire::{self, ctrl, decode_visit, id};

/// A whole-heap packet decoded and placed ahead ([`Heaps::plan_single`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Planned {
    /// Its header.
    pub(crate) h: wire::Header,
    /// Where [`Place`] put it.
    pub(crate) placement: Placement,
}

/// One packet's bytes for a placed heap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece<'a> {
    /// The heap's index in the chunk's `present` map.
    pub(crate) heap_index: usize,
    /// The heap's byte offset in the chunk.
    pub(crate) heap_offset: usize,
    /// The payload's offset in the heap.
    pub(crate) offset: usize,
    /// The payload.
    pub(crate) payload: &'a [u8],
    /// The heap's last bytes: mark it present.
    pub(crate) complete: bool,
    /// A heap of one packet (the fast path: no live heap).
    pub(crate) single: bool,
}

/// Where placed heaps' bytes go: the chunks a receiver holds, found by id.
/// Handles (`usize`) are valid until the next call to [`ChunkSource::chunk`].
pub(crate) trait ChunkSource {
    /// A handle on chunk `chunk_id`, made live if needed (the window moves,
    /// or the group is asked); `Err(Push::Stall)` when no chunk is free (or a
    /// lossless group waits), `Err(Push::Discarded(TooOld))` before the
    /// window. Chunks it flushes count in `stats`.
    fn chunk(&mut self, chunk_id: i64, stats: &mut ChunkStats) -> Result<usize, Push>;
    /// The handle of live chunk `chunk_id`.
    fn find(&self, chunk_id: i64) -> Option<usize>;
    /// Bumped whenever a chunk stops being live (its live heaps die with it).
    fn epoch(&self) -> u64;
    /// Whether a heap of `heap_length` bytes at `p` lies inside a chunk.
    fn fits(&self, p: &Placement, heap_length: u64) -> bool;
    /// Takes heap `heap_index` of chunk `h` for this receiver, before its
    /// first packet is written; a heap placed already is a duplicate.
    fn claim(&mut self, h: usize, heap_index: usize, single: bool) -> Result<(), ChunkDiscard>;
    /// Copies a packet's payload into chunk `h` (and marks what it completes).
    fn write(&mut self, h: usize, piece: &Piece<'_>);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeapState {
    Placing {
        chunk_id: i64,
        heap_index: usize,
        heap_offset: usize,
    },
    Discarding(ChunkDiscard),
}

#[derive(Debug, Clone)]
pub(super) struct LiveHeap {
    pub(super) sender: u32,
    pub(super) cnt: u64,
    pub(super) state: HeapState,
    pub(super) heap_length: u64,
    pub(super) received: u64,
    pub(super) offsets: Vec<u64>,
    pub(super) age: u64,
}

/// Header words a [`Predict`] can hold (the header word and 15 item pointers).
pub(super) const PREDICT_WORDS: usize = 16;

/// Header prediction, as in Van Jacobson's TCP fast path: consecutive packets of
/// one heap normally carry the same item pointers except the payload offset's
/// value. After a packet of a live heap, its header is remembered; a next packet
/// from the same sender whose header bytes equal it except for those value bits
/// is that heap's next packet, and the item walk of `decode_visit` (the largest
/// per-packet cost after the copy on multi-packet heaps) is skipped. Every check
/// the decoder would make on such a packet is made here or is implied by the
/// equality (magic, version, flavour, item count, no stream control item);
/// anything else takes the full path.
#[derive(Debug, Clone)]
pub(super) struct Predict {
    pub(super) valid: bool,
    pub(super) sender: u32,
    /// Index in `Heaps::live`: invalid once any live heap is removed.
    pub(super) live: usize,
    /// The header's words as loaded from memory (native byte order), compared
    /// under `masks`: all bits, except the payload offset's value bits.
    pub(super) words: [u64; PREDICT_WORDS],
    pub(super) masks: [u64; PREDICT_WORDS],
    /// Header bytes (`payload_start`).
    pub(super) len: usize,
    /// Byte offset of the payload offset's item pointer (the last one, which
    /// the decoder takes).
    pub(super) offset_at: usize,
    /// The flavour's value bits.
    pub(super) value_mask: u64,
    pub(super) heap_length: u64,
    pub(super) payload_length: u64,
}

impl Predict {
    pub(super) const NONE: Predict = Predict {
        valid: false,
        sender: 0,
        live: 0,
        words: [0; PREDICT_WORDS],
        masks: [0; PREDICT_WORDS],
        len: 0,
        offset_at: 0,
        value_mask: 0,
        heap_length: 0,
        payload_length: 0,
    };
}

/// A receiver's heaps: its placement, live multi-packet heaps (at most
/// `max_heaps`, preallocated: no allocation per heap), header prediction and
/// counters.
#[derive(Debug)]
pub(crate) struct Heaps<P> {
    pub(super) place: P,
    n_ids: usize,
    ids: [u64; MAX_PLACE_ITEMS],
    pub(super) live: Vec<LiveHeap>,
    pub(super) n_live: usize,
    age: u64,
    pub(super) stats: ChunkStats,
    pub(super) last_error: Option<wire::Error>,
    pub(super) predict: Predict,
    /// The source's [`ChunkSource::epoch`] when live heaps were last pruned.
    epoch: u64,
}

impl<P: Place> Heaps<P> {
    /// Heaps placed by `place`, at most `max_heaps` of them live.
    pub(crate) fn new(place: P, max_heaps: usize) -> Heaps<P> {
        let mut ids = [0u64; MAX_PLACE_ITEMS];
        let n_ids = place.item_ids().len().min(MAX_PLACE_ITEMS);
        ids[..n_ids].copy_from_slice(&place.item_ids()[..n_ids]);
        let live = (0..max_heaps.max(1))
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
        Heaps {
            place,
            n_ids,
            ids,
            live,
            n_live: 0,
            age: 0,
            stats: ChunkStats::default(),
            last_error: None,
            predict: Predict::NONE,
            epoch: 0,
        }
    }

    /// The counters.
    pub(crate) fn stats(&self) -> &ChunkStats {
        &self.stats
    }

    /// The counters, to change.
    pub(crate) fn stats_mut(&mut self) -> &mut ChunkStats {
        &mut self.stats
    }

    /// The placement.
    pub(crate) fn place(&self) -> &P {
        &self.place
    }

    /// The placement, to change.
    pub(crate) fn place_mut(&mut self) -> &mut P {
        &mut self.place
    }

    /// Counts a discarded packet.
    #[inline]
    pub(crate) fn discard(&mut self, why: ChunkDiscard) -> Push {
        self.stats.discarded(why)
    }

    /// Decodes a packet's header: `(header, whether it stops the stream)`, or
    /// the packet counted malformed.
    #[inline]
    pub(crate) fn decode(&mut self, data: &[u8]) -> Result<(wire::Header, bool), Push> {
        let mut stop = false;
        match decode_visit(data, |item, v| {
            stop |= item == id::STREAM_CTRL && v == ctrl::STOP;
        }) {
            Ok(h) => Ok((h, stop)),
            Err(e) => {
                self.last_error = Some(e);
                Err(self.discard(ChunkDiscard::Malformed))
            }
        }
    }

    /// Every live heap ends incomplete (its chunks are gone: the end of input).
    pub(crate) fn flush(&mut self) {
        for i in 0..self.n_live {
            let l = &self.live[i];
            if matches!(l.state, HeapState::Placing { .. }) {
                self.stats.heaps_incomplete_flushed += 1;
                self.stats.packets_in_incomplete_heaps += l.offsets.len() as u64;
            }
        }
        self.n_live = 0;
        self.predict.valid = false;
    }

    /// Drops the live heaps whose chunk `src` no longer holds, counted as
    /// flushed incomplete (one comparison unless a chunk left since the last
    /// call).
    #[inline]
    pub(crate) fn prune<S: ChunkSource>(&mut self, src: &S) {
        let e = src.epoch();
        if e == self.epoch {
            return;
        }
        self.epoch = e;
        let mut i = 0;
        while i < self.n_live {
            if let HeapState::Placing { chunk_id, .. } = self.live[i].state {
                if src.find(chunk_id).is_none() {
                    self.stats.heaps_incomplete_flushed += 1;
                    self.stats.packets_in_incomplete_heaps += self.live[i].offsets.len() as u64;
                    self.remove_live(i);
                    continue;
                }
            }
            i += 1;
        }
    }

    pub(super) fn remove_live(&mut self, i: usize) {
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

    /// Places a decoded packet (not an end-of-stream one): into its live
    /// heap, or, for a heap's first packet, where [`Place`] says, in a chunk
    /// `src` makes live.
    #[inline]
    pub(crate) fn place_packet<S: ChunkSource>(
        &mut self,
        src: &mut S,
        sender: u32,
        data: &[u8],
        h: &wire::Header,
    ) -> Push {
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
                return self.add_to_live(src, i, h.payload_offset, heap_length, payload);
            }
        }

        let single = h.payload_offset == 0 && h.payload_length == heap_length;
        let placement = match self.ask_place(sender, data, h, heap_length) {
            Some(p) => p,
            None => {
                return self.discard_heap(
                    single,
                    sender,
                    h.heap_cnt,
                    heap_length,
                    ChunkDiscard::Rejected,
                )
            }
        };
        self.place_at(src, sender, data, h, placement)
    }

    /// Decodes and places a packet that is a whole heap (the fast path's
    /// kind) ahead of [`Heaps::place_at`], changing nothing but what
    /// [`Place::place`] may; `None` for any other packet (the full path,
    /// [`Heaps::decode`] then [`Heaps::place_packet`], decides it and counts
    /// what it must). A burst plans its packets first, with no fence between
    /// them, then places them in order.
    #[inline]
    pub(crate) fn plan_single(&mut self, sender: u32, data: &[u8]) -> Option<Planned> {
        let mut stop = false;
        let h = decode_visit(data, |item, v| {
            stop |= item == id::STREAM_CTRL && v == ctrl::STOP;
        })
        .ok()?;
        let heap_length = h.heap_length?;
        if stop || h.payload_offset != 0 || h.payload_length != heap_length {
            return None;
        }
        let placement = self.ask_place(sender, data, &h, heap_length)?;
        Some(Planned { h, placement })
    }

    /// Where [`Place::place`] puts a heap's packet; `None` when it rejects it
    /// (no placement, or a negative chunk id).
    #[inline]
    fn ask_place(
        &mut self,
        sender: u32,
        data: &[u8],
        h: &wire::Header,
        heap_length: u64,
    ) -> Option<Placement> {
        let vals = self.item_values(data, h);
        let input = PlaceInput {
            sender,
            heap_cnt: h.heap_cnt,
            heap_length,
            items: &vals[..self.n_ids],
            packet: data,
        };
        self.place.place(&input).filter(|p| p.chunk_id >= 0)
    }

    /// Places a decoded packet (not an end-of-stream one, not part of a live
    /// heap) at `placement`, what [`Place`] gave it.
    #[inline]
    pub(crate) fn place_at<S: ChunkSource>(
        &mut self,
        src: &mut S,
        sender: u32,
        data: &[u8],
        h: &wire::Header,
        placement: Placement,
    ) -> Push {
        let Some(heap_length) = h.heap_length else {
            return self.discard(ChunkDiscard::Unsized);
        };
        let start = h.payload_start();
        let payload = &data[start..start + h.payload_length as usize];
        let single = h.payload_offset == 0 && h.payload_length == heap_length;
        let got = src.chunk(placement.chunk_id, &mut self.stats);
        // The window may have moved: live heaps of chunks that left die.
        self.prune(src);
        let handle = match got {
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
        if !src.fits(&placement, heap_length) {
            return self.discard_heap(
                single,
                sender,
                h.heap_cnt,
                heap_length,
                ChunkDiscard::OutOfBounds,
            );
        }
        if let Err(why) = src.claim(handle, placement.heap_index, single) {
            return self.discard(why);
        }
        if single {
            // Fast path: no per-heap state.
            src.write(
                handle,
                &Piece {
                    heap_index: placement.heap_index,
                    heap_offset: placement.heap_offset,
                    offset: 0,
                    payload,
                    complete: true,
                    single: true,
                },
            );
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
        self.add_to_live(src, i, h.payload_offset, heap_length, payload)
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

    /// The next packet of live heap `i`.
    #[inline]
    pub(super) fn add_to_live<S: ChunkSource>(
        &mut self,
        src: &mut S,
        i: usize,
        offset: u64,
        heap_length: u64,
        payload: &[u8],
    ) -> Push {
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
        // The heap's chunk is live: a chunk that leaves takes its live heaps.
        let Some(handle) = src.find(chunk_id) else {
            return self.discard(ChunkDiscard::Rejected);
        };
        src.write(
            handle,
            &Piece {
                heap_index,
                heap_offset,
                offset: offset as usize,
                payload,
                complete,
                single: false,
            },
        );
        self.stats.packets_accepted += 1;
        self.stats.bytes += payload.len() as u64;
        if complete {
            self.stats.heaps_complete += 1;
            self.remove_live(i);
        }
        Push::Accepted
    }
}
