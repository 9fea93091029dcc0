//! An owning mbuf handle and a fixed-size burst of them.
//!
//! [`Mbuf`] is a `#[repr(transparent)]` `NonNull<rte_mbuf>` that owns one
//! reference to a (single- or multi-segment) mbuf: dropping it frees it
//! (`rte_pktmbuf_free`). The hot accessors read the bindgen struct fields
//! directly (inlined, no shim call); buffer adjustments that DPDK implements
//! inline go through the C shim.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use crate::sys::ffi::dpdk as ffi;

/// An owned mbuf (refcount 1 when it comes from a pool or an rx burst).
#[repr(transparent)]
#[derive(Debug)]
pub struct Mbuf(NonNull<ffi::rte_mbuf>);

// SAFETY: an Mbuf is the only handle to its mbuf; DPDK allows freeing or
// transmitting it from any thread (freeing off its allocating lcore is slower,
// bypassing that lcore's cache, but correct).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `m` must be a valid mbuf whose reference the caller owns and hands
    /// over (e.g. from rx_burst or an alloc); nobody else may use it after.
    #[inline]
    pub unsafe fn from_raw(m: NonNull<ffi::rte_mbuf>) -> Self {
        Mbuf(m)
    }

    /// Gives up ownership (e.g. to a tx burst) without freeing.
    #[inline]
    pub fn into_raw(self) -> NonNull<ffi::rte_mbuf> {
        ManuallyDrop::new(self).0
    }

    /// The raw pointer, still owned by `self`.
    #[inline]
    pub fn as_ptr(&self) -> *mut ffi::rte_mbuf {
        self.0.as_ptr()
    }

    #[inline]
    fn raw(&self) -> &ffi::rte_mbuf {
        // SAFETY: we own a valid mbuf for self's lifetime; shared borrow.
        unsafe { self.0.as_ref() }
    }

    /// Bytes of data in this (first) segment.
    #[inline]
    pub fn data_len(&self) -> u16 {
        self.raw().data_len
    }

    /// Bytes in the whole packet (all segments).
    #[inline]
    pub fn pkt_len(&self) -> u32 {
        self.raw().pkt_len
    }

    /// Number of segments.
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        self.raw().nb_segs
    }

    /// Free bytes in front of the data (`rte_pktmbuf_headroom`).
    #[inline]
    pub fn headroom(&self) -> u16 {
        self.raw().data_off
    }

    /// Free bytes after the data in this segment (`rte_pktmbuf_tailroom`).
    #[inline]
    pub fn tailroom(&self) -> u16 {
        let m = self.raw();
        m.buf_len - m.data_off - m.data_len
    }

    /// The input port recorded by the driver.
    #[inline]
    pub fn port(&self) -> u16 {
        self.raw().port
    }

    /// The pool this mbuf returns to.
    #[inline]
    pub fn pool(&self) -> *mut ffi::rte_mempool {
        self.raw().pool
    }

    /// The reference count.
    #[inline]
    pub fn refcnt(&self) -> u16 {
        self.raw().refcnt
    }

    /// The first segment's data (`rte_pktmbuf_mtod`, `data_len` bytes).
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.raw();
        // SAFETY: buf_addr + data_off .. + data_len lies inside the mbuf's
        // buffer (a DPDK invariant every mutator here keeps); borrowed from
        // self, so the mbuf outlives the slice.
        unsafe {
            std::slice::from_raw_parts(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// The first segment's data, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as data(); &mut self gives exclusive access, and an owned
        // mbuf is not shared (refcnt 1: linerate never clones mbufs).
        unsafe {
            let m = self.0.as_ptr();
            std::slice::from_raw_parts_mut(
                (*m).buf_addr.cast::<u8>().add(usize::from((*m).data_off)),
                usize::from((*m).data_len),
            )
        }
    }

    /// Grows the data by `len` bytes at the end of the last segment and
    /// returns the new bytes (`rte_pktmbuf_append`); `None` if the tailroom is
    /// too small (nothing changes).
    #[inline]
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: valid owned mbuf; the shim returns null or a pointer to len
        // writable bytes inside the last segment's buffer.
        let p = unsafe { ffi::lr_pktmbuf_append(self.0.as_ptr(), len) };
        // SAFETY: non-null p points at len bytes we may write, borrowed from self.
        NonNull::new(p).map(|p| unsafe {
            std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), usize::from(len))
        })
    }

    /// Grows the data by `len` bytes at the front and returns them
    /// (`rte_pktmbuf_prepend`); `None` if the headroom is too small.
    #[inline]
    pub fn prepend(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: as append(), at the front of the first segment.
        let p = unsafe { ffi::lr_pktmbuf_prepend(self.0.as_ptr(), len) };
        // SAFETY: as append().
        NonNull::new(p).map(|p| unsafe {
            std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), usize::from(len))
        })
    }

    /// Removes `len` bytes from the front (`rte_pktmbuf_adj`); false if the
    /// first segment holds fewer.
    #[inline]
    pub fn adj(&mut self, len: u16) -> bool {
        // SAFETY: valid owned mbuf; the shim checks len against data_len.
        !unsafe { ffi::lr_pktmbuf_adj(self.0.as_ptr(), len) }.is_null()
    }

    /// Removes `len` bytes from the end (`rte_pktmbuf_trim`); false if the
    /// last segment holds fewer.
    #[inline]
    pub fn trim(&mut self, len: u16) -> bool {
        // SAFETY: valid owned mbuf; the shim checks len against data_len.
        unsafe { ffi::lr_pktmbuf_trim(self.0.as_ptr(), len) == 0 }
    }

    /// Sets the length of a single-segment mbuf to `len` (growing into the
    /// tailroom or shrinking); false if it is multi-segment or `len` does not
    /// fit the buffer.
    #[inline]
    pub fn set_len(&mut self, len: u16) -> bool {
        // SAFETY: exclusive access to a valid owned mbuf; we only write
        // lengths that stay inside its buffer.
        let m = unsafe { self.0.as_mut() };
        if m.nb_segs != 1 || u32::from(len) + u32::from(m.data_off) > u32::from(m.buf_len) {
            return false;
        }
        m.data_len = len;
        m.pkt_len = u32::from(len);
        true
    }

    /// The first segment's data grown to the end of its buffer, writable: a
    /// stage fills it in place, then calls [`Mbuf::set_len`].
    #[inline]
    pub fn spare_capacity(&mut self) -> &mut [u8] {
        let room = usize::from(self.data_len()) + usize::from(self.tailroom());
        // Cannot fail for the fresh single-segment mbufs this is used on; a
        // multi-segment mbuf keeps its first segment's length.
        let _ = self.set_len(room.min(usize::from(u16::MAX)) as u16);
        self.data_mut()
    }

    /// A copy of this mbuf's first segment in a new mbuf from the same pool
    /// (the slow path: duplication impairments).
    pub fn try_clone(&self) -> Option<Mbuf> {
        // SAFETY: `pool()` is the live mempool this mbuf came from; the shim
        // returns null or a fresh mbuf we then own.
        let raw = unsafe { ffi::lr_pktmbuf_alloc(self.pool()) };
        let mut copy = Mbuf(NonNull::new(raw)?);
        copy.append(self.data_len())?.copy_from_slice(self.data());
        Some(copy)
    }
}

impl AsRef<[u8]> for Mbuf {
    /// The first segment's data, so wire views (`Packet<T: AsRef<[u8]>>`)
    /// parse an mbuf in place.
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

impl AsMut<[u8]> for Mbuf {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own this reference; freeing returns the segments to
        // their pools and nobody uses the pointer afterwards.
        unsafe { ffi::lr_pktmbuf_free(self.0.as_ptr()) };
    }
}

/// The largest burst a [`Burst`] holds.
pub const MAX_BURST: usize = 64;

/// The total `pkt_len` of `mbufs`: four independent sums, so the loads of
/// consecutive mbufs overlap instead of waiting on one chain of adds (the
/// forwarding path's only per-packet work).
#[inline]
pub fn sum_pkt_len(mbufs: &[Mbuf]) -> u64 {
    let mut acc = [0u64; 4];
    let mut quads = mbufs.chunks_exact(4);
    for q in &mut quads {
        for (a, m) in acc.iter_mut().zip(q) {
            *a += u64::from(m.pkt_len());
        }
    }
    let rest: u64 = quads
        .remainder()
        .iter()
        .map(|m| u64::from(m.pkt_len()))
        .sum();
    acc.iter().sum::<u64>() + rest
}

/// A fixed-capacity, allocation-free array of owned mbufs for rx/tx bursts.
/// Dropping or clearing it frees what it holds in bulk.
pub struct Burst {
    ptrs: [*mut ffi::rte_mbuf; MAX_BURST],
    len: usize,
}

// SAFETY: a Burst owns its mbufs exactly like a [Mbuf; N] would.
unsafe impl Send for Burst {}

impl Default for Burst {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Burst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Burst").field("len", &self.len).finish()
    }
}

impl Burst {
    /// An empty burst.
    pub const fn new() -> Self {
        Burst {
            ptrs: [std::ptr::null_mut(); MAX_BURST],
            len: 0,
        }
    }

    /// Number of mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when full.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == MAX_BURST
    }

    /// The mbufs held.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: Mbuf is repr(transparent) over NonNull<rte_mbuf>, which has
        // the layout of *mut rte_mbuf; ptrs[..len] are non-null owned mbufs.
        unsafe { std::slice::from_raw_parts(self.ptrs.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The mbufs held, mutably (to edit packets in place).
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as as_slice(); the &mut borrow is exclusive. Swapping two
        // Mbufs within the slice keeps the invariant.
        unsafe { std::slice::from_raw_parts_mut(self.ptrs.as_mut_ptr().cast::<Mbuf>(), self.len) }
    }

    /// Appends an mbuf; gives it back when full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == MAX_BURST {
            return Err(m);
        }
        self.ptrs[self.len] = m.into_raw().as_ptr();
        self.len += 1;
        Ok(())
    }

    /// Removes the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: ptrs[len] was an owned non-null mbuf; it leaves the burst.
        Some(unsafe { Mbuf::from_raw(NonNull::new_unchecked(self.ptrs[self.len])) })
    }

    /// Moves every mbuf out, in order.
    pub fn drain(&mut self) -> impl Iterator<Item = Mbuf> + '_ {
        let n = std::mem::replace(&mut self.len, 0);
        // SAFETY: the n pointers were owned non-null mbufs; len is now 0, so
        // each is moved out exactly once (unyielded ones leak if the iterator
        // is dropped early, never double-free).
        self.ptrs[..n]
            .iter()
            .map(|&p| unsafe { Mbuf::from_raw(NonNull::new_unchecked(p)) })
    }

    /// Total bytes of the mbufs held (all segments).
    #[inline]
    pub fn bytes(&self) -> u64 {
        sum_pkt_len(self.as_slice())
    }

    /// Frees every mbuf (`rte_pktmbuf_free_bulk`).
    #[inline]
    pub fn clear(&mut self) {
        if self.len > 0 {
            // SAFETY: ptrs[..len] are owned; len is reset so none is reused.
            unsafe { ffi::rte_pktmbuf_free_bulk(self.ptrs.as_mut_ptr(), self.len as u32) };
            self.len = 0;
        }
    }

    /// The pointer slots after the held mbufs (for rx/alloc to fill).
    #[inline]
    pub(crate) fn spare_raw(&mut self) -> &mut [*mut ffi::rte_mbuf] {
        &mut self.ptrs[self.len..]
    }

    /// The held mbufs as raw pointers (still owned by the burst).
    #[inline]
    pub fn as_raw(&self) -> &[*mut ffi::rte_mbuf] {
        &self.ptrs[..self.len]
    }

    /// Sets the length after slots were filled through [`Burst::spare_raw`].
    ///
    /// # Safety
    /// `ptrs[..len]` must all be owned, valid mbufs.
    #[inline]
    pub(crate) unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= MAX_BURST);
        self.len = len;
    }

    /// Drops the first `n` entries from the burst without freeing them (they
    /// were handed to a driver), moving the rest to the front.
    #[inline]
    pub(crate) fn consume_front(&mut self, n: usize) {
        let n = n.min(self.len);
        // The usual case, everything taken, needs no (memmove) call.
        if n < self.len {
            self.ptrs.copy_within(n..self.len, 0);
        }
        self.len -= n;
    }
}

impl Drop for Burst {
    fn drop(&mut self) {
        self.clear();
    }
}
