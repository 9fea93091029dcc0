//! Retransmit timers firing: timeouts, backoff, tail-loss probes, the retry
//! limit and the peer timeout.

use super::super::seq;
use super::super::wire::Channel;
use super::{channel_of, DeadReason, Endpoint, Event, SeqOpt, ABORT_REPEATS, RETRY_LIMIT_SILENCE};
use crate::time::Instant;

impl Endpoint {
    /// Starts a pass: refills the resend budget and fires due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.budget = self.cfg.resend_cap;
        if self.dead {
            return;
        }
        let heard = *self.last_heard.get_or_insert(now);
        if let Some(limit) = self.cfg.peer_timeout {
            // Silence only counts while we wait for the peer: something of
            // ours is unacknowledged (an idle channel may be quiet).
            let waiting = self.tx.iter().any(|t| t.snd_una != t.next_seq);
            if waiting && now - heard > limit {
                self.die(DeadReason::Silent);
                return;
            }
        }
        for ch in Channel::ALL {
            if self.tx[ch.index()].reo_deadline.is_some_and(|d| d <= now) {
                self.reorder_timer(ch, now);
            }
        }
        self.expired.clear();
        self.timers.expire(now, &mut self.expired);
        // First pass: account the expiry of every live segment; keep only those.
        // With `tail_probe`, the channel's timers behave as RFC 6298's single
        // timer: a timeout is an RTO without an ACK of new data (while ACKs
        // progress, SACK and RACK find the losses), and after one, the next
        // comes no sooner than the backed-off RTO. Per-segment timers alone
        // fire falsely when a standing queue makes later segments' RTTs longer
        // than the RTO, and a silence (a lost flight, a peer descheduled for a
        // few ms) expires the flight over many passes: firing at each would
        // send a probe per pass and take the RTO to its maximum at once.
        let mut timed_out = [false; 2];
        let mut probe: [Option<u32>; 2] = [None, None];
        let mut oldest: [Option<u32>; 2] = [None, None];
        let mut kept = 0;
        for i in 0..self.expired.len() {
            let k = self.expired[i];
            let ch = channel_of(k);
            let s = k as u32;
            let t = &mut self.tx[ch.index()];
            let seg = &mut t.segs[(s & t.wmask) as usize];
            if !seg.live || seg.acked {
                continue;
            }
            seg.room = None;
            if self.cfg.tail_probe && now < t.probe_after {
                seg.room = self.timers.check_in(k, t.probe_after);
                continue;
            }
            self.stats.timeouts += 1;
            timed_out[ch.index()] = true;
            let p = &mut probe[ch.index()];
            if p.is_none_or_before(s) {
                *p = Some(s);
            }
            let o = &mut oldest[ch.index()];
            if o.is_none_or(|o| seq::lt(s, o)) {
                *o = Some(s);
            }
            self.expired[kept] = k;
            kept += 1;
        }
        self.expired.truncate(kept);
        let mut rearm_at = [now; 2];
        for ch in Channel::ALL {
            let t = &mut self.tx[ch.index()];
            if timed_out[ch.index()] {
                t.rtt.backoff();
                rearm_at[ch.index()] = now + t.rtt.rto();
                t.probe_after = rearm_at[ch.index()];
            }
        }
        // Second pass: resend. With `tail_probe`, only the newest expired
        // segment of each channel goes out; its ACK (or the SACK it brings
        // back) settles the others, which wait one more backed-off RTO. When
        // only an ACK was lost this costs one resend instead of a flight. The
        // oldest expired segment goes out too (RFC 6298's retransmission of
        // the first unacknowledged one): it is the hole that holds delivery
        // back, and with two resends per RTO one lost probe (or its lost ACK)
        // no longer costs a whole backed-off RTO.
        let long_silent = now - self.last_heard.unwrap_or(now) >= self.retry_limit_silence();
        for i in 0..self.expired.len() {
            let k = self.expired[i];
            let ch = channel_of(k);
            let s = k as u32;
            let rearm = self.cfg.tail_probe
                && probe[ch.index()] != Some(s)
                && oldest[ch.index()] != Some(s);
            let t = &mut self.tx[ch.index()];
            let seg = &mut t.segs[(s & t.wmask) as usize];
            if rearm {
                seg.room = self.timers.check_in(k, rearm_at[ch.index()]);
                continue;
            }
            if seg.queued {
                continue;
            }
            // A retry is a resend on a timeout, and the limit counts retries
            // in a row with no word from the peer in between: segments
            // re-armed behind the probe do not count (with a 4096-segment
            // window and no SACK they wait many RTOs for their turn, and
            // counting each wait declared a live peer dead at 5 % loss), and
            // a peer heard since the last transmission restarts the count,
            // so a live peer is never declared dead while its packets arrive
            // (`peer_timeout` ends a run whose peer answers but never
            // acknowledges).
            let heard = self.last_heard.is_some_and(|h| h > seg.sent_at);
            seg.timeouts = if heard {
                1
            } else {
                seg.timeouts.saturating_add(1)
            };
            // The limit also wants RETRY_LIMIT_SILENCE without a word from
            // the peer: with the RTO capped at a few SRTTs, 16 retries on a
            // 100 us path take milliseconds, less than a loaded host or VM
            // deschedules a live peer for (seen: a two-rank dpdk channel at
            // load 7.5 declared dead within 1262 segments).
            if self
                .cfg
                .retry_limit
                .is_some_and(|lim| u32::from(seg.timeouts) > lim)
                && long_silent
            {
                self.die(DeadReason::RetryLimit);
                return;
            }
            seg.queued = true;
            t.leave_pipe(s);
            self.resend.push_back((ch, s));
        }
    }

    /// RACK's reordering timer (RFC 8985 6.3). A hole an ACK proved
    /// missing while it was still inside the reordering window is declared
    /// lost when a segment sent a window after it is acknowledged (the ACK
    /// rule), or, failing that, one RTO after it was sent. Without this a
    /// hole left inside the window when the sender stops sending (the flight
    /// bound, the credits, the end of the data) waited for the retransmit
    /// timer, which with `tail_probe` resends two segments per backed-off
    /// RTO: the tail of every transfer over a reordering path took tens of
    /// milliseconds and hundreds of timeouts. RACK waits `RACK.rtt +
    /// reo_wnd` instead, with RACK.rtt the RTT of the newest segment
    /// acknowledged; under millisecond jitter that is a lucky sample (20 us
    /// on a 0-4 ms path) and the timer resent most late holes before they
    /// arrived (20 000 spurious resends in a lossless run), so the wait is the
    /// segment's own RTO (SRTT + 4 RTTVAR), which covers the RTT's spread.
    /// Rescans are at least a timer-wheel tick apart.
    pub(super) fn reorder_timer(&mut self, ch: Channel, now: Instant) {
        let tick = self.cfg.timer_tick;
        let t = &mut self.tx[ch.index()];
        t.reo_deadline = None;
        let rto = t.rtt.rto();
        let mut s = t.snd_una;
        while seq::lt(s, t.largest_acked) {
            let hole = s;
            s = s.wrapping_add(1);
            let seg = &mut t.segs[(hole & t.wmask) as usize];
            if !seg.live || seg.acked || seg.queued || !seg.holed {
                continue;
            }
            let due = seg.sent_at + rto;
            if due > now {
                let due = due.max(now + tick);
                t.reo_deadline = Some(t.reo_deadline.map_or(due, |d| d.min(due)));
                continue;
            }
            if let Some(r) = seg.room.take() {
                self.timers.check_out(r);
            }
            seg.queued = true;
            t.leave_pipe(hole);
            self.resend.push_back((ch, hole));
            self.stats.fast_retransmits += 1;
            t.reorder_seen -= t.reorder_seen / 64;
        }
    }

    /// Silence the retry limit needs besides its count:
    /// [`RETRY_LIMIT_SILENCE`], or `peer_timeout` if that is shorter.
    fn retry_limit_silence(&self) -> core::time::Duration {
        self.cfg
            .peer_timeout
            .map_or(RETRY_LIMIT_SILENCE, |p| p.min(RETRY_LIMIT_SILENCE))
    }

    /// Declares the peer dead: stops every timer and resend, tells the
    /// application ([`Event::PeerDead`]), and queues [`ABORT_REPEATS`]
    /// abort datagrams so the peer ends too instead of waiting out its
    /// `peer_timeout`.
    pub(super) fn die(&mut self, reason: DeadReason) {
        if self.dead {
            return;
        }
        self.dead = true;
        self.dead_reason = Some(reason);
        self.resend.clear();
        self.aborts_due = if reason == DeadReason::PeerAborted {
            0
        } else {
            ABORT_REPEATS
        };
        self.events.push_back(Event::PeerDead);
    }
}
