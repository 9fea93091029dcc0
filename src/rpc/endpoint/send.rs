//! Send side of the RPC endpoint: `call`, `reply`, ring writes, flushing batches and credit-only batches.

use super::{CallError, CallErrorKind, Endpoint, ReplyError, Request, RpcError};
use crate::rpc::ring::{fits_before_end, room_to_end};
use crate::rpc::transport::{Transport, TransportError};
use crate::rpc::wire::{
    padded_message_size, to_response_id, MessageRepr, ALIGNMENT, FLOW_METADATA_SIZE,
};

/// The header of the response to `req` with `len` bytes of payload.
#[inline(always)]
fn reply_repr(req: &Request, len: u32) -> MessageRepr {
    MessageRepr {
        call_id: to_response_id(req.call_id),
        piggyback: (req.allowance / ALIGNMENT) as u32,
        len,
    }
}

impl<U> Endpoint<U> {
    /// Sends a request with `payload`, reserving room for a response of up to
    /// `response_allowance` bytes. Returns the call id; the response comes to
    /// [`Handler::on_response`](super::Handler::on_response) with `user`.
    ///
    /// Inline at the caller: a call at queue depth 1 is on the round trip,
    /// and a function of its own cost a frame and the result's return
    /// through memory (48 instructions of a call and its flush).
    #[inline(always)]
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
        let (cons, wrap) = self.send.plan(padded);
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
        self.write_planned(repr, payload, cons, wrap);
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

    /// Writes the response to `req` (checked by the caller) and releases its
    /// reservation.
    #[inline]
    pub(super) fn write_reply(&mut self, req: &Request, payload: &[u8]) {
        let len = payload.len() as u32;
        let cons = self.send.consumption(padded_message_size(len));
        self.write(reply_repr(req, len), payload, cons);
        self.flow.release_reply(req.allowance);
        self.stats.replies += 1;
    }

    /// [`write_reply`](Self::write_reply) for an answer given during intake,
    /// when it fits: within the reservation and without a wrap (see
    /// [`Handler::answer`](super::Handler::answer)). Returns whether it
    /// wrote it (else nothing changed).
    #[inline(always)]
    pub(super) fn write_reply_in_place(&mut self, req: &Request, payload: &[u8]) -> bool {
        if payload.len() > req.max_response() as usize
            || !self
                .send
                .append_if_fits(reply_repr(req, payload.len() as u32), payload)
        {
            return false;
        }
        self.settled = false;
        self.flow.release_reply(req.allowance);
        self.stats.replies += 1;
        true
    }

    /// Appends a message, wrapping first when it would not fit before the ring
    /// end. Grants given on the way count the whole message as in flight.
    #[inline(always)]
    pub(super) fn write(&mut self, repr: MessageRepr, payload: &[u8], cons: u64) {
        let wrap = self.send.needs_wrap(repr.buffer_len());
        self.write_planned(repr, payload, cons, wrap);
    }

    /// [`write`](Self::write) with the wrap decided by the caller
    /// ([`SendRing::plan`](crate::rpc::ring::SendRing::plan)).
    #[inline(always)]
    fn write_planned(&mut self, repr: MessageRepr, payload: &[u8], cons: u64, wrap: bool) {
        debug_assert_eq!(wrap, self.send.needs_wrap(repr.buffer_len()));
        self.settled = false;
        let target = self.send.producer() + cons;
        if wrap {
            self.wrap_before(target);
        }
        self.send.append_message(repr, payload);
        debug_assert_eq!(self.send.producer(), target);
    }

    /// Closes the open batch and writes a wrap marker, before a message that
    /// leaves the send ring at `target` (once a lap: out of the way).
    #[cold]
    #[inline(never)]
    fn wrap_before(&mut self, target: u64) {
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

    /// Sends what `call` and `reply` wrote, without taking anything in (a
    /// cheaper step than `poll` right after replying or calling).
    #[inline(always)]
    pub fn flush<T: Transport + ?Sized>(&mut self, t: &mut T) -> Result<(), RpcError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match self.flush_inner(t) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Closes the open batch (or writes a credit batch when one is due) and
    /// hands the closed batches to the transport. Returns whether there was
    /// nothing to do: nothing to close, send or grant.
    ///
    /// Only the common case (at queue depth 1, every flush) is here: one
    /// open batch that is all there is to send, closed and written in one
    /// step, the store that publishes it as soon as the batch is closed, the
    /// bookkeeping after it. Everything else is in
    /// [`flush_general`](Self::flush_general), out of line. Inline at its
    /// two callers (`flush` and `poll`): a call in between was a frame's
    /// setup and teardown on the round trip on both sides (-27 instructions
    /// on a client's call and flush, -23 on a server's poll).
    #[inline(always)]
    pub(super) fn flush_inner<T: Transport + ?Sized>(
        &mut self,
        t: &mut T,
    ) -> Result<bool, RpcError> {
        let consumer = self.recv.consumer();
        #[cfg(debug_assertions)]
        let sole = self.send.sole_batch();
        let flow = &mut self.flow;
        let Some(seg) = self.send.close_sole(consumer, |end| flow.take_grant(end)) else {
            // Nothing written, nothing unflushed, and no grant possible (`R`
            // at its cap, so no credit batch is due): nothing to do, as
            // `flush_general` would find, without its frame (every idle poll
            // that runs its tail at queue depth 1).
            if self.send.all_flushed() && self.flow.policy_room() < ALIGNMENT {
                return Ok(true);
            }
            return self.flush_general(t);
        };
        #[cfg(debug_assertions)]
        {
            debug_assert_eq!(sole, Some(seg));
            debug_assert_eq!(Some(seg), self.send.next_segment());
        }
        let r = t.write_with_imm(seg.offset, self.send.segment_bytes(&seg), seg.imm);
        self.flow.note_reported_consumer(consumer);
        match r {
            Ok(()) => {
                self.send.mark_flushed(&seg);
                self.stats.writes += 1;
            }
            Err(TransportError::Busy) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(false)
    }

    /// [`flush_inner`](Self::flush_inner) but for its common case.
    #[inline(never)]
    fn flush_general<T: Transport + ?Sized>(&mut self, t: &mut T) -> Result<bool, RpcError> {
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
    #[inline]
    pub(super) fn maybe_credit_batch(&mut self) -> bool {
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

    /// Where a metadata-only credit batch would leave the send ring: `(fits
    /// before the ring end, producer after it)`; a wrap marker when it does not fit.
    #[inline]
    pub(super) fn credit_batch_target(&self) -> (bool, u64) {
        let producer = self.send.producer();
        let fits = fits_before_end(producer, FLOW_METADATA_SIZE as u64, self.send.size());
        let cons = if fits {
            FLOW_METADATA_SIZE as u64
        } else {
            room_to_end(producer, self.send.size())
        };
        (fits, producer + cons)
    }

    /// Whether a metadata-only credit batch is due: `Some((fits before the ring
    /// end, producer after it))`.
    #[inline]
    pub(super) fn credit_batch_due(&self) -> Option<(bool, u64)> {
        // No grant can reach 32 bytes when R is within 32 of its cap (a client
        // that is never called stays there): the common answer, without the
        // ring arithmetic below (this runs after every response at depth 1).
        if self.flow.policy_room() < ALIGNMENT {
            return None;
        }
        let producer = self.send.producer();
        let (fits, target) = self.credit_batch_target();
        if !self.flow.has_room(producer, target - producer) {
            return None;
        }
        let g = self.flow.grant(target);
        let max_r = self.flow.max_resp_reservation();
        let worthwhile =
            g >= ALIGNMENT && (g >= max_r / 8 || self.flow.resp_reservation() + g == max_r);
        worthwhile.then_some((fits, target))
    }
}
