//! The generator stage: stamped Ethernet/IPv4/UDP or Ethernet/IPv6/UDP frames
//! at a precise rate.
//!
//! Pacing is by count, not by sleep: at every poll the number of packets due is
//! `floor(rate * elapsed) - attempted`, and at most one burst of them is sent,
//! so the rate is exact at burst granularity over a trial and the lcore
//! busy-polls the clock between bursts. A trial offers exactly
//! `floor(rate * duration)` packets (or `count`); whatever could not be sent by
//! the end (no buffer, the port refused it, the core fell behind) is counted as
//! `unsent`, never silently dropped. Refused packets give their sequence numbers
//! back, so the analyzer's gaps are wire losses only.
//!
//! A [`GenControl`] shared with the trial controller starts trials: it bumps
//! `epoch` after setting rate and duration; the generator publishes its counts
//! and then `done_epoch`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;

use super::stamp::{Repr as StampRepr, FLAG_LAST_IN_BURST};
use super::template::{FrameBuilder, FrameSpec};
use crate::buf::counter::CacheAligned;
use crate::buf::{Burst, PoolCache};
use crate::latency::new_histogram;
use crate::pace::{Pace, Pacer};
use crate::runtime::basic::Output;
use crate::runtime::{Context, Poll, Stage, StageCounters};
use crate::time::{duration_nanos, Instant};

/// Unbounded duration or count.
pub const UNBOUNDED: u64 = u64::MAX;

/// Trial commands in, trial counts out; shared by a generator and the controller.
pub struct GenControl {
    /// Bumped by the controller to start a trial (after the fields below).
    pub epoch: AtomicU32,
    /// Rate in packets/s as f64 bits; 0 = as fast as possible.
    pub rate_bits: AtomicU64,
    /// Trial duration in ns ([`UNBOUNDED`] = until stopped).
    pub duration_ns: AtomicU64,
    /// Packets to offer ([`UNBOUNDED`] = by duration only).
    pub count: AtomicU64,
    /// Set by the generator after publishing a finished trial's counts.
    pub done_epoch: AtomicU32,
    /// Packets the finished trial was to offer.
    pub offered: AtomicU64,
    /// Packets it sent.
    pub sent: AtomicU64,
    /// Packets it could not send in time.
    pub unsent: AtomicU64,
    /// Bytes it sent.
    pub sent_bytes: AtomicU64,
    /// When the trial's first burst that sent anything went out (ns,
    /// monotonic; the trial's start when nothing was sent).
    pub first_ns: AtomicU64,
    /// When its last burst that sent anything went out (ns, monotonic; the
    /// start when nothing was sent): see [`GenControl::tx_span_ns`].
    pub last_ns: AtomicU64,
    /// Packets sent in that first burst.
    pub first_burst: AtomicU64,
    /// Gaps between consecutive bursts of each finished trial (rate precision).
    pub gaps: ArrayQueue<Histogram<u64>>,
    /// The generator's `max_lag` in ns: it may go on sending that long past
    /// a trial's end, so whoever waits for the end must wait that long too.
    pub max_lag_ns: AtomicU64,
}

/// A generator as a trial drives it: its control and its share of the
/// trial's aggregate rate (what the generator kind hands the driver).
pub struct TrialGenerator {
    /// Starts and stops its trials.
    pub control: Arc<GenControl>,
    /// Its weight in the trial's rate.
    pub share: f64,
}

impl Default for GenControl {
    fn default() -> Self {
        GenControl {
            epoch: AtomicU32::new(0),
            rate_bits: AtomicU64::new(0),
            duration_ns: AtomicU64::new(UNBOUNDED),
            count: AtomicU64::new(UNBOUNDED),
            done_epoch: AtomicU32::new(0),
            offered: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            unsent: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            first_ns: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
            first_burst: AtomicU64::new(0),
            gaps: ArrayQueue::new(2),
            max_lag_ns: AtomicU64::new(duration_nanos(DEFAULT_MAX_LAG)),
        }
    }
}

impl GenControl {
    /// Starts a trial (the generator picks it up at its next poll).
    pub fn start(
        &self,
        epoch: u32,
        rate_pps: Option<f64>,
        duration: Option<Duration>,
        count: Option<u64>,
    ) {
        self.rate_bits
            .store(rate_pps.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
        self.duration_ns.store(
            duration.map_or(UNBOUNDED, duration_nanos),
            Ordering::Relaxed,
        );
        self.count
            .store(count.unwrap_or(UNBOUNDED), Ordering::Relaxed);
        self.epoch.store(epoch, Ordering::Release);
    }

    /// Whether the trial `epoch` is finished and its counts published.
    pub fn is_done(&self, epoch: u32) -> bool {
        self.done_epoch.load(Ordering::Acquire) == epoch
    }

    /// The finished trial's send span in ns: from its first burst that sent
    /// anything to its last (0 when at most one did). Packets sent late past
    /// the end (within `max_lag`), a stall or an early stop show in it; the
    /// packets after the first burst went out within it.
    pub fn tx_span_ns(&self) -> u64 {
        let first = self.first_ns.load(Ordering::Relaxed);
        self.last_ns.load(Ordering::Relaxed).saturating_sub(first)
    }
}

/// A generator's fixed settings.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// What to send.
    pub frames: FrameSpec,
    /// Stream id written in every stamp.
    pub stream: u16,
    /// Packets per burst.
    pub burst: usize,
    /// How late a packet may be sent before it is counted as unsent instead.
    pub max_lag: Duration,
    /// When packets fall due (at a rate; as fast as possible ignores it).
    pub pace: Pace,
}

/// The default `max_lag`: 100 us.
pub const DEFAULT_MAX_LAG: Duration = Duration::from_micros(100);

impl Trial {
    /// Packets the trial was to offer by `now`: its target, or for an
    /// open-ended trial at a rate, what the rate asked for so far.
    fn offered_by(&self, now: Instant) -> u64 {
        if self.target != UNBOUNDED {
            return self.target;
        }
        if self.rate > 0.0 {
            let elapsed = now.as_nanos().saturating_sub(self.start.as_nanos());
            let end = if self.duration_ns == UNBOUNDED {
                elapsed
            } else {
                elapsed.min(self.duration_ns)
            };
            return ((self.rate * end as f64 * 1e-9) as u64).max(self.attempted);
        }
        self.attempted
    }
}

struct Trial {
    epoch: u32,
    start: Instant,
    rate: f64,
    duration_ns: u64,
    target: u64,
    /// When the trial's packets fall due (its arrival process at its rate).
    pacer: Pacer,
    attempted: u64,
    sent: u64,
    bytes: u64,
    /// The first burst that sent anything, and how many it sent.
    first: Option<(Instant, u64)>,
    last_call: bool,
    /// When the previous burst went out, and the gaps between bursts.
    last_burst: Option<Instant>,
    gaps: Histogram<u64>,
    /// When the last burst that sent anything went out.
    last_sent: Option<Instant>,
}

/// The generator stage.
pub struct Generator {
    out: Output,
    cache: PoolCache,
    builder: FrameBuilder,
    config: GenConfig,
    control: Arc<GenControl>,
    trial: Option<Trial>,
    seen_epoch: u32,
    seq: u64,
    burst: Burst,
    /// Raw mbufs when the output is a dpdk queue: frames are written straight
    /// into the port's mbufs with no `Packet` around them.
    #[cfg(feature = "dpdk")]
    mbufs: Option<Box<crate::sys::dpdk::Burst>>,
    counters: Arc<CacheAligned<StageCounters>>,
    finite: bool,
    last_now: Instant,
    /// The inter-burst gap histogram of the next trial, allocated ahead.
    spare_gaps: Histogram<u64>,
}

impl Generator {
    /// A generator sending to `out`, commanded by `control`. `finite` says
    /// whether the pipeline may wait for it to finish (a free-running
    /// generator with a count).
    pub fn new(
        out: Output,
        cache: PoolCache,
        config: GenConfig,
        control: Arc<GenControl>,
        counters: Arc<CacheAligned<StageCounters>>,
        finite: bool,
    ) -> Self {
        #[cfg(feature = "dpdk")]
        let mbufs = out.mbuf_native().then(Box::default);
        control
            .max_lag_ns
            .store(duration_nanos(config.max_lag), Ordering::Relaxed);
        Generator {
            #[cfg(feature = "dpdk")]
            mbufs,
            out,
            cache,
            builder: FrameBuilder::new(&config.frames),
            config,
            control,
            trial: None,
            seen_epoch: 0,
            seq: 0,
            burst: Burst::new(),
            counters,
            finite,
            last_now: Instant::ZERO,
            spare_gaps: new_histogram(),
        }
    }

    fn begin(&mut self, epoch: u32, now: Instant) {
        let c = &self.control;
        let rate = f64::from_bits(c.rate_bits.load(Ordering::Relaxed));
        let duration_ns = c.duration_ns.load(Ordering::Relaxed);
        let count = c.count.load(Ordering::Relaxed);
        let by_time = if rate > 0.0 && duration_ns != UNBOUNDED {
            (rate * duration_ns as f64 * 1e-9).floor() as u64
        } else {
            UNBOUNDED
        };
        self.trial = Some(Trial {
            epoch,
            start: now,
            rate,
            duration_ns,
            target: by_time.min(count),
            pacer: Pacer::new(self.config.pace, rate),
            attempted: 0,
            sent: 0,
            bytes: 0,
            first: None,
            last_call: false,
            last_burst: None,
            last_sent: None,
            gaps: std::mem::replace(
                &mut self.spare_gaps,
                Histogram::new(1).unwrap_or_else(|_| new_histogram()),
            ),
        });
    }

    fn end(&mut self, now: Instant) {
        // `now` is when the trial ended, not when its last packet went out:
        // the send span is measured to the last burst.
        if let Some(mut t) = self.trial.take() {
            // Publish the gaps (a copy: once per trial); keep the histogram for the next.
            let _ = self.control.gaps.force_push(t.gaps.clone());
            t.gaps.reset();
            std::mem::swap(&mut self.spare_gaps, &mut t.gaps);
            let c = &self.control;
            let offered = t.offered_by(now);
            c.offered.store(offered, Ordering::Relaxed);
            c.sent.store(t.sent, Ordering::Relaxed);
            c.unsent.store(offered - t.sent, Ordering::Relaxed);
            c.sent_bytes.store(t.bytes, Ordering::Relaxed);
            let (first, first_burst) = t.first.unwrap_or((t.start, 0));
            c.first_ns.store(first.as_nanos(), Ordering::Relaxed);
            c.first_burst.store(first_burst, Ordering::Relaxed);
            c.last_ns
                .store(t.last_sent.unwrap_or(t.start).as_nanos(), Ordering::Relaxed);
            c.done_epoch.store(t.epoch, Ordering::Release);
        }
    }
}

impl Stage for Generator {
    fn poll(&mut self, cx: &Context) -> Poll {
        self.last_now = cx.now;
        let epoch = self.control.epoch.load(Ordering::Acquire);
        if epoch != self.seen_epoch {
            self.end(cx.now);
            self.seen_epoch = epoch;
            self.begin(epoch, cx.now);
        }
        let Some(t) = self.trial.as_mut() else {
            self.out.flush(cx.now);
            return if self.finite && self.seen_epoch != 0 {
                Poll::Finished
            } else {
                Poll::Idle
            };
        };
        let elapsed = cx.now.as_nanos().saturating_sub(t.start.as_nanos());
        let out_of_time = t.duration_ns != UNBOUNDED && elapsed >= t.duration_ns;
        // Past the end by more than `max_lag`: what is still due is unsent.
        let overdue = out_of_time && elapsed - t.duration_ns > duration_nanos(self.config.max_lag);
        if cx.draining || t.attempted >= t.target || (t.last_call && overdue) {
            self.end(cx.now);
            self.out.flush(cx.now);
            return Poll::Idle;
        }
        let mut due = t.target - t.attempted;
        if out_of_time {
            // What was due by the end still goes out, a burst per poll, for up
            // to `max_lag` past it, and always in at least one last burst
            // (floating-point pacing may have left it one short). A generator
            // that lost its core just before the end thus sends late, as it
            // does mid-trial, rather than dropping a whole burst's worth.
            t.last_call = true;
        } else if t.rate > 0.0 {
            let by_now = t.pacer.due_by(elapsed);
            due = due.min(by_now.saturating_sub(t.attempted));
            // Packets more than `max_lag` late (the lcore lost its core for a
            // while) are not sent in a flood: they are counted as unsent. A
            // whole train of a bursty pace is due at once, and is not late.
            let allowed = ((t.rate * self.config.max_lag.as_secs_f64()) as u64)
                .max(2 * self.config.burst as u64)
                .max(self.config.pace.clump());
            if due > allowed {
                let late = due - allowed;
                t.attempted += late;
                due = allowed;
            }
        }
        let n = due.min(self.config.burst as u64) as usize;
        if n == 0 {
            self.out.flush(cx.now);
            return Poll::Idle;
        }
        let stamp = StampRepr {
            stream: self.config.stream,
            seq: self.seq,
            tx_ns: crate::time::stamp_ns(cx.now),
            epoch: t.epoch as u8,
            flags: 0,
        };
        self.builder.begin_burst(&stamp);
        let (got, sent, refused, sent_bytes) = match send_mbufs(
            #[cfg(feature = "dpdk")]
            self.mbufs.as_deref_mut(),
            &mut self.out,
            &mut self.builder,
            stamp,
            n,
        ) {
            Some(r) => r,
            None => {
                // Packets for a port with buffers of its own are built in them.
                let got = match self.out.alloc(&mut self.burst, n) {
                    Some(got) => got,
                    None => self.cache.alloc_bulk(&mut self.burst, n),
                };
                let mut bytes = 0u64;
                for (i, pkt) in self.burst.iter_mut().enumerate() {
                    let len = write_frame(&mut self.builder, &stamp, i, got, pkt.spare_capacity());
                    // Cannot fail: the plan checked the largest frame fits a buffer.
                    let _ = pkt.set_len(len);
                    bytes += len as u64;
                }
                let (sent, refused) = self.out.send_or_drop(cx.now, &mut self.burst);
                let sent_bytes = if refused == 0 {
                    bytes
                } else {
                    bytes * sent as u64 / got.max(1) as u64
                };
                (got, sent, refused, sent_bytes)
            }
        };
        // Refused packets were the tail of the burst: reuse their sequence numbers.
        self.seq += sent as u64;
        if let Some(prev) = t.last_burst.replace(cx.now) {
            t.gaps
                .saturating_record(cx.now.as_nanos().saturating_sub(prev.as_nanos()).max(1));
        }
        if sent > 0 {
            t.first.get_or_insert((cx.now, sent as u64));
            t.last_sent = Some(cx.now);
        }
        t.attempted += n as u64;
        t.sent += sent as u64;
        t.bytes += sent_bytes;
        let c = &self.counters;
        c.packets_out.add(sent as u64);
        c.bytes_out.add(sent_bytes);
        c.dropped.add((refused + n - got) as u64);
        Poll::Busy
    }

    fn is_finite(&self) -> bool {
        self.finite
    }

    fn finish(&mut self) -> Result<(), String> {
        self.out.finish()
    }

    fn detail(&self) -> Option<serde_json::Value> {
        let c = &self.control;
        let done = c.done_epoch.load(Ordering::Acquire) == self.seen_epoch && self.seen_epoch != 0;
        // The send span and the packets of its first burst, as a trial's.
        let (offered, sent, unsent, span_ns, first_burst) = match &self.trial {
            Some(t) => {
                let offered = t.offered_by(self.last_now);
                let (span_ns, first_burst) = match (t.first, t.last_sent) {
                    (Some((f, n)), Some(l)) => (l.as_nanos().saturating_sub(f.as_nanos()), n),
                    _ => (0, 0),
                };
                (offered, t.sent, offered - t.sent, span_ns, first_burst)
            }
            None if done => (
                c.offered.load(Ordering::Relaxed),
                c.sent.load(Ordering::Relaxed),
                c.unsent.load(Ordering::Relaxed),
                c.tx_span_ns(),
                c.first_burst.load(Ordering::Relaxed),
            ),
            None => (0, 0, 0, 0, 0),
        };
        // The rate it sent at over the time it sent in (the packets after
        // its first burst over the span to its last), not over the run.
        let tx_pps = if span_ns > 0 {
            sent.saturating_sub(first_burst) as f64 * 1e9 / span_ns as f64
        } else {
            0.0
        };
        Some(serde_json::json!({
            "stream": self.config.stream, "offered": offered, "sent": sent, "unsent": unsent,
            "next_seq": self.seq, "tx_span_s": span_ns as f64 / 1e9, "tx_pps": tx_pps,
        }))
    }
}

/// Writes packet `i` of a burst of `got` (begun with
/// [`FrameBuilder::begin_burst`] on `stamp`) into `room`; returns its length.
#[inline]
fn write_frame(
    builder: &mut FrameBuilder,
    stamp: &StampRepr,
    i: usize,
    got: usize,
    room: &mut [u8],
) -> usize {
    let flags = if i + 1 == got { FLAG_LAST_IN_BURST } else { 0 };
    builder.write_next(room, stamp.seq + i as u64, flags)
}

/// The raw-mbuf path: builds `n` frames in the dpdk port's own mbufs and sends
/// them; `None` when the output is not a dpdk queue. Returns (allocated, sent,
/// refused, bytes sent).
#[inline]
fn send_mbufs(
    #[cfg(feature = "dpdk")] mbufs: Option<&mut crate::sys::dpdk::Burst>,
    out: &mut Output,
    builder: &mut FrameBuilder,
    stamp: StampRepr,
    n: usize,
) -> Option<(usize, usize, usize, u64)> {
    #[cfg(feature = "dpdk")]
    {
        let mb = mbufs?;
        // All or nothing, so the last of `n` is the last of the burst. The
        // plan checked that the largest frame fits an mbuf.
        let (got, bytes) = out
            .mbuf_pool()?
            .alloc_fill_into(mb, n, |i, room| write_frame(builder, &stamp, i, n, room));
        let (sent, refused, sent_bytes) = out.send_mbufs_or_drop(mb, bytes);
        Some((got, sent, refused, sent_bytes))
    }
    #[cfg(not(feature = "dpdk"))]
    {
        let _ = (out, builder, stamp, n);
        None
    }
}

/// A generator stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorSpec {
    /// Frames, flows and sizes.
    pub frames: FrameSpec,
    /// Stream id (0..=255) written in every stamp.
    pub stream: u16,
    /// The free-running rate as written (`linerate run`); trials set their own.
    pub rate: Option<crate::units::Rate>,
    /// That rate in packets/s, resolved by the plan.
    pub rate_pps: Option<f64>,
    /// Packets to send when free-running; `None` is until stopped.
    pub count: Option<u64>,
    /// Packets per burst.
    pub burst: usize,
    /// This generator's share of a trial's aggregate rate (weights are
    /// normalised over all generators).
    pub share: f64,
    /// How late a packet may go out before it is counted as unsent.
    pub max_lag: std::time::Duration,
    /// The next hop whose MAC address becomes `dst_mac`, resolved before the
    /// first packet (`gateway = "10.1.0.1"`).
    pub gateway: Option<std::net::IpAddr>,
    /// `src_mac` was written (else a gateway's port supplies its own).
    pub src_mac_given: bool,
    /// The arrival process (`pace`, `burst_len`; Poisson gaps use `seed`).
    pub pace: Pace,
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::{Pool, PoolConfig};
    use crate::port::mem;

    /// A generator of default frames in bursts of 32 onto a mem wire of `ring`
    /// packets, drawing from `pool`.
    fn generator(
        pool: &Pool,
        ring: usize,
    ) -> (Generator, Arc<GenControl>, Arc<CacheAligned<StageCounters>>) {
        paced(pool, ring, Pace::Constant)
    }

    /// The same with the arrival process `pace`.
    fn paced(
        pool: &Pool,
        ring: usize,
        pace: Pace,
    ) -> (Generator, Arc<GenControl>, Arc<CacheAligned<StageCounters>>) {
        let port = mem::open(&mem::MemConfig {
            ring,
            ..Default::default()
        });
        let control = Arc::new(GenControl::default());
        let counters: Arc<CacheAligned<StageCounters>> = Arc::new(CacheAligned::default());
        let config = GenConfig {
            frames: FrameSpec::default(),
            stream: 1,
            burst: 32,
            max_lag: DEFAULT_MAX_LAG,
            pace,
        };
        let g = Generator::new(
            Output::Port(port.tx.into_iter().next().unwrap()),
            pool.cache(),
            config,
            control.clone(),
            counters.clone(),
            false,
        );
        (g, control, counters)
    }

    #[test]
    fn a_trial_offers_exactly_rate_times_duration() {
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let (mut g, control, _) = generator(&pool, 1 << 16);
        control.start(1, Some(1e6), Some(Duration::from_millis(10)), None);
        // Simulated time: poll every microsecond for 12 ms.
        for us in 0..12_000u64 {
            let cx = Context {
                now: Instant::from_micros(1_000_000 + us),
                draining: false,
            };
            let _ = g.poll(&cx);
        }
        assert!(control.is_done(1));
        assert_eq!(control.offered.load(Ordering::Relaxed), 10_000);
        assert_eq!(control.sent.load(Ordering::Relaxed), 10_000);
        assert_eq!(control.unsent.load(Ordering::Relaxed), 0);
        // On time to the end: the first packet fell due and went out at 1 us,
        // the last at 10 ms, so the other 9,999 went out in 9.999 ms: the rate.
        assert_eq!(control.first_ns.load(Ordering::Relaxed), 1_000_001_000);
        assert_eq!(control.first_burst.load(Ordering::Relaxed), 1);
        assert_eq!(control.tx_span_ns(), 9_999_000);
    }

    #[test]
    fn packets_sent_late_stretch_the_send_span() {
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let (mut g, control, _) = generator(&pool, 1 << 16);
        control.start(1, Some(1e6), Some(Duration::from_millis(10)), None);
        let poll = |g: &mut Generator, us: u64| {
            let _ = g.poll(&Context {
                now: Instant::from_micros(us),
                draining: false,
            });
        };
        for us in 0..9_990 {
            poll(&mut g, us);
        }
        // The lcore loses its core across the end; back 50 us late (within
        // `max_lag`): the last 10 packets go out then, not at 10 ms.
        for us in 10_050..10_100 {
            poll(&mut g, us);
        }
        assert!(control.is_done(1));
        assert_eq!(control.sent.load(Ordering::Relaxed), 10_000);
        assert_eq!(control.unsent.load(Ordering::Relaxed), 0);
        assert_eq!(control.tx_span_ns(), 10_049_000);
        // Its report (`run`'s stage detail) has the rate over that span.
        let d = g.detail().unwrap();
        assert_eq!(d["tx_span_s"], 0.010049);
        assert_eq!(d["tx_pps"], 9_999.0 * 1e9 / 10_049_000.0);
    }

    #[test]
    fn what_cannot_be_sent_in_time_is_unsent() {
        // A pool of 100 buffers that nobody frees: the rest cannot be sent.
        let pool = Pool::new(&PoolConfig {
            count: 100,
            ..Default::default()
        })
        .unwrap();
        let (mut g, control, _) = generator(&pool, mem::MemConfig::default().ring);
        control.start(1, Some(1e6), Some(Duration::from_millis(1)), None);
        for us in 0..2_000u64 {
            let _ = g.poll(&Context {
                now: Instant::from_micros(us),
                draining: false,
            });
        }
        assert!(control.is_done(1));
        let (o, s, u) = (
            control.offered.load(Ordering::Relaxed),
            control.sent.load(Ordering::Relaxed),
            control.unsent.load(Ordering::Relaxed),
        );
        assert_eq!((o, s, u), (1000, 100, 900));
        // It stopped early: its 100 packets went out in the first 100 us
        // (one a microsecond, from 1 us), not over the 1 ms trial.
        assert_eq!(control.tx_span_ns(), 99_000);
    }

    #[test]
    fn a_stall_does_not_turn_into_a_flood() {
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let (mut g, control, counters) = generator(&pool, 1 << 16);
        control.start(1, Some(1e6), Some(Duration::from_millis(10)), None);
        let poll = |g: &mut Generator, us: u64| {
            let _ = g.poll(&Context {
                now: Instant::from_micros(us),
                draining: false,
            });
        };
        for us in 0..1000 {
            poll(&mut g, us);
        }
        let before = counters.packets_out.get();
        // The lcore loses its core for 2 ms: 2000 packets fall due at once.
        poll(&mut g, 3000);
        let burst_after_stall = counters.packets_out.get() - before;
        assert!(burst_after_stall <= 32, "{burst_after_stall}");
        for us in 3001..12_000 {
            poll(&mut g, us);
        }
        assert!(control.is_done(1));
        let (o, s, u) = (
            control.offered.load(Ordering::Relaxed),
            control.sent.load(Ordering::Relaxed),
            control.unsent.load(Ordering::Relaxed),
        );
        assert_eq!(o, 10_000);
        assert_eq!(s + u, o);
        // About 2 ms at 1 Mpps minus the 100 us allowed lag went unsent.
        assert!((1800..=2000).contains(&u), "unsent {u}");
    }

    /// Polls `g` every `step_us` over `[from_us, to_us)` of virtual time.
    fn run(g: &mut Generator, from_us: u64, to_us: u64, step_us: usize) {
        for us in (from_us..to_us).step_by(step_us) {
            let _ = g.poll(&Context {
                now: Instant::from_micros(us),
                draining: false,
            });
        }
    }

    #[test]
    fn every_pace_offers_the_exact_count() {
        for pace in [
            Pace::Constant,
            Pace::Poisson { seed: 9 },
            Pace::Burst { len: 48 },
        ] {
            let pool = Pool::new(&PoolConfig::default()).unwrap();
            let (mut g, control, counters) = paced(&pool, 1 << 16, pace);
            // 10 ms at 1 Mpps, then room to finish.
            control.start(1, Some(1e6), Some(Duration::from_millis(10)), None);
            run(&mut g, 0, 12_000, 1);
            assert!(control.is_done(1), "{pace:?}");
            let (o, s, u) = (
                control.offered.load(Ordering::Relaxed),
                control.sent.load(Ordering::Relaxed),
                control.unsent.load(Ordering::Relaxed),
            );
            assert_eq!((o, s, u), (10_000, 10_000, 0), "{pace:?}");
            assert_eq!(counters.packets_out.get(), 10_000, "{pace:?}");
        }
    }

    #[test]
    fn burst_pace_sends_whole_trains_on_schedule() {
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let (mut g, control, counters) = paced(&pool, 1 << 16, Pace::Burst { len: 100 });
        control.start(1, Some(1e6), Some(Duration::from_millis(10)), None);
        // Trains of 100 every 100 us from 100 us, each sent in bursts of 32
        // over the next polls: between trains, whole trains only.
        let mut sent_at = Vec::new();
        for us in 0..10_100u64 {
            run(&mut g, us, us + 1, 1);
            sent_at.push(counters.packets_out.get());
        }
        for k in 1..100u64 {
            // Just before train k + 1 falls due, exactly k trains went out.
            assert_eq!(sent_at[(k * 100 + 99) as usize], k * 100, "train {k}");
        }
        run(&mut g, 10_100, 10_200, 1);
        assert!(control.is_done(1));
        assert_eq!(control.sent.load(Ordering::Relaxed), 10_000);
        assert_eq!(control.unsent.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_poisson_trial_is_not_the_constant_schedule() {
        // Same rate, same polls: Poisson departures clump and spread, so some
        // microseconds send 2 or more and others none; constant sends one.
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let (mut g, control, counters) = paced(&pool, 1 << 16, Pace::Poisson { seed: 1 });
        control.start(1, Some(5e5), Some(Duration::from_millis(10)), None);
        let mut per_us = Vec::new();
        for us in 0..10_000u64 {
            let before = counters.packets_out.get();
            run(&mut g, us, us + 1, 1);
            per_us.push(counters.packets_out.get() - before);
        }
        let idle = per_us.iter().filter(|&&n| n == 0).count() as f64 / 1e4;
        let many = per_us.iter().filter(|&&n| n >= 2).count();
        // P(no arrival in 1 us at 0.5/us) = e^-0.5, about 0.61.
        assert!((idle - (-0.5f64).exp()).abs() < 0.03, "idle {idle}");
        assert!(many > 500, "{many}");
        run(&mut g, 10_000, 10_200, 1);
        assert_eq!(control.sent.load(Ordering::Relaxed), 5_000);
    }
}
