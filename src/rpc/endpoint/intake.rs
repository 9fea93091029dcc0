//! Intake side of the RPC endpoint: `poll`, reading the peer's consumer position, and validating and taking received batches.

use super::{Endpoint, Handler, Request, RpcError};
use crate::rpc::ring::{fits_before_end, room_to_end};
use crate::rpc::transport::Transport;
use crate::rpc::wire::{
    decode_imm, from_response_id, is_response, padded_message_size, Batch, ALIGNMENT,
    FLOW_METADATA_SIZE, HEADER_SIZE,
};

impl<U> Endpoint<U> {
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
        match self.poll_inner(t, h) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    pub(super) fn poll_inner<T: Transport + ?Sized, H: Handler<U>>(
        &mut self,
        t: &mut T,
        h: &mut H,
    ) -> Result<(), RpcError> {
        let mut got = false;
        if let Some(imm) = t.poll_imm()? {
            self.recv.advance(decode_imm(imm))?;
            got = true;
            while let Some(imm) = t.poll_imm_more()? {
                self.recv.advance(decode_imm(imm))?;
            }
        }
        if !got && self.settled && self.send.all_flushed() {
            // Nothing arrived and nothing changed since a poll that had nothing
            // left to do: the rest would decide the same again. Warm the send
            // ring's next lines while waiting.
            self.send.warm();
            return Ok(());
        }
        self.took = 0;
        while let Some((offset, len)) = self.recv.pending() {
            let pos = self.recv.consumer();
            let n = self.take_batch(t.recv_bytes(offset, len), pos, h)?;
            self.recv.consume(n);
        }
        let deferred = self.deferred;
        if self.took == TOOK_RESPONSE && !deferred && self.send.all_flushed() {
            // Responses only, and nothing to send: a caller waiting for its
            // answer (at queue depth 1, on the round trip) gets it now, and the
            // rest (the consumer position for the peer's fallback read, a read
            // of the peer's, a credit batch) runs in the next poll, not
            // settled. Only every other poll may skip it, so a stream of
            // responses cannot keep it from running.
            self.deferred = true;
            self.settled = false;
            return Ok(());
        }
        self.deferred = false;
        let wants_read = self.wants_read();
        if wants_read {
            if let Some(pos) = t.read_remote_consumer()? {
                self.flow.on_remote_consumer(pos, self.send.flushed())?;
                self.stats.consumer_reads += 1;
                self.want_read = false;
            }
        }
        let quiet = self.flush_inner(t)?;
        if !quiet && !deferred {
            // Something went out (at queue depth 1, a server's answer: the
            // round trip goes on at the peer while the rest of this poll
            // runs). The rest (the consumer position for the peer's fallback
            // read, whether this side has settled) waits for the next poll,
            // not settled: a server spinning on `poll` runs it before the next
            // request arrives. As above, only every other poll may skip it.
            self.deferred = true;
            self.settled = false;
            return Ok(());
        }
        // The consumer position for the peer's fallback read goes out after the
        // flush: every batch carries it in its metadata anyway, and an answer
        // written during intake leaves a few instructions sooner.
        let consumer = self.recv.consumer();
        if consumer != self.published {
            t.publish_consumer(consumer);
            self.flow.note_reported_consumer(consumer);
            self.published = consumer;
        }
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
    ///
    /// The grant is judged where it would be given: at the open batch's close,
    /// or else in a credit batch, whose own 32 bytes count as in flight. Judged
    /// at the bare producer, an idle side could see enough room for the
    /// policy's last 32 bytes of grant, yet the credit batch carrying them
    /// would leave a grant of 0 by its stale consumer view: no credit batch and
    /// no read, and a peer short of credit for its largest call waited forever.
    /// With the target counted, a grant short of the policy always asks for a
    /// read until the view is current; then in flight is at most the credit
    /// batch itself (the peer consumed the rest), and since `max_R <= C/4`,
    /// `(C - 32)/2 - R >= max_R - R`: the full grant, so an idle pair converges
    /// to full credit.
    #[inline]
    pub(super) fn wants_read(&self) -> bool {
        if self.flow.remote_consumer() >= self.send.flushed() {
            return false;
        }
        if self.want_read {
            return true;
        }
        let by_policy = self.flow.policy_room();
        // R at its cap (every poll after a flush that granted the rest):
        // no grant to judge, so no target to compute.
        if by_policy < ALIGNMENT {
            return false;
        }
        let producer = if self.send.batch_open() || self.has_unflushed() {
            self.send.producer()
        } else {
            self.credit_batch_target().1
        };
        self.flow.grant_by_invariant(producer) < by_policy
    }

    /// Validates and takes the batch at receive position `pos`; `bytes` is the
    /// announced contiguous region there. Returns the bytes consumed.
    ///
    /// A batch of exactly one message (every batch at queue depth 1) takes
    /// a path of its own: its metadata and header are read once from the
    /// first 64 bytes, and one check (the padded message within the announced
    /// bytes) stands for [`Batch::new_checked`]'s walk, which reaches the
    /// same verdict for a count of 1. Anything that path does not accept,
    /// malformed or not, goes to the general path, which finds the precise
    /// error; the flow checks and the message's own checks are the same
    /// code on both.
    #[inline]
    pub(super) fn take_batch<H: Handler<U>>(
        &mut self,
        bytes: &[u8],
        pos: u64,
        h: &mut H,
    ) -> Result<u64, RpcError> {
        if let Some(head) = bytes.first_chunk::<SOLE_HEAD>() {
            if le32(head, 16) == 1 {
                let len = le32(head, FLOW_METADATA_SIZE + 8);
                let total = FLOW_METADATA_SIZE as u64 + padded_message_size(len);
                let start = FLOW_METADATA_SIZE + HEADER_SIZE;
                if total <= bytes.len() as u64 {
                    if let Some(payload) = bytes.get(start..start + len as usize) {
                        let sole = Sole {
                            consumer_pos: le64(head, 0),
                            credit_grant: le64(head, 8),
                            call_id: le32(head, FLOW_METADATA_SIZE),
                            piggyback: le32(head, FLOW_METADATA_SIZE + 4),
                            total,
                        };
                        return self.take_sole(&sole, payload, pos, h);
                    }
                }
            }
        }
        self.take_batch_general(bytes, pos, h)
    }

    /// [`take_batch`](Self::take_batch) for a batch of one message, read
    /// and bounds-checked by it.
    #[inline(always)]
    fn take_sole<H: Handler<U>>(
        &mut self,
        sole: &Sole,
        payload: &[u8],
        pos: u64,
        h: &mut H,
    ) -> Result<u64, RpcError> {
        let size = self.recv.size();
        self.stats.batches_in += 1;
        if !fits_before_end(pos, sole.total, size) {
            return Err(RpcError::BatchCrossesRingEnd {
                offset: pos & (size - 1),
                len: sole.total,
            });
        }
        self.flow
            .on_remote_consumer(sole.consumer_pos, self.send.flushed())?;
        let allowance = u64::from(sole.piggyback) * ALIGNMENT;
        let end = pos + sole.total;
        // One branch on the message's kind for the grant and the message: a
        // request releases nothing, which the grant's check then knows.
        if is_response(sole.call_id) {
            self.flow.on_grant(sole.credit_grant, allowance, end)?;
            self.take_response(sole.call_id, allowance, payload, h)?;
        } else {
            self.flow.on_grant(sole.credit_grant, 0, end)?;
            self.take_request(sole.call_id, allowance, payload, h)?;
        }
        Ok(sole.total)
    }

    /// Any batch: validated whole by [`Batch::new_checked`], then its messages.
    /// Out of line: it is rare at queue depth 1, and inlined into `poll` it
    /// crowded the common path's registers.
    #[inline(never)]
    pub(super) fn take_batch_general<H: Handler<U>>(
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
            let allowance = u64::from(msg.piggyback()) * ALIGNMENT;
            self.take_message(msg.call_id(), allowance, msg.payload(), h)?;
        }
        Ok(len)
    }

    /// Checks and delivers one message of a batch whose flow metadata was
    /// taken: a response to its pending call, a request to the handler's
    /// `answer` (written back at once when it fits) or `on_request`.
    #[inline(always)]
    fn take_message<H: Handler<U>>(
        &mut self,
        call_id: u32,
        allowance: u64,
        payload: &[u8],
        h: &mut H,
    ) -> Result<(), RpcError> {
        if is_response(call_id) {
            self.take_response(call_id, allowance, payload, h)
        } else {
            self.take_request(call_id, allowance, payload, h)
        }
    }

    /// [`take_message`](Self::take_message) for a response.
    #[inline(always)]
    fn take_response<H: Handler<U>>(
        &mut self,
        call_id: u32,
        allowance: u64,
        payload: &[u8],
        h: &mut H,
    ) -> Result<(), RpcError> {
        let id = from_response_id(call_id);
        let len = payload.len() as u32;
        let flow = &mut self.flow;
        // One look-up of the call: checked, then taken.
        let user = self.pending.take_checked(id, |reserved| {
            if allowance != reserved {
                return Err(RpcError::AllowanceMismatch {
                    call_id: id,
                    got: allowance,
                    reserved,
                });
            }
            if padded_message_size(len) + FLOW_METADATA_SIZE as u64 > reserved {
                return Err(RpcError::ResponseOverAllowance {
                    call_id: id,
                    len,
                    reserved,
                });
            }
            flow.on_response(allowance)?;
            Ok(())
        })?;
        self.stats.responses += 1;
        self.took |= TOOK_RESPONSE;
        h.on_response(id, user, payload);
        Ok(())
    }

    /// [`take_message`](Self::take_message) for a request.
    #[inline(always)]
    fn take_request<H: Handler<U>>(
        &mut self,
        call_id: u32,
        allowance: u64,
        payload: &[u8],
        h: &mut H,
    ) -> Result<(), RpcError> {
        self.flow.on_request(allowance)?;
        self.stats.requests += 1;
        self.took |= TOOK_REQUEST;
        let req = Request { call_id, allowance };
        let answered = match h.answer(req, payload) {
            Some(resp) => self.write_reply_in_place(&req, resp),
            None => false,
        };
        if !answered {
            h.on_request(req, payload);
        }
        Ok(())
    }
}

/// [`Endpoint::took`](super::Endpoint) bit: the poll took a response.
pub(super) const TOOK_RESPONSE: u8 = 1;
/// [`Endpoint::took`](super::Endpoint) bit: the poll took a request.
pub(super) const TOOK_REQUEST: u8 = 2;

/// Bytes [`Endpoint::take_batch`] reads a sole message's batch from: the
/// flow metadata and the message header.
const SOLE_HEAD: usize = FLOW_METADATA_SIZE + 32;

/// A batch of one message, as [`Endpoint::take_batch`] read it.
struct Sole {
    consumer_pos: u64,
    credit_grant: u64,
    call_id: u32,
    piggyback: u32,
    /// Bytes of the batch on the ring: metadata and the padded message.
    total: u64,
}

/// The little-endian `u32` at `at` (a constant within the head once inlined,
/// so no check remains).
#[inline(always)]
fn le32(b: &[u8; SOLE_HEAD], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|w| w.first_chunk::<4>())
        .map_or(0, |w| u32::from_le_bytes(*w))
}

/// The little-endian `u64` at `at`, as [`le32`].
#[inline(always)]
fn le64(b: &[u8; SOLE_HEAD], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|w| w.first_chunk::<8>())
        .map_or(0, |w| u64::from_le_bytes(*w))
}
