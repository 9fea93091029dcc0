//! Credit-based flow control, exactly as the copyrpc memo specifies.
//!
//! With `C` the peer's receive-ring size, `in_flight` the bytes written to it and
//! not yet known consumed, and `R` this side's response reservation (credit it
//! granted the peer and has not yet used for responses), every step keeps
//!
//! ```text
//! in_flight + 2 * R <= C
//! ```
//!
//! * Initial credit, on both sides, without a handshake:
//!   `R = min(max_R, ring / 4)`, and the peer starts with that as its balance.
//! * Grant at each batch close: `min((C - in_flight) / 2 - R, max_R - R)`
//!   aligned down to 32; `R` grows by it immediately.
//! * `call()` reserves `padded(response_allowance) + 32` from the peer's credit
//!   (the extra 32 bytes cover the wrap marker a responder may have to write),
//!   or fails with `InsufficientCredit`.
//! * `reply()` releases the reservation and has no ring-full check: the response
//!   (even with a wrap marker and its skipped tail, at most twice the reservation)
//!   is covered by the `2 * R` term.
//!
//! This module also checks what the peer claims: a grant that would break the
//! peer's own invariant, a request beyond the credit it holds.

#![forbid(unsafe_code)]

use super::wire::{align_down, padded_message_size, FLOW_METADATA_SIZE};
use thiserror::Error;

/// A flow-control violation by the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FlowError {
    /// A credit grant that breaks the peer's invariant `in_flight + 2R <= C`.
    #[error("credit grant {grant} breaks the invariant: peer reservation would be {reservation}, at least {in_flight} bytes in flight, ring {capacity}")]
    GrantBreaksInvariant {
        /// The grant.
        grant: u64,
        /// The peer's reservation after it.
        reservation: u64,
        /// A lower bound of the peer's bytes in flight.
        in_flight: u64,
        /// Ring size.
        capacity: u64,
    },
    /// A grant that is not a multiple of 32.
    #[error("credit grant {0} is not a multiple of 32")]
    UnalignedGrant(u64),
    /// A request whose reservation exceeds the credit the peer holds.
    #[error("request reserves {allowance} bytes but the peer holds only {available}")]
    RequestOverCredit {
        /// The request's reservation.
        allowance: u64,
        /// Credit the peer could still hold.
        available: u64,
    },
    /// A request with a reservation too small for any response.
    #[error("request reserves {0} bytes, less than the 64-byte minimum")]
    AllowanceTooSmall(u64),
    /// A response whose reservation does not match the peer's reservation.
    #[error("response releases {released} bytes, more than the peer reserved ({reserved})")]
    ReleaseOverReservation {
        /// Bytes the response releases.
        released: u64,
        /// The peer's reservation as tracked here.
        reserved: u64,
    },
    /// A consumer position ahead of what was sent, or not aligned.
    #[error("peer consumer position {pos} is invalid (sent up to {sent})")]
    BadConsumerPos {
        /// The position.
        pos: u64,
        /// Bytes handed to the transport.
        sent: u64,
    },
}

/// Internal reservation for a call with `response_allowance` bytes of response
/// payload: `padded(response_allowance) + 32`.
#[inline]
pub const fn internal_allowance(response_allowance: u32) -> u64 {
    padded_message_size(response_allowance) + FLOW_METADATA_SIZE as u64
}

/// Smallest internal allowance (an empty response).
pub const MIN_ALLOWANCE: u64 = internal_allowance(0);

/// Initial credit: `min(max_R, ring / 4)`.
#[inline]
pub const fn initial_credit(max_resp_reservation: u64, ring_size: u64) -> u64 {
    let q = ring_size / 4;
    align_down(if max_resp_reservation < q {
        max_resp_reservation
    } else {
        q
    })
}

/// Both directions of credit accounting for one endpoint.
#[derive(Debug, Clone)]
pub struct Flow {
    capacity: u64,
    max_r: u64,
    r: u64,
    peer_credit: u64,
    remote_consumer: u64,
    outstanding_in: u64,
    peer_r: u64,
    peer_capacity: u64,
    reported_consumer: u64,
    /// The most bytes in flight at which the invariant holds whatever `R`
    /// is: `C - 2 * R` at the largest `R` can be (`max_R`, or the initial
    /// credit if larger). Below it the invariant needs no arithmetic on `R`
    /// (every call and every grant at queue depth 1).
    room_at_max: u64,
}

impl Flow {
    /// Accounting for an endpoint whose peer's receive ring holds `capacity`
    /// bytes, with the local reservation cap `max_r`, after exchanging info
    /// records: `local_initial` is the credit this side granted at connection
    /// (its `R`), `peer_initial` the credit the peer granted (this side's balance).
    /// `peer_capacity` is this side's receive-ring size (the peer's `C`).
    pub fn new(
        capacity: u64,
        max_r: u64,
        local_initial: u64,
        peer_initial: u64,
        peer_capacity: u64,
    ) -> Self {
        Flow {
            capacity,
            max_r,
            r: local_initial,
            peer_credit: peer_initial,
            remote_consumer: 0,
            outstanding_in: 0,
            peer_r: peer_initial,
            peer_capacity,
            reported_consumer: 0,
            room_at_max: capacity.saturating_sub(max_r.max(local_initial).saturating_mul(2)),
        }
    }

    /// `C`: the peer's receive-ring size.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// `R`: credit granted and not yet used by responses.
    #[inline]
    pub fn resp_reservation(&self) -> u64 {
        self.r
    }

    /// The cap on `R`.
    #[inline]
    pub fn max_resp_reservation(&self) -> u64 {
        self.max_r
    }

    /// What the policy still lets this side grant: `max_R - R` (0 when `R`
    /// is at or above its cap). Under 32 bytes, no grant can be given.
    #[inline]
    pub fn policy_room(&self) -> u64 {
        self.max_r - self.r.min(self.max_r)
    }

    /// Credit the peer granted this side, available for calls.
    #[inline]
    pub fn peer_credit_balance(&self) -> u64 {
        self.peer_credit
    }

    /// Cached peer consumer position.
    #[inline]
    pub fn remote_consumer(&self) -> u64 {
        self.remote_consumer
    }

    /// Reservations of received requests not yet replied to.
    #[inline]
    pub fn outstanding_requests(&self) -> u64 {
        self.outstanding_in
    }

    /// `producer - remote_consumer`.
    #[inline]
    pub fn in_flight(&self, producer: u64) -> u64 {
        producer.saturating_sub(self.remote_consumer)
    }

    /// Whether `in_flight + 2R <= C` holds with the send ring at `producer`.
    #[inline]
    pub fn invariant_holds(&self, producer: u64) -> bool {
        self.in_flight(producer)
            .checked_add(self.r.saturating_mul(2))
            .is_some_and(|v| v <= self.capacity)
    }

    /// Whether `extra` more bytes fit under the invariant.
    #[inline]
    pub fn has_room(&self, producer: u64, extra: u64) -> bool {
        let end = producer.saturating_add(extra);
        self.in_flight(end) <= self.room_at_max || self.invariant_holds(end)
    }

    /// The grant the invariant allows with the send ring at `producer`
    /// (unaligned, before the policy cap).
    #[inline]
    pub fn grant_by_invariant(&self, producer: u64) -> u64 {
        (self.capacity.saturating_sub(self.in_flight(producer)) / 2).saturating_sub(self.r)
    }

    /// The grant `min((C - in_flight)/2 - R, max_R - R)` aligned down to 32.
    #[inline]
    pub fn grant(&self, producer: u64) -> u64 {
        align_down(
            self.grant_by_invariant(producer)
                .min(self.max_r.saturating_sub(self.r)),
        )
    }

    /// Computes the grant for a batch being closed and adds it to `R`.
    #[inline]
    pub fn take_grant(&mut self, producer: u64) -> u64 {
        // R at its cap (a side that is only called, every batch): the policy
        // term is 0, so is the grant, without the invariant's arithmetic.
        if self.r >= self.max_r {
            return 0;
        }
        // Little in flight (the common case): the invariant allows at least
        // `max_R - R`, so the policy term is the grant.
        let g = if self.in_flight(producer) <= self.room_at_max {
            align_down(self.max_r - self.r)
        } else {
            self.grant(producer)
        };
        self.r += g;
        g
    }

    /// Records the consumer position this side exposed to the peer: at least
    /// the last one recorded (a receive consumer only grows).
    #[inline]
    pub fn note_reported_consumer(&mut self, pos: u64) {
        // The endpoint reports its current consumer, which only grows: the
        // latest is the largest (a store, not a maximum, at every flush).
        debug_assert!(pos >= self.reported_consumer);
        self.reported_consumer = pos;
    }

    /// Reserves credit for a call. Returns the internal allowance.
    #[inline]
    pub fn reserve_call(&mut self, response_allowance: u32) -> Option<u64> {
        let a = internal_allowance(response_allowance);
        if self.peer_credit < a {
            return None;
        }
        self.peer_credit -= a;
        Some(a)
    }

    /// Gives back a reservation taken by [`reserve_call`](Self::reserve_call)
    /// for a call that was not sent.
    #[inline]
    pub fn refund_call(&mut self, allowance: u64) {
        self.peer_credit += allowance;
    }

    /// Releases the reservation of a response that was written.
    #[inline]
    pub fn release_reply(&mut self, allowance: u64) {
        // Both hold it: a reply's reservation is outstanding (`reply` checks,
        // an answer during intake was just taken), and `on_request` keeps the
        // outstanding reservations within `R`.
        debug_assert!(allowance <= self.outstanding_in && self.outstanding_in <= self.r);
        self.r -= allowance;
        self.outstanding_in -= allowance;
    }

    /// Takes a peer consumer position (piggy-backed or read). Stale values are
    /// ignored; one beyond `sent` (bytes handed to the transport) is an error.
    #[inline]
    pub fn on_remote_consumer(&mut self, pos: u64, sent: u64) -> Result<(), FlowError> {
        if pos > sent || pos % 32 != 0 {
            return Err(FlowError::BadConsumerPos { pos, sent });
        }
        self.remote_consumer = self.remote_consumer.max(pos);
        Ok(())
    }

    /// Takes the credit grant of a received batch that ends at receive position
    /// `batch_end` and whose responses release `released` bytes of the peer's
    /// reservation (the peer released them before it computed the grant),
    /// checking the grant keeps the peer's invariant.
    #[inline]
    pub fn on_grant(&mut self, grant: u64, released: u64, batch_end: u64) -> Result<(), FlowError> {
        if grant % 32 != 0 {
            return Err(FlowError::UnalignedGrant(grant));
        }
        let Some(after_release) = self.peer_r.checked_sub(released) else {
            return Err(FlowError::ReleaseOverReservation {
                released,
                reserved: self.peer_r,
            });
        };
        // A zero grant is always benign: in the middle of a reply that wraps, the
        // peer may close a batch while its reservation for that reply is still
        // counted (and so grants nothing). (Also the common case: a side that
        // is only called never grants.)
        if grant == 0 {
            return Ok(());
        }
        let reservation = after_release.saturating_add(grant);
        // The peer cannot know more of our consumer than we exposed, so at least
        // this much of its data was in flight when it computed the grant.
        let in_flight = batch_end.saturating_sub(self.reported_consumer);
        // `in_flight + 2 * reservation <= C`, saturating, as `R <= (C -
        // in_flight) / 2` (one subtraction and a shift instead of a
        // saturating product and sum: on the round trip, every response).
        let fits = self
            .peer_capacity
            .checked_sub(in_flight)
            .is_some_and(|room| reservation <= room / 2);
        if !fits {
            return Err(FlowError::GrantBreaksInvariant {
                grant,
                reservation,
                in_flight,
                capacity: self.peer_capacity,
            });
        }
        self.peer_r += grant;
        self.peer_credit += grant;
        Ok(())
    }

    /// Takes a received request's reservation.
    #[inline]
    pub fn on_request(&mut self, allowance: u64) -> Result<(), FlowError> {
        if allowance < MIN_ALLOWANCE {
            return Err(FlowError::AllowanceTooSmall(allowance));
        }
        let available = self.r - self.outstanding_in;
        if allowance > available {
            return Err(FlowError::RequestOverCredit {
                allowance,
                available,
            });
        }
        self.outstanding_in += allowance;
        Ok(())
    }

    /// Takes a received response's release of the peer's reservation.
    #[inline]
    pub fn on_response(&mut self, allowance: u64) -> Result<(), FlowError> {
        if allowance > self.peer_r {
            return Err(FlowError::ReleaseOverReservation {
                released: allowance,
                reserved: self.peer_r,
            });
        }
        self.peer_r -= allowance;
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn initial_and_allowance() {
        assert_eq!(initial_credit(1 << 20, 1 << 20), 1 << 18);
        assert_eq!(initial_credit(1000, 1 << 20), 992);
        assert_eq!(internal_allowance(0), 64);
        assert_eq!(internal_allowance(20), 64);
        assert_eq!(internal_allowance(21), 96);
    }

    #[test]
    fn grant_formula() {
        // C = 4096, max_R = 1024, R = 1024 initially: no grant.
        let mut f = Flow::new(4096, 1024, 1024, 1024, 4096);
        assert_eq!(f.grant(0), 0);
        assert!(f.invariant_holds(0));
        assert!(f.invariant_holds(2048));
        assert!(!f.invariant_holds(2049));
        // A reply releases 96: grant refills up to max_R.
        f.outstanding_in = 96;
        f.release_reply(96);
        assert_eq!(f.grant(64), 96);
        // With 3000 bytes in flight the invariant limits it:
        // (4096 - 3000) / 2 - 928 = 548 - 928 < 0 -> 0.
        assert_eq!(f.grant(3000), 0);
        // (4096 - 2000) / 2 - 928 = 120 -> aligned 96 (policy 96).
        assert_eq!(f.grant(2000), 96);
        // (4096 - 2100) / 2 - 928 = 70 -> 64.
        assert_eq!(f.grant(2100), 64);
        let g = f.take_grant(2100);
        assert_eq!(f.resp_reservation(), 928 + g);
        assert!(f.invariant_holds(2100));
    }

    /// `take_grant` is `grant` added to `R`, with or without its shortcut
    /// for `R` at the cap, at every producer and reservation around it.
    #[test]
    fn take_grant_is_grant() {
        for r in (0..=1120).step_by(32) {
            for producer in (0..4200).step_by(24) {
                for remote in [0, 96, 1000] {
                    // R as the initial credit, and R after replies released
                    // some of an initial credit at the cap.
                    for initial in [r, 1024] {
                        let mut f = Flow::new(4096, 1024, initial, 1024, 4096);
                        f.r = r.min(1024.max(initial));
                        f.remote_consumer = remote.min(producer);
                        let (r0, g) = (f.r, f.grant(producer));
                        assert_eq!(f.take_grant(producer), g);
                        assert_eq!(f.resp_reservation(), r0 + g);
                    }
                }
            }
        }
    }

    /// `has_room` is `invariant_holds` at the end of the extra bytes, with
    /// or without its shortcut for little in flight, at every producer,
    /// reservation (also above the cap, as an initial credit may be) and
    /// consumer around the limits.
    #[test]
    fn has_room_is_the_invariant() {
        for (max_r, initial) in [(1024, 1024), (1024, 0), (512, 1024), (64, 64)] {
            for r in (0..=1120).step_by(32) {
                for producer in (0..4400).step_by(24) {
                    for remote in [0, 96, 1000, 4000] {
                        for extra in [0, 32, 96, 3000, u64::MAX] {
                            let mut f = Flow::new(4096, max_r, initial, 1024, 4096);
                            f.r = r.min(max_r.max(initial));
                            f.remote_consumer = remote.min(producer);
                            assert_eq!(
                                f.has_room(producer, extra),
                                f.invariant_holds(producer.saturating_add(extra))
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn call_reservation() {
        let mut f = Flow::new(4096, 1024, 1024, 128, 4096);
        // padded(84) = 96, + 32 = 128 fits; padded(85) = 128, + 32 = 160 does not.
        assert_eq!(internal_allowance(84), 128);
        assert_eq!(f.reserve_call(85), None);
        assert_eq!(f.peer_credit_balance(), 128);
        assert_eq!(f.reserve_call(0), Some(64));
        assert_eq!(f.peer_credit_balance(), 64);
        assert_eq!(f.reserve_call(20), Some(64));
        assert_eq!(f.reserve_call(0), None);
        f.refund_call(64);
        assert_eq!(f.peer_credit_balance(), 64);
    }

    #[test]
    fn peer_grant_checked() {
        // Our receive ring (the peer's C) is 4096; the peer started with R = 1024.
        let mut f = Flow::new(4096, 1024, 1024, 1024, 4096);
        // 1024 + 512 -> 2 * 1536 + 64 <= 4096: fine.
        f.on_grant(512, 0, 64).unwrap();
        assert_eq!(f.peer_credit_balance(), 1536);
        // Another 512: 2 * 2048 + 96 > 4096.
        assert!(matches!(
            f.on_grant(512, 0, 160),
            Err(FlowError::GrantBreaksInvariant { .. })
        ));
        // Unless responses in the same batch released 512 first.
        f.on_grant(512, 512, 160).unwrap();
        f.on_response(512).unwrap();
        assert!(f.on_grant(0, 4096, 192).is_err());
        assert_eq!(f.on_grant(33, 0, 160), Err(FlowError::UnalignedGrant(33)));
        // Responses release it.
        f.on_response(1024).unwrap();
        assert!(f.on_response(4096).is_err());
    }

    /// `on_grant`'s verdict is the invariant's saturating sum (`in_flight`
    /// plus twice the reservation, at most `C`), for grants, releases,
    /// positions and reservations around the limits and far beyond them.
    #[test]
    fn grant_check_is_the_saturating_sum() {
        let big = [
            0u64,
            1,
            31,
            32,
            64,
            1000,
            2048,
            4064,
            4096,
            4128,
            1 << 40,
            u64::MAX / 2,
            u64::MAX - 31,
        ];
        for peer_r in [0u64, 64, 1024, 2048, 2080] {
            for &grant in &big {
                for released in [0u64, 64, peer_r, peer_r + 32] {
                    for &batch_end in &big {
                        for reported in [0u64, 96, 4000] {
                            let mut f = Flow::new(4096, 1024, 1024, 1024, 4096);
                            f.peer_r = peer_r;
                            f.reported_consumer = reported;
                            let before = f.clone();
                            let got = f.on_grant(grant, released, batch_end);
                            let want = if grant % 32 != 0 {
                                Err(FlowError::UnalignedGrant(grant))
                            } else if released > peer_r {
                                Err(FlowError::ReleaseOverReservation {
                                    released,
                                    reserved: peer_r,
                                })
                            } else if grant == 0 {
                                Ok(())
                            } else {
                                let reservation = (peer_r - released).saturating_add(grant);
                                let in_flight = batch_end.saturating_sub(reported);
                                let need = in_flight.saturating_add(reservation.saturating_mul(2));
                                if need > 4096 {
                                    Err(FlowError::GrantBreaksInvariant {
                                        grant,
                                        reservation,
                                        in_flight,
                                        capacity: 4096,
                                    })
                                } else {
                                    Ok(())
                                }
                            };
                            assert_eq!(got, want, "grant {grant} released {released} end {batch_end} reported {reported} R {peer_r}");
                            let grown = if got.is_ok() { grant } else { 0 };
                            assert_eq!(f.peer_r, before.peer_r + grown);
                            assert_eq!(f.peer_credit, before.peer_credit + grown);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn request_checked() {
        let mut f = Flow::new(4096, 1024, 128, 1024, 4096);
        assert_eq!(f.on_request(32), Err(FlowError::AllowanceTooSmall(32)));
        f.on_request(64).unwrap();
        f.on_request(64).unwrap();
        assert!(matches!(
            f.on_request(64),
            Err(FlowError::RequestOverCredit { .. })
        ));
        f.release_reply(64);
        assert_eq!(f.resp_reservation(), 64);
        assert_eq!(f.outstanding_requests(), 64);
    }

    #[test]
    fn consumer_updates() {
        let mut f = Flow::new(4096, 1024, 1024, 1024, 4096);
        f.on_remote_consumer(64, 128).unwrap();
        f.on_remote_consumer(32, 128).unwrap(); // stale, ignored
        assert_eq!(f.remote_consumer(), 64);
        assert!(f.on_remote_consumer(160, 128).is_err());
        assert!(f.on_remote_consumer(65, 128).is_err());
    }
}
