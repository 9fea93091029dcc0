//! Write-with-immediate as ibverbs RC `RDMA_WRITE_WITH_IMM`, copyrpc's own
//! transport.
//!
//! Each side registers its receive ring for remote write and an 8-byte
//! consumer-position word for remote read, creates an RC queue pair, and sends
//! the peer a [`VerbsInfo`] record out of band (QPN, PSN, LID/GID, the ring's
//! address, rkey and size, the consumer word's address and rkey, and the RPC
//! [`PeerInfo`]). A write-with-immediate is one `RDMA_WRITE_WITH_IMM` of the
//! segment at `ring_addr + offset` (data visible before the completion, as RC
//! guarantees); the peer's receive completion carries the immediate, consumed
//! with zero-length receives. The consumer fallback is an 8-byte RDMA READ of
//! the peer's consumer word. Every `SIGNAL_INTERVAL`th send is signalled (and
//! any send that fills the queue), so the send queue drains without a
//! completion per write.
//!
//! What runs without an RDMA device and is tested here: the info record
//! encoding ([`VerbsInfo::encode`] / [`VerbsInfo::decode`], every field
//! checked), the QP state machine with the attribute masks of each RC
//! transition ([`rc_transition`]), and the work-request plans with send-queue
//! accounting ([`SendQueue`], [`plan_write`], [`plan_read`]). The device part
//! (`VerbsTransport`, feature `ibverbs`) builds those plans into verbs calls;
//! with no device it fails at open with an error naming what is missing. It
//! has not run against real hardware here (no RDMA device, no rxe module).

use super::TransportError;
use crate::rpc::endpoint::PeerInfo;
use crate::rpc::ring::check_ring_size;
use thiserror::Error;

/// Sends between signalled ones (copyrpc's `SIGNAL_INTERVAL`).
pub const SIGNAL_INTERVAL: u32 = 64;
/// Encoded size of a [`VerbsInfo`].
pub const INFO_LEN: usize = 96;
const INFO_MAGIC: [u8; 8] = *b"LRRPCV01";
const FLAG_GRH: u8 = 1;

/// The record two RC endpoints exchange before they talk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsInfo {
    /// Queue pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand); 0 on RoCE.
    pub lid: u16,
    /// Port number on the device.
    pub port: u8,
    /// The GID is to be used (RoCE, or InfiniBand across subnets).
    pub use_grh: bool,
    /// Port GID.
    pub gid: [u8; 16],
    /// Receive ring address.
    pub ring_addr: u64,
    /// Receive ring remote key.
    pub ring_rkey: u32,
    /// Consumer-position word address (8 bytes, remote read).
    pub consumer_addr: u64,
    /// Its remote key.
    pub consumer_rkey: u32,
    /// The RPC endpoint's record (ring size, initial credit, max R).
    pub rpc: PeerInfo,
}

/// A [`VerbsInfo`] record that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InfoError {
    /// Not `INFO_LEN` bytes.
    #[error("info record of {0} bytes, expected {INFO_LEN}")]
    Length(usize),
    /// Wrong magic or version.
    #[error("not a linerate RPC verbs info record (bad magic)")]
    Magic,
    /// A field out of range.
    #[error("info record field {field} is invalid: {value:#x}")]
    Field {
        /// Field name.
        field: &'static str,
        /// Its value.
        value: u64,
    },
}

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..8;
    pub const QPN: Range<usize> = 8..12;
    pub const PSN: Range<usize> = 12..16;
    pub const LID: Range<usize> = 16..18;
    pub const PORT: usize = 18;
    pub const FLAGS: usize = 19;
    pub const GID: Range<usize> = 20..36;
    pub const RING_RKEY: Range<usize> = 36..40;
    pub const RING_ADDR: Range<usize> = 40..48;
    pub const CONSUMER_ADDR: Range<usize> = 48..56;
    pub const CONSUMER_RKEY: Range<usize> = 56..60;
    pub const RESERVED: Range<usize> = 60..72;
    pub const RING_SIZE: Range<usize> = 72..80;
    pub const INITIAL_CREDIT: Range<usize> = 80..88;
    pub const MAX_R: Range<usize> = 88..96;
}

fn le64(b: &[u8], r: core::ops::Range<usize>) -> u64 {
    let mut a = [0u8; 8];
    a[..r.len()].copy_from_slice(&b[r]);
    u64::from_le_bytes(a)
}

impl VerbsInfo {
    /// The record as bytes (little-endian fields, see the `field` ranges).
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[field::MAGIC].copy_from_slice(&INFO_MAGIC);
        b[field::QPN].copy_from_slice(&self.qpn.to_le_bytes());
        b[field::PSN].copy_from_slice(&self.psn.to_le_bytes());
        b[field::LID].copy_from_slice(&self.lid.to_le_bytes());
        b[field::PORT] = self.port;
        b[field::FLAGS] = if self.use_grh { FLAG_GRH } else { 0 };
        b[field::GID].copy_from_slice(&self.gid);
        b[field::RING_RKEY].copy_from_slice(&self.ring_rkey.to_le_bytes());
        b[field::RING_ADDR].copy_from_slice(&self.ring_addr.to_le_bytes());
        b[field::CONSUMER_ADDR].copy_from_slice(&self.consumer_addr.to_le_bytes());
        b[field::CONSUMER_RKEY].copy_from_slice(&self.consumer_rkey.to_le_bytes());
        b[field::RING_SIZE].copy_from_slice(&self.rpc.ring_size.to_le_bytes());
        b[field::INITIAL_CREDIT].copy_from_slice(&self.rpc.initial_credit.to_le_bytes());
        b[field::MAX_R].copy_from_slice(&self.rpc.max_resp_reservation.to_le_bytes());
        b
    }

    /// Parses and checks a record: 24-bit QPN and PSN, a port, known flags,
    /// zero reserved bytes, a valid ring size, a ring and a consumer word that
    /// do not wrap the address space (the word 8-aligned). The RPC fields are
    /// checked again by [`Endpoint::new`](crate::rpc::Endpoint::new).
    pub fn decode(b: &[u8]) -> Result<VerbsInfo, InfoError> {
        if b.len() != INFO_LEN {
            return Err(InfoError::Length(b.len()));
        }
        if b[field::MAGIC] != INFO_MAGIC {
            return Err(InfoError::Magic);
        }
        let bad = |field, value| Err(InfoError::Field { field, value });
        let qpn = le64(b, field::QPN) as u32;
        if qpn >= 1 << 24 {
            return bad("qpn", u64::from(qpn));
        }
        let psn = le64(b, field::PSN) as u32;
        if psn >= 1 << 24 {
            return bad("psn", u64::from(psn));
        }
        let port = b[field::PORT];
        if port == 0 {
            return bad("port", 0);
        }
        let flags = b[field::FLAGS];
        if flags & !FLAG_GRH != 0 {
            return bad("flags", u64::from(flags));
        }
        if b[field::RESERVED].iter().any(|&x| x != 0) {
            return bad("reserved", le64(b, 60..68));
        }
        let ring_size = le64(b, field::RING_SIZE);
        if check_ring_size(ring_size).is_err() {
            return bad("ring_size", ring_size);
        }
        let ring_addr = le64(b, field::RING_ADDR);
        if ring_addr == 0 || ring_addr.checked_add(ring_size).is_none() {
            return bad("ring_addr", ring_addr);
        }
        let consumer_addr = le64(b, field::CONSUMER_ADDR);
        if consumer_addr == 0 || consumer_addr % 8 != 0 || consumer_addr.checked_add(8).is_none() {
            return bad("consumer_addr", consumer_addr);
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[field::GID]);
        Ok(VerbsInfo {
            qpn,
            psn,
            lid: le64(b, field::LID) as u16,
            port,
            use_grh: flags & FLAG_GRH != 0,
            gid,
            ring_addr,
            ring_rkey: le64(b, field::RING_RKEY) as u32,
            consumer_addr,
            consumer_rkey: le64(b, field::CONSUMER_RKEY) as u32,
            rpc: PeerInfo {
                ring_size,
                initial_credit: le64(b, field::INITIAL_CREDIT),
                max_resp_reservation: le64(b, field::MAX_R),
            },
        })
    }
}

/// `ibv_qp_attr_mask` bits, as in `<infiniband/verbs.h>` (checked against the
/// generated bindings when feature `ibverbs` is on).
pub mod mask {
    /// `IBV_QP_STATE`.
    pub const STATE: u32 = 1;
    /// `IBV_QP_ACCESS_FLAGS`.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `IBV_QP_PKEY_INDEX`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `IBV_QP_PORT`.
    pub const PORT: u32 = 1 << 5;
    /// `IBV_QP_AV`.
    pub const AV: u32 = 1 << 7;
    /// `IBV_QP_PATH_MTU`.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `IBV_QP_TIMEOUT`.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `IBV_QP_RETRY_CNT`.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `IBV_QP_RNR_RETRY`.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `IBV_QP_RQ_PSN`.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `IBV_QP_SQ_PSN`.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `IBV_QP_DEST_QPN`.
    pub const DEST_QPN: u32 = 1 << 20;
}

/// States of an RC queue pair that the transport goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created.
    Reset,
    /// Port and access flags set; receives may be posted.
    Init,
    /// Ready to receive: connected to the peer's QPN and PSN.
    Rtr,
    /// Ready to send.
    Rts,
    /// A work request failed; only a reset leaves it.
    Error,
}

/// A transition the RC state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("RC queue pair cannot go from {from:?} to {to:?}")]
pub struct BadTransition {
    /// Current state.
    pub from: QpState,
    /// Requested state.
    pub to: QpState,
}

/// The `ibv_modify_qp` attribute mask of an RC transition (the attributes each
/// step must set, as the verbs specification lists them).
pub fn rc_transition(from: QpState, to: QpState) -> Result<u32, BadTransition> {
    use QpState::*;
    let m = match (from, to) {
        (Reset, Init) => mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
        (Init, Rtr) => {
            mask::STATE
                | mask::AV
                | mask::PATH_MTU
                | mask::DEST_QPN
                | mask::RQ_PSN
                | mask::MAX_DEST_RD_ATOMIC
                | mask::MIN_RNR_TIMER
        }
        (Rtr, Rts) => {
            mask::STATE
                | mask::TIMEOUT
                | mask::RETRY_CNT
                | mask::RNR_RETRY
                | mask::SQ_PSN
                | mask::MAX_QP_RD_ATOMIC
        }
        (_, Error) | (Error, Reset) => mask::STATE,
        _ => return Err(BadTransition { from, to }),
    };
    Ok(m)
}

/// Send-queue accounting: WQEs posted and not known complete, and which sends
/// to signal. A signalled completion of WQE `n` means every WQE up to `n`
/// completed (RC executes a send queue in order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendQueue {
    depth: u32,
    posted: u64,
    completed: u64,
}

impl SendQueue {
    /// A send queue of `depth` WQEs (at least 2).
    pub fn new(depth: u32) -> Self {
        SendQueue {
            depth: depth.max(2),
            posted: 0,
            completed: 0,
        }
    }

    /// WQEs posted and not known complete.
    pub fn outstanding(&self) -> u32 {
        (self.posted - self.completed) as u32
    }

    /// Takes a slot: `(wr_id, signaled)`, or `None` when the queue is full (the
    /// write is then [`TransportError::Busy`]). Every `SIGNAL_INTERVAL`th WQE is
    /// signalled, and so is one that fills the queue, so a completion always
    /// comes to free it.
    pub fn reserve(&mut self) -> Option<(u64, bool)> {
        if self.outstanding() >= self.depth {
            return None;
        }
        let id = self.posted;
        self.posted += 1;
        let signaled =
            self.posted % u64::from(SIGNAL_INTERVAL) == 0 || self.outstanding() == self.depth;
        Some((id, signaled))
    }

    /// Gives back the last slot taken (its post failed).
    pub fn unreserve(&mut self) {
        if self.posted > self.completed {
            self.posted -= 1;
        }
    }

    /// A signalled completion of WQE `wr_id`: it and everything before it are done.
    pub fn complete(&mut self, wr_id: u64) -> Result<(), TransportError> {
        if wr_id < self.completed || wr_id >= self.posted {
            return Err(TransportError::Failed(format!(
                "send completion for WQE {wr_id} outside the posted range {}..{}",
                self.completed, self.posted
            )));
        }
        self.completed = wr_id + 1;
        Ok(())
    }
}

/// An `RDMA_WRITE_WITH_IMM` to build: the segment at `local_offset` of the
/// registered send mirror to `remote_addr` of the peer's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteWr {
    /// Work request id (send-queue sequence number).
    pub wr_id: u64,
    /// Offset of the bytes in the local send mirror (= ring offset).
    pub local_offset: u64,
    /// Bytes to write.
    pub len: u32,
    /// Destination address in the peer's ring.
    pub remote_addr: u64,
    /// The ring's rkey.
    pub rkey: u32,
    /// The immediate, in network order as `ibv_send_wr.imm_data` wants it.
    pub imm_be: u32,
    /// Ask for a completion.
    pub signaled: bool,
    /// Send the bytes inline in the WQE.
    pub inline: bool,
}

/// Plans the write of `len` bytes at ring `offset` with immediate `imm`.
pub fn plan_write(
    sq: &mut SendQueue,
    peer: &VerbsInfo,
    offset: u64,
    len: usize,
    imm: u32,
    max_inline: u32,
) -> Result<WriteWr, TransportError> {
    let size = peer.rpc.ring_size;
    let len64 = len as u64;
    if !matches!(offset.checked_add(len64), Some(e) if e <= size) {
        return Err(TransportError::OutOfRange {
            offset,
            len: len64,
            size,
        });
    }
    let (wr_id, signaled) = sq.reserve().ok_or(TransportError::Busy)?;
    Ok(WriteWr {
        wr_id,
        local_offset: offset,
        len: len as u32,
        remote_addr: peer.ring_addr + offset,
        rkey: peer.ring_rkey,
        imm_be: imm.to_be(),
        signaled,
        inline: len as u32 <= max_inline,
    })
}

/// An 8-byte `RDMA_READ` of the peer's consumer word (always signalled: its
/// completion is the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadWr {
    /// Work request id.
    pub wr_id: u64,
    /// Source address at the peer.
    pub remote_addr: u64,
    /// Its rkey.
    pub rkey: u32,
}

/// Plans the consumer read.
pub fn plan_read(sq: &mut SendQueue, peer: &VerbsInfo) -> Result<ReadWr, TransportError> {
    let (wr_id, _) = sq.reserve().ok_or(TransportError::Busy)?;
    Ok(ReadWr {
        wr_id,
        remote_addr: peer.consumer_addr,
        rkey: peer.consumer_rkey,
    })
}

/// The immediate of a receive completion (`ibv_wc.imm_data` is in network order).
#[inline]
pub fn imm_from_wc(imm_data_be: u32) -> u32 {
    u32::from_be(imm_data_be)
}

#[cfg(feature = "ibverbs")]
pub use device::{VerbsConfig, VerbsTransport};

#[cfg(feature = "ibverbs")]
mod device;

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn info() -> VerbsInfo {
        VerbsInfo {
            qpn: 0x12_3456,
            psn: 0xab_cdef,
            lid: 7,
            port: 1,
            use_grh: true,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            ring_addr: 0x7f00_0000_0000,
            ring_rkey: 0x1111,
            consumer_addr: 0x7f00_1000_0000,
            consumer_rkey: 0x2222,
            rpc: PeerInfo {
                ring_size: 1 << 20,
                initial_credit: 1 << 18,
                max_resp_reservation: 1 << 18,
            },
        }
    }

    #[test]
    fn info_round_trip_and_layout() {
        let i = info();
        let b = i.encode();
        assert_eq!(&b[..8], b"LRRPCV01");
        assert_eq!(&b[8..12], &[0x56, 0x34, 0x12, 0]);
        assert_eq!(b[19], 1);
        assert_eq!(&b[72..80], &(1u64 << 20).to_le_bytes());
        assert_eq!(VerbsInfo::decode(&b), Ok(i));
    }

    #[test]
    fn info_rejects_bad_fields() {
        let good = info().encode();
        let with = |f: &dyn Fn(&mut [u8; INFO_LEN])| {
            let mut b = good;
            f(&mut b);
            VerbsInfo::decode(&b)
        };
        assert_eq!(VerbsInfo::decode(&good[..95]), Err(InfoError::Length(95)));
        assert_eq!(with(&|b| b[0] = b'X'), Err(InfoError::Magic));
        let field = |r: Result<VerbsInfo, InfoError>| match r {
            Err(InfoError::Field { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(with(&|b| b[11] = 1)), "qpn");
        assert_eq!(field(with(&|b| b[15] = 1)), "psn");
        assert_eq!(field(with(&|b| b[18] = 0)), "port");
        assert_eq!(field(with(&|b| b[19] = 2)), "flags");
        assert_eq!(field(with(&|b| b[65] = 1)), "reserved");
        assert_eq!(field(with(&|b| b[72] = 1)), "ring_size");
        assert_eq!(field(with(&|b| b[40..48].fill(0xff))), "ring_addr");
        assert_eq!(field(with(&|b| b[48] = 4)), "consumer_addr");
    }

    proptest! {
        #[test]
        fn info_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = VerbsInfo::decode(&bytes);
            let mut b = info().encode();
            for (i, x) in bytes.iter().enumerate().take(INFO_LEN) {
                b[i] ^= x;
            }
            if let Ok(i) = VerbsInfo::decode(&b) {
                prop_assert_eq!(VerbsInfo::decode(&i.encode()), Ok(i));
            }
        }
    }

    #[test]
    fn rc_state_machine() {
        use QpState::*;
        let init = rc_transition(Reset, Init).unwrap();
        assert_eq!(
            init,
            mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS
        );
        let rtr = rc_transition(Init, Rtr).unwrap();
        assert!(rtr & mask::DEST_QPN != 0 && rtr & mask::AV != 0 && rtr & mask::RQ_PSN != 0);
        let rts = rc_transition(Rtr, Rts).unwrap();
        assert!(rts & mask::SQ_PSN != 0 && rts & mask::RETRY_CNT != 0);
        assert_eq!(rc_transition(Rts, Error), Ok(mask::STATE));
        assert_eq!(rc_transition(Error, Reset), Ok(mask::STATE));
        for (from, to) in [
            (Reset, Rtr),
            (Reset, Rts),
            (Init, Rts),
            (Rts, Init),
            (Error, Rts),
        ] {
            assert_eq!(rc_transition(from, to), Err(BadTransition { from, to }));
        }
    }

    #[test]
    fn send_queue_signals_and_fills() {
        let mut sq = SendQueue::new(128);
        let mut signaled = Vec::new();
        for _ in 0..128 {
            let (id, s) = sq.reserve().unwrap();
            if s {
                signaled.push(id);
            }
        }
        // Every 64th, and the one that fills the queue.
        assert_eq!(signaled, vec![63, 127]);
        assert_eq!(sq.reserve(), None);
        sq.complete(63).unwrap();
        assert_eq!(sq.outstanding(), 64);
        assert!(sq.complete(63).is_err(), "already complete");
        assert!(sq.complete(500).is_err(), "never posted");
        assert_eq!(sq.reserve(), Some((128, false)));
        sq.unreserve();
        assert_eq!(sq.outstanding(), 64);
        // A small queue signals the WQE that fills it, so it never stalls.
        let mut sq = SendQueue::new(4);
        let got: Vec<_> = (0..4).map(|_| sq.reserve().unwrap().1).collect();
        assert_eq!(got, vec![false, false, false, true]);
    }

    #[test]
    fn write_and_read_plans() {
        let peer = info();
        let mut sq = SendQueue::new(256);
        let w = plan_write(&mut sq, &peer, 4096, 96, 3, 188).unwrap();
        assert_eq!(w.remote_addr, peer.ring_addr + 4096);
        assert_eq!(w.rkey, 0x1111);
        assert_eq!(w.imm_be, 3u32.to_be());
        assert_eq!(imm_from_wc(w.imm_be), 3);
        assert!(w.inline && !w.signaled);
        assert_eq!((w.wr_id, w.local_offset, w.len), (0, 4096, 96));
        let w = plan_write(&mut sq, &peer, 0, 4096, 128, 188).unwrap();
        assert!(!w.inline);
        assert!(matches!(
            plan_write(&mut sq, &peer, (1 << 20) - 32, 64, 2, 188),
            Err(TransportError::OutOfRange { .. })
        ));
        let r = plan_read(&mut sq, &peer).unwrap();
        assert_eq!(
            (r.wr_id, r.remote_addr, r.rkey),
            (2, peer.consumer_addr, 0x2222)
        );
        let mut full = SendQueue::new(2);
        plan_write(&mut full, &peer, 0, 32, 1, 0).unwrap();
        plan_write(&mut full, &peer, 0, 32, 1, 0).unwrap();
        assert_eq!(
            plan_write(&mut full, &peer, 0, 32, 1, 0),
            Err(TransportError::Busy)
        );
    }
}
