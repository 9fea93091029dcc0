//! A chunk that several threads fill at once, each heap by the one writer that
//! claimed it (a SPEAD receive group's members on their lcores).
//!
//! The chunk's data is cut into regions of `stride` bytes, one per `present`
//! entry. A writer claims a region with one compare-and-swap on its owner word
//! (tagged with the chunk's generation, so a recycled chunk needs no clearing);
//! only the owner may copy into the region and mark it present, in a bitmap
//! row of its own ([`Slots`]). Whoever holds
//! the chunk holds an `Arc` of it: when the group gets it back with
//! [`Arc::try_unwrap`](std::sync::Arc::try_unwrap), no writer is left and [`SharedChunk::into_parts`]
//! hands out the plain data and `present` map (the writers' stores are
//! visible then: dropping an `Arc` releases, `try_unwrap` acquires).

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::DerefMut;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use super::copy::{copy, prefetch_of, CopyMode};

/// One writer of a group. Not `Clone` and not `Sync`, so two threads never
/// write as the same writer; its id is unique within its group, and the group
/// token keeps writers of one group away from another group's chunks.
#[derive(Debug)]
pub struct Writer {
    group: u64,
    id: u8,
    _not_sync: PhantomData<Cell<()>>,
}

impl Writer {
    /// This writer's id within its group (1..=255).
    pub fn id(&self) -> u8 {
        self.id
    }
}

/// Makes the writers of one group.
#[derive(Debug)]
pub struct WriterSet {
    group: u64,
    next: u8,
}

impl Default for WriterSet {
    fn default() -> Self {
        static GROUPS: AtomicU64 = AtomicU64::new(1);
        WriterSet {
            group: GROUPS.fetch_add(1, Ordering::Relaxed),
            next: 1,
        }
    }
}

impl WriterSet {
    /// A new writer of this group (at most 255).
    pub fn writer(&mut self) -> Option<Writer> {
        let id = self.next;
        self.next = self.next.checked_add(1)?;
        Some(Writer {
            group: self.group,
            id,
            _not_sync: PhantomData,
        })
    }

    /// A chunk for this group's writers.
    pub fn chunk<B: DerefMut<Target = [u8]>>(
        &self,
        data: B,
        present_len: usize,
        stride: usize,
    ) -> SharedChunk<B> {
        SharedChunk::new(self.group, data, Slots::new(present_len), stride)
    }

    /// A chunk for this group's writers on recycled `slots`, one per
    /// region: a new generation of them, so nothing is cleared.
    pub fn chunk_on<B: DerefMut<Target = [u8]>>(
        &self,
        data: B,
        slots: Slots,
        stride: usize,
    ) -> SharedChunk<B> {
        SharedChunk::new(self.group, data, slots, stride)
    }
}

/// Writer ids (1..=255) and the unused 0: one `present` row each.
const ROWS: usize = 256;

/// A chunk's per-region owners and its writers' `present` rows, kept to be
/// reused by the next chunk (a chunk's worth of cache lines is not allocated
/// per chunk) and never cleared: each use is a new generation.
///
/// - An owner word is `generation << 8 | writer id`: a word of an older
///   generation is free, so recycling the slots clears nothing.
/// - Each writer marks heaps present in a bitmap of its own (a row of its
///   own cache lines, `present_len` bits and a word saying which generation
///   the row holds). A writer resets its row when it first claims a region
///   in a new generation; whoever takes the chunk ORs the rows of the
///   writers that claimed in it (256 bytes each for 2048 regions) where it
///   would otherwise read and clear a line per region.
pub struct Slots {
    owners: Box<[Owner]>,
    /// `ROWS` rows of `row_words` words: `present_len` bits, then the
    /// generation the row belongs to.
    rows: Box<[Line]>,
    /// Words per row (a whole number of lines).
    row_words: usize,
    /// Words of `present` bits per row.
    bit_words: usize,
    /// The current generation (1 for the first chunk: owner 0 is free).
    gen: u64,
    /// The highest writer id that claimed a region in any generation (the
    /// rows past it were never used).
    top_writer: AtomicU8,
}

impl Slots {
    /// Slots for `regions` regions, none claimed.
    pub fn new(regions: usize) -> Slots {
        let bit_words = regions.div_ceil(64);
        let row_words = (bit_words + 1).div_ceil(8) * 8;
        Slots {
            owners: (0..regions).map(|_| Owner::default()).collect(),
            rows: (0..ROWS * row_words / 8).map(|_| Line::default()).collect(),
            row_words,
            bit_words,
            gen: 0,
            top_writer: AtomicU8::new(0),
        }
    }

    /// Regions.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Word `i` of writer `w`'s row.
    #[inline]
    fn word(&self, w: u8, i: usize) -> &AtomicU64 {
        let at = w as usize * self.row_words + i;
        &self.rows[at / 8].0[at % 8]
    }

    /// Whether writer `w`'s row holds this generation.
    #[inline]
    fn row_live(&self, w: u8) -> bool {
        self.word(w, self.bit_words).load(Ordering::Relaxed) == self.gen
    }

    /// Starts writer `w`'s row for this generation (only `w` writes its row).
    fn start_row(&self, w: u8) {
        for i in 0..self.bit_words {
            self.word(w, i).store(0, Ordering::Relaxed);
        }
        self.word(w, self.bit_words)
            .store(self.gen, Ordering::Relaxed);
        self.top_writer.fetch_max(w, Ordering::Relaxed);
    }

    /// The writers whose rows hold this generation.
    fn live_rows(&self) -> impl Iterator<Item = u8> + '_ {
        (1..=self.top_writer.load(Ordering::Relaxed)).filter(|&w| self.row_live(w))
    }

    /// The `present` map of this generation: the writers' rows ORed.
    fn present(&self) -> Vec<u8> {
        let mut present = vec![0u8; self.owners.len()];
        // In blocks of 64 words (4096 regions): no allocation but the map.
        let mut bits = [0u64; 64];
        for block in (0..self.bit_words).step_by(64) {
            let words = (self.bit_words - block).min(64);
            bits[..words].fill(0);
            for w in self.live_rows() {
                for (i, b) in bits[..words].iter_mut().enumerate() {
                    *b |= self.word(w, block + i).load(Ordering::Relaxed);
                }
            }
            for (i, &b) in bits[..words].iter().enumerate() {
                let mut b = b;
                while b != 0 {
                    present[(block + i) * 64 + b.trailing_zeros() as usize] = 1;
                    b &= b - 1;
                }
            }
        }
        present
    }
}

/// A region's owner word, on a cache line of its own: neighbouring regions
/// usually belong to different writers (heaps of interleaved antennas), and
/// sharing a line would move it between their cores on every claim.
#[repr(align(64))]
#[derive(Default)]
struct Owner(AtomicU64);

/// One cache line of a writer's `present` row.
#[repr(align(64))]
#[derive(Default)]
struct Line([AtomicU64; 8]);

/// Why a write was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The region is now this writer's.
    Claimed,
    /// It already was.
    Mine,
    /// Another writer has it.
    Taken,
    /// No such region (or a writer of another group).
    Invalid,
}

/// A chunk of a group: data regions, their owners and their `present` map.
pub struct SharedChunk<B> {
    group: u64,
    /// Boxed, so the memory `B` derefs to stays put when the chunk moves.
    data: Box<UnsafeCell<B>>,
    /// Base and length of the data, read once: `B` is not touched again
    /// until `into_parts`.
    base: *mut u8,
    len: usize,
    stride: usize,
    slots: Slots,
}

// SAFETY: the data behind `base` is written only through `write`, by the one
// writer that owns the region (claimed with a compare-and-swap, writers are not
// `Sync`), and read only after `into_parts` took the chunk by value.
unsafe impl<B: Send> Sync for SharedChunk<B> {}
// SAFETY: the raw pointer points to the memory `B` (boxed, never moved or
// touched until `into_parts`) derefs to; `B: Send` moves that memory's owner.
unsafe impl<B: Send> Send for SharedChunk<B> {}

impl<B: DerefMut<Target = [u8]>> SharedChunk<B> {
    fn new(group: u64, data: B, mut slots: Slots, stride: usize) -> Self {
        // A new generation: every owner word and row of the last is stale.
        slots.gen += 1;
        let data = Box::new(UnsafeCell::new(data));
        // SAFETY: the only access to `data` until `into_parts`, which takes
        // the chunk by value.
        let slice: &mut [u8] = unsafe { &mut *data.get() };
        let (base, len) = (slice.as_mut_ptr(), slice.len());
        SharedChunk {
            group,
            data,
            base,
            len,
            stride: stride.max(1),
            slots,
        }
    }

    /// Regions (`present` entries).
    pub fn regions(&self) -> usize {
        self.slots.len()
    }

    /// Bytes per region.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The owner word `w` writes into a region it claims.
    #[inline]
    fn tag(&self, w: &Writer) -> u64 {
        self.slots.gen << 8 | u64::from(w.id)
    }

    /// Whether `w` owns region `r` in this generation.
    #[inline]
    fn owns(&self, w: &Writer, r: usize) -> bool {
        w.group == self.group
            && self
                .slots
                .owners
                .get(r)
                .is_some_and(|o| o.0.load(Ordering::Relaxed) == self.tag(w))
    }

    /// Prefetches region `r`'s owner word, to be claimed soon.
    #[inline]
    pub fn prefetch_claim(&self, r: usize) {
        if let Some(o) = self.slots.owners.get(r) {
            prefetch_of(o);
        }
    }

    /// Claims region `r` for `w`.
    #[inline]
    pub fn claim(&self, w: &Writer, r: usize) -> Claim {
        let Some(o) = self.slots.owners.get(r).filter(|_| w.group == self.group) else {
            return Claim::Invalid;
        };
        let tag = self.tag(w);
        let mut cur = o.0.load(Ordering::Relaxed);
        loop {
            if cur == tag {
                return Claim::Mine;
            }
            if cur >> 8 == self.slots.gen {
                return Claim::Taken;
            }
            // An older generation's owner: free.
            match o
                .0
                .compare_exchange(cur, tag, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(x) => cur = x,
            }
        }
        if !self.slots.row_live(w.id) {
            self.slots.start_row(w.id);
        }
        Claim::Claimed
    }

    /// Copies `src` to byte `at` of region `r`, which `w` must own; false (and
    /// nothing written) otherwise or when it does not fit the region.
    #[inline]
    pub fn write(&self, w: &Writer, r: usize, at: usize, src: &[u8], mode: CopyMode) -> bool {
        let start = r * self.stride + at;
        let fits = at
            .checked_add(src.len())
            .is_some_and(|end| end <= self.stride)
            && start + src.len() <= self.len;
        if !(fits && self.owns(w, r)) {
            return false;
        }
        // SAFETY: `start..start + len` lies inside the data (checked) and inside
        // region `r`, which only `w` may write: `w` owns it in this generation
        // (claimed by compare-and-swap, ids unique in the group) and, not being
        // `Sync`, is used by one thread. Nobody reads the data until
        // `into_parts`, which needs the chunk by value.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.base.add(start), src.len()) };
        copy(mode, dst, src);
        true
    }

    /// Marks region `r` present (only its owner may), in the owner's own row.
    #[inline]
    pub fn set_present(&self, w: &Writer, r: usize) -> bool {
        let owned = self.owns(w, r);
        if owned {
            // Only `w` writes its row: a load and a store, no locked RMW.
            let word = self.slots.word(w.id, r / 64);
            let v = word.load(Ordering::Relaxed);
            word.store(v | 1 << (r % 64), Ordering::Relaxed);
        }
        owned
    }

    /// Whether any region was claimed (read once no writer is left, it says
    /// whether anything was placed in the chunk at all): whether any
    /// writer's row holds this generation.
    pub fn claimed(&self) -> bool {
        self.slots.live_rows().next().is_some()
    }

    /// Whether region `r` is marked present.
    #[inline]
    pub fn is_present(&self, r: usize) -> bool {
        let Some(o) = self.slots.owners.get(r) else {
            return false;
        };
        let owner = o.0.load(Ordering::Relaxed);
        let w = owner as u8;
        owner >> 8 == self.slots.gen
            && self.slots.row_live(w)
            && self.slots.word(w, r / 64).load(Ordering::Relaxed) >> (r % 64) & 1 != 0
    }

    /// The data and the `present` map, the chunk taken by value.
    pub fn into_parts(self) -> (B, Vec<u8>) {
        let (data, present, _) = self.into_parts_keep();
        (data, present)
    }

    /// [`SharedChunk::into_parts`], keeping the slots for the next chunk
    /// ([`WriterSet::chunk_on`]): the writers' rows are read, nothing is
    /// cleared.
    pub fn into_parts_keep(self) -> (B, Vec<u8>, Slots) {
        let present = self.slots.present();
        let cell = *self.data;
        (cell.into_inner(), present, self.slots)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn only_the_owner_writes_its_region() {
        let mut set = WriterSet::default();
        let (a, b) = (set.writer().unwrap(), set.writer().unwrap());
        let c = set.chunk(vec![0u8; 32], 4, 8);
        assert_eq!(c.claim(&a, 1), Claim::Claimed);
        assert_eq!(c.claim(&a, 1), Claim::Mine);
        assert_eq!(c.claim(&b, 1), Claim::Taken);
        assert_eq!(c.claim(&b, 4), Claim::Invalid);
        assert!(!c.write(&b, 1, 0, &[9; 8], CopyMode::Plain));
        assert!(
            !c.write(&a, 1, 4, &[9; 8], CopyMode::Plain),
            "past the region"
        );
        assert!(c.write(&a, 1, 0, &[7; 8], CopyMode::Plain));
        assert!(!c.set_present(&b, 1));
        assert!(c.set_present(&a, 1));
        let mut other = WriterSet::default();
        let stranger = other.writer().unwrap();
        assert_eq!(c.claim(&stranger, 2), Claim::Invalid);
        let (data, present) = c.into_parts();
        assert_eq!(&data[8..16], &[7; 8]);
        assert_eq!(present, vec![0, 1, 0, 0]);
    }

    #[test]
    fn recycled_slots_start_empty_without_clearing() {
        let mut set = WriterSet::default();
        let (a, b) = (set.writer().unwrap(), set.writer().unwrap());
        let c = set.chunk(vec![0u8; 64 * 130], 130, 64);
        for r in [0, 1, 64, 129] {
            assert_eq!(c.claim(&a, r), Claim::Claimed);
            assert!(c.set_present(&a, r));
        }
        assert_eq!(c.claim(&b, 2), Claim::Claimed);
        assert!(c.claimed());
        let (data, present, slots) = c.into_parts_keep();
        let set_at = |p: &[u8]| {
            p.iter()
                .enumerate()
                .filter(|x| *x.1 != 0)
                .map(|x| x.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            set_at(&present),
            vec![0, 1, 64, 129],
            "b claimed 2 but never completed it"
        );
        // The next generation on the same slots: every region free, nothing
        // present, though nothing was cleared.
        let c = set.chunk_on(data, slots, 64);
        assert!(!c.claimed());
        assert!(!c.is_present(1));
        assert!(
            !c.write(&a, 1, 0, &[1; 8], CopyMode::Plain),
            "a's old claim is stale"
        );
        assert!(!c.set_present(&a, 1));
        assert_eq!(c.claim(&b, 1), Claim::Claimed, "a region a owned before");
        assert!(c.set_present(&b, 1));
        assert_eq!(c.claim(&a, 1), Claim::Taken);
        assert_eq!(c.claim(&a, 3), Claim::Claimed);
        assert!(c.is_present(1) && !c.is_present(3) && !c.is_present(0));
        let (data, present, slots) = c.into_parts_keep();
        assert_eq!(
            set_at(&present),
            vec![1],
            "a's row of the last chunk is gone"
        );
        // A generation nobody claims in: nothing present, nothing claimed.
        let c = set.chunk_on(data, slots, 64);
        assert!(!c.claimed());
        assert!(c.into_parts().1.iter().all(|&p| p == 0));
    }

    #[test]
    fn two_threads_fill_one_chunk() {
        let mut set = WriterSet::default();
        let writers = [set.writer().unwrap(), set.writer().unwrap()];
        let c = Arc::new(set.chunk(vec![0u8; 64 * 1000], 1000, 64));
        let threads: Vec<_> = writers
            .into_iter()
            .enumerate()
            .map(|(k, w)| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for r in (k..1000).step_by(2) {
                        assert_eq!(c.claim(&w, r), Claim::Claimed);
                        assert!(c.write(&w, r, 0, &[r as u8; 64], CopyMode::Plain));
                        assert!(c.set_present(&w, r));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let (data, present) = Arc::try_unwrap(c).ok().unwrap().into_parts();
        assert!(present.iter().all(|&p| p == 1));
        assert!(data.chunks(64).enumerate().all(|(r, d)| d == [r as u8; 64]));
    }
}
