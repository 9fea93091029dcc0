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

/// `RTE_MBUF_F_EXTERNAL`: the one offload flag a reset keeps (checked against
/// DPDK's value in the tests; bindgen does not see 64-bit macros).
const MBUF_F_EXTERNAL: u64 = 1 << 61;

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
    /// Pack the mbuf headers apart from their data rooms (see
    /// [`PktmbufPool::create`]).
    pub packed: bool,
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
            packed: false,
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
    /// The data rooms of a packed pool (null for a classic one).
    data_zone: *const ffi::rte_memzone,
}

// SAFETY: rte_mempool is designed for concurrent use from many threads (its
// default ring is MP/MC); the handle is only a pointer to it, and the data
// zone pointer is only read, to free the zone in drop.
unsafe impl Send for PktmbufPool {}
// SAFETY: as above; every method through &self is a thread-safe DPDK call.
unsafe impl Sync for PktmbufPool {}

impl PktmbufPool {
    /// Creates a pool: `rte_pktmbuf_pool_create`, or with
    /// [`PoolConfig::packed`] a pool of bare mbuf headers whose data rooms
    /// lie in one IOVA-contiguous memzone, each header pointing at its own
    /// room. The headers of a packed pool are 192 bytes apart instead of a
    /// data room apart, so a burst's headers share few pages (TLB entries);
    /// the mbufs behave as DPDK's classic ones (same room, headroom, reset
    /// and free), except that nothing may attach to them
    /// (`rte_pktmbuf_attach`/`clone`: DPDK finds the header of an attached
    /// buffer by subtracting the header size from its address). linerate
    /// never does; see `src/sys/dpdk_shim.h`.
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
        let mut data_zone: *const ffi::rte_memzone = std::ptr::null();
        let p = if cfg.packed {
            // Memzone names are unique per process, as pool names are.
            let data_name =
                CString::new(format!("lrd_{}", cfg.name)).map_err(|_| DpdkError::Nul {
                    what: "pool name",
                    value: cfg.name.clone(),
                })?;
            // SAFETY: as below; data_zone is a valid out-pointer, written on
            // success only.
            unsafe {
                ffi::lr_pktmbuf_pool_create_packed(
                    name.as_ptr(),
                    data_name.as_ptr(),
                    cfg.count,
                    cfg.cache,
                    cfg.data_room,
                    cfg.socket,
                    &mut data_zone,
                )
            }
        } else {
            // SAFETY: the EAL is initialised (_eal); name is a valid C string
            // copied by DPDK; the numeric arguments are validated by DPDK.
            unsafe {
                ffi::rte_pktmbuf_pool_create(
                    name.as_ptr(),
                    cfg.count,
                    cfg.cache,
                    0,
                    cfg.data_room,
                    cfg.socket,
                )
            }
        };
        match NonNull::new(p) {
            Some(ptr) => Ok(PktmbufPool {
                ptr,
                name: cfg.name.clone(),
                data_zone,
            }),
            None => {
                let errno = rte_errno();
                if cfg.packed {
                    // The data zone is one IOVA-contiguous block: on
                    // hugepages in IOVA-as-PA mode that is physically
                    // contiguous memory, which 2 MiB pages rarely offer.
                    return Err(DpdkError::Invalid(format!(
                        "creating the packed mbuf pool {:?} ({} mbufs, socket {}) failed: {} \
                         (errno {errno}); its {}-byte data rooms form one IOVA-contiguous zone, \
                         which hugepages in IOVA-as-PA mode rarely offer: add the EAL argument \
                         --iova-mode=va, or set mbuf_layout = \"classic\"",
                        cfg.name,
                        cfg.count,
                        cfg.socket,
                        strerror(errno),
                        cfg.data_room
                    )));
                }
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

    /// Whether the mbuf headers are packed apart from their data rooms.
    pub fn is_packed(&self) -> bool {
        !self.data_zone.is_null()
    }

    /// Bytes from one mbuf header to the next: the mempool object with its
    /// header and trailer (about 2.3 KiB classic, a few hundred bytes packed).
    pub fn object_size(&self) -> u32 {
        // SAFETY: the pool pointer is valid for self's lifetime; the sizes
        // are set at creation and never change.
        let mp = unsafe { self.ptr.as_ref() };
        mp.header_size + mp.elt_size + mp.trailer_size
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

    /// Appends `n` mbufs to `burst` (all or nothing, limited to its spare
    /// capacity) and writes each packet in the same pass: `write(i, room)`
    /// gets packet `i`'s room, from the default headroom to the end of the
    /// buffer, and returns the packet's length (clamped to the room). Returns
    /// (mbufs added, bytes written).
    ///
    /// One pass instead of [`PktmbufPool::alloc_into`]'s two (an
    /// `rte_pktmbuf_reset` of every mbuf, then the writer's): the mbufs come
    /// raw from `rte_mempool_get_bulk` and get here the fields a transmitted
    /// packet needs, in the header line the length update touches anyway, as
    /// `dpdk-testpmd`'s txonly does. What a raw mbuf already has right is not
    /// rewritten: `refcnt` 1, `next` null and `nb_segs` 1 are DPDK's invariant
    /// for mbufs in a pool, and `tx_offload` (second line) is read only with
    /// an offload flag, all of which are cleared.
    #[inline]
    pub fn alloc_fill_into(
        &self,
        burst: &mut Burst,
        n: usize,
        mut write: impl FnMut(usize, &mut [u8]) -> usize,
    ) -> (usize, u64) {
        let spare = burst.spare_raw();
        let n = n.min(spare.len());
        // SAFETY: spare[..n] is writable room for n pointers; the pool pointer
        // is valid; on success we own n raw mbufs of this pool.
        if n == 0
            || unsafe {
                ffi::lr_mempool_get_bulk(self.ptr.as_ptr(), spare.as_mut_ptr().cast(), n as u32)
            } != 0
        {
            return (0, 0);
        }
        let mut bytes = 0u64;
        for (i, &p) in spare[..n].iter().enumerate() {
            // SAFETY: p is a raw mbuf of this pool, owned by us alone; its
            // buffer spans buf_len bytes from buf_addr, so the slice from
            // data_off (<= buf_len) to the end is inside it, and the length
            // written back stays inside it too. If `write` panics the mbufs
            // not yet in the burst leak; nothing is freed twice.
            unsafe {
                let m = &mut *p;
                let off = HEADROOM.min(m.buf_len);
                let room = m.buf_len - off;
                m.data_off = off;
                m.port = u16::MAX; // RTE_MBUF_PORT_INVALID
                m.ol_flags &= MBUF_F_EXTERNAL;
                m.__bindgen_anon_1.packet_type = 0;
                m.vlan_tci = 0;
                m.vlan_tci_outer = 0;
                let data = std::slice::from_raw_parts_mut(
                    m.buf_addr.cast::<u8>().add(usize::from(off)),
                    usize::from(room),
                );
                let len = write(i, data).min(usize::from(room)) as u16;
                m.data_len = len;
                m.pkt_len = u32::from(len);
                bytes += u64::from(len);
            }
        }
        // SAFETY: the n slots after len now hold initialised mbufs we own.
        unsafe { burst.set_len(burst.len() + n) };
        (n, bytes)
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
            if !self.data_zone.is_null() {
                // SAFETY: the zone holds the data rooms of the pool just
                // freed, so no mbuf points into it any more.
                unsafe { ffi::lr_memzone_free(self.data_zone) };
            }
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_external_flag_is_dpdks() {
        // SAFETY: returns a constant; no EAL needed.
        assert_eq!(MBUF_F_EXTERNAL, unsafe { ffi::lr_mbuf_f_external() });
    }
}
