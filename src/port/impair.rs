//! The impairment engine: seeded loss, a device model, duplication,
//! reordering, delay and jitter, decided per packet. The mem wire applies it
//! on its tx side; the `impair` stage applies it between any two ports, in
//! real time. One engine, so both make the same decisions from the same seed.
//!
//! What happens to a packet, in this order:
//! 1. random loss (`loss`, a probability);
//! 2. the device model (`capacity`, in pps or bps, with a queue of `queue`
//!    packets): the packet departs when the device has served everything before
//!    it; a packet that finds `queue` packets already waiting is tail-dropped;
//! 3. duplication (`duplicate`): a copy follows the packet;
//! 4. reordering (`reorder`): the packet (and its copy, if duplicated) is held
//!    back and sent after the next one (or after [`REORDER_HOLD`] if no next
//!    one comes);
//! 5. fixed delay (`delay`) and jitter (a per-packet extra delay drawn from a
//!    [`Distribution`]): the packet is due `delay + jitter` after departure.
//!    With `keep_order` (and always without jitter) no packet is due before
//!    the one emitted ahead of it, so jitter spreads packets without
//!    reordering them; otherwise a packet may overtake another by its draw.
//!
//! Every decision draws from one seeded generator in a fixed order, so the
//! same seed and packet sequence give the same decisions. What the engine
//! does not pass on is counted by cause in [`ImpairCounters`].

use std::time::Duration;

use crate::buf::counter::Counter;
use crate::buf::{Burst, Packet};
use crate::rng::SplitMix64;
use crate::time::{duration_nanos, Instant};
use crate::units::ETHERNET_L1_OVERHEAD;

/// How long a packet chosen for reordering waits for a successor to overtake it.
pub const REORDER_HOLD: Duration = Duration::from_micros(50);

/// Bytes of FCS that a packet buffer does not hold but the wire carries.
const FCS: u64 = 4;

/// The device model's service rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Capacity {
    /// Packets per second, whatever their size.
    Pps(f64),
    /// Layer-2 bits per second (frame plus FCS).
    L2Bps(f64),
    /// Layer-1 bits per second (plus preamble and inter-frame gap).
    L1Bps(f64),
}

/// The distribution a per-packet jitter is drawn from. Draws below zero are
/// taken as zero (a packet cannot leave before it arrived).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Uniform between `min` and `max`.
    Uniform {
        /// The smallest extra delay.
        min: Duration,
        /// The largest extra delay.
        max: Duration,
    },
    /// Normal with this mean and standard deviation (negative draws are zero).
    Normal {
        /// The mean extra delay.
        mean: Duration,
        /// Its standard deviation.
        stddev: Duration,
    },
    /// Exponential with this mean: mostly small, with a long tail, as a path
    /// through busy queues.
    Exponential {
        /// The mean extra delay.
        mean: Duration,
    },
}

impl Distribution {
    /// Checks the parameters: `Err((key, why))` names the parameter at fault.
    pub fn problem(&self) -> Result<(), (&'static str, String)> {
        match *self {
            Distribution::Uniform { min, max } if min > max => Err((
                "max",
                format!("the uniform range ends ({max:?}) before it starts ({min:?})"),
            )),
            Distribution::Uniform { min, max } if min == max => Err((
                "max",
                format!("a uniform range from {min:?} to {max:?} is no jitter: use `delay`"),
            )),
            Distribution::Normal { stddev, .. } if stddev.is_zero() => Err((
                "stddev",
                "a normal jitter with no spread is no jitter: use `delay`".into(),
            )),
            Distribution::Exponential { mean } if mean.is_zero() => Err((
                "mean",
                "an exponential jitter with mean 0 is no jitter".into(),
            )),
            _ => Ok(()),
        }
    }

    /// One draw, in nanoseconds (sans-IO: simulators in virtual time draw
    /// the same jitter as the stage does in real time).
    #[inline]
    pub fn sample_nanos(&self, rng: &mut SplitMix64) -> u64 {
        let ns = |d: Duration| duration_nanos(d) as f64;
        let x = match *self {
            Distribution::Uniform { min, max } => ns(min) + (ns(max) - ns(min)) * rng.next_f64(),
            Distribution::Normal { mean, stddev } => {
                // Box-Muller; one of the pair is enough.
                let u1 = 1.0 - rng.next_f64();
                let u2 = rng.next_f64();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                ns(mean) + ns(stddev) * z
            }
            Distribution::Exponential { mean } => -ns(mean) * (1.0 - rng.next_f64()).ln(),
        };
        x.max(0.0) as u64
    }
}

/// Per-packet jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter {
    /// What the extra delay is drawn from.
    pub distribution: Distribution,
    /// Whether packets leave in the order they came (a later packet waits for
    /// an earlier one drawn a longer delay) or each when its own delay is up.
    pub keep_order: bool,
}

/// What to do to packets.
#[derive(Debug, Clone, PartialEq)]
pub struct Impairments {
    /// Service rate of the simulated device; `None` is an ideal link.
    pub capacity: Option<Capacity>,
    /// Packets that may wait in the device before tail drop (with a capacity).
    pub queue: u32,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet is duplicated.
    pub duplicate: f64,
    /// Probability that a packet is held back and overtaken by the next one.
    pub reorder: f64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Per-packet extra delay.
    pub jitter: Option<Jitter>,
    /// Seed of the decisions.
    pub seed: u64,
}

impl Default for Impairments {
    fn default() -> Self {
        Impairments {
            capacity: None,
            queue: 1024,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            delay: Duration::ZERO,
            jitter: None,
            seed: 1,
        }
    }
}

impl Impairments {
    /// Whether packets wait before they are due (a device model, a delay or
    /// jitter); otherwise every packet is due at once.
    pub fn timed(&self) -> bool {
        self.capacity.is_some() || !self.delay.is_zero() || self.jitter.is_some()
    }

    /// Whether packets are due in the order they are emitted.
    pub fn ordered(&self) -> bool {
        self.jitter.is_none_or(|j| j.keep_order)
    }
}

/// What the engine did, by cause. Written by one lcore, read by anyone.
#[derive(Debug, Default)]
pub struct ImpairCounters {
    /// Packets lost at random.
    pub lost: Counter,
    /// Packets tail-dropped by the device model.
    pub queue_dropped: Counter,
    /// Copies made.
    pub duplicated: Counter,
    /// Copies not made (the packet could not be cloned).
    pub duplicate_failed: Counter,
    /// Packets overtaken by their successor.
    pub reordered: Counter,
    /// Packets given a fixed delay.
    pub delayed: Counter,
    /// Packets given a jitter draw.
    pub jittered: Counter,
}

impl ImpairCounters {
    /// (cause, count) pairs for a report.
    pub fn pairs(&self) -> [(&'static str, u64); 7] {
        [
            ("lost", self.lost.get()),
            ("queue_dropped", self.queue_dropped.get()),
            ("duplicated", self.duplicated.get()),
            ("duplicate_failed", self.duplicate_failed.get()),
            ("reordered", self.reordered.get()),
            ("delayed", self.delayed.get()),
            ("jittered", self.jittered.get()),
        ]
    }
}

/// The engine: decides each packet's fate and when it is due.
pub struct Impairer {
    config: Impairments,
    rng: SplitMix64,
    /// A packet held for reordering: (packet, its duplicate, due, held since).
    held: Option<(Packet, Option<Packet>, Instant, Instant)>,
    /// Nanoseconds at which the device finishes serving what it has accepted.
    last_departure: u64,
    /// The latest due time emitted (for ordered release).
    last_due: Instant,
    ordered: bool,
}

impl Impairer {
    /// An engine applying `config`.
    pub fn new(config: &Impairments) -> Self {
        Impairer {
            config: config.clone(),
            rng: SplitMix64::new(config.seed),
            held: None,
            last_departure: 0,
            last_due: Instant::ZERO,
            ordered: config.ordered(),
        }
    }

    /// Packets held back for reordering right now (a packet and its copy).
    pub fn held(&self) -> u64 {
        self.held
            .as_ref()
            .map_or(0, |h| 1 + u64::from(h.1.is_some()))
    }

    fn service_nanos(cap: Capacity, len: usize) -> f64 {
        let bits = |extra: u64| (len as u64 + FCS + extra) as f64 * 8.0;
        match cap {
            Capacity::Pps(p) => 1e9 / p,
            Capacity::L2Bps(b) => bits(0) * 1e9 / b,
            Capacity::L1Bps(b) => bits(ETHERNET_L1_OVERHEAD) * 1e9 / b,
        }
    }

    /// Runs the device model; returns the departure time or `None` for a
    /// tail drop.
    fn admit(&mut self, now: Instant, len: usize) -> Option<u64> {
        let Some(cap) = self.config.capacity else {
            return Some(now.as_nanos());
        };
        let service = Self::service_nanos(cap, len);
        let now_ns = now.as_nanos();
        let backlog = self.last_departure.saturating_sub(now_ns) as f64;
        if backlog >= service * f64::from(self.config.queue) {
            return None;
        }
        let departure = self.last_departure.max(now_ns) + service.round() as u64;
        self.last_departure = departure;
        Some(departure)
    }

    /// Emits a packet due at `due`, keeping due times in emission order
    /// when the configuration is ordered.
    #[inline]
    fn emit(&mut self, pkt: Packet, mut due: Instant, out: &mut Vec<(Packet, Instant)>) {
        if self.ordered {
            due = due.max(self.last_due);
            self.last_due = due;
        }
        out.push((pkt, due));
    }

    fn release_held(&mut self, after: Instant, out: &mut Vec<(Packet, Instant)>) {
        if let Some((pkt, copy, due, _)) = self.held.take() {
            // Never due before the packet that overtook it, even unordered.
            let due = due.max(after);
            self.emit(pkt, due, out);
            if let Some(c) = copy {
                self.emit(c, due, out);
            }
        }
    }

    /// Decides the fate of every packet of `pkts` (which ends empty), pushing
    /// the survivors with their due times onto `out`, in emission order.
    pub fn apply(
        &mut self,
        now: Instant,
        pkts: &mut Burst,
        out: &mut Vec<(Packet, Instant)>,
        counters: &ImpairCounters,
    ) {
        let c = &self.config;
        let (loss, dup, reorder) = (c.loss, c.duplicate, c.reorder);
        let delay = duration_nanos(c.delay);
        let jitter = c.jitter.map(|j| j.distribution);
        for pkt in pkts.drain() {
            if loss > 0.0 && self.rng.chance(loss) {
                counters.lost.add(1);
                continue;
            }
            let Some(departure) = self.admit(now, pkt.len()) else {
                counters.queue_dropped.add(1);
                continue;
            };
            let mut due = departure + delay;
            if delay > 0 {
                counters.delayed.add(1);
            }
            if let Some(j) = &jitter {
                due += j.sample_nanos(&mut self.rng);
                counters.jittered.add(1);
            }
            let due = Instant::from_nanos(due);
            let copy = if dup > 0.0 && self.rng.chance(dup) {
                match pkt.try_clone() {
                    Some(c) => {
                        counters.duplicated.add(1);
                        Some(c)
                    }
                    None => {
                        counters.duplicate_failed.add(1);
                        None
                    }
                }
            } else {
                None
            };
            if reorder > 0.0 && self.held.is_none() && self.rng.chance(reorder) {
                // Held, with its copy, until the next packet has gone ahead of it.
                self.held = Some((pkt, copy, due, now));
                continue;
            }
            self.emit(pkt, due, out);
            if let Some(c) = copy {
                self.emit(c, due, out);
            }
            if self.held.is_some() {
                counters.reordered.add(1);
                self.release_held(due, out);
            }
        }
    }

    /// Releases a packet held for reordering once it has waited
    /// [`REORDER_HOLD`] without a successor; returns whether it did.
    pub fn flush(&mut self, now: Instant, out: &mut Vec<(Packet, Instant)>) -> bool {
        match &self.held {
            Some((_, _, _, since)) if now.saturating_duration_since(*since) >= REORDER_HOLD => {
                self.release_held(Instant::ZERO, out);
                true
            }
            _ => false,
        }
    }

    /// Gives up what is held (at stop): the number of packets dropped.
    pub fn discard_held(&mut self) -> u64 {
        let n = self.held();
        self.held = None;
        n
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::{Pool, PoolConfig};

    fn burst(pool: &Pool, first: u32, n: u32) -> Burst {
        let mut b = Burst::new();
        let mut cache = pool.cache();
        cache.alloc_bulk(&mut b, n as usize);
        for (i, p) in b.iter_mut().enumerate() {
            p.set_data(&(first + i as u32).to_be_bytes()).unwrap();
        }
        b
    }

    fn id(p: &Packet) -> u32 {
        u32::from_be_bytes(p.data().try_into().unwrap())
    }

    /// Sends `n` packets, 8 every `step` ns, and returns (id, due) in emission order.
    fn emit_all(config: &Impairments, n: u32, step: u64) -> (Vec<(u32, u64)>, ImpairCounters) {
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let mut e = Impairer::new(config);
        let counters = ImpairCounters::default();
        let mut out = Vec::new();
        let mut got = Vec::new();
        let mut sent = 0;
        let mut now = Instant::ZERO;
        while sent < n {
            let mut b = burst(&pool, sent, 8.min(n - sent));
            sent += b.len() as u32;
            e.apply(now, &mut b, &mut out, &counters);
            now += Duration::from_nanos(step);
            e.flush(now, &mut out);
            got.extend(out.drain(..).map(|(p, t)| (id(&p), t.as_nanos())));
        }
        e.flush(now + REORDER_HOLD, &mut out);
        got.extend(out.drain(..).map(|(p, t)| (id(&p), t.as_nanos())));
        (got, counters)
    }

    fn jitter(distribution: Distribution, keep_order: bool) -> Impairments {
        Impairments {
            delay: Duration::from_micros(100),
            jitter: Some(Jitter {
                distribution,
                keep_order,
            }),
            seed: 9,
            ..Impairments::default()
        }
    }

    #[test]
    fn uniform_jitter_stays_in_its_range_and_keeps_order_when_asked() {
        let d = Distribution::Uniform {
            min: Duration::from_micros(10),
            max: Duration::from_micros(500),
        };
        let (kept, c) = emit_all(&jitter(d, true), 4000, 1000);
        assert_eq!(c.jittered.get(), 4000);
        assert!(
            kept.windows(2).all(|w| w[0].1 <= w[1].1),
            "due times go back"
        );
        let (free, _) = emit_all(&jitter(d, false), 4000, 1000);
        // The same draws: each unordered due time is its arrival + 100 us +
        // U(10, 500) us, and the ordered one never earlier.
        let mut overtaken = 0;
        for (i, ((a, ta), (b, tb))) in free.iter().zip(&kept).enumerate() {
            assert_eq!((a, b), (&(i as u32), &(i as u32)));
            let arrival = (i as u64 / 8) * 1000;
            let extra = ta - arrival - 100_000;
            assert!((10_000..=500_000).contains(&extra), "{extra}");
            assert!(tb >= ta);
            overtaken += u64::from(free[..i].iter().any(|x| x.1 > *ta));
        }
        assert!(overtaken > 1000, "unordered jitter reorders: {overtaken}");
    }

    #[test]
    fn normal_and_exponential_draws_have_their_mean() {
        let mean_of = |d: Distribution| {
            let (got, _) = emit_all(&jitter(d, false), 20_000, 1000);
            let sum: u64 = got
                .iter()
                .map(|(i, t)| t - (u64::from(*i) / 8) * 1000 - 100_000)
                .sum();
            sum as f64 / got.len() as f64 / 1000.0
        };
        let us = Duration::from_micros;
        let normal = mean_of(Distribution::Normal {
            mean: us(200),
            stddev: us(20),
        });
        assert!((195.0..205.0).contains(&normal), "{normal}");
        let exp = mean_of(Distribution::Exponential { mean: us(200) });
        assert!((190.0..210.0).contains(&exp), "{exp}");
    }

    #[test]
    fn nonsensical_distributions_name_their_parameter() {
        let us = Duration::from_micros;
        let bad = [
            (
                Distribution::Uniform {
                    min: us(5),
                    max: us(1),
                },
                "max",
            ),
            (
                Distribution::Normal {
                    mean: us(5),
                    stddev: us(0),
                },
                "stddev",
            ),
            (Distribution::Exponential { mean: us(0) }, "mean"),
        ];
        for (d, key) in bad {
            assert_eq!(d.problem().unwrap_err().0, key);
        }
        assert!(Distribution::Exponential { mean: us(1) }.problem().is_ok());
    }

    #[test]
    fn a_reordered_packet_is_never_due_before_its_overtaker() {
        let config = Impairments {
            reorder: 0.1,
            ..jitter(
                Distribution::Uniform {
                    min: Duration::ZERO,
                    max: Duration::from_micros(300),
                },
                false,
            )
        };
        let (got, c) = emit_all(&config, 5000, 1000);
        assert!(c.reordered.get() > 100);
        assert_eq!(got.len(), 5000);
        for w in got.windows(2) {
            if w[0].0 > w[1].0 {
                assert!(w[1].1 >= w[0].1, "{w:?}");
            }
        }
    }
}
