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

use crate::buf::copy::CopyMode;

use super::wire;

mod buf;
mod heaps;
mod place;
mod predict;
#[cfg(test)]
mod test;
mod window;

pub use buf::{Chunk, ChunkBuf};
pub(crate) use heaps::{ChunkSource, Heaps, Piece, Planned};
pub use place::{KatgpucbfPlace, Place, PlaceInput, Placement, MAX_PLACE_ITEMS};
use window::Window;

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
    /// ones (best when they do not). See `docs/src/design/spead-group.md`.
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
    /// Placement, live heaps, prediction and counters (shared with group members).
    heaps: Heaps<P>,
    /// The window of live chunks: this receiver's [`ChunkSource`].
    win: Window,
}

impl<P: Place> ChunkStream<P> {
    /// A stream with `cfg.n_chunks` chunks allocated up front.
    pub fn new(cfg: ChunkConfig, place: P) -> ChunkStream<P> {
        let mut cfg = cfg;
        cfg.max_chunks = cfg.max_chunks.max(1);
        cfg.max_heaps = cfg.max_heaps.max(1);
        ChunkStream {
            heaps: Heaps::new(place, cfg.max_heaps),
            win: Window::new(cfg),
        }
    }

    /// Why the last malformed packet did not decode.
    pub fn last_error(&self) -> Option<wire::Error> {
        self.heaps.last_error
    }

    /// The counters.
    pub fn stats(&self) -> &ChunkStats {
        self.heaps.stats()
    }

    /// The placement.
    pub fn place(&self) -> &P {
        self.heaps.place()
    }

    /// The configuration.
    pub fn config(&self) -> &ChunkConfig {
        &self.win.cfg
    }

    /// The window `head..tail` of live chunk ids.
    pub fn window(&self) -> (i64, i64) {
        (self.win.head, self.win.tail)
    }

    /// Chunks in the free ring.
    pub fn free_chunks(&self) -> usize {
        self.win.free.len()
    }

    /// Live multi-packet heaps.
    pub fn live_heaps(&self) -> usize {
        self.heaps.n_live
    }

    /// Offers one packet from `sender`.
    pub fn push(&mut self, sender: u32, data: &[u8]) -> Push {
        self.push_len(sender, data).0
    }

    /// [`ChunkStream::push`] for a packet at the start of `data` (trailing bytes
    /// are ignored); also returns the packet's length (0 if it did not decode).
    pub fn push_len(&mut self, sender: u32, data: &[u8]) -> (Push, usize) {
        self.heaps.stats.packets += 1;
        if let Some(r) = self.heaps.predicted(&mut self.win, sender, data) {
            return r;
        }
        let (h, stop) = match self.heaps.decode(data) {
            Ok(x) => x,
            Err(r) => return (r, 0),
        };
        let len = h.packet_len();
        if self.heaps.stats.stopped {
            return (self.heaps.discard(ChunkDiscard::AfterStop), len);
        }
        if stop {
            self.heaps.stats.stopped = true;
            self.flush();
            return (Push::Stopped, len);
        }
        (
            self.heaps.place_packet(&mut self.win, sender, data, &h),
            len,
        )
    }

    /// Offers back-to-back packets from one buffer (spead2's buffer reader) until
    /// the first that does not decode; returns how many bytes were consumed.
    /// Stalls are the caller's business: this returns early on one.
    pub fn push_buffer(&mut self, buf: &[u8]) -> (usize, Push) {
        let mut at = 0;
        let mut last = Push::Accepted;
        while at < buf.len() {
            if self.heaps.predict.valid && self.heaps.predict.sender == 0 {
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
