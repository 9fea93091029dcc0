//! Acknowledgements in: what they settle, RTT samples, and loss detection
//! (duplicate ACKs, SACK and RACK's time rule).

use super::super::seq;
use super::super::timer_wheel::TimerWheel;
use super::super::wire::{AckRepr, Channel};
use super::tx::{RateSnap, TxChannel};
use super::{Endpoint, Event};
use crate::time::Instant;
use core::time::Duration;
use std::collections::VecDeque;

impl Endpoint {
    pub(super) fn on_ack(&mut self, ch: Channel, ack: &AckRepr, now: Instant) {
        let t = &mut self.tx[ch.index()];
        if seq::gt(ack.end(), t.next_seq) || seq::gt(ack.cum, t.next_seq) {
            self.stats.bad_ack += 1;
            return;
        }
        if seq::lt(ack.cum, t.snd_una) {
            self.stats.stale_acks += 1;
            return;
        }
        let mut newly = 0u32;
        let mut sample: Option<Instant> = None;
        // This ACK covers a resent segment: it filled a hole.
        let mut resent = false;
        // The newest-sent segment acknowledged: its send time and rate snapshot.
        let mut newest: Option<(Instant, RateSnap)> = None;
        let mut ack_one =
            |t: &mut TxChannel, timers: &mut TimerWheel, events: &mut VecDeque<Event>, s: u32| {
                let seg = &mut t.segs[(s & t.wmask) as usize];
                if !seg.live || seg.acked {
                    return;
                }
                seg.acked = true;
                seg.queued = false;
                if let Some(r) = seg.room.take() {
                    timers.check_out(r);
                }
                if seg.in_pipe {
                    seg.in_pipe = false;
                    t.pipe -= 1;
                }
                t.delivered += 1;
                if newest.is_none_or(|(at, _)| seg.sent_at >= at) {
                    newest = Some((seg.sent_at, seg.rate));
                }
                if seg.xmits == 1 {
                    sample = Some(sample.map_or(seg.sent_at, |x| x.max(seg.sent_at)));
                } else {
                    resent = true;
                }
                if seg.holed && seg.xmits == 1 {
                    // Shown missing, then received without a resend: reordered.
                    let extent = t.rack_time.saturating_duration_since(seg.sent_at);
                    t.reorder_seen = t.reorder_seen.max(extent);
                }
                if seg.sent_at > t.rack_time {
                    t.rack_time = seg.sent_at;
                }
                if !t.any_acked || seq::gt(s, t.largest_acked) {
                    t.largest_acked = s;
                    t.any_acked = true;
                }
                newly += 1;
                let frag = seg.frag_id;
                let m = &mut t.msgs[(frag & t.cmask) as usize];
                m.acked += 1;
                if m.cut && m.acked >= m.segs {
                    m.live = false;
                    if m.put.is_some() {
                        events.push_back(Event::PutDone { handle: m.handle });
                    }
                    let buf = core::mem::take(&mut m.data);
                    if t.pool.len() <= t.cmask as usize {
                        t.pool.push(buf);
                    }
                }
            };
        let mut s = t.snd_una;
        while seq::lt(s, ack.cum) {
            ack_one(t, &mut self.timers, &mut self.events, s);
            s = s.wrapping_add(1);
        }
        for r in ack.ranges() {
            let mut s = if seq::lt(r.start, t.snd_una) {
                t.snd_una
            } else {
                r.start
            };
            while seq::lt(s, r.end) {
                ack_one(t, &mut self.timers, &mut self.events, s);
                s = s.wrapping_add(1);
            }
        }
        // Advance the cumulative points.
        while t.snd_una != t.next_seq && t.segs[(t.snd_una & t.wmask) as usize].acked {
            t.segs[(t.snd_una & t.wmask) as usize].live = false;
            t.snd_una = t.snd_una.wrapping_add(1);
        }
        while t.msg_una != t.next_frag && !t.msgs[(t.msg_una & t.cmask) as usize].live {
            t.msg_una = t.msg_una.wrapping_add(1);
        }
        // Karn's rule, extended: an ACK that fills a hole also covers
        // segments that waited behind it at the receiver, some sent once but
        // long ago; without SACK (which acknowledged them on arrival) their
        // "RTT" is the hole's recovery time (165 ms samples on a 20 us path
        // took the RTO to its maximum).
        let sample = if resent && !self.cfg.sack_ranges() {
            None
        } else {
            sample
        };
        if let Some(sent) = sample {
            let rtt = now - sent;
            t.rtt.sample(rtt);
            self.stats.rtt_samples += 1;
            if t.min_rtt.is_none_or(|m| rtt < m) {
                t.min_rtt = Some(rtt);
            }
        }
        if let Some((sent, snap)) = newest {
            t.delivered_time = now;
            if self.cfg.flight_gain > 0 {
                t.note_acked(newly, now);
                t.update_flight_cap(snap, sent, now, self.cfg.flight_gain, self.cfg.flight_floor);
            }
        }
        if newly > 0 {
            // New data acknowledged, resent or not: the path delivers, so the
            // backoff ends (as QUIC resets its PTO count on an ACK) and the
            // channel's timer restarts (RFC 6298 5.3).
            t.rtt.reset_backoff();
            t.probe_after = now + t.rtt.rto();
        }
        // Duplicate cumulative ACKs (usnic: one is enough to resend).
        if ack.cum == t.last_cum && newly == 0 && t.snd_una != t.next_seq {
            t.dup_acks += 1;
            // Without SACK and without a threshold of its own (our mode with
            // `sack = false`), `reorder_threshold` duplicates resend the hole
            // once per cumulative point, as TCP NewReno does: one hole per
            // round trip instead of one per RTO (a 1 % loss took the goodput
            // to 4 % of lossless).
            let fire = if self.cfg.dup_ack_threshold > 0 {
                t.dup_acks >= self.cfg.dup_ack_threshold
            } else {
                !self.cfg.sack_ranges() && t.dup_acks == self.cfg.reorder_threshold.max(1)
            };
            if fire {
                let s = t.snd_una;
                let seg = &mut t.segs[(s & t.wmask) as usize];
                // Only if not already pending a resend.
                if seg.live && !seg.acked && !seg.queued {
                    if let Some(r) = seg.room.take() {
                        self.timers.check_out(r);
                    }
                    seg.queued = true;
                    t.leave_pipe(s);
                    self.resend.push_back((ch, s));
                    self.stats.fast_retransmits += 1;
                }
            }
        } else if ack.cum != t.last_cum {
            t.last_cum = ack.cum;
            t.dup_acks = 0;
        }
        // SACK loss detection, RACK-style, on the holes this ACK proves:
        // the cumulative point, the segment just below every range (a range
        // starts above a missing segment), and the gaps between the ranges
        // after the first (the receiver lists those as consecutive runs).
        // Only these: a segment below the highest SACKed one but shown by
        // no ACK may well have arrived (its ACKs lost, or its run not yet
        // reported), and resending it was most of the resends under 20 %
        // loss each way (10 500 for 3 000 losses). A hole is declared lost
        // once a segment sent `reorder_window` after it was acknowledged.
        if self.cfg.sack_ranges() && t.any_acked {
            let reo = reorder_window(t);
            // Until reordering is seen or possible ([`may_reorder`]),
            // `reorder_threshold` segments acknowledged above a proven hole
            // also declare it lost (RACK's start, RFC 8985 6.2).
            let thr = (!may_reorder(t)).then(|| self.cfg.reorder_threshold.max(1) as i32);
            let mut lost = |t: &mut TxChannel, s: u32| {
                if !seq::lt(s, t.largest_acked) || seq::lt(s, t.snd_una) {
                    return;
                }
                let (rack_time, largest) = (t.rack_time, t.largest_acked);
                let seg = &mut t.segs[(s & t.wmask) as usize];
                if !seg.live || seg.acked || seg.queued || seg.sent_at >= rack_time {
                    return;
                }
                let by_count = thr.is_some_and(|n| seq::diff(largest, s) >= n);
                if !by_count && seg.sent_at + reo >= rack_time {
                    // Maybe only late: if it turns up, that measures the
                    // reordering; if it has not one RTO after it was sent,
                    // the reordering timer declares it lost.
                    seg.holed = true;
                    let due = seg.sent_at + t.rtt.rto();
                    t.reo_deadline = Some(t.reo_deadline.map_or(due, |d| d.min(due)));
                    return;
                }
                if let Some(r) = seg.room.take() {
                    self.timers.check_out(r);
                }
                seg.queued = true;
                t.leave_pipe(s);
                self.resend.push_back((ch, s));
                self.stats.fast_retransmits += 1;
                // Forget old reordering slowly (RACK decays its window too).
                t.reorder_seen -= t.reorder_seen / 64;
            };
            lost(t, ack.cum);
            let rs = ack.ranges();
            for (i, r) in rs.iter().enumerate() {
                lost(t, r.start.wrapping_sub(1));
                if i >= 2 {
                    let mut s = r.end;
                    while seq::lt(s, rs[i - 1].start) {
                        lost(t, s);
                        s = s.wrapping_add(1);
                    }
                }
            }
        }
    }
}

/// RACK's reordering window (RFC 8985 6.2): how much later than a hole a
/// segment must have been sent, and acknowledged, before the hole is
/// declared lost. A quarter of the minimum RTT until reordering is seen or
/// possible ([`may_reorder`]); after, the RTT variation (a path whose delay varies by RTTVAR may deliver
/// that much out of order), or 1.25 x the largest reordering measured lately
/// if more: a segment an ACK showed missing that arrives without a resend
/// measures it ([`TxChannel::reorder_seen`]). With 2 ms of jitter that lets
/// packets overtake each other, a fixed window resent 6800 of the 12 000
/// segments of a lossless run; this one 330.
pub(super) fn reorder_window(t: &TxChannel) -> Duration {
    if !may_reorder(t) {
        return t.min_rtt.unwrap_or_default() / 4;
    }
    let var = t.rtt.rttvar().unwrap_or_default();
    var.max(t.reorder_seen + t.reorder_seen / 4)
}

/// Whether this path may deliver out of order: reordering was measured, or
/// the RTT varies by more than the minimum RTT (RTTVAR above it).
///
/// Until then a proven hole is also lost once `reorder_threshold` later
/// segments are acknowledged (fast on a FIFO path, where every hole an ACK
/// shows is a loss). But that rule resends a hole that is only late before
/// it can arrive, so the reordering it would show is never measured (an
/// acknowledgement of a resent segment cannot tell which copy arrived) and
/// the rule stays on for good: with 2 ms of jitter that lets packets
/// overtake each other it resent 12 000 segments of a lossless 24 000-segment
/// run. A delay that varies by more than the base RTT is what lets packets
/// overtake each other, so from then on only the time rule applies, with a
/// window of at least RTTVAR, and the first late hole that turns up
/// measures the reordering. A FIFO path with a steady queue keeps RTTVAR
/// below its minimum RTT and the count rule.
pub(super) fn may_reorder(t: &TxChannel) -> bool {
    if !t.reorder_seen.is_zero() {
        return true;
    }
    match (t.rtt.rttvar(), t.min_rtt) {
        (Some(var), Some(min)) => var > min,
        _ => false,
    }
}
