//! The sending half of a channel: segments, messages in flight, the
//! delivery-rate flight bound, and the transmit path of [`Endpoint`].

use super::super::rtt::RttEstimator;
use super::super::seq;
use super::super::timer_wheel::RoomId;
use super::super::wire::{
    AckRepr, Channel, DataRepr, Packet, PutRepr, Repr, ACK_BLOCK_LEN, HEADER_LEN, SACK_RANGE_LEN,
};
use super::rx::ACK_CREDIT_PER;
use super::{key, Endpoint, RxChannel};
use crate::time::Instant;
use core::time::Duration;
use std::collections::VecDeque;

#[derive(Debug, Clone, Default)]
pub(super) struct TxSeg {
    pub(super) live: bool,
    pub(super) acked: bool,
    pub(super) queued: bool,
    pub(super) frag_id: u32,
    pub(super) offset: u32,
    pub(super) len: u16,
    pub(super) xmits: u16,
    pub(super) timeouts: u16,
    pub(super) sent_at: Instant,
    pub(super) room: Option<RoomId>,
    /// Counted in the channel's `pipe` (sent, neither acknowledged nor declared lost).
    pub(super) in_pipe: bool,
    /// The channel's delivery state when this segment was (last) sent.
    pub(super) rate: RateSnap,
    /// An ACK showed this segment (as last sent) missing at the peer, but
    /// it was not yet declared lost (within the reordering window).
    pub(super) holed: bool,
}

/// Delivery-rate bookkeeping (BBR's rate sample, draft-cheng-iccrg-delivery-rate-estimation).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct RateSnap {
    pub(super) delivered: u64,
    pub(super) delivered_time: Instant,
    pub(super) first_sent: Instant,
}

#[derive(Debug, Default)]
pub(super) struct OutMsg {
    pub(super) live: bool,
    pub(super) data: Vec<u8>,
    pub(super) put: Option<PutRepr>,
    pub(super) handle: u64,
    pub(super) segs: u32,
    pub(super) acked: u32,
    pub(super) next_offset: u32,
    pub(super) cut: bool,
}

#[derive(Debug)]
pub(super) struct Pending {
    pub(super) data: Vec<u8>,
    pub(super) put: Option<PutRepr>,
    pub(super) handle: u64,
}

#[derive(Debug)]
pub(super) struct TxChannel {
    pub(super) chunk: usize,
    pub(super) wmask: u32,
    pub(super) cmask: u32,
    pub(super) next_seq: u32,
    pub(super) snd_una: u32,
    pub(super) largest_acked: u32,
    pub(super) any_acked: bool,
    pub(super) rack_time: Instant,
    /// When the oldest hole still inside the reordering window is due to
    /// be declared lost by time alone (RACK's reordering timer, see
    /// [`Endpoint::reorder_timer`]).
    pub(super) reo_deadline: Option<Instant>,
    /// Largest reordering observed lately (RACK's adaptive window): how
    /// much earlier than the newest acknowledged segment a segment was sent
    /// that an ACK showed missing and a later ACK showed received.
    pub(super) reorder_seen: Duration,
    pub(super) last_cum: u32,
    pub(super) dup_acks: u32,
    pub(super) segs: Vec<TxSeg>,
    pub(super) msgs: Vec<OutMsg>,
    pub(super) next_frag: u32,
    pub(super) msg_una: u32,
    pub(super) current: Option<u32>,
    pub(super) queue: VecDeque<Pending>,
    pub(super) next_handle: u64,
    pub(super) pool: Vec<Vec<u8>>,
    pub(super) rtt: RttEstimator,
    /// With `tail_probe`: no timer of the channel fires before this instant,
    /// one RTO after the last ACK of new data or the last timeout probe.
    /// Expiries before it are re-armed to it and are not timeouts.
    pub(super) probe_after: Instant,
    /// Segments sent and neither acknowledged nor declared lost.
    pub(super) pipe: u32,
    /// Segments acknowledged so far, and when the last one was.
    pub(super) delivered: u64,
    pub(super) delivered_time: Instant,
    /// Send time of the newest segment acknowledged (start of the send interval).
    pub(super) first_sent: Instant,
    /// Largest delivery rate, segments per second, in this and the last filter period.
    pub(super) bw: [f64; 2],
    /// Start of the current filter period.
    pub(super) bw_period: Instant,
    /// Smallest RTT sampled.
    pub(super) min_rtt: Option<Duration>,

    /// Start of the current ACK-aggregation epoch, and segments acknowledged in it.
    pub(super) ack_epoch: Instant,
    pub(super) ack_epoch_acked: u64,
    /// Largest ACK aggregation (segments) in this and the last filter period.
    pub(super) extra_acked: [f64; 2],
    /// New segments start only while `pipe` is below this.
    pub(super) flight_cap: u32,
}

/// Length of each of the two delivery-rate filter periods, at least.
const BW_PERIOD_MIN: Duration = Duration::from_millis(1);
/// Filter periods in minimum RTTs.
const BW_PERIOD_RTTS: u32 = 10;

impl TxChannel {
    /// Measures ACK aggregation (BBR's `extra_acked`): segments
    /// acknowledged in the current epoch beyond what the delivery rate
    /// explains, the largest in this and the last filter period. A path
    /// that holds packets and releases them in clumps (a busy relay, a
    /// descheduled peer: millisecond jitter) acknowledges in clumps; the
    /// flight must cover a clump or the sender idles between them and the
    /// rate, and with it a bound of rate x minimum RTT, shrinks to the floor
    /// (16 segments per round trip at 20 % loss and 1 ms of jitter). A
    /// standing queue of ours acknowledges at the bottleneck's rate, so it
    /// adds nothing and the bound still keeps the queue short.
    pub(super) fn note_acked(&mut self, newly: u32, now: Instant) {
        let bw = self.bw[0].max(self.bw[1]);
        let expected = bw * (now - self.ack_epoch).as_secs_f64();
        if self.ack_epoch_acked as f64 <= expected || bw == 0.0 {
            self.ack_epoch = now;
            self.ack_epoch_acked = 0;
        }
        self.ack_epoch_acked += u64::from(newly);
        let expected = bw * (now - self.ack_epoch).as_secs_f64();
        let extra = (self.ack_epoch_acked as f64 - expected).max(0.0);
        if extra > self.extra_acked[0] {
            self.extra_acked[0] = extra;
        }
    }

    pub(super) fn leave_pipe(&mut self, s: u32) {
        let seg = &mut self.segs[(s & self.wmask) as usize];
        if seg.in_pipe {
            seg.in_pipe = false;
            self.pipe -= 1;
        }
    }

    /// Takes a delivery-rate sample from `p`, the snapshot of the newest
    /// segment this ACK acknowledged (sent at `sent`), and recomputes the
    /// flight bound: `gain` x max rate x min RTT + the ACK aggregation
    /// ([`TxChannel::note_acked`]), clamped to `[floor, window]`.
    pub(super) fn update_flight_cap(
        &mut self,
        p: RateSnap,
        sent: Instant,
        now: Instant,
        gain: u32,
        floor: u32,
    ) {
        self.first_sent = sent;
        if p.delivered == 0 {
            // Sent before the first ACK: the interval holds a whole round
            // trip of nothing, so the rate says little; keep the window.
            return;
        }
        // The longer of the send and the ACK interval, so neither a burst
        // of sends nor a burst of ACKs inflates the rate.
        let interval = (sent - p.first_sent).max(now - p.delivered_time);
        if interval.is_zero() {
            return;
        }
        let rate = (self.delivered - p.delivered) as f64 / interval.as_secs_f64();
        let period = self
            .min_rtt
            .map_or(BW_PERIOD_MIN, |r| (r * BW_PERIOD_RTTS).max(BW_PERIOD_MIN));
        if now - self.bw_period >= period {
            self.bw = [rate, self.bw[0]];
            self.extra_acked = [0.0, self.extra_acked[0]];
            self.bw_period = now;
        } else if rate > self.bw[0] {
            self.bw[0] = rate;
        }
        let Some(min_rtt) = self.min_rtt else {
            return;
        };
        // Where packets overtake one another, the minimum RTT is a rare
        // lucky sample (20 us under 2 ms of reordering jitter): a flight of
        // rate x minimum RTT idles the sender for most of each round trip
        // and the rate, and the bound with it, shrinks to the floor. The
        // reordering measured lately is the spread of the path's delay; a
        // packet waits half of it on average (uniform jitter), so the bound
        // adds that. A FIFO path (a standing queue, however deep) reorders
        // nothing and keeps the bound at the minimum RTT (the deep-queue
        // tests). Adding 2 x RTTVAR instead let a standing queue grow there.
        let span = min_rtt + self.reorder_seen / 2;
        let bdp = self.bw[0].max(self.bw[1]) * span.as_secs_f64();
        let extra = self.extra_acked[0].max(self.extra_acked[1]);
        let cap = (f64::from(gain) * bdp + extra)
            .ceil()
            .min(f64::from(self.wmask + 1)) as u32;
        self.flight_cap = cap.max(floor);
    }
}

impl Endpoint {
    /// Writes the next datagram to send into `buf` (which should hold the
    /// larger MTU) and returns its length, or `None` when nothing is due.
    /// Order: queued resends (up to the per-pass cap), new segments (priority
    /// channel first), then a standalone ACK if one is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.now = self.now.max(now);
        if self.dead {
            return self.transmit_abort(buf);
        }
        if let Some((ch, s)) = self.copy.take() {
            let t = &mut self.tx[ch.index()];
            let seg = &mut t.segs[(s & t.wmask) as usize];
            if self.budget > 0 && seg.live && !seg.acked && !seg.queued {
                if buf.len() < self.cfg.mtu(ch) {
                    self.copy = Some((ch, s));
                    return None;
                }
                if let Some(r) = seg.room.take() {
                    self.timers.check_out(r);
                }
                self.budget -= 1;
                self.stats.retransmits += 1;
                self.stats.repair_copies += 1;
                return Some(self.transmit_segment(ch, s, now, buf));
            }
        }
        while self.budget > 0 {
            let Some((ch, s)) = self.resend.pop_front() else {
                break;
            };
            let t = &mut self.tx[ch.index()];
            let seg = &mut t.segs[(s & t.wmask) as usize];
            if !seg.live || seg.acked || !seg.queued {
                continue;
            }
            if buf.len() < self.cfg.mtu(ch) {
                self.resend.push_front((ch, s));
                return None;
            }
            seg.queued = false;
            // Sent twice already (its first resend was lost too): the
            // copy goes out next (see `Config::repair_copies`).
            if self.cfg.repair_copies && seg.xmits >= 2 {
                self.copy = Some((ch, s));
            }
            self.budget -= 1;
            self.stats.retransmits += 1;
            return Some(self.transmit_segment(ch, s, now, buf));
        }
        for ch in Channel::ALL {
            if buf.len() >= self.cfg.mtu(ch) {
                if let Some(s) = self.next_new_segment(ch, now) {
                    return Some(self.transmit_segment(ch, s, now, buf));
                }
            }
        }
        let due =
            |rx: &RxChannel| rx.ack_pending && (rx.ack_now || rx.ack_due.is_some_and(|d| d <= now));
        if self.rx.iter().any(due) {
            let acks = self.take_acks(self.cfg.priority_mtu.saturating_sub(HEADER_LEN), true);
            let repr = Repr {
                channel: Channel::Priority,
                data: None,
                acks,
                payload: &[],
                abort: false,
            };
            let n = repr.buffer_len();
            if buf.len() < n {
                return None;
            }
            repr.emit(&mut Packet::new_unchecked(&mut buf[..n]));
            self.stats.tx_acks += 1;
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += n as u64;
            return Some(n);
        }
        None
    }

    /// Assigns the next new segment on `ch` if the window, credits and queue allow.
    fn next_new_segment(&mut self, ch: Channel, now: Instant) -> Option<u32> {
        let t = &mut self.tx[ch.index()];
        if t.next_seq.wrapping_sub(t.snd_una) > t.wmask
            || (self.cfg.flight_gain > 0 && t.pipe >= t.flight_cap)
        {
            return None;
        }
        let frag = match t.current {
            Some(f) => f,
            None => {
                if t.next_frag.wrapping_sub(t.msg_una) > t.cmask {
                    return None;
                }
                let p = t.queue.pop_front()?;
                let f = t.next_frag;
                t.next_frag = f.wrapping_add(1);
                let m = &mut t.msgs[(f & t.cmask) as usize];
                m.live = true;
                m.segs = p.data.len().div_ceil(t.chunk).max(1) as u32;
                m.acked = 0;
                m.next_offset = 0;
                m.cut = false;
                m.put = p.put;
                m.handle = p.handle;
                let old = core::mem::replace(&mut m.data, p.data);
                if old.capacity() > 0 {
                    t.pool.push(old);
                }
                t.current = Some(f);
                f
            }
        };
        let m = &mut t.msgs[(frag & t.cmask) as usize];
        let off = m.next_offset;
        let len = (m.data.len() - off as usize).min(t.chunk);
        m.next_offset += len as u32;
        if m.next_offset as usize == m.data.len() {
            m.cut = true;
            t.current = None;
        }
        let s = t.next_seq;
        t.next_seq = s.wrapping_add(1);
        t.segs[(s & t.wmask) as usize] = TxSeg {
            live: true,
            acked: false,
            queued: false,
            frag_id: frag,
            offset: off,
            len: len as u16,
            xmits: 0,
            timeouts: 0,
            sent_at: now,
            room: None,
            in_pipe: false,
            rate: RateSnap::default(),
            holed: false,
        };
        Some(s)
    }

    /// Pending ACK blocks for both channels, fitting in `space` bytes.
    fn take_acks(&mut self, mut space: usize, standalone: bool) -> [Option<AckRepr>; 2] {
        let mut acks = [None, None];
        for (i, rx) in self.rx.iter_mut().enumerate() {
            if !rx.ack_pending || space < ACK_BLOCK_LEN {
                continue;
            }
            let max_ranges = if self.cfg.sack_ranges() {
                (space - ACK_BLOCK_LEN) / SACK_RANGE_LEN
            } else {
                0
            };
            let mut a = rx.build_ack(max_ranges);
            a.cum = seq::truncate(a.cum, self.cfg.wire_bits());
            space -= a.buffer_len();
            acks[i] = Some(a);
            rx.clear_ack();
            if !standalone {
                self.stats.piggybacked_acks += 1;
            } else {
                rx.ack_credit = rx.ack_credit.saturating_sub(ACK_CREDIT_PER);
                if rx.sack_more && rx.ack_credit >= ACK_CREDIT_PER {
                    // A clump of arrivals answered by one ACK would leave
                    // most runs unreported: finish the rotation with
                    // further ACKs, at most one per ACK_CREDIT_PER
                    // segments received (one per segment cost a system
                    // call for nearly every data segment on loopback).
                    rx.ack_pending = true;
                    rx.ack_now = true;
                }
            }
        }
        acks
    }

    fn transmit_segment(&mut self, ch: Channel, s: u32, now: Instant, buf: &mut [u8]) -> usize {
        let (frag, off, len) = {
            let t = &self.tx[ch.index()];
            let seg = &t.segs[(s & t.wmask) as usize];
            (seg.frag_id, seg.offset as usize, usize::from(seg.len))
        };
        let space = self.cfg.mtu(ch) - HEADER_LEN - len;
        let acks = self.take_acks(space, false);
        let rto = self.tx[ch.index()].rtt.rto();
        let room = self.timers.check_in(key(ch, s), now + rto);
        let t = &mut self.tx[ch.index()];
        if t.pipe == 0 {
            // Nothing in flight: the delivery-rate intervals start now.
            t.first_sent = now;
            t.delivered_time = now;
        }
        let rate = RateSnap {
            delivered: t.delivered,
            delivered_time: t.delivered_time,
            first_sent: t.first_sent,
        };
        let seg = &mut t.segs[(s & t.wmask) as usize];
        seg.room = room;
        seg.sent_at = now;
        seg.xmits = seg.xmits.saturating_add(1);
        seg.rate = rate;
        seg.holed = false;
        if !seg.in_pipe {
            seg.in_pipe = true;
            t.pipe += 1;
        }
        let m = &t.msgs[(frag & t.cmask) as usize];
        let repr = Repr {
            channel: ch,
            data: Some(DataRepr {
                seq: seq::truncate(s, self.cfg.wire_bits()),
                frag_id: frag,
                frag_len: m.data.len() as u32,
                offset: off as u32,
                put: m.put,
            }),
            acks,
            payload: &m.data[off..off + len],
            abort: false,
        };
        let n = repr.buffer_len();
        repr.emit(&mut Packet::new_unchecked(&mut buf[..n]));
        self.stats.tx_packets += 1;
        self.stats.tx_segments += 1;
        self.stats.tx_bytes += n as u64;
        n
    }

    /// One of the abort datagrams owed after giving up.
    fn transmit_abort(&mut self, buf: &mut [u8]) -> Option<usize> {
        if self.aborts_due == 0 {
            return None;
        }
        let repr = Repr {
            channel: Channel::Priority,
            data: None,
            acks: [None, None],
            payload: &[],
            abort: true,
        };
        let n = repr.buffer_len();
        if buf.len() < n {
            return None;
        }
        repr.emit(&mut Packet::new_unchecked(&mut buf[..n]));
        self.aborts_due -= 1;
        self.stats.tx_packets += 1;
        self.stats.tx_bytes += n as u64;
        Some(n)
    }
}
