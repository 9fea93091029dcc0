//! A simulated, seeded, lossy link on virtual time, and a [`Pair`] of
//! endpoints joined by two of them (quinn's `tests/util.rs` idea).
//!
//! The [`Link`] is one direction of a wire: a TX ring of `queue` packets
//! drained at `bandwidth`, a propagation `latency`, and impairments (random
//! loss, Gilbert–Elliott loss bursts, duplication, reordering by extra delay).
//! It moves byte datagrams in and out with explicit `now` arguments, exactly
//! what a pipeline stage does with a port's RX/TX bursts, so the stage version
//! is a thin wrapper: `Link::send` becomes the port's `tx_burst`, `Link::recv`
//! its `rx_burst`, and the impairments move into the mem wire.
//!
//! Nothing here sleeps or reads a clock: [`Pair::step`] jumps to the next
//! wakeup of either endpoint or either link.

use super::driver::{pump, DatagramTx};
use super::endpoint::{Config, Endpoint, Event};
use crate::time::{duration_nanos, Instant};
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// A small seeded PRNG (SplitMix64); deterministic across platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }

    /// Uniform in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
}

/// One direction's properties and impairments.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub latency: Duration,
    /// Serialization rate in bits per second (0: infinite).
    pub bandwidth_bps: u64,
    /// TX ring capacity in packets; a full ring pushes back on the sender.
    pub queue: usize,
    /// Independent random loss probability.
    pub loss: f64,
    /// Probability of entering a loss burst per packet (Gilbert–Elliott).
    pub burst_enter: f64,
    /// Probability of leaving a loss burst per packet; every packet in a burst is lost.
    pub burst_exit: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is held back by up to `reorder_delay`.
    pub reorder: f64,
    /// Largest extra delay of a reordered packet.
    pub reorder_delay: Duration,
    /// Largest extra delay of every packet, drawn uniformly from
    /// `[0, jitter]` (0: none): what a busy relay or a descheduled
    /// forwarding process adds.
    pub jitter: Duration,
    /// Jitter keeps the packets in order (a FIFO relay: a packet never
    /// overtakes the one sent before it) rather than reordering them.
    pub jitter_ordered: bool,
}

impl Default for LinkConfig {
    /// 10 Gb/s, 10 us, a 64-packet ring, no impairment.
    fn default() -> LinkConfig {
        LinkConfig {
            latency: Duration::from_micros(10),
            bandwidth_bps: 10_000_000_000,
            queue: 64,
            loss: 0.0,
            burst_enter: 0.0,
            burst_exit: 1.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(20),
            jitter: Duration::ZERO,
            jitter_ordered: true,
        }
    }
}

impl LinkConfig {
    /// The default link with random loss `p`.
    pub fn lossy(p: f64) -> LinkConfig {
        LinkConfig {
            loss: p,
            ..LinkConfig::default()
        }
    }
}

/// What a link did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets accepted for sending.
    pub sent: u64,
    /// Packets lost (random or burst).
    pub lost: u64,
    /// Packets dropped by the test filter.
    pub filtered: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Packets delayed out of order.
    pub reordered: u64,
    /// Packets handed to the receiver.
    pub delivered: u64,
    /// Bytes handed to the receiver.
    pub delivered_bytes: u64,
}

/// A test hook: return `false` to drop the packet.
pub type Filter = Box<dyn FnMut(&[u8]) -> bool + Send>;

/// One direction of a simulated wire.
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    departures: VecDeque<Instant>,
    busy_until: Instant,
    in_flight: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    order: u64,
    in_burst: bool,
    /// Latest arrival scheduled so far (ordered jitter never goes below it).
    last_arrive: Instant,
    filter: Option<Filter>,
    stats: LinkStats,
}

impl core::fmt::Debug for Link {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Link")
            .field("cfg", &self.cfg)
            .field("in_flight", &self.in_flight.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Link {
    /// A link with its own seed.
    pub fn new(cfg: LinkConfig, seed: u64) -> Link {
        Link {
            cfg,
            rng: Rng::new(seed),
            departures: VecDeque::new(),
            busy_until: Instant::ZERO,
            in_flight: BinaryHeap::new(),
            order: 0,
            in_burst: false,
            last_arrive: Instant::ZERO,
            filter: None,
            stats: LinkStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// The configuration (impairments may be changed mid-run).
    pub fn config_mut(&mut self) -> &mut LinkConfig {
        &mut self.cfg
    }

    /// Installs (or removes) a drop filter.
    pub fn set_filter(&mut self, f: Option<Filter>) {
        self.filter = f;
    }

    fn retire(&mut self, now: Instant) {
        while self.departures.front().is_some_and(|&d| d <= now) {
            self.departures.pop_front();
        }
    }

    /// The TX ring has room at `now`.
    pub fn can_send(&mut self, now: Instant) -> bool {
        self.retire(now);
        self.departures.len() < self.cfg.queue.max(1)
    }

    /// When the TX ring next frees a place (if it is full).
    pub fn room_at(&self) -> Option<Instant> {
        if self.departures.len() >= self.cfg.queue.max(1) {
            self.departures.front().copied()
        } else {
            None
        }
    }

    /// Puts a datagram on the wire at `now` (the caller checks [`Link::can_send`]).
    pub fn send(&mut self, now: Instant, bytes: &[u8]) {
        self.stats.sent += 1;
        let ser = if self.cfg.bandwidth_bps == 0 {
            0
        } else {
            (bytes.len() as u64 * 8 * 1_000_000_000).div_ceil(self.cfg.bandwidth_bps)
        };
        let depart = self.busy_until.max(now) + Duration::from_nanos(ser);
        self.busy_until = depart;
        self.departures.push_back(depart);
        if let Some(f) = &mut self.filter {
            if !f(bytes) {
                self.stats.filtered += 1;
                return;
            }
        }
        if self.in_burst {
            if self.rng.chance(self.cfg.burst_exit) {
                self.in_burst = false;
            }
        } else if self.rng.chance(self.cfg.burst_enter) {
            self.in_burst = true;
        }
        if self.in_burst || self.rng.chance(self.cfg.loss) {
            self.stats.lost += 1;
            return;
        }
        let copies = if self.rng.chance(self.cfg.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut arrive = depart + self.cfg.latency;
            if self.rng.chance(self.cfg.reorder) {
                self.stats.reordered += 1;
                let extra = self.rng.below(duration_nanos(self.cfg.reorder_delay) + 1);
                arrive += Duration::from_nanos(extra);
            }
            if !self.cfg.jitter.is_zero() {
                let extra = self.rng.below(duration_nanos(self.cfg.jitter) + 1);
                arrive += Duration::from_nanos(extra);
                if self.cfg.jitter_ordered {
                    arrive = arrive.max(self.last_arrive);
                }
            }
            self.last_arrive = self.last_arrive.max(arrive);
            self.order += 1;
            self.in_flight
                .push(Reverse((arrive, self.order, bytes.to_vec())));
        }
    }

    /// The next datagram that has arrived by `now`.
    pub fn recv(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self
            .in_flight
            .peek()
            .is_some_and(|Reverse((t, _, _))| *t <= now)
        {
            let Reverse((_, _, p)) = self.in_flight.pop()?;
            self.stats.delivered += 1;
            self.stats.delivered_bytes += p.len() as u64;
            return Some(p);
        }
        None
    }

    /// The next arrival time.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.in_flight.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Packets on the wire.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

/// A link's sending side at a given time, as a [`DatagramTx`].
#[derive(Debug)]
pub struct LinkTx<'a> {
    /// The link.
    pub link: &'a mut Link,
    /// The current time.
    pub now: Instant,
}

impl DatagramTx for LinkTx<'_> {
    fn has_room(&mut self) -> bool {
        self.link.can_send(self.now)
    }
    fn send(&mut self, bytes: &[u8]) {
        self.link.send(self.now, bytes);
    }
}

/// Two endpoints, `a` and `b`, joined by `ab` (a to b) and `ba`.
#[derive(Debug)]
pub struct Pair {
    /// Endpoint a.
    pub a: Endpoint,
    /// Endpoint b.
    pub b: Endpoint,
    /// Link a -> b.
    pub ab: Link,
    /// Link b -> a.
    pub ba: Link,
    /// Virtual time.
    pub now: Instant,
    /// Events a produced, with the time.
    pub a_events: Vec<(Instant, Event)>,
    /// Events b produced, with the time.
    pub b_events: Vec<(Instant, Event)>,
    buf: Vec<u8>,
    blocked: [bool; 2],
}

impl Pair {
    /// Two endpoints with configs `ca`, `cb` over links `lab`, `lba`, seeded.
    pub fn new(ca: Config, cb: Config, lab: LinkConfig, lba: LinkConfig, seed: u64) -> Pair {
        let mtu = ca
            .data_mtu
            .max(ca.priority_mtu)
            .max(cb.data_mtu)
            .max(cb.priority_mtu);
        Pair {
            a: Endpoint::new(ca),
            b: Endpoint::new(cb),
            ab: Link::new(lab, seed ^ 0xa5a5_0001),
            ba: Link::new(lba, seed ^ 0x5a5a_0002),
            now: Instant::ZERO,
            a_events: Vec::new(),
            b_events: Vec::new(),
            buf: vec![0; mtu.max(2048)],
            blocked: [false; 2],
        }
    }

    /// The same config both ways over the same link config.
    pub fn symmetric(cfg: Config, link: LinkConfig, seed: u64) -> Pair {
        Pair::new(cfg.clone(), cfg, link.clone(), link, seed)
    }

    fn drive_side(
        ep: &mut Endpoint,
        inbound: &mut Link,
        outbound: &mut Link,
        events: &mut Vec<(Instant, Event)>,
        buf: &mut [u8],
        now: Instant,
    ) -> bool {
        let mut rx = Vec::new();
        while let Some(p) = inbound.recv(now) {
            rx.push(p);
        }
        let mut tx = LinkTx {
            link: outbound,
            now,
        };
        pump(ep, now, rx.iter().map(|p| &p[..]), buf, &mut tx, |e| {
            events.push((now, e))
        })
        .blocked
    }

    /// Runs both endpoints at the current time: deliver arrivals, fire
    /// timers, transmit while the links take it, collect events.
    pub fn drive(&mut self) {
        let now = self.now;
        self.blocked[0] = Self::drive_side(
            &mut self.a,
            &mut self.ba,
            &mut self.ab,
            &mut self.a_events,
            &mut self.buf,
            now,
        );
        self.blocked[1] = Self::drive_side(
            &mut self.b,
            &mut self.ab,
            &mut self.ba,
            &mut self.b_events,
            &mut self.buf,
            now,
        );
    }

    /// The next time anything can happen.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let mut cands = [
            self.a.poll_timeout(),
            self.b.poll_timeout(),
            self.ab.next_arrival(),
            self.ba.next_arrival(),
            if self.blocked[0] {
                self.ab.room_at()
            } else {
                None
            },
            if self.blocked[1] {
                self.ba.room_at()
            } else {
                None
            },
        ];
        cands.sort_unstable();
        cands.into_iter().flatten().next()
    }

    /// Drives at the current time, then jumps to the next wakeup. Returns
    /// `false` when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.drive();
        match self.next_wakeup() {
            Some(t) => {
                self.now = if t > self.now {
                    t
                } else {
                    self.now + Duration::from_nanos(1)
                };
                true
            }
            None => false,
        }
    }

    /// Like [`Pair::step`], but never jumps past `at` (for callers that
    /// inject sends on a schedule). Returns `false` when nothing is left to
    /// happen before `at` and time already reached it.
    pub fn step_to(&mut self, at: Instant) -> bool {
        self.drive();
        let next = self.next_wakeup().map_or(at, |t| t.min(at));
        if next > self.now {
            self.now = next;
            true
        } else if self.now < at {
            self.now += Duration::from_nanos(1);
            true
        } else {
            false
        }
    }

    /// Steps until `done(self)` holds or virtual time passes `limit`; returns whether `done` held.
    pub fn run_until(&mut self, limit: Instant, mut done: impl FnMut(&Pair) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.now > limit || !self.step() {
                return done(self);
            }
        }
    }
}
