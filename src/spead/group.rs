//! SPEAD receive groups, as spead2's `ChunkStreamGroup`: several members, each
//! on its own lcore with its own share of the packets (an RSS queue, a UDP
//! socket, a multicast group), fill the same chunks.
//!
//! What is shared and how often:
//! - **Per packet, nothing locked.** A member places a heap, finds its chunk
//!   in its own list of held chunks, claims the heap's region of the chunk
//!   with one compare-and-swap ([`crate::buf::shared`]) and copies the payload
//!   there. Counters are the member's own ([`ChunkStats`]), added up when read.
//! - **Per chunk, the group's lock.** A member asks the group for a chunk id
//!   it does not hold yet; the group's window (`head..tail`, at most
//!   `max_chunks` ids) moves forward then, taking chunks from its free list.
//! - **Per burst, one atomic load.** In lossy mode a chunk that leaves the
//!   group's window while members still hold it is *retiring*: the group
//!   publishes the new head, each member drops what is below it at its next
//!   burst ([`Member::sync`]), and the chunk goes to the consumer once no member
//!   holds it (the last `Arc` returns to the group). A member's later packets
//!   for it are counted as too old (katgpucbf's choice: the group moves on).
//!   In lossless mode the window moves only over chunks no other member holds;
//!   until then the member asking gets [`Push::Stall`] (the group waits for
//!   the laggard; a member that stops receiving stops the group, as in spead2).
//!
//! Each member also keeps at most `max_chunks` chunks itself and lets go of
//! the oldest when it needs a newer one, so a member's window sits inside the
//! group's. Heaps must be placed at `heap_index * stride` with `stride =
//! chunk_bytes / present_len` (katgpucbf's layout): the claim of a heap index
//! is then the claim of its bytes, so two members can never write the same
//! bytes, whatever arrives where. Every member joins the group before any of
//! them receives (a member that joins late finds the window moved on).
//!
//! The file stays past 1,000 lines: the group, its members and the tests that
//! run them against a single receiver are one protocol, read together (the
//! tests are a third of it).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::buf::copy::store_fence;
use crate::buf::shared::{Claim, SharedChunk, Slots, Writer, WriterSet};

use super::chunk::{
    insert_offset, Chunk, ChunkBuf, ChunkConfig, ChunkDiscard, ChunkStats, Place, PlaceInput, Push,
    MAX_PLACE_ITEMS,
};
use super::wire::{ctrl, decode_visit, id};

/// What the group does when its window must move past a chunk a member still
/// holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Eviction {
    /// Move on: the chunk is delivered once the member lets go of it (at its
    /// next burst); the member's later heaps for it are too old.
    #[default]
    Lossy,
    /// Wait: the member asking for a newer chunk stalls until every other
    /// member has let go of the oldest.
    Lossless,
}

/// A group could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// Per-packet presence is not supported in a group.
    #[error("a receive group marks presence per heap, not per packet")]
    PacketPresence,
    /// The chunk is not `present_len` regions of equal size.
    #[error("chunk_bytes ({0}) is not a multiple of present_len ({1}): heaps must sit at heap_index * stride")]
    Stride(usize, usize),
    /// Too many members.
    #[error("a group has at most 255 members")]
    Members,
}

/// What the group itself counts (the members count their packets).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupStats {
    /// Chunks delivered.
    pub chunks: u64,
    /// `present` entries set in delivered chunks.
    pub present: u64,
    /// `present` entries in delivered chunks.
    pub present_slots: u64,
    /// Chunks the window moved past while a member still held them (lossy).
    pub evicted_held: u64,
    /// Requests for a chunk that found no free chunk.
    pub stalls: u64,
    /// Requests that waited for a laggard (lossless).
    pub waits: u64,
}

type Shared = Arc<SharedChunk<ChunkBuf>>;

struct State {
    head: i64,
    tail: i64,
    /// Chunks `head..tail`, in order.
    window: VecDeque<Shared>,
    /// Out of the window, in id order, waiting for members to let go.
    retiring: VecDeque<(i64, Shared)>,
    free: Vec<ChunkBuf>,
    /// Slots of delivered chunks, cleared, for the next ones.
    free_slots: Vec<Slots>,
    writers: WriterSet,
    /// Per member: chunk ids below this it is done with (its window has
    /// moved past them); what lossless eviction waits for.
    progress: Vec<i64>,
    stats: GroupStats,
    /// The counters of members that finished, summed.
    finished: ChunkStats,
}

struct Inner {
    cfg: ChunkConfig,
    /// The group's window: twice a member's (`cfg.max_chunks`), so members
    /// may be that far apart before eviction (lossy) or waiting (lossless).
    window: usize,
    eviction: Eviction,
    stride: usize,
    state: Mutex<State>,
    /// Members let go of chunks below this (lossy eviction), at their next burst.
    evict_before: AtomicI64,
    /// Chunks waiting in `retiring`, so a poll finds none without the lock.
    retiring: AtomicUsize,
    /// Members that joined.
    members: AtomicUsize,
    /// End-of-stream heaps seen by any member.
    stops: AtomicUsize,
    /// Members that began to finish.
    ending: AtomicUsize,
    /// Members that finished.
    ended: AtomicUsize,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent state (every
        // change is a push or pop): keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A receive group: its window of chunks, its free chunks and the chunks
/// ready for the consumer. Cheap to clone (all clones are the same group).
#[derive(Clone)]
pub struct ChunkGroup {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ChunkGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkGroup({:?})", self.window())
    }
}

impl ChunkGroup {
    /// A group with `cfg.n_chunks` chunks allocated up front (at least twice
    /// `max_chunks` plus what the consumer holds); `cfg.max_chunks` is each
    /// member's window (the reordering it tolerates), twice that the group's
    /// (how far apart members may be), `cfg.max_heaps` each member's.
    pub fn new(cfg: ChunkConfig, eviction: Eviction) -> Result<ChunkGroup, GroupError> {
        let mut cfg = cfg;
        cfg.max_chunks = cfg.max_chunks.max(1);
        cfg.max_heaps = cfg.max_heaps.max(1);
        if cfg.packet_presence.is_some() {
            return Err(GroupError::PacketPresence);
        }
        if cfg.present_len == 0 || cfg.chunk_bytes % cfg.present_len != 0 {
            return Err(GroupError::Stride(cfg.chunk_bytes, cfg.present_len));
        }
        let stride = cfg.chunk_bytes / cfg.present_len;
        let free = (0..cfg.n_chunks)
            .map(|_| ChunkBuf::new(cfg.chunk_bytes))
            .collect();
        Ok(ChunkGroup {
            inner: Arc::new(Inner {
                window: 2 * cfg.max_chunks,
                stride,
                eviction,
                state: Mutex::new(State {
                    head: 0,
                    tail: 0,
                    window: VecDeque::new(),
                    retiring: VecDeque::new(),
                    free,
                    free_slots: Vec::new(),
                    writers: WriterSet::default(),
                    progress: Vec::new(),
                    stats: GroupStats::default(),
                    finished: ChunkStats::default(),
                }),
                evict_before: AtomicI64::new(i64::MIN),
                retiring: AtomicUsize::new(0),
                members: AtomicUsize::new(0),
                stops: AtomicUsize::new(0),
                ending: AtomicUsize::new(0),
                ended: AtomicUsize::new(0),
                cfg,
            }),
        })
    }

    /// A new member placing heaps with `place`.
    pub fn member<P: Place>(&self, place: P) -> Result<Member<P>, GroupError> {
        let (writer, index) = {
            let mut s = self.inner.lock();
            let w = s.writers.writer().ok_or(GroupError::Members)?;
            s.progress.push(i64::MIN);
            self.inner.members.fetch_add(1, Ordering::Relaxed);
            (w, s.progress.len() - 1)
        };
        let mut ids = [0u64; MAX_PLACE_ITEMS];
        let n_ids = place.item_ids().len().min(MAX_PLACE_ITEMS);
        ids[..n_ids].copy_from_slice(&place.item_ids()[..n_ids]);
        let max_heaps = self.inner.cfg.max_heaps;
        Ok(Member {
            group: self.inner.clone(),
            writer,
            index,
            place,
            n_ids,
            ids,
            held: VecDeque::with_capacity(self.inner.cfg.max_chunks + 1),
            live: Vec::with_capacity(max_heaps),
            spare: (0..max_heaps).map(|_| Vec::with_capacity(64)).collect(),
            age: 0,
            floor: i64::MIN,
            finished: false,
            stats: ChunkStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ChunkConfig {
        &self.inner.cfg
    }

    /// The eviction mode.
    pub fn eviction(&self) -> Eviction {
        self.inner.eviction
    }

    /// The window `head..tail` of live chunk ids.
    pub fn window(&self) -> (i64, i64) {
        let s = self.inner.lock();
        (s.head, s.tail)
    }

    /// The group's own counters.
    pub fn stats(&self) -> GroupStats {
        self.inner.lock().stats.clone()
    }

    /// Members that joined.
    pub fn members(&self) -> usize {
        self.inner.members.load(Ordering::Relaxed)
    }

    /// Whether the group's input ended: its members saw as many end-of-stream
    /// heaps as there are members (spead2: each member's stream is stopped).
    pub fn stopped(&self) -> bool {
        self.inner.stops.load(Ordering::Acquire) >= self.members()
    }

    /// Whether every member finished ([`Member::finish`]); the group's window
    /// was flushed then, and what [`ChunkGroup::poll_chunk`] still gives is
    /// the last of it.
    pub fn finished(&self) -> bool {
        self.inner.ended.load(Ordering::Acquire) >= self.members()
    }

    /// The counters of the members that finished, added up, with the
    /// group's chunk counts: what one receiver fed every member's packets
    /// would count.
    pub fn totals(&self) -> ChunkStats {
        let s = self.inner.lock();
        let mut t = s.finished.clone();
        t.chunks = s.stats.chunks;
        t.present = s.stats.present;
        t.present_slots = s.stats.present_slots;
        t
    }

    /// The oldest retired chunk, once no member holds it. Without the lock
    /// when none is retiring (one atomic load), so every member may call it
    /// each burst.
    pub fn poll_chunk(&self) -> Option<Chunk> {
        if self.inner.retiring.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut s = self.inner.lock();
        let (chunk_id, shared) = s.retiring.pop_front()?;
        let c = match Arc::try_unwrap(shared) {
            Ok(c) => c,
            Err(shared) => {
                s.retiring.push_front((chunk_id, shared));
                return None;
            }
        };
        self.inner.retiring.fetch_sub(1, Ordering::Release);
        drop(s);
        // Away from the lock: the present map is read and the slots cleared
        // for the next chunk.
        let (data, present, mut slots) = c.into_parts_keep();
        slots.clear();
        let chunk = Chunk {
            chunk_id,
            data,
            present,
        };
        let (present, slots_n) = (chunk.present_count() as u64, chunk.present.len() as u64);
        let mut s = self.inner.lock();
        s.free_slots.push(slots);
        s.stats.chunks += 1;
        s.stats.present += present;
        s.stats.present_slots += slots_n;
        Some(chunk)
    }

    /// Gives a chunk back to the free list (its data is not zeroed).
    pub fn add_free_chunk(&self, chunk: Chunk) {
        let mut data = chunk.data;
        if data.len() != self.inner.cfg.chunk_bytes {
            data = ChunkBuf::new(self.inner.cfg.chunk_bytes);
        }
        self.inner.lock().free.push(data);
    }

    /// Retires every chunk in the window (at the end of input, once the members
    /// have flushed); they are delivered as members let go of them.
    pub fn flush(&self) {
        flush_group(&self.inner);
    }
}

fn flush_group(inner: &Inner) {
    let mut s = inner.lock();
    while s.head < s.tail {
        retire_head(inner, &mut s);
    }
    inner.evict_before.store(s.head, Ordering::Release);
}

fn retire_head(inner: &Inner, s: &mut State) {
    let id = s.head;
    if let Some(c) = s.window.pop_front() {
        s.retiring.push_back((id, c));
        inner.retiring.fetch_add(1, Ordering::Release);
    }
    s.head += 1;
}

/// Gets chunk `chunk_id` for member `member`, which is done with every chunk
/// below `done`, moving the group's window if needed.
fn acquire(inner: &Inner, member: usize, done: i64, chunk_id: i64) -> Result<Shared, Push> {
    let mut s = inner.lock();
    if let Some(p) = s.progress.get_mut(member) {
        *p = (*p).max(done);
    }
    if chunk_id < s.head {
        return Err(Push::Discarded(ChunkDiscard::TooOld));
    }
    let max = inner.window as i64;
    let held_elsewhere = |c: &Shared| Arc::strong_count(c) > 1;
    // Lossless: every member must be done with a chunk before it retires.
    let all_done = s.progress.iter().copied().min().unwrap_or(i64::MAX);
    if chunk_id >= s.tail && chunk_id - s.tail >= max {
        // So far ahead that the whole window is stale.
        if inner.eviction == Eviction::Lossless
            && (s.tail > all_done || s.window.iter().any(held_elsewhere))
        {
            s.stats.waits += 1;
            return Err(Push::Stall);
        }
        let evicted = s.window.iter().filter(|c| held_elsewhere(c)).count() as u64;
        s.stats.evicted_held += evicted;
        while s.head < s.tail {
            retire_head(inner, &mut s);
        }
        // Lossless: no further than every member is done.
        let restart = match inner.eviction {
            Eviction::Lossy => chunk_id - (max - 1),
            Eviction::Lossless => (chunk_id - (max - 1)).min(all_done),
        };
        s.head = restart.max(s.head);
        s.tail = s.head;
        inner.evict_before.store(s.head, Ordering::Release);
    }
    while chunk_id >= s.tail {
        if s.tail - s.head == max {
            let busy = s.window.front().is_some_and(held_elsewhere);
            if inner.eviction == Eviction::Lossless && (busy || s.head >= all_done) {
                s.stats.waits += 1;
                return Err(Push::Stall);
            }
            s.stats.evicted_held += u64::from(busy);
            retire_head(inner, &mut s);
            inner.evict_before.store(s.head, Ordering::Release);
        }
        let Some(data) = s.free.pop() else {
            s.stats.stalls += 1;
            return Err(Push::Stall);
        };
        let slots = s
            .free_slots
            .pop()
            .unwrap_or_else(|| Slots::new(inner.cfg.present_len));
        let c = Arc::new(s.writers.chunk_on(data, slots, inner.stride));
        s.window.push_back(c);
        s.tail += 1;
    }
    let at = (chunk_id - s.head) as usize;
    s.window
        .get(at)
        .cloned()
        .ok_or(Push::Discarded(ChunkDiscard::Rejected))
}

#[derive(Debug)]
enum HeapState {
    Placing { chunk_id: i64, region: usize },
    Discarding(ChunkDiscard),
}

#[derive(Debug)]
struct LiveHeap {
    sender: u32,
    cnt: u64,
    state: HeapState,
    heap_length: u64,
    received: u64,
    offsets: Vec<u64>,
    age: u64,
}

/// One member of a group: its share of the packets in, payloads into the
/// group's chunks. Runs on one lcore.
pub struct Member<P: Place> {
    group: Arc<Inner>,
    writer: Writer,
    /// This member's index in the group's progress list.
    index: usize,
    place: P,
    n_ids: usize,
    ids: [u64; MAX_PLACE_ITEMS],
    /// Chunks this member holds, in id order.
    held: VecDeque<(i64, Shared)>,
    live: Vec<LiveHeap>,
    /// Offsets lists of finished heaps, for the next ones.
    spare: Vec<Vec<u64>>,
    age: u64,
    /// Chunk ids below this are gone from the group's window.
    floor: i64,
    /// [`Member::finish`] was called.
    finished: bool,
    stats: ChunkStats,
}

impl<P: Place> std::fmt::Debug for Member<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Member({}, {} held)", self.writer.id(), self.held.len())
    }
}

impl<P: Place> Member<P> {
    /// This member's counters (`chunks`, `present` and `present_slots` are the
    /// group's: see [`ChunkGroup::stats`]).
    pub fn stats(&self) -> &ChunkStats {
        &self.stats
    }

    /// The placement (to change it between stretches of input).
    pub fn place_mut(&mut self) -> &mut P {
        &mut self.place
    }

    /// Chunks this member holds.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Lets go of chunks the group's window has moved past (lossy eviction).
    /// Call once per burst, and when idle.
    #[inline]
    pub fn sync(&mut self) {
        let before = self.group.evict_before.load(Ordering::Acquire);
        if before > self.floor {
            self.floor = before;
            while self.held.front().is_some_and(|h| h.0 < before) {
                self.release_front();
            }
        }
    }

    /// This member's index in its group (0 for the first to join).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The group this member belongs to.
    pub fn group(&self) -> ChunkGroup {
        ChunkGroup {
            inner: self.group.clone(),
        }
    }

    /// Ends this member: lets go of everything ([`Member::flush`]), adds its
    /// counters to the group's totals, and, for the last member to finish,
    /// flushes the group's window (every chunk then goes to the consumer as
    /// it is polled). Later packets are counted as after the end. Returns
    /// whether this was the last member; a second call does nothing.
    pub fn finish(&mut self) -> bool {
        if self.finished {
            return false;
        }
        self.finished = true;
        self.flush();
        self.stats.stopped = self.group().stopped();
        {
            let mut s = self.group.lock();
            let t = sum_stats([&s.finished, &self.stats]);
            s.finished = t;
        }
        // The last to finish flushes the window before it counts itself
        // finished, so a consumer that sees every member finished finds the
        // whole window retired.
        let ending = self.group.ending.fetch_add(1, Ordering::AcqRel) + 1;
        let last = ending >= self.group.members.load(Ordering::Relaxed);
        if last {
            flush_group(&self.group);
        }
        self.group.ended.fetch_add(1, Ordering::AcqRel);
        last
    }

    /// Lets go of every chunk (at the end of this member's input); its
    /// incomplete heaps are counted as flushed.
    pub fn flush(&mut self) {
        while !self.held.is_empty() {
            self.release_front();
        }
        if let Some(p) = self.group.lock().progress.get_mut(self.index) {
            *p = i64::MAX;
        }
        for l in self.live.drain(..) {
            if matches!(l.state, HeapState::Placing { .. }) {
                self.stats.heaps_incomplete_flushed += 1;
                self.stats.packets_in_incomplete_heaps += l.offsets.len() as u64;
            }
        }
    }

    fn release_front(&mut self) {
        let Some((chunk_id, _c)) = self.held.pop_front() else {
            return;
        };
        if self.group.cfg.copy == crate::buf::copy::CopyMode::Stream {
            // Streaming stores are weakly ordered: make them visible before the
            // chunk can reach the consumer.
            store_fence();
        }
        let stats = &mut self.stats;
        self.live.retain(|l| match l.state {
            HeapState::Placing { chunk_id: c, .. } if c == chunk_id => {
                stats.heaps_incomplete_flushed += 1;
                stats.packets_in_incomplete_heaps += l.offsets.len() as u64;
                false
            }
            _ => true,
        });
    }

    fn discard(&mut self, why: ChunkDiscard) -> Push {
        self.stats.discarded(why)
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
            // Remember the heap so its other packets are counted, not placed.
            self.new_live(sender, cnt, heap_length, HeapState::Discarding(why));
        }
        self.discard(why)
    }

    fn new_live(&mut self, sender: u32, cnt: u64, heap_length: u64, state: HeapState) -> usize {
        if self.live.len() == self.group.cfg.max_heaps {
            let oldest = (0..self.live.len())
                .min_by_key(|&i| self.live[i].age)
                .unwrap_or(0);
            let l = &self.live[oldest];
            if matches!(l.state, HeapState::Placing { .. }) {
                self.stats.heaps_incomplete_evicted += 1;
                self.stats.packets_in_incomplete_heaps += l.offsets.len() as u64;
            }
            self.remove_live(oldest);
        }
        self.age += 1;
        // Offsets lists are reused: no allocation per heap.
        let mut offsets = self.spare.pop().unwrap_or_default();
        offsets.clear();
        self.live.push(LiveHeap {
            sender,
            cnt,
            state,
            heap_length,
            received: 0,
            offsets,
            age: self.age,
        });
        self.live.len() - 1
    }

    /// Removes live heap `i`, keeping its offsets list for the next heap.
    fn remove_live(&mut self, i: usize) {
        let l = self.live.swap_remove(i);
        self.spare.push(l.offsets);
    }

    /// The held chunk `chunk_id`, asking the group for it if needed.
    #[inline]
    fn chunk(&mut self, chunk_id: i64) -> Result<usize, Push> {
        // Newest first: packets mostly go to the newest chunk.
        if let Some(i) = self.held.iter().rposition(|h| h.0 == chunk_id) {
            return Ok(i);
        }
        if chunk_id < self.floor {
            return Err(Push::Discarded(ChunkDiscard::TooOld));
        }
        let max = self.group.cfg.max_chunks as i64;
        // This member's window ends at its newest chunk: it is done with
        // everything `max` and more below that.
        let done = self.held.back().map_or(chunk_id, |h| h.0.max(chunk_id)) - max + 1;
        if self.held.back().is_some_and(|h| chunk_id > h.0) {
            // Newer than anything held: first let go of what falls out of
            // this member's window (so lossless eviction never waits on us).
            while self.held.front().is_some_and(|h| h.0 <= chunk_id - max) {
                self.release_front();
            }
        }
        let c = acquire(&self.group, self.index, done, chunk_id)?;
        let at = self.held.partition_point(|h| h.0 < chunk_id);
        self.held.insert(at, (chunk_id, c));
        while self.held.len() > self.group.cfg.max_chunks {
            self.release_front();
        }
        self.held
            .iter()
            .rposition(|h| h.0 == chunk_id)
            .ok_or(Push::Discarded(ChunkDiscard::TooOld))
    }

    /// Offers one packet from `sender`.
    pub fn push(&mut self, sender: u32, data: &[u8]) -> Push {
        self.stats.packets += 1;
        let mut stop = false;
        let mut vals = [None; MAX_PLACE_ITEMS];
        let ids = &self.ids[..self.n_ids];
        let h = match decode_visit(data, |item, v| {
            stop |= item == id::STREAM_CTRL && v == ctrl::STOP;
            for (k, &want) in ids.iter().enumerate() {
                if want == item {
                    vals[k] = Some(v);
                }
            }
        }) {
            Ok(h) => h,
            Err(_) => return self.discard(ChunkDiscard::Malformed),
        };
        if self.finished {
            return self.discard(ChunkDiscard::AfterStop);
        }
        if stop {
            // One member's stream ended: it lets go of its chunks (so a
            // lossless group never waits for it) and keeps taking packets
            // (on SO_REUSEPORT sockets another sender's may still come); the
            // group ends once it has seen a stop per member.
            self.flush();
            self.group.stops.fetch_add(1, Ordering::AcqRel);
            return Push::Stopped;
        }
        let Some(heap_length) = h.heap_length else {
            return self.discard(ChunkDiscard::Unsized);
        };
        let start = h.payload_start();
        let payload = &data[start..start + h.payload_length as usize];
        let single = h.payload_offset == 0 && h.payload_length == heap_length;
        if !single {
            if let Some(i) = self
                .live
                .iter()
                .position(|l| l.cnt == h.heap_cnt && l.sender == sender)
            {
                return self.add_to_live(i, h.payload_offset, heap_length, payload);
            }
        }
        let input = PlaceInput {
            sender,
            heap_cnt: h.heap_cnt,
            heap_length,
            items: &vals[..self.n_ids],
            packet: data,
        };
        let stride = self.group.stride;
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
        if placement.heap_index >= self.group.cfg.present_len
            || placement.heap_offset != placement.heap_index * stride
            || heap_length > stride as u64
        {
            return self.discard_heap(
                single,
                sender,
                h.heap_cnt,
                heap_length,
                ChunkDiscard::OutOfBounds,
            );
        }
        let slot = match self.chunk(placement.chunk_id) {
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
        let region = placement.heap_index;
        let chunk = &self.held[slot].1;
        match chunk.claim(&self.writer, region) {
            Claim::Claimed => {}
            // This member's own heap again after it gave up on it (evicted
            // incomplete): placed again, as a single receiver would, unless
            // it is complete already.
            Claim::Mine if !chunk.is_present(region) => {}
            // Placed already, here or by another member.
            Claim::Mine | Claim::Taken => return self.discard(ChunkDiscard::Duplicate),
            Claim::Invalid => return self.discard(ChunkDiscard::OutOfBounds),
        }
        if single {
            chunk.write(&self.writer, region, 0, payload, self.group.cfg.copy);
            chunk.set_present(&self.writer, region);
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
                region,
            },
        );
        self.add_to_live(i, h.payload_offset, heap_length, payload)
    }

    fn add_to_live(&mut self, i: usize, offset: u64, heap_length: u64, payload: &[u8]) -> Push {
        let l = &mut self.live[i];
        let (chunk_id, region) = match l.state {
            HeapState::Discarding(why) => return self.discard(why),
            HeapState::Placing { chunk_id, region } => (chunk_id, region),
        };
        if l.heap_length != heap_length {
            return self.discard(ChunkDiscard::Inconsistent);
        }
        if !insert_offset(&mut l.offsets, offset) {
            return self.discard(ChunkDiscard::Duplicate);
        }
        l.received += payload.len() as u64;
        let complete = l.received == l.heap_length;
        // Releasing a chunk removes its live heaps: the chunk is held.
        let Some((_, chunk)) = self.held.iter().rev().find(|h| h.0 == chunk_id) else {
            return self.discard(ChunkDiscard::Rejected);
        };
        chunk.write(
            &self.writer,
            region,
            offset as usize,
            payload,
            self.group.cfg.copy,
        );
        if complete {
            chunk.set_present(&self.writer, region);
        }
        self.stats.packets_accepted += 1;
        self.stats.bytes += payload.len() as u64;
        if complete {
            self.stats.heaps_complete += 1;
            self.remove_live(i);
        }
        Push::Accepted
    }
}

/// The members' counters added up (what a single receiver would count).
pub fn sum_stats<'a>(members: impl IntoIterator<Item = &'a ChunkStats>) -> ChunkStats {
    let mut t = ChunkStats::default();
    for s in members {
        t.packets += s.packets;
        t.packets_accepted += s.packets_accepted;
        t.packets_malformed += s.packets_malformed;
        t.packets_duplicate += s.packets_duplicate;
        t.packets_unsized += s.packets_unsized;
        t.packets_inconsistent += s.packets_inconsistent;
        t.packets_too_old += s.packets_too_old;
        t.packets_rejected += s.packets_rejected;
        t.packets_after_stop += s.packets_after_stop;
        t.packets_in_incomplete_heaps += s.packets_in_incomplete_heaps;
        t.heaps_complete += s.heaps_complete;
        t.heaps_single_packet += s.heaps_single_packet;
        t.packets_predicted += s.packets_predicted;
        t.heaps_incomplete_evicted += s.heaps_incomplete_evicted;
        t.heaps_incomplete_flushed += s.heaps_incomplete_flushed;
        t.heaps_too_old += s.heaps_too_old;
        t.heaps_rejected += s.heaps_rejected;
        t.chunks += s.chunks;
        t.stalls += s.stalls;
        t.present += s.present;
        t.present_slots += s.present_slots;
        t.bytes += s.bytes;
        t.stopped |= s.stopped;
    }
    t
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::copy::CopyMode;
    use crate::spead::chunk::{ChunkStream, KatgpucbfPlace, Placement};
    use crate::spead::fsim::{Fsim, FsimConfig, FENG_ID_ID};
    use crate::spead::wire::{emit_packet, Flavour};

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

    /// The simulator's packets for `n_ts` timestamps, each with its F-engine.
    fn fsim_packets(cfg: &FsimConfig, n_ts: u64) -> Vec<(u64, Vec<u8>)> {
        let (buf, ends) = Fsim::new(cfg.clone())
            .unwrap()
            .packets_buffer(n_ts)
            .unwrap();
        let mut out = Vec::new();
        let mut start = 0;
        for &e in &ends {
            let p = buf[start..e].to_vec();
            start = e;
            let mut feng = 0;
            decode_visit(&p, |item, v| {
                if item == FENG_ID_ID {
                    feng = v;
                }
            })
            .unwrap();
            out.push((feng, p));
        }
        out
    }

    fn config(place: &KatgpucbfPlace) -> ChunkConfig {
        let mut c = place.chunk_config(2, 16);
        c.max_heaps = 256;
        c.copy = CopyMode::Plain;
        c
    }

    /// Chunks, sorted by id, with the data of absent heaps zeroed (neither
    /// receiver promises anything about those bytes).
    fn normalise(mut chunks: Vec<Chunk>, stride: usize) -> Vec<Chunk> {
        chunks.sort_by_key(|c| c.chunk_id);
        for c in &mut chunks {
            for (i, &p) in c.present.iter().enumerate() {
                if p == 0 {
                    c.data[i * stride..(i + 1) * stride].fill(0);
                }
            }
        }
        chunks
    }

    fn single(place: &KatgpucbfPlace, packets: &[&[u8]]) -> (Vec<Chunk>, ChunkStats) {
        let mut s = ChunkStream::new(config(place), place.clone());
        let mut out = Vec::new();
        for p in packets {
            assert_eq!(s.push(0, p), Push::Accepted);
            while let Some(c) = s.poll_chunk() {
                out.push(c.clone());
                s.add_free_chunk(c);
            }
        }
        s.flush();
        while let Some(c) = s.poll_chunk() {
            out.push(c);
        }
        (out, s.stats().clone())
    }

    proptest::proptest! {
        /// Heaps spread over members by F-engine (as multicast groups or RSS
        /// would), packets reordered within each chunk's span between and
        /// within members, some lost: the group builds the chunks and present
        /// maps a single receiver builds from the same packets, and the
        /// members' counters add up to its counters.
        #[test]
        fn a_group_builds_what_a_single_receiver_builds(
            members in 1usize..4,
            keys in proptest::collection::vec((proptest::prelude::any::<u16>(), 0u8..10), 192),
        ) {
            let cfg = small_fsim(4);
            let place = KatgpucbfPlace::for_fsim(&cfg, 2);
            let all = fsim_packets(&cfg, 8);
            let per_chunk = all.len() / 4;
            let mut order: Vec<(u64, &[u8])> = Vec::new();
            for (g, group) in all.chunks(per_chunk).enumerate() {
                let mut v: Vec<(u16, u8, u64, &[u8])> = group
                    .iter()
                    .enumerate()
                    .map(|(i, (f, p))| {
                        let (k, loss) = keys[(g * per_chunk + i) % keys.len()];
                        (k, loss, *f, &p[..])
                    })
                    .collect();
                v.sort_by_key(|x| x.0);
                // One packet in ten lost.
                order.extend(v.into_iter().filter(|x| x.1 != 0).map(|x| (x.2, x.3)));
            }
            let packets: Vec<&[u8]> = order.iter().map(|x| x.1).collect();
            let (want, want_stats) = single(&place, &packets);

            let group = ChunkGroup::new(config(&place), Eviction::Lossy).unwrap();
            let mut ms: Vec<Member<KatgpucbfPlace>> =
                (0..members).map(|_| group.member(place.clone()).unwrap()).collect();
            let mut got = Vec::new();
            for (f, p) in &order {
                let m = &mut ms[*f as usize % members];
                m.sync();
                proptest::prop_assert_eq!(m.push(0, p), Push::Accepted);
                while let Some(c) = group.poll_chunk() {
                    got.push(c);
                }
            }
            for m in &mut ms {
                m.flush();
            }
            group.flush();
            while let Some(c) = group.poll_chunk() {
                got.push(c);
            }
            let stride = group.inner.stride;
            let got = normalise(got, stride);
            let want = normalise(want, stride);
            proptest::prop_assert_eq!(got.len(), want.len());
            for (a, b) in got.iter().zip(&want) {
                proptest::prop_assert_eq!(a.chunk_id, b.chunk_id);
                proptest::prop_assert_eq!(&a.present, &b.present);
                proptest::prop_assert!(a.data[..] == b.data[..], "chunk {} data", a.chunk_id);
            }
            let sum = sum_stats(ms.iter().map(|m| m.stats()));
            proptest::prop_assert_eq!(sum.packets, want_stats.packets);
            proptest::prop_assert_eq!(sum.packets_accepted, want_stats.packets_accepted);
            proptest::prop_assert_eq!(sum.heaps_complete, want_stats.heaps_complete);
            proptest::prop_assert_eq!(sum.bytes, want_stats.bytes);
            proptest::prop_assert_eq!(sum.packets_too_old, 0);
            let gs = group.stats();
            proptest::prop_assert_eq!(gs.chunks, want_stats.chunks);
            proptest::prop_assert_eq!(gs.present, want_stats.present);
            proptest::prop_assert_eq!(gs.present_slots, want_stats.present_slots);
        }
    }

    /// Heap number `n` (item 0x1600) in chunk `n / 4`, index `n % 4`, 8 bytes.
    #[derive(Clone)]
    struct Simple {
        ids: [u64; 1],
    }

    impl Place for Simple {
        fn item_ids(&self) -> &[u64] {
            &self.ids
        }
        fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
            let n = input.items[0]?;
            Some(Placement {
                chunk_id: (n / 4) as i64,
                heap_index: (n % 4) as usize,
                heap_offset: (n % 4) as usize * 8,
            })
        }
    }

    fn simple_group(eviction: Eviction) -> ChunkGroup {
        ChunkGroup::new(
            ChunkConfig {
                max_chunks: 2,
                n_chunks: 8,
                chunk_bytes: 32,
                present_len: 4,
                max_heaps: 4,
                packet_presence: None,
                copy: CopyMode::Plain,
            },
            eviction,
        )
        .unwrap()
    }

    fn pkt(n: u64) -> Vec<u8> {
        let f = Flavour::SPEAD_64_48;
        let data: Vec<u8> = (0..8).map(|i| (n * 10 + i) as u8).collect();
        let mut buf = vec![0u8; 200];
        let items = [f.immediate(0x1600, n).unwrap()];
        let len = emit_packet(&mut buf, f, n, Some(8), 0, &items, &data).unwrap();
        buf.truncate(len);
        buf
    }

    fn simple() -> Simple {
        Simple { ids: [0x1600] }
    }

    #[test]
    fn lossy_moves_on_and_delivers_once_the_laggard_lets_go() {
        let g = simple_group(Eviction::Lossy);
        let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
        assert_eq!(b.push(0, &pkt(1)), Push::Accepted);
        for n in [0, 4, 8, 12, 16] {
            assert_eq!(a.push(0, &pkt(n)), Push::Accepted);
        }
        // Chunk 0 left the group's window (4 chunks) while b held it: not
        // delivered yet.
        assert_eq!(g.window(), (1, 5));
        assert_eq!(g.stats().evicted_held, 1);
        assert!(g.poll_chunk().is_none());
        b.sync();
        let c = g.poll_chunk().unwrap();
        assert_eq!((c.chunk_id, &c.present[..]), (0, &[1, 1, 0, 0][..]));
        assert_eq!(&c.data[8..16], &[10, 11, 12, 13, 14, 15, 16, 17]);
        // b's later heap for chunk 0 is too old; another member's duplicate of a
        // heap is a duplicate.
        assert_eq!(b.push(0, &pkt(2)), Push::Discarded(ChunkDiscard::TooOld));
        assert_eq!(b.push(0, &pkt(4)), Push::Discarded(ChunkDiscard::Duplicate));
        assert_eq!(b.stats().packets_too_old, 1);
        assert_eq!(b.stats().packets_duplicate, 1);
    }

    #[test]
    fn lossless_waits_for_the_laggard() {
        let g = simple_group(Eviction::Lossless);
        let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
        assert_eq!(b.push(0, &pkt(1)), Push::Accepted);
        assert_eq!(a.push(0, &pkt(0)), Push::Accepted);
        assert_eq!(a.push(0, &pkt(4)), Push::Accepted);
        assert_eq!(a.push(0, &pkt(8)), Push::Accepted);
        assert_eq!(a.push(0, &pkt(12)), Push::Accepted);
        // Chunk 4 would push chunk 0 out of the group's window (4 chunks)
        // before b is done with it: a waits.
        assert_eq!(a.push(0, &pkt(16)), Push::Stall);
        assert_eq!(a.stats().stalls, 1);
        assert_eq!(g.stats().waits, 1);
        // b moves on (letting go of chunk 0 as its own window slides), then a.
        assert_eq!(b.push(0, &pkt(9)), Push::Accepted);
        assert_eq!(a.push(0, &pkt(16)), Push::Accepted);
        let c = g.poll_chunk().unwrap();
        assert_eq!((c.chunk_id, &c.present[..]), (0, &[1, 1, 0, 0][..]));
        assert_eq!(g.stats().evicted_held, 0);
    }

    #[test]
    fn a_group_refuses_what_it_cannot_share() {
        let mut cfg = simple_group(Eviction::Lossy).config().clone();
        cfg.packet_presence = Some(4);
        assert_eq!(
            ChunkGroup::new(cfg.clone(), Eviction::Lossy).unwrap_err(),
            GroupError::PacketPresence
        );
        cfg.packet_presence = None;
        cfg.chunk_bytes = 30;
        assert!(matches!(
            ChunkGroup::new(cfg, Eviction::Lossy),
            Err(GroupError::Stride(30, 4))
        ));
        // A placement off the stride is out of bounds, never written.
        struct Off;
        impl Place for Off {
            fn item_ids(&self) -> &[u64] {
                &[0x1600]
            }
            fn place(&mut self, _: &PlaceInput<'_>) -> Option<Placement> {
                Some(Placement {
                    chunk_id: 0,
                    heap_index: 1,
                    heap_offset: 4,
                })
            }
        }
        let g = simple_group(Eviction::Lossy);
        let mut m = g.member(Off).unwrap();
        assert_eq!(
            m.push(0, &pkt(1)),
            Push::Discarded(ChunkDiscard::OutOfBounds)
        );
    }

    #[test]
    fn members_on_threads_fill_the_same_chunks() {
        // Lossless, so the result cannot depend on timing: 3 members on 3
        // threads, the consumer on this one.
        let cfg = small_fsim(6);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let all = fsim_packets(&cfg, 40);
        let packets: Vec<&[u8]> = all.iter().map(|x| &x.1[..]).collect();
        let (want, _) = single(&place, &packets);
        let group = ChunkGroup::new(config(&place), Eviction::Lossless).unwrap();
        // Every member joins before any receives (as in spead2).
        let members: Vec<_> = (0..3)
            .map(|_| group.member(place.clone()).unwrap())
            .collect();
        let threads: Vec<_> = (0..3u64)
            .zip(members)
            .map(|(k, mut m)| {
                let mine: Vec<Vec<u8>> = all
                    .iter()
                    .filter(|x| x.0 % 3 == k)
                    .map(|x| x.1.clone())
                    .collect();
                std::thread::spawn(move || {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                    for p in &mine {
                        loop {
                            m.sync();
                            match m.push(0, p) {
                                Push::Stall => {
                                    assert!(std::time::Instant::now() < deadline, "stalled");
                                    std::thread::yield_now();
                                }
                                r => {
                                    assert_eq!(r, Push::Accepted);
                                    break;
                                }
                            }
                        }
                    }
                    m.flush();
                    m.stats().clone()
                })
            })
            .collect();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        // Consume (and give back) until every member has finished.
        while !threads.iter().all(|t| t.is_finished()) {
            assert!(std::time::Instant::now() < deadline, "members stuck");
            match group.poll_chunk() {
                Some(c) => {
                    let copy = c.clone();
                    group.add_free_chunk(c);
                    got.push(copy);
                }
                None => std::thread::yield_now(),
            }
        }
        let stats: Vec<ChunkStats> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        group.flush();
        while let Some(c) = group.poll_chunk() {
            got.push(c);
        }
        let stride = group.inner.stride;
        assert_eq!(normalise(got, stride), normalise(want, stride));
        assert_eq!(sum_stats(&stats).packets_accepted, packets.len() as u64);
    }
}
