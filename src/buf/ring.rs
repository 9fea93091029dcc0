//! A bounded single-producer/single-consumer ring with bulk operations: the link
//! between two stages, possibly on two lcores.
//!
//! Positions are free-running `usize` counters; the producer publishes its tail
//! and the consumer its head once per bulk call (Release), and each side caches
//! the other's position so that the shared cache lines are read only when the
//! cached view says the ring looks full or empty. That is what makes a burst hop
//! cost a few cycles per packet, as DPDK's SP/SC `rte_ring` does.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

#[repr(align(128))]
struct Padded<T>(T);

struct Shared<T> {
    /// Consumer position (next slot to read).
    head: Padded<AtomicUsize>,
    /// Producer position (next slot to write).
    tail: Padded<AtomicUsize>,
    /// Items the producer could not enqueue because the ring was full.
    dropped: Padded<AtomicU64>,
    mask: usize,
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: a slot is written only by the producer while it is outside
// [head, tail) and read only by the consumer while inside; the Release/Acquire
// pairs on head and tail order those accesses. T moves between threads, so T: Send.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let head = *self.head.0.get_mut();
        let tail = *self.tail.0.get_mut();
        for pos in head..tail {
            // SAFETY: slots in [head, tail) hold initialised items that nobody else
            // can reach any more (we have &mut self).
            unsafe { self.slots[pos & self.mask].get_mut().assume_init_drop() }
        }
    }
}

/// Counters of a ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RingStats {
    /// Slots in the ring.
    pub size: usize,
    /// Items enqueued so far.
    pub enqueued: u64,
    /// Items dequeued so far.
    pub dequeued: u64,
    /// Items refused because the ring was full.
    pub dropped: u64,
}

/// Creates a ring of `size` slots (a power of two, at least 2).
pub fn ring<T: Send + 'static>(size: usize) -> (Producer<T>, Consumer<T>) {
    assert!(
        size.is_power_of_two() && size >= 2,
        "ring size must be a power of two (validated by the pipeline)"
    );
    let slots = (0..size)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
        dropped: Padded(AtomicU64::new(0)),
        mask: size - 1,
        slots,
    });
    (
        Producer {
            shared: shared.clone(),
            tail: 0,
            head_cache: 0,
        },
        Consumer {
            shared,
            head: 0,
            tail_cache: 0,
        },
    )
}

/// The writing end of a ring.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    tail: usize,
    head_cache: usize,
}

impl<T: Send + 'static> Producer<T> {
    fn free(&mut self, want: usize) -> usize {
        let size = self.shared.mask + 1;
        let mut free = size - (self.tail - self.head_cache);
        if free < want {
            self.head_cache = self.shared.head.0.load(Ordering::Acquire);
            free = size - (self.tail - self.head_cache);
        }
        free
    }

    /// Moves as many items as fit from the front of `items` into the ring and
    /// returns how many moved; the rest stay in `items`.
    pub fn push_bulk(&mut self, items: &mut Vec<T>) -> usize {
        let n = items.len().min(self.free(items.len()));
        let mask = self.shared.mask;
        for (i, item) in items.drain(..n).enumerate() {
            // SAFETY: slot tail+i is outside [head, tail) (we checked free space),
            // so the consumer does not touch it until we publish the new tail.
            unsafe { (*self.shared.slots[(self.tail + i) & mask].get()).write(item) };
        }
        self.tail += n;
        self.shared.tail.0.store(self.tail, Ordering::Release);
        n
    }

    /// Pushes one item, or gives it back when the ring is full.
    pub fn push(&mut self, item: T) -> Result<(), T> {
        if self.free(1) == 0 {
            return Err(item);
        }
        // SAFETY: as in push_bulk.
        unsafe { (*self.shared.slots[self.tail & self.shared.mask].get()).write(item) };
        self.tail += 1;
        self.shared.tail.0.store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Counts `n` items dropped because the ring was full (Snabb's link drop counter).
    pub fn count_dropped(&self, n: u64) {
        let d = &self.shared.dropped.0;
        d.store(d.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// A reader of this ring's counters.
    pub fn stats_handle(&self) -> RingStatsHandle {
        RingStatsHandle(Arc::new(self.shared.clone()))
    }
}

/// The reading end of a ring.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    head: usize,
    tail_cache: usize,
}

impl<T: Send + 'static> Consumer<T> {
    fn available(&mut self, want: usize) -> usize {
        let mut avail = self.tail_cache - self.head;
        if avail < want {
            self.tail_cache = self.shared.tail.0.load(Ordering::Acquire);
            avail = self.tail_cache - self.head;
        }
        avail
    }

    /// Moves up to `max` items out of the ring into `sink`, returns how many.
    pub fn pop_bulk(&mut self, max: usize, mut sink: impl FnMut(T)) -> usize {
        let n = max.min(self.available(max));
        let mask = self.shared.mask;
        for i in 0..n {
            // SAFETY: slot head+i is in [head, tail): initialised by the producer and
            // published by its Release store of tail, which our Acquire load saw.
            let item =
                unsafe { (*self.shared.slots[(self.head + i) & mask].get()).assume_init_read() };
            sink(item);
        }
        self.head += n;
        self.shared.head.0.store(self.head, Ordering::Release);
        n
    }

    /// Pops up to `max` items onto the end of `out`, written in place (a
    /// sink closure pushing one item at a time cost a store-forwarding stall
    /// per packet); returns how many.
    #[inline]
    pub fn pop_bulk_into(&mut self, max: usize, out: &mut Vec<T>) -> usize {
        let n = max.min(self.available(max));
        let mask = self.shared.mask;
        let (head, slots) = (self.head, &self.shared.slots);
        out.extend((0..n).map(|i| {
            // SAFETY: as in pop_bulk: slot head+i is initialised and published,
            // and each is read exactly once (head moves past them below).
            unsafe { (*slots[(head + i) & mask].get()).assume_init_read() }
        }));
        self.head += n;
        self.shared.head.0.store(self.head, Ordering::Release);
        n
    }

    /// Pops one item.
    pub fn pop(&mut self) -> Option<T> {
        let mut out = None;
        self.pop_bulk(1, |t| out = Some(t));
        out
    }

    /// The next item, without removing it.
    pub fn peek(&mut self) -> Option<&T> {
        if self.available(1) == 0 {
            return None;
        }
        // SAFETY: as in pop_bulk; the item stays in the ring and only we can read it.
        Some(unsafe { (*self.shared.slots[self.head & self.shared.mask].get()).assume_init_ref() })
    }

    /// A reader of this ring's counters.
    pub fn stats_handle(&self) -> RingStatsHandle {
        RingStatsHandle(Arc::new(self.shared.clone()))
    }
}

/// Reads a ring's counters from any thread, without locks (clones share the ring).
#[derive(Clone)]
pub struct RingStatsHandle(Arc<dyn RingCounters>);

trait RingCounters: Send + Sync {
    fn get(&self) -> RingStats;
}

impl<T: Send> RingCounters for Arc<Shared<T>> {
    fn get(&self) -> RingStats {
        RingStats {
            size: self.mask + 1,
            enqueued: self.tail.0.load(Ordering::Relaxed) as u64,
            dequeued: self.head.0.load(Ordering::Relaxed) as u64,
            dropped: self.dropped.0.load(Ordering::Relaxed),
        }
    }
}

impl RingStatsHandle {
    /// Current counters.
    pub fn get(&self) -> RingStats {
        self.0.get()
    }

    /// Items currently in the ring.
    pub fn in_flight(&self) -> u64 {
        let s = self.get();
        s.enqueued.saturating_sub(s.dequeued)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn bulk_wraps_and_refuses_when_full() {
        let (mut p, mut c) = ring::<u32>(8);
        assert_eq!(p.push_bulk(&mut (0..5).collect()), 5);
        let mut got = Vec::new();
        assert_eq!(c.pop_bulk(3, |x| got.push(x)), 3);
        let mut rest = (5..12).collect();
        assert_eq!(p.push_bulk(&mut rest), 6);
        assert_eq!(rest, vec![11]);
        assert_eq!(p.push(99), Err(99));
        assert_eq!(c.peek(), Some(&3));
        assert_eq!(c.pop_bulk(100, |x| got.push(x)), 8);
        assert_eq!(got, (0..11).collect::<Vec<_>>());
        assert_eq!(c.pop(), None);
        let s = p.stats_handle().get();
        assert_eq!((s.enqueued, s.dequeued), (11, 11));
    }

    #[test]
    fn pop_bulk_into_appends_in_order_across_the_wrap() {
        let (mut p, mut c) = ring::<u32>(8);
        assert_eq!(p.push_bulk(&mut (0..6).collect()), 6);
        let mut got = vec![100];
        assert_eq!(c.pop_bulk_into(4, &mut got), 4);
        assert_eq!(p.push_bulk(&mut (6..12).collect()), 6);
        assert_eq!(c.pop_bulk_into(100, &mut got), 8);
        assert_eq!(c.pop_bulk_into(100, &mut got), 0);
        let mut want = vec![100];
        want.extend(0..12);
        assert_eq!(got, want);
    }

    #[test]
    fn leftovers_are_dropped_with_the_ring() {
        let (mut p, c) = ring::<std::sync::Arc<()>>(4);
        let token = std::sync::Arc::new(());
        p.push_bulk(&mut vec![token.clone(), token.clone()]);
        drop(p);
        drop(c);
        assert_eq!(std::sync::Arc::strong_count(&token), 1);
    }

    #[test]
    fn two_threads_in_order() {
        let (mut p, mut c) = ring::<u64>(64);
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            let mut next = 0;
            let mut batch = Vec::with_capacity(32);
            while next < N || !batch.is_empty() {
                while batch.len() < 32 && next < N {
                    batch.push(next);
                    next += 1;
                }
                p.push_bulk(&mut batch);
            }
        });
        let mut expect = 0;
        while expect < N {
            c.pop_bulk(32, |x| {
                assert_eq!(x, expect);
                expect += 1;
            });
        }
        t.join().unwrap();
    }
}
