//! The `reliable_tx` and `reliable_rx` stages: one endpoint per side, bound to
//! a port (or ring) pair by [`driver::pump`]. The sender offers `messages`
//! messages of `size` bytes made by [`pattern::fill_stamped`](super::pattern::fill_stamped) (stamped with
//! the time of `send`), keeping the send credits full but at most
//! [`SOURCE_QUEUE`] messages queued unsent in the endpoint; the receiver checks
//! every byte with a [`pattern::Sink`](super::pattern::Sink) and records each message's delivery
//! latency (stamps are [`crate::time::stamp_ns`]: CLOCK_MONOTONIC, shared by
//! threads and processes of one host, or CLOCK_TAI across hosts that all have
//! `clock = "tai"`).
//! Both keep polling after they finish, so late ACKs and resends still flow
//! until the pipeline stops; the receiver reports itself finished only after
//! [`LINGER`] without a datagram from the sender, so a sender whose last ACK
//! was lost still gets it when it resends.
//!
//! A dead peer ends the stage with an error naming the stage, its port (with
//! the peer's address) and why: the endpoint's retry limit or `peer_timeout`
//! (sender), `peer_timeout` of silence while messages are still expected
//! (receiver), or the peer's abort. A failing stage aborts its endpoint, so
//! the peer ends too. The JSON detail says what was delivered either way.

use std::sync::Arc;

use super::driver::{self, DatagramTx};
use super::endpoint::{Config, Endpoint, Event, SendError};
use super::pattern::{fill_stamped, stamp, Sink};
use super::wire::Channel;
use crate::buf::counter::CacheAligned;
use crate::buf::{Burst, Packet, PoolCache};
use crate::latency::{new_histogram, Summary};
use crate::runtime::basic::{Input, Output};
use crate::runtime::{Context, Poll, Stage, StageCounters};

/// Messages the sender stage keeps queued in its endpoint beyond what the
/// flight bound lets out (64 KiB of 8 KiB messages, about 50 us at 10 Gb/s):
/// enough to never starve the wire, short enough that a message's latency is
/// the path's, not a queue in front of it.
pub const SOURCE_QUEUE: usize = 8;
use crate::time::Instant;
use core::time::Duration;
use hdrhistogram::Histogram;

/// How long the receiver stays after its last message while the sender
/// still talks (a lost final ACK makes it resend): it reports itself
/// finished after this long without a datagram from the peer.
pub const LINGER: Duration = Duration::from_millis(250);

/// Which side a stage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends `messages` messages of `size` bytes.
    Tx,
    /// Receives and checks them.
    Rx,
}

impl ReliableSpec {
    /// `reliable_tx` or `reliable_rx`.
    pub fn role_name(&self) -> &'static str {
        match self.role {
            Role::Tx => "reliable_tx",
            Role::Rx => "reliable_rx",
        }
    }
}

/// A reliable stage's settings.
#[derive(Debug, Clone)]
pub struct ReliableSpec {
    /// The side.
    pub role: Role,
    /// Messages to send (tx) or expect (rx; `None` is open-ended).
    pub messages: Option<u64>,
    /// Bytes per message (at least 8: the index).
    pub size: usize,
    /// The endpoint's configuration.
    pub config: Config,
    /// Datagrams per burst.
    pub burst: usize,
}

/// Datagrams out: packets from a pool cache, gathered into a burst that the
/// owner sends (the reliable stage, and the RPC's reliable transport).
pub(crate) struct PacketTx {
    /// The datagrams to send.
    pub(crate) burst: Burst,
    cache: PoolCache,
    spare: Option<Packet>,
    /// Datagrams larger than a buffer: not sent, so the channel resends them
    /// (and fails the peer if one never fits).
    pub(crate) oversize: u64,
}

impl PacketTx {
    /// An empty burst taking its packets from `cache`.
    pub(crate) fn new(cache: PoolCache) -> PacketTx {
        PacketTx {
            burst: Burst::new(),
            cache,
            spare: None,
            oversize: 0,
        }
    }
}

impl DatagramTx for PacketTx {
    fn has_room(&mut self) -> bool {
        if self.burst.room() == 0 {
            return false;
        }
        if self.spare.is_none() {
            self.spare = self.cache.alloc();
        }
        self.spare.is_some()
    }

    fn send(&mut self, bytes: &[u8]) {
        if let Some(mut p) = self.spare.take() {
            if p.set_data(bytes).is_ok() {
                if let Err(p) = self.burst.push(p) {
                    self.spare = Some(p);
                }
            } else {
                self.oversize += 1;
                self.spare = Some(p);
            }
        }
    }
}

/// The stage.
pub struct ReliableStage {
    spec: ReliableSpec,
    /// The stage's name and its port with the peer's address, for errors.
    name: String,
    peer: String,
    ep: Endpoint,
    input: Input,
    out: Output,
    rx: Burst,
    rx_cache: PoolCache,
    tx: PacketTx,
    scratch: Vec<u8>,
    msg: Vec<u8>,
    next: u64,
    sink: Sink,
    started: Option<Instant>,
    /// A receiver's bytes delivered in the poll that delivered its first
    /// message: they arrived at its window's start, so goodput, over the
    /// window from there to the last, leaves them out.
    first_bytes: u64,
    finished: Option<Instant>,
    failure: Option<String>,
    /// Messages delivered in this poll (kept to reuse its storage).
    delivered: Vec<Vec<u8>>,
    /// Receiver: nanoseconds from the sender's `send` (the message's stamp)
    /// to delivery here, per message.
    latency: Histogram<u64>,
    counters: Arc<CacheAligned<StageCounters>>,
}

impl ReliableStage {
    /// A stage receiving datagrams from `input` and sending to `out`.
    pub fn new(
        spec: ReliableSpec,
        input: Input,
        out: Output,
        rx_cache: PoolCache,
        tx_cache: PoolCache,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Self {
        let mtu = spec.config.data_mtu.max(spec.config.priority_mtu);
        let sink = if spec.config.ordered[Channel::Data.index()] {
            Sink::new(spec.size)
        } else {
            Sink::unordered(spec.size, spec.messages.unwrap_or(0).min(1 << 24))
        };
        ReliableStage {
            name: String::new(),
            peer: String::new(),
            ep: Endpoint::new(spec.config.clone()),
            sink,
            input,
            out,
            rx: Burst::new(),
            rx_cache,
            tx: PacketTx::new(tx_cache),
            scratch: vec![0; mtu],
            msg: Vec::with_capacity(spec.size),
            next: 0,
            started: None,
            first_bytes: 0,
            finished: None,
            failure: None,
            delivered: Vec::with_capacity(64),
            latency: new_histogram(),
            counters,
            spec,
        }
    }

    fn done(&self) -> bool {
        match self.spec.role {
            Role::Tx => self
                .spec
                .messages
                .is_some_and(|m| self.next >= m && self.ep.unacked(Channel::Data) == 0),
            Role::Rx => self
                .spec
                .messages
                .is_some_and(|m| self.sink.stats().ok >= m),
        }
    }
}

impl ReliableStage {
    /// Names the stage and its peer (the port it transmits to, with the
    /// peer's address) for its errors.
    pub fn named(mut self, name: &str, peer: &str) -> Self {
        self.name = name.to_string();
        self.peer = peer.to_string();
        self
    }

    fn who(&self) -> String {
        format!(
            "{} stage `{}` (data channel, peer on {})",
            self.spec.role_name(),
            self.name,
            self.peer
        )
    }

    fn dead_message_prefix(&self) -> String {
        format!("{}: the peer was declared dead", self.who())
    }

    fn dead_message(&self) -> String {
        let why = self
            .ep
            .dead_reason()
            .map_or("unknown".to_string(), |r| r.to_string());
        format!("{}: {why}", self.dead_message_prefix())
    }
}

impl Stage for ReliableStage {
    fn poll(&mut self, cx: &Context) -> Poll {
        let now = cx.now;
        let n = self.input.recv(now, &mut self.rx, self.spec.burst);
        if self.spec.role == Role::Tx && !cx.draining && self.failure.is_none() {
            // Keep the credits full, but no more than a few messages waiting
            // in the endpoint: a message waits where the flight bound holds
            // it, and its latency counts from `send`.
            let credits = self.spec.config.credits as usize;
            while self.spec.messages.is_none_or(|m| self.next < m)
                && self.ep.unacked(Channel::Data) < credits
                && self.ep.queued(Channel::Data) < SOURCE_QUEUE
            {
                // The stamp clock: CLOCK_TAI across hosts with clock = "tai".
                let at = crate::time::stamp_ns(now);
                fill_stamped(self.next, at, self.spec.size, &mut self.msg);
                match self.ep.send(Channel::Data, &self.msg) {
                    Ok(_) => {
                        self.started.get_or_insert(now);
                        self.next += 1;
                    }
                    Err(SendError::PeerDead) => {
                        self.failure = Some(self.dead_message());
                        break;
                    }
                    Err(_) => break,
                }
            }
        }
        // The receiver waits for messages: silence for `peer_timeout` ends
        // it (the endpoint applies it only while it has data unacknowledged).
        if self.spec.role == Role::Rx && self.failure.is_none() && !self.done() {
            if let (Some(limit), Some(heard)) =
                (self.spec.config.peer_timeout, self.ep.last_heard())
            {
                if now - heard > limit {
                    self.ep.abort();
                    self.failure = Some(format!(
                        "{}: nothing heard from the peer for {limit:?} (peer_timeout) while messages were still expected",
                        self.who()
                    ));
                }
            }
        }
        let rx_bytes = self.rx.bytes();
        let dead_message = self.dead_message_prefix();
        let (sink, ep) = (&mut self.sink, &mut self.ep);
        let mut dead = false;
        let delivered = &mut self.delivered;
        let pass = driver::pump(
            ep,
            now,
            self.rx.iter().map(|p| p.data()),
            &mut self.scratch,
            &mut self.tx,
            |e| match e {
                Event::Message { data, .. } => delivered.push(data),
                Event::PeerDead => dead = true,
                _ => {}
            },
        );
        let stamp_now = crate::time::stamp_ns(now);
        for data in self.delivered.drain(..) {
            self.started.get_or_insert(now);
            if sink.check(&data) {
                let sent = stamp(&data);
                if sent > 0 {
                    self.latency
                        .saturating_record(stamp_now.saturating_sub(sent).max(1));
                }
            }
            ep.recycle(data);
        }
        if self.spec.role == Role::Rx && self.started == Some(now) {
            self.first_bytes = self.sink.stats().bytes;
        }
        if dead && self.failure.is_none() {
            let why = self
                .ep
                .dead_reason()
                .map_or("unknown".to_string(), |r| r.to_string());
            self.failure = Some(format!("{dead_message}: {why}"));
        }
        self.rx_cache.free_bulk(&mut self.rx);
        let tx_bytes = self.tx.burst.bytes();
        let (sent, dropped) = self.out.send_or_drop(now, &mut self.tx.burst);
        if sent == 0 {
            self.out.flush(now);
        }
        let c = &self.counters;
        c.packets_in.add(n as u64);
        c.bytes_in.add(rx_bytes);
        c.packets_out.add(sent as u64);
        c.bytes_out.add(if dropped == 0 { tx_bytes } else { 0 });
        c.dropped.add(dropped as u64);
        if self.finished.is_none() && self.done() {
            self.finished = Some(now);
        }
        if self.failure.is_some() {
            return Poll::Finished;
        }
        if let Some(done_at) = self.finished {
            // The receiver lingers while the sender still talks.
            let quiet_since = self.ep.last_heard().map_or(done_at, |h| h.max(done_at));
            if self.spec.role == Role::Tx || now - quiet_since >= LINGER {
                return Poll::Finished;
            }
        }
        if pass.received + pass.sent > 0 {
            Poll::Busy
        } else {
            Poll::Idle
        }
    }

    fn is_finite(&self) -> bool {
        self.spec.messages.is_some()
    }

    fn finish(&mut self) -> Result<(), String> {
        let s = self.sink.stats();
        if let Some(f) = &self.failure {
            let what = match self.spec.role {
                Role::Tx => format!(
                    "{} messages sent, {} of them not acknowledged",
                    self.next,
                    self.ep.unacked(Channel::Data)
                ),
                Role::Rx => format!("{} messages delivered intact", s.ok),
            };
            let of = self
                .spec
                .messages
                .map_or(String::new(), |m| format!(" of {m}"));
            return Err(format!("{f} ({what}{of})"));
        }
        if s.corrupt > 0 || s.duplicate > 0 || s.out_of_order > 0 {
            return Err(format!(
                "delivery check failed: {} corrupt, {} duplicate, {} out of order",
                s.corrupt, s.duplicate, s.out_of_order
            ));
        }
        self.out.finish()
    }

    fn detail(&self) -> Option<serde_json::Value> {
        let secs = match (self.started, self.finished) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let bytes = match self.spec.role {
            Role::Tx => {
                self.next.min(self.spec.messages.unwrap_or(u64::MAX)) * self.spec.size as u64
            }
            // Delivered after the first delivery, over the time since it.
            Role::Rx => self.sink.stats().bytes.saturating_sub(self.first_bytes),
        };
        Some(serde_json::json!({
            "role": if self.spec.role == Role::Tx { "tx" } else { "rx" },
            "messages": if self.spec.role == Role::Tx { self.next } else { self.sink.stats().ok },
            "message_bytes": self.spec.size,
            "seconds_to_complete": secs,
            "goodput_bps": if secs > 0.0 { bytes as f64 * 8.0 / secs } else { 0.0 },
            "endpoint": self.ep.stats(),
            "check": self.sink.stats(),
            "latency_ns": Summary::of(&self.latency),
            "failure": self.failure,
            "dead_reason": self.ep.dead_reason(),
            "peer": self.peer,
            "unacked": self.ep.unacked(Channel::Data),
        }))
    }
}
