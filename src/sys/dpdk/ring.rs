//! `rte_ring` of mbufs, for an lcore-to-lcore hop (rx lcore → ring → tx
//! lcore). Single-producer/single-consumer by default: one [`RingProducer`]
//! and one [`RingConsumer`], each `Send` and not `Clone`, so the SP/SC
//! contract is enforced by ownership.
//!
//! Cross-lcore free: mbufs dequeued on the consumer lcore and freed there go
//! back through that lcore's mempool cache to the shared pool, where the
//! producer lcore's cache refills from; bulk frees (`Burst::clear`) keep that
//! to one pool operation per burst.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use super::eal::Eal;
use super::error::{rte_errno, strerror, DpdkError};
use super::mbuf::Burst;
use crate::sys::ffi::dpdk as ffi;

struct RingPtr(NonNull<ffi::rte_ring>);

// SAFETY: rte_ring is a lock-free queue made for use across threads; the
// SP/SC discipline is kept by the producer/consumer split below.
unsafe impl Send for RingPtr {}
// SAFETY: as above.
unsafe impl Sync for RingPtr {}

impl Drop for RingPtr {
    fn drop(&mut self) {
        // Free the mbufs still queued, then the ring.
        let mut b = Burst::new();
        loop {
            let spare = b.spare_raw();
            // SAFETY: last owner of the ring; spare has room for its length.
            let n = unsafe {
                ffi::lr_ring_dequeue_burst(
                    self.0.as_ptr(),
                    spare.as_mut_ptr().cast(),
                    spare.len() as u32,
                    std::ptr::null_mut(),
                )
            } as usize;
            if n == 0 {
                break;
            }
            // SAFETY: n owned mbufs were written to the spare slots.
            unsafe { b.set_len(n) };
            b.clear();
        }
        // SAFETY: created by us; no producer or consumer is left (Arc).
        unsafe { ffi::rte_ring_free(self.0.as_ptr()) };
    }
}

/// The enqueue side of an mbuf ring.
pub struct RingProducer(Arc<RingPtr>);

/// The dequeue side of an mbuf ring.
pub struct RingConsumer(Arc<RingPtr>);

impl std::fmt::Debug for RingProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RingProducer")
    }
}

impl std::fmt::Debug for RingConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RingConsumer")
    }
}

/// Creates an SP/SC ring of `size` slots (a power of two; holds size - 1).
pub fn mbuf_ring(
    _eal: &Eal,
    name: &str,
    size: u32,
    socket: i32,
) -> Result<(RingProducer, RingConsumer), DpdkError> {
    if !size.is_power_of_two() || size < 2 {
        return Err(DpdkError::Invalid(format!(
            "ring {name:?}: size {size} must be a power of two >= 2"
        )));
    }
    let c = CString::new(name).map_err(|_| DpdkError::Nul {
        what: "ring name",
        value: name.into(),
    })?;
    // The enumerators' Rust type is whatever bindgen picks for the C enum.
    #[allow(clippy::unnecessary_cast)]
    let flags = ffi::LR_RING_F_SP_ENQ as u32 | ffi::LR_RING_F_SC_DEQ as u32;
    // SAFETY: the EAL is initialised; c is a valid C string DPDK copies.
    let r = unsafe { ffi::rte_ring_create(c.as_ptr(), size, socket, flags) };
    let r = NonNull::new(r).ok_or_else(|| {
        let errno = rte_errno();
        DpdkError::Call {
            op: format!("rte_ring_create({name:?}, {size})"),
            errno,
            reason: strerror(errno),
        }
    })?;
    let p = Arc::new(RingPtr(r));
    Ok((RingProducer(Arc::clone(&p)), RingConsumer(p)))
}

impl RingProducer {
    /// Enqueues from the front of `burst` as many as fit; they leave the
    /// burst (the rest move to its front). Returns how many were enqueued.
    #[inline]
    pub fn enqueue(&mut self, burst: &mut Burst) -> usize {
        let raw = burst.as_raw();
        // SAFETY: single producer (we are the only RingProducer, &mut self);
        // the pointers are owned mbufs that the ring now owns.
        let n = unsafe {
            ffi::lr_ring_enqueue_burst(
                (self.0).0.as_ptr(),
                raw.as_ptr().cast(),
                raw.len() as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        burst.consume_front(n);
        n
    }
}

impl RingProducer {
    /// Entries queued now.
    pub fn len(&self) -> usize {
        // SAFETY: a read-only count on a valid ring.
        unsafe { ffi::lr_ring_count((self.0).0.as_ptr()) as usize }
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl RingConsumer {
    /// Dequeues into the burst's spare capacity; returns how many.
    #[inline]
    pub fn dequeue(&mut self, burst: &mut Burst) -> usize {
        let spare = burst.spare_raw();
        // SAFETY: single consumer (&mut self, one RingConsumer); spare has
        // room for its length; the dequeued mbufs become the burst's.
        let n = unsafe {
            ffi::lr_ring_dequeue_burst(
                (self.0).0.as_ptr(),
                spare.as_mut_ptr().cast(),
                spare.len() as u32,
                std::ptr::null_mut(),
            )
        } as usize;
        // SAFETY: n owned mbufs were written after the current length.
        unsafe { burst.set_len(burst.len() + n) };
        n
    }

    /// Entries queued now.
    pub fn len(&self) -> usize {
        // SAFETY: a read-only count on a valid ring.
        unsafe { ffi::lr_ring_count((self.0).0.as_ptr()) as usize }
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
