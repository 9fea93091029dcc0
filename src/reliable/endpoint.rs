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
//! retransmit [`Hotel`] until it is acknowledged. ACKs are piggy-backed on data
//! when one is pending and sent standalone when the delayed-ACK timer fires,
//! after `ack_every` segments, at once on a duplicate (the sign of a lost ACK),
//! and (our default) at once when a gap appears. The receiver reports the
//! cumulative point plus, unless disabled, SACK ranges; the sender declares a
//! segment lost when a segment sent after it was acknowledged and either
//! `reorder_threshold` later segments were SACKed or it was sent a quarter RTT
//! before that one (RACK's rules; one loss costs one resend, not a window), or
//! on `dup_ack_threshold` duplicate cumulative ACKs (usnic: one). Every
//! segment has its timer in the hotel, but (with `tail_probe`, our default) a
//! channel times out as RFC 6298's single timer does: only after an RTO with
//! no ACK of new data, and then at most once per backed-off RTO. A timeout
//! backs the RTO off and resends the newest expired segment (a tail-loss
//! probe) and the oldest (the hole that holds delivery back) rather than the
//! whole flight; a segment that times out more than `retry_limit` times kills
//! the peer ([`Event::PeerDead`]). Resends per pass
//! are capped. The sender starts at most `credits` fragments beyond its oldest
//! unacknowledged one, which is exactly the receiver's reassembly capacity.
//! With `flight_gain` (our default 2; usnic 0, unbounded) it also starts a new
//! segment only while the segments in flight (sent, neither acknowledged nor
//! declared lost) are below `flight_gain` x the largest recent delivery rate x
//! the minimum RTT (BBR's inflight cap), at least `flight_floor`: on a path
//! that never pushes back no standing queue builds, so the RTT, and with it
//! the RTO, stay near the path's own.

use super::hotel::{Hotel, RoomId};
use super::reassembly::{Accepted, Chunk, ChunkError, Completed, PutTarget, Reassembly, Regions};
use super::rtt::RttEstimator;
use super::seq;
use super::wire::{
    self, AckRepr, Channel, DataRepr, Packet, PutRepr, Repr, SackRange, ACK_BLOCK_LEN, HEADER_LEN,
    MAX_SACK_RANGES, SACK_RANGE_LEN,
};
use super::RegionId;
use crate::time::Instant;
use core::time::Duration;
use std::collections::VecDeque;
use thiserror::Error;

/// Bytes of every data segment kept free for piggy-backed ACK blocks: two
/// blocks with two SACK ranges each. Standalone ACKs may carry more ranges.
pub const PIGGYBACK_RESERVE: usize = 2 * (ACK_BLOCK_LEN + 2 * SACK_RANGE_LEN);

/// Endpoint configuration. Both peers must use the same `window`, `credits`
/// and `initial_seq` (there is no handshake).
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Segments in flight per channel (rounded up to a power of two, 64..=32768).
    pub window: u32,
    /// Largest priority-channel datagram, header included.
    pub priority_mtu: usize,
    /// Largest data-channel datagram, header included.
    pub data_mtu: usize,
    /// Send SACK ranges and detect losses from them.
    pub sack: bool,
    /// Segments SACKed above an unacknowledged one before it is declared lost.
    pub reorder_threshold: u32,
    /// Duplicate cumulative ACKs that trigger a resend of the oldest segment (0: never).
    pub dup_ack_threshold: u32,
    /// Adapt the RTO to measured RTT (RFC 6298) and back off on timeouts; else fixed.
    pub adaptive_rto: bool,
    /// RTO before the first sample (and always, when not adaptive).
    pub rto_initial: Duration,
    /// Smallest RTO.
    pub rto_min: Duration,
    /// Largest RTO.
    pub rto_max: Duration,
    /// Delayed-ACK timer.
    pub ack_delay: Duration,
    /// ACK at once after this many unacknowledged segments.
    pub ack_every: u32,
    /// ACK at once when a segment arrives above a gap.
    pub ack_on_gap: bool,
    /// On a timeout, resend only the newest and the oldest expired segment
    /// per channel (a tail-loss probe and the first hole) and re-arm the
    /// others, and time out only after an RTO without an ACK of new data, at
    /// most once per RTO; `false` (usnic) resends every expired segment as
    /// its own timer runs out.
    pub tail_probe: bool,
    /// Resends per pass (per [`Endpoint::handle_timeout`] call).
    pub resend_cap: usize,
    /// Next pass when resends are still queued but the pass budget is spent.
    pub pass_interval: Duration,
    /// Timeouts of one segment after which the peer is declared dead (`None`: never).
    pub retry_limit: Option<u32>,
    /// Largest message or PUT, bytes.
    pub max_message: u32,
    /// Fragments in flight per channel (the peer's reassembly slots), power of two.
    pub credits: u32,
    /// In-order delivery for the priority and data channels.
    pub ordered: [bool; 2],
    /// First sequence number and fragment id of every channel.
    pub initial_seq: u32,
    /// Sequence-number bits on the wire: 32, or 16 (any value below 32) as
    /// usnic sends, widened against the receive and send windows on arrival;
    /// the window is then at most 16384. No SACK ranges are sent with 16 bits.
    pub seq_bits: u32,
    /// Messages queued per channel before [`SendError::QueueFull`].
    pub send_queue_limit: usize,
    /// Timer-wheel granularity.
    pub hotel_tick: Duration,
    /// Timer-wheel buckets.
    pub hotel_slots: usize,
    /// Bound the segments in flight per channel to this multiple of the
    /// measured bandwidth-delay product (delivery rate from ACKs times the
    /// minimum RTT), as BBR's inflight cap does, so no standing queue builds
    /// on a path that never pushes back (0: no bound beyond `window` and
    /// `credits`, as usnic).
    pub flight_gain: u32,
    /// Smallest flight bound, segments.
    pub flight_floor: u32,
}

impl Default for Config {
    /// Our defaults: SACK, adaptive RTO with backoff, 50 us delayed ACK,
    /// immediate ACK on a gap, window 4096, peer dead after 16 timeouts.
    fn default() -> Config {
        Config {
            window: 4096,
            priority_mtu: 768,
            data_mtu: 1472,
            sack: true,
            reorder_threshold: 3,
            dup_ack_threshold: 0,
            adaptive_rto: true,
            rto_initial: Duration::from_millis(5),
            rto_min: Duration::from_micros(200),
            rto_max: Duration::from_millis(50),
            ack_delay: Duration::from_micros(50),
            ack_every: 8,
            ack_on_gap: true,
            tail_probe: true,
            resend_cap: 64,
            pass_interval: Duration::from_micros(1),
            retry_limit: Some(16),
            max_message: 1 << 20,
            credits: 256,
            ordered: [true, true],
            initial_seq: 0,
            seq_bits: 32,
            send_queue_limit: 1 << 16,
            hotel_tick: Duration::from_micros(10),
            hotel_slots: 4096,
            flight_gain: 2,
            flight_floor: 16,
        }
    }
}

impl Config {
    /// Open MPI usnic BTL defaults (opal/mca/btl/usnic): fixed 5 ms retransmit
    /// timer, cumulative ACKs only, one duplicate ACK triggers a resend, resends
    /// capped at 16 per progress pass, delayed ACK after about 1 ms or 4
    /// segments (usnic counts progress passes), window 4096, no ACK on a gap,
    /// no retry limit, 16-bit sequence numbers on the wire.
    pub fn usnic() -> Config {
        Config {
            sack: false,
            dup_ack_threshold: 1,
            adaptive_rto: false,
            rto_initial: Duration::from_millis(5),
            ack_delay: Duration::from_millis(1),
            ack_every: 4,
            ack_on_gap: false,
            tail_probe: false,
            resend_cap: 16,
            retry_limit: None,
            seq_bits: 16,
            flight_gain: 0,
            ..Config::default()
        }
    }

    fn window_len(&self) -> u32 {
        // Narrow sequence numbers are widened against the window edges, so the
        // window must stay well inside half their space.
        let max = if self.wire_bits() < 32 {
            1 << 14
        } else {
            1 << 15
        };
        self.window.clamp(64, max).next_power_of_two()
    }

    /// Sequence bits on the wire: 16 when `seq_bits` is below 32, else 32.
    pub fn wire_bits(&self) -> u32 {
        if self.seq_bits < 32 {
            16
        } else {
            32
        }
    }

    fn credits_len(&self) -> u32 {
        self.credits.clamp(1, 1 << 15).next_power_of_two()
    }

    fn mtu(&self, ch: Channel) -> usize {
        let m = match ch {
            Channel::Priority => self.priority_mtu,
            Channel::Data => self.data_mtu,
        };
        m.clamp(
            HEADER_LEN + PIGGYBACK_RESERVE + 1,
            HEADER_LEN + PIGGYBACK_RESERVE + 65535,
        )
    }

    /// Payload bytes per segment on `ch`.
    pub fn chunk_len(&self, ch: Channel) -> usize {
        self.mtu(ch) - HEADER_LEN - PIGGYBACK_RESERVE
    }
}

/// Why a send or put was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SendError {
    /// The peer was declared dead.
    #[error("peer dead")]
    PeerDead,
    /// Longer than `max_message`.
    #[error("message too large")]
    TooLarge,
    /// `send_queue_limit` messages are already queued on the channel.
    #[error("send queue full")]
    QueueFull,
}

/// Something the application must hear about.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// A whole message, delivered once (in order, unless the channel is unordered).
    Message {
        /// Channel it came on.
        channel: Channel,
        /// The bytes; hand the buffer back with [`Endpoint::recycle`] to avoid allocation.
        data: Vec<u8>,
    },
    /// The peer PUT `len` bytes at `offset` of our region `region`.
    PutReceived {
        /// Region.
        region: RegionId,
        /// Offset.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// The peer's PUT did not fit any registered region; nothing was written.
    PutRejected {
        /// Region named.
        region: RegionId,
        /// Offset named.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// Our PUT with this handle was fully acknowledged: the peer has every
    /// byte. (A peer whose region it did not fit acknowledges it too, writes
    /// nothing, and reports [`Event::PutRejected`] on its side.)
    PutDone {
        /// Handle returned by [`Endpoint::put`].
        handle: u64,
    },
    /// A segment exhausted the retry limit; the endpoint is shut.
    PeerDead,
}

/// Counters; every dropped input lands in one of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Datagrams produced by `poll_transmit`.
    pub tx_packets: u64,
    /// Bytes produced.
    pub tx_bytes: u64,
    /// Data segments sent, first transmissions and resends.
    pub tx_segments: u64,
    /// Resends (timeout or loss detection).
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// Segments declared lost by SACK or duplicate ACKs.
    pub fast_retransmits: u64,
    /// Standalone ACK datagrams.
    pub tx_acks: u64,
    /// ACK blocks piggy-backed on data.
    pub piggybacked_acks: u64,
    /// Datagrams given to `on_packet`.
    pub rx_packets: u64,
    /// Data segments accepted.
    pub rx_segments: u64,
    /// Data segments already received (dropped, ACKed at once).
    pub rx_duplicates: u64,
    /// Data segments beyond the receive window (dropped).
    pub rx_out_of_window: u64,
    /// Chunks of fragments beyond the reassembly window (dropped; the peer ignored its credits).
    pub rx_no_credit: u64,
    /// Truncated, forged or garbage headers (dropped).
    pub bad_header: u64,
    /// ACK blocks acknowledging sequence numbers never sent (dropped).
    pub bad_ack: u64,
    /// ACK blocks older than what was already acknowledged (ignored).
    pub stale_acks: u64,
    /// Chunks inconsistent with their fragment, or fragments over `max_message` (dropped).
    pub bad_chunk: u64,
    /// PUT fragments outside every registered region (nothing written).
    pub bad_put: u64,
    /// Messages and PUTs accepted by `send`/`put`.
    pub submitted: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// PUTs landed.
    pub puts_received: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
}

#[derive(Debug, Clone, Default)]
struct TxSeg {
    live: bool,
    acked: bool,
    queued: bool,
    frag_id: u32,
    offset: u32,
    len: u16,
    xmits: u16,
    timeouts: u16,
    sent_at: Instant,
    room: Option<RoomId>,
    /// Counted in the channel's `pipe` (sent, neither acknowledged nor declared lost).
    in_pipe: bool,
    /// The channel's delivery state when this segment was (last) sent.
    rate: RateSnap,
}

/// Delivery-rate bookkeeping (BBR's rate sample, draft-cheng-iccrg-delivery-rate-estimation).
#[derive(Debug, Clone, Copy, Default)]
struct RateSnap {
    delivered: u64,
    delivered_time: Instant,
    first_sent: Instant,
}

#[derive(Debug, Default)]
struct OutMsg {
    live: bool,
    data: Vec<u8>,
    put: Option<PutRepr>,
    handle: u64,
    segs: u32,
    acked: u32,
    next_offset: u32,
    cut: bool,
}

#[derive(Debug)]
struct Pending {
    data: Vec<u8>,
    put: Option<PutRepr>,
    handle: u64,
}

#[derive(Debug)]
struct TxChannel {
    chunk: usize,
    wmask: u32,
    cmask: u32,
    next_seq: u32,
    snd_una: u32,
    largest_acked: u32,
    any_acked: bool,
    rack_time: Instant,
    last_cum: u32,
    dup_acks: u32,
    segs: Vec<TxSeg>,
    msgs: Vec<OutMsg>,
    next_frag: u32,
    msg_una: u32,
    current: Option<u32>,
    queue: VecDeque<Pending>,
    next_handle: u64,
    pool: Vec<Vec<u8>>,
    rtt: RttEstimator,
    /// With `tail_probe`: no timer of the channel fires before this instant,
    /// one RTO after the last ACK of new data or the last timeout probe.
    /// Expiries before it are re-armed to it and are not timeouts.
    probe_after: Instant,
    /// Segments sent and neither acknowledged nor declared lost.
    pipe: u32,
    /// Segments acknowledged so far, and when the last one was.
    delivered: u64,
    delivered_time: Instant,
    /// Send time of the newest segment acknowledged (start of the send interval).
    first_sent: Instant,
    /// Largest delivery rate, segments per second, in this and the last filter period.
    bw: [f64; 2],
    /// Start of the current filter period.
    bw_period: Instant,
    /// Smallest RTT sampled.
    min_rtt: Option<Duration>,
    /// New segments start only while `pipe` is below this.
    flight_cap: u32,
}

/// Length of each of the two delivery-rate filter periods, at least.
const BW_PERIOD_MIN: Duration = Duration::from_millis(1);
/// Filter periods in minimum RTTs.
const BW_PERIOD_RTTS: u32 = 10;

impl TxChannel {
    fn leave_pipe(&mut self, s: u32) {
        let seg = &mut self.segs[(s & self.wmask) as usize];
        if seg.in_pipe {
            seg.in_pipe = false;
            self.pipe -= 1;
        }
    }

    /// Takes a delivery-rate sample from `p`, the snapshot of the newest
    /// segment this ACK acknowledged (sent at `sent`), and recomputes the
    /// flight bound: `gain` x max rate x min RTT, clamped to `[floor, window]`.
    fn update_flight_cap(
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
            self.bw_period = now;
        } else if rate > self.bw[0] {
            self.bw[0] = rate;
        }
        let Some(min_rtt) = self.min_rtt else {
            return;
        };
        let bdp = self.bw[0].max(self.bw[1]) * min_rtt.as_secs_f64();
        let cap = (f64::from(gain) * bdp)
            .ceil()
            .min(f64::from(self.wmask + 1)) as u32;
        self.flight_cap = cap.max(floor);
    }
}

#[derive(Debug)]
struct RxChannel {
    wmask: u32,
    rcv_next: u32,
    highest: u32,
    bits: Vec<u64>,
    ack_pending: bool,
    ack_now: bool,
    ack_due: Option<Instant>,
    unacked: u32,
    reasm: Reassembly,
}

impl RxChannel {
    fn bit(&self, s: u32) -> bool {
        let i = (s & self.wmask) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    fn set_bit(&mut self, s: u32, on: bool) {
        let i = (s & self.wmask) as usize;
        if on {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    /// The ACK block: cumulative point and up to `max_ranges` SACK ranges, highest first.
    fn build_ack(&self, max_ranges: usize) -> AckRepr {
        let mut ack = AckRepr::cumulative(self.rcv_next);
        let span = self.highest.wrapping_sub(self.rcv_next);
        if max_ranges == 0 || span == 0 {
            return ack;
        }
        let max_ranges = max_ranges.min(MAX_SACK_RANGES);
        let mut n = 0;
        let mut run_end = None;
        // Walk from highest-1 down to rcv_next (whose bit is never set).
        for i in 1..=span {
            let s = self.highest.wrapping_sub(i);
            let set = s != self.rcv_next && self.bit(s);
            match (set, run_end) {
                (true, None) => run_end = Some(s.wrapping_add(1)),
                (false, Some(end)) => {
                    ack.ranges[n] = SackRange {
                        start: s.wrapping_add(1),
                        end,
                    };
                    n += 1;
                    run_end = None;
                    if n == max_ranges {
                        break;
                    }
                }
                _ => {}
            }
        }
        ack.n_ranges = n as u8;
        ack
    }

    fn clear_ack(&mut self) {
        self.ack_pending = false;
        self.ack_now = false;
        self.ack_due = None;
        self.unacked = 0;
    }
}

/// A sans-IO reliable endpoint; see the [module docs](self) for the calling order.
#[derive(Debug)]
pub struct Endpoint {
    cfg: Config,
    tx: [TxChannel; 2],
    rx: [RxChannel; 2],
    hotel: Hotel,
    resend: VecDeque<(Channel, u32)>,
    budget: usize,
    expired: Vec<u64>,
    events: VecDeque<Event>,
    regions: Regions,
    stats: Stats,
    dead: bool,
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
                .with_slack(cfg.ack_delay, cfg.hotel_tick),
            probe_after: Instant::ZERO,
            pipe: 0,
            delivered: 0,
            delivered_time: Instant::ZERO,
            first_sent: Instant::ZERO,
            bw: [0.0; 2],
            bw_period: Instant::ZERO,
            min_rtt: None,
            flight_cap: u32::MAX,
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
            reasm: Reassembly::new(c, cfg.initial_seq, cfg.ordered[ch.index()], cfg.max_message),
        });
        Endpoint {
            hotel: Hotel::new(2 * w as usize, cfg.hotel_slots, cfg.hotel_tick),
            budget: cfg.resend_cap,
            tx,
            rx,
            resend: VecDeque::new(),
            expired: Vec::new(),
            events: VecDeque::new(),
            regions: Regions::default(),
            stats: Stats::default(),
            dead: false,
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
        (self.cfg.flight_gain > 0 && t.flight_cap != u32::MAX).then_some(t.flight_cap)
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
            return None;
        }
        let mut t = self.hotel.next_deadline();
        let mut consider = |x: Instant| t = Some(t.map_or(x, |y: Instant| y.min(x)));
        for rx in &self.rx {
            if let Some(d) = rx.ack_due {
                consider(d);
            }
        }
        if !self.resend.is_empty() && self.budget == 0 {
            consider(self.now + self.cfg.pass_interval);
        }
        t
    }

    /// Starts a pass: refills the resend budget and fires due timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        self.budget = self.cfg.resend_cap;
        if self.dead {
            return;
        }
        self.expired.clear();
        self.hotel.expire(now, &mut self.expired);
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
                seg.room = self.hotel.check_in(k, t.probe_after);
                continue;
            }
            seg.timeouts = seg.timeouts.saturating_add(1);
            self.stats.timeouts += 1;
            if self
                .cfg
                .retry_limit
                .is_some_and(|lim| u32::from(seg.timeouts) > lim)
            {
                self.dead = true;
                self.resend.clear();
                self.events.push_back(Event::PeerDead);
                return;
            }
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
                seg.room = self.hotel.check_in(k, rearm_at[ch.index()]);
            } else if !seg.queued {
                seg.queued = true;
                t.leave_pipe(s);
                self.resend.push_back((ch, s));
            }
        }
    }

    /// Writes the next datagram to send into `buf` (which should hold the
    /// larger MTU) and returns its length, or `None` when nothing is due.
    /// Order: queued resends (up to the per-pass cap), new segments (priority
    /// channel first), then a standalone ACK if one is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.now = self.now.max(now);
        if self.dead {
            return None;
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
            let max_ranges = if self.cfg.sack && self.cfg.wire_bits() >= 32 {
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
        let room = self.hotel.check_in(key(ch, s), now + rto);
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
        };
        let n = repr.buffer_len();
        repr.emit(&mut Packet::new_unchecked(&mut buf[..n]));
        self.stats.tx_packets += 1;
        self.stats.tx_segments += 1;
        self.stats.tx_bytes += n as u64;
        n
    }

    /// Processes one received datagram. Anything malformed is counted in
    /// [`Stats`] and dropped.
    pub fn on_packet(&mut self, bytes: &[u8], now: Instant) {
        self.now = self.now.max(now);
        self.stats.rx_packets += 1;
        if self.dead {
            return;
        }
        let packet = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(_) => {
                self.stats.bad_header += 1;
                return;
            }
        };
        let repr = match Repr::parse(&packet) {
            Ok(r) => r,
            Err(wire::Error::ChunkOutsideFragment) => {
                self.stats.bad_chunk += 1;
                return;
            }
            Err(_) => {
                self.stats.bad_header += 1;
                return;
            }
        };
        let bits = self.cfg.wire_bits();
        for ch in Channel::ALL {
            if let Some(mut ack) = repr.acks[ch.index()] {
                if bits < 32 {
                    // Narrow sequence numbers: widen cum against what we sent; no ranges.
                    ack.cum = seq::expand(ack.cum, self.tx[ch.index()].snd_una, bits);
                    ack.n_ranges = 0;
                }
                self.on_ack(ch, &ack, now);
            }
        }
        if let Some(mut d) = repr.data {
            d.seq = seq::expand(d.seq, self.rx[repr.channel.index()].rcv_next, bits);
            self.on_data(repr.channel, d, repr.payload, now);
        }
    }

    fn on_ack(&mut self, ch: Channel, ack: &AckRepr, now: Instant) {
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
        // The newest-sent segment acknowledged: its send time and rate snapshot.
        let mut newest: Option<(Instant, RateSnap)> = None;
        let mut ack_one =
            |t: &mut TxChannel, hotel: &mut Hotel, events: &mut VecDeque<Event>, s: u32| {
                let seg = &mut t.segs[(s & t.wmask) as usize];
                if !seg.live || seg.acked {
                    return;
                }
                seg.acked = true;
                seg.queued = false;
                if let Some(r) = seg.room.take() {
                    hotel.check_out(r);
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
            ack_one(t, &mut self.hotel, &mut self.events, s);
            s = s.wrapping_add(1);
        }
        for r in ack.ranges() {
            let mut s = if seq::lt(r.start, t.snd_una) {
                t.snd_una
            } else {
                r.start
            };
            while seq::lt(s, r.end) {
                ack_one(t, &mut self.hotel, &mut self.events, s);
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
                t.update_flight_cap(snap, sent, now, self.cfg.flight_gain, self.cfg.flight_floor);
            }
        }
        if newly > 0 {
            // New data acknowledged: restart the channel's timer (RFC 6298 5.3).
            t.probe_after = now + t.rtt.rto();
        }
        // Duplicate cumulative ACKs (usnic: one is enough to resend).
        if ack.cum == t.last_cum && newly == 0 && t.snd_una != t.next_seq {
            t.dup_acks += 1;
            if self.cfg.dup_ack_threshold > 0 && t.dup_acks >= self.cfg.dup_ack_threshold {
                let s = t.snd_una;
                let seg = &mut t.segs[(s & t.wmask) as usize];
                // Only if not already pending a resend.
                if seg.live && !seg.acked && !seg.queued {
                    if let Some(r) = seg.room.take() {
                        self.hotel.check_out(r);
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
        // SACK loss detection: a segment is lost when reorder_threshold later
        // segments were acknowledged and a segment sent after it was too.
        if self.cfg.sack && newly > 0 && t.any_acked {
            let thr = self.cfg.reorder_threshold.max(1) as i32;
            // RACK's time rule: sent a quarter RTT before something acknowledged.
            let reo = t.rtt.srtt().map(|d| d / 4);
            let mut s = t.snd_una;
            while seq::lt(s, t.largest_acked) {
                let seg = &mut t.segs[(s & t.wmask) as usize];
                let lost = seq::diff(t.largest_acked, s) >= thr
                    || reo.is_some_and(|r| seg.sent_at + r < t.rack_time);
                if lost && seg.live && !seg.acked && !seg.queued && seg.sent_at < t.rack_time {
                    if let Some(r) = seg.room.take() {
                        self.hotel.check_out(r);
                    }
                    seg.queued = true;
                    t.leave_pipe(s);
                    self.resend.push_back((ch, s));
                    self.stats.fast_retransmits += 1;
                }
                s = s.wrapping_add(1);
            }
        }
    }

    fn on_data(&mut self, ch: Channel, d: DataRepr, payload: &[u8], now: Instant) {
        let window = self.cfg.window_len();
        let rx = &mut self.rx[ch.index()];
        if seq::lt(d.seq, rx.rcv_next)
            || (seq::in_window(d.seq, rx.rcv_next, window) && rx.bit(d.seq))
        {
            // Already have it: our ACK was probably lost. ACK at once.
            self.stats.rx_duplicates += 1;
            rx.ack_pending = true;
            rx.ack_now = true;
            return;
        }
        if !seq::in_window(d.seq, rx.rcv_next, window) {
            self.stats.rx_out_of_window += 1;
            return;
        }
        let chunk = Chunk {
            frag_id: d.frag_id,
            frag_len: d.frag_len,
            offset: d.offset,
            bytes: payload,
            put: d.put.map(|p| PutTarget {
                region: p.region,
                offset: p.offset,
            }),
        };
        let events = &mut self.events;
        let stats = &mut self.stats;
        let res = rx.reasm.on_chunk(chunk, &mut self.regions, |c| match c {
            Completed::Message(data) => {
                stats.delivered += 1;
                events.push_back(Event::Message { channel: ch, data });
            }
            Completed::Put {
                region,
                offset,
                len,
            } => {
                stats.puts_received += 1;
                events.push_back(Event::PutReceived {
                    region,
                    offset,
                    len,
                });
            }
            Completed::PutRejected {
                region,
                offset,
                len,
            } => {
                events.push_back(Event::PutRejected {
                    region,
                    offset,
                    len,
                });
            }
        });
        match res {
            Ok(Accepted::Stored) => {}
            Ok(Accepted::PutOutsideRegion) => self.stats.bad_put += 1,
            Err(ChunkError::OutOfWindow) => {
                self.stats.rx_no_credit += 1;
                return;
            }
            Err(ChunkError::TooLarge | ChunkError::Inconsistent) => {
                self.stats.bad_chunk += 1;
                return;
            }
        }
        self.stats.rx_segments += 1;
        rx.set_bit(d.seq, true);
        if seq::gt(d.seq.wrapping_add(1), rx.highest) {
            rx.highest = d.seq.wrapping_add(1);
        }
        while rx.rcv_next != rx.highest && rx.bit(rx.rcv_next) {
            let s = rx.rcv_next;
            rx.set_bit(s, false);
            rx.rcv_next = s.wrapping_add(1);
        }
        rx.ack_pending = true;
        rx.unacked += 1;
        if (self.cfg.ack_on_gap && rx.rcv_next != rx.highest) || rx.unacked >= self.cfg.ack_every {
            rx.ack_now = true;
        } else if rx.ack_due.is_none() {
            rx.ack_due = Some(now + self.cfg.ack_delay);
        }
    }
}
