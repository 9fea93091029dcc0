//! The device part of the verbs transport (feature `ibverbs`): the plans of the
//! parent module turned into verbs calls on an RC queue pair.

#![forbid(unsafe_code)]

use super::{
    imm_from_wc, mask, plan_read, plan_write, rc_transition, QpState, SendQueue, VerbsInfo,
};
use crate::rpc::endpoint::PeerInfo;
use crate::rpc::transport::{Transport, TransportError};
use crate::sys::ffi::ibverbs as ffi;
use crate::sys::ibverbs::rc::{wc_imm_data, RcQp, RcQpConfig};
use crate::sys::ibverbs::{self as ibv, IbvError, MemoryRegion};
use std::collections::VecDeque;

// The attribute masks of the sans-IO state machine are the verbs ones.
const _: () = {
    assert!(mask::STATE == ffi::IBV_QP_STATE);
    assert!(mask::ACCESS_FLAGS == ffi::IBV_QP_ACCESS_FLAGS);
    assert!(mask::PKEY_INDEX == ffi::IBV_QP_PKEY_INDEX);
    assert!(mask::PORT == ffi::IBV_QP_PORT);
    assert!(mask::AV == ffi::IBV_QP_AV);
    assert!(mask::PATH_MTU == ffi::IBV_QP_PATH_MTU);
    assert!(mask::TIMEOUT == ffi::IBV_QP_TIMEOUT);
    assert!(mask::RETRY_CNT == ffi::IBV_QP_RETRY_CNT);
    assert!(mask::RNR_RETRY == ffi::IBV_QP_RNR_RETRY);
    assert!(mask::RQ_PSN == ffi::IBV_QP_RQ_PSN);
    assert!(mask::MAX_QP_RD_ATOMIC == ffi::IBV_QP_MAX_QP_RD_ATOMIC);
    assert!(mask::MIN_RNR_TIMER == ffi::IBV_QP_MIN_RNR_TIMER);
    assert!(mask::SQ_PSN == ffi::IBV_QP_SQ_PSN);
    assert!(mask::MAX_DEST_RD_ATOMIC == ffi::IBV_QP_MAX_DEST_RD_ATOMIC);
    assert!(mask::DEST_QPN == ffi::IBV_QP_DEST_QPN);
};

/// Where and how to open the verbs transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsConfig {
    /// RDMA device name (`None`: the first one).
    pub device: Option<String>,
    /// Port number.
    pub port: u8,
    /// GID index (RoCE v2 usually needs the index of the IPv4-mapped GID).
    pub gid_index: u8,
    /// Send queue depth (copyrpc: 256).
    pub send_depth: u32,
    /// Receive queue depth: zero-length receives kept posted for immediates.
    pub recv_depth: u32,
    /// Largest inline write.
    pub max_inline: u32,
    /// First packet sequence number of this side.
    pub psn: u32,
}

impl Default for VerbsConfig {
    fn default() -> Self {
        VerbsConfig {
            device: None,
            port: 1,
            gid_index: 0,
            send_depth: 256,
            recv_depth: 1024,
            max_inline: 64,
            psn: 0x1234,
        }
    }
}

/// One side of an RPC connection over an RC queue pair (see the parent module).
pub struct VerbsTransport {
    qp: RcQp,
    state: QpState,
    port_mtu: u32,
    send_mirror: MemoryRegion,
    recv_ring: MemoryRegion,
    consumer: MemoryRegion,
    read_buf: MemoryRegion,
    sq: SendQueue,
    local: VerbsInfo,
    peer: Option<VerbsInfo>,
    cfg: VerbsConfig,
    imms: VecDeque<u32>,
    recv_posted: u32,
    recv_ids: u64,
    read_wr: Option<u64>,
    read_done: Option<u64>,
    wc: Vec<ffi::ibv_wc>,
}

impl std::fmt::Debug for VerbsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsTransport")
            .field("state", &self.state)
            .field("local", &self.local)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

fn verbs_err(e: IbvError) -> TransportError {
    let hint = match e {
        IbvError::NoDevice | IbvError::NoSuchDevice { .. } => {
            "; without RDMA hardware the RPC runs over the shm transport (two \
             processes on one host) or the reliable transport over a udp or dpdk port"
        }
        _ => "",
    };
    TransportError::Failed(format!("rpc over ibverbs RC: {e}{hint}"))
}

impl VerbsTransport {
    /// Opens the device, registers the rings of `rpc.ring_size` bytes and the
    /// consumer word, and creates the queue pair (state INIT). With no RDMA
    /// device this fails with an error saying what is missing.
    pub fn open(cfg: &VerbsConfig, rpc: PeerInfo) -> Result<Self, TransportError> {
        crate::rpc::ring::check_ring_size(rpc.ring_size)
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        let ctx = ibv::open(cfg.device.as_deref()).map_err(verbs_err)?;
        let port = ctx.port_addr(cfg.port, cfg.gid_index).map_err(verbs_err)?;
        if !port.active {
            return Err(TransportError::Failed(format!(
                "rpc over ibverbs RC: port {} of {} is not active",
                cfg.port,
                ctx.name()
            )));
        }
        let pd = ctx.alloc_pd().map_err(verbs_err)?;
        let size = rpc.ring_size as usize;
        let local_write = ffi::IBV_ACCESS_LOCAL_WRITE;
        let send_mirror = MemoryRegion::with_access(&pd, size, local_write).map_err(verbs_err)?;
        let recv_ring =
            MemoryRegion::with_access(&pd, size, local_write | ffi::IBV_ACCESS_REMOTE_WRITE)
                .map_err(verbs_err)?;
        let consumer =
            MemoryRegion::with_access(&pd, 4096, local_write | ffi::IBV_ACCESS_REMOTE_READ)
                .map_err(verbs_err)?;
        let read_buf = MemoryRegion::with_access(&pd, 4096, local_write).map_err(verbs_err)?;
        let mut qp = RcQp::new(
            &pd,
            RcQpConfig {
                send_depth: cfg.send_depth,
                recv_depth: cfg.recv_depth,
                max_inline: cfg.max_inline,
            },
        )
        .map_err(verbs_err)?;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: cfg.port,
            qp_access_flags: ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_REMOTE_READ,
            ..Default::default()
        };
        let m = rc_transition(QpState::Reset, QpState::Init)
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        qp.modify(&mut attr, m).map_err(verbs_err)?;
        qp.post_recv_empty(cfg.recv_depth, 0).map_err(verbs_err)?;
        let local = VerbsInfo {
            qpn: qp.qpn(),
            psn: cfg.psn & 0xff_ffff,
            lid: port.lid,
            port: cfg.port,
            use_grh: port.ethernet,
            gid: port.gid,
            ring_addr: recv_ring.addr(),
            ring_rkey: recv_ring.rkey(),
            consumer_addr: consumer.addr(),
            consumer_rkey: consumer.rkey(),
            rpc,
        };
        Ok(VerbsTransport {
            qp,
            state: QpState::Init,
            port_mtu: port.active_mtu,
            send_mirror,
            recv_ring,
            consumer,
            read_buf,
            sq: SendQueue::new(cfg.send_depth),
            local,
            peer: None,
            cfg: cfg.clone(),
            imms: VecDeque::with_capacity(cfg.recv_depth as usize),
            recv_posted: cfg.recv_depth,
            recv_ids: u64::from(cfg.recv_depth),
            read_wr: None,
            read_done: None,
            wc: vec![ffi::ibv_wc::default(); 32],
        })
    }

    /// This side's record for the peer.
    pub fn info(&self) -> VerbsInfo {
        self.local
    }

    /// Connects to the peer that sent `peer`: INIT → RTR → RTS.
    pub fn connect(&mut self, peer: VerbsInfo) -> Result<(), TransportError> {
        if peer.rpc.ring_size != self.local.rpc.ring_size {
            return Err(TransportError::Failed(format!(
                "peer ring size {} differs from local {}",
                peer.rpc.ring_size, self.local.rpc.ring_size
            )));
        }
        let bad = |e: super::BadTransition| TransportError::Failed(e.to_string());
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            path_mtu: self.port_mtu,
            dest_qp_num: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ..Default::default()
        };
        attr.ah_attr.dlid = peer.lid;
        attr.ah_attr.port_num = self.cfg.port;
        if peer.use_grh {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = peer.gid;
            attr.ah_attr.grh.sgid_index = self.cfg.gid_index;
            attr.ah_attr.grh.hop_limit = 64;
        }
        let m = rc_transition(QpState::Init, QpState::Rtr).map_err(bad)?;
        self.qp.modify(&mut attr, m).map_err(verbs_err)?;
        self.state = QpState::Rtr;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: self.local.psn,
            max_rd_atomic: 4,
            ..Default::default()
        };
        let m = rc_transition(QpState::Rtr, QpState::Rts).map_err(bad)?;
        self.qp.modify(&mut attr, m).map_err(verbs_err)?;
        self.state = QpState::Rts;
        self.peer = Some(peer);
        Ok(())
    }

    fn fail(&mut self, why: String) -> TransportError {
        self.state = QpState::Error;
        TransportError::Failed(format!("rpc over ibverbs RC: {why}"))
    }

    fn ready(&self) -> Result<VerbsInfo, TransportError> {
        match (self.state, self.peer) {
            (QpState::Rts, Some(p)) => Ok(p),
            (s, _) => Err(TransportError::Failed(format!(
                "rpc over ibverbs RC: queue pair in state {s:?}, not connected"
            ))),
        }
    }

    /// Takes send completions: signalled writes free the send queue, a read
    /// completion brings the peer's consumer position.
    fn reap_sends(&mut self) -> Result<(), TransportError> {
        let n = self.qp.poll_send(&mut self.wc).map_err(verbs_err)?;
        for i in 0..n {
            let wc = self.wc[i];
            if wc.status != ffi::IBV_WC_SUCCESS {
                return Err(self.fail(format!(
                    "send completion of WQE {} failed with status {}",
                    wc.wr_id, wc.status
                )));
            }
            self.sq.complete(wc.wr_id)?;
            if Some(wc.wr_id) == self.read_wr {
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.read_buf.as_slice()[..8]);
                self.read_done = Some(u64::from_le_bytes(b));
                self.read_wr = None;
            }
        }
        Ok(())
    }
}

impl Transport for VerbsTransport {
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError> {
        let peer = self.ready()?;
        if self.sq.outstanding() >= self.cfg.send_depth {
            self.reap_sends()?;
        }
        let wr = plan_write(
            &mut self.sq,
            &peer,
            offset,
            data.len(),
            imm,
            self.cfg.max_inline,
        )?;
        let at = wr.local_offset as usize;
        self.send_mirror.as_mut_slice()[at..at + data.len()].copy_from_slice(data);
        let r = self.qp.post_write_imm(
            &self.send_mirror,
            wr.wr_id,
            at,
            wr.len,
            wr.remote_addr,
            wr.rkey,
            wr.imm_be,
            wr.signaled,
        );
        if let Err(e) = r {
            self.sq.unreserve();
            return Err(self.fail(e.to_string()));
        }
        Ok(())
    }

    fn poll_imm(&mut self) -> Result<Option<u32>, TransportError> {
        if let Some(imm) = self.imms.pop_front() {
            return Ok(Some(imm));
        }
        self.ready()?;
        self.reap_sends()?;
        let n = self.qp.poll_recv(&mut self.wc).map_err(verbs_err)?;
        for i in 0..n {
            let wc = self.wc[i];
            if wc.status != ffi::IBV_WC_SUCCESS || wc.opcode != ffi::IBV_WC_RECV_RDMA_WITH_IMM {
                return Err(self.fail(format!(
                    "receive completion with status {} opcode {}",
                    wc.status, wc.opcode
                )));
            }
            let imm_be = wc_imm_data(&wc);
            self.imms.push_back(imm_from_wc(imm_be));
            self.recv_posted = self.recv_posted.saturating_sub(1);
        }
        // Repost in bulk when a third of the receives were used.
        if self.recv_posted < self.cfg.recv_depth * 2 / 3 {
            let n = self.cfg.recv_depth - self.recv_posted;
            self.qp
                .post_recv_empty(n, self.recv_ids)
                .map_err(verbs_err)?;
            self.recv_ids += u64::from(n);
            self.recv_posted += n;
        }
        Ok(self.imms.pop_front())
    }

    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8] {
        let ring = self.recv_ring.as_slice();
        usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| ring.get(o..o.checked_add(l)?))
            .unwrap_or(&[])
    }

    fn publish_consumer(&mut self, pos: u64) {
        self.consumer.as_mut_slice()[..8].copy_from_slice(&pos.to_le_bytes());
    }

    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError> {
        let peer = self.ready()?;
        if let Some(pos) = self.read_done.take() {
            return Ok(Some(pos));
        }
        if self.read_wr.is_none() {
            let wr = plan_read(&mut self.sq, &peer)?;
            if let Err(e) =
                self.qp
                    .post_read(&self.read_buf, wr.wr_id, 0, 8, wr.remote_addr, wr.rkey)
            {
                self.sq.unreserve();
                return Err(self.fail(e.to_string()));
            }
            self.read_wr = Some(wr.wr_id);
        }
        self.reap_sends()?;
        Ok(self.read_done.take())
    }
}
