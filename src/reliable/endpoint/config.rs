//! The endpoint's configuration: our defaults and usnic's.

use super::super::wire::{Channel, ACK_BLOCK_LEN, HEADER_LEN, SACK_RANGE_LEN};
use core::time::Duration;

/// Bytes of every data segment kept free for piggy-backed ACK blocks: two
/// blocks with two SACK ranges each. Standalone ACKs may carry more ranges.
pub const PIGGYBACK_RESERVE: usize = 2 * (ACK_BLOCK_LEN + 2 * SACK_RANGE_LEN);

/// The default `peer_timeout`: long enough for a peer descheduled or
/// swapping for a few seconds, short enough that a dead one ends a run soon.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Segments acknowledged above a hole an ACK shows before it is declared
    /// lost, until reordering is seen or the RTT varies by more than the
    /// minimum RTT (RACK's time rule decides after); and,
    /// without SACK ranges, duplicate ACKs before the hole is resent.
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
    /// A segment whose resend was lost too goes out twice on every later
    /// resend, back to back: the few segments that need four or five
    /// repair rounds hold in-order delivery, and with it the window's left
    /// edge, for that many round trips; two copies halve the rounds they
    /// need at the cost of `loss`² extra segments (see the module docs,
    /// **Repair rounds**). usnic: no.
    pub repair_copies: bool,
    /// Resends per pass (per [`Endpoint::handle_timeout`](super::Endpoint::handle_timeout) call).
    pub resend_cap: usize,
    /// Next pass when resends are still queued but the pass budget is spent.
    pub pass_interval: Duration,
    /// Timeouts of one segment in a row, with nothing heard from the peer,
    /// after which it is declared dead (`None`: never), once it has also been
    /// silent for [`RETRY_LIMIT_SILENCE`](super::RETRY_LIMIT_SILENCE) (or
    /// `peer_timeout`, if shorter).
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
    /// Messages queued per channel before [`SendError::QueueFull`](super::SendError::QueueFull).
    pub send_queue_limit: usize,
    /// Timer-wheel granularity.
    pub timer_tick: Duration,
    /// Timer-wheel buckets.
    pub timer_slots: usize,
    /// Bound the segments in flight per channel to this multiple of the
    /// measured bandwidth-delay product (delivery rate from ACKs times the
    /// minimum RTT plus half the reordering the sender has measured, so a
    /// path whose packets overtake one another is not bounded by a rare
    /// lucky RTT sample), as BBR's inflight cap does, so no standing queue builds
    /// on a path that never pushes back (0: no bound beyond `window` and
    /// `credits`, as usnic). Ours 3: on a FIFO path with millisecond jitter
    /// the minimum RTT is a sample well below the path's usual delay, and
    /// with 20 % loss 2 x rate x minimum RTT kept the flight under what the
    /// path holds (see the module docs, **Repair rounds**).
    pub flight_gain: u32,
    /// Smallest flight bound, segments.
    pub flight_floor: u32,
    /// Silence after which the peer is declared dead while something of
    /// ours is unacknowledged (`None`: never). The application applies it
    /// while it waits for messages, too (the stages do).
    pub peer_timeout: Option<Duration>,
}

impl Default for Config {
    /// Our defaults: SACK, adaptive RTO with backoff, 50 us delayed ACK,
    /// immediate ACK on a gap, window 16384, 4096 credits, second copies of
    /// resends whose resend was lost, peer dead after 16 timeouts of
    /// one segment without a word from it, or 10 s of silence.
    fn default() -> Config {
        Config {
            window: 16384,
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
            repair_copies: true,
            resend_cap: 64,
            pass_interval: Duration::from_micros(1),
            retry_limit: Some(16),
            max_message: 1 << 20,
            credits: 4096,
            ordered: [true, true],
            initial_seq: 0,
            seq_bits: 32,
            send_queue_limit: 1 << 16,
            timer_tick: Duration::from_micros(10),
            timer_slots: 4096,
            flight_gain: 3,
            flight_floor: 16,
            peer_timeout: Some(DEFAULT_PEER_TIMEOUT),
        }
    }
}

impl Config {
    /// Open MPI usnic BTL defaults (opal/mca/btl/usnic): fixed 5 ms retransmit
    /// timer, cumulative ACKs only, one duplicate ACK triggers a resend, resends
    /// capped at 16 per progress pass, delayed ACK after about 1 ms or 4
    /// segments (usnic counts progress passes), window 4096, no ACK on a gap,
    /// no retry limit, 16-bit sequence numbers on the wire. (The
    /// `peer_timeout` stays: a dead peer ends the run in either mode.)
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
            repair_copies: false,
            resend_cap: 16,
            retry_limit: None,
            seq_bits: 16,
            window: 4096,
            credits: 256,
            flight_gain: 0,
            ..Config::default()
        }
    }

    pub(super) fn window_len(&self) -> u32 {
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

    /// SACK ranges travel: `sack` is on and sequence numbers are 32 bits
    /// wide (16-bit ones carry none). Without them, losses are found by
    /// duplicate ACKs (`reorder_threshold` of them, or `dup_ack_threshold`).
    pub fn sack_ranges(&self) -> bool {
        self.sack && self.wire_bits() >= 32
    }

    pub(super) fn credits_len(&self) -> u32 {
        self.credits.clamp(1, 1 << 15).next_power_of_two()
    }

    pub(super) fn mtu(&self, ch: Channel) -> usize {
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
