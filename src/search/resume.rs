//! Interrupted searches keep their results, and continue.
//!
//! [`Interruptible`] wraps any measurer: once the interrupt flag is set (by
//! Ctrl-C or SIGTERM), it measures nothing more and the drive loop stops
//! with [`MeasureError::Interrupted`]; the caller then writes the report of
//! every finished trial, marked `"interrupted": true`.
//!
//! [`Replay`] continues such a report (`linerate search --resume`). The search
//! core is deterministic: given the same configuration and the same results it
//! proposes the same trials. So the earlier trials are handed back as the
//! answers to the first proposals, in order, without measuring, which rebuilds
//! the core's state exactly; the first proposal that differs (it cannot, with
//! the same configuration, but a measurer's answers are not trusted blindly)
//! and every one after the earlier trials run out are measured for real. The
//! configuration check is the caller's ([`check_resumable`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::measurer::{MeasureError, Measurer, TrialCounts};
use super::searcher::TrialRecord;
use super::Report;

/// A measurer that stops when a flag is set, and optionally takes a scaled
/// share of each trial's duration in real time (to watch, or interrupt, a
/// search on the simulated device, whose trials otherwise take no time).
pub struct Interruptible<M> {
    inner: M,
    flag: &'static AtomicBool,
    time_scale: f64,
}

impl<M: Measurer> Interruptible<M> {
    /// Wraps `inner`; each trial first waits `time_scale` times its duration.
    pub fn new(inner: M, flag: &'static AtomicBool, time_scale: f64) -> Self {
        Interruptible {
            inner,
            flag,
            time_scale,
        }
    }

    fn interrupted(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

impl<M: Measurer> Measurer for Interruptible<M> {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        if self.interrupted() {
            return Err(MeasureError::Interrupted);
        }
        let wait = Duration::try_from_secs_f64(duration_s * self.time_scale).unwrap_or_default();
        let start = Instant::now();
        while start.elapsed() < wait {
            if self.interrupted() {
                return Err(MeasureError::Interrupted);
            }
            std::thread::sleep(Duration::from_millis(5).min(wait));
        }
        let counts = self.inner.measure(rate_pps, duration_s)?;
        // A trial during which the signal came is not finished: stopped
        // part-way (or cut short by the signal reaching a child process).
        if self.interrupted() {
            return Err(MeasureError::Interrupted);
        }
        Ok(counts)
    }

    fn probe(&self) -> Option<crate::runtime::run::Probe> {
        self.inner.probe()
    }

    fn hosts_of_trials(&self) -> Vec<serde_json::Value> {
        self.inner.hosts_of_trials()
    }
}

/// Answers the first proposals from an earlier run's trials.
pub struct Replay<M> {
    earlier: VecDeque<TrialRecord>,
    inner: M,
    replayed: usize,
}

impl<M: Measurer> Replay<M> {
    /// Replays `earlier` (in order) before measuring with `inner`.
    pub fn new(earlier: Vec<TrialRecord>, inner: M) -> Self {
        Replay {
            earlier: earlier.into(),
            inner,
            replayed: 0,
        }
    }

    /// How many trials came from the earlier run.
    pub fn replayed(&self) -> usize {
        self.replayed
    }
}

impl<M: Measurer> Measurer for Replay<M> {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        match self.earlier.front() {
            Some(t) if t.rate_pps == rate_pps && t.duration_s == duration_s => {
                let t = self.earlier.pop_front().unwrap_or_else(|| unreachable!());
                self.replayed += 1;
                // `unsent` as recorded includes any shortfall of `offered`,
                // which the new record adds again: give back the measurer's.
                let intended = (rate_pps * duration_s).floor().max(0.0) as u64;
                let shortfall = intended.saturating_sub(t.offered);
                Ok(TrialCounts {
                    offered: t.offered,
                    received: t.received,
                    unsent: t.unsent.map(|u| u.saturating_sub(shortfall)),
                    rx_dropped: t.rx_dropped,
                    tx_pps: t.tx_pps,
                })
            }
            _ => {
                self.earlier.clear();
                self.inner.measure(rate_pps, duration_s)
            }
        }
    }

    fn probe(&self) -> Option<crate::runtime::run::Probe> {
        self.inner.probe()
    }

    fn hosts_of_trials(&self) -> Vec<serde_json::Value> {
        self.inner.hosts_of_trials()
    }
}

/// Whether `earlier` may be continued by a search of `now`: the same
/// algorithm, parameters and goals, and the same device (`source`). The error
/// says what differs.
pub fn check_resumable(earlier: &Report, now: &Report) -> Result<(), String> {
    if earlier.algorithm != now.algorithm {
        return Err(format!(
            "it is a {} search, this is a {} search",
            earlier.algorithm, now.algorithm
        ));
    }
    if earlier.source != now.source {
        return Err(format!(
            "it measured {}, this search measures {}",
            earlier.source.as_deref().unwrap_or("an unknown device"),
            now.source.as_deref().unwrap_or("an unknown device")
        ));
    }
    if earlier.config.goals != now.config.goals {
        let names = |r: &Report| {
            r.config
                .goals
                .iter()
                .map(|g| format!("{}={}", g.name, g.loss_ratio))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(format!(
            "its goals are {}, this search's are {}",
            names(earlier),
            names(now)
        ));
    }
    if earlier.config != now.config {
        return Err(format!(
            "its search parameters differ: {:?} against {:?}",
            earlier.config, now.config
        ));
    }
    Ok(())
}

/// A short, stable digest of a file's bytes (FNV-1a, 64 bits), so a report
/// names the exact pipeline it measured.
pub fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};

    #[test]
    fn a_replayed_search_ends_where_the_full_one_does_with_fewer_new_trials() {
        let model: SimModel = "ndr=3e6,pdr=3.1e6,plr=0.005".parse().unwrap();
        let cfg = SearchConfig {
            final_duration: 10.0,
            ..SearchConfig::csit()
        };
        let full = drive(
            &mut MdrSearch::new(cfg.clone()).unwrap(),
            &mut SimDut::new(model),
            &mut |_, _| {},
        )
        .unwrap();
        let half = full.trials[..full.trials.len() / 2].to_vec();
        let mut replay = Replay::new(half.clone(), SimDut::new(model));
        let resumed = drive(
            &mut MdrSearch::new(cfg).unwrap(),
            &mut replay,
            &mut |_, _| {},
        )
        .unwrap();
        assert_eq!(replay.replayed(), half.len());
        assert_eq!(&resumed.trials[..half.len()], &half[..]);
        for g in &resumed.outcome.goals {
            let truth = model.true_rate(g.goal.loss_ratio, 10.0);
            assert!(g.lower_pps.unwrap() <= truth && truth < g.upper_pps.unwrap());
        }
    }

    #[test]
    fn digests_differ_by_content() {
        assert_ne!(digest(b"a"), digest(b"b"));
        assert_eq!(digest(b""), "cbf29ce484222325");
    }
}
