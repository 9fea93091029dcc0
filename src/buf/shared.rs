//! A chunk that several threads fill at once, each heap by the one writer that
//! claimed it (a SPEAD receive group's members on their lcores).
//!
//! The chunk's data is cut into regions of `stride` bytes, one per `present`
//! entry. A writer claims a region with one compare-and-swap on its owner byte;
//! only the owner may copy into the region and mark it present. Whoever holds
//! the chunk holds an `Arc` of it: when the group gets it back with
//! [`Arc::try_unwrap`](std::sync::Arc::try_unwrap), no writer is left and [`SharedChunk::into_parts`]
//! hands out the plain data and `present` map (the writers' stores are
//! visible then: dropping an `Arc` releases, `try_unwrap` acquires).

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::DerefMut;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use super::copy::{copy, CopyMode};

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

    /// A chunk for this group's writers on recycled `slots` (cleared here
    /// unless [`Slots::clear`] already did), one per region.
    pub fn chunk_on<B: DerefMut<Target = [u8]>>(
        &self,
        data: B,
        mut slots: Slots,
        stride: usize,
    ) -> SharedChunk<B> {
        slots.clear();
        SharedChunk::new(self.group, data, slots, stride)
    }
}

/// A chunk's per-region owner and `present` slots, kept to be reused by the
/// next chunk (a chunk's worth of cache lines is not allocated per chunk).
pub struct Slots(Box<[Slot]>, bool);

impl Slots {
    /// `regions` cleared slots.
    pub fn new(regions: usize) -> Slots {
        Slots((0..regions).map(|_| Slot::default()).collect(), false)
    }

    /// Regions.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Clears every slot, if a chunk used them (whoever recycles them may
    /// do it away from a lock; [`WriterSet::chunk_on`] does it otherwise).
    pub fn clear(&mut self) {
        if !self.1 {
            return;
        }
        for s in self.0.iter_mut() {
            *s.owner.get_mut() = 0;
            *s.present.get_mut() = 0;
        }
        self.1 = false;
    }
}

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

/// One region's owner and `present` flag, on a cache line of their own:
/// neighbouring regions usually belong to different writers (heaps of
/// interleaved antennas), and sharing a line would move it between their
/// cores on every claim, write and mark.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    owner: AtomicU8,
    present: AtomicU8,
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
    fn new(group: u64, data: B, slots: Slots, stride: usize) -> Self {
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
        self.slots.0.len()
    }

    /// Bytes per region.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Claims region `r` for `w`.
    #[inline]
    pub fn claim(&self, w: &Writer, r: usize) -> Claim {
        let Some(o) = self.slots.0.get(r).filter(|_| w.group == self.group) else {
            return Claim::Invalid;
        };
        match o
            .owner
            .compare_exchange(0, w.id, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Claim::Claimed,
            Err(x) if x == w.id => Claim::Mine,
            Err(_) => Claim::Taken,
        }
    }

    /// Copies `src` to byte `at` of region `r`, which `w` must own; false (and
    /// nothing written) otherwise or when it does not fit the region.
    #[inline]
    pub fn write(&self, w: &Writer, r: usize, at: usize, src: &[u8], mode: CopyMode) -> bool {
        let owned = w.group == self.group
            && self
                .slots
                .0
                .get(r)
                .is_some_and(|o| o.owner.load(Ordering::Relaxed) == w.id);
        let start = r * self.stride + at;
        let fits = at
            .checked_add(src.len())
            .is_some_and(|end| end <= self.stride)
            && start + src.len() <= self.len;
        if !(owned && fits) {
            return false;
        }
        // SAFETY: `start..start + len` lies inside the data (checked) and inside
        // region `r`, which only `w` may write: `w` owns it (claimed by compare-
        // and-swap, ids unique in the group) and, not being `Sync`, is used by
        // one thread. Nobody reads the data until `into_parts`, which needs the
        // chunk by value.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.base.add(start), src.len()) };
        copy(mode, dst, src);
        true
    }

    /// Marks region `r` present (only its owner may).
    #[inline]
    pub fn set_present(&self, w: &Writer, r: usize) -> bool {
        let owned = w.group == self.group
            && self
                .slots
                .0
                .get(r)
                .is_some_and(|o| o.owner.load(Ordering::Relaxed) == w.id);
        if owned {
            self.slots.0[r].present.store(1, Ordering::Relaxed);
        }
        owned
    }

    /// Whether any region was claimed (read once no writer is left, it says
    /// whether anything was placed in the chunk at all).
    pub fn claimed(&self) -> bool {
        self.slots
            .0
            .iter()
            .any(|s| s.owner.load(Ordering::Relaxed) != 0)
    }

    /// Whether region `r` is marked present.
    #[inline]
    pub fn is_present(&self, r: usize) -> bool {
        self.slots
            .0
            .get(r)
            .is_some_and(|p| p.present.load(Ordering::Relaxed) != 0)
    }

    /// The data and the `present` map, the chunk taken by value.
    pub fn into_parts(self) -> (B, Vec<u8>) {
        let (data, present, _) = self.into_parts_keep();
        (data, present)
    }

    /// [`SharedChunk::into_parts`], keeping the slots for the next chunk
    /// ([`WriterSet::chunk_on`]).
    pub fn into_parts_keep(self) -> (B, Vec<u8>, Slots) {
        let present = self
            .slots
            .0
            .iter()
            .map(|p| p.present.load(Ordering::Relaxed))
            .collect();
        let cell = *self.data;
        let mut slots = self.slots;
        slots.1 = true;
        (cell.into_inner(), present, slots)
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
