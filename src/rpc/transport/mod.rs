//! Transports for "write with immediate".
//!
//! The endpoint needs four things from a transport, which are what an RDMA RC
//! queue pair gives copyrpc:
//!
//! * [`write_with_imm`](Transport::write_with_imm): copy bytes to an offset of the
//!   peer's receive ring, then deliver a 32-bit immediate value to the peer, the
//!   data visible before the immediate;
//! * [`poll_imm`](Transport::poll_imm): the immediates the peer sent, in order;
//! * [`recv_bytes`](Transport::recv_bytes): the local receive ring;
//! * the consumer position: [`publish_consumer`](Transport::publish_consumer)
//!   exposes this side's, [`read_remote_consumer`](Transport::read_remote_consumer)
//!   fetches the peer's (the memo's RDMA READ fallback; may complete later).
//!
//! [`shm`] shares both rings and completion rings between two processes;
//! [`reliable`] carries the writes as the reliable channel's checked PUTs over
//! any datagram port; [`verbs`] is ibverbs RC `RDMA_WRITE_WITH_IMM` (its device
//! part behind feature `ibverbs`); [`mem`] is an in-process link for tests and
//! simulations.

pub mod mem;
pub mod reliable;
#[allow(unsafe_code)] // the shared-memory region: raw, atomic accesses into the mapping
pub mod shm;
pub mod verbs;

use thiserror::Error;

/// A transport failure.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TransportError {
    /// A write outside the peer's ring.
    #[error("write of {len} bytes at offset {offset} is outside the {size}-byte ring")]
    OutOfRange {
        /// Offset of the write.
        offset: u64,
        /// Its length.
        len: u64,
        /// The ring size.
        size: u64,
    },
    /// No room to post the write now (a full completion or send queue); retry
    /// after the peer made progress. Nothing was written.
    #[error("transport busy")]
    Busy,
    /// The peer went away or the medium failed.
    #[error("transport failed: {0}")]
    Failed(String),
}

/// Write-with-immediate semantics over some medium (see the module doc).
pub trait Transport {
    /// Writes `data` at `offset` of the peer's receive ring and then delivers `imm`
    /// to the peer; the peer sees the data once it sees the immediate.
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError>;

    /// The next immediate value from the peer, in the order they were sent.
    fn poll_imm(&mut self) -> Result<Option<u32>, TransportError>;

    /// [`poll_imm`](Self::poll_imm) right after it returned a value: the same
    /// answer, but a transport may skip what it does to prepare for a wait
    /// (the shared-memory one's prefetches), since the caller goes on to take
    /// in what arrived rather than wait.
    #[inline]
    fn poll_imm_more(&mut self) -> Result<Option<u32>, TransportError> {
        self.poll_imm()
    }

    /// `len` bytes at `offset` of the local receive ring. The endpoint asks only
    /// for bytes the peer announced with immediates and has not had released;
    /// the range never crosses the ring end. Out-of-range requests get an empty slice.
    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8];

    /// Exposes this side's receive-ring consumer position for the peer's fallback read.
    fn publish_consumer(&mut self, pos: u64);

    /// Reads the peer's exposed consumer position. `Ok(None)` means a read was
    /// issued (or is still outstanding) and its result is not in yet: call again.
    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError>;
}

impl<T: Transport + ?Sized> Transport for &mut T {
    #[inline]
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError> {
        (**self).write_with_imm(offset, data, imm)
    }
    #[inline]
    fn poll_imm(&mut self) -> Result<Option<u32>, TransportError> {
        (**self).poll_imm()
    }
    #[inline]
    fn poll_imm_more(&mut self) -> Result<Option<u32>, TransportError> {
        (**self).poll_imm_more()
    }
    #[inline]
    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8] {
        (**self).recv_bytes(offset, len)
    }
    #[inline]
    fn publish_consumer(&mut self, pos: u64) {
        (**self).publish_consumer(pos)
    }
    #[inline]
    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError> {
        (**self).read_remote_consumer()
    }
}
