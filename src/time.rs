//! Time as protocol cores see it.
//!
//! Sans-IO cores never read a clock: the caller passes an [`Instant`] in. It is a
//! plain count of nanoseconds from an arbitrary origin (a simulation's zero, or the
//! runtime's [`Clock`] start), so tests drive cores on simulated time and the
//! runtime drives them on the monotonic clock with the same code.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an origin chosen by whoever drives the core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant { nanos: 0 };
    /// The largest representable instant; useful as "never".
    pub const MAX: Instant = Instant { nanos: u64::MAX };

    /// An instant `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant { nanos }
    }

    /// An instant `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Instant {
            nanos: micros.saturating_mul(1_000),
        }
    }

    /// An instant `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Instant {
            nanos: millis.saturating_mul(1_000_000),
        }
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Seconds since the origin, as a float (for reports, never for arithmetic).
    pub fn as_secs_f64(self) -> f64 {
        self.nanos as f64 * 1e-9
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }

    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant {
            nanos: self.nanos.saturating_add(duration_nanos(d)),
        }
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX` (584 years).
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

/// Reads CLOCK_MONOTONIC as an absolute [`Instant`] (nanoseconds since boot).
///
/// Absolute, so stamps written by one process are comparable by another on the
/// same host; monotonic, never CLOCK_REALTIME (which steps under NTP). The
/// vDSO makes it a few tens of nanoseconds: the runtime reads it once per pass
/// over an lcore's stages, never per packet.
pub fn monotonic_now() -> Instant {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists
    // on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Instant::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// What stamps add to CLOCK_MONOTONIC: zero (stamps are monotonic time), or
/// CLOCK_TAI minus CLOCK_MONOTONIC once [`use_tai_stamps`] ran. Both clocks
/// tick at the same (disciplined) rate, so the difference only moves when
/// the system clock is stepped; it is read again before every trial.
static STAMP_OFFSET: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A stamp's time for the monotonic instant `now`: `now` itself, or CLOCK_TAI
/// at `now` when this process stamps on TAI (hosts with `clock = "tai"`,
/// where a stamp written on one host is read on another). One relaxed load,
/// no system call.
pub fn stamp_ns(now: Instant) -> u64 {
    now.as_nanos()
        .wrapping_add(STAMP_OFFSET.load(std::sync::atomic::Ordering::Relaxed))
}

/// Reads CLOCK_TAI (what PTP's phc2sys disciplines, with `clock = "tai"`).
pub fn tai_now() -> Instant {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_TAI exists on Linux
    // since 3.10, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_TAI, &mut ts) };
    Instant::from_nanos(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Makes this process's stamps CLOCK_TAI time (see [`stamp_ns`]): the
/// difference to CLOCK_MONOTONIC from the closest of a few paired reads.
pub fn use_tai_stamps() {
    let mut best = (u64::MAX, 0u64);
    for _ in 0..5 {
        let a = monotonic_now().as_nanos();
        let t = tai_now().as_nanos();
        let b = monotonic_now().as_nanos();
        let spread = b - a;
        if spread < best.0 {
            best = (spread, t.wrapping_sub(a + spread / 2));
        }
    }
    STAMP_OFFSET.store(best.1, std::sync::atomic::Ordering::Relaxed);
}

/// The runtime's clock: CLOCK_MONOTONIC (see [`monotonic_now`]). Only ports,
/// stages and the runtime read it; protocol cores receive its [`Instant`]s.
///
/// [`Clock::now`] is absolute (nanoseconds since boot, comparable between
/// processes on one host, which stamps need); [`Clock::elapsed`] is the time
/// since this clock was made, for durations and reports.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose `elapsed` starts now.
    pub fn new() -> Self {
        Clock {
            origin: monotonic_now(),
        }
    }

    /// The current instant (absolute).
    pub fn now(&self) -> Instant {
        monotonic_now()
    }

    /// Time since this clock was made.
    pub fn elapsed(&self) -> Duration {
        monotonic_now() - self.origin
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_micros(5);
        assert_eq!(t.as_nanos(), 5_000);
        assert_eq!(t + Duration::from_nanos(7), Instant::from_nanos(5_007));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_micros(5));
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
    }

    #[test]
    fn clock_is_monotonic() {
        let c = Clock::new();
        let a = c.now();
        let b = c.now();
        assert!(b >= a);
    }

    #[test]
    fn elapsed_counts_from_the_clock_not_from_boot() {
        // `now` is absolute (since boot); `elapsed` must start near zero.
        let c = Clock::new();
        assert!(c.elapsed() < Duration::from_secs(1));
        assert!(c.now() - Instant::ZERO > c.elapsed());
    }
}
