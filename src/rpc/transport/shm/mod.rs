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
//!       side 0's completion ring (COMP_SLOTS slots of 128 bytes, see [`slot`])
//!       side 1's completion ring
//!       a page holding the token line in its middle
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
//! stores a tag (the write's sequence number and the immediate) into the
//! peer's next completion slot with Release ordering; the peer polls that
//! word with Acquire and, seeing the expected sequence, knows the bytes are
//! visible. Small writes travel inside the slot instead ([`slot`] has the
//! layout): only the 64-bit words that differ from the previous such write
//! of the same direction, which both sides remember, in the tag's own cache
//! line (7 words) and, when more changed, the slot's second line (7 more).
//! The receiving side rebuilds the write from them in its copy of the
//! previous write when it polls: the shared-memory form of a NIC's "data
//! in the completion entry", which saves the dependent transfers of the ring
//! lines. Either way the endpoint sees ring bytes announced by an immediate:
//! a rebuilt write is copied to its receive position, except while it is the
//! only write taken and not yet released by a published consumer position
//! (every write at queue depth 1): then the endpoint's read of that range is
//! served from the rebuilt copy itself, and the copy to the ring is made only
//! if another write is taken first (see `Held`). The rebuilt copy's bytes
//! past the flow metadata are stored in 8-byte pieces at 4 mod 8, where the
//! 12-byte message header puts every payload piece, so the endpoint's and
//! its handler's reads of them are forwarded from one store
//! ([`slot::unpack_ref`]).
//! The RPC endpoint's batch of one 32-byte message (96 bytes: flow metadata
//! and the message) changes in at most 7 words from one batch to the next
//! (consumer position, call id, payload), so it is one cache line, tag
//! included.
//!
//! Why the reader sees a whole write: the writer stores the data words
//! (Relaxed atomics), then line 1's tag copy if used (Release), then line 0's
//! tag (Release). A reader whose Acquire load returns the tag synchronizes
//! with that store, so in the Rust (C++20) memory model every store before it
//! happens-before the reader's loads of the data words, which therefore read
//! this write's values (no later write to the slot can exist yet, see
//! below). On x86-64 (TSO) Release stores and Acquire loads are plain moves:
//! stores become visible in program order and loads are not reordered with
//! older loads, so the orderings cost only a compiler barrier. That the tag
//! shares its line with the data changes nothing: the reader may see the line
//! half written, but then it sees the previous tag and waits. A slot is
//! rewritten only after the reader published a taken count past it (a
//! Release store after its last read of the slot, read with Acquire by the
//! writer), so a write never overwrites words still being read.
//!
//! The completion ring has [`COMP_SLOTS`] slots; the reader publishes how many
//! it took, and the writer reads that only when its cached copy says the ring is
//! full (then [`TransportError::Busy`] until the peer polls), and after a
//! write's tag store when the next write would find it so (the load then
//! misses while the writer waits for the answer, not on the round trip). The consumer
//! position is a Release store and an Acquire load, which is also what keeps the
//! peer from overwriting bytes still being read.
//!
//! **The token line** (only in a region created with it,
//! [`ShmTransport::create_opts`], `rpc serve --token-line`): one cache line
//! both directions share. A side *holds the token* when the line holds
//! nothing the peer has not taken: side 0 at the start, then whichever side
//! last took the other's write from the line, until it writes the line
//! itself. Only the holder writes the line, and only a packed write of at
//! most seven changed words (line 0 of a slot, the same codec and the same
//! per-direction reference and sequence numbers); every other write goes to
//! its completion slot as above. So the line is never overwritten unread, and
//! at queue depth 1 (each side answering what it took) all writes pass
//! through it. The tag's kind says which side wrote it (the two directions'
//! sequence numbers are counted separately and may be equal). The reader at
//! sequence `s` looks in slot `s`, and, when the token is away, in the line:
//! exactly one of them can hold write `s`, so order is kept. A slot skipped
//! because its write came through the line keeps an old sequence; when that
//! lags half the 16-bit range the reader stores the skipped write's sequence
//! into it (before publishing the taken count that lets the writer reuse
//! it), so it never comes round to the one expected a lap later. A write to
//! the line needs no free slot and does not read the taken count. The idle
//! poll loads two words while the token is away (the slot's is a line only
//! this side touches at depth 1).
//!
//! Cache lines a depth-1 round trip moves between the two cores (32-byte
//! request and response, so 96-byte batches, packed): line 0 of the server's
//! completion slot (call), line 0 of the client's (reply), and the reader's
//! taken count about once per lap of the completion ring (the writer reads
//! it when it believes the ring full: with 8 slots, once per 8 writes, and
//! the reader's next store pulls it back). Both of those transfers are kept
//! off the round trip: the writer reads the count after a tag store, while
//! it waits for the answer, and the reader publishes it when a poll finds
//! nothing, after its own answer went out (a store waiting for the line
//! would hold the answer's tag store behind it). The consumer positions are written
//! by their owner and read by the peer only in the fallback; the receive
//! rings are written only by their owner (packed copies) and the send rings
//! are private, so neither moves. The reader polls one word (the tag) and
//! prefetches line 1 and the receive-ring lines the next write will be
//! copied to while it waits. A cache-line ping-pong moves 2 lines per round
//! trip, as does this transport's common case. With the token line, the
//! round trip moves that one line twice and nothing else (the taken count is
//! not read). That is not always faster. On this project's AMD EPYC VM it
//! saved about 120 ns a depth-1 round trip when the two cores were far apart
//! (two-line ping-pong about 480 ns: about 475 against 605 ns) and was even
//! with slots when they were close (about 130 ns: 220-250 ns either way; a
//! build with the token paths inlined into `take_imm` and `write_with_imm`
//! was 30-40 ns slower there). The `lines` diagnostic shows the risk:
//! answering in the line the question came in beats a line of one's own each
//! way only when the answer follows at once; with 30 ns of work in between
//! it is 30 ns slower (likely because the answering core must then take the
//! line from the asker, who owns it and keeps reading it, where with a line
//! of its own it only invalidates the asker's copy). Off by default
//! ([`TOKEN_LINE`]) until it is measured on more machines.
//!
//! The region's setup (its file, the layout's offsets, `create` and `open`)
//! is in `region`, the vector word compare in `simd`, the slot codec in
//! [`slot`]; this file keeps the data path: the write, the take, the token
//! line and the header words both sides read.
//!
//! This module and its `region` and `simd` are the only files of the RPC
//! module with `unsafe`: raw accesses to the shared mapping, the mapping
//! itself, and vector and prefetch instructions.

use super::{Transport, TransportError};
use crate::rpc::endpoint::PeerInfo;
use memmap2::MmapMut;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

mod region;
mod simd;
pub mod slot;

pub use region::{default_path, hugetlbfs_mount};

// 002: the token line (a packed write may travel in it instead of a slot).
const MAGIC: u64 = u64::from_le_bytes(*b"LRRPC002");
const HEADER_SIZE: usize = 4096;
const OFF_MAGIC: usize = 0;
const OFF_RING_SIZE: usize = 8;
const OFF_COMP_ENTRIES: usize = 16;
const OFF_TOKEN_ON: usize = 24; // 1: the token line is in use
const OFF_INFO: usize = 256; // 2 x 128: ready, ring_size, initial_credit, max_r
const OFF_CONTROL: usize = 1024; // CONTROL_WORDS x u64
const OFF_PINGPONG: usize = 1536;
const OFF_FLAGS: usize = 1664; // 2 x 128
const OFF_CONSUMER: usize = 2048; // 2 x 128
const OFF_COMP_TAIL: usize = 2304; // 2 x 128
/// Completion slots per side by default. Few slots keep the completion lines
/// hot in both cores' caches: the writer's store to a slot then only has to
/// invalidate the reader's copy (as in a cache-line ping-pong) instead of
/// fetching a line last touched hundreds of writes ago (256 slots measured
/// about 25 ns slower per depth-1 round trip than 4).
pub const COMP_SLOTS: u64 = 8;
/// Fewest and most completion slots a region may have.
pub const COMP_SLOTS_RANGE: std::ops::RangeInclusive<u64> = 4..=4096;
const SLOT_SIZE: usize = slot::SLOT_WORDS * 8;
/// Longest write that may travel inside a completion slot (it does when at
/// most 14 of its words differ from the previous such write, see [`slot`]).
pub const INLINE_MAX: usize = slot::PACK_MAX;
/// Whether [`ShmTransport::create`] and [`create_with`](ShmTransport::create_with)
/// put the token line to use. Off: on this project's AMD EPYC VM it made
/// depth-1 round trips about 120 ns faster when the two cores are far apart
/// (two-line ping-pong ~480 ns) and no faster when they are close (~130 ns),
/// where a build of it was 30-40 ns slower; see the module doc.
pub const TOKEN_LINE: bool = false;
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

/// Who may write the token line, as one side sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// This side: the line holds nothing the peer has not taken (side 0 at
    /// the start; then whoever took the other's token-line write last,
    /// until it writes the line itself).
    Held,
    /// The peer, or this side's own write is in the line: the peer's next
    /// write may arrive there.
    Away,
    /// The region does not use the token line.
    Off,
}

/// A packed write taken into the reference alone: `recv_bytes` serves its
/// range from the reference until the consumer position passes it, and it
/// is copied to the ring only if another write is taken first. At queue
/// depth 1 the copy never happens (each side releases a write, by
/// publishing its consumer position, before the next arrives), which takes
/// the copy of every write off the round trip. Held only when every earlier
/// byte is released, so while a write is held its range is all that the
/// endpoint may ask for.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Ring offset and length (the whole batch the immediate announces).
    off: u64,
    len: u64,
    /// Absolute receive position just past it.
    end: u64,
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
    /// The peer's receive position as the peer computes it (the sum of the
    /// immediates written): a packed write must land there.
    peer_pos: u64,
    /// The previous packed write of each direction (see [`slot`]).
    send_ref: slot::Reference,
    recv_ref: slot::Reference,
    recv_seq: u64,
    recv_pos: u64,
    /// The packed write whose bytes `recv_ref` stands in for, not copied to
    /// the receive ring (see [`Held`]).
    held: Option<Held>,
    /// The consumer position last published (`publish_consumer`): bytes
    /// before it are released.
    released: u64,
    base: *mut u8,
    /// This side's receive ring and the peer's, and `ring_size - 1`: the
    /// per-write and per-poll address arithmetic without the side index.
    my_ring: *mut u8,
    peer_ring: *mut u8,
    ring_mask: u64,
    /// This side's completion ring and the peer's.
    my_slots: *mut u8,
    peer_slots: *mut u8,
    /// Byte offset mask of a completion ring (`(comp_slots - 1) * 128`).
    slot_mask: usize,
    /// The completion slot of write `recv_seq` (this side's ring) and the
    /// sequence field its tag has when it holds that write: kept from one
    /// take to the next, so a poll is one load and one compare (a depth-1
    /// round trip polls four times).
    recv_slot: *mut u8,
    recv_want: u64,
    /// The completion slot of write `send_seq` (the peer's ring).
    send_slot: *mut u8,
    /// The taken count this side last published.
    published: u64,
    /// Receipts after which the taken count is published at once (half
    /// the ring); fewer wait for a poll that finds nothing.
    publish_every: u64,
    /// Who may write the token line.
    token_state: Token,
    /// Writes taken from the token line (a diagnostic).
    via_token: u64,
    /// The token line (inside the mapping, see `set_layout`).
    token: *mut u8,
    /// The slot codec's word compare this CPU runs fastest (see `simd`).
    codec: simd::Codec,
    /// Whether this CPU has `prefetchw` (see `prefetch_for_write`).
    prefetchw: bool,
}

// SAFETY: `base` and every other pointer field (the rings, the completion
// rings and their next slots, the token line)
// point into `map`, which the struct owns (moving the struct does not move the
// mapping); every access through them is either an atomic or covered by the
// ring protocol, not by thread affinity.
unsafe impl Send for ShmTransport {}

impl ShmTransport {
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

    /// Base of completion slot `seq` of `side`'s completion ring (the
    /// tests'; the data path keeps its slots in `recv_slot` and `send_slot`).
    #[cfg(test)]
    fn slot_ptr(&self, side: usize, seq: u64) -> *mut u8 {
        let ring = if side & 1 == self.me {
            self.my_slots
        } else {
            self.peer_slots
        };
        self.seq_slot(ring, seq)
    }

    /// Base of completion slot `seq` of the completion ring at `ring`
    /// (this side's or the peer's), without the side index.
    #[inline(always)]
    fn seq_slot(&self, ring: *mut u8, seq: u64) -> *mut u8 {
        // In bounds as in `slot_ptr`: the mask keeps the offset below
        // `comp_slots * 128`.
        ring.wrapping_add((seq as usize).wrapping_mul(SLOT_SIZE) & self.slot_mask)
    }

    /// The words of the completion slot at `slot` (from [`slot_ptr`](Self::slot_ptr)).
    #[inline(always)]
    fn slot_words(&self, slot: *mut u8) -> &[AtomicU64; slot::SLOT_WORDS] {
        // SAFETY: `slot` is a 128-byte aligned slot of 16 words inside the
        // mapping, which lives as long as `self`; slot words are only ever
        // accessed atomically, by both processes (data words Relaxed, the
        // tags Release/Acquire), so a misbehaving peer cannot cause a data
        // race in this process, only wrong values, which `slot::parse` checks.
        unsafe { &*(slot as *const [AtomicU64; slot::SLOT_WORDS]) }
    }

    /// The token line's eight words: a tag and seven changed words, as
    /// line 0 of a slot.
    #[inline(always)]
    fn token_words(&self) -> &[AtomicU64; 8] {
        // SAFETY: `token` is a 128-byte aligned address inside the mapping
        // (whose length `layout_len` covers the token page), with 128 bytes
        // of its own; as in `slot_words`, the words are only ever accessed
        // atomically, by both processes.
        unsafe { &*(self.token as *const [AtomicU64; 8]) }
    }

    /// How many of the peer's writes this side took from the token line
    /// rather than from a completion slot (a diagnostic: at queue depth 1
    /// with packable writes, all but the first few).
    #[inline]
    pub fn via_token(&self) -> u64 {
        self.via_token
    }

    /// Whether the last write taken is held in the reference (see
    /// [`Held`]): for tests of drivers that must take the endpoint's path.
    #[cfg(test)]
    pub(crate) fn holds_a_write(&self) -> bool {
        self.held.is_some()
    }

    #[inline]
    fn consumer_word(&self, side: usize) -> &AtomicU64 {
        self.word(OFF_CONSUMER + 128 * side)
    }

    #[inline]
    fn taken_word(&self, side: usize) -> &AtomicU64 {
        self.word(OFF_COMP_TAIL + 128 * side)
    }

    /// While waiting on the tag of completion slot `slot`, asks for the
    /// slot's second line (used by writes with more than seven changed
    /// words) and for the two lines of this side's receive ring where the
    /// next write lands (the receive position: writes are sequential), so
    /// copying a packed write there does not miss on a line last used a lap
    /// ago. Not the ring lines when everything taken is released: a packed
    /// write is then held in the reference (see [`Held`]), not copied.
    #[inline(always)]
    fn prefetch_waiting(&self, slot: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let off = (self.recv_pos & self.ring_mask) as usize & !63;
            let line = self.my_ring.wrapping_add(off);
            // SAFETY: SSE is part of the x86_64 baseline. A prefetch is a hint,
            // not a memory access (no fault, no data race with the peer's
            // writes), and these lines lie inside the slot and the ring, the
            // second ring line at most one line past a ring offset (the next
            // thing in the mapping).
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(slot.wrapping_add(64) as *const i8);
                if self.recv_pos != self.released {
                    _mm_prefetch::<_MM_HINT_T0>(line as *const i8);
                    _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(64) as *const i8);
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Asks for line 0 of the completion slot at `slot` in the state a
    /// store needs, before the word compare: the line is the reader's (it
    /// polls the tag there), so the first store would otherwise start that
    /// transfer only after the compare. Measured on the AMD EPYC VM, cores
    /// close: raw 96-byte echo p50 141-150 against 151-160 ns, depth-1 RPC
    /// p50 200 against 210 ns. (Issued when a write is taken in, for the
    /// answer to come, it was slower there: the asker, polling the line,
    /// takes it back before the answer is written.)
    #[inline(always)]
    fn prefetch_for_write(&self, slot: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        if self.prefetchw {
            // SAFETY: `prefetchw` is a hint, not a memory access (no fault,
            // no data race with the peer), on a CPU that has it (`prefetchw`
            // is set only then); `slot` lies inside the mapping.
            unsafe {
                std::arch::asm!("prefetchw [{0}]", in(reg) slot, options(nostack, preserves_flags, readonly));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = slot;
    }

    /// Rebuilds the packed write in completion slot `ptr` (tag `tag`,
    /// announced as `map`, `len`, `count`) at this side's receive position.
    /// `ptr` may be the token line too (its 128 bytes are its own).
    #[inline(always)]
    fn take_packed(
        &mut self,
        ptr: *mut u8,
        tag: u64,
        (map, len, count, imm): (u16, usize, usize, u32),
    ) -> Result<(), TransportError> {
        if count > slot::LINE0_CHANGED
            && self.slot_words(ptr)[slot::LINE1_TAG].load(Ordering::Acquire) != tag
        {
            return Err(TransportError::Failed(format!(
                "corrupt completion slot: line 1 does not repeat tag {tag:#x}"
            )));
        }
        let offset = (self.recv_pos & self.ring_mask) as usize;
        let words: &[AtomicU64; slot::SLOT_WORDS] =
            // SAFETY: as in `slot_words`; the token line too is 128-byte
            // aligned with 128 bytes of its own inside the mapping, accessed
            // only atomically.
            unsafe { &*(ptr as *const [AtomicU64; slot::SLOT_WORDS]) };
        if self.recv_pos == self.released && len == imm as usize * 32 {
            slot::unpack_ref(
                map,
                len,
                |j| words[slot::slot_word(j)].load(Ordering::Relaxed),
                &mut self.recv_ref,
            );
            self.held = Some(Held {
                off: offset as u64,
                len: len as u64,
                end: self.recv_pos.wrapping_add(len as u64),
            });
            return Ok(());
        }
        // SAFETY: `slot::parse` checked `len` against the room from this
        // offset to the ring end, so the range lies inside this side's
        // receive ring in the mapping, which only this side writes while the
        // range is unconsumed (the peer writes only ranges past the consumer
        // position, and this one is ahead of it); nothing else borrows it
        // (the endpoint asks for ring bytes only after the poll).
        let out = unsafe { std::slice::from_raw_parts_mut(self.my_ring.add(offset), len) };
        // The slot words stay valid beside `&mut self.recv_ref`: they live in
        // the mapping, not in `self`.
        slot::unpack(
            map,
            len,
            |j| words[slot::slot_word(j)].load(Ordering::Relaxed),
            &mut self.recv_ref,
            out,
        );
        Ok(())
    }

    /// The next completion: [`Transport::poll_imm`], with the waiting
    /// prefetches when `PREFETCH` and nothing arrived. Write `recv_seq` is
    /// in this side's completion slot for it or, when this side does not
    /// hold the token, possibly in the token line.
    #[inline(always)]
    fn take_imm<const PREFETCH: bool>(&mut self) -> Result<Option<u32>, TransportError> {
        let slot_ptr = self.recv_slot;
        let slot_tag = self.slot_words(slot_ptr)[0].load(Ordering::Acquire);
        if slot::seq_bits(slot_tag) != self.recv_want {
            // The peer writes the token line only while it holds the token,
            // so unless the token is away nothing can arrive there.
            if self.token_state == Token::Away {
                return self.take_token::<PREFETCH>(slot_ptr, slot_tag);
            }
            if PREFETCH {
                self.idle(slot_ptr);
            }
            return Ok(None);
        }
        self.take_at(slot_ptr, slot_tag)
    }

    /// [`take_imm`](Self::take_imm) when write `recv_seq` is not in its
    /// slot (tag `slot_tag` at `slot_ptr`) and the token is away: the write
    /// may be in the token line. Not inlined, so a region without the token
    /// line keeps `take_imm` as small as before the line existed.
    #[inline(never)]
    fn take_token<const PREFETCH: bool>(
        &mut self,
        slot_ptr: *mut u8,
        slot_tag: u64,
    ) -> Result<Option<u32>, TransportError> {
        let seq = self.recv_seq;
        let token = self.token_words()[0].load(Ordering::Acquire);
        if !slot::token_holds(token, seq, 1 - self.me) {
            if PREFETCH {
                self.idle(slot_ptr);
            }
            return Ok(None);
        }
        if slot::stale(slot_tag, seq) {
            // The skipped slot gets this write's sequence (which the reader
            // never asks for again), so its field never comes round to
            // the one expected a lap later. Before the taken count that
            // lets the writer reuse the slot (Release in `take_at`).
            self.slot_words(slot_ptr)[0].store(slot::seq_field(seq), Ordering::Relaxed);
        }
        self.token_state = Token::Held;
        self.via_token += 1;
        // The tag stored back unchanged (only this side may write the
        // line now, and the peer looks for a tag of this side's): the
        // line becomes this core's at once, while the peer keeps reading
        // it, so the next write here finds a line it owns instead of
        // taking it from the peer on the round trip. Measured: raw echo
        // 180 against 200 ns (cores close), 260-300 against 380 (far).
        self.token_words()[0].store(token, Ordering::Relaxed);
        // A token-line tag claiming more than seven words is refused by
        // `take_packed`: the line's second 64 bytes, where a slot has
        // the tag's copy, are never written.
        self.take_at(self.token, slot::from_token(token))
    }

    /// Takes the write announced by `tag` in the slot or token line at
    /// `ptr` (which holds write `recv_seq`).
    #[inline(always)]
    fn take_at(&mut self, ptr: *mut u8, tag: u64) -> Result<Option<u32>, TransportError> {
        // A held write goes to the ring before another write is taken: the
        // endpoint may then ask for both at once, and the reference is about
        // to change.
        self.release_held();
        let room = self.ring_size - (self.recv_pos & self.ring_mask);
        let imm = match slot::parse(tag, room) {
            Ok(slot::Announce::Ring { imm }) => imm,
            Ok(slot::Announce::Packed {
                imm,
                len,
                map,
                count,
            }) => {
                self.take_packed(ptr, tag, (map, len, count, imm))?;
                imm
            }
            Err(slot::BadTag(t)) => {
                return Err(TransportError::Failed(format!(
                    "corrupt completion slot tag {t:#x}"
                )))
            }
        };
        self.recv_seq += 1;
        self.recv_want = self.recv_want.wrapping_add(slot::SEQ_ONE);
        self.recv_slot = self.seq_slot(self.my_slots, self.recv_seq);
        self.recv_pos = self.recv_pos.wrapping_add(u64::from(imm) * 32);
        if self.recv_seq.wrapping_sub(self.published) >= self.publish_every {
            self.publish_taken();
        }
        Ok(Some(imm))
    }

    /// Copies a held write (see [`Held`]) from the reference to its place in
    /// the receive ring.
    #[inline(always)]
    fn release_held(&mut self) {
        if let Some(h) = self.held.take() {
            // SAFETY: `h` was a packed write's range, which `slot::parse`
            // checked against the room to the ring end, so it lies inside
            // this side's receive ring in the mapping; it is not released
            // (the peer does not write it) and nothing borrows it: while
            // held, `recv_bytes` served it from the reference. `recv_ref`
            // is local memory of `PACK_MAX >= h.len` bytes, so no overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.recv_ref.as_ptr(),
                    self.my_ring.add(h.off as usize),
                    (h.len as usize).min(slot::PACK_MAX),
                );
            }
        }
    }

    /// Publishes the taken count (Release: after this side's last read of
    /// the slots it frees). Done by the first poll that finds nothing (see
    /// [`idle`](Self::idle)), or at once when half the ring waits for it.
    #[inline(always)]
    fn publish_taken(&mut self) {
        self.published = self.recv_seq;
        self.taken_word(self.me)
            .store(self.recv_seq, Ordering::Release);
    }

    /// A first poll found nothing (the slot at `slot_ptr` does not yet hold
    /// the next write): publishes the taken count if it moved and
    /// prefetches what the next write needs. The count waits for this: the
    /// writer reads it about once a lap of the ring, which takes its line
    /// from this core, and a store to the line then holds every later store
    /// of this core (x86-64 keeps stores in order) until the line is back.
    /// Stored at intake, it held the answer's tag store; stored here, after
    /// the answer went out, it holds nothing that waits.
    #[inline(always)]
    fn idle(&mut self, slot_ptr: *mut u8) {
        if self.published != self.recv_seq {
            self.publish_taken();
        }
        self.prefetch_waiting(slot_ptr);
    }

    /// Writes the next write (at the peer's receive position, word map
    /// `map` from [`slot::plan_by`], one line: [`slot::one_line`]) into the
    /// token line, which this side holds. Needs no free completion slot (the
    /// taken count is not read): the token line is free because the peer
    /// took what it last held, the write of its own that handed this side
    /// the token. Not inlined, so a region without the token line keeps
    /// `write_with_imm` as small as before the line existed.
    #[inline(never)]
    fn write_token(&mut self, data: &[u8], imm: u32, map: u64) {
        let seq = self.send_seq;
        // The line lives in the mapping, not in `self`, so it stays
        // borrowed beside `self.send_ref`.
        // SAFETY: as in `token_words`.
        let words: &[AtomicU64; 8] = unsafe { &*(self.token as *const [AtomicU64; 8]) };
        let (tag, _) = slot::emit(seq, data, imm, map, &mut self.send_ref, |j, w| {
            words[slot::slot_word(j) & 7].store(w, Ordering::Relaxed)
        });
        // Last, with Release, as a slot's tag (see the module doc). Until the
        // peer takes it the line is the peer's: this side writes the next
        // writes into slots.
        words[0].store(slot::token_tag(tag, self.me), Ordering::Release);
        self.token_state = Token::Away;
        self.sent(imm);
    }

    /// Counts a write of immediate `imm` as sent (its tag stored).
    #[inline(always)]
    fn sent(&mut self, imm: u32) {
        self.send_seq += 1;
        self.send_slot = self.seq_slot(self.peer_slots, self.send_seq);
        self.peer_pos = self.peer_pos.wrapping_add(u64::from(imm) * 32);
    }

    /// The word map of a write ([`slot::plan_by`] with this CPU's compare),
    /// or `None` when it does not travel packed (see
    /// [`at_peer_pos`](Self::at_peer_pos)). For the token line, which picks
    /// the line or a slot by the map's count; computed once for either (it
    /// changes nothing, so a write refused as Busy only cost the compare).
    #[inline(always)]
    fn plan(&self, offset: u64, data: &[u8], imm: u32) -> Option<u64> {
        if !self.at_peer_pos(offset) {
            return None;
        }
        self.codec.plan(data, imm, &self.send_ref)
    }

    /// Whether a write at `offset` may travel packed: a packed write lands at
    /// the peer's receive position, so only a write there may travel in a
    /// slot or the token line (the endpoint's writes always do).
    #[inline(always)]
    fn at_peer_pos(&self, offset: u64) -> bool {
        offset == self.peer_pos & self.ring_mask
    }

    /// [`Transport::write_with_imm`] in a region with the token line (its
    /// range checked): into the line when this side holds it and the write
    /// packs into one line, else into a slot. Not inlined, as the other
    /// token paths.
    #[inline(never)]
    fn write_token_region(
        &mut self,
        offset: u64,
        data: &[u8],
        imm: u32,
    ) -> Result<(), TransportError> {
        if self.token_state != Token::Held {
            self.prefetch_for_write(self.send_slot);
        }
        let plan = self.plan(offset, data, imm);
        if self.token_state == Token::Held {
            if let Some(map) = plan.filter(|&m| slot::one_line(data.len(), m)) {
                self.write_token(data, imm, map);
                return Ok(());
            }
        }
        self.write_slot(offset, data, imm, plan)
    }

    /// Writes a write (its range checked; word map `plan` from
    /// [`plan`](Self::plan)) into completion slot `send_seq` of the peer,
    /// packed or with its bytes copied into the peer's receive ring. Busy,
    /// having written nothing, when the slot is not free.
    #[inline(always)]
    fn write_slot(
        &mut self,
        offset: u64,
        data: &[u8],
        imm: u32,
        plan: Option<u64>,
    ) -> Result<(), TransportError> {
        let peer = 1 - self.me;
        if self.send_seq - self.peer_taken >= self.comp_slots {
            self.peer_taken = self.taken_word(peer).load(Ordering::Acquire);
            if self.send_seq.wrapping_sub(self.peer_taken) >= self.comp_slots {
                return Err(TransportError::Busy);
            }
        }
        // The slot is free: the peer published a taken count past its
        // previous write (Acquire above, Release at the peer after its last
        // read of the slot). The slot words live in the mapping, not in
        // `self`, so they stay borrowed beside `self.send_ref`.
        // SAFETY: as in `slot_words`.
        let words: &[AtomicU64; slot::SLOT_WORDS] =
            unsafe { &*(self.send_slot as *const [AtomicU64; slot::SLOT_WORDS]) };
        let seq = self.send_seq;
        let packed = plan.map(|map| {
            slot::emit(seq, data, imm, map, &mut self.send_ref, |j, w| {
                words[slot::slot_word(j)].store(w, Ordering::Relaxed)
            })
        });
        let tag = match packed {
            Some((tag, count)) => {
                if slot::two_lines(count) {
                    words[slot::LINE1_TAG].store(tag, Ordering::Release);
                }
                tag
            }
            None => {
                // SAFETY: `offset + len <= ring_size` was checked, so the
                // destination lies inside the peer's receive ring in the
                // mapping; `data` is local memory, so the ranges do not
                // overlap. By the ring protocol the peer reads this range only
                // after the Release store below announces it.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        self.peer_ring.add(offset as usize),
                        data.len(),
                    );
                }
                slot::ring_tag(seq, imm)
            }
        };
        // Last, with Release: the reader's Acquire load of this word makes
        // every store above visible to it (see the module doc).
        words[0].store(tag, Ordering::Release);
        self.sent(imm);
        // When the next write would find the ring full by the cached count,
        // the peer's count is read now, after the tag store, instead of in
        // that write before its stores: the load misses (the reader's line)
        // while this side waits for the answer, not on the round trip, which
        // at queue depth 1 it lengthened once every lap of the ring.
        if self.send_seq.wrapping_sub(self.peer_taken) >= self.comp_slots {
            self.peer_taken = self.taken_word(peer).load(Ordering::Acquire);
        }
        Ok(())
    }

    /// Length of the mapping.
    #[inline]
    pub fn mapped_len(&self) -> usize {
        self.map.len()
    }
}

impl Transport for ShmTransport {
    #[inline(always)]
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError> {
        let len = data.len() as u64;
        if !matches!(offset.checked_add(len), Some(e) if e <= self.ring_size) {
            return Err(TransportError::OutOfRange {
                offset,
                len,
                size: self.ring_size,
            });
        }
        // A region with the token line takes its own path, out of line, so
        // this one (every region by default) tests the state once.
        if self.token_state != Token::Off {
            return self.write_token_region(offset, data, imm);
        }
        self.prefetch_for_write(self.send_slot);
        let plan = self.plan(offset, data, imm);
        self.write_slot(offset, data, imm, plan)
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
        // A held write's range is served from the reference (see `Held`):
        // the endpoint asks for exactly that range, a part of it is served
        // from the same bytes.
        if let Some(h) = self.held {
            if offset == h.off && len == h.len {
                return self.recv_ref.get(..h.len as usize).unwrap_or(&[]);
            }
            if offset >= h.off && offset.saturating_add(len) <= h.off + h.len {
                let o = (offset - h.off) as usize;
                return self.recv_ref.get(o..o + len as usize).unwrap_or(&[]);
            }
        }
        // `offset + len <= ring_size` without an overflow.
        if len > self.ring_size || offset > self.ring_size - len {
            return &[];
        }
        // SAFETY: the range lies inside this side's receive ring in the mapping,
        // which lives as long as `self`. The endpoint asks only for bytes the
        // peer announced (Acquire on the completion slot) and may not touch until
        // this side publishes a consumer position past them, which it does only
        // after the returned borrow ended. A peer that breaks that protocol can
        // change the bytes under us; the endpoint parses them with bounds checks
        // on every access, so that yields a protocol error, not an out-of-ring access.
        unsafe { std::slice::from_raw_parts(self.my_ring.add(offset as usize), len as usize) }
    }

    #[inline]
    fn publish_consumer(&mut self, pos: u64) {
        self.consumer_word(self.me).store(pos, Ordering::Release);
        // Released bytes are never asked for again: a held write past here
        // needs no copy.
        self.released = pos;
        if matches!(self.held, Some(h) if pos >= h.end) {
            self.held = None;
        }
    }

    #[inline]
    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError> {
        Ok(Some(
            self.consumer_word(1 - self.me).load(Ordering::Acquire),
        ))
    }
}

#[cfg(test)]
mod test;
