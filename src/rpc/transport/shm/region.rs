//! The shm transport's region: where its file goes, the layout of the
//! mapping (see the parent module's doc), and the two ways a side gets it,
//! creating it (side 0) or opening what side 0 created (side 1). The data
//! path, which reads the fields these set up, is in the parent module.

use super::{
    simd, slot, ShmError, ShmTransport, Token, COMP_SLOTS, COMP_SLOTS_RANGE, HEADER_SIZE, MAGIC,
    OFF_COMP_ENTRIES, OFF_MAGIC, OFF_RING_SIZE, OFF_TOKEN_ON, SLOT_SIZE, TOKEN_LINE,
};
use crate::rpc::ring::check_ring_size;
use memmap2::{MmapMut, MmapOptions};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

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
pub(super) fn layout_len(ring_size: u64, comp_slots: u64) -> usize {
    token_offset(ring_size, comp_slots) - TOKEN_IN_PAGE + 4096
}

/// Where the token line sits in its page: the middle, far from the
/// neighbouring pages' hot lines.
const TOKEN_IN_PAGE: usize = 2048;

/// Offset of the token line: alone in the page after the completion rings,
/// away from the header's words that each side stores on every receipt (a
/// precaution against the hardware prefetchers, which work within a page,
/// pulling the peer's lines along with it; not measured to matter).
#[inline]
pub(super) fn token_offset(ring_size: u64, comp_slots: u64) -> usize {
    (HEADER_SIZE + 2 * ring_size as usize + 2 * comp_slots as usize * SLOT_SIZE)
        .next_multiple_of(4096)
        + TOKEN_IN_PAGE
}

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
        Self::create_opts(path, ring_size, comp_slots, TOKEN_LINE)
    }

    /// [`create_with`](Self::create_with), with the token line in use when
    /// `token_line` (see the module doc): side 0 starts with the token, so
    /// the first packed one-line write takes the line and both sides pass
    /// it on from there. Without it neither side ever writes the line.
    pub fn create_opts(
        path: &Path,
        ring_size: u64,
        comp_slots: u64,
        token_line: bool,
    ) -> Result<Self, ShmError> {
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
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(io)?;
        let mut t = ShmTransport::mapped(map, path, 0);
        t.set_layout(ring_size, comp_slots);
        t.token_state = if token_line { Token::Held } else { Token::Off };
        t.word(OFF_TOKEN_ON)
            .store(u64::from(token_line), Ordering::Relaxed);
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
        let map = unsafe { MmapOptions::new().len(file_len).map_mut(&file) }.map_err(io)?;
        let mut t = ShmTransport::mapped(map, path, 1);
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
        t.token_state = match t.word(OFF_TOKEN_ON).load(Ordering::Relaxed) {
            0 => Token::Off,
            1 => Token::Away,
            _ => return Err(ShmError::Corrupt(path.to_owned())),
        };
        t.set_layout(ring_size, comp);
        Ok(t)
    }

    /// Side `me` of the region mapped at `map` (from `path`), before
    /// [`set_layout`](Self::set_layout): nothing sent or taken, the token
    /// line off, every base at the mapping's start.
    fn mapped(mut map: MmapMut, path: &Path, me: usize) -> Self {
        let base = map.as_mut_ptr();
        ShmTransport {
            map,
            path: path.to_owned(),
            me,
            ring_size: 0,
            comp_slots: 0,
            send_seq: 0,
            peer_taken: 0,
            peer_pos: 0,
            send_ref: [0; slot::PACK_MAX],
            recv_ref: [0; slot::PACK_MAX],
            recv_seq: 0,
            recv_pos: 0,
            held: None,
            released: 0,
            base,
            my_ring: base,
            peer_ring: base,
            ring_mask: 0,
            my_slots: base,
            peer_slots: base,
            slot_mask: 0,
            recv_slot: base,
            recv_want: slot::seq_field(0),
            send_slot: base,
            published: 0,
            publish_every: 1,
            token_state: Token::Off,
            via_token: 0,
            token: base,
            codec: simd::Codec::detect(),
            prefetchw: simd::has_prefetchw(),
        }
    }

    /// Sets the ring size and slot count and the ring and slot bases they
    /// place (the caller checked them against the mapping's length).
    fn set_layout(&mut self, ring_size: u64, comp_slots: u64) {
        self.ring_size = ring_size;
        self.comp_slots = comp_slots;
        self.publish_every = comp_slots / 2;
        let ring = ring_size as usize;
        let comp = HEADER_SIZE + 2 * ring;
        // Inside the mapping: the layout (`layout_len`) fits its length.
        let ring_of = |side: usize| self.base.wrapping_add(HEADER_SIZE + side * ring);
        let slots_of = |side: usize| {
            self.base
                .wrapping_add(comp + side * comp_slots as usize * SLOT_SIZE)
        };
        let (me, peer) = (self.me & 1, (1 - self.me) & 1);
        (self.my_ring, self.peer_ring) = (ring_of(me), ring_of(peer));
        (self.my_slots, self.peer_slots) = (slots_of(me), slots_of(peer));
        self.token = self.base.wrapping_add(token_offset(ring_size, comp_slots));
        self.ring_mask = ring_size - 1;
        self.slot_mask = (comp_slots as usize - 1) * SLOT_SIZE;
        self.set_recv_seq(self.recv_seq);
        self.send_slot = self.seq_slot(self.peer_slots, self.send_seq);
    }

    /// Sets the next write to take (and the slot and tag field it has):
    /// `set_layout`, and the tests that start a side mid-stream.
    pub(super) fn set_recv_seq(&mut self, seq: u64) {
        self.recv_seq = seq;
        self.recv_want = slot::seq_field(seq);
        self.recv_slot = self.seq_slot(self.my_slots, seq);
    }
}
