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

use crate::buf::copy::{copy, store_fence, CopyMode};

use super::fsim::{FsimConfig, FENG_ID_ID, TIMESTAMP_ID};
use super::wire::{self, ctrl, decode_visit, id};

/// Most items a [`Place`] may ask for.
pub const MAX_PLACE_ITEMS: usize = 8;

/// What a [`Place`] sees of a heap's first packet.
#[derive(Debug, Clone, Copy)]
pub struct PlaceInput<'a> {
    /// The sender the caller named.
    pub sender: u32,
    /// Heap counter.
    pub heap_cnt: u64,
    /// Heap length (chunk streams need it in every packet).
    pub heap_length: u64,
    /// Immediate values of the requested items, in [`Place::item_ids`] order.
    pub items: &'a [Option<u64>],
    /// The whole packet.
    pub packet: &'a [u8],
}

/// Where a heap goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Chunk id (negative: discard the heap).
    pub chunk_id: i64,
    /// Index in the chunk's `present` map.
    pub heap_index: usize,
    /// Byte offset of the heap in the chunk's data.
    pub heap_offset: usize,
}

/// Decides the placement of heaps (spead2's place callback).
pub trait Place {
    /// Items whose immediate values [`Place::place`] receives (at most [`MAX_PLACE_ITEMS`]).
    fn item_ids(&self) -> &[u64];
    /// The heap's placement, or `None` to reject it.
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement>;
}

/// katgpucbf's X-engine placement:
/// `chunk_id = timestamp / (heaps_per_fengine_per_chunk * timestamp_step)`,
/// `heap_index = heap_time_in_chunk * n_ants + feng_id`, chunk buffer
/// `[heaps_per_fengine_per_chunk][n_ants][channels][samples][pols]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KatgpucbfPlace {
    /// Antennas.
    pub n_ants: u64,
    /// Bytes per heap.
    pub heap_bytes: u64,
    /// Heaps of each F-engine in a chunk.
    pub heaps_per_fengine_per_chunk: u64,
    /// Timestamp difference between heaps of one F-engine.
    pub timestamp_step: u64,
    ids: [u64; 2],
}

impl KatgpucbfPlace {
    /// The placement for these dimensions.
    pub fn new(
        n_ants: u64,
        heap_bytes: u64,
        heaps_per_fengine_per_chunk: u64,
        timestamp_step: u64,
    ) -> KatgpucbfPlace {
        KatgpucbfPlace {
            n_ants: n_ants.max(1),
            heap_bytes,
            heaps_per_fengine_per_chunk: heaps_per_fengine_per_chunk.max(1),
            timestamp_step: timestamp_step.max(1),
            ids: [TIMESTAMP_ID, FENG_ID_ID],
        }
    }

    /// The placement for a simulator's stream.
    pub fn for_fsim(cfg: &FsimConfig, heaps_per_fengine_per_chunk: u64) -> KatgpucbfPlace {
        KatgpucbfPlace::new(
            cfg.n_ants as u64,
            cfg.heap_bytes() as u64,
            heaps_per_fengine_per_chunk,
            cfg.timestamp_step(),
        )
    }

    /// Heaps per chunk (the `present` map's length).
    pub fn heaps_per_chunk(&self) -> usize {
        (self.heaps_per_fengine_per_chunk * self.n_ants) as usize
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.heaps_per_chunk() * self.heap_bytes as usize
    }

    /// The timestamp of the first heap in chunk `chunk_id`.
    pub fn chunk_timestamp(&self, chunk_id: i64) -> u64 {
        (chunk_id.max(0) as u64) * self.heaps_per_fengine_per_chunk * self.timestamp_step
    }

    /// (feng_id, timestamp) of the heap at `heap_index` in chunk `chunk_id`.
    pub fn heap_identity(&self, chunk_id: i64, heap_index: usize) -> (u64, u64) {
        let i = heap_index as u64;
        let t = i / self.n_ants;
        (
            i % self.n_ants,
            self.chunk_timestamp(chunk_id) + t * self.timestamp_step,
        )
    }

    /// A [`ChunkConfig`] matching this placement.
    pub fn chunk_config(&self, max_chunks: usize, n_chunks: usize) -> ChunkConfig {
        ChunkConfig {
            max_chunks,
            n_chunks,
            chunk_bytes: self.chunk_bytes(),
            present_len: self.heaps_per_chunk(),
            max_heaps: (self.n_ants as usize * 2).max(4),
            packet_presence: None,
            // Measured faster on this layout even while the chunks fit in the
            // last-level cache (BENCHMARKS.md, SPEAD section).
            copy: CopyMode::Stream,
        }
    }
}

impl Place for KatgpucbfPlace {
    fn item_ids(&self) -> &[u64] {
        &self.ids
    }

    #[inline]
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
        let ts = input.items[0]?;
        let feng = input.items[1]?;
        if input.heap_length != self.heap_bytes
            || feng >= self.n_ants
            || div(ts, self.timestamp_step) * self.timestamp_step != ts
        {
            return None;
        }
        let heap_no = div(ts, self.timestamp_step);
        let chunk_id = i64::try_from(div(heap_no, self.heaps_per_fengine_per_chunk)).ok()?;
        let t = heap_no - chunk_id as u64 * self.heaps_per_fengine_per_chunk;
        let heap_index = (t * self.n_ants + feng) as usize;
        Some(Placement {
            chunk_id,
            heap_index,
            heap_offset: heap_index * self.heap_bytes as usize,
        })
    }
}

/// `a / b`, a shift when `b` is a power of two (timestamp steps usually are).
#[inline]
fn div(a: u64, b: u64) -> u64 {
    if b.is_power_of_two() {
        a >> b.trailing_zeros()
    } else {
        a / b
    }
}

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

/// A chunk's payload memory: an anonymous mapping advised to use transparent huge
/// pages (as numpy does for large arrays; 4 KiB pages cost a TLB miss every few
/// packets on multi-megabyte chunks), or a plain vector when mapping fails.
pub struct ChunkBuf {
    inner: BufInner,
    len: usize,
}

enum BufInner {
    Map(memmap2::MmapMut),
    Vec(Vec<u8>),
}

impl ChunkBuf {
    /// `len` zero bytes, huge-page backed when the system allows, with every page
    /// touched so the receive path takes no page faults.
    pub fn new(len: usize) -> ChunkBuf {
        // A mapping cannot be empty; a one-byte one stands in for zero bytes.
        let inner = match memmap2::MmapMut::map_anon(len.max(1)) {
            Ok(mut m) => {
                #[cfg(target_os = "linux")]
                let _ = m.advise(memmap2::Advice::HugePage);
                for i in (0..m.len()).step_by(4096) {
                    m[i] = 0;
                }
                BufInner::Map(m)
            }
            Err(_) => BufInner::Vec(vec![0; len]),
        };
        ChunkBuf { inner, len }
    }
}

impl core::ops::Deref for ChunkBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.inner {
            BufInner::Map(m) => &m[..self.len],
            BufInner::Vec(v) => &v[..self.len],
        }
    }
}

impl core::ops::DerefMut for ChunkBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            BufInner::Map(m) => &mut m[..self.len],
            BufInner::Vec(v) => &mut v[..self.len],
        }
    }
}

impl From<Vec<u8>> for ChunkBuf {
    fn from(v: Vec<u8>) -> ChunkBuf {
        ChunkBuf {
            len: v.len(),
            inner: BufInner::Vec(v),
        }
    }
}

impl Clone for ChunkBuf {
    fn clone(&self) -> ChunkBuf {
        ChunkBuf::from(self[..].to_vec())
    }
}

impl PartialEq for ChunkBuf {
    fn eq(&self, other: &ChunkBuf) -> bool {
        self[..] == other[..]
    }
}

impl Eq for ChunkBuf {}

impl core::fmt::Debug for ChunkBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ChunkBuf({} bytes)", self.len())
    }
}

/// A chunk: data, a `present` map and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Chunk id (-1 while free).
    pub chunk_id: i64,
    /// Payload bytes.
    pub data: ChunkBuf,
    /// One byte per heap (or packet): 1 if it arrived whole.
    pub present: Vec<u8>,
}

impl Chunk {
    /// A zeroed chunk (data in a [`ChunkBuf`]).
    pub fn new(chunk_bytes: usize, present_len: usize) -> Chunk {
        Chunk {
            chunk_id: -1,
            data: ChunkBuf::new(chunk_bytes),
            present: vec![0; present_len],
        }
    }

    /// Entries of `present` that are set.
    pub fn present_count(&self) -> usize {
        self.present.iter().filter(|&&p| p != 0).count()
    }
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

/// Header words a [`Predict`] can hold (the header word and 15 item pointers).
const PREDICT_WORDS: usize = 16;

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
struct Predict {
    valid: bool,
    sender: u32,
    /// Index in `ChunkStream::live`: invalid once any live heap is removed.
    live: usize,
    /// The header's words as loaded from memory (native byte order), compared
    /// under `masks`: all bits, except the payload offset's value bits.
    words: [u64; PREDICT_WORDS],
    masks: [u64; PREDICT_WORDS],
    /// Header bytes (`payload_start`).
    len: usize,
    /// Byte offset of the payload offset's item pointer (the last one, which
    /// the decoder takes).
    offset_at: usize,
    /// The flavour's value bits.
    value_mask: u64,
    heap_length: u64,
    payload_length: u64,
}

impl Predict {
    const NONE: Predict = Predict {
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

#[inline]
fn be64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + wire::WORD]);
    u64::from_be_bytes(w)
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

    /// The next flushed chunk.
    #[must_use]
    pub fn poll_chunk(&mut self) -> Option<Chunk> {
        self.ready.pop_front()
    }

    /// Gives a chunk back to the free ring; its `present` map is zeroed (data is not).
    pub fn add_free_chunk(&mut self, mut chunk: Chunk) {
        chunk.chunk_id = -1;
        chunk.present.clear();
        chunk.present.resize(self.cfg.present_len, 0);
        if chunk.data.len() != self.cfg.chunk_bytes {
            chunk.data = ChunkBuf::new(self.cfg.chunk_bytes);
        }
        self.free.push(chunk);
    }

    /// Flushes every live heap and chunk (at the end of input).
    pub fn flush(&mut self) {
        while self.head < self.tail {
            self.flush_head();
        }
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

    fn flush_head(&mut self) {
        let head = self.head;
        // Live heaps of this chunk die with it.
        let mut i = 0;
        while i < self.n_live {
            if let HeapState::Placing { chunk_id, .. } = self.live[i].state {
                if chunk_id == head {
                    self.stats.heaps_incomplete_flushed += 1;
                    self.stats.packets_in_incomplete_heaps += self.live[i].offsets.len() as u64;
                    self.remove_live(i);
                    continue;
                }
            }
            i += 1;
        }
        if let Some(c) = self.window[self.head_pos].take() {
            if self.cfg.copy == CopyMode::Stream {
                // Streaming stores are weakly ordered: make them visible before the
                // chunk can reach another thread.
                store_fence();
            }
            self.stats.chunks += 1;
            self.stats.present += c.present_count() as u64;
            self.stats.present_slots += c.present.len() as u64;
            self.ready.push_back(c);
        }
        self.head += 1;
        self.head_pos = (self.head_pos + 1) % self.cfg.max_chunks;
    }

    /// The window slot of `chunk_id`, moving the window forward if needed.
    fn chunk_slot(&mut self, chunk_id: i64) -> Result<usize, Push> {
        if chunk_id < self.head {
            return Err(Push::Discarded(ChunkDiscard::TooOld));
        }
        let max = self.cfg.max_chunks as i64;
        if chunk_id >= self.tail && chunk_id - self.tail >= max {
            // So far ahead that the whole window is stale: flush it and restart.
            while self.head < self.tail {
                self.flush_head();
            }
            self.head = chunk_id - (max - 1);
            self.tail = self.head;
            self.head_pos = 0;
            self.tail_pos = 0;
        }
        while chunk_id >= self.tail {
            if self.tail - self.head == max {
                self.flush_head();
            }
            let Some(mut c) = self.free.pop() else {
                return Err(Push::Stall);
            };
            c.chunk_id = self.tail;
            self.window[self.tail_pos] = Some(c);
            self.tail += 1;
            self.tail_pos = (self.tail_pos + 1) % self.cfg.max_chunks;
        }
        Ok(self.slot_of(chunk_id))
    }

    /// The window slot of a chunk id inside the window.
    #[inline]
    fn slot_of(&self, chunk_id: i64) -> usize {
        let s = self.head_pos + (chunk_id - self.head) as usize;
        if s >= self.cfg.max_chunks {
            s - self.cfg.max_chunks
        } else {
            s
        }
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
        match why {
            ChunkDiscard::Malformed => self.stats.packets_malformed += 1,
            ChunkDiscard::Duplicate => self.stats.packets_duplicate += 1,
            ChunkDiscard::Unsized => self.stats.packets_unsized += 1,
            ChunkDiscard::Inconsistent => self.stats.packets_inconsistent += 1,
            ChunkDiscard::TooOld => self.stats.packets_too_old += 1,
            ChunkDiscard::Rejected | ChunkDiscard::OutOfBounds => self.stats.packets_rejected += 1,
            ChunkDiscard::AfterStop => self.stats.packets_after_stop += 1,
        }
        Push::Discarded(why)
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

    /// The next packet of the predicted live heap, placed, or `None` when `data`
    /// does not match the prediction (then the full path decides).
    #[inline]
    fn predicted(&mut self, sender: u32, data: &[u8]) -> Option<(Push, usize)> {
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
            self.add_to_live(live, offset, heap_length, &data[n..end]),
            end,
        ))
    }

    /// Remembers `data`'s header for [`ChunkStream::predicted`]: live heap `i`
    /// is about to receive this packet.
    fn learn(&mut self, i: usize, sender: u32, data: &[u8], h: &wire::Header) {
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
        match why {
            ChunkDiscard::TooOld => self.stats.heaps_too_old += 1,
            _ => self.stats.heaps_rejected += 1,
        }
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
        let at = match l.offsets.last() {
            Some(&last) if last < offset => l.offsets.len(),
            None => 0,
            _ => match l.offsets.binary_search(&offset) {
                Ok(_) => return self.discard(ChunkDiscard::Duplicate),
                Err(at) => at,
            },
        };
        l.offsets.insert(at, offset);
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

    /// Places the longest run of back-to-back packets at the start of `buf` (from
    /// sender 0) that [`ChunkStream::predicted`] would take and that would each
    /// just be appended to the predicted live heap (a new highest offset, the
    /// heap not completed by it); returns the bytes consumed (0: none). The
    /// outcome is the same as pushing them one by one; the loop only keeps the
    /// heap, its chunk and the counters in locals between packets, so that the
    /// copies follow each other with little work in between (whatever ends the
    /// run, e.g. the heap's last packet, takes the packet-by-packet path).
    // Not inlined: `push_buffer`'s loop stays as lean as before for the packets
    // this does not take (single-packet heaps); one call per run.
    #[inline(never)]
    fn push_predicted_run(&mut self, buf: &[u8]) -> usize {
        let p = &self.predict;
        if self.cfg.packet_presence.is_some() {
            return 0;
        }
        let (n, at_off, value_mask) = (p.len, p.offset_at, p.value_mask);
        let (heap_length, pl) = (p.heap_length, p.payload_length as usize);
        let end = n + pl;
        let l = &mut self.live[p.live];
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
        let slot = {
            let s = self.head_pos + (chunk_id - self.head) as usize;
            if s >= self.cfg.max_chunks {
                s - self.cfg.max_chunks
            } else {
                s
            }
        };
        let Some(chunk) = self.window[slot].as_mut() else {
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
            copy(self.cfg.copy, &mut heap[o..o + pl], &data[n..]);
            l.offsets.push(offset);
            last = Some(offset);
            received += pl as u64;
            count += 1;
            at += end;
        }
        l.received = received;
        self.stats.packets += count;
        self.stats.packets_predicted += count;
        self.stats.packets_accepted += count;
        self.stats.bytes += count * pl as u64;
        at
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

#[cfg(test)]
mod test {
    use super::*;
    use crate::spead::fsim::{payload_byte, Fsim, FsimConfig};
    use crate::spead::wire::{emit_packet, Flavour};

    /// A small F-engine: 64 channels in streams of 4, 32 samples, 128-byte
    /// packets, `n_ants` antennas.
    fn small_fsim(n_ants: usize) -> FsimConfig {
        FsimConfig {
            n_ants,
            n_channels_total: 64,
            n_channels_per_stream: 4,
            n_samples_per_channel: 32,
            packet_payload: 128,
            ..FsimConfig::default()
        }
    }

    /// One-item placement for hand-made packets: item 0x1600 is the heap number;
    /// chunk = heap / 4, index = heap % 4, heaps of 8 bytes.
    struct Simple {
        ids: [u64; 1],
    }

    impl Place for Simple {
        fn item_ids(&self) -> &[u64] {
            &self.ids
        }
        fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
            let n = input.items[0]?;
            if n == 999 {
                return None;
            }
            Some(Placement {
                chunk_id: (n / 4) as i64,
                heap_index: (n % 4) as usize,
                heap_offset: (n % 4) as usize * 8,
            })
        }
    }

    fn stream(max_chunks: usize, n_chunks: usize, max_heaps: usize) -> ChunkStream<Simple> {
        ChunkStream::new(
            ChunkConfig {
                max_chunks,
                n_chunks,
                chunk_bytes: 32,
                present_len: 4,
                max_heaps,
                packet_presence: None,
                copy: CopyMode::Plain,
            },
            Simple { ids: [0x1600] },
        )
    }

    /// Packet `part` (of 2, 4 bytes each) of heap `n`, or a single 8-byte packet.
    fn pkt(n: u64, part: Option<u64>) -> Vec<u8> {
        let f = Flavour::SPEAD_64_48;
        let data: Vec<u8> = (0..8).map(|i| (n * 10 + i) as u8).collect();
        let (off, pl) = match part {
            None => (0, &data[..]),
            Some(p) => (p * 4, &data[p as usize * 4..p as usize * 4 + 4]),
        };
        let mut buf = vec![0u8; 200];
        let items = [f.immediate(0x1600, n).unwrap()];
        let len = emit_packet(&mut buf, f, n, Some(8), off, &items, pl).unwrap();
        buf.truncate(len);
        buf
    }

    impl<P: Place> ChunkStream<P> {
        fn forget_prediction(&mut self) {
            self.predict.valid = false;
        }
    }

    #[test]
    fn header_prediction_takes_the_following_packets_of_a_heap() {
        let cfg = small_fsim(2);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let per_heap = cfg.packets_per_heap() as u64;
        let (buf, _) = Fsim::new(cfg).unwrap().packets_buffer(4).unwrap();
        let mut s = ChunkStream::new(place.chunk_config(2, 4), place);
        assert_eq!(s.push_buffer(&buf).0, buf.len());
        s.flush();
        let st = s.stats();
        let heaps = 2 * 4;
        assert_eq!(st.heaps_complete, heaps);
        // Every packet but each heap's first.
        assert_eq!(st.packets_predicted, heaps * (per_heap - 1));
    }

    fn expect_heap(c: &Chunk, n: u64) {
        let i = (n % 4) as usize;
        assert_eq!(c.present[i], 1, "heap {n} present");
        let want: Vec<u8> = (0..8).map(|k| (n * 10 + k) as u8).collect();
        assert_eq!(&c.data[i * 8..i * 8 + 8], &want[..]);
    }

    #[test]
    fn single_packet_heaps_fill_chunks() {
        let mut s = stream(2, 4, 4);
        for n in 0..8 {
            assert_eq!(s.push(0, &pkt(n, None)), Push::Accepted);
        }
        assert!(s.poll_chunk().is_none());
        s.flush();
        let c0 = s.poll_chunk().unwrap();
        let c1 = s.poll_chunk().unwrap();
        assert_eq!((c0.chunk_id, c1.chunk_id), (0, 1));
        for n in 0..4 {
            expect_heap(&c0, n);
            expect_heap(&c1, n + 4);
        }
        assert_eq!(s.stats().heaps_single_packet, 8);
        assert_eq!(s.stats().fraction_present(), 1.0);
        // Duplicate single-packet heap is counted.
        let mut s = stream(2, 4, 4);
        assert_eq!(s.push(0, &pkt(1, None)), Push::Accepted);
        assert_eq!(
            s.push(0, &pkt(1, None)),
            Push::Discarded(ChunkDiscard::Duplicate)
        );
    }

    #[test]
    fn reordered_and_duplicate_packets() {
        let mut s = stream(2, 4, 4);
        assert_eq!(s.push(0, &pkt(2, Some(1))), Push::Accepted);
        assert_eq!(s.push(0, &pkt(1, Some(1))), Push::Accepted);
        assert_eq!(
            s.push(0, &pkt(2, Some(1))),
            Push::Discarded(ChunkDiscard::Duplicate)
        );
        assert_eq!(s.push(0, &pkt(1, Some(0))), Push::Accepted);
        assert_eq!(s.push(0, &pkt(2, Some(0))), Push::Accepted);
        s.flush();
        let c = s.poll_chunk().unwrap();
        expect_heap(&c, 1);
        expect_heap(&c, 2);
        assert_eq!(c.present, vec![0, 1, 1, 0]);
        assert_eq!(s.stats().packets_duplicate, 1);
        assert_eq!(s.stats().heaps_complete, 2);
    }

    #[test]
    fn loss_of_any_packet_leaves_heap_absent_and_counted() {
        for lost in 0..2 {
            let mut s = stream(2, 4, 4);
            for part in 0..2 {
                if part != lost {
                    assert_eq!(s.push(0, &pkt(3, Some(part))), Push::Accepted);
                }
            }
            s.flush();
            let c = s.poll_chunk().unwrap();
            assert_eq!(c.present[3], 0);
            assert_eq!(s.stats().heaps_incomplete_flushed, 1);
            assert_eq!(s.stats().packets_in_incomplete_heaps, 1);
        }
    }

    #[test]
    fn eviction_of_oldest_live_heap() {
        let mut s = stream(2, 4, 2);
        assert_eq!(s.push(0, &pkt(0, Some(0))), Push::Accepted);
        assert_eq!(s.push(0, &pkt(1, Some(0))), Push::Accepted);
        assert_eq!(s.push(0, &pkt(2, Some(0))), Push::Accepted); // evicts heap 0
        assert_eq!(s.stats().heaps_incomplete_evicted, 1);
        assert_eq!(s.push(0, &pkt(1, Some(1))), Push::Accepted);
        assert_eq!(s.push(0, &pkt(2, Some(1))), Push::Accepted);
        // Heap 0's second packet starts a new live heap that cannot complete.
        assert_eq!(s.push(0, &pkt(0, Some(1))), Push::Accepted);
        s.flush();
        let c = s.poll_chunk().unwrap();
        assert_eq!(c.present, vec![0, 1, 1, 0]);
        assert_eq!(s.stats().heaps_incomplete_flushed, 1);
    }

    #[test]
    fn window_moves_too_old_and_jumps() {
        let mut s = stream(2, 4, 4);
        assert_eq!(s.push(0, &pkt(0, None)), Push::Accepted); // chunk 0
        assert_eq!(s.push(0, &pkt(4, None)), Push::Accepted); // chunk 1
        assert_eq!(s.window(), (0, 2));
        assert_eq!(s.push(0, &pkt(8, None)), Push::Accepted); // chunk 2 flushes 0
        assert_eq!(s.window(), (1, 3));
        let c0 = s.poll_chunk().unwrap();
        assert_eq!(c0.chunk_id, 0);
        s.add_free_chunk(c0);
        assert_eq!(
            s.push(0, &pkt(1, None)),
            Push::Discarded(ChunkDiscard::TooOld)
        );
        assert_eq!(s.stats().heaps_too_old, 1);
        // Far ahead: chunk 10 flushes 1 and 2 and restarts the window at 9..11.
        assert_eq!(s.push(0, &pkt(40, None)), Push::Accepted);
        assert_eq!(s.window(), (9, 11));
        assert_eq!(s.poll_chunk().unwrap().chunk_id, 1);
        assert_eq!(s.poll_chunk().unwrap().chunk_id, 2);
        assert!(s.poll_chunk().is_none());
        // A rejected heap (multi-packet) is counted once, its packets each.
        assert_eq!(
            s.push(0, &pkt(999, Some(0))),
            Push::Discarded(ChunkDiscard::Rejected)
        );
        assert_eq!(
            s.push(0, &pkt(999, Some(1))),
            Push::Discarded(ChunkDiscard::Rejected)
        );
        assert_eq!(s.stats().heaps_rejected, 1);
        assert_eq!(s.stats().packets_rejected, 2);
    }

    #[test]
    fn live_heap_dies_with_its_flushed_chunk() {
        let mut s = stream(1, 4, 4);
        assert_eq!(s.push(0, &pkt(1, Some(0))), Push::Accepted); // chunk 0
        assert_eq!(s.push(0, &pkt(5, None)), Push::Accepted); // chunk 1 flushes 0
        assert_eq!(s.stats().heaps_incomplete_flushed, 1);
        // The rest of heap 1 is now too old.
        assert_eq!(
            s.push(0, &pkt(1, Some(1))),
            Push::Discarded(ChunkDiscard::TooOld)
        );
    }

    #[test]
    fn free_ring_bounds_memory_and_stalls() {
        let mut s = stream(2, 2, 4);
        assert_eq!(s.push(0, &pkt(0, None)), Push::Accepted);
        assert_eq!(s.push(0, &pkt(4, None)), Push::Accepted);
        let p = pkt(8, None);
        assert_eq!(s.push(0, &p), Push::Stall); // chunk 0 flushed, none free
        assert_eq!(s.stats().stalls, 1);
        let c = s.poll_chunk().unwrap();
        assert_eq!(c.chunk_id, 0);
        s.add_free_chunk(c);
        assert_eq!(s.push(0, &p), Push::Accepted);
        assert_eq!(s.window(), (1, 3));
        assert_eq!(s.stats().packets, 3);
    }

    #[test]
    fn packet_presence() {
        let mut s = ChunkStream::new(
            ChunkConfig {
                max_chunks: 1,
                n_chunks: 1,
                chunk_bytes: 32,
                present_len: 8,
                max_heaps: 4,
                packet_presence: Some(4),
                copy: CopyMode::Plain,
            },
            Simple { ids: [0x1600] },
        );
        // heap_index from Simple is n % 4; with packet presence use heap 0 and 2's indices.
        assert_eq!(s.push(0, &pkt(0, Some(1))), Push::Accepted);
        assert_eq!(s.push(0, &pkt(2, Some(0))), Push::Accepted);
        s.flush();
        let c = s.poll_chunk().unwrap();
        assert_eq!(c.present, vec![0, 1, 1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn empty_packet_at_heap_end_with_packet_presence() {
        let mut s = ChunkStream::new(
            ChunkConfig {
                max_chunks: 1,
                n_chunks: 1,
                chunk_bytes: 32,
                present_len: 8,
                max_heaps: 4,
                packet_presence: Some(4),
                copy: CopyMode::Plain,
            },
            Simple { ids: [0x1600] },
        );
        let f = Flavour::SPEAD_64_48;
        let mut buf = [0u8; 100];
        let items = [f.immediate(0x1600, 3).unwrap()];
        let n = emit_packet(&mut buf, f, 3, Some(8), 8, &items, &[]).unwrap();
        assert_eq!(s.push(0, &buf[..n]), Push::Accepted);
        s.flush();
        assert_eq!(s.poll_chunk().unwrap().present, vec![0; 8]);
    }

    #[test]
    fn end_of_stream_flushes() {
        let mut s = stream(2, 4, 4);
        assert_eq!(s.push(0, &pkt(0, None)), Push::Accepted);
        let f = Flavour::SPEAD_64_48;
        let mut buf = [0u8; 100];
        let stop = f.immediate(id::STREAM_CTRL, ctrl::STOP).unwrap();
        let n = emit_packet(&mut buf, f, 50, Some(0), 0, &[stop], &[]).unwrap();
        assert_eq!(s.push(0, &buf[..n]), Push::Stopped);
        assert_eq!(s.poll_chunk().unwrap().chunk_id, 0);
        assert_eq!(
            s.push(0, &pkt(1, None)),
            Push::Discarded(ChunkDiscard::AfterStop)
        );
    }

    #[test]
    fn katgpucbf_place_rules() {
        for step in [6u64, 8] {
            let mut p = KatgpucbfPlace::new(3, 16, 2, step);
            let mut at = |ts: u64, feng: u64, len: u64| {
                let items = [Some(ts), Some(feng)];
                p.place(&PlaceInput {
                    sender: 0,
                    heap_cnt: 0,
                    heap_length: len,
                    items: &items,
                    packet: &[],
                })
            };
            // heap 5 = chunk 2, time 1 in chunk; index 1 * 3 + 2.
            assert_eq!(
                at(5 * step, 2, 16),
                Some(Placement {
                    chunk_id: 2,
                    heap_index: 5,
                    heap_offset: 80
                })
            );
            assert_eq!(at(5 * step + 2, 2, 16), None, "misaligned timestamp");
            assert_eq!(at(5 * step, 3, 16), None, "feng_id out of range");
            assert_eq!(at(5 * step, 0, 15), None, "wrong heap length");
        }
        let p = KatgpucbfPlace::new(3, 16, 2, 6);
        assert_eq!(p.heap_identity(2, 5), (2, 30));
        assert_eq!(p.chunk_timestamp(2), 24);
    }

    #[test]
    fn fsim_heaps_land_in_katgpucbf_layout() {
        let cfg = small_fsim(3);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let mut s = ChunkStream::new(place.chunk_config(2, 4), place.clone());
        let mut sim = Fsim::new(cfg.clone()).unwrap();
        let (buf, _) = sim.packets_buffer(4).unwrap();
        let (used, last) = s.push_buffer(&buf);
        assert_eq!((used, last), (buf.len(), Push::Accepted));
        s.flush();
        let mut n = 0;
        while let Some(c) = s.poll_chunk() {
            assert_eq!(c.chunk_id, n);
            assert!(c.present.iter().all(|&p| p == 1));
            for hi in 0..place.heaps_per_chunk() {
                let (feng, ts) = place.heap_identity(c.chunk_id, hi);
                let hb = cfg.heap_bytes();
                for off in (0..hb).step_by(97) {
                    assert_eq!(c.data[hi * hb + off], payload_byte(feng, ts, off as u64));
                }
            }
            n += 1;
        }
        assert_eq!(n, 2);
        assert_eq!(s.stats().heaps_complete, 12);
        assert_eq!(s.stats().packets_accepted, 12 * 4);
    }

    proptest::proptest! {
        /// Packets reordered within a chunk's span land in the same chunks as in order.
        #[test]
        fn reordering_within_window_changes_nothing(keys in proptest::collection::vec(proptest::prelude::any::<u16>(), 96)) {
            let cfg = small_fsim(3);
            let place = KatgpucbfPlace::for_fsim(&cfg, 2);
            let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
            let mut pk: Vec<&[u8]> = Vec::new();
            let mut start = 0;
            for &e in &ends {
                pk.push(&buf[start..e]);
                start = e;
            }
            // 24 packets per chunk; shuffle within each chunk's group.
            let mut shuffled = Vec::new();
            for (g, group) in pk.chunks(24).enumerate() {
                let mut v: Vec<(u16, &[u8])> = group.iter().enumerate().map(|(i, p)| (keys[(g * 24 + i) % keys.len()], *p)).collect();
                v.sort_by_key(|(k, _)| *k);
                shuffled.extend(v.into_iter().map(|(_, p)| p));
            }
            let run = |packets: &[&[u8]]| {
                let mut s = ChunkStream::new(place.chunk_config(2, 8), place.clone());
                for p in packets {
                    assert_eq!(s.push(0, p), Push::Accepted);
                }
                s.flush();
                let mut out = Vec::new();
                while let Some(c) = s.poll_chunk() {
                    out.push(c);
                }
                out
            };
            let a = run(&pk);
            let b = run(&shuffled);
            proptest::prop_assert_eq!(a.len(), 4);
            proptest::prop_assert_eq!(a, b);
        }
    }

    proptest::proptest! {
        /// With packets randomly lost and duplicated (in order otherwise), a heap
        /// is present exactly when all its packets arrived, and every present
        /// heap's bytes are right.
        #[test]
        fn header_prediction_changes_no_outcome(
            ops in proptest::collection::vec((0u8..12, proptest::prelude::any::<u8>(), proptest::prelude::any::<u8>()), 120),
        ) {
            // The same perturbed packet sequence through two streams, one of which
            // forgets its prediction before every packet (the full path only):
            // every result, counter and chunk byte must agree.
            let cfg = small_fsim(3);
            let place = KatgpucbfPlace::for_fsim(&cfg, 2);
            let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
            let mut fast = ChunkStream::new(place.chunk_config(2, 8), place.clone());
            let mut full = ChunkStream::new(place.chunk_config(2, 8), place.clone());
            let mut start = 0;
            let mut held: Option<Vec<u8>> = None;
            for (i, &e) in ends.iter().enumerate() {
                let mut p = buf[start..e].to_vec();
                start = e;
                let (op, a, b) = ops[i % ops.len()];
                let mut sender = 0;
                match op {
                    // Lost.
                    0 => continue,
                    // A header byte changed (any item, the offset's value bits included).
                    1 => {
                        let at = usize::from(a) % 96;
                        p[at] ^= b.max(1);
                    }
                    // Truncated.
                    2 => p.truncate(p.len() - 1 - usize::from(a) % 64),
                    // From another sender.
                    3 => sender = 1,
                    // Held back, delivered after the next one.
                    4 => {
                        if let Some(h) = held.replace(p) {
                            p = h;
                        } else {
                            continue;
                        }
                    }
                    // Trailing bytes beyond the packet.
                    5 => p.extend_from_slice(&[a, b]),
                    _ => {}
                }
                let copies = if op == 6 { 2 } else { 1 };
                for _ in 0..copies {
                    full.forget_prediction();
                    let r_full = full.push_len(sender, &p);
                    let r_fast = fast.push_len(sender, &p);
                    proptest::prop_assert_eq!(r_fast, r_full);
                }
            }
            if let Some(h) = held {
                full.forget_prediction();
                proptest::prop_assert_eq!(fast.push_len(0, &h), full.push_len(0, &h));
            }
            fast.flush();
            full.flush();
            let mut st = fast.stats().clone();
            st.packets_predicted = 0;
            proptest::prop_assert_eq!(&st, full.stats());
            proptest::prop_assert_eq!(full.stats().packets_predicted, 0);
            while let Some(c) = full.poll_chunk() {
                proptest::prop_assert_eq!(Some(c), fast.poll_chunk());
            }
            proptest::prop_assert!(fast.poll_chunk().is_none());
        }

        /// `push_buffer`'s runs of predicted packets against the packet-by-packet
        /// full path, on one buffer of perturbed packets fed in segments, with
        /// or without packet presence, streaming copies, a free ring small
        /// enough to stall, and optionally the first packets from another sender
        /// (whose prediction a buffer, sender 0, must not use): every return
        /// value, counter and chunk byte must agree.
        #[test]
        fn predicted_runs_change_no_outcome(
            ops in proptest::collection::vec((0u8..16, proptest::prelude::any::<u8>(), proptest::prelude::any::<u8>()), 160),
            cuts in proptest::collection::vec(0u8..8, 160),
            presence in proptest::prelude::any::<bool>(),
            prefix in 0usize..3,
        ) {
            let cfg = FsimConfig {
                n_ants: 3,
                n_channels_total: 64,
                n_channels_per_stream: 4,
                n_samples_per_channel: 128,
                packet_payload: 256,
                ..FsimConfig::default()
            };
            let per_heap = cfg.packets_per_heap();
            proptest::prop_assert_eq!(per_heap, 8);
            let place = KatgpucbfPlace::for_fsim(&cfg, 2);
            let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
            let mut ccfg = place.chunk_config(2, 2);
            if presence {
                ccfg.packet_presence = Some(256);
                ccfg.present_len = place.heaps_per_chunk() * per_heap;
            }
            proptest::prop_assert_eq!(ccfg.copy, CopyMode::Stream);
            let mut fast = ChunkStream::new(ccfg.clone(), place.clone());
            let mut full = ChunkStream::new(ccfg, place.clone());
            // The perturbed packets, in segments (whole packets) of one buffer each.
            let mut segments: Vec<Vec<u8>> = vec![Vec::new()];
            let mut start = 0;
            let mut held: Option<Vec<u8>> = None;
            for (i, &e) in ends.iter().enumerate() {
                let mut p = buf[start..e].to_vec();
                start = e;
                if i < prefix {
                    let r = fast.push(1, &p);
                    full.forget_prediction();
                    proptest::prop_assert_eq!(r, full.push(1, &p));
                    continue;
                }
                let (op, a, b) = ops[i % ops.len()];
                match op {
                    0 => continue,
                    // A header byte changed.
                    1 => p[usize::from(a) % 96] ^= b.max(1),
                    // The payload offset's value bits changed (item 3).
                    2 => p[8 + 3 * 8 + 2 + usize::from(a) % 6] ^= b.max(1),
                    // Truncated (the next packet then starts inside it).
                    3 if a < 16 => p.truncate(p.len() - 1 - usize::from(b) % 64),
                    // Held back, delivered after the next one.
                    4 => {
                        if let Some(h) = held.replace(p) {
                            p = h;
                        } else {
                            continue;
                        }
                    }
                    _ => {}
                }
                let copies = if op == 6 { 2 } else { 1 };
                for _ in 0..copies {
                    segments.last_mut().unwrap().extend_from_slice(&p);
                }
                if cuts[i % cuts.len()] == 0 {
                    segments.push(Vec::new());
                }
            }
            if let Some(h) = held {
                segments.last_mut().unwrap().extend_from_slice(&h);
            }
            // push_buffer without its runs or prediction: push_len packet by packet.
            fn by_packet<P: Place>(s: &mut ChunkStream<P>, buf: &[u8]) -> (usize, Push) {
                let mut at = 0;
                let mut last = Push::Accepted;
                while at < buf.len() {
                    s.forget_prediction();
                    let (r, len) = s.push_len(0, &buf[at..]);
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
            let mut chunks_fast = Vec::new();
            let mut chunks_full = Vec::new();
            for seg in &segments {
                let (mut at_fast, mut at_full) = (0, 0);
                loop {
                    let r_fast = fast.push_buffer(&seg[at_fast..]);
                    let r_full = by_packet(&mut full, &seg[at_full..]);
                    proptest::prop_assert_eq!(r_fast, r_full);
                    at_fast += r_fast.0;
                    at_full += r_full.0;
                    if r_fast.1 != Push::Stall {
                        break;
                    }
                    // Chunks come back only when the stream stalls.
                    for (s, out) in [(&mut fast, &mut chunks_fast), (&mut full, &mut chunks_full)] {
                        while let Some(c) = s.poll_chunk() {
                            out.push(c.clone());
                            s.add_free_chunk(c);
                        }
                    }
                }
            }
            fast.flush();
            full.flush();
            let mut st = fast.stats().clone();
            st.packets_predicted = 0;
            proptest::prop_assert_eq!(&st, full.stats());
            proptest::prop_assert_eq!(full.stats().packets_predicted, 0);
            while let Some(c) = full.poll_chunk() {
                chunks_full.push(c);
            }
            while let Some(c) = fast.poll_chunk() {
                chunks_fast.push(c);
            }
            proptest::prop_assert_eq!(chunks_fast, chunks_full);
        }

        #[test]
        fn loss_and_duplicates_reflected_in_present(fate in proptest::collection::vec(0u8..20, 96)) {
            use crate::spead::check::Checker;
            let cfg = small_fsim(3);
            let place = KatgpucbfPlace::for_fsim(&cfg, 2);
            let per_heap = cfg.packets_per_heap();
            let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
            let mut s = ChunkStream::new(place.chunk_config(2, 8), place.clone());
            // fate 0: lost; 1: duplicated; otherwise delivered once.
            let mut start = 0;
            let mut heap_whole = vec![true; ends.len() / per_heap];
            for (i, &e) in ends.iter().enumerate() {
                let p = &buf[start..e];
                start = e;
                match fate[i % fate.len()] {
                    0 => heap_whole[i / per_heap] = false,
                    1 => {
                        proptest::prop_assert_eq!(s.push(0, p), Push::Accepted);
                        let again = s.push(0, p);
                        proptest::prop_assert!(matches!(again, Push::Accepted | Push::Discarded(ChunkDiscard::Duplicate)));
                    }
                    _ => proptest::prop_assert_eq!(s.push(0, p), Push::Accepted),
                }
            }
            s.flush();
            let mut checker = Checker::new(place.clone(), 0);
            let mut present = Vec::new();
            while let Some(c) = s.poll_chunk() {
                proptest::prop_assert_eq!(checker.check(&c, |_| {}), 0);
                present.extend(c.present.iter().map(|&p| p == 1));
            }
            // Heap order in the stream (timestamp-major, antenna-minor) is the
            // present-map order across consecutive chunks here.
            proptest::prop_assert_eq!(present, heap_whole.clone());
            proptest::prop_assert_eq!(
                s.stats().heaps_complete as usize,
                heap_whole.iter().filter(|&&w| w).count()
            );
        }
    }
}
