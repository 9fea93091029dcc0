//! Packet-mbuf pools (`rte_pktmbuf_pool_create`), one per NUMA socket.

use std::ffi::CString;
use std::ptr::NonNull;

use super::eal::Eal;
use super::error::{rte_errno, strerror, DpdkError};
use super::mbuf::{Burst, Mbuf};
use crate::sys::ffi::dpdk as ffi;

/// Any NUMA socket (`SOCKET_ID_ANY`).
pub const SOCKET_ANY: i32 = -1;

/// The default data room: 2048 bytes of packet data plus
/// `RTE_PKTMBUF_HEADROOM` (128) of headroom.
pub const DEFAULT_DATA_ROOM: u16 = ffi::LR_RTE_MBUF_DEFAULT_BUF_SIZE as u16;

/// The headroom reserved in front of received/allocated packet data.
pub const HEADROOM: u16 = ffi::LR_RTE_PKTMBUF_HEADROOM as u16;

/// Parameters of a pktmbuf pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Pool name (unique per process; at most 25 bytes).
    pub name: String,
    /// Number of mbufs; a power of two minus one uses memory best.
    pub count: u32,
    /// Per-lcore cache size (0..=512; must divide into `count` sensibly:
    /// DPDK requires `cache * 1.5 <= count`).
    pub cache: u32,
    /// Data room per mbuf, headroom included ([`DEFAULT_DATA_ROOM`]).
    pub data_room: u16,
    /// NUMA socket, or [`SOCKET_ANY`].
    pub socket: i32,
}

impl PoolConfig {
    /// `count` mbufs of the default size with a 256-entry cache on `socket`.
    pub fn new(name: &str, count: u32, socket: i32) -> Self {
        PoolConfig {
            name: name.to_string(),
            count,
            cache: 256.min(count / 2),
            data_room: DEFAULT_DATA_ROOM,
            socket,
        }
    }
}

/// A pktmbuf pool. Thread-safe (multi-producer/multi-consumer); each EAL
/// lcore or registered thread gets its own cache.
///
/// Dropping the pool frees it only when every mbuf has come back
/// (`in_use() == 0`); otherwise it is leaked, so an mbuf that outlives its
/// pool stays valid.
#[derive(Debug)]
pub struct PktmbufPool {
    ptr: NonNull<ffi::rte_mempool>,
    name: String,
}

// SAFETY: rte_mempool is designed for concurrent use from many threads (its
// default ring is MP/MC); the handle is only a pointer to it.
unsafe impl Send for PktmbufPool {}
// SAFETY: as above; every method through &self is a thread-safe DPDK call.
unsafe impl Sync for PktmbufPool {}

impl PktmbufPool {
    /// Creates a pool (`rte_pktmbuf_pool_create`).
    pub fn create(_eal: &Eal, cfg: &PoolConfig) -> Result<Self, DpdkError> {
        let name = CString::new(cfg.name.as_str()).map_err(|_| DpdkError::Nul {
            what: "pool name",
            value: cfg.name.clone(),
        })?;
        if u64::from(cfg.cache) * 3 / 2 > u64::from(cfg.count) {
            return Err(DpdkError::Invalid(format!(
                "mbuf pool {:?}: cache {} is too large for {} mbufs (DPDK needs cache * 1.5 <= count)",
                cfg.name, cfg.cache, cfg.count
            )));
        }
        // SAFETY: the EAL is initialised (_eal); name is a valid C string
        // copied by DPDK; the numeric arguments are validated by DPDK.
        let p = unsafe {
            ffi::rte_pktmbuf_pool_create(
                name.as_ptr(),
                cfg.count,
                cfg.cache,
                0,
                cfg.data_room,
                cfg.socket,
            )
        };
        match NonNull::new(p) {
            Some(ptr) => Ok(PktmbufPool {
                ptr,
                name: cfg.name.clone(),
            }),
            None => {
                let errno = rte_errno();
                Err(DpdkError::Call {
                    op: format!(
                        "rte_pktmbuf_pool_create({:?}, {} mbufs of {} bytes, socket {})",
                        cfg.name, cfg.count, cfg.data_room, cfg.socket
                    ),
                    errno,
                    reason: strerror(errno),
                })
            }
        }
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw pool pointer (for `rte_eth_rx_queue_setup`).
    pub fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.ptr.as_ptr()
    }

    /// Allocates one mbuf (reset, refcnt 1, empty), or `None` when empty.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool pointer is valid for self's lifetime; the returned
        // mbuf (if any) is exclusively ours.
        let m = unsafe { ffi::lr_pktmbuf_alloc(self.ptr.as_ptr()) };
        // SAFETY: a non-null result is a fresh mbuf with refcnt 1.
        NonNull::new(m).map(|m| unsafe { Mbuf::from_raw(m) })
    }

    /// Allocates an mbuf holding a copy of `bytes` (the one copy at a
    /// boundary from a non-DPDK buffer); `None` when the pool is empty or
    /// `bytes` exceeds the data room.
    #[inline]
    pub fn alloc_copy(&self, bytes: &[u8]) -> Option<Mbuf> {
        let len = u16::try_from(bytes.len()).ok()?;
        let mut m = self.alloc()?;
        m.append(len)?.copy_from_slice(bytes);
        Some(m)
    }

    /// Fills `out` with fresh mbufs, all or nothing (`rte_pktmbuf_alloc_bulk`).
    /// Returns false (and writes nothing meaningful) when the pool has fewer
    /// than `out.len()` available. The caller owns the mbufs written.
    #[inline]
    pub fn alloc_bulk_raw(&self, out: &mut [*mut ffi::rte_mbuf]) -> bool {
        // SAFETY: out is a valid writable array of out.len() pointers; the
        // pool pointer is valid.
        let ret = unsafe {
            ffi::lr_pktmbuf_alloc_bulk(self.ptr.as_ptr(), out.as_mut_ptr(), out.len() as u32)
        };
        ret == 0
    }

    /// Appends `n` fresh mbufs to `burst` (all or nothing, limited to the
    /// burst's spare capacity); returns how many were added (0 or `n`).
    #[inline]
    pub fn alloc_into(&self, burst: &mut Burst, n: usize) -> usize {
        let spare = burst.spare_raw();
        let n = n.min(spare.len());
        if n == 0 || !self.alloc_bulk_raw(&mut spare[..n]) {
            return 0;
        }
        // SAFETY: the n slots after len now hold fresh mbufs we own.
        unsafe { burst.set_len(burst.len() + n) };
        n
    }

    /// Frees mbufs in bulk (`rte_pktmbuf_free_bulk`; null entries skipped).
    ///
    /// # Safety
    /// Each non-null pointer must be an mbuf the caller owns and never uses
    /// again.
    #[inline]
    pub unsafe fn free_bulk_raw(mbufs: &mut [*mut ffi::rte_mbuf]) {
        // SAFETY: the caller hands over ownership of every mbuf.
        unsafe { ffi::rte_pktmbuf_free_bulk(mbufs.as_mut_ptr(), mbufs.len() as u32) };
    }

    /// Mbufs available (in the pool and in the lcore caches).
    pub fn avail(&self) -> u32 {
        // SAFETY: the pool pointer is valid; a read-only count.
        unsafe { ffi::rte_mempool_avail_count(self.ptr.as_ptr()) }
    }

    /// Mbufs handed out and not yet returned.
    pub fn in_use(&self) -> u32 {
        // SAFETY: as avail().
        unsafe { ffi::rte_mempool_in_use_count(self.ptr.as_ptr()) }
    }
}

impl Drop for PktmbufPool {
    fn drop(&mut self) {
        if self.in_use() == 0 {
            // SAFETY: no mbuf of this pool is outstanding, and we own the pool
            // (created by us, freed once). A queue set up with it must have
            // been stopped: ports release their rx mbufs on stop/close.
            unsafe { ffi::rte_mempool_free(self.ptr.as_ptr()) };
        }
    }
}
