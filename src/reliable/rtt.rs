//! RFC 6298 round-trip estimation and retransmit timeout, clamped, with backoff.
//!
//! Two departures from RFC 6298, both QUIC's (RFC 9002 6.2) in spirit:
//!
//! - **The backoff ends with any progress.** RFC 6298 keeps the doubled RTO
//!   until a new RTT sample, and Karn's rule takes samples only from segments
//!   sent once. Under heavy loss most of what a recovery gets acknowledged
//!   was resent, so no sample comes, and the RTO stayed at its maximum for
//!   the rest of a run (50 ms against a 2 ms RTT on a jittery path with 20 %
//!   loss: ours ran 3-4.5x slower than usnic's fixed 5 ms timer). An ACK of
//!   new data proves the path works, as QUIC resets its PTO count on an ACK:
//!   the endpoint calls [`RttEstimator::reset_backoff`] then.
//! - **The backoff is capped relative to the smoothed RTT**: at most
//!   [`BACKOFF_SRTTS`] x SRTT (or twice the un-backed-off RTO, if more), and
//!   never above `max`. Backoff protects a path from a sender that resends
//!   into a congested queue; a few doublings do that, and waiting 25 RTTs for
//!   a hole that one lost resend left only costs goodput. A dead peer is
//!   found by silence (`peer_timeout`), not by a long RTO.

use core::time::Duration;

/// The backed-off RTO stays within this many smoothed RTTs (or twice the
/// base RTO, if that is more).
pub const BACKOFF_SRTTS: u32 = 8;

/// Smoothed RTT, its variation and the resulting retransmit timeout.
///
/// `adaptive = false` turns it into usnic's fixed timer: the RTO stays at
/// `initial` whatever the samples say, and backoff does nothing.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    min: Duration,
    max: Duration,
    granularity: Duration,
    adaptive: bool,
    backoff_shift: u32,
    max_ack_delay: Duration,
}

impl RttEstimator {
    /// A new estimator. `initial` is used until the first sample; every RTO is
    /// clamped to `[min, max]`.
    pub fn new(initial: Duration, min: Duration, max: Duration, adaptive: bool) -> Self {
        let max = max.max(min);
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            rto: initial.clamp(min, max),
            min,
            max,
            granularity: Duration::from_micros(1),
            adaptive,
            backoff_shift: 0,
            max_ack_delay: Duration::ZERO,
        }
    }

    /// Adds the peer's delayed-ACK time to every RTO and sets the clock
    /// granularity (QUIC's PTO does the same: a segment that waits for a
    /// delayed ACK must not look lost), replacing RFC 6298's 1 us default.
    pub fn with_slack(mut self, max_ack_delay: Duration, granularity: Duration) -> Self {
        self.max_ack_delay = max_ack_delay;
        self.granularity = granularity.max(Duration::from_nanos(1));
        self
    }

    /// Feeds one RTT sample (only from segments transmitted once, per Karn).
    /// Resets the backoff.
    pub fn sample(&mut self, rtt: Duration) {
        if !self.adaptive {
            return;
        }
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(rtt);
                // rttvar = 3/4 rttvar + 1/4 |srtt - r|; srtt = 7/8 srtt + 1/8 r
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        self.backoff_shift = 0;
        self.rto = self.base_rto();
    }

    fn base_rto(&self) -> Duration {
        let srtt = self.srtt.unwrap_or(self.rto);
        let k = (self.rttvar * 4).max(self.granularity);
        (srtt + k + self.max_ack_delay).clamp(self.min, self.max)
    }

    /// Doubles the RTO after a timeout (RFC 6298 5.5), up to the backoff cap:
    /// [`BACKOFF_SRTTS`] x SRTT or twice the base RTO, whichever is larger,
    /// and never above the maximum.
    pub fn backoff(&mut self) {
        if !self.adaptive {
            return;
        }
        self.backoff_shift = (self.backoff_shift + 1).min(16);
        let base = self.base_rto();
        let cap = match self.srtt {
            Some(srtt) => (srtt * BACKOFF_SRTTS).max(base * 2),
            None => self.max,
        };
        self.rto = (self.rto * 2).min(cap).min(self.max).max(self.rto);
    }

    /// Ends the backoff: the RTO returns to SRTT + 4 RTTVAR (+ slack). Called
    /// on any ACK of new data, resent or not (QUIC resets its PTO count on
    /// an ACK): the path delivers, so a timeout is again one RTO away.
    pub fn reset_backoff(&mut self) {
        if !self.adaptive || self.backoff_shift == 0 {
            return;
        }
        self.backoff_shift = 0;
        self.rto = self.base_rto();
    }

    /// The current retransmit timeout.
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// The smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// The RTT variation (RFC 6298's RTTVAR), once sampled.
    pub fn rttvar(&self) -> Option<Duration> {
        self.srtt.map(|_| self.rttvar)
    }

    /// Timeouts since the last sample.
    pub fn backoffs(&self) -> u32 {
        self.backoff_shift
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn first_sample_and_smoothing() {
        let mut r = RttEstimator::new(us(5000), us(100), us(100_000), true);
        assert_eq!(r.rto(), us(5000));
        r.sample(us(400));
        // srtt 400, rttvar 200, rto = 400 + 800
        assert_eq!(r.srtt(), Some(us(400)));
        assert_eq!(r.rto(), us(1200));
        r.sample(us(400));
        // rttvar = (600 + 0)/4 = 150, srtt 400 -> 1000
        assert_eq!(r.rto(), us(1000));
        for _ in 0..100 {
            r.sample(us(400));
        }
        // rttvar decays to zero; clamped at min granularity
        assert!(r.rto() >= us(400) && r.rto() < us(420), "{:?}", r.rto());
    }

    #[test]
    fn clamped_and_backoff() {
        let mut r = RttEstimator::new(us(5000), us(200), us(10_000), true);
        r.sample(us(10));
        assert_eq!(r.rto(), us(200));
        r.backoff();
        assert_eq!(r.rto(), us(400));
        for _ in 0..10 {
            r.backoff();
        }
        // Capped at twice the base RTO (8 x the 10 us SRTT is less).
        assert_eq!(r.rto(), us(400));
        assert_eq!(r.backoffs(), 11);
        r.sample(us(10));
        assert_eq!(r.rto(), us(200));
        assert_eq!(r.backoffs(), 0);
        r.sample(Duration::from_secs(5));
        assert_eq!(r.rto(), us(10_000));
    }

    #[test]
    fn backoff_capped_by_srtt_and_reset_by_progress() {
        let mut r = RttEstimator::new(us(5000), us(100), us(50_000), true);
        for _ in 0..100 {
            r.sample(us(1000));
        }
        let base = r.rto();
        assert!(base >= us(1000) && base < us(1100), "{base:?}");
        for _ in 0..10 {
            r.backoff();
        }
        // 8 x SRTT, not rto_max.
        assert_eq!(r.rto(), us(8000));
        assert_eq!(r.backoffs(), 10);
        r.reset_backoff();
        assert_eq!((r.rto(), r.backoffs()), (base, 0));
        // Without a sample yet, the maximum bounds the backoff.
        let mut r = RttEstimator::new(us(5000), us(100), us(50_000), true);
        for _ in 0..10 {
            r.backoff();
        }
        assert_eq!(r.rto(), us(50_000));
        // A wide RTTVAR (jitter) keeps two doublings of its base RTO.
        let mut r = RttEstimator::new(us(5000), us(100), us(50_000), true);
        r.sample(us(100));
        r.sample(us(3000));
        let base = r.rto();
        for _ in 0..10 {
            r.backoff();
        }
        assert_eq!(r.rto(), (base * 2).max(r.srtt().unwrap() * 8));
    }

    #[test]
    fn slack_for_delayed_acks() {
        let mut r =
            RttEstimator::new(us(5000), us(10), us(100_000), true).with_slack(us(50), us(10));
        for _ in 0..100 {
            r.sample(us(400));
        }
        // srtt 400 + max(4 * ~0, 10) + 50
        assert_eq!(r.rto(), us(460));
    }

    #[test]
    fn fixed_timer_ignores_everything() {
        let mut r = RttEstimator::new(us(5000), us(1), Duration::from_secs(1), false);
        r.sample(us(10));
        r.backoff();
        assert_eq!(r.rto(), us(5000));
        assert_eq!(r.srtt(), None);
    }
}
