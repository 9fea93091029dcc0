//! The sans-IO reliable endpoint.
//!
//! One [`Endpoint`] talks to one peer over any unreliable datagram path. It
//! owns two channels, each with its own sequence space, send window, RTT
//! estimator, receive bitmap and reassembler: **priority** (small MTU, for
//! tiny messages; standalone ACKs travel here too) and **data**.
//!
//! # Calling order
//!
//! The endpoint never reads a clock, touches a socket or spawns a thread. The
//! driver (a test harness, a pipeline stage) does, in a loop:
//!
//! 1. feed every received datagram to [`Endpoint::on_packet`];
//! 2. when the time returned by [`Endpoint::poll_timeout`] has come (or once
//!    per poll-loop pass, which is what refills the per-pass resend budget),
//!    call [`Endpoint::handle_timeout`];
//! 3. call [`Endpoint::poll_transmit`] until it returns `None` (or the port's
//!    TX queue is full) and send each datagram;
//! 4. call [`Endpoint::poll_event`] until it returns `None`;
//! 5. ask [`Endpoint::poll_timeout`] when to wake up next.
//!
//! [`Endpoint::send`] and [`Endpoint::put`] may be called at any time; what
//! they queue goes out on the next `poll_transmit`.
//!
//! ```
//! use linerate::reliable::{Channel, Config, Endpoint, Event};
//! use linerate::time::Instant;
//!
//! let mut a = Endpoint::new(Config::default());
//! let mut b = Endpoint::new(Config::default());
//! a.send(Channel::Data, &[42u8; 3000]).unwrap(); // three segments
//! let (mut buf, mut wire) = (vec![0u8; 2048], Vec::new());
//! let now = Instant::from_micros(1);
//! while let Some(n) = a.poll_transmit(now, &mut buf) {
//!     wire.push(buf[..n].to_vec());
//! }
//! for d in &wire {
//!     b.on_packet(d, now);
//! }
//! assert_eq!(
//!     b.poll_event(),
//!     Some(Event::Message { channel: Channel::Data, data: vec![42u8; 3000] })
//! );
//! // b owes a an ACK; it goes out at once after 8 segments, or when the
//! // delayed-ACK timer (poll_timeout) fires.
//! let t = b.poll_timeout().unwrap();
//! b.handle_timeout(t);
//! let n = b.poll_transmit(t, &mut buf).unwrap();
//! a.on_packet(&buf[..n], t);
//! assert_eq!(a.unacked(Channel::Data), 0);
//! ```
//!
//! # Mechanisms (usnic's, and ours)
//!
//! Every segment gets a 32-bit sequence number (16 bits on the wire with
//! `seq_bits = 16`, as in usnic mode) and is checked into the
//! retransmit [`TimerWheel`] until it is acknowledged. ACKs are piggy-backed on data
//! when one is pending and sent standalone when the delayed-ACK timer fires,
//! after `ack_every` segments, at once on a duplicate (the sign of a lost ACK),
//! and (our default) at once when a gap appears. The receiver reports the
//! cumulative point plus, unless disabled, SACK ranges: the highest run of
//! received segments first, then a window of consecutive older runs that
//! rotates from ACK to ACK (see below). The sender declares a segment lost
//! when an ACK proves it missing and a segment sent at least the reordering
//! window after it was acknowledged (RACK's time rule; before any reordering
//! is seen, `reorder_threshold` later segments acknowledged also do), or on
//! `dup_ack_threshold` duplicate cumulative ACKs (usnic: one). Every
//! segment has its timer in the timer wheel, but (with `tail_probe`, our default) a
//! channel times out as RFC 6298's single timer does: only after an RTO with
//! no ACK of new data, and then at most once per backed-off RTO. A timeout
//! backs the RTO off and resends the newest expired segment (a tail-loss
//! probe) and the oldest (the hole that holds delivery back) rather than the
//! whole flight. Resends per pass are capped. The sender starts at most `credits` fragments beyond its oldest
//! unacknowledged one, which is exactly the receiver's reassembly capacity.
//! With `flight_gain` (our default 3; usnic 0, unbounded) it also starts a new
//! segment only while the segments in flight (sent, neither acknowledged nor
//! declared lost) are below `flight_gain` x the largest recent delivery rate x
//! the minimum RTT (BBR's inflight cap), at least `flight_floor`: on a path
//! that never pushes back no standing queue builds, so the RTT, and with it
//! the RTO, stay near the path's own.
//!
//! # Under loss and jitter
//!
//! The backoff ends on any ACK of new data, resent or not (QUIC resets its
//! PTO count on an ACK; RFC 6298 waits for an RTT sample, which Karn's rule
//! withholds while most of what is acknowledged was resent), and it is capped
//! at 8 smoothed RTTs (see [`super::rtt`]). The flight bound adds the
//! measured ACK aggregation to `flight_gain` x rate x minimum RTT, as BBR
//! does: a path that releases packets in clumps (a busy relay, a descheduled
//! peer) needs the flight to cover a clump, or the rate and the bound shrink
//! each other to `flight_floor`. Without SACK, an ACK that fills a hole gives
//! no RTT sample (the segments behind the hole waited there), and
//! `reorder_threshold` duplicate ACKs resend the hole once per cumulative
//! point (NewReno's pace). Together these took 20 % loss with 1 ms of
//! jitter from 7x slower than usnic mode to faster than it (`linerate
//! reliable compare --jitter 1ms`, virtual time).
//!
//! What remained at 20 % loss each way with 0-2 ms of jitter was 20 % of
//! lossless goodput, for three reasons, each fixed where it arises:
//!
//! - **Unreported SACK ranges.** With 200 holes in a flight and at most 8
//!   ranges per ACK, a receiver that always reports its highest runs never
//!   reports the others once the ACKs that did were lost, and a sender that
//!   took "below the highest SACKed, not SACKed" for lost resent them: ~10 500
//!   resends for ~3 000 losses. The receiver now sends the highest run (the
//!   newest arrivals) plus a window of consecutive older runs that rotates
//!   down to the cumulative point and starts again (RFC 2018's advice to
//!   repeat blocks; QUIC sends all its ranges), and after a clump of
//!   arrivals answered at once, it sends further ACKs until the rotation is
//!   complete, at most one per four segments received (four segments open
//!   at most four new runs, and an ACK reports seven older ones, so the
//!   rotation keeps pace; see the next paragraph). The sender declares lost
//!   only what an ACK proves missing: the cumulative point, the segment just
//!   below each range (ranges are maximal runs) and the gaps between the
//!   consecutive older ranges. What an ACK SACKs stays acknowledged; it is
//!   never resent. Resends per lost segment went from 2.6 to 1.00.
//! - **Reordering.** Jitter that lets packets overtake each other makes a
//!   hole look lost for up to the jitter's width. RACK's reordering window is
//!   a quarter of the minimum RTT until reordering is seen or possible, then
//!   the RTT variation, or 1.25 x the largest reordering measured lately if
//!   more: a segment an ACK showed missing that then arrives without a resend
//!   measures it (RFC 8985 adapts its window to reordering it observes, too).
//!   Two things kept that from working under millisecond jitter on a
//!   microsecond path, and were the limit left after the flight bound was
//!   fixed (`reliable compare --jitter 2ms --jitter-order any --bandwidth
//!   3Gbps`, instrumented: lossless, 12 700 of 12 700 resends were of
//!   segments the receiver already had; the timeouts were few):
//!   the count rule (`reorder_threshold` segments acknowledged above a hole)
//!   resent late holes before they arrived, and an ACK of a resent segment
//!   cannot say which copy arrived (no DSACK, no timestamps), so the
//!   reordering was never measured and the rule never turned off. It now
//!   turns off as soon as the RTT varies by more than the minimum RTT
//!   (RTTVAR above it: a FIFO path's standing queue stays below), and the
//!   first late hole that arrives measures the window. And a hole still
//!   inside the window when the sender stops sending waited for the RTO; RACK's
//!   reordering timer now declares it lost one RTO after it was sent (RFC
//!   8985 waits RACK.rtt + window, but RACK.rtt, the newest segment's RTT,
//!   is a lucky 20 us sample there and the timer resent most late holes).
//!   The estimator was left alone: the RTO and the RTT samples were not the
//!   limit. Ours went from 0.59 to 1.87 Gb/s at 20 % loss (usnic mode 0.86)
//!   and from 1.02 to 2.72 Gb/s lossless on that 3 Gb/s link.
//! - **Credits and the flight bound.** In-order delivery frees a credit only
//!   when every earlier message is complete. At 20 % loss a few of the
//!   thousand segments of a flight need four or five repair rounds, each a
//!   round trip, so the credits must cover several round trips of data or
//!   the sender idles: 256 credits left ours at 30 % of lossless in virtual
//!   time with no spurious resend at all; 1024 was the default until the
//!   repair rounds below made it 4096 (the window bounds what is in
//!   flight, so the receiver holds no more memory at once). Before the first delivery-rate sample the
//!   flight is bounded at [`INITIAL_FLIGHT`] segments (the old first flight),
//!   so the larger credits do not queue a first burst in front of a slow link.
//!
//! Together (`linerate reliable compare --loss 0,20 --jitter 2ms
//! --bandwidth 3Gbps --messages 4000 --seeds 3`): ours 20 % -> 52 % of
//! lossless with order kept, with 1.00 resend per lost segment (2.6 before).
//! With packets overtaking each other (`--jitter-order any`) the flight
//! bound spans the minimum RTT plus half the measured reordering (see
//! [`Config::flight_gain`]), and loss detection works as described under
//! **Reordering**: 69 % of lossless at 20 % loss there, 2.2x usnic mode.
//! On a 10 Gb/s link with the same jitter this left 26 % of lossless (2.07
//! Gb/s, usnic mode 1.35); see the next section.
//!
//! # Repair rounds
//!
//! In-order delivery holds the window's left edge until its hole is
//! filled, so the sender may run at most `window` segments ahead of the
//! slowest repair among them. Each transmission is lost with probability
//! p, and a lost one is found one round later (an RTT, plus the reordering
//! window on a path that reorders), so among W segments the worst needs k
//! rounds with W·p^k ≈ 1, and goodput is at most W x segment / (RTT + k x
//! round). At 20 % loss on a 0-2 ms jitter path (RTT 0-4 ms, reordering
//! window up to 2.5 ms, 1400-byte segments) W = 4096 needs k ≈ 5.2 rounds
//! of ~4.5 ms: about 2 Gb/s, the 2.07 measured. Half of lossless (4 Gb/s)
//! needs W ≈ 8000 segments at k ≈ 5.6 (more segments, more rounds for the
//! worst), and a 4000-message transfer also pays its own worst segment
//! (k ≈ 6.3 among 24 000) as a tail of ~30 ms against 33 ms of lossless
//! sending. `scripts/model-reliable-repair` simulates exactly this: 24 %
//! of lossless with 4096 segments, 46 % with 16384, 62 % with 16384 and
//! the second copies below (73 % over 120 000 segments, where the tail
//! weighs less). Three changes, where the model and the simulator say
//! they act:
//!
//! - **Window and credits.** 16384 segments (was 4096) and 4096 credits
//!   (was 1024; a credit is a message, and 8 KiB messages are 6 segments,
//!   so 4096 credits cover the window). The flight bound still keeps the
//!   flight near rate x RTT on a path that never pushes back, so the larger
//!   ceiling costs memory only while losses hold the left edge: at most
//!   window x segment bytes per channel (23 MB), what 10 Gb/s x 4 ms x the
//!   rounds needs. usnic mode keeps 4096 and 256.
//! - **Second copies of lost resends** ([`Config::repair_copies`]). A
//!   segment whose resend was lost too goes out twice, back to back, on
//!   every later resend, so each later round fails with p² instead of p:
//!   the worst of W segments needs k ≈ 2 + ln(W·p²)/ln(1/p²) rounds (4.0
//!   for 16384 segments instead of 6), and a transfer's tail shrinks the
//!   same way. It costs p² extra segments (4 % at 20 % loss, 0.01 % at
//!   1 %; resends per lost segment 1.0 -> 1.1-1.4) and needs no guess about
//!   whether a resend is late or lost (declaring a resend lost without the
//!   reordering window would resend late ones under reordering jitter: the
//!   question the window answers). In the simulator it matters most where
//!   the window is tight: 4096 segments at 10 Gb/s, 27 % -> 41 % of
//!   lossless; the pinned sweep's 5 % cells (150 messages, a tail) +28-40 %;
//!   with the 16384-segment window at 10 Gb/s, within the spread of seeds.
//! - **`flight_gain` 3** (was 2). With order kept (a FIFO relay) the
//!   minimum RTT is a sample well below the FIFO's usual delay (1-2 ms
//!   against 3.5 ms), and under 20 % loss the delivery rate is 0.8 x the
//!   sending rate, so 2 x rate x minimum RTT held the flight below what the
//!   path holds and the bound shrank with the rate it limited: order-kept
//!   runs split between ~4 Gb/s and ~1 Gb/s by seed (median 33 % of
//!   lossless over 15 seeds, lossless itself 5.9 Gb/s against 9.1 with no
//!   bound). With 3 the median is 57 % (lossless 6.8 Gb/s). The deep-queue
//!   tests (a standing queue stays off a 16384-packet ring) and the pinned
//!   sweep do not move.
//!
//! `linerate reliable compare --loss 0,20 --jitter 2ms --seeds 9` at 10
//! Gb/s (virtual time): 20 % loss went from 25 % to 62 % of lossless with
//! packets overtaking (`--jitter-order any`; 5.02 Gb/s, usnic mode 1.35)
//! and from 30 % to 58 % with order kept (3.85 Gb/s, usnic mode 0.86);
//! with 20 000 messages 77 % and 72 %. At 3 Gb/s 76 % and 73 % (70 % and
//! 56 % before). `--window` and `--credits` run the same comparison with
//! other values. Over real loopback with kernel loss and through the
//! `impair` relay the figures did not drop (BENCHMARKS.md).
//!
//! **What an ACK costs.** At first the continuation ACKs were allowed one
//! per segment received. Virtual time delivers one packet at a time, so it
//! answers every arrival anyway and showed no difference; real loopback
//! delivers bursts, and there the rotation turned one ACK per burst into
//! one per segment: under 10 % kernel loss 49 000 ACKs for 67 000 segments,
//! against 22 000 before the rotation. Both processes are CPU-bound on
//! loopback and every ACK is a send and a receive system call, so 10 % loss
//! fell from 83 % to 74 % of lossless goodput (A/B against the build before,
//! 10 000 messages, 4 alternating rounds; the loss detection, the credits
//! and the reordering window measured no different). One continuation per
//! four segments (and a bank of 64 of them) brings the ACKs back to 22 000
//! and the cell to 86 % (the build before: 83 %), and in virtual time it
//! is faster too: 20 % loss with 2 ms of order-keeping jitter 52 % -> 60 %
//! of lossless, fewer ACKs queueing on the return path
//! (`a_clump_is_reported_with_one_ack_per_four_segments` pins the rule).
//!
//! # A dead peer
//!
//! A segment resent by timeout more than `retry_limit` times in a row, with
//! nothing heard from the peer in between and at least
//! [`RETRY_LIMIT_SILENCE`] since it was last heard, or `peer_timeout` of silence
//! while something of ours is unacknowledged, declares the peer dead
//! ([`Event::PeerDead`], [`Endpoint::dead_reason`]); a live peer, whose
//! packets arrive, never is. The endpoint then sends [`ABORT_REPEATS`] abort
//! datagrams, so the peer ends at once instead of after its `peer_timeout`;
//! [`Endpoint::abort`] does the same for an application that gives up.

mod ack;
mod config;
mod event;
mod rx;
mod timeout;
mod tx;

pub use config::{Config, DEFAULT_PEER_TIMEOUT, PIGGYBACK_RESERVE};
pub use event::{DeadReason, Event, SendError, Stats};

/// Segments in flight before the first delivery-rate sample, with a flight
/// bound (TCP's initial window, in spirit): what the 256 credits of one
/// segment each sent at once before the credits grew to 1024; a first
/// flight of all the credits queued 13 ms in front of a 2.5 Gb/s link.
pub const INITIAL_FLIGHT: u32 = 256;

/// Abort datagrams sent when the endpoint gives up (one may be lost).
pub const ABORT_REPEATS: u32 = 3;

/// The least silence from the peer before the retry limit declares it dead
/// (or `peer_timeout`, if shorter). The count alone is no time: the backed-off
/// RTO is capped at a few smoothed RTTs, so on a 100 us path the default 16
/// retries pass in milliseconds, and a loaded host or VM deschedules a live
/// peer for longer than that.
pub const RETRY_LIMIT_SILENCE: core::time::Duration = core::time::Duration::from_secs(1);

use super::reassembly::{Reassembly, Regions};
use super::rtt::RttEstimator;
use super::seq;
use super::timer_wheel::TimerWheel;
use super::wire::{Channel, PutRepr};
use super::RegionId;
use crate::time::Instant;
use core::time::Duration;
use rx::RxChannel;
use std::collections::VecDeque;
use tx::{OutMsg, Pending, TxChannel, TxSeg};

/// A sans-IO reliable endpoint; see the [module docs](self) for the calling order.
#[derive(Debug)]
pub struct Endpoint {
    cfg: Config,
    tx: [TxChannel; 2],
    rx: [RxChannel; 2],
    timers: TimerWheel,
    resend: VecDeque<(Channel, u32)>,
    /// A resend of a segment whose earlier resend was lost, due to go out a
    /// second time (`Config::repair_copies`).
    copy: Option<(Channel, u32)>,
    budget: usize,
    expired: Vec<u64>,
    events: VecDeque<Event>,
    regions: Regions,
    stats: Stats,
    dead: bool,
    dead_reason: Option<DeadReason>,
    /// Abort datagrams still to send after giving up.
    aborts_due: u32,
    /// When the last valid datagram came from the peer (or when we started
    /// listening, before the first).
    last_heard: Option<Instant>,
    now: Instant,
}

fn key(ch: Channel, s: u32) -> u64 {
    (ch.index() as u64) << 32 | u64::from(s)
}

fn channel_of(key: u64) -> Channel {
    if key >> 32 == 0 {
        Channel::Priority
    } else {
        Channel::Data
    }
}

trait SeqOpt {
    fn is_none_or_before(&self, s: u32) -> bool;
}

impl SeqOpt for Option<u32> {
    fn is_none_or_before(&self, s: u32) -> bool {
        self.is_none_or(|p| seq::lt(p, s))
    }
}

impl Endpoint {
    /// A new endpoint.
    pub fn new(cfg: Config) -> Endpoint {
        let w = cfg.window_len();
        let c = cfg.credits_len();
        let tx = Channel::ALL.map(|ch| TxChannel {
            chunk: cfg.chunk_len(ch),
            wmask: w - 1,
            cmask: c - 1,
            next_seq: cfg.initial_seq,
            snd_una: cfg.initial_seq,
            largest_acked: cfg.initial_seq,
            any_acked: false,
            rack_time: Instant::ZERO,
            reo_deadline: None,
            reorder_seen: Duration::ZERO,
            last_cum: cfg.initial_seq,
            dup_acks: 0,
            segs: vec![TxSeg::default(); w as usize],
            msgs: (0..c).map(|_| OutMsg::default()).collect(),
            next_frag: cfg.initial_seq,
            msg_una: cfg.initial_seq,
            current: None,
            queue: VecDeque::new(),
            next_handle: 0,
            pool: Vec::new(),
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max, cfg.adaptive_rto)
                .with_slack(cfg.ack_delay, cfg.timer_tick),
            probe_after: Instant::ZERO,
            pipe: 0,
            delivered: 0,
            delivered_time: Instant::ZERO,
            first_sent: Instant::ZERO,
            bw: [0.0; 2],
            bw_period: Instant::ZERO,
            min_rtt: None,
            ack_epoch: Instant::ZERO,
            ack_epoch_acked: 0,
            extra_acked: [0.0; 2],
            flight_cap: if cfg.flight_gain > 0 {
                INITIAL_FLIGHT
            } else {
                u32::MAX
            },
        });
        let rx = Channel::ALL.map(|ch| RxChannel {
            wmask: w - 1,
            rcv_next: cfg.initial_seq,
            highest: cfg.initial_seq,
            bits: vec![0; (w as usize).div_ceil(64)],
            ack_pending: false,
            ack_now: false,
            ack_due: None,
            unacked: 0,
            sack_cursor: cfg.initial_seq,
            sack_more: false,
            ack_credit: 0,
            reasm: Reassembly::new(c, cfg.initial_seq, cfg.ordered[ch.index()], cfg.max_message),
        });
        Endpoint {
            timers: TimerWheel::new(2 * w as usize, cfg.timer_slots, cfg.timer_tick),
            budget: cfg.resend_cap,
            tx,
            rx,
            resend: VecDeque::new(),
            copy: None,
            expired: Vec::new(),
            events: VecDeque::new(),
            regions: Regions::default(),
            stats: Stats::default(),
            dead: false,
            dead_reason: None,
            aborts_due: 0,
            last_heard: None,
            now: Instant::ZERO,
            cfg,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The peer was declared dead.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Why the peer was declared dead, once it was.
    pub fn dead_reason(&self) -> Option<DeadReason> {
        self.dead_reason
    }

    /// When the last valid datagram came from the peer (before the first:
    /// the first [`Endpoint::handle_timeout`]); `None` before either.
    pub fn last_heard(&self) -> Option<Instant> {
        self.last_heard
    }

    /// Gives up on the peer: the endpoint shuts as if the peer were dead
    /// ([`DeadReason::Aborted`], no event) and sends the peer a few abort
    /// datagrams so it stops too rather than wait out its `peer_timeout`.
    pub fn abort(&mut self) {
        if !self.dead {
            self.die(DeadReason::Aborted);
            self.events.retain(|e| *e != Event::PeerDead);
        }
    }

    /// The current retransmit timeout of a channel.
    pub fn rto(&self, ch: Channel) -> Duration {
        self.tx[ch.index()].rtt.rto()
    }

    /// The smoothed RTT of a channel, once measured.
    pub fn srtt(&self, ch: Channel) -> Option<Duration> {
        self.tx[ch.index()].rtt.srtt()
    }

    /// Segments of a channel in flight: sent, neither acknowledged nor declared lost.
    pub fn in_flight(&self, ch: Channel) -> u32 {
        self.tx[ch.index()].pipe
    }

    /// The current bound on [`Endpoint::in_flight`] from the measured
    /// bandwidth-delay product (`flight_gain`), once measured; `window` and
    /// `credits` bound it too.
    pub fn flight_bound(&self, ch: Channel) -> Option<u32> {
        let t = &self.tx[ch.index()];
        let measured = t.bw[0] > 0.0 || t.bw[1] > 0.0;
        (self.cfg.flight_gain > 0 && measured).then_some(t.flight_cap)
    }

    /// Messages and PUTs accepted by `send`/`put` of which nothing was sent yet.
    pub fn queued(&self, ch: Channel) -> usize {
        self.tx[ch.index()].queue.len()
    }

    /// Messages and PUTs accepted by `send`/`put` but not yet fully acknowledged.
    pub fn unacked(&self, ch: Channel) -> usize {
        let t = &self.tx[ch.index()];
        t.queue.len() + t.next_frag.wrapping_sub(t.msg_una) as usize
    }

    /// Registers a zeroed region of `len` bytes the peer may PUT into.
    pub fn register_region(&mut self, len: usize) -> Option<RegionId> {
        self.regions.register(len)
    }

    /// A registered region's bytes.
    pub fn region(&self, id: RegionId) -> Option<&[u8]> {
        self.regions.get(id)
    }

    /// A registered region's bytes, writable.
    pub fn region_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        self.regions.get_mut(id)
    }

    /// Removes a region; later PUTs into it are rejected.
    pub fn unregister_region(&mut self, id: RegionId) -> Option<Vec<u8>> {
        self.regions.unregister(id)
    }

    /// Gives a delivered message buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.rx[Channel::Data.index()].reasm.recycle(buf);
    }

    /// Queues a message on `channel`; returns its handle (per channel, from 0).
    pub fn send(&mut self, channel: Channel, message: &[u8]) -> Result<u64, SendError> {
        self.enqueue(channel, message, None)
    }

    /// Queues a PUT of `bytes` at `offset` of the peer's region `region`, on
    /// the data channel. The peer checks the bounds; completion is
    /// [`Event::PutDone`] here and [`Event::PutReceived`] there.
    pub fn put(&mut self, region: RegionId, offset: u64, bytes: &[u8]) -> Result<u64, SendError> {
        self.enqueue(Channel::Data, bytes, Some(PutRepr { region, offset }))
    }

    fn enqueue(
        &mut self,
        ch: Channel,
        bytes: &[u8],
        put: Option<PutRepr>,
    ) -> Result<u64, SendError> {
        if self.dead {
            return Err(SendError::PeerDead);
        }
        if bytes.len() > self.cfg.max_message as usize {
            return Err(SendError::TooLarge);
        }
        let t = &mut self.tx[ch.index()];
        if t.queue.len() >= self.cfg.send_queue_limit {
            return Err(SendError::QueueFull);
        }
        let mut data = t.pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(bytes);
        let handle = t.next_handle;
        t.next_handle += 1;
        t.queue.push_back(Pending { data, put, handle });
        self.stats.submitted += 1;
        Ok(handle)
    }

    /// The next application event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Endpoint::handle_timeout`] should next be called.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.dead {
            return (self.aborts_due > 0).then_some(self.now);
        }
        let mut t = self.timers.next_deadline();
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y: Instant| y.min(x)));
        for rx in &self.rx {
            if let Some(d) = rx.ack_due {
                consider(d);
            }
        }
        for tx in &self.tx {
            if let Some(d) = tx.reo_deadline {
                consider(d);
            }
        }
        if !self.resend.is_empty() && self.budget == 0 {
            consider(self.now + self.cfg.pass_interval);
        }
        if let (Some(limit), Some(heard)) = (self.cfg.peer_timeout, self.last_heard) {
            if self.tx.iter().any(|t| t.snd_una != t.next_seq) {
                consider(heard + limit + Duration::from_nanos(1));
            }
        }
        t
    }
}
