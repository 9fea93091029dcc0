//! Counters that one thread writes and any thread reads, without locks.

use std::sync::atomic::{AtomicU64, Ordering};

/// A counter with a single writer. `add` is a plain load and store (no locked
/// read-modify-write), so counting costs the hot path almost nothing; readers on
/// other threads see a recent value.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the counter's one writer may call this.
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Keeps counters written by different lcores on different cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CacheAligned<T>(pub T);

impl<T> core::ops::Deref for CacheAligned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}
