//! RC (reliable connected) queue pairs for the RPC transport
//! (`rpc::transport::verbs`): memory regions open to remote write or read, port
//! addressing (LID, GID), `ibv_modify_qp` with caller-chosen attributes, and
//! `RDMA_WRITE_WITH_IMM`, `RDMA_READ` and zero-length receives.
//!
//! Kept apart from the raw-packet queue code of the parent module, whose
//! private handles (`Context`, `Pd`, `MemoryRegion`, `Cq`) it reuses.

use std::ptr::NonNull;
use std::sync::Arc;

use super::{
    last_errno, os_error, poll, post_send_one, send_flags, Context, Cq, IbvError, MemoryRegion, Pd,
};
use crate::sys::ffi::ibverbs as ffi;

impl MemoryRegion {
    /// Allocates `len` bytes and registers them with `access`
    /// (`IBV_ACCESS_*` bits, e.g. local write | remote write).
    pub fn with_access(pd: &Arc<Pd>, len: usize, access: u32) -> Result<Self, IbvError> {
        let mut mem = memmap2::MmapMut::map_anon(len)
            .map_err(|e| os_error(format!("mmap {len} bytes"), e.raw_os_error().unwrap_or(0)))?;
        // SAFETY: mem is a valid writable region of len bytes that lives as
        // long as the registration (both in self; mr is deregistered first).
        let mr =
            unsafe { ffi::ibv_reg_mr(pd.pd.as_ptr(), mem.as_mut_ptr().cast(), len, access as i32) };
        NonNull::new(mr)
            .map(|mr| MemoryRegion {
                mr,
                mem,
                _pd: Arc::clone(pd),
            })
            .ok_or_else(|| {
                os_error(
                    format!("ibv_reg_mr({len} bytes, access {access:#x})"),
                    last_errno(),
                )
            })
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: mr is valid while self lives.
        unsafe { self.mr.as_ref().rkey }
    }

    /// The address of the first byte, as the peer names it.
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
}

/// The immediate of a completion (`ibv_wc.imm_data`, network order).
pub fn wc_imm_data(wc: &ffi::ibv_wc) -> u32 {
    // SAFETY: both members of the union are plain u32 values.
    unsafe { wc.__bindgen_anon_1.imm_data }
}

/// A port's addressing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAddr {
    /// LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The GID at the asked index.
    pub gid: [u8; 16],
    /// RoCE (Ethernet link layer): the GID must be used.
    pub ethernet: bool,
    /// `ibv_port_attr.active_mtu` (an `ibv_mtu` value).
    pub active_mtu: u32,
    /// The port is up.
    pub active: bool,
}

impl Context {
    /// Queries port `port` and its GID at `gid_index`.
    pub fn port_addr(&self, port: u8, gid_index: u8) -> Result<PortAddr, IbvError> {
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: valid context; attr is a valid out-pointer.
        let ret = unsafe { ffi::lr_ibv_query_port(self.ctx.as_ptr(), port, &mut attr) };
        if ret != 0 {
            return Err(os_error(format!("ibv_query_port(port {port})"), ret));
        }
        let mut gid = ffi::ibv_gid::default();
        // SAFETY: valid context; gid is a valid out-pointer.
        let ret = unsafe {
            ffi::lr_ibv_query_gid(self.ctx.as_ptr(), port, i32::from(gid_index), &mut gid)
        };
        if ret != 0 {
            return Err(os_error(
                format!("ibv_query_gid(port {port}, index {gid_index})"),
                last_errno(),
            ));
        }
        Ok(PortAddr {
            lid: attr.lid,
            // SAFETY: both union members are plain bytes.
            gid: unsafe { gid.raw },
            ethernet: u32::from(attr.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET,
            active_mtu: attr.active_mtu,
            active: attr.state == ffi::IBV_PORT_ACTIVE,
        })
    }
}

/// Sizes of an RC queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcQpConfig {
    /// Send queue depth (and send CQ size).
    pub send_depth: u32,
    /// Receive queue depth (and receive CQ size).
    pub recv_depth: u32,
    /// Largest inline send.
    pub max_inline: u32,
}

/// An `IBV_QPT_RC` queue pair with its own send and receive completion queues.
/// The caller drives its state with [`RcQp::modify`].
pub struct RcQp {
    qp: NonNull<ffi::ibv_qp>,
    send_cq: Cq,
    recv_cq: Cq,
    cfg: RcQpConfig,
    recv_wrs: Vec<ffi::ibv_recv_wr>,
    _pd: Arc<Pd>,
}

// SAFETY: the QP is driven by one thread at a time (&mut self methods).
unsafe impl Send for RcQp {}

impl std::fmt::Debug for RcQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcQp")
            .field("qpn", &self.qpn())
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl RcQp {
    /// Creates the CQs and the QP (state RESET).
    pub fn new(pd: &Arc<Pd>, cfg: RcQpConfig) -> Result<Self, IbvError> {
        let send_cq = Cq::create(&pd.ctx, cfg.send_depth)?;
        let recv_cq = Cq::create(&pd.ctx, cfg.recv_depth)?;
        let mut init = ffi::ibv_qp_init_attr {
            send_cq: send_cq.0.as_ptr(),
            recv_cq: recv_cq.0.as_ptr(),
            qp_type: ffi::IBV_QPT_RC,
            sq_sig_all: 0,
            cap: ffi::ibv_qp_cap {
                max_send_wr: cfg.send_depth,
                max_recv_wr: cfg.recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: cfg.max_inline,
            },
            ..Default::default()
        };
        // SAFETY: valid PD and CQs; init is a valid attribute struct.
        let qp = unsafe { ffi::ibv_create_qp(pd.pd.as_ptr(), &mut init) };
        let qp =
            NonNull::new(qp).ok_or_else(|| os_error("ibv_create_qp(IBV_QPT_RC)", last_errno()))?;
        Ok(RcQp {
            qp,
            send_cq,
            recv_cq,
            cfg,
            recv_wrs: Vec::with_capacity(cfg.recv_depth as usize),
            _pd: Arc::clone(pd),
        })
    }

    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: qp is valid while self lives.
        unsafe { self.qp.as_ref().qp_num }
    }

    /// `ibv_modify_qp` with `attr` and `mask` (`IBV_QP_*` bits).
    pub fn modify(&mut self, attr: &mut ffi::ibv_qp_attr, mask: u32) -> Result<(), IbvError> {
        // SAFETY: valid QP; the caller's attr/mask describe the transition.
        let ret = unsafe { ffi::ibv_modify_qp(self.qp.as_ptr(), attr, mask as i32) };
        if ret != 0 {
            return Err(os_error(
                format!("ibv_modify_qp(state {}, mask {mask:#x})", attr.qp_state),
                ret,
            ));
        }
        Ok(())
    }

    /// Posts `n` zero-length receives (they only consume the immediates of
    /// incoming writes), with ids `first_id..first_id + n`.
    pub fn post_recv_empty(&mut self, n: u32, first_id: u64) -> Result<(), IbvError> {
        if n == 0 {
            return Ok(());
        }
        self.recv_wrs.clear();
        for i in 0..u64::from(n) {
            self.recv_wrs.push(ffi::ibv_recv_wr {
                wr_id: first_id + i,
                next: std::ptr::null_mut(),
                sg_list: std::ptr::null_mut(),
                num_sge: 0,
            });
        }
        let base = self.recv_wrs.as_mut_ptr();
        for i in 0..self.recv_wrs.len() - 1 {
            // SAFETY: i + 1 < len; the vector is not resized while chained.
            self.recv_wrs[i].next = unsafe { base.add(i + 1) };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a valid chain of work requests without scatter entries.
        let ret = unsafe { ffi::lr_ibv_post_recv(self.qp.as_ptr(), base, &mut bad) };
        if ret != 0 {
            return Err(os_error(format!("ibv_post_recv({n} empty receives)"), ret));
        }
        Ok(())
    }

    /// Posts an `RDMA_WRITE_WITH_IMM` of `len` bytes at `offset` of `mr` to
    /// `remote_addr` (`rkey`) with the immediate `imm_be` (network order).
    #[allow(clippy::too_many_arguments)]
    pub fn post_write_imm(
        &mut self,
        mr: &MemoryRegion,
        wr_id: u64,
        offset: usize,
        len: u32,
        remote_addr: u64,
        rkey: u32,
        imm_be: u32,
        signaled: bool,
    ) -> Result<(), IbvError> {
        let mut sge = mr.sge(offset, len)?;
        let flags = send_flags(len, self.cfg.max_inline, signaled);
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: i32::from(len > 0),
            opcode: ffi::IBV_WR_RDMA_WRITE_WITH_IMM,
            send_flags: flags,
            __bindgen_anon_1: ffi::ibv_send_wr__bindgen_ty_1 { imm_data: imm_be },
            wr: ffi::ibv_send_wr__bindgen_ty_2 {
                rdma: ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey },
            },
            ..Default::default()
        };
        post_send_one(self.qp, &mut wr, "RDMA_WRITE_WITH_IMM", len)
    }

    /// Posts a signalled `RDMA_READ` of `len` bytes from `remote_addr` into
    /// `offset` of `mr`.
    pub fn post_read(
        &mut self,
        mr: &MemoryRegion,
        wr_id: u64,
        offset: usize,
        len: u32,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), IbvError> {
        let mut sge = mr.sge(offset, len)?;
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: ffi::IBV_WR_RDMA_READ,
            send_flags: ffi::IBV_SEND_SIGNALED,
            wr: ffi::ibv_send_wr__bindgen_ty_2 {
                rdma: ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey },
            },
            ..Default::default()
        };
        post_send_one(self.qp, &mut wr, "RDMA_READ", len)
    }

    /// Posts one work request whose sge lies in a registered region.
    /// Polls receive completions into `wc`; returns how many.
    pub fn poll_recv(&mut self, wc: &mut [ffi::ibv_wc]) -> Result<usize, IbvError> {
        poll(&self.recv_cq, wc)
    }

    /// Polls send completions into `wc`; returns how many.
    pub fn poll_send(&mut self, wc: &mut [ffi::ibv_wc]) -> Result<usize, IbvError> {
        poll(&self.send_cq, wc)
    }
}

impl Drop for RcQp {
    fn drop(&mut self) {
        // SAFETY: created by us; the CQs (fields) are destroyed after this.
        unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
    }
}
