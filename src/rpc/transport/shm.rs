//! Shared memory between two processes: both receive rings, both completion rings
//! and the exposed consumer positions in one memmap2 mapping of a file on a
//! hugetlbfs mount when there is one, else in `/dev/shm`.
//!
//! ```text
//! 0     header page: magic, ring size, completion slots, the two info records,
//!       control words (for tools), a ping-pong line, one flag line per side,
//!       the two consumer positions
//!       and the two completion-ring read counters (each in its own 128 bytes)
//! 4096  side 0's receive ring (ring_size bytes)
//!       side 1's receive ring
//!       side 0's completion ring (COMP_SLOTS slots of 128 bytes)
//!       side 1's completion ring
//! ```
//!
//! Side 0 creates the file ([`ShmTransport::create`]), side 1 opens it
//! ([`ShmTransport::open`]). Each side publishes its [`PeerInfo`] in the header;
//! that is the out-of-band exchange.
//!
//! Both sides in one process, as `linerate rpc serve` and `linerate rpc bench`
//! use it from two (the manual's *RPC* chapter shows this example):
//!
//! ```
//! use linerate::rpc::transport::shm::ShmTransport;
//! use linerate::rpc::{Config, Endpoint, Handler, Request};
//!
//! /// Answers every request with its bytes reversed, during the poll that takes it in.
//! struct Reverse(Vec<u8>);
//! impl Handler<()> for Reverse {
//!     fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
//!         self.0 = payload.iter().rev().copied().collect();
//!         Some(&self.0)
//!     }
//!     fn on_request(&mut self, _req: Request, _payload: &[u8]) {}
//!     fn on_response(&mut self, _call_id: u32, _user: (), _payload: &[u8]) {}
//! }
//! /// Keeps the response.
//! struct Keep(Option<Vec<u8>>);
//! impl Handler<()> for Keep {
//!     fn on_request(&mut self, _req: Request, _payload: &[u8]) {}
//!     fn on_response(&mut self, _call_id: u32, _user: (), payload: &[u8]) {
//!         self.0 = Some(payload.to_vec());
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("linerate-doc-rpc-{}", std::process::id()));
//! let mut server_t = ShmTransport::create(&path, 64 * 1024)?; // side 0: the server
//! let mut client_t = ShmTransport::open(&path)?; // side 1, normally another process
//! for t in [&server_t, &client_t] {
//!     t.publish_info(&Config::new(t.ring_size()).local_info()); // the out-of-band record
//! }
//! let peer = |t: &ShmTransport| t.peer_info().ok_or("no peer info");
//! let mut server: Endpoint<()> = Endpoint::new(Config::new(server_t.ring_size()), peer(&server_t)?)?;
//! let mut client: Endpoint<()> = Endpoint::new(Config::new(client_t.ring_size()), peer(&client_t)?)?;
//!
//! client.call(b"request", 64, ())?; // writes the local ring only
//! let (mut reverse, mut keep) = (Reverse(Vec::new()), Keep(None));
//! for _ in 0..100 {
//!     client.poll(&mut client_t, &mut keep)?; // sends the call, takes the response in
//!     server.poll(&mut server_t, &mut reverse)?; // takes the call in, answers, sends
//!     if keep.0.is_some() {
//!         break;
//!     }
//! }
//! assert_eq!(keep.0.as_deref(), Some(&b"tseuqer"[..]));
//! drop((server_t, client_t));
//! std::fs::remove_file(&path)?;
//! # Ok(())
//! # }
//! ```
//!
//! A write-with-immediate puts the bytes into the peer's receive ring and then
//! stores `(sequence << 32) | imm` into the peer's next completion slot with
//! Release ordering; the peer polls that word with Acquire and, seeing the
//! expected sequence, knows the bytes are visible. Writes of up to
//! [`INLINE_MAX`] bytes travel inside the two cache lines of the completion slot
//! instead (each line ends its stores with the tag), and the receiving side
//! copies them to the ring offset named in the slot when it polls: the
//! shared-memory form of a NIC's "data in the completion entry" for small
//! messages, which saves a dependent cache-line transfer per batch. Either way
//! the endpoint sees ring bytes announced by an immediate.
//!
//! The completion ring has [`COMP_SLOTS`] slots; the reader publishes how many
//! it took, and the writer reads that only when its cached copy says the ring is
//! full (then [`TransportError::Busy`] until the peer polls). The consumer
//! position is a Release store and an Acquire load, which is also what keeps the
//! peer from overwriting bytes still being read.
//!
//! Cache lines a depth-1 round trip moves between the two cores (32-byte
//! request and response, so 96-byte batches, carried inline): the two lines of
//! the server's completion slot (call), the two lines of the client's (reply),
//! and rarely the reader's taken count (the writer reads it only when it
//! believes the completion ring full: once per about 7/8 of a ring of writes). The consumer positions are written by their owner and read by the
//! peer only in the fallback; the receive rings are written only by their
//! owner (inline copies) and the send rings are private, so neither moves.
//! The reader polls one word (line 0's tag) and prefetches line 1 and the
//! receive-ring lines the next write will be copied to while it waits; the
//! endpoint warms its send ring's next lines the same way (a lap of a 1 MiB
//! ring is colder than L2). A cache-line ping-pong moves 2 lines per round trip.
//!
//! This is the only file of the RPC module with `unsafe`: raw accesses to the
//! shared mapping.

use super::{Transport, TransportError};
use crate::rpc::endpoint::PeerInfo;
use crate::rpc::ring::check_ring_size;
use memmap2::{MmapMut, MmapOptions};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

const MAGIC: u64 = u64::from_le_bytes(*b"LRRPC001");
const HEADER_SIZE: usize = 4096;
const OFF_MAGIC: usize = 0;
const OFF_RING_SIZE: usize = 8;
const OFF_COMP_ENTRIES: usize = 16;
const OFF_INFO: usize = 256; // 2 x 128: ready, ring_size, initial_credit, max_r
const OFF_CONTROL: usize = 1024; // CONTROL_WORDS x u64
const OFF_PINGPONG: usize = 1536;
const OFF_FLAGS: usize = 1664; // 2 x 128
const OFF_CONSUMER: usize = 2048; // 2 x 128
const OFF_COMP_TAIL: usize = 2304; // 2 x 128
/// Completion slots per side by default. Few slots keep the completion lines
/// hot in both cores' caches: the writer's store to a slot then only has to
/// invalidate the reader's copy (as in a cache-line ping-pong) instead of
/// fetching a line last touched hundreds of writes ago.
pub const COMP_SLOTS: u64 = 256;
/// Fewest and most completion slots a region may have.
pub const COMP_SLOTS_RANGE: std::ops::RangeInclusive<u64> = 4..=4096;
const SLOT_SIZE: usize = 128;
const SLOT_LINE0_DATA: usize = 16;
const SLOT_LINE1_TAG: usize = 64;
const SLOT_LINE1_DATA: usize = 72;
const LINE0_DATA_MAX: usize = 48;
/// Largest write carried inside a completion slot.
pub const INLINE_MAX: usize = LINE0_DATA_MAX + (SLOT_SIZE - SLOT_LINE1_DATA);
const INLINE_FLAG: u64 = 1 << 63;
/// Number of control words tools may use for their own coordination.
pub const CONTROL_WORDS: usize = 16;

/// A shared-memory setup error.
#[derive(Debug, Error)]
pub enum ShmError {
    /// File or mapping failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not (yet) a linerate RPC region.
    #[error("{0}: not a linerate RPC region (not created yet, or another file)")]
    NotReady(PathBuf),
    /// The header disagrees with itself or the file size.
    #[error("{0}: corrupt header")]
    Corrupt(PathBuf),
    /// Bad completion slot count.
    #[error("completion slots {0} must be a power of two in 4..=4096")]
    CompSlots(u64),
    /// Bad ring size.
    #[error(transparent)]
    RingSize(#[from] crate::rpc::ring::BadRingSize),
}

/// The first hugetlbfs mount point in `/proc/mounts`, if any.
pub fn hugetlbfs_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_dev, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        (fstype == "hugetlbfs").then(|| PathBuf::from(dir))
    })
}

/// Where to put a region called `name`: on hugetlbfs when mounted, else `/dev/shm`.
pub fn default_path(name: &str) -> PathBuf {
    hugetlbfs_mount()
        .unwrap_or_else(|| PathBuf::from("/dev/shm"))
        .join(name)
}

#[inline]
fn layout_len(ring_size: u64, comp_slots: u64) -> usize {
    HEADER_SIZE + 2 * ring_size as usize + 2 * comp_slots as usize * SLOT_SIZE
}

/// One side of a shared-memory connection.
#[derive(Debug)]
pub struct ShmTransport {
    map: MmapMut,
    path: PathBuf,
    me: usize,
    ring_size: u64,
    comp_slots: u64,
    send_seq: u64,
    peer_taken: u64,
    recv_seq: u64,
    recv_pos: u64,
    base: *mut u8,
    /// Both receive rings and both completion rings, by side: computed once so
    /// the per-poll address arithmetic is one mask, shift and add.
    rings: [*mut u8; 2],
    slots: [*mut u8; 2],
    /// The taken count is published when `recv_seq & publish_mask == 0`.
    publish_mask: u64,
}

// SAFETY: `base` points into `map`, which the struct owns; every access through
// it is either an atomic or covered by the ring protocol, not by thread affinity.
unsafe impl Send for ShmTransport {}

impl ShmTransport {
    /// Creates (or truncates) the region at `path` for rings of `ring_size` bytes,
    /// as side 0. The length is rounded up to 2 MiB so the file can live on a
    /// hugetlbfs mount with 2 MiB pages.
    pub fn create(path: &Path, ring_size: u64) -> Result<Self, ShmError> {
        Self::create_with(path, ring_size, COMP_SLOTS)
    }

    /// [`create`](Self::create) with `comp_slots` completion slots per side (a
    /// power of two in [`COMP_SLOTS_RANGE`]).
    pub fn create_with(path: &Path, ring_size: u64, comp_slots: u64) -> Result<Self, ShmError> {
        check_ring_size(ring_size)?;
        if !comp_slots.is_power_of_two() || !COMP_SLOTS_RANGE.contains(&comp_slots) {
            return Err(ShmError::CompSlots(comp_slots));
        }
        let io = |source| ShmError::Io {
            path: path.to_owned(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(io)?;
        let len = layout_len(ring_size, comp_slots).next_multiple_of(2 << 20);
        file.set_len(len as u64).map_err(io)?;
        // SAFETY: the file was just created for this purpose; the peer process
        // maps it too, which is why all shared accesses below are atomics or
        // governed by the ring protocol.
        let mut map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(io)?;
        let base = map.as_mut_ptr();
        let mut t = ShmTransport {
            map,
            path: path.to_owned(),
            me: 0,
            ring_size,
            comp_slots,
            send_seq: 0,
            peer_taken: 0,
            recv_seq: 0,
            recv_pos: 0,
            base,
            rings: [base; 2],
            slots: [base; 2],
            publish_mask: 0,
        };
        t.set_layout(ring_size, comp_slots);
        t.word(OFF_RING_SIZE).store(ring_size, Ordering::Relaxed);
        t.word(OFF_COMP_ENTRIES)
            .store(comp_slots, Ordering::Relaxed);
        t.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(t)
    }

    /// Opens the region side 0 created, as side 1. [`ShmError::NotReady`] until
    /// side 0 finished creating it.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let io = |source| ShmError::Io {
            path: path.to_owned(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let file_len = file.metadata().map_err(io)?.len() as usize;
        if file_len < HEADER_SIZE {
            return Err(ShmError::NotReady(path.to_owned()));
        }
        // SAFETY: as in `create`; the length is the file's.
        let mut map = unsafe { MmapOptions::new().len(file_len).map_mut(&file) }.map_err(io)?;
        let base = map.as_mut_ptr();
        let mut t = ShmTransport {
            map,
            path: path.to_owned(),
            me: 1,
            ring_size: 0,
            comp_slots: 0,
            send_seq: 0,
            peer_taken: 0,
            recv_seq: 0,
            recv_pos: 0,
            base,
            rings: [base; 2],
            slots: [base; 2],
            publish_mask: 0,
        };
        if t.word(OFF_MAGIC).load(Ordering::Acquire) != MAGIC {
            return Err(ShmError::NotReady(path.to_owned()));
        }
        let ring_size = t.word(OFF_RING_SIZE).load(Ordering::Relaxed);
        let comp = t.word(OFF_COMP_ENTRIES).load(Ordering::Relaxed);
        if check_ring_size(ring_size).is_err()
            || !comp.is_power_of_two()
            || !COMP_SLOTS_RANGE.contains(&comp)
            || layout_len(ring_size, comp) > file_len
        {
            return Err(ShmError::Corrupt(path.to_owned()));
        }
        t.set_layout(ring_size, comp);
        Ok(t)
    }

    /// Sets the ring size and slot count and the ring and slot bases they
    /// place (the caller checked them against the mapping's length).
    fn set_layout(&mut self, ring_size: u64, comp_slots: u64) {
        self.ring_size = ring_size;
        self.comp_slots = comp_slots;
        self.publish_mask = (comp_slots / 8).max(1) - 1;
        let ring = ring_size as usize;
        let comp = HEADER_SIZE + 2 * ring;
        for side in 0..2 {
            // Inside the mapping: the layout (`layout_len`) fits its length.
            self.rings[side] = self.base.wrapping_add(HEADER_SIZE + side * ring);
            self.slots[side] = self
                .base
                .wrapping_add(comp + side * comp_slots as usize * SLOT_SIZE);
        }
    }

    /// The file backing the region.
    #[inline]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This side: 0 (creator) or 1.
    #[inline]
    pub fn side(&self) -> usize {
        self.me
    }

    /// Ring size in bytes.
    #[inline]
    pub fn ring_size(&self) -> u64 {
        self.ring_size
    }

    #[inline]
    fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= HEADER_SIZE);
        // SAFETY: `off` is an 8-aligned offset inside the header page of the
        // mapping (page-aligned base), which lives as long as `self`; the word is
        // only ever accessed atomically, by both processes.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// Control word `i` (< [`CONTROL_WORDS`]), free for tools to coordinate.
    #[inline]
    pub fn control(&self, i: usize) -> &AtomicU64 {
        self.word(OFF_CONTROL + 8 * (i % CONTROL_WORDS))
    }

    /// A word on its own cache line for a ping-pong baseline between the sides.
    #[inline]
    pub fn pingpong(&self) -> &AtomicU64 {
        self.word(OFF_PINGPONG)
    }

    /// A word on a cache line of its own that only `side` (0 or 1) writes: the
    /// two-line ping-pong, where each side writes its own line and spins on the
    /// peer's, as any write-into-the-peer's-memory transport must.
    #[inline]
    pub fn flag(&self, side: usize) -> &AtomicU64 {
        self.word(OFF_FLAGS + 128 * (side & 1))
    }

    /// Publishes this side's info record.
    #[inline]
    pub fn publish_info(&self, info: &PeerInfo) {
        let o = OFF_INFO + 128 * self.me;
        self.word(o + 8).store(info.ring_size, Ordering::Relaxed);
        self.word(o + 16)
            .store(info.initial_credit, Ordering::Relaxed);
        self.word(o + 24)
            .store(info.max_resp_reservation, Ordering::Relaxed);
        self.word(o).store(1, Ordering::Release);
    }

    /// The peer's info record once it published it.
    #[inline]
    pub fn peer_info(&self) -> Option<PeerInfo> {
        let o = OFF_INFO + 128 * (1 - self.me);
        if self.word(o).load(Ordering::Acquire) != 1 {
            return None;
        }
        Some(PeerInfo {
            ring_size: self.word(o + 8).load(Ordering::Relaxed),
            initial_credit: self.word(o + 16).load(Ordering::Relaxed),
            max_resp_reservation: self.word(o + 24).load(Ordering::Relaxed),
        })
    }

    /// Base of `side`'s receive ring (inside the mapping, see `set_layout`).
    #[inline]
    fn ring_ptr(&self, side: usize) -> *mut u8 {
        self.rings[side & 1]
    }

    /// Base of completion slot `seq` of `side`'s completion ring.
    #[inline]
    fn slot_ptr(&self, side: usize, seq: u64) -> *mut u8 {
        let idx = (seq & (self.comp_slots - 1)) as usize;
        // In bounds: `idx < comp_slots` and the ring lies inside the mapping
        // (its length was checked against the layout).
        self.slots[side & 1].wrapping_add(idx * SLOT_SIZE)
    }

    /// The 8-byte word at `off` of the completion slot at `slot` (from
    /// [`slot_ptr`](Self::slot_ptr)).
    #[inline(always)]
    fn slot_word_in(&self, slot: *mut u8, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= SLOT_SIZE);
        // SAFETY: `slot` is a 128-byte aligned slot inside the mapping, which
        // lives as long as `self`, and `off` an 8-aligned offset within it;
        // these words are only ever accessed atomically, by both processes.
        unsafe { &*(slot.add(off) as *const AtomicU64) }
    }

    #[inline]
    fn consumer_word(&self, side: usize) -> &AtomicU64 {
        self.word(OFF_CONSUMER + 128 * side)
    }

    #[inline]
    fn taken_word(&self, side: usize) -> &AtomicU64 {
        self.word(OFF_COMP_TAIL + 128 * side)
    }

    /// While waiting on the first line of completion slot `slot`, asks for its
    /// second line, so an inline write's two lines travel in parallel, and for
    /// the two lines of this side's receive ring where the next write lands
    /// (the receive position: writes are sequential), so copying an inline
    /// write there does not miss on a line last used a lap ago.
    #[inline(always)]
    fn prefetch_waiting(&self, slot: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let off = (self.recv_pos & (self.ring_size - 1)) as usize & !63;
            let line = self.ring_ptr(self.me).wrapping_add(off);
            // SAFETY: SSE is part of the x86_64 baseline. A prefetch is a hint,
            // not a memory access (no fault, no data race with the peer's
            // writes), and these lines lie inside the slot and the ring, the
            // second ring line at most one line past a ring offset (the next
            // thing in the mapping).
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(slot.wrapping_add(SLOT_LINE1_TAG) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(line as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(64) as *const i8);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Copies an inline write (completion `slot`, tag `v`, info word `info`)
    /// to the receive-ring offset the info word names.
    #[inline(always)]
    fn copy_inline(&self, slot: *mut u8, v: u64, info: u64) -> Result<(), TransportError> {
        let len = (info & 0xffff) as usize;
        let offset = (info & !INLINE_FLAG) >> 16;
        let corrupt = || TransportError::Failed(format!("corrupt inline completion {info:#x}"));
        if len > INLINE_MAX
            || !matches!(offset.checked_add(len as u64), Some(e) if e <= self.ring_size)
        {
            return Err(corrupt());
        }
        let first = len.min(LINE0_DATA_MAX);
        let dst = self.ring_ptr(self.me);
        if len > first {
            if self
                .slot_word_in(slot, SLOT_LINE1_TAG)
                .load(Ordering::Acquire)
                != v
            {
                return Err(corrupt());
            }
            // SAFETY: 56 bytes at most from the slot's second data area (the
            // peer finished it: its tag matched) to `offset + 48..offset + len`
            // of this side's receive ring, in bounds as checked; the ring
            // range belongs to this write until the consumer passes it.
            unsafe {
                copy_piece(
                    slot.add(SLOT_LINE1_DATA),
                    dst.add(offset as usize + first),
                    len - first,
                );
            }
        }
        // SAFETY: at most 48 bytes from the slot's first data area (complete:
        // its tag was read with Acquire) to `offset..offset + 48` of this
        // side's receive ring, in bounds as checked.
        unsafe {
            copy_piece(slot.add(SLOT_LINE0_DATA), dst.add(offset as usize), first);
        }
        Ok(())
    }

    /// The next completion of this side's ring: [`Transport::poll_imm`],
    /// with the waiting prefetches when `PREFETCH` and nothing arrived.
    #[inline(always)]
    fn take_imm<const PREFETCH: bool>(&mut self) -> Result<Option<u32>, TransportError> {
        let seq = self.recv_seq;
        let slot = self.slot_ptr(self.me, seq);
        let v = self.slot_word_in(slot, 0).load(Ordering::Acquire);
        if (v >> 32) as u32 != (seq + 1) as u32 {
            if PREFETCH {
                self.prefetch_waiting(slot);
            }
            return Ok(None);
        }
        let info = self.slot_word_in(slot, 8).load(Ordering::Relaxed);
        if info & INLINE_FLAG != 0 {
            self.copy_inline(slot, v, info)?;
        }
        self.recv_seq += 1;
        self.recv_pos = self.recv_pos.wrapping_add(u64::from(v as u32) * 32);
        // Published every eighth of the ring only: the writer reads it when it
        // believes the ring full, and each read pulls the line from this core.
        if self.recv_seq & self.publish_mask == 0 {
            self.taken_word(self.me)
                .store(self.recv_seq, Ordering::Release);
        }
        Ok(Some(v as u32))
    }

    /// Length of the mapping.
    #[inline]
    pub fn mapped_len(&self) -> usize {
        self.map.len()
    }
}

/// Copies `n` bytes from `src` to `dst` (not overlapping). The pieces of an
/// inline write of a small batch (16 to 64 bytes) go as two overlapping
/// fixed-size moves instead of a `memcpy` call, which is on the round trip at
/// queue depth 1; longer or shorter pieces use `memcpy`.
///
/// # Safety
///
/// `src` must be valid for reading and `dst` for writing `n` bytes.
#[inline(always)]
unsafe fn copy_piece(src: *const u8, dst: *mut u8, n: usize) {
    if (32..=64).contains(&n) {
        // SAFETY: both 32-byte moves lie within `0..n`, readable at `src` and
        // writable at `dst` (the caller's contract); `[u8; 32]` has alignment 1.
        unsafe {
            let a = (src as *const [u8; 32]).read();
            let b = (src.add(n - 32) as *const [u8; 32]).read();
            (dst as *mut [u8; 32]).write(a);
            (dst.add(n - 32) as *mut [u8; 32]).write(b);
        }
    } else if (16..32).contains(&n) {
        // SAFETY: as above, with 16-byte moves within `0..n`.
        unsafe {
            let a = (src as *const [u8; 16]).read();
            let b = (src.add(n - 16) as *const [u8; 16]).read();
            (dst as *mut [u8; 16]).write(a);
            (dst.add(n - 16) as *mut [u8; 16]).write(b);
        }
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

impl Transport for ShmTransport {
    #[inline]
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError> {
        let len = data.len() as u64;
        if !matches!(offset.checked_add(len), Some(e) if e <= self.ring_size) {
            return Err(TransportError::OutOfRange {
                offset,
                len,
                size: self.ring_size,
            });
        }
        let peer = 1 - self.me;
        if self.send_seq - self.peer_taken >= self.comp_slots {
            self.peer_taken = self.taken_word(peer).load(Ordering::Acquire);
            if self.send_seq.wrapping_sub(self.peer_taken) >= self.comp_slots {
                return Err(TransportError::Busy);
            }
        }
        let seq = self.send_seq;
        let tag = (((seq + 1) as u32 as u64) << 32) | u64::from(imm);
        let slot = self.slot_ptr(peer, seq);
        if data.len() <= INLINE_MAX {
            let first = data.len().min(LINE0_DATA_MAX);
            if data.len() > first {
                // SAFETY: at most INLINE_MAX - 48 = 56 bytes into the second
                // line's data area of a slot the peer has released (checked
                // above against its published count); `data` is local memory.
                unsafe {
                    copy_piece(
                        data.as_ptr().add(first),
                        slot.add(SLOT_LINE1_DATA),
                        data.len() - first,
                    );
                }
                self.slot_word_in(slot, SLOT_LINE1_TAG)
                    .store(tag, Ordering::Release);
            }
            // SAFETY: at most 48 bytes into the first line's data area of the
            // same released slot.
            unsafe {
                copy_piece(data.as_ptr(), slot.add(SLOT_LINE0_DATA), first);
            }
            self.slot_word_in(slot, 8)
                .store(INLINE_FLAG | (offset << 16) | len, Ordering::Relaxed);
        } else {
            // SAFETY: `offset + len <= ring_size` was checked, so the destination
            // lies inside the peer's receive ring in the mapping; `data` is local
            // memory, so the ranges do not overlap. By the ring protocol the peer
            // reads this range only after the Release store below announces it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    self.ring_ptr(peer).add(offset as usize),
                    data.len(),
                );
            }
            self.slot_word_in(slot, 8).store(0, Ordering::Relaxed);
        }
        self.slot_word_in(slot, 0).store(tag, Ordering::Release);
        self.send_seq += 1;
        Ok(())
    }

    #[inline(always)]
    fn poll_imm(&mut self) -> Result<Option<u32>, TransportError> {
        self.take_imm::<true>()
    }

    #[inline(always)]
    fn poll_imm_more(&mut self) -> Result<Option<u32>, TransportError> {
        self.take_imm::<false>()
    }

    #[inline]
    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8] {
        if !matches!(offset.checked_add(len), Some(e) if e <= self.ring_size) {
            return &[];
        }
        // SAFETY: the range lies inside this side's receive ring in the mapping,
        // which lives as long as `self`. The endpoint asks only for bytes the
        // peer announced (Acquire on the completion slot) and may not touch until
        // this side publishes a consumer position past them, which it does only
        // after the returned borrow ended. A peer that breaks that protocol can
        // change the bytes under us; the endpoint parses them with bounds checks
        // on every access, so that yields a protocol error, not an out-of-ring access.
        unsafe {
            std::slice::from_raw_parts(self.ring_ptr(self.me).add(offset as usize), len as usize)
        }
    }

    #[inline]
    fn publish_consumer(&mut self, pos: u64) {
        self.consumer_word(self.me).store(pos, Ordering::Release);
    }

    #[inline]
    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError> {
        Ok(Some(
            self.consumer_word(1 - self.me).load(Ordering::Acquire),
        ))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn create_open_write_poll() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ring");
        let mut a = ShmTransport::create(&path, 4096).unwrap();
        let mut b = ShmTransport::open(&path).unwrap();
        assert_eq!(b.ring_size(), 4096);
        assert_eq!(b.side(), 1);
        assert!(b.peer_info().is_none());
        let info = PeerInfo {
            ring_size: 4096,
            initial_credit: 1024,
            max_resp_reservation: 1024,
        };
        a.publish_info(&info);
        assert_eq!(b.peer_info(), Some(info));
        assert_eq!(b.poll_imm().unwrap(), None);
        a.write_with_imm(64, &[1, 2, 3], 2).unwrap();
        a.write_with_imm(4064, &[9; 32], 1).unwrap();
        assert!(a.write_with_imm(4080, &[9; 32], 1).is_err());
        assert_eq!(b.poll_imm().unwrap(), Some(2));
        assert_eq!(b.poll_imm().unwrap(), Some(1));
        assert_eq!(b.poll_imm().unwrap(), None);
        assert_eq!(b.recv_bytes(64, 3), &[1, 2, 3]);
        assert_eq!(b.recv_bytes(4064, 32), &[9; 32]);
        assert!(b.recv_bytes(4064, 64).is_empty());
        b.publish_consumer(96);
        assert_eq!(a.read_remote_consumer().unwrap(), Some(96));
        // Completion slots are reused around the ring.
        for i in 0..600u32 {
            b.write_with_imm(0, &[], i).unwrap();
            assert_eq!(a.poll_imm().unwrap(), Some(i));
        }
        // Inline (up to 104 bytes, in the slot) and not inline (in the ring).
        for len in [1usize, 47, 48, 49, 103, 104, 105, 200] {
            let data: Vec<u8> = (0..len).map(|i| (i * 3 + len) as u8).collect();
            a.write_with_imm(1024, &data, len as u32).unwrap();
            assert_eq!(b.poll_imm().unwrap(), Some(len as u32));
            assert_eq!(b.recv_bytes(1024, len as u64), &data[..], "length {len}");
        }
        // A full completion ring is Busy until the peer polls. The reader
        // publishes its count every eighth of the ring, so the writer may see
        // up to an eighth fewer free slots than there are.
        let mut n = 0u64;
        while a.write_with_imm(0, &[1; 32], n as u32).is_ok() {
            n += 1;
        }
        assert!(
            (COMP_SLOTS - COMP_SLOTS / 8..=COMP_SLOTS).contains(&n),
            "{n}"
        );
        assert_eq!(a.write_with_imm(0, &[1; 32], 0), Err(TransportError::Busy));
        for i in 0..COMP_SLOTS / 8 {
            assert_eq!(b.poll_imm().unwrap(), Some(i as u32));
        }
        a.write_with_imm(0, &[1; 32], 7).unwrap();
    }

    #[test]
    fn open_missing_or_foreign() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        assert!(ShmTransport::open(&path).is_err());
        std::fs::write(&path, vec![0u8; 8192]).unwrap();
        assert!(matches!(
            ShmTransport::open(&path),
            Err(ShmError::NotReady(_))
        ));
    }
}
