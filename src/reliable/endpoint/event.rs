//! What the endpoint tells the application: events, refusals and counters.

use super::super::wire::Channel;
use super::super::RegionId;
use thiserror::Error;

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
        /// The bytes; hand the buffer back with [`Endpoint::recycle`](super::Endpoint::recycle) to avoid allocation.
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
        /// Handle returned by [`Endpoint::put`](super::Endpoint::put).
        handle: u64,
    },
    /// The peer was declared dead ([`DeadReason`] says why); the endpoint
    /// is shut.
    PeerDead,
}

/// Why the peer was declared dead ([`super::Endpoint::dead_reason`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// A segment was resent `retry_limit` times by timeout and nothing came
    /// from the peer since.
    RetryLimit,
    /// Nothing came from the peer for `peer_timeout` while we waited for it.
    Silent,
    /// The peer sent an abort: it gave up.
    PeerAborted,
    /// Our application gave up ([`super::Endpoint::abort`]).
    Aborted,
}

impl core::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DeadReason::RetryLimit => "retry limit reached with no answer from the peer",
            DeadReason::Silent => "nothing heard from the peer for peer_timeout",
            DeadReason::PeerAborted => "the peer gave up (it sent an abort)",
            DeadReason::Aborted => "aborted by the application",
        })
    }
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
    /// Second copies of resends of segments whose earlier resend was lost
    /// (counted in `retransmits` too; see `Config::repair_copies`).
    pub repair_copies: u64,
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
