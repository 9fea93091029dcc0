//! The RPC endpoint: one connection's rings, credits and pending calls, sans-IO.
//!
//! Order of use (quinn-proto style):
//!
//! 1. [`Endpoint::new`] with a [`Config`] and the peer's [`PeerInfo`] (exchanged
//!    out of band; [`Endpoint::local_info`] is this side's).
//! 2. [`call`](Endpoint::call) and [`reply`](Endpoint::reply) only write into the
//!    local send ring. `InsufficientCredit` and `RingFull` are retryable after a
//!    [`poll`](Endpoint::poll).
//! 3. [`poll`](Endpoint::poll) with a [`Transport`] and a [`Handler`]: takes the
//!    immediates in, parses batches in order (flow metadata before messages),
//!    hands requests and responses to the handler, exposes the consumer position,
//!    reads the peer's when the piggy-backed one went stale, and emits one
//!    write-with-immediate per contiguous run of closed batches (one per batch
//!    unless a wrap marker ends the ring lap). A poll that took in only
//!    responses and has nothing to send returns after the intake, and one
//!    that sent something returns after the send: either leaves the rest to
//!    the next poll (at most every other poll does so).
//!
//! Requests are taken in order; replies may be sent in any order: a [`Request`]
//! is a small `Copy` token. Pending calls live in a slab keyed by call id.
//!
//! Any violation by the peer (garbage in the ring, a credit grant breaking the
//! invariant, a response to an unknown call) fails the connection: `poll` returns
//! the error and every later operation returns it too.
//!
//! [`Transport`]: crate::rpc::transport::Transport

#![forbid(unsafe_code)]

use super::flow::{initial_credit, Flow, FlowError};
use super::ring::{BadRingSize, RecvCursor, RecvError, SendRing};
use super::transport::TransportError;
use super::wire::{WireError, ALIGNMENT, FLOW_METADATA_SIZE, RESPONSE_FLAG};
use serde::{Deserialize, Serialize};
use thiserror::Error;

mod intake;
mod send;

/// Default ring size: 1 MiB, as copyrpc.
pub const DEFAULT_RING_SIZE: u64 = 1 << 20;

/// Endpoint configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Size of each ring (send and receive), a power of two.
    pub ring_size: u64,
    /// Cap on the response reservation `R`; at most a quarter of the ring.
    pub max_resp_reservation: u64,
    /// Most calls pending at once (the slab's capacity).
    pub max_pending_calls: u32,
}

impl Config {
    /// A configuration for `ring_size` with the memo's defaults: `max_R = ring / 4`.
    pub fn new(ring_size: u64) -> Self {
        Config {
            ring_size,
            max_resp_reservation: ring_size / 4,
            max_pending_calls: 4096,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new(DEFAULT_RING_SIZE)
    }
}

/// The record two endpoints exchange out of band before they talk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Size of the sender's receive ring.
    pub ring_size: u64,
    /// Credit the sender grants at connection: `min(max_R, ring / 4)`.
    pub initial_credit: u64,
    /// The sender's cap on its response reservation.
    pub max_resp_reservation: u64,
}

/// An error that fails the connection (or, from `new`, refuses it).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RpcError {
    /// Bad configuration.
    #[error("configuration: {0}")]
    Config(String),
    /// Ring size out of range.
    #[error(transparent)]
    RingSize(#[from] BadRingSize),
    /// A malformed batch.
    #[error("malformed batch at receive position {pos}: {err}")]
    Wire {
        /// Receive position of the batch.
        pos: u64,
        /// What is wrong.
        err: WireError,
    },
    /// The peer announced more than the ring holds.
    #[error(transparent)]
    Recv(#[from] RecvError),
    /// A flow-control violation.
    #[error(transparent)]
    Flow(#[from] FlowError),
    /// A batch crossing (or touching) the ring end.
    #[error("batch of {len} bytes at ring offset {offset} crosses the ring end")]
    BatchCrossesRingEnd {
        /// Ring offset of the batch.
        offset: u64,
        /// Its length.
        len: u64,
    },
    /// A wrap marker whose immediate does not reach the ring end.
    #[error("wrap marker at receive position {0} not announced up to the ring end")]
    ShortWrap(u64),
    /// A response whose call id is not pending.
    #[error("response to unknown call id {0}")]
    UnknownCallId(u32),
    /// A response whose reservation field does not match its call's.
    #[error("response to call {call_id} releases {got} bytes, the call reserved {reserved}")]
    AllowanceMismatch {
        /// The call.
        call_id: u32,
        /// What the response says.
        got: u64,
        /// What the call reserved.
        reserved: u64,
    },
    /// A response longer than its call allowed.
    #[error("response to call {call_id} of {len} bytes exceeds its reservation {reserved}")]
    ResponseOverAllowance {
        /// The call.
        call_id: u32,
        /// Payload length.
        len: u32,
        /// The call's reservation.
        reserved: u64,
    },
    /// The transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallErrorKind {
    /// Not enough credit from the peer; retry after `poll`.
    InsufficientCredit,
    /// The peer's ring has no room under the invariant; retry after `poll`.
    RingFull,
    /// The slab of pending calls is full; retry after responses arrive.
    TooManyPending,
    /// The payload can never fit (see [`Endpoint::max_payload`]).
    MessageTooLarge,
    /// The response allowance exceeds what the peer can ever grant.
    AllowanceTooLarge,
    /// The connection failed.
    Failed(RpcError),
}

impl CallErrorKind {
    /// Whether the call may succeed if retried after `poll`.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CallErrorKind::InsufficientCredit
                | CallErrorKind::RingFull
                | CallErrorKind::TooManyPending
        )
    }
}

/// A refused call, returning the caller's data.
#[derive(Debug, Error)]
#[error("call refused: {kind:?}")]
pub struct CallError<U> {
    /// Why.
    pub kind: CallErrorKind,
    /// The user data passed to `call`.
    pub user: U,
}

/// Why a reply was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReplyError {
    /// The response does not fit in the call's reservation.
    #[error("response of {len} bytes does not fit the reservation of {allowance} bytes")]
    TooLarge {
        /// Payload length.
        len: usize,
        /// The call's reservation.
        allowance: u64,
    },
    /// More replies than requests.
    #[error("no outstanding request for this reply")]
    NotOutstanding,
    /// The connection failed.
    #[error(transparent)]
    Failed(RpcError),
}

/// A received request, to pass back to [`Endpoint::reply`] (in any order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The caller's call id.
    pub call_id: u32,
    /// Bytes the caller reserved for the response (`padded(allowance) + 32`).
    pub allowance: u64,
}

impl Request {
    /// Largest response payload this request allows.
    #[inline]
    pub fn max_response(&self) -> u32 {
        u32::try_from(
            (self
                .allowance
                .saturating_sub(FLOW_METADATA_SIZE as u64 + 12))
            .min(u64::from(u32::MAX)),
        )
        .unwrap_or(u32::MAX)
    }
}

/// Receives what `poll` takes in. Payload slices point into the receive ring and
/// are valid during the callback only.
pub trait Handler<U> {
    /// Offers a request for an answer right away, before
    /// [`on_request`](Self::on_request). A returned payload is written as the response, as
    /// [`Endpoint::reply`] would write it, and leaves with the same `poll`'s
    /// flush: a server that answers here saves a pass of `poll` and a `flush`
    /// between a request and its response. Returning `None` (the default) hands
    /// the request to `on_request`, to be answered later with `reply`. So does an
    /// answer longer than [`Request::max_response`], and one that would have to
    /// wrap the send ring (a wrap marker takes a credit grant, which must not
    /// change while the rest of the batch is checked against the credit given).
    #[inline]
    fn answer(&mut self, _req: Request, _payload: &[u8]) -> Option<&[u8]> {
        None
    }
    /// A request, in arrival order.
    fn on_request(&mut self, req: Request, payload: &[u8]);
    /// The response to a call made with `user`.
    fn on_response(&mut self, call_id: u32, user: U, payload: &[u8]);
}

/// Counters of one endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls written.
    pub calls: u64,
    /// Replies written.
    pub replies: u64,
    /// Requests received.
    pub requests: u64,
    /// Responses received.
    pub responses: u64,
    /// Writes with immediate issued.
    pub writes: u64,
    /// Batches received (wrap markers included).
    pub batches_in: u64,
    /// Metadata-only batches sent to return credit.
    pub credit_batches: u64,
    /// Wrap markers written.
    pub wraps: u64,
    /// Fallback reads of the peer's consumer position.
    pub consumer_reads: u64,
}

/// A slot of the pending-call slab: a pending call, or a link of the free
/// list threaded through the free slots.
enum Slot<U> {
    Free { next: u32 },
    Used { user: U, reserved: u64 },
}

/// Pending calls by call id. The free slots form a LIFO list through the
/// slots themselves (the most recently freed id is reused first, as the
/// `Vec` of free ids before it did, so call ids on the wire are the same):
/// no second vector to push to and pop from, with its capacity check.
struct Slab<U> {
    slots: Vec<Slot<U>>,
    /// The first free slot; `slots.len()` when none is.
    head: u32,
    len: u32,
}

impl<U> Slab<U> {
    fn new(cap: u32) -> Self {
        Slab {
            slots: (1..=cap).map(|next| Slot::Free { next }).collect(),
            head: 0,
            len: 0,
        }
    }
    #[inline]
    fn is_full(&self) -> bool {
        self.head as usize >= self.slots.len()
    }
    #[inline(always)]
    fn insert(&mut self, user: U, allowance: u64) -> Result<u32, U> {
        let id = self.head;
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return Err(user);
        };
        let Slot::Free { next } = *slot else {
            // Never: the list links free slots only.
            return Err(user);
        };
        *slot = Slot::Used {
            user,
            reserved: allowance,
        };
        self.head = next;
        self.len += 1;
        Ok(id)
    }
    /// Takes pending call `id` out if `check` passes its reservation; an
    /// unknown id is [`RpcError::UnknownCallId`], a failed check its error
    /// (the call stays pending). One look-up for both.
    #[inline(always)]
    fn take_checked(
        &mut self,
        id: u32,
        check: impl FnOnce(u64) -> Result<(), RpcError>,
    ) -> Result<U, RpcError> {
        let Some(slot) = self.slots.get_mut(id as usize) else {
            return Err(RpcError::UnknownCallId(id));
        };
        match std::mem::replace(slot, Slot::Free { next: self.head }) {
            Slot::Used { user, reserved } => {
                if let Err(e) = check(reserved) {
                    *slot = Slot::Used { user, reserved };
                    return Err(e);
                }
                self.head = id;
                self.len -= 1;
                Ok(user)
            }
            free => {
                *slot = free;
                Err(RpcError::UnknownCallId(id))
            }
        }
    }
}

/// One end of a copyrpc-style connection (see the module doc). `U` is the user
/// data kept with each pending call.
pub struct Endpoint<U> {
    send: SendRing,
    recv: RecvCursor,
    flow: Flow,
    pending: Slab<U>,
    failed: Option<RpcError>,
    config: Config,
    want_read: bool,
    published: u64,
    settled: bool,
    /// The last `poll` skipped its tail (see `poll_inner`): the next runs it.
    deferred: bool,
    /// What the current `poll` took in: `intake::TOOK_*` bits.
    took: u8,
    stats: Stats,
    /// [`max_payload`](Self::max_payload) and
    /// [`max_response_allowance`](Self::max_response_allowance), fixed at
    /// connection: `call` checks them on every call.
    max_payload: u32,
    max_resp_allowance: u32,
}

impl<U> std::fmt::Debug for Endpoint<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("producer", &self.send.producer())
            .field("flushed", &self.send.flushed())
            .field("recv_consumer", &self.recv.consumer())
            .field("flow", &self.flow)
            .field("pending", &self.pending.len)
            .field("want_read", &self.want_read)
            .field("settled", &self.settled)
            .field("failed", &self.failed)
            .finish()
    }
}

impl Config {
    /// This side's info record.
    pub fn local_info(&self) -> PeerInfo {
        PeerInfo {
            ring_size: self.ring_size,
            initial_credit: initial_credit(self.max_resp_reservation, self.ring_size),
            max_resp_reservation: self.max_resp_reservation,
        }
    }

    fn check(&self) -> Result<(), RpcError> {
        super::ring::check_ring_size(self.ring_size)?;
        if self.max_resp_reservation > self.ring_size / 4
            || self.max_resp_reservation % ALIGNMENT != 0
            || self.max_resp_reservation < super::flow::MIN_ALLOWANCE
        {
            return Err(RpcError::Config(format!(
                "max response reservation {} must be a multiple of 32 between 64 and ring/4 = {}",
                self.max_resp_reservation,
                self.ring_size / 4
            )));
        }
        if self.max_pending_calls == 0 || self.max_pending_calls >= RESPONSE_FLAG {
            return Err(RpcError::Config(format!(
                "max pending calls {} must be between 1 and 2^31 - 1",
                self.max_pending_calls
            )));
        }
        Ok(())
    }
}

impl<U> Endpoint<U> {
    /// An endpoint for `config`, connected to a peer that sent `peer`.
    pub fn new(config: Config, peer: PeerInfo) -> Result<Self, RpcError> {
        config.check()?;
        if peer.ring_size != config.ring_size {
            return Err(RpcError::Config(format!(
                "peer ring size {} differs from local {}",
                peer.ring_size, config.ring_size
            )));
        }
        if peer.initial_credit != initial_credit(peer.max_resp_reservation, peer.ring_size)
            || peer.max_resp_reservation > peer.ring_size / 4
        {
            return Err(RpcError::Config(format!(
                "peer info is inconsistent: {peer:?}"
            )));
        }
        let local = config.local_info();
        let (max_payload, max_resp_allowance) = limits(&config, &peer);
        Ok(Endpoint {
            send: SendRing::new(config.ring_size)?,
            recv: RecvCursor::new(config.ring_size)?,
            flow: Flow::new(
                peer.ring_size,
                config.max_resp_reservation,
                local.initial_credit,
                peer.initial_credit,
                config.ring_size,
            ),
            pending: Slab::new(config.max_pending_calls),
            failed: None,
            config,
            want_read: false,
            published: 0,
            settled: false,
            deferred: false,
            took: 0,
            stats: Stats::default(),
            max_payload,
            max_resp_allowance,
        })
    }

    /// This side's info record.
    pub fn local_info(&self) -> PeerInfo {
        self.config.local_info()
    }

    /// Largest call payload: the message with a wrap in the worst case (twice its
    /// size with metadata) must fit beside the largest `2R`.
    #[inline]
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }

    /// Largest response allowance a call may ask for.
    #[inline]
    pub fn max_response_allowance(&self) -> u32 {
        self.max_resp_allowance
    }

    /// The error that failed the connection, if any.
    pub fn failure(&self) -> Option<&RpcError> {
        self.failed.as_ref()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Calls waiting for a response.
    pub fn pending_calls(&self) -> u32 {
        self.pending.len
    }

    /// Flow-control state (read only).
    pub fn flow(&self) -> &Flow {
        &self.flow
    }

    /// Whether `in_flight + 2R <= C` holds now.
    pub fn invariant_holds(&self) -> bool {
        self.flow.invariant_holds(self.send.producer())
    }

    /// Send-ring producer position.
    pub fn send_producer(&self) -> u64 {
        self.send.producer()
    }

    /// Receive-ring consumer position.
    pub fn recv_consumer(&self) -> u64 {
        self.recv.consumer()
    }

    /// Whether written data waits for `poll` to send it.
    pub fn has_unflushed(&self) -> bool {
        self.send.flushed() < self.send.producer()
    }
}

/// `(max_payload, max_response_allowance)` of an endpoint with `config`
/// talking to `peer` (see [`Endpoint::max_payload`]).
fn limits(config: &Config, peer: &PeerInfo) -> (u32, u32) {
    let c = config.ring_size;
    let room = (c - 2 * config.max_resp_reservation) / 2;
    let padded = room.saturating_sub(FLOW_METADATA_SIZE as u64) & !(ALIGNMENT - 1);
    let payload = u32::try_from(padded.saturating_sub(12)).unwrap_or(u32::MAX);
    let a = peer.max_resp_reservation - FLOW_METADATA_SIZE as u64;
    let allowance = u32::try_from(a.saturating_sub(12)).unwrap_or(u32::MAX);
    (payload, allowance)
}

#[cfg(test)]
mod test;
