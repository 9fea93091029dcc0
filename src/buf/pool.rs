//! Fixed-size buffer pools and the packet handle.
//!
//! A pool is one mapped region cut into `count` buffers of `buf_size` bytes, plus
//! a lock-free free list of buffer indices. Its shared state is reference counted
//! like an `Arc`, except that a packet counts as a reference and references are
//! taken and released a burst at a time ([`PoolCache::alloc_bulk`],
//! [`PoolCache::free_bulk`]): one atomic operation per burst keeps the region
//! alive exactly as long as any packet or handle can reach it.

use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

use super::region::{self, HugepageMode, Region};
use super::Burst;

/// How to build a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// A name for reports.
    pub name: String,
    /// Number of buffers.
    pub count: u32,
    /// Bytes per buffer, headroom included.
    pub buf_size: u32,
    /// Bytes kept free in front of a new packet's data, for headers to prepend.
    pub headroom: u16,
    /// Hugepage backing.
    pub hugepages: HugepageMode,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            name: "default".into(),
            count: 16384,
            buf_size: 2048,
            headroom: 128,
            hugepages: HugepageMode::Off,
        }
    }
}

/// A pool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The geometry makes no sense.
    #[error("invalid pool: {0}")]
    Invalid(String),
    /// Mapping the region failed.
    #[error("cannot map a {0}-byte buffer region: {1}")]
    Map(usize, String),
    /// Hugepages were required but no hugetlbfs is mounted.
    #[error("hugepages were asked for but no hugetlbfs is mounted; run scripts/setup-hugepages.sh (as root) or set `hugepages = false` in [pool]")]
    NoHugetlbfs,
    /// Hugepages were required but could not be had.
    #[error("hugepages were asked for but {0}; run scripts/setup-hugepages.sh to reserve more")]
    Hugepages(String),
}

/// A packet operation did not fit its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BufError {
    /// Not enough headroom or tailroom for the requested change.
    #[error("the packet buffer has no room for {0} more bytes")]
    NoRoom(usize),
    /// Asked to remove more bytes than the packet holds.
    #[error("the packet holds fewer than {0} bytes")]
    TooShort(usize),
}

/// Counters of a pool, readable while it runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Buffers in the pool.
    pub count: u32,
    /// Buffers on the shared free list (not counting those held in lcore caches).
    pub free: u32,
    /// Allocations that found the pool empty (each a counted drop for its caller).
    pub exhausted: u64,
    /// Whether the region is on hugepages.
    pub hugepages: bool,
}

struct Shared {
    /// Handles plus outstanding packets; whoever brings it to zero frees this.
    refs: AtomicUsize,
    free: ArrayQueue<u32>,
    base: NonNull<u8>,
    buf_size: u32,
    headroom: u16,
    count: u32,
    exhausted: AtomicU64,
    name: String,
    region: Region,
}

impl Shared {
    /// Releases `n` references; frees the pool if they were the last.
    ///
    /// # Safety
    /// `this` must point to a live `Shared` and the caller must own `n` references.
    unsafe fn release(this: NonNull<Shared>, n: usize) {
        // SAFETY: the caller owns `n` references, so `this` is still alive here.
        let prev = unsafe { this.as_ref() }
            .refs
            .fetch_sub(n, Ordering::Release);
        if prev == n {
            // Pairs with the Release above on every other thread that dropped a
            // reference: all their uses of the pool happen before the free.
            fence(Ordering::Acquire);
            // SAFETY: the count reached zero, so no handle, packet or cache can reach
            // `this` any more; it came from Box::into_raw in Pool::new.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    fn buffer(&self, idx: u32) -> *mut u8 {
        // SAFETY: idx < count (indices come only from the free list filled in
        // Pool::new), so the offset stays within the mapped region.
        unsafe {
            self.base
                .as_ptr()
                .add(idx as usize * self.buf_size as usize)
        }
    }
}

/// A handle to a pool. Cheap to clone; the region lives while any handle or
/// packet of it does.
pub struct Pool {
    shared: NonNull<Shared>,
}

// SAFETY: `Shared` is only mutated through atomics and the lock-free queue; the
// region's bytes are reached only through packets, each owned by one thread.
unsafe impl Send for Pool {}
// SAFETY: as above; `&Pool` gives no access to buffer bytes.
unsafe impl Sync for Pool {}

impl Pool {
    /// Maps a region and cuts it into buffers.
    pub fn new(config: &PoolConfig) -> Result<Pool, PoolError> {
        if config.count == 0 {
            return Err(PoolError::Invalid(
                "a pool needs at least one buffer".into(),
            ));
        }
        if config.buf_size < 64 || config.buf_size > 65535 + u32::from(config.headroom) {
            return Err(PoolError::Invalid(format!(
                "buffer size {} is outside 64..=65535 + headroom",
                config.buf_size
            )));
        }
        if u32::from(config.headroom) >= config.buf_size {
            return Err(PoolError::Invalid(format!(
                "headroom {} leaves no room in a {}-byte buffer",
                config.headroom, config.buf_size
            )));
        }
        let len = config.count as usize * config.buf_size as usize;
        let mut region = region::map(len, config.hugepages)?;
        let base = NonNull::new(region.map.as_mut_ptr())
            .ok_or_else(|| PoolError::Map(len, "null mapping".into()))?;
        let free = ArrayQueue::new(config.count as usize);
        for i in 0..config.count {
            // Cannot fail: the queue has exactly `count` slots.
            let _ = free.push(i);
        }
        let shared = Box::new(Shared {
            refs: AtomicUsize::new(1),
            free,
            base,
            buf_size: config.buf_size,
            headroom: config.headroom,
            count: config.count,
            exhausted: AtomicU64::new(0),
            name: config.name.clone(),
            region,
        });
        Ok(Pool {
            shared: NonNull::from(Box::leak(shared)),
        })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: a handle owns a reference, so the pool is alive.
        unsafe { self.shared.as_ref() }
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// Bytes a packet can hold after the headroom.
    pub fn data_room(&self) -> usize {
        let s = self.shared();
        (s.buf_size - u32::from(s.headroom)) as usize
    }

    /// Allocates one packet from the shared free list (the slow path: stages on
    /// the hot path use a [`PoolCache`]).
    pub fn alloc(&self) -> Option<Packet> {
        let s = self.shared();
        match s.free.pop() {
            Some(idx) => {
                s.refs.fetch_add(1, Ordering::Relaxed);
                Some(Packet::new(self.shared, idx, s.headroom))
            }
            None => {
                s.exhausted.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// A cache of free buffers for one lcore.
    pub fn cache(&self) -> PoolCache {
        PoolCache {
            pool: self.clone(),
            free: Vec::with_capacity(CACHE_SIZE * 2),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> PoolStats {
        let s = self.shared();
        PoolStats {
            count: s.count,
            free: s.free.len() as u32,
            exhausted: s.exhausted.load(Ordering::Relaxed),
            hugepages: s.region.hugepages,
        }
    }
}

impl Clone for Pool {
    fn clone(&self) -> Self {
        self.shared().refs.fetch_add(1, Ordering::Relaxed);
        Pool {
            shared: self.shared,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: this handle owns one reference.
        unsafe { Shared::release(self.shared, 1) }
    }
}

impl core::fmt::Debug for Pool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pool")
            .field("name", &self.name())
            .field("stats", &self.stats())
            .finish()
    }
}

/// Buffers an lcore cache keeps before returning the surplus to the shared list.
const CACHE_SIZE: usize = 256;

/// An lcore's private stock of free buffers of one pool.
///
/// Allocation pops from the stock and refills it from the shared free list a
/// batch at a time; [`PoolCache::free_bulk`] puts packets of its pool back into
/// the stock. Either takes or releases pool references once per call.
pub struct PoolCache {
    pool: Pool,
    free: Vec<u32>,
}

impl PoolCache {
    /// The pool this cache draws from.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    fn refill(&mut self) {
        let s = self.pool.shared();
        while self.free.len() < CACHE_SIZE {
            match s.free.pop() {
                Some(i) => self.free.push(i),
                None => break,
            }
        }
    }

    /// Allocates up to `n` empty packets (at most the burst's room) into `out`;
    /// returns how many. Fewer than asked means the pool ran dry, and is counted.
    pub fn alloc_bulk(&mut self, out: &mut Burst, n: usize) -> usize {
        let n = n.min(out.room());
        if self.free.len() < n {
            self.refill();
        }
        let got = n.min(self.free.len());
        let s = self.pool.shared();
        if got < n {
            s.exhausted.fetch_add((n - got) as u64, Ordering::Relaxed);
        }
        if got == 0 {
            return 0;
        }
        s.refs.fetch_add(got, Ordering::Relaxed);
        let headroom = s.headroom;
        for idx in self.free.drain(self.free.len() - got..) {
            // Cannot fail: `got` is at most the burst's room.
            let _ = out.push(Packet::new(self.pool.shared, idx, headroom));
        }
        got
    }

    /// Allocates one empty packet.
    pub fn alloc(&mut self) -> Option<Packet> {
        if self.free.is_empty() {
            self.refill();
        }
        let s = self.pool.shared();
        match self.free.pop() {
            Some(idx) => {
                s.refs.fetch_add(1, Ordering::Relaxed);
                Some(Packet::new(self.pool.shared, idx, s.headroom))
            }
            None => {
                s.exhausted.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Frees every packet of the burst: those of this cache's pool go back into
    /// the cache with one reference release for all of them; others are dropped.
    pub fn free_bulk(&mut self, burst: &mut Burst) {
        let mut mine = 0;
        for pkt in burst.drain() {
            if let Some(idx) = pkt.index_in(self.pool.shared) {
                self.free.push(idx);
                core::mem::forget(pkt);
                mine += 1;
            }
        }
        if mine > 0 {
            // SAFETY: each forgotten packet owned one reference; the cache's own
            // pool handle keeps the pool alive past this call.
            unsafe { Shared::release(self.pool.shared, mine) }
        }
        if self.free.len() > CACHE_SIZE * 2 {
            let s = self.pool.shared();
            for idx in self.free.drain(CACHE_SIZE..) {
                let _ = s.free.push(idx);
            }
        }
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        let s = self.pool.shared();
        for idx in self.free.drain(..) {
            let _ = s.free.push(idx);
        }
    }
}

/// A packet: a buffer with a window of valid data in it.
///
/// A packet has exactly one owner; dropping it returns the buffer to where it
/// came from. Data sits after a headroom so headers can be prepended without a
/// copy. The buffer is one of a [`Pool`] or, with the `dpdk` feature, a DPDK
/// mbuf received on a dpdk port: mbufs travel through every stage as they
/// are, and leave on a dpdk port without a copy.
pub struct Packet {
    inner: Inner,
}

enum Inner {
    Pool(PoolBuf),
    #[cfg(feature = "dpdk")]
    Mbuf(crate::sys::dpdk::Mbuf),
}

/// A buffer of a [`Pool`].
struct PoolBuf {
    pool: NonNull<Shared>,
    idx: u32,
    off: u16,
    len: u16,
}

// SAFETY: a packet is the only handle to its buffer's bytes, and the pool state
// it reaches is atomic.
unsafe impl Send for PoolBuf {}
// SAFETY: `&PoolBuf` only reads the packet's own bytes.
unsafe impl Sync for PoolBuf {}

impl PoolBuf {
    fn shared(&self) -> &Shared {
        // SAFETY: a packet owns a reference, so the pool is alive.
        unsafe { self.pool.as_ref() }
    }

    fn buf_size(&self) -> usize {
        self.shared().buf_size as usize
    }

    fn data(&self) -> &[u8] {
        // SAFETY: off + len <= buf_size is kept by every mutator, the buffer is
        // inside the live region, and this packet is its only owner.
        unsafe {
            core::slice::from_raw_parts(
                self.shared().buffer(self.idx).add(self.off as usize),
                self.len as usize,
            )
        }
    }

    fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `data`, and `&mut self` makes the access exclusive.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.shared().buffer(self.idx).add(self.off as usize),
                self.len as usize,
            )
        }
    }

    fn spare_capacity(&mut self) -> &mut [u8] {
        let room = (self.buf_size() - self.off as usize).min(u16::MAX as usize);
        // SAFETY: off + room <= buf_size, inside the live region; exclusive by &mut.
        unsafe {
            core::slice::from_raw_parts_mut(
                self.shared().buffer(self.idx).add(self.off as usize),
                room,
            )
        }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        let s = self.shared();
        // Cannot fail: every index is unique and the queue holds them all.
        let _ = s.free.push(self.idx);
        // SAFETY: this packet owned one reference.
        unsafe { Shared::release(self.pool, 1) }
    }
}

impl Packet {
    fn new(pool: NonNull<Shared>, idx: u32, headroom: u16) -> Packet {
        Packet {
            inner: Inner::Pool(PoolBuf {
                pool,
                idx,
                off: headroom,
                len: 0,
            }),
        }
    }

    /// A packet holding a DPDK mbuf (as received on a dpdk port).
    #[cfg(feature = "dpdk")]
    pub fn from_mbuf(m: crate::sys::dpdk::Mbuf) -> Packet {
        Packet {
            inner: Inner::Mbuf(m),
        }
    }

    /// The mbuf, if this packet is one; otherwise the packet back.
    #[cfg(feature = "dpdk")]
    pub fn into_mbuf(self) -> Result<crate::sys::dpdk::Mbuf, Packet> {
        match self.inner {
            Inner::Mbuf(m) => Ok(m),
            other => Err(Packet { inner: other }),
        }
    }

    /// Whether the packet is a DPDK mbuf.
    pub fn is_mbuf(&self) -> bool {
        match &self.inner {
            Inner::Pool(_) => false,
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(_) => true,
        }
    }

    /// The pool index, if this packet is a buffer of `pool`.
    fn index_in(&self, pool: NonNull<Shared>) -> Option<u32> {
        match &self.inner {
            Inner::Pool(b) if b.pool == pool => Some(b.idx),
            _ => None,
        }
    }

    /// Bytes of data.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Pool(b) => b.len as usize,
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => usize::from(m.data_len()),
        }
    }

    /// Whether the packet holds no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes free in front of the data.
    pub fn headroom(&self) -> usize {
        match &self.inner {
            Inner::Pool(b) => b.off as usize,
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => usize::from(m.headroom()),
        }
    }

    /// Bytes free after the data.
    pub fn tailroom(&self) -> usize {
        match &self.inner {
            Inner::Pool(b) => b.buf_size() - b.off as usize - b.len as usize,
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => usize::from(m.tailroom()),
        }
    }

    /// The data.
    pub fn data(&self) -> &[u8] {
        match &self.inner {
            Inner::Pool(b) => b.data(),
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.data(),
        }
    }

    /// The data, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Pool(b) => b.data_mut(),
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.data_mut(),
        }
    }

    /// Grows the data by `n` bytes at the end and returns them (contents are
    /// whatever the buffer held).
    pub fn append(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        if n > self.tailroom() || self.len() + n > u16::MAX as usize {
            return Err(BufError::NoRoom(n));
        }
        match &mut self.inner {
            Inner::Pool(b) => {
                let old = b.len as usize;
                b.len += n as u16;
                Ok(&mut b.data_mut()[old..])
            }
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.append(n as u16).ok_or(BufError::NoRoom(n)),
        }
    }

    /// Grows the data by `n` bytes at the front and returns them.
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        if n > self.headroom() || self.len() + n > u16::MAX as usize {
            return Err(BufError::NoRoom(n));
        }
        match &mut self.inner {
            Inner::Pool(b) => {
                b.off -= n as u16;
                b.len += n as u16;
                Ok(&mut b.data_mut()[..n])
            }
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.prepend(n as u16).ok_or(BufError::NoRoom(n)),
        }
    }

    /// Removes `n` bytes from the front.
    pub fn adj(&mut self, n: usize) -> Result<(), BufError> {
        if n > self.len() {
            return Err(BufError::TooShort(n));
        }
        match &mut self.inner {
            Inner::Pool(b) => {
                b.off += n as u16;
                b.len -= n as u16;
                Ok(())
            }
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.adj(n as u16).then_some(()).ok_or(BufError::TooShort(n)),
        }
    }

    /// Shortens the data to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            let _ = self.set_len(len);
        }
    }

    /// Sets the data to a copy of `bytes`, keeping the headroom.
    pub fn set_data(&mut self, bytes: &[u8]) -> Result<(), BufError> {
        self.set_len(0)?;
        self.append(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    /// A copy of this packet in a new buffer from the same place (the slow
    /// path, for duplication impairments and tests).
    pub fn try_clone(&self) -> Option<Packet> {
        match &self.inner {
            Inner::Pool(b) => {
                let s = b.shared();
                let idx = s.free.pop()?;
                s.refs.fetch_add(1, Ordering::Relaxed);
                let mut p = Packet::new(b.pool, idx, b.off);
                // Same geometry as the original, so the data fits.
                p.append(b.len as usize).ok()?.copy_from_slice(b.data());
                Some(p)
            }
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.try_clone().map(Packet::from_mbuf),
        }
    }

    /// The whole buffer after the data start as writable space, for receive
    /// paths that fill a packet in place and then set its length.
    pub fn spare_capacity(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Pool(b) => b.spare_capacity(),
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => m.spare_capacity(),
        }
    }

    /// Sets the data length after filling [`Packet::spare_capacity`].
    pub fn set_len(&mut self, len: usize) -> Result<(), BufError> {
        match &mut self.inner {
            Inner::Pool(b) => {
                if len > b.buf_size() - b.off as usize || len > u16::MAX as usize {
                    return Err(BufError::NoRoom(len));
                }
                b.len = len as u16;
                Ok(())
            }
            #[cfg(feature = "dpdk")]
            Inner::Mbuf(m) => u16::try_from(len)
                .ok()
                .filter(|&l| m.set_len(l))
                .map(|_| ())
                .ok_or(BufError::NoRoom(len)),
        }
    }
}

impl core::fmt::Debug for Packet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Packet")
            .field("mbuf", &self.is_mbuf())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn small() -> Pool {
        Pool::new(&PoolConfig {
            count: 8,
            buf_size: 256,
            headroom: 32,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn alloc_until_exhausted_is_counted() {
        let pool = small();
        let mut held: Vec<_> = (0..8).map(|_| pool.alloc().unwrap()).collect();
        assert!(pool.alloc().is_none());
        assert_eq!(pool.stats().exhausted, 1);
        held.pop();
        assert!(pool.alloc().is_some());
    }

    #[test]
    fn cache_bulk_round_trip() {
        let pool = small();
        let mut cache = pool.cache();
        let mut burst = Burst::new();
        assert_eq!(cache.alloc_bulk(&mut burst, 10), 8);
        assert_eq!(pool.stats().exhausted, 2);
        cache.free_bulk(&mut burst);
        assert!(burst.is_empty());
        drop(cache);
        assert_eq!(pool.stats().free, 8);
    }

    #[test]
    fn headroom_prepend_adj() {
        let pool = small();
        let mut p = pool.alloc().unwrap();
        assert_eq!(p.headroom(), 32);
        p.set_data(b"payload").unwrap();
        p.prepend(4).unwrap().copy_from_slice(b"hdr:");
        assert_eq!(p.data(), b"hdr:payload");
        p.adj(4).unwrap();
        assert_eq!(p.data(), b"payload");
        assert_eq!(p.prepend(100), Err(BufError::NoRoom(100)));
        assert_eq!(p.adj(100), Err(BufError::TooShort(100)));
        assert!(p.append(1000).is_err());
        assert_eq!(p.tailroom(), 256 - 32 - 7);
        let q = p.try_clone().unwrap();
        assert_eq!(q.data(), b"payload");
    }

    #[test]
    fn packets_outlive_their_pool_handle() {
        let pool = small();
        let mut p = pool.alloc().unwrap();
        drop(pool);
        p.set_data(b"still here").unwrap();
        assert_eq!(p.data(), b"still here");
    }

    #[test]
    fn cross_thread_free() {
        let pool = small();
        let mut cache = pool.cache();
        let mut burst = Burst::new();
        cache.alloc_bulk(&mut burst, 8);
        let t = std::thread::spawn(move || drop(burst));
        t.join().unwrap();
        drop(cache);
        assert_eq!(pool.stats().free, 8);
    }

    #[test]
    fn hugepages_required_without_mount_is_a_clear_error() {
        if region::hugetlbfs_mount().is_some() {
            return; // covered by the hugepage test in scripts/test when present
        }
        let err = Pool::new(&PoolConfig {
            hugepages: HugepageMode::Required,
            ..PoolConfig::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("setup-hugepages.sh"), "{err}");
    }
}
