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
//!    unless a wrap marker ends the ring lap).
//!
//! Requests are taken in order; replies may be sent in any order: a [`Request`]
//! is a small `Copy` token. Pending calls live in a slab keyed by call id.
//!
//! Any violation by the peer (garbage in the ring, a credit grant breaking the
//! invariant, a response to an unknown call) fails the connection: `poll` returns
//! the error and every later operation returns it too.

#![forbid(unsafe_code)]

use super::flow::{initial_credit, Flow, FlowError};
use super::ring::{fits_before_end, room_to_end, BadRingSize, RecvCursor, RecvError, SendRing};
use super::transport::{Transport, TransportError};
use super::wire::{
    decode_imm, from_response_id, is_response, padded_message_size, to_response_id, Batch,
    MessageRepr, WireError, ALIGNMENT, FLOW_METADATA_SIZE, RESPONSE_FLAG,
};
use serde::{Deserialize, Serialize};
use thiserror::Error;

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

struct Slab<U> {
    slots: Vec<Option<(U, u64)>>,
    free: Vec<u32>,
    len: u32,
}

impl<U> Slab<U> {
    fn new(cap: u32) -> Self {
        let mut slots = Vec::with_capacity(cap as usize);
        slots.resize_with(cap as usize, || None);
        Slab {
            slots,
            free: (0..cap).rev().collect(),
            len: 0,
        }
    }
    fn is_full(&self) -> bool {
        self.free.is_empty()
    }
    fn insert(&mut self, user: U, allowance: u64) -> Result<u32, U> {
        let Some(id) = self.free.pop() else {
            return Err(user);
        };
        self.slots[id as usize] = Some((user, allowance));
        self.len += 1;
        Ok(id)
    }
    fn allowance(&self, id: u32) -> Option<u64> {
        self.slots.get(id as usize)?.as_ref().map(|s| s.1)
    }
    fn remove(&mut self, id: u32) -> Option<(U, u64)> {
        let v = self.slots.get_mut(id as usize)?.take()?;
        self.free.push(id);
        self.len -= 1;
        Some(v)
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
    peer: PeerInfo,
    config: Config,
    want_read: bool,
    published: u64,
    settled: bool,
    stats: Stats,
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
            peer,
            config,
            want_read: false,
            published: 0,
            settled: false,
            stats: Stats::default(),
        })
    }

    /// This side's info record.
    pub fn local_info(&self) -> PeerInfo {
        self.config.local_info()
    }

    /// Largest call payload: the message with a wrap in the worst case (twice its
    /// size with metadata) must fit beside the largest `2R`.
    pub fn max_payload(&self) -> u32 {
        let c = self.config.ring_size;
        let room = (c - 2 * self.config.max_resp_reservation) / 2;
        let padded = room.saturating_sub(FLOW_METADATA_SIZE as u64) & !(ALIGNMENT - 1);
        u32::try_from(padded.saturating_sub(12)).unwrap_or(u32::MAX)
    }

    /// Largest response allowance a call may ask for.
    pub fn max_response_allowance(&self) -> u32 {
        let a = self.peer.max_resp_reservation - FLOW_METADATA_SIZE as u64;
        u32::try_from(a.saturating_sub(12)).unwrap_or(u32::MAX)
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

    /// Sends a request with `payload`, reserving room for a response of up to
    /// `response_allowance` bytes. Returns the call id; the response comes to
    /// [`Handler::on_response`] with `user`.
    pub fn call(
        &mut self,
        payload: &[u8],
        response_allowance: u32,
        user: U,
    ) -> Result<u32, CallError<U>> {
        let refuse = |kind, user| Err(CallError { kind, user });
        if let Some(e) = &self.failed {
            return refuse(CallErrorKind::Failed(e.clone()), user);
        }
        let Ok(len) = u32::try_from(payload.len()) else {
            return refuse(CallErrorKind::MessageTooLarge, user);
        };
        if len > self.max_payload() {
            return refuse(CallErrorKind::MessageTooLarge, user);
        }
        if response_allowance > self.max_response_allowance() {
            return refuse(CallErrorKind::AllowanceTooLarge, user);
        }
        if self.pending.is_full() {
            return refuse(CallErrorKind::TooManyPending, user);
        }
        let padded = padded_message_size(len);
        let cons = self.send.consumption(padded);
        if !self.flow.has_room(self.send.producer(), cons) {
            self.want_read = true;
            self.settled = false;
            return refuse(CallErrorKind::RingFull, user);
        }
        let Some(allowance) = self.flow.reserve_call(response_allowance) else {
            return refuse(CallErrorKind::InsufficientCredit, user);
        };
        let id = match self.pending.insert(user, allowance) {
            Ok(id) => id,
            Err(user) => {
                self.flow.refund_call(allowance);
                return refuse(CallErrorKind::TooManyPending, user);
            }
        };
        let repr = MessageRepr {
            call_id: id,
            piggyback: (allowance / ALIGNMENT) as u32,
            len,
        };
        self.write(repr, payload, cons);
        self.stats.calls += 1;
        Ok(id)
    }

    /// Sends the response to `req` (requests may be answered in any order).
    /// No ring-full check: the call reserved the room.
    pub fn reply(&mut self, req: &Request, payload: &[u8]) -> Result<(), ReplyError> {
        if let Some(e) = &self.failed {
            return Err(ReplyError::Failed(e.clone()));
        }
        let too_large = ReplyError::TooLarge {
            len: payload.len(),
            allowance: req.allowance,
        };
        let Ok(len) = u32::try_from(payload.len()) else {
            return Err(too_large);
        };
        if padded_message_size(len) + FLOW_METADATA_SIZE as u64 > req.allowance {
            return Err(too_large);
        }
        if req.allowance > self.flow.outstanding_requests() || req.allowance % ALIGNMENT != 0 {
            return Err(ReplyError::NotOutstanding);
        }
        self.write_reply(req, payload);
        Ok(())
    }

    /// Whether an answer of `len` bytes to `req` may be written during intake:
    /// within the reservation and without a wrap (see [`Handler::answer`]).
    #[inline]
    fn answer_fits(&self, req: &Request, len: usize) -> bool {
        len <= req.max_response() as usize && !self.send.needs_wrap(padded_message_size(len as u32))
    }

    /// Writes the response to `req` (checked by the caller) and releases its
    /// reservation.
    #[inline]
    fn write_reply(&mut self, req: &Request, payload: &[u8]) {
        let len = payload.len() as u32;
        let repr = MessageRepr {
            call_id: to_response_id(req.call_id),
            piggyback: (req.allowance / ALIGNMENT) as u32,
            len,
        };
        let cons = self.send.consumption(padded_message_size(len));
        self.write(repr, payload, cons);
        self.flow.release_reply(req.allowance);
        self.stats.replies += 1;
    }

    /// Appends a message, wrapping first when it would not fit before the ring
    /// end. Grants given on the way count the whole message as in flight.
    fn write(&mut self, repr: MessageRepr, payload: &[u8], cons: u64) {
        self.settled = false;
        let target = self.send.producer() + cons;
        if self.send.needs_wrap(repr.buffer_len()) {
            let consumer = self.recv.consumer();
            if self.send.batch_open() {
                let g = self.flow.take_grant(target);
                self.send.close_batch(consumer, g);
            }
            let g = self.flow.take_grant(target);
            self.send.write_wrap_marker(consumer, g);
            self.flow.note_reported_consumer(consumer);
            self.stats.wraps += 1;
        }
        self.send.append_message(repr, payload);
        debug_assert_eq!(self.send.producer(), target);
    }

    /// Moves everything along: see the module doc. Returns the first error that
    /// failed the connection.
    pub fn poll<T: Transport + ?Sized, H: Handler<U>>(
        &mut self,
        t: &mut T,
        h: &mut H,
    ) -> Result<(), RpcError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.poll_inner(t, h);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    fn poll_inner<T: Transport + ?Sized, H: Handler<U>>(
        &mut self,
        t: &mut T,
        h: &mut H,
    ) -> Result<(), RpcError> {
        let mut got = false;
        while let Some(imm) = t.poll_imm()? {
            self.recv.advance(decode_imm(imm))?;
            got = true;
        }
        if !got && self.settled && !self.has_unflushed() && !self.send.batch_open() {
            // Nothing arrived and nothing changed since a poll that had nothing
            // left to do: the rest would decide the same again. Warm the send
            // ring's next lines while waiting.
            self.send.warm();
            return Ok(());
        }
        while let Some((offset, len)) = self.recv.pending() {
            let pos = self.recv.consumer();
            let n = self.take_batch(t.recv_bytes(offset, len), pos, h)?;
            self.recv.consume(n);
        }
        let consumer = self.recv.consumer();
        if consumer != self.published {
            t.publish_consumer(consumer);
            self.flow.note_reported_consumer(consumer);
            self.published = consumer;
        }
        let wants_read = self.wants_read();
        if wants_read {
            if let Some(pos) = t.read_remote_consumer()? {
                self.flow.on_remote_consumer(pos, self.send.flushed())?;
                self.stats.consumer_reads += 1;
                self.want_read = false;
            }
        }
        let quiet = self.flush_inner(t)?;
        // Closing a batch can leave a grant limited by a stale consumer view,
        // which calls for a read on the next poll: settled only if not. A flush
        // that found nothing to do changed nothing those depend on.
        self.settled = !wants_read
            && (quiet
                || (!self.has_unflushed()
                    && !self.wants_read()
                    && self.credit_batch_due().is_none()));
        Ok(())
    }

    /// The piggy-backed consumer position is stale when a call found the ring
    /// full, or when the invariant (not the policy cap) keeps credit from the peer.
    fn wants_read(&self) -> bool {
        if self.flow.remote_consumer() >= self.send.flushed() {
            return false;
        }
        if self.want_read {
            return true;
        }
        let producer = self.send.producer();
        let by_policy = self.flow.max_resp_reservation()
            - self
                .flow
                .resp_reservation()
                .min(self.flow.max_resp_reservation());
        by_policy >= ALIGNMENT && self.flow.grant_by_invariant(producer) < by_policy
    }

    /// Sends what `call` and `reply` wrote, without taking anything in (a
    /// cheaper step than `poll` right after replying or calling).
    pub fn flush<T: Transport + ?Sized>(&mut self, t: &mut T) -> Result<(), RpcError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = self.flush_inner(t);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r.map(|_| ())
    }

    /// Closes the open batch (or writes a credit batch when one is due) and
    /// hands the closed batches to the transport. Returns whether there was
    /// nothing to do: nothing to close, send or grant.
    fn flush_inner<T: Transport + ?Sized>(&mut self, t: &mut T) -> Result<bool, RpcError> {
        let consumer = self.recv.consumer();
        if self.send.batch_open() {
            let g = self.flow.take_grant(self.send.producer());
            self.send.close_batch(consumer, g);
            self.flow.note_reported_consumer(consumer);
        } else if !self.has_unflushed() && !self.maybe_credit_batch() {
            return Ok(true);
        }
        while let Some(seg) = self.send.next_segment() {
            match t.write_with_imm(seg.offset, self.send.segment_bytes(&seg), seg.imm) {
                Ok(()) => {}
                // Left for the next poll.
                Err(TransportError::Busy) => break,
                Err(e) => return Err(e.into()),
            }
            self.send.mark_flushed(&seg);
            self.stats.writes += 1;
        }
        Ok(false)
    }

    /// With nothing else to send, returns credit in a metadata-only batch when a
    /// worthwhile amount is available (an eighth of `max_R`, or the last of it),
    /// so a caller starved of credit is never left waiting for a batch that
    /// would not come. Returns whether it wrote one.
    fn maybe_credit_batch(&mut self) -> bool {
        let Some((fits, target)) = self.credit_batch_due() else {
            return false;
        };
        let consumer = self.recv.consumer();
        let g = self.flow.take_grant(target);
        if fits {
            self.send.open_batch();
            self.send.close_batch(consumer, g);
        } else {
            self.send.write_wrap_marker(consumer, g);
            self.stats.wraps += 1;
        }
        self.flow.note_reported_consumer(consumer);
        self.stats.credit_batches += 1;
        true
    }

    /// Whether a metadata-only credit batch is due: `Some((fits before the ring
    /// end, producer after it))`.
    fn credit_batch_due(&self) -> Option<(bool, u64)> {
        let producer = self.send.producer();
        let fits = fits_before_end(producer, FLOW_METADATA_SIZE as u64, self.send.size());
        let cons = if fits {
            FLOW_METADATA_SIZE as u64
        } else {
            room_to_end(producer, self.send.size())
        };
        if !self.flow.has_room(producer, cons) {
            return None;
        }
        let target = producer + cons;
        let g = self.flow.grant(target);
        let max_r = self.flow.max_resp_reservation();
        let worthwhile =
            g >= ALIGNMENT && (g >= max_r / 8 || self.flow.resp_reservation() + g == max_r);
        worthwhile.then_some((fits, target))
    }

    /// Validates and takes the batch at receive position `pos`; `bytes` is the
    /// announced contiguous region there. Returns the bytes consumed.
    fn take_batch<H: Handler<U>>(
        &mut self,
        bytes: &[u8],
        pos: u64,
        h: &mut H,
    ) -> Result<u64, RpcError> {
        let size = self.recv.size();
        let batch = Batch::new_checked(bytes).map_err(|err| RpcError::Wire { pos, err })?;
        let meta = batch.meta();
        self.stats.batches_in += 1;
        if batch.is_wrap() {
            let skip = room_to_end(pos, size);
            if (bytes.len() as u64) < skip {
                return Err(RpcError::ShortWrap(pos));
            }
            self.flow
                .on_remote_consumer(meta.consumer_pos, self.send.flushed())?;
            self.flow.on_grant(meta.credit_grant, 0, pos + skip)?;
            return Ok(skip);
        }
        let len = batch.len() as u64;
        if !fits_before_end(pos, len, size) {
            return Err(RpcError::BatchCrossesRingEnd {
                offset: pos & (size - 1),
                len,
            });
        }
        self.flow
            .on_remote_consumer(meta.consumer_pos, self.send.flushed())?;
        self.flow
            .on_grant(meta.credit_grant, batch.released(), pos + len)?;
        for msg in batch.messages() {
            let call_id = msg.call_id();
            let allowance = u64::from(msg.piggyback()) * ALIGNMENT;
            if is_response(call_id) {
                let id = from_response_id(call_id);
                let Some(reserved) = self.pending.allowance(id) else {
                    return Err(RpcError::UnknownCallId(id));
                };
                if allowance != reserved {
                    return Err(RpcError::AllowanceMismatch {
                        call_id: id,
                        got: allowance,
                        reserved,
                    });
                }
                if padded_message_size(msg.len()) + FLOW_METADATA_SIZE as u64 > reserved {
                    return Err(RpcError::ResponseOverAllowance {
                        call_id: id,
                        len: msg.len(),
                        reserved,
                    });
                }
                self.flow.on_response(allowance)?;
                if let Some((user, _)) = self.pending.remove(id) {
                    self.stats.responses += 1;
                    h.on_response(id, user, msg.payload());
                }
            } else {
                self.flow.on_request(allowance)?;
                self.stats.requests += 1;
                let req = Request { call_id, allowance };
                match h.answer(req, msg.payload()) {
                    Some(resp) if self.answer_fits(&req, resp.len()) => {
                        self.write_reply(&req, resp);
                    }
                    _ => h.on_request(req, msg.payload()),
                }
            }
        }
        Ok(len)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::rpc::transport::mem::MemLink;
    use crate::rpc::wire::{FlowMeta, FlowMetaRepr, Message, WRAP_MESSAGE_COUNT};

    #[derive(Default)]
    struct Rec {
        requests: Vec<(Request, Vec<u8>)>,
        responses: Vec<(u32, u32, Vec<u8>)>,
    }

    impl Handler<u32> for Rec {
        fn on_request(&mut self, req: Request, payload: &[u8]) {
            self.requests.push((req, payload.to_vec()));
        }
        fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
            self.responses.push((call_id, user, payload.to_vec()));
        }
    }

    fn pair(ring: u64) -> (Endpoint<u32>, Endpoint<u32>, MemLink) {
        let c = Config::new(ring);
        let a = Endpoint::new(c, c.local_info()).unwrap();
        let b = Endpoint::new(c, c.local_info()).unwrap();
        (a, b, MemLink::new(ring as usize))
    }

    #[test]
    fn call_and_reply_out_of_order() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Rec::default());
        let id1 = a.call(b"one", 8, 1).unwrap();
        let id2 = a.call(b"two", 8, 2).unwrap();
        assert_eq!(link.writes(0), 0, "call() only writes the local ring");
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(link.writes(0), 1, "one write per batch");
        b.poll(&mut link.side(1), &mut hb).unwrap();
        assert_eq!(hb.requests.len(), 2);
        assert_eq!(hb.requests[0].1, b"one");
        assert_eq!(hb.requests[1].1, b"two");
        let (r1, r2) = (hb.requests[0].0, hb.requests[1].0);
        b.reply(&r2, b"TWO").unwrap();
        b.reply(&r1, b"ONE").unwrap();
        assert!(matches!(
            b.reply(&r1, b"x"),
            Err(ReplyError::NotOutstanding)
        ));
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(
            ha.responses,
            vec![(id2, 2, b"TWO".to_vec()), (id1, 1, b"ONE".to_vec())]
        );
        assert_eq!(a.pending_calls(), 0);
        assert!(a.invariant_holds() && b.invariant_holds());
    }

    /// Answers every request during `poll` with its payload reversed, or with
    /// `len` bytes of 0xee when `len` is set.
    #[derive(Default)]
    struct Answering {
        rec: Rec,
        buf: Vec<u8>,
        len: Option<usize>,
    }

    impl Handler<u32> for Answering {
        fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
            self.buf = match self.len {
                Some(n) => vec![0xee; n],
                None => payload.iter().rev().copied().collect(),
            };
            Some(&self.buf)
        }
        fn on_request(&mut self, req: Request, payload: &[u8]) {
            self.rec.on_request(req, payload);
        }
        fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
            self.rec.on_response(call_id, user, payload);
        }
    }

    #[test]
    fn answer_during_poll() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Answering::default());
        let id1 = a.call(b"abc", 8, 1).unwrap();
        let id2 = a.call(b"de", 8, 2).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        assert!(hb.rec.requests.is_empty(), "answered, not handed over");
        assert_eq!(link.writes(1), 1, "both answers in one batch of that poll");
        assert_eq!(b.stats().replies, 2);
        assert_eq!(b.flow().outstanding_requests(), 0);
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(
            ha.responses,
            vec![(id1, 1, b"cba".to_vec()), (id2, 2, b"ed".to_vec())]
        );
        assert!(a.invariant_holds() && b.invariant_holds());
        // Longer than the call allows (8 bytes asked, 20 reserved with the
        // header in one 32-byte block): handed to on_request instead.
        hb.len = Some(21);
        let id3 = a.call(b"f", 8, 3).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        assert_eq!(hb.rec.requests.len(), 1);
        assert_eq!(link.writes(1), 1);
        let r = hb.rec.requests[0].0;
        b.reply(&r, b"later").unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(ha.responses[2], (id3, 3, b"later".to_vec()));
    }

    #[test]
    fn answer_that_would_wrap_is_handed_over() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Answering::default());
        // Move B's send producer near its ring end with answers of 200 bytes.
        hb.len = Some(200);
        let mut n = 0;
        while b.send_producer() % 4096 + 32 + padded_message_size(200) < 4096 {
            a.call(b"x", 200, n).unwrap();
            a.poll(&mut link.side(0), &mut ha).unwrap();
            b.poll(&mut link.side(1), &mut hb).unwrap();
            a.poll(&mut link.side(0), &mut ha).unwrap();
            n += 1;
        }
        assert_eq!(ha.responses.len(), n as usize);
        assert!(hb.rec.requests.is_empty());
        assert_eq!(b.stats().wraps, 0);
        // The next answer would not fit before the ring end.
        a.call(b"y", 200, n).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        assert_eq!(hb.rec.requests.len(), 1, "declined: it would wrap");
        let r = hb.rec.requests[0].0;
        b.reply(&r, &[1; 200]).unwrap();
        assert_eq!(b.stats().wraps, 1);
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(ha.responses.len(), n as usize + 1);
        assert!(a.invariant_holds() && b.invariant_holds());
    }

    #[test]
    fn reply_too_large_refused() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Rec::default());
        a.call(b"q", 20, 0).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        let r = hb.requests[0].0;
        assert_eq!(r.allowance, 64);
        assert_eq!(r.max_response(), 20);
        assert!(matches!(
            b.reply(&r, &[0; 21]),
            Err(ReplyError::TooLarge { .. })
        ));
        b.reply(&r, &[0; 20]).unwrap();
    }

    #[test]
    fn credit_runs_out_and_comes_back() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Rec::default());
        // Initial credit 1024, each call reserves 64.
        let mut n = 0;
        loop {
            match a.call(&[], 0, n) {
                Ok(_) => n += 1,
                Err(e) => {
                    assert_eq!(e.kind, CallErrorKind::InsufficientCredit);
                    assert!(e.kind.is_retryable());
                    assert_eq!(e.user, n);
                    break;
                }
            }
        }
        assert_eq!(n, 16);
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        for (r, _) in hb.requests.drain(..) {
            b.reply(&r, &[]).unwrap();
        }
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(ha.responses.len(), 16);
        assert!(a.call(&[], 0, 99).is_ok());
    }

    #[test]
    fn ring_full_reads_the_peer_consumer() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Rec::default());
        // B takes the requests in but never sends anything back, so A's
        // piggy-backed view of B's consumer never moves.
        let mut sent = 0;
        let kind = loop {
            match a.call(&[0u8; 200], 0, sent) {
                Ok(_) => sent += 1,
                Err(e) => break e.kind,
            }
            a.poll(&mut link.side(0), &mut ha).unwrap();
            b.poll(&mut link.side(1), &mut hb).unwrap();
        };
        assert_eq!(kind, CallErrorKind::RingFull);
        assert_eq!(link.writes(1), 0);
        assert_eq!(a.stats().consumer_reads, 0);
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert_eq!(a.stats().consumer_reads, 1);
        assert!(a.call(&[0u8; 200], 0, sent).is_ok());
        assert!(a.invariant_holds());
    }

    #[test]
    fn busy_transport_keeps_data_for_next_poll() {
        let (mut a, mut b, mut link) = pair(4096);
        let (mut ha, mut hb) = (Rec::default(), Rec::default());
        a.call(b"x", 8, 1).unwrap();
        link.refuse_writes(0, 1);
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert!(a.has_unflushed());
        a.call(b"y", 8, 2).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        assert!(!a.has_unflushed());
        b.poll(&mut link.side(1), &mut hb).unwrap();
        assert_eq!(hb.requests.len(), 2);
    }

    #[test]
    fn permanent_errors() {
        let (mut a, _, _) = pair(4096);
        let big = vec![0u8; a.max_payload() as usize + 1];
        assert_eq!(
            a.call(&big, 0, 0).unwrap_err().kind,
            CallErrorKind::MessageTooLarge
        );
        let max = a.max_response_allowance();
        assert_eq!(
            a.call(&[], max + 1, 0).unwrap_err().kind,
            CallErrorKind::AllowanceTooLarge
        );
        assert!(!CallErrorKind::MessageTooLarge.is_retryable());
        let c = Config::new(4096);
        assert!(Endpoint::<()>::new(c, Config::new(8192).local_info()).is_err());
        let mut bad = c;
        bad.max_resp_reservation = 2048;
        assert!(Endpoint::<()>::new(bad, c.local_info()).is_err());
    }

    fn meta(consumer_pos: u64, credit_grant: u64, message_count: u32) -> [u8; 32] {
        let mut b = [0u8; 32];
        FlowMetaRepr {
            consumer_pos,
            credit_grant,
            message_count,
        }
        .emit(&mut FlowMeta::new_unchecked(&mut b[..]));
        b
    }

    fn msg(call_id: u32, piggyback: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; padded_message_size(payload.len() as u32) as usize];
        let mut m = Message::new_unchecked(&mut v[..]);
        MessageRepr {
            call_id,
            piggyback,
            len: payload.len() as u32,
        }
        .emit(&mut m);
        m.payload_mut().copy_from_slice(payload);
        v
    }

    /// Injects `bytes` at offset 0 of side 0's ring and polls side 0.
    fn inject(bytes: &[u8]) -> Result<(), RpcError> {
        let (mut a, _, mut link) = pair(4096);
        let mut h = Rec::default();
        link.inject(0, 0, bytes, (bytes.len() / 32) as u32).unwrap();
        let r = a.poll(&mut link.side(0), &mut h);
        if let Err(e) = &r {
            // The connection stays failed.
            assert_eq!(a.poll(&mut link.side(0), &mut h).unwrap_err(), *e);
            assert!(matches!(
                a.call(&[], 0, 0).unwrap_err().kind,
                CallErrorKind::Failed(_)
            ));
        }
        r
    }

    #[test]
    fn garbage_length_past_batch() {
        let mut b = meta(0, 0, 1).to_vec();
        b.extend(msg(1, 2, b"hello"));
        b[32 + 8..32 + 12].copy_from_slice(&1000u32.to_le_bytes());
        assert!(matches!(inject(&b), Err(RpcError::Wire { .. })));
    }

    #[test]
    fn garbage_count_overrun() {
        let mut b = meta(0, 0, 7).to_vec();
        b.extend(msg(1, 2, b"hello"));
        assert!(matches!(
            inject(&b),
            Err(RpcError::Wire {
                err: WireError::CountOverrun { count: 7 },
                ..
            })
        ));
    }

    #[test]
    fn garbage_grant_breaks_invariant() {
        // Peer R starts at 1024; a grant of 1024 makes 2 * 2048 + 32 > 4096.
        assert!(matches!(
            inject(&meta(0, 1024, 0)),
            Err(RpcError::Flow(FlowError::GrantBreaksInvariant { .. }))
        ));
        assert!(inject(&meta(0, 992, 0)).is_ok());
    }

    #[test]
    fn garbage_unknown_call_id() {
        let mut b = meta(0, 0, 1).to_vec();
        b.extend(msg(to_response_id(5), 2, b"hi"));
        assert_eq!(inject(&b), Err(RpcError::UnknownCallId(5)));
    }

    #[test]
    fn garbage_request_over_credit() {
        let mut b = meta(0, 0, 1).to_vec();
        b.extend(msg(1, 64, b"hi")); // reserves 2048 > 1024 granted
        assert!(matches!(
            inject(&b),
            Err(RpcError::Flow(FlowError::RequestOverCredit { .. }))
        ));
    }

    #[test]
    fn garbage_consumer_ahead() {
        assert!(matches!(
            inject(&meta(64, 0, 0)),
            Err(RpcError::Flow(FlowError::BadConsumerPos { .. }))
        ));
    }

    #[test]
    fn garbage_overrun_and_ring_end() {
        let (mut a, _, mut link) = pair(4096);
        let mut h = Rec::default();
        link.inject(0, 0, &[], 129).unwrap();
        assert!(matches!(
            a.poll(&mut link.side(0), &mut h),
            Err(RpcError::Recv(RecvError::Overrun { .. }))
        ));
        // A wrap marker not announced to the ring end.
        let (mut a, _, mut link) = pair(4096);
        link.inject(0, 0, &meta(0, 0, WRAP_MESSAGE_COUNT), 1)
            .unwrap();
        assert_eq!(
            a.poll(&mut link.side(0), &mut h),
            Err(RpcError::ShortWrap(0))
        );
        // A batch ending exactly at the ring end (the strict rule).
        let (mut a, _, mut link) = pair(4096);
        let mut b = meta(0, 0, 1).to_vec();
        b.extend(msg(1, 2, &[0u8; 4096 - 32 - 12]));
        link.inject(0, 0, &b, 128).unwrap();
        assert!(matches!(
            a.poll(&mut link.side(0), &mut h),
            Err(RpcError::BatchCrossesRingEnd { .. })
        ));
    }
}
