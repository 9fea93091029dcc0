//! SPEAD receive groups, as spead2's `ChunkStreamGroup`: several members, each
//! on its own lcore with its own share of the packets (an RSS queue, a UDP
//! socket, a multicast group), fill the same chunks.
//!
//! What is shared and how often:
//! - **Per packet, nothing locked.** A member places a heap with the single
//!   receiver's placement routine (`chunk::Heaps`, header prediction
//!   included), finds its chunk among its own held chunks, claims the heap's
//!   region of the chunk with one compare-and-swap on the region's owner word
//!   ([`crate::buf::shared`]), copies the payload there and marks the heap
//!   present in a bitmap of its own. Counters are the member's own
//!   ([`ChunkStats`]), added up when read.
//! - **Per chunk, the consumer ORs the members' bitmaps** (256 bytes each for
//!   2048 heaps) into the chunk's `present` map. Nothing is cleared when a
//!   chunk is recycled: owner words carry the chunk's generation, and a
//!   member resets its bitmap when it first claims a heap in a new one.
//! - **Per window of chunks, the group's lock.** A member asks the group for a
//!   chunk id it does not hold yet and gets, in the same lock take, up to
//!   `batch - 1` newer ones (those the group has or can make without waiting
//!   or evicting): it takes the lock about once per `batch` chunks. The
//!   group's window (`head..tail`) moves forward then, taking chunks from its
//!   free list. A member publishes how far it is done (its own window's
//!   start) with one atomic store, not under the lock, so lossless eviction
//!   sees a member move inside its window without that member taking the
//!   lock. The consumer takes the lock once per batch of retired chunks
//!   ([`ChunkGroup::poll_chunk`]) and once per chunk it gives back.
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
//! Each member keeps the `max_chunks` chunks up to the newest it placed a heap
//! in (its window, the reordering it tolerates) plus the at most `batch - 1`
//! newer ones it was given ahead; the group's window spans `2 * max_chunks`
//! ids up to the newest asked for (so members may be that far apart), and the
//! chunks given ahead beyond it. Heaps must be placed at `heap_index * stride`
//! with `stride = chunk_bytes / present_len` (katgpucbf's layout): the claim of
//! a heap index is then the claim of its bytes, so two members can never write
//! the same bytes, whatever arrives where. Every member joins the group before
//! any of them receives (a member that joins late finds the window moved on).
//!
//! The tests, which run the group against a single receiver, are in
//! `group/test.rs`. This file stays past 1,000 lines: the group's window, a
//! member's held chunks and its three-pass burst are one protocol, read
//! together (what a member may hold is what the group may retire).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::buf::copy::{prefetch, store_fence};
use crate::buf::shared::{Claim, SharedChunk, Slots, Writer, WriterSet};
use crate::buf::BURST_MAX;

use super::chunk::{
    Chunk, ChunkBuf, ChunkConfig, ChunkDiscard, ChunkSource, ChunkStats, Heaps, Piece, Place,
    Placement, Planned, Push,
};

/// Most members of a group (writer ids are one byte).
const MAX_MEMBERS: usize = 255;

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
    /// Members' takes of the group's lock for chunks (each gets a chunk and
    /// up to `batch - 1` newer ones).
    pub takes: u64,
    /// Chunks given to members ahead of their need in those takes.
    pub ahead: u64,
    /// The consumer's takes of the group's lock for retired chunks (each
    /// takes every chunk ready by then).
    pub consumer_takes: u64,
}

type Shared = Arc<SharedChunk<ChunkBuf>>;

struct State {
    head: i64,
    tail: i64,
    /// Chunks `head..tail`, in order.
    window: VecDeque<Shared>,
    /// Out of the window, in id order, waiting for members to let go; the
    /// flag is false for chunks only given ahead (never delivered).
    retiring: VecDeque<(i64, Shared, bool)>,
    free: Vec<ChunkBuf>,
    /// Slots of delivered chunks, for the next ones (a new generation of
    /// them: nothing to clear).
    free_slots: Vec<Slots>,
    writers: WriterSet,
    stats: GroupStats,
    /// The counters of members that finished, summed.
    finished: ChunkStats,
}

/// The consumer's side: retired chunks it took in one lock take, and what it
/// hands back at the next one (under a lock of its own, which only the
/// consumer takes, so it is never contended by members).
#[derive(Default)]
struct Out {
    ready: VecDeque<(i64, SharedChunk<ChunkBuf>)>,
    /// Slots of chunks delivered since the last take.
    slots: Vec<Slots>,
    chunks: u64,
    present: u64,
    present_slots: u64,
}

/// One member's progress, on a cache line of its own (written by that member
/// once per chunk it moves to, read by the others under the lock).
#[repr(align(64))]
struct Progress {
    /// Chunk ids below this the member is done with.
    done: AtomicI64,
    /// The newest chunk id it placed a heap in.
    top: AtomicI64,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            done: AtomicI64::new(i64::MIN),
            top: AtomicI64::new(i64::MIN),
        }
    }
}

struct Inner {
    cfg: ChunkConfig,
    /// The group's window behind the newest chunk asked for: twice a
    /// member's (`cfg.max_chunks`), so members may be that far apart before
    /// eviction (lossy) or waiting (lossless).
    window: usize,
    /// Chunks a member gets per lock take (its own window moves in steps of
    /// this many chunks).
    batch: usize,
    eviction: Eviction,
    stride: usize,
    state: Mutex<State>,
    out: Mutex<Out>,
    /// Per member: chunk ids below this it is done with (its window has
    /// moved past them); what lossless eviction waits for.
    progress: Box<[Progress]>,
    /// Members let go of chunks below this (lossy eviction), at their next burst.
    evict_before: AtomicI64,
    /// Chunks retiring or ready for the consumer, so a poll finds none
    /// without a lock.
    pending: AtomicUsize,
    /// Members that joined.
    members: AtomicUsize,
    /// End-of-stream heaps seen by any member.
    stops: AtomicUsize,
    /// Members that began to finish.
    ending: AtomicUsize,
    /// Members that finished.
    ended: AtomicUsize,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves consistent state (every change
    // is a push or pop): keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        relock(&self.state)
    }

    /// The oldest chunk id some member still needs (every member is done
    /// with everything below it).
    fn all_done(&self) -> i64 {
        let n = self.members.load(Ordering::Acquire).min(MAX_MEMBERS);
        self.progress[..n]
            .iter()
            .map(|p| p.done.load(Ordering::Acquire))
            .min()
            .unwrap_or(i64::MAX)
    }

    /// The newest chunk id any member but `except` placed a heap in: chunks
    /// past it were only given ahead, empty, and a single receiver would not
    /// have made them.
    fn top(&self, except: usize) -> i64 {
        let n = self.members.load(Ordering::Acquire).min(MAX_MEMBERS);
        self.progress[..n]
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != except)
            .map(|(_, p)| p.top.load(Ordering::Acquire))
            .max()
            .unwrap_or(i64::MIN)
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
    /// `max_chunks` plus what the consumer holds, and a member's `batch` more
    /// for members to get chunks ahead); `cfg.max_chunks` is each member's
    /// window (the reordering it tolerates), twice that the group's (how far
    /// apart members may be), `cfg.max_heaps` each member's. Members get
    /// `max_chunks` chunks per lock take ([`ChunkGroup::with_batch`]).
    pub fn new(cfg: ChunkConfig, eviction: Eviction) -> Result<ChunkGroup, GroupError> {
        let batch = cfg.max_chunks;
        ChunkGroup::with_batch(cfg, eviction, batch)
    }

    /// [`ChunkGroup::new`] with members getting up to `batch` chunks per take
    /// of the group's lock (1: one chunk per take).
    pub fn with_batch(
        cfg: ChunkConfig,
        eviction: Eviction,
        batch: usize,
    ) -> Result<ChunkGroup, GroupError> {
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
                batch: batch.max(1),
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
                    stats: GroupStats::default(),
                    finished: ChunkStats::default(),
                }),
                out: Mutex::new(Out::default()),
                progress: (0..MAX_MEMBERS).map(|_| Progress::new()).collect(),
                evict_before: AtomicI64::new(i64::MIN),
                pending: AtomicUsize::new(0),
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
            let s = &mut *self.inner.lock();
            let w = s.writers.writer().ok_or(GroupError::Members)?;
            let index = self.inner.members.load(Ordering::Relaxed);
            if index >= MAX_MEMBERS {
                return Err(GroupError::Members);
            }
            let p = &self.inner.progress[index];
            p.done.store(i64::MIN, Ordering::Release);
            p.top.store(i64::MIN, Ordering::Release);
            self.inner.members.store(index + 1, Ordering::Release);
            (w, index)
        };
        let cfg = &self.inner.cfg;
        let keep = cfg.max_chunks + self.inner.batch - 1;
        Ok(Member {
            chunks: Held {
                group: self.inner.clone(),
                writer,
                index,
                held: VecDeque::with_capacity(keep + 1),
                ahead: Vec::with_capacity(self.inner.batch),
                keep,
                top: i64::MIN,
                floor: i64::MIN,
                released: 0,
                defer: None,
                pending: Vec::with_capacity(BURST_MAX),
                releasing: Vec::with_capacity(keep + 1),
            },
            heaps: Heaps::new(place, cfg.max_heaps),
            finished: false,
            stalled: false,
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

    /// Chunks a member gets per take of the group's lock.
    pub fn batch(&self) -> usize {
        self.inner.batch
    }

    /// The window `head..tail` of live chunk ids.
    pub fn window(&self) -> (i64, i64) {
        let s = self.inner.lock();
        (s.head, s.tail)
    }

    /// The group's own counters.
    pub fn stats(&self) -> GroupStats {
        let (chunks, present, present_slots) = {
            let o = relock(&self.inner.out);
            (o.chunks, o.present, o.present_slots)
        };
        let mut st = self.inner.lock().stats.clone();
        st.chunks = chunks;
        st.present = present;
        st.present_slots = present_slots;
        st
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
        let g = self.stats();
        let mut t = self.inner.lock().finished.clone();
        t.chunks = g.chunks;
        t.present = g.present;
        t.present_slots = g.present_slots;
        t
    }

    /// The oldest retired chunk, once no member holds it. Without a lock when
    /// none is retiring (one atomic load), so every member may call it each
    /// burst. The group's lock is taken once per batch: every retired chunk
    /// no member holds any more, in order, moves to the consumer's side at
    /// once (and the slots of the chunks delivered since go back).
    pub fn poll_chunk(&self) -> Option<Chunk> {
        if self.inner.pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut o = relock(&self.inner.out);
        if o.ready.is_empty() {
            let s = &mut *self.inner.lock();
            s.stats.consumer_takes += 1;
            s.free_slots.append(&mut o.slots);
            while let Some((chunk_id, shared, deliver)) = s.retiring.pop_front() {
                match Arc::try_unwrap(shared) {
                    // A chunk given ahead is delivered if a heap was claimed
                    // in it after all (every member's stores are visible now).
                    Ok(c) if deliver || c.claimed() => o.ready.push_back((chunk_id, c)),
                    Ok(c) => {
                        // Given ahead and never used: straight back.
                        self.inner.pending.fetch_sub(1, Ordering::Release);
                        let (data, _, slots) = c.into_parts_keep();
                        s.free.push(data);
                        s.free_slots.push(slots);
                    }
                    Err(shared) => {
                        s.retiring.push_front((chunk_id, shared, deliver));
                        break;
                    }
                }
            }
        }
        let (chunk_id, c) = o.ready.pop_front()?;
        self.inner.pending.fetch_sub(1, Ordering::Release);
        drop(o);
        // Away from every lock: the present map is the members' rows ORed
        // (the slots need no clearing: the next chunk is a new generation).
        let (data, present, slots) = c.into_parts_keep();
        let chunk = Chunk {
            chunk_id,
            data,
            present,
        };
        let mut o = relock(&self.inner.out);
        o.slots.push(slots);
        o.chunks += 1;
        o.present += chunk.present_count() as u64;
        o.present_slots += chunk.present.len() as u64;
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
    retire_all(inner, &mut s, inner.top(usize::MAX));
    inner.evict_before.store(s.head, Ordering::Release);
}

fn retire_head(inner: &Inner, s: &mut State) {
    retire_head_of(inner, s, i64::MAX);
}

/// Retires the head; a chunk past `top` (only given ahead) is not delivered.
fn retire_head_of(inner: &Inner, s: &mut State, top: i64) {
    let id = s.head;
    if let Some(c) = s.window.pop_front() {
        s.retiring.push_back((id, c, id <= top));
        inner.pending.fetch_add(1, Ordering::Release);
    }
    s.head += 1;
}

/// Retires the whole window (the end, or a jump far ahead): chunks past
/// `top`, the newest any member placed a heap in, were only given ahead, and
/// are not delivered unless a heap was claimed in them by then (a single
/// receiver would not have made them).
fn retire_all(inner: &Inner, s: &mut State, top: i64) {
    while s.head < s.tail {
        retire_head_of(inner, s, top);
    }
}

/// A new chunk at the window's tail, from the free list.
fn grow(inner: &Inner, s: &mut State) -> bool {
    let Some(data) = s.free.pop() else {
        return false;
    };
    let slots = s
        .free_slots
        .pop()
        .unwrap_or_else(|| Slots::new(inner.cfg.present_len));
    let c = Arc::new(s.writers.chunk_on(data, slots, inner.stride));
    s.window.push_back(c);
    s.tail += 1;
    true
}

/// Gets chunk `chunk_id` for member `member` (whose newest chunk before was
/// `prev_top`), moving the group's window if needed, and appends to `ahead`
/// up to `extra` chunks after it that the group has or can make without
/// waiting, evicting or stalling (one lock take for all of them).
fn acquire(
    inner: &Inner,
    member: usize,
    prev_top: i64,
    chunk_id: i64,
    extra: usize,
    ahead: &mut Vec<(i64, Shared)>,
    releasing: &[(i64, Shared)],
) -> Result<Shared, Push> {
    let s = &mut *inner.lock();
    s.stats.takes += 1;
    if chunk_id < s.head {
        return Err(Push::Discarded(ChunkDiscard::TooOld));
    }
    let max = inner.window as i64;
    // Held by a member other than through the window; the asking member's
    // chunks it let go of in this burst (kept until the burst's deferred
    // copies are done, then dropped: delivery waits for that) do not count.
    let held_elsewhere = |c: &Shared| {
        let mine = releasing.iter().filter(|r| Arc::ptr_eq(&r.1, c)).count();
        Arc::strong_count(c) > 1 + mine
    };
    let lossless = inner.eviction == Eviction::Lossless;
    // Lossless: every member must be done with a chunk before it retires.
    let all_done = inner.all_done();
    if chunk_id >= s.tail && chunk_id - s.tail >= max {
        // So far ahead that the whole window is stale.
        if lossless && (s.tail > all_done || s.window.iter().any(held_elsewhere)) {
            s.stats.waits += 1;
            return Err(Push::Stall);
        }
        let evicted = s.window.iter().filter(|c| held_elsewhere(c)).count() as u64;
        s.stats.evicted_held += evicted;
        // Not counting this ask: the asking member's newest before it.
        retire_all(inner, s, inner.top(member).max(prev_top));
        // Lossless: no further than every member is done.
        let restart = if lossless {
            (chunk_id - (max - 1)).min(all_done)
        } else {
            chunk_id - (max - 1)
        };
        s.head = restart.max(s.head);
        s.tail = s.head;
        inner.evict_before.store(s.head, Ordering::Release);
    }
    // The window spans `max` ids up to the newest asked for (chunks given
    // ahead may sit beyond it).
    while s.head <= chunk_id - max {
        let busy = s.window.front().is_some_and(held_elsewhere);
        if lossless && (busy || s.head >= all_done) {
            s.stats.waits += 1;
            return Err(Push::Stall);
        }
        s.stats.evicted_held += u64::from(busy);
        retire_head(inner, s);
        inner.evict_before.store(s.head, Ordering::Release);
    }
    while chunk_id >= s.tail {
        if !grow(inner, s) {
            s.stats.stalls += 1;
            return Err(Push::Stall);
        }
    }
    let c = s.window[(chunk_id - s.head) as usize].clone();
    // Ahead: only what needs no waiting, eviction or stall.
    for id in chunk_id + 1..=chunk_id + extra as i64 {
        if id >= s.tail && !grow(inner, s) {
            break;
        }
        ahead.push((id, s.window[(id - s.head) as usize].clone()));
        s.stats.ahead += 1;
    }
    Ok(c)
}

/// A member's chunks: the ones it holds, in id order (its [`ChunkSource`]).
struct Held {
    group: Arc<Inner>,
    writer: Writer,
    /// This member's index in the group's progress list.
    index: usize,
    held: VecDeque<(i64, Shared)>,
    /// Chunks the last lock take gave ahead (kept for its allocation).
    ahead: Vec<(i64, Shared)>,
    /// Chunks held at most: the member's window and those given ahead.
    keep: usize,
    /// The newest chunk id asked for a heap (the end of this member's window).
    top: i64,
    /// Chunk ids below this are gone from the group's window.
    floor: i64,
    /// Chunks let go of so far ([`ChunkSource::epoch`]).
    released: u64,
    /// Inside [`Member::push_burst`]: the packet being placed (its index in
    /// the burst and its address), whose payload copy is deferred.
    defer: Option<(usize, usize)>,
    /// Copies deferred to the end of the burst.
    pending: Vec<Deferred>,
    /// Chunks let go of during a burst, kept until its copies are done.
    releasing: Vec<(i64, Shared)>,
}

/// A payload copy deferred to the end of a burst: which packet's bytes
/// (`pkt`, `off..off + len` of it) go to byte `at` of heap region `region`
/// of chunk `chunk_id`.
#[derive(Debug, Clone, Copy)]
struct Deferred {
    chunk_id: i64,
    region: usize,
    at: usize,
    pkt: usize,
    off: usize,
    len: usize,
}

impl Held {
    fn release_front(&mut self) {
        let Some(front) = self.held.pop_front() else {
            return;
        };
        self.released += 1;
        if self.defer.is_some() {
            // Copies into it may be pending: let go at the burst's end.
            self.releasing.push(front);
            return;
        }
        drop(front);
        if self.group.cfg.copy == crate::buf::copy::CopyMode::Stream {
            // Streaming stores are weakly ordered: make them visible before the
            // chunk can reach the consumer.
            store_fence();
        }
    }

    /// Lets go of every chunk, done with every id (end of input).
    fn release_all(&mut self) {
        while !self.held.is_empty() {
            self.release_front();
        }
        self.group.progress[self.index]
            .done
            .store(i64::MAX, Ordering::Release);
    }

    /// Lets go of chunks the group's window has moved past (lossy).
    #[inline]
    fn sync(&mut self) {
        let before = self.group.evict_before.load(Ordering::Acquire);
        if before > self.floor {
            self.floor = before;
            while self.held.front().is_some_and(|h| h.0 < before) {
                self.release_front();
            }
        }
    }
}

impl ChunkSource for Held {
    fn chunk(&mut self, chunk_id: i64, _stats: &mut ChunkStats) -> Result<usize, Push> {
        if let Some(i) = self.find(chunk_id) {
            if chunk_id <= self.top {
                return Ok(i);
            }
            // Given ahead: the member's window moves without the lock.
            self.advance(chunk_id);
            return self
                .find(chunk_id)
                .ok_or(Push::Discarded(ChunkDiscard::TooOld));
        }
        if chunk_id < self.floor {
            return Err(Push::Discarded(ChunkDiscard::TooOld));
        }
        let (prev_top, forward) = (self.top, chunk_id > self.top);
        if forward {
            self.advance(chunk_id);
        }
        let extra = if forward { self.group.batch - 1 } else { 0 };
        let mut ahead = std::mem::take(&mut self.ahead);
        let got = acquire(
            &self.group,
            self.index,
            prev_top,
            chunk_id,
            extra,
            &mut ahead,
            &self.releasing,
        );
        let c = match got {
            Ok(c) => c,
            Err(e) => {
                self.ahead = ahead;
                if e == Push::Discarded(ChunkDiscard::TooOld) {
                    // The group moved past it: catch up with its eviction
                    // mark now, so this member's later heaps for chunks
                    // that old are refused without the lock (a member that
                    // fell behind would otherwise take it per packet until
                    // its next `sync`).
                    self.sync();
                }
                return Err(e);
            }
        };
        let at = self.held.partition_point(|h| h.0 < chunk_id);
        self.held.insert(at, (chunk_id, c));
        for (id, c) in ahead.drain(..) {
            let at = self.held.partition_point(|h| h.0 < id);
            if self.held.get(at).is_none_or(|h| h.0 != id) {
                self.held.insert(at, (id, c));
            }
        }
        self.ahead = ahead;
        while self.held.len() > self.keep {
            self.release_front();
        }
        self.find(chunk_id)
            .ok_or(Push::Discarded(ChunkDiscard::TooOld))
    }

    #[inline]
    fn find(&self, chunk_id: i64) -> Option<usize> {
        // Newest first: packets mostly go to the newest chunks.
        self.held.iter().rposition(|h| h.0 == chunk_id)
    }

    #[inline]
    fn epoch(&self) -> u64 {
        self.released
    }

    #[inline]
    fn fits(&self, p: &Placement, heap_length: u64) -> bool {
        let (cfg, stride) = (&self.group.cfg, self.group.stride);
        p.heap_index < cfg.present_len
            && p.heap_offset == p.heap_index * stride
            && heap_length <= stride as u64
    }

    #[inline]
    fn claim(&mut self, h: usize, heap_index: usize, _single: bool) -> Result<(), ChunkDiscard> {
        let chunk = &self.held[h].1;
        match chunk.claim(&self.writer, heap_index) {
            Claim::Claimed => Ok(()),
            // This member's own heap again after it gave up on it (evicted
            // incomplete): placed again, as a single receiver would, unless
            // it is complete already.
            Claim::Mine if !chunk.is_present(heap_index) => Ok(()),
            // Placed already, here or by another member.
            Claim::Mine | Claim::Taken => Err(ChunkDiscard::Duplicate),
            Claim::Invalid => Err(ChunkDiscard::OutOfBounds),
        }
    }

    #[inline]
    fn write(&mut self, h: usize, piece: &Piece<'_>) {
        let (chunk_id, chunk) = &self.held[h];
        if let Some((pkt, base)) = self.defer {
            // The region is claimed now and marked now (a duplicate later in
            // the burst is refused as one); the bytes follow at the burst's
            // end, after the burst's claims (see `Member::push_burst`).
            self.pending.push(Deferred {
                chunk_id: *chunk_id,
                region: piece.heap_index,
                at: piece.offset,
                pkt,
                off: (piece.payload.as_ptr() as usize).wrapping_sub(base),
                len: piece.payload.len(),
            });
            if piece.complete {
                chunk.set_present(&self.writer, piece.heap_index);
            }
            return;
        }
        chunk.write(
            &self.writer,
            piece.heap_index,
            piece.offset,
            piece.payload,
            self.group.cfg.copy,
        );
        if piece.complete {
            chunk.set_present(&self.writer, piece.heap_index);
        }
    }
}

impl Held {
    /// Does the burst's deferred copies (`packets` is the burst) and lets go
    /// of the chunks released meanwhile.
    fn end_burst(&mut self, packets: &[&[u8]]) {
        self.defer = None;
        let mode = self.group.cfg.copy;
        for (i, d) in self.pending.iter().enumerate() {
            if let Some(next) = self.pending.get(i + 2) {
                // The source a few copies on (in the caches already when
                // the burst was placed, unless it was long).
                if let Some(p) = packets.get(next.pkt) {
                    prefetch(p.get(next.off..next.off + next.len).unwrap_or_default());
                }
            }
            let chunk = match self.held.iter().rev().find(|h| h.0 == d.chunk_id) {
                Some(h) => &h.1,
                None => match self.releasing.iter().find(|h| h.0 == d.chunk_id) {
                    Some(h) => &h.1,
                    // Never: a chunk leaves `held` for `releasing` while the
                    // burst's copies are pending.
                    None => {
                        debug_assert!(false, "deferred copy into chunk {} lost", d.chunk_id);
                        continue;
                    }
                },
            };
            // The payload is part of the packet it was placed from (`off`
            // and `len` came from its slice), so this finds it.
            let src = packets.get(d.pkt).and_then(|p| p.get(d.off..d.off + d.len));
            debug_assert!(src.is_some(), "deferred copy's payload outside its packet");
            if let Some(src) = src {
                chunk.write(&self.writer, d.region, d.at, src, mode);
            }
        }
        self.pending.clear();
        if !self.releasing.is_empty() {
            if mode == crate::buf::copy::CopyMode::Stream {
                store_fence();
            }
            self.releasing.clear();
        }
    }

    /// `chunk_id` is the newest chunk asked for: this member's window ends
    /// there. It lets go of what falls out of it and says so to the group
    /// (one store: lossless eviction never waits on what it let go of).
    fn advance(&mut self, chunk_id: i64) {
        self.top = chunk_id;
        let max = self.group.cfg.max_chunks as i64;
        while self.held.front().is_some_and(|h| h.0 <= chunk_id - max) {
            self.release_front();
        }
        let p = &self.group.progress[self.index];
        p.top.store(chunk_id, Ordering::Release);
        p.done.fetch_max(chunk_id - max + 1, Ordering::AcqRel);
    }
}

/// One member of a group: its share of the packets in, payloads into the
/// group's chunks. Runs on one lcore.
pub struct Member<P: Place> {
    chunks: Held,
    heaps: Heaps<P>,
    /// [`Member::finish`] was called.
    finished: bool,
    /// The last [`Member::push_burst`] stalled: the next one offers its
    /// first packet alone.
    stalled: bool,
}

impl<P: Place> std::fmt::Debug for Member<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Member({}, {} held)",
            self.chunks.writer.id(),
            self.chunks.held.len()
        )
    }
}

impl<P: Place> Member<P> {
    /// This member's counters (`chunks`, `present` and `present_slots` are the
    /// group's: see [`ChunkGroup::stats`]).
    pub fn stats(&self) -> &ChunkStats {
        self.heaps.stats()
    }

    /// The placement (to change it between stretches of input).
    pub fn place_mut(&mut self) -> &mut P {
        self.heaps.place_mut()
    }

    /// Chunks this member holds.
    pub fn held(&self) -> usize {
        self.chunks.held.len()
    }

    /// Lets go of chunks the group's window has moved past (lossy eviction).
    /// Call once per burst, and when idle.
    #[inline]
    pub fn sync(&mut self) {
        self.chunks.sync();
        self.heaps.prune(&self.chunks);
    }

    /// This member's index in its group (0 for the first to join).
    pub fn index(&self) -> usize {
        self.chunks.index
    }

    /// The group this member belongs to.
    pub fn group(&self) -> ChunkGroup {
        ChunkGroup {
            inner: self.chunks.group.clone(),
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
        self.heaps.stats_mut().stopped = self.group().stopped();
        let group = self.chunks.group.clone();
        {
            let mut s = group.lock();
            let t = sum_stats([&s.finished, self.heaps.stats()]);
            s.finished = t;
        }
        // The last to finish flushes the window before it counts itself
        // finished, so a consumer that sees every member finished finds the
        // whole window retired.
        let ending = group.ending.fetch_add(1, Ordering::AcqRel) + 1;
        let last = ending >= group.members.load(Ordering::Relaxed);
        if last {
            flush_group(&group);
        }
        group.ended.fetch_add(1, Ordering::AcqRel);
        last
    }

    /// Lets go of every chunk, those given ahead too (at the end of this
    /// member's input); its incomplete heaps are counted as flushed.
    pub fn flush(&mut self) {
        self.chunks.release_all();
        self.heaps.flush();
    }

    /// Offers a burst of packets from `sender`, in order, as [`Member::push`]
    /// would one by one, and stops at the first that stalls (offer it and
    /// the rest again later). Call [`Member::sync`] once per burst, as with
    /// `push`.
    ///
    /// Faster than one by one: each heap's claim is a compare-and-swap, a
    /// full fence on x86 that waits for the previous packet's non-temporal
    /// copy to reach memory and keeps the CPU from running ahead. So a burst
    /// goes in three passes: its whole-heap packets are decoded and placed
    /// first, no fence between them, with the packet [`PREFETCH_AHEAD`]
    /// places on prefetched (DPDK's `rte_prefetch0`); then every packet is
    /// claimed (or placed the full way) in order, its copy deferred; then
    /// the copies. The fence then waits for the previous burst's copies
    /// once. [`Place::place`] is asked about a whole-heap packet before the
    /// packets ahead of it in the burst are placed (the placement must not
    /// depend on the order it is asked in, as katgpucbf's does not). After
    /// a stall, the next call offers its first packet alone, the plain way,
    /// until one goes in: a waiting member does not plan a burst per retry.
    pub fn push_burst(&mut self, sender: u32, packets: &[&[u8]]) -> Pushed {
        let mut out = Pushed {
            taken: packets.len(),
            stopped: false,
        };
        let mut skip = 0;
        if self.stalled {
            // The last burst stalled: offer one packet the plain way until
            // one goes in. A waiting member that planned (decoded and
            // prefetched) its whole burst again on every retry would load
            // the memory the member it waits for is copying with.
            let Some(first) = packets.first() else {
                return out;
            };
            match self.push(sender, first) {
                Push::Stall => {
                    out.taken = 0;
                    return out;
                }
                Push::Stopped => out.stopped = true,
                Push::Accepted | Push::Discarded(_) => {}
            }
            self.stalled = false;
            skip = 1;
        }
        let packets = &packets[skip..];
        let mut plans: [Option<Planned>; BURST_MAX] = [None; BURST_MAX];
        for (base, part) in packets.chunks(BURST_MAX).enumerate() {
            let base = base * BURST_MAX;
            for (i, p) in part.iter().enumerate() {
                if let Some(ahead) = part.get(i + PREFETCH_AHEAD) {
                    prefetch(ahead);
                }
                plans[i] = self.heaps.plan_single(sender, p);
                if let Some(plan) = &plans[i] {
                    // Its claim's line, for the pass of claims.
                    let at = &plan.placement;
                    if let Some(h) = self.chunks.find(at.chunk_id) {
                        self.chunks.held[h].1.prefetch_claim(at.heap_index);
                    }
                }
            }
            for (i, p) in part.iter().enumerate() {
                self.chunks.defer = Some((base + i, p.as_ptr() as usize));
                let r = match &plans[i] {
                    Some(plan) => self.push_planned(sender, p, plan),
                    None => self.push(sender, p),
                };
                match r {
                    Push::Stall => {
                        out.taken = skip + base + i;
                        self.stalled = true;
                        self.chunks.end_burst(packets);
                        return out;
                    }
                    Push::Stopped => out.stopped = true,
                    Push::Accepted | Push::Discarded(_) => {}
                }
            }
            self.chunks.end_burst(packets);
        }
        out
    }

    /// [`Member::push`] of a packet [`Heaps::plan_single`] decoded and
    /// placed already.
    #[inline]
    fn push_planned(&mut self, sender: u32, data: &[u8], plan: &Planned) -> Push {
        self.heaps.stats_mut().packets += 1;
        if let Some((r, _)) = self.heaps.predicted(&mut self.chunks, sender, data) {
            return r;
        }
        if self.finished {
            return self.heaps.discard(ChunkDiscard::AfterStop);
        }
        self.heaps
            .place_at(&mut self.chunks, sender, data, &plan.h, plan.placement)
    }

    /// Offers one packet from `sender`.
    pub fn push(&mut self, sender: u32, data: &[u8]) -> Push {
        self.heaps.stats_mut().packets += 1;
        if let Some((r, _)) = self.heaps.predicted(&mut self.chunks, sender, data) {
            return r;
        }
        let (h, stop) = match self.heaps.decode(data) {
            Ok(x) => x,
            Err(r) => return r,
        };
        if self.finished {
            return self.heaps.discard(ChunkDiscard::AfterStop);
        }
        if stop {
            // One member's stream ended: it lets go of its chunks (so a
            // lossless group never waits for it) and keeps taking packets
            // (on SO_REUSEPORT sockets another sender's may still come); the
            // group ends once it has seen a stop per member.
            self.flush();
            self.chunks.group.stops.fetch_add(1, Ordering::AcqRel);
            return Push::Stopped;
        }
        self.heaps.place_packet(&mut self.chunks, sender, data, &h)
    }
}

/// What [`Member::push_burst`] did with a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// Packets taken (accepted or discarded), from the first; fewer than the
    /// burst when the next one stalled: offer it and the rest again later.
    pub taken: usize,
    /// An end-of-stream heap was among them ([`Push::Stopped`]).
    pub stopped: bool,
}

/// Packets ahead in a burst that [`Member::push_burst`] prefetches (whole
/// packets): 4 read best in `benches/spead_group.rs` (
/// 8 read the same, the header's line alone no better than none).
pub const PREFETCH_AHEAD: usize = 4;

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
mod test;
