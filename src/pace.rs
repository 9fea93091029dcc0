//! Arrival processes: when a generator's (or a pcap replay's) packets fall due.
//!
//! Sans-IO: a [`Pacer`] holds no clock. Given the time since its trial began
//! it says how many packets are due by then ([`Pacer::due_by`]), a count that
//! never decreases; the generator sends what is due less what it attempted.
//! The processes, all at the same mean rate:
//!
//! - [`Pace::Constant`]: packet `i` (from 1) is due at `i / rate`;
//! - [`Pace::Poisson`]: exponential gaps of mean `1 / rate`, from a seeded
//!   generator, so a seed gives the same departures every run;
//! - [`Pace::Burst`]: trains of `len` packets due at once (sent back to back),
//!   train `k` (from 1) at `k * len / rate`: on, then off for the rest of the
//!   period.
//!
//! None of them changes a trial's offered count: the generator stops at
//! `floor(rate * duration)` (or `count`) and sends what the process has not
//! yet released by the end in its last bursts, so every pace offers exactly
//! as many packets.

use crate::rng::SplitMix64;

/// An arrival process (the generator's `pace` key).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// Evenly spaced packets (the default).
    Constant,
    /// Exponential gaps, seeded.
    Poisson {
        /// Seed of the gaps.
        seed: u64,
    },
    /// Trains of `len` packets back to back, `len / rate` apart.
    Burst {
        /// Packets per train.
        len: u64,
    },
}

impl Pace {
    /// The name written in a pipeline file.
    pub fn name(&self) -> &'static str {
        match self {
            Pace::Constant => "constant",
            Pace::Poisson { .. } => "poisson",
            Pace::Burst { .. } => "burst",
        }
    }

    /// The same process for replica `index` of a replicated generator: its
    /// own seed, so replicas do not send in lockstep.
    pub fn for_replica(self, index: usize) -> Pace {
        match self {
            Pace::Poisson { seed } => Pace::Poisson {
                seed: seed.wrapping_add(index as u64),
            },
            p => p,
        }
    }

    /// Packets that may fall due at one instant (a train for
    /// [`Pace::Burst`], else 1): the generator's lag allowance covers them.
    pub fn clump(&self) -> u64 {
        match self {
            Pace::Burst { len } => *len,
            _ => 1,
        }
    }
}

/// One trial's arrival process on virtual time: nanoseconds since it began.
#[derive(Debug, Clone)]
pub struct Pacer {
    pace: Pace,
    /// Packets per nanosecond.
    rate_ns: f64,
    rng: SplitMix64,
    /// Packets released so far (Poisson).
    due: u64,
    /// When the next packet falls due, in ns since the start (Poisson).
    next_ns: f64,
}

impl Pacer {
    /// A process at `rate_pps` (> 0) packets/s.
    pub fn new(pace: Pace, rate_pps: f64) -> Self {
        let seed = match pace {
            Pace::Poisson { seed } => seed,
            _ => 0,
        };
        let mut p = Pacer {
            pace,
            rate_ns: rate_pps * 1e-9,
            rng: SplitMix64::new(seed),
            due: 0,
            next_ns: 0.0,
        };
        if let Pace::Poisson { .. } = pace {
            p.next_ns = p.gap_ns();
        }
        p
    }

    /// An exponential gap of mean `1 / rate`, in ns.
    #[inline]
    fn gap_ns(&mut self) -> f64 {
        // 1 - u is in (0, 1]: the logarithm is finite.
        -(1.0 - self.rng.next_f64()).ln() / self.rate_ns
    }

    /// Packets due by `elapsed_ns` since the start; never decreases as
    /// `elapsed_ns` grows.
    /// Poisson draws one gap per packet released: no allocation.
    #[inline]
    pub fn due_by(&mut self, elapsed_ns: u64) -> u64 {
        let t = elapsed_ns as f64;
        match self.pace {
            Pace::Constant => (self.rate_ns * t) as u64,
            Pace::Burst { len } => ((self.rate_ns * t) as u64 / len) * len,
            Pace::Poisson { .. } => {
                while self.next_ns <= t {
                    self.due += 1;
                    self.next_ns += self.gap_ns();
                }
                self.due
            }
        }
    }

    /// When the next packet falls due after `due` have, in ns since the start
    /// (for a caller that sleeps rather than polls).
    pub fn next_departure_ns(&self, due: u64) -> f64 {
        match self.pace {
            Pace::Constant => (due + 1) as f64 / self.rate_ns,
            Pace::Burst { len } => ((due / len + 1) * len) as f64 / self.rate_ns,
            Pace::Poisson { .. } => self.next_ns,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    /// Departure times (ns) of the first `n` packets, polling every `step` ns.
    fn departures(pace: Pace, rate: f64, n: u64, step: u64) -> Vec<u64> {
        let mut p = Pacer::new(pace, rate);
        let mut out = Vec::new();
        let mut t = 0;
        while (out.len() as u64) < n {
            let due = p.due_by(t);
            while (out.len() as u64) < due.min(n) {
                out.push(t);
            }
            t += step;
        }
        out
    }

    #[test]
    fn constant_is_todays_schedule() {
        let mut p = Pacer::new(Pace::Constant, 1e6);
        for us in 0..10_000u64 {
            let t = us * 1000 + 17;
            assert_eq!(p.due_by(t), (1e6 * t as f64 * 1e-9) as u64);
        }
    }

    #[test]
    fn poisson_mean_rate_and_gap_spread() {
        // 200,000 gaps at 1 Mpps on virtual time: the mean gap is 1 us within
        // 1 %, and the gaps spread as an exponential's do (sd = mean, and
        // P(gap > mean) = 1/e).
        let d = departures(Pace::Poisson { seed: 7 }, 1e6, 200_001, 1);
        let gaps: Vec<f64> = d.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let n = gaps.len() as f64;
        let mean = gaps.iter().sum::<f64>() / n;
        assert!((mean - 1000.0).abs() < 10.0, "mean gap {mean}");
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!((sd / mean - 1.0).abs() < 0.02, "sd {sd} mean {mean}");
        let above = gaps.iter().filter(|&&g| g > mean).count() as f64 / n;
        assert!((above - (-1f64).exp()).abs() < 0.01, "{above}");
    }

    #[test]
    fn poisson_is_seeded() {
        let a = departures(Pace::Poisson { seed: 3 }, 1e5, 1000, 100);
        assert_eq!(a, departures(Pace::Poisson { seed: 3 }, 1e5, 1000, 100));
        assert_ne!(a, departures(Pace::Poisson { seed: 4 }, 1e5, 1000, 100));
        assert_ne!(
            Pace::Poisson { seed: 3 }.for_replica(1),
            Pace::Poisson { seed: 3 }
        );
    }

    #[test]
    fn burst_trains_are_back_to_back_and_evenly_spaced() {
        // 1 Mpps in trains of 8: 8 packets due at once every 8 us.
        let d = departures(Pace::Burst { len: 8 }, 1e6, 800, 100);
        for (k, train) in d.chunks(8).enumerate() {
            assert!(train.iter().all(|&t| t == train[0]), "train {k}: {train:?}");
            // Due at (k + 1) * 8 us: seen at the first poll from then.
            let at = (k as u64 + 1) * 8000;
            assert!(
                (at..=at + 100).contains(&train[0]),
                "train {k} at {}",
                train[0]
            );
        }
    }

    proptest! {
        #[test]
        fn due_never_decreases_nor_runs_ahead_of_constant(
            rate in 1.0f64..1e8,
            len in 1u64..512,
            times in proptest::collection::vec(0u64..2_000_000_000, 1..50),
        ) {
            let mut times = times;
            times.sort_unstable();
            for pace in [Pace::Constant, Pace::Burst { len }, Pace::Poisson { seed: len }] {
                // Poisson draws a gap per packet: at most 1e5 of them here.
                let rate = if pace.clump() == 1 && pace != Pace::Constant { rate.min(5e4) } else { rate };
                let mut p = Pacer::new(pace, rate);
                let mut last = 0;
                for &t in &times {
                    let due = p.due_by(t);
                    prop_assert!(due >= last);
                    // Constant and burst never get ahead of the even schedule;
                    // burst is at most one train behind it.
                    let even = (rate * t as f64 * 1e-9) as u64;
                    if let Pace::Burst { len } = pace {
                        prop_assert!(due <= even && even - due < len);
                        prop_assert_eq!(due % len, 0);
                    }
                    last = due;
                }
                if let Pace::Poisson { .. } = pace {
                    // What was released stays released.
                    prop_assert_eq!(p.due_by(times[0]), last);
                }
            }
        }

        #[test]
        fn next_departure_is_when_the_count_steps(rate in 1e3f64..1e7, len in 1u64..64, due in 0u64..10_000) {
            for pace in [Pace::Constant, Pace::Burst { len }] {
                let mut p = Pacer::new(pace, rate);
                let d = due - due % pace.clump();
                let t = p.next_departure_ns(d);
                prop_assert!(p.due_by(t.ceil() as u64 + 1) > d);
                prop_assert!(p.due_by((t - 2.0).max(0.0) as u64) <= d);
            }
        }
    }
}
