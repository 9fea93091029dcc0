//! Delay variation per stream: RFC 3393 IPDV, RFC 5481 PDV and RFC 3550
//! inter-arrival jitter.
//!
//! - IPDV (RFC 3393, reported as RFC 5481 section 4.1 recommends): `D(i) -
//!   D(i-1)` of two packets consecutive in sequence number that arrive one
//!   right after the other; a pair broken by loss or reordering gives no
//!   sample. Signed: recorded in two histograms, magnitudes of the negative
//!   differences in one and the others (zero included) in the other, so its
//!   percentiles are those of the signed values with the latency histograms'
//!   precision (3 significant digits), and they merge exactly.
//! - PDV (RFC 5481 section 4.2): each packet's delay minus the stream's
//!   smallest; its percentiles come from the latency histogram itself
//!   ([`PdvSummary::of`]).
//! - Jitter (RFC 3550 section 6.4.1): `J += (|D(i-1,i)| - J) / 16` over
//!   consecutive arrivals (not necessarily in sequence), in ns. It cannot be
//!   merged exactly: a stream received by several analyzers reports the mean
//!   of their values weighted by the differences each averaged.
//!
//! A delay is the 32-bit wrapping latency of a stamp
//! ([`crate::traffic::stamp::latency_ns`]); differences of two delays are
//! taken modulo 2^32 as signed 32-bit numbers, exact below 2.1 s of variation
//! whatever the offset between the sender's and the receiver's clocks.

use hdrhistogram::Histogram;

use super::new_histogram;

/// Signed samples in two histograms: `pos` holds the values >= 0, `neg` the
/// magnitudes of the negative ones.
#[derive(Clone, Debug, PartialEq)]
pub struct SignedHistogram {
    /// Values >= 0.
    pub pos: Histogram<u64>,
    /// Magnitudes of the values < 0.
    pub neg: Histogram<u64>,
}

impl Default for SignedHistogram {
    fn default() -> Self {
        SignedHistogram {
            pos: new_histogram(),
            neg: new_histogram(),
        }
    }
}

impl SignedHistogram {
    /// Records one value (saturating at [`super::HIGHEST_NS`] either way).
    #[inline]
    pub fn record(&mut self, v: i64) {
        if v >= 0 {
            self.pos.saturating_record(v as u64);
        } else {
            self.neg.saturating_record(v.unsigned_abs());
        }
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.pos.len() + self.neg.len()
    }

    /// Whether there are no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Empties it in place.
    pub fn reset(&mut self) {
        self.pos.reset();
        self.neg.reset();
    }

    /// Adds another's samples (exact for histograms of the same bounds).
    pub fn add(&mut self, other: &SignedHistogram) {
        self.pos = super::merge([&self.pos, &other.pos]);
        self.neg = super::merge([&self.neg, &other.neg]);
    }

    /// The `rank`-th smallest value (1-based, clamped to the samples), as
    /// HdrHistogram reports a percentile: the highest value its bucket holds
    /// (for a negative value, the bucket of its magnitude's lowest).
    pub fn value_at_rank(&self, rank: u64) -> i64 {
        let n_neg = self.neg.len();
        let rank = rank.clamp(1, self.len().max(1));
        if rank <= n_neg {
            // The rank-th smallest signed value is the (n_neg - rank + 1)-th
            // smallest magnitude, negated.
            let m = nth_bucket(&self.neg, n_neg - rank + 1);
            -(self.neg.lowest_equivalent(m) as i64)
        } else {
            nth_bucket(&self.pos, rank - n_neg) as i64
        }
    }

    /// The value at quantile `q` (0..=1): rank `max(1, ceil(q * n))`, as
    /// HdrHistogram counts it.
    pub fn value_at_quantile(&self, q: f64) -> i64 {
        let rank = (q.clamp(0.0, 1.0) * self.len() as f64).ceil() as u64;
        self.value_at_rank(rank.max(1))
    }
}

/// The highest value equivalent to the `k`-th smallest sample (1-based).
fn nth_bucket(h: &Histogram<u64>, k: u64) -> u64 {
    let mut seen = 0;
    for v in h.iter_recorded() {
        seen += v.count_at_value();
        if seen >= k {
            return v.value_iterated_to();
        }
    }
    h.max()
}

/// The summary of a signed distribution (IPDV), in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SignedSummary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest (most negative).
    pub min: i64,
    /// Median.
    pub p50: i64,
    /// 90th percentile.
    pub p90: i64,
    /// 99th percentile.
    pub p99: i64,
    /// 99.9th percentile.
    pub p999: i64,
    /// Largest.
    pub max: i64,
}

impl SignedSummary {
    /// Summarises a signed histogram (all zero when empty).
    pub fn of(h: &SignedHistogram) -> SignedSummary {
        if h.is_empty() {
            return SignedSummary::default();
        }
        let min = if h.neg.is_empty() {
            h.pos.min() as i64
        } else {
            -(h.neg.max() as i64)
        };
        let max = if h.pos.is_empty() {
            -(h.neg.min() as i64)
        } else {
            h.pos.max() as i64
        };
        SignedSummary {
            samples: h.len(),
            min,
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max,
        }
    }
}

/// PDV percentiles (RFC 5481): delay minus the stream's smallest delay, in ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PdvSummary {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl PdvSummary {
    /// From a stream's latency histogram: each percentile minus the minimum
    /// (exact to the histogram's precision; all zero when empty).
    pub fn of(latency: &Histogram<u64>) -> PdvSummary {
        let s = super::Summary::of(latency);
        PdvSummary {
            p50: s.p50 - s.min,
            p90: s.p90 - s.min,
            p99: s.p99 - s.min,
            p999: s.p999 - s.min,
            max: s.max - s.min,
        }
    }
}

/// The difference of two 32-bit wrapping delays, `later - earlier`, in ns.
#[inline]
pub fn delay_diff(later: u64, earlier: u64) -> i64 {
    i64::from((later as u32).wrapping_sub(earlier as u32) as i32)
}

/// One stream's delay variation, recorded per packet (sans-IO, allocation
/// free after [`Default`]).
#[derive(Clone, Debug, Default)]
pub struct Variation {
    /// IPDV samples.
    pub ipdv: SignedHistogram,
    /// RFC 3550 jitter after the last packet, ns.
    pub jitter_ns: f64,
    /// Differences the jitter has averaged (arrivals after the first).
    pub jitter_samples: u64,
    /// The last packet's sequence number and delay.
    last: Option<(u64, u64)>,
}

impl Variation {
    /// Accounts a packet of sequence number `seq` whose delay was `delay_ns`,
    /// in arrival order.
    #[inline]
    pub fn record(&mut self, seq: u64, delay_ns: u64) {
        if let Some((last_seq, last_delay)) = self.last {
            let d = delay_diff(delay_ns, last_delay);
            if seq == last_seq.wrapping_add(1) {
                self.ipdv.record(d);
            }
            self.jitter_ns += (d.unsigned_abs() as f64 - self.jitter_ns) / 16.0;
            self.jitter_samples += 1;
        }
        self.last = Some((seq, delay_ns));
    }

    /// Clears for a new trial (keeps the histograms' memory).
    pub fn reset(&mut self) {
        self.ipdv.reset();
        self.jitter_ns = 0.0;
        self.jitter_samples = 0;
        self.last = None;
    }

    /// The IPDV summary.
    pub fn ipdv_summary(&self) -> SignedSummary {
        SignedSummary::of(&self.ipdv)
    }
}

/// The jitter of a stream received by several analyzers: the mean of theirs
/// weighted by the differences each averaged (0 without any).
pub fn merged_jitter<'a>(parts: impl IntoIterator<Item = &'a Variation>) -> f64 {
    let (mut sum, mut n) = (0.0, 0u64);
    for v in parts {
        sum += v.jitter_ns * v.jitter_samples as f64;
        n += v.jitter_samples;
    }
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn run(packets: &[(u64, u64)]) -> Variation {
        let mut v = Variation::default();
        for &(seq, d) in packets {
            v.record(seq, d);
        }
        v
    }

    #[test]
    fn ipdv_pairs_consecutive_sequence_numbers_only() {
        // Delays 100, 130, 90 for 0, 1, 2; 3 lost; 4 at 95; 6 before 5.
        let v = run(&[(0, 100), (1, 130), (2, 90), (4, 95), (6, 120), (5, 80)]);
        // Pairs (0,1) +30 and (1,2) -40; 4 follows 2, 6 follows 4, 5 follows 6.
        let s = v.ipdv_summary();
        assert_eq!(s.samples, 2);
        assert_eq!((s.min, s.max), (-40, 30));
        assert_eq!(s.p50, -40);
        assert_eq!(s.p90, 30);
        // Jitter over every arrival: |D| = 30, 40, 5, 25, 40.
        let mut j = 0.0f64;
        for d in [30.0, 40.0, 5.0, 25.0, 40.0] {
            j += (d - j) / 16.0;
        }
        assert_eq!(v.jitter_ns, j);
        assert_eq!(v.jitter_samples, 5);
        // By hand: 1.875, 4.2578125, 4.3042..., 5.5977..., 7.7478...
        assert!((v.jitter_ns - 7.747_830).abs() < 1e-5, "{}", v.jitter_ns);
    }

    #[test]
    fn signed_percentiles_rank_negatives_first() {
        let mut v = Variation::default();
        // IPDV -3, -1, 0, 2, 5, 7, 8, 9, 10, 11 (ten pairs).
        let mut d = 1000u64;
        v.record(0, d);
        for (i, x) in [-3i64, -1, 0, 2, 5, 7, 8, 9, 10, 11].iter().enumerate() {
            d = (d as i64 + x) as u64;
            v.record(i as u64 + 1, d);
        }
        let s = v.ipdv_summary();
        assert_eq!(s.samples, 10);
        assert_eq!((s.min, s.p50, s.p90, s.p99, s.max), (-3, 5, 10, 11, 11));
        assert_eq!(v.ipdv.value_at_rank(1), -3);
        assert_eq!(v.ipdv.value_at_rank(2), -1);
        assert_eq!(v.ipdv.value_at_rank(3), 0);
        // All negative.
        let w = run(&[(0, 50), (1, 40), (2, 10)]);
        let s = w.ipdv_summary();
        assert_eq!((s.min, s.p50, s.max), (-30, -30, -10));
        assert_eq!(
            SignedSummary::of(&SignedHistogram::default()),
            SignedSummary::default()
        );
    }

    #[test]
    fn large_values_keep_three_significant_digits_and_merge() {
        let mut a = SignedHistogram::default();
        let mut b = SignedHistogram::default();
        for i in 1..=1000i64 {
            a.record(i * 1000);
            b.record(-i * 1000);
        }
        let s = SignedSummary::of(&a);
        assert!((s.p50 - 500_000).abs() <= 500, "{s:?}");
        a.add(&b);
        let s = SignedSummary::of(&a);
        assert_eq!(s.samples, 2000);
        assert!((s.min + 1_000_000).abs() <= 1000, "{s:?}");
        // The median of -1000k..-1k, 1k..1000k is the 1000th smallest: -1k.
        assert_eq!(s.p50, -1000);
        assert!((s.p90 - 800_000).abs() <= 800, "{s:?}");
    }

    #[test]
    fn differences_wrap_like_the_stamps() {
        // The sender's clock 1 s ahead: delays near 2^32 wrap to small ones.
        assert_eq!(delay_diff(5, u64::from(u32::MAX) - 4), 10);
        assert_eq!(delay_diff(u64::from(u32::MAX) - 4, 5), -10);
        let v = run(&[(7, u64::from(u32::MAX)), (8, 3)]);
        assert_eq!(v.ipdv_summary().max, 4);
    }

    #[test]
    fn pdv_is_latency_minus_its_minimum() {
        let mut h = new_histogram();
        for v in [1000u64, 1010, 1020, 1500, 3000] {
            h.record(v).unwrap();
        }
        let p = PdvSummary::of(&h);
        // 3000 is in a bucket 2 wide: its highest equivalent is 3001.
        assert_eq!((p.p50, p.p90, p.max), (20, 2001, 2001));
        assert_eq!(PdvSummary::of(&new_histogram()), PdvSummary::default());
    }

    #[test]
    fn merged_jitter_weighs_by_samples() {
        let mut a = Variation::default();
        let mut b = Variation::default();
        (a.jitter_ns, a.jitter_samples) = (10.0, 3);
        (b.jitter_ns, b.jitter_samples) = (30.0, 1);
        assert_eq!(merged_jitter([&a, &b]), 15.0);
        assert_eq!(merged_jitter([&Variation::default()]), 0.0);
    }
}
