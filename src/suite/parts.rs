//! The parts of one frame size, in order: throughput (the NDR/PDR search),
//! latency at loads, back-to-back frames and the frame-loss rate curve.
//! Each part measures through the size's [`SuiteDut`] and leaves its result
//! in the size's [`SizeReport`]; a part already `done` there (from
//! `--resume`) is skipped, and an interrupted search resumes from its trials.

use crate::search::measurer::{MeasureError, Measurer, TrialCounts};
use crate::search::resume::Replay;
use crate::search::searcher::{Outcome, SearchConfig, Searcher, TrialRecord, TrialRequest};
use crate::search::{drive_with, report_of, BinarySearch, MdrSearch};

use super::{BackToBack, FrameSize, LatencyPoint, Load, LossStep, Part, SizeReport, SuiteDut};

/// What one frame size runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SizePlan {
    /// The frame size.
    pub frame: FrameSize,
    /// Its search (the rates are this size's).
    pub search: SearchConfig,
}

/// What every size shares.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteConfig {
    /// The parts to run, in order.
    pub parts: Vec<Part>,
    /// Plain binary search instead of MDR.
    pub binary: bool,
    /// The latency trials' loads.
    pub loads: Vec<Load>,
    /// Duration of a latency or frame-loss trial, s.
    pub trial_s: f64,
    /// Back-to-back repetitions (RFC 9004: 50).
    pub b2b_trials: u32,
    /// The longest burst, as seconds at the burst's rate (RFC 9004: 2 s).
    pub b2b_max_s: f64,
}

/// What the suite's user sees while a size runs.
pub trait Observer {
    /// A part starts at a size; `trials` is how many it expects (a guess
    /// for the searches).
    fn part_starts(&mut self, _frame: &str, _part: Part, _trials: u64) {}
    /// A search trial is about to run.
    fn search_request(&mut self, _req: &TrialRequest) {}
    /// A search trial finished.
    fn search_trial(&mut self, _trial: &TrialRecord, _outcome: &Outcome) {}
    /// Any other trial finished: what it was, and its counts.
    fn trial_done(&mut self, _what: &str, _rate_pps: f64, _duration_s: f64, _c: &TrialCounts) {}
    /// The part ended (finished or not).
    fn part_ends(&mut self) {}
}

/// A `&mut dyn Measurer` as a measurer (for [`Replay`]).
struct ByRef<'a>(&'a mut dyn Measurer);

impl Measurer for ByRef<'_> {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        self.0.measure(rate_pps, duration_s)
    }
}

/// Runs the configured parts of one size into `entry`. An interruption or
/// a measurer failure ends it with that error; what finished is in `entry`.
pub fn run_size(
    plan: &SizePlan,
    cfg: &SuiteConfig,
    dut: &mut dyn SuiteDut,
    entry: &mut SizeReport,
    obs: &mut dyn Observer,
) -> Result<(), MeasureError> {
    for &part in &cfg.parts {
        if entry.done.contains(&part) {
            continue;
        }
        entry.skipped.remove(part.name());
        let result = match part {
            Part::Throughput => throughput(plan, cfg, dut, entry, obs).map(|()| true),
            Part::Latency => latency(cfg, dut, entry, obs),
            Part::B2b => back_to_back(cfg, dut, entry, obs).map(|()| true),
            Part::Loss => loss_curve(cfg, dut, entry, obs).map(|()| true),
        };
        obs.part_ends();
        // A part that lacked its input (latency without an NDR) is not done:
        // a resumed suite that has the input runs it.
        if result? {
            entry.done.push(part);
            entry.done.sort();
        }
    }
    Ok(())
}

fn throughput(
    plan: &SizePlan,
    cfg: &SuiteConfig,
    dut: &mut dyn SuiteDut,
    entry: &mut SizeReport,
    obs: &mut dyn Observer,
) -> Result<(), MeasureError> {
    let mut searcher: Box<dyn Searcher> = if cfg.binary {
        Box::new(BinarySearch::new(plan.search.clone()).map_err(failed)?)
    } else {
        Box::new(MdrSearch::new(plan.search.clone()).map_err(failed)?)
    };
    // An interrupted search of the same configuration continues from its trials.
    let earlier = entry
        .throughput
        .take()
        .filter(|r| r.config == plan.search && r.algorithm == searcher.algorithm())
        .map(|r| r.trials)
        .unwrap_or_default();
    let guess = 4 * plan.search.goals.len() as u64 * (u64::from(plan.search.phases) + 2);
    obs.part_starts(&entry.frame, Part::Throughput, guess);
    let mut m = Replay::new(earlier, ByRef(dut.measurer()));
    // Both callbacks report to the observer, one at a time.
    let cell = std::cell::RefCell::new(obs);
    let result = drive_with(
        searcher.as_mut(),
        &mut m,
        &mut |t, o| cell.borrow_mut().search_trial(t, o),
        &mut |r| cell.borrow_mut().search_request(r),
    );
    let replayed = m.replayed();
    let (mut report, err) = match result {
        Ok(r) => (r, None),
        Err(e) => {
            let mut r = report_of(searcher.as_ref());
            r.bounds_history = e.history;
            r.interrupted = matches!(e.error, MeasureError::Interrupted);
            (r, Some(e.error))
        }
    };
    for t in report.trials.iter_mut().take(replayed) {
        t.resumed = true;
    }
    entry.throughput = Some(report);
    err.map_or(Ok(()), Err)
}

fn failed(e: impl std::fmt::Display) -> MeasureError {
    MeasureError::Failed {
        message: e.to_string(),
        output: String::new(),
    }
}

fn loss_of(c: &TrialCounts) -> f64 {
    if c.offered == 0 {
        0.0
    } else {
        c.offered.saturating_sub(c.received) as f64 / c.offered as f64
    }
}

/// Latency at each load; `false` when there was no NDR and PDR to load
/// the device relative to.
fn latency(
    cfg: &SuiteConfig,
    dut: &mut dyn SuiteDut,
    entry: &mut SizeReport,
    obs: &mut dyn Observer,
) -> Result<bool, MeasureError> {
    entry.latency.clear();
    if let Some(why) = dut.no_latency() {
        entry.skipped.insert("latency".into(), why);
        return Ok(true);
    }
    let (Some(ndr), Some(pdr)) = (entry.ndr(), entry.pdr()) else {
        entry.skipped.insert(
            "latency".into(),
            "no NDR and PDR to load the device relative to (the search found none)".into(),
        );
        return Ok(false);
    };
    obs.part_starts(&entry.frame, Part::Latency, cfg.loads.len() as u64);
    for load in &cfg.loads {
        let rate = load.rate(ndr, pdr);
        let (c, json) = dut.latency_trial(rate, cfg.trial_s)?;
        obs.trial_done(&load.label(), rate, cfg.trial_s, &c);
        entry.latency.push(LatencyPoint {
            load: load.label(),
            rate_pps: rate,
            duration_s: cfg.trial_s,
            offered: c.offered,
            received: c.received,
            loss_ratio: loss_of(&c),
            latency_ns: json.get("latency_ns").cloned().unwrap_or_default(),
            streams: json.get("streams").cloned().unwrap_or_default(),
        });
    }
    Ok(true)
}

/// The longest burst with no loss, by bisection over burst lengths: first
/// the longest allowed, then halves of the interval between the longest
/// that passed and the shortest that failed, to 0.1 % (or one frame).
#[derive(Debug, Clone, PartialEq)]
pub struct BurstSearch {
    passed: u64,
    failed: Option<u64>,
    max: u64,
}

impl BurstSearch {
    /// A search up to `max` frames.
    pub fn new(max: u64) -> BurstSearch {
        BurstSearch {
            passed: 0,
            failed: None,
            max: max.max(1),
        }
    }

    /// The next burst length to try, or `None` when found.
    pub fn next(&self) -> Option<u64> {
        match self.failed {
            None if self.passed < self.max => Some(self.max),
            None => None,
            Some(f) if f - self.passed > (self.passed / 1000).max(1) => {
                Some(self.passed + (f - self.passed) / 2)
            }
            Some(_) => None,
        }
    }

    /// A burst of `n` frames lost `lost`.
    pub fn record(&mut self, n: u64, lost: u64) {
        if lost == 0 {
            self.passed = self.passed.max(n);
        } else {
            self.failed = Some(self.failed.map_or(n, |f| f.min(n)));
        }
    }

    /// The longest burst that passed (0: none did).
    pub fn result(&self) -> u64 {
        self.passed
    }
}

fn back_to_back(
    cfg: &SuiteConfig,
    dut: &mut dyn SuiteDut,
    entry: &mut SizeReport,
    obs: &mut dyn Observer,
) -> Result<(), MeasureError> {
    entry.back_to_back = None;
    if entry.frame == "imix" {
        entry.skipped.insert(
            "b2b".into(),
            "back-to-back is defined for one frame size, not a mix (RFC 9004 3)".into(),
        );
        return Ok(());
    }
    let ndr = entry
        .throughput
        .as_ref()
        .and_then(|r| r.outcome.goals.first());
    if ndr.is_some_and(|g| g.max_rate_is_lower_bound) {
        entry.skipped.insert(
            "b2b".into(),
            "no loss at the maximum rate: bursts at it fill no buffer (RFC 9004 4)".into(),
        );
        return Ok(());
    }
    let rate = entry.max_rate_pps;
    let max = ((rate * cfg.b2b_max_s).floor() as u64).max(1);
    obs.part_starts(&entry.frame, Part::B2b, u64::from(cfg.b2b_trials) * 12);
    let mut trials = Vec::new();
    let mut bursts = Vec::new();
    for _ in 0..cfg.b2b_trials {
        let mut s = BurstSearch::new(max);
        while let Some(n) = s.next() {
            // Half a frame more than n frames' time: the generator offers
            // floor(rate x duration), exactly n.
            let duration = (n as f64 + 0.5) / rate;
            let c = dut.measurer().measure(rate, duration)?;
            let lost = c.offered.saturating_sub(c.received);
            obs.trial_done(&format!("burst {n}"), rate, duration, &c);
            bursts.push((n, lost));
            s.record(n, lost);
        }
        trials.push(s.result());
    }
    let avg = trials.iter().sum::<u64>() as f64 / trials.len().max(1) as f64;
    let throughput = entry.ndr();
    entry.back_to_back = Some(BackToBack {
        rate_pps: rate,
        max_burst: max,
        average_frames: avg,
        min_frames: trials.iter().copied().min().unwrap_or(0),
        at_max: trials.contains(&max),
        implied_buffer_s: avg / rate,
        corrected_buffer_s: throughput.map(|t| avg / rate * (1.0 - t / rate).max(0.0)),
        trials,
        bursts,
    });
    Ok(())
}

fn loss_curve(
    cfg: &SuiteConfig,
    dut: &mut dyn SuiteDut,
    entry: &mut SizeReport,
    obs: &mut dyn Observer,
) -> Result<(), MeasureError> {
    entry.loss_curve.clear();
    obs.part_starts(&entry.frame, Part::Loss, 10);
    let mut clean = 0;
    for step in (1..=10).rev() {
        let percent = f64::from(step * 10);
        let rate = entry.max_rate_pps * percent / 100.0;
        let c = dut.measurer().measure(rate, cfg.trial_s)?;
        obs.trial_done(&format!("{percent}%"), rate, cfg.trial_s, &c);
        let loss_ratio = loss_of(&c);
        entry.loss_curve.push(LossStep {
            percent,
            rate_pps: rate,
            duration_s: cfg.trial_s,
            offered: c.offered,
            received: c.received,
            loss_ratio,
        });
        // RFC 2544 26.3: until two successive trials lose nothing.
        clean = if c.received >= c.offered {
            clean + 1
        } else {
            0
        };
        if clean == 2 {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::search::{SimDut, SimModel};
    use crate::suite::Load;

    /// The simulated device with a latency: its trial JSON carries fields
    /// per stream the suite does not know, to be copied through.
    struct Fake(SimDut, Vec<f64>);

    impl SuiteDut for Fake {
        fn measurer(&mut self) -> &mut dyn Measurer {
            &mut self.0
        }

        fn latency_trial(
            &mut self,
            rate_pps: f64,
            duration_s: f64,
        ) -> Result<(TrialCounts, serde_json::Value), MeasureError> {
            self.1.push(rate_pps);
            let c = self.0.measure(rate_pps, duration_s)?;
            let json = serde_json::json!({
                "latency_ns": {"p50": 1000, "p99": 2000},
                "streams": [{"stream": 0, "latency_ns": {"p50": 1000}, "pdv_ns": {"p50": 7}}],
            });
            Ok((c, json))
        }
    }

    struct Quiet;
    impl Observer for Quiet {}

    #[test]
    fn latency_follows_the_search_and_keeps_the_trials_json() {
        let model = SimModel {
            ndr: 1e6,
            pdr: 1.02e6,
            ..SimModel::default()
        };
        let search = SearchConfig {
            final_duration: 2.0,
            ..SearchConfig::csit()
        };
        let plan = SizePlan {
            frame: FrameSize::Fixed(64),
            search,
        };
        let mut cfg = SuiteConfig {
            parts: vec![Part::Latency],
            binary: false,
            loads: vec![Load::Idle, Load::Pdr(0.5), Load::Ndr(1.0)],
            trial_s: 1.0,
            b2b_trials: 1,
            b2b_max_s: 0.1,
        };
        let mut dut = Fake(SimDut::new(model), Vec::new());
        let mut entry = SizeReport::new(&plan.frame, 29.76e6);
        // No search yet: nothing to load relative to, and not done.
        run_size(&plan, &cfg, &mut dut, &mut entry, &mut Quiet).unwrap();
        assert!(entry.done.is_empty() && entry.latency.is_empty());
        assert!(entry.skipped.contains_key("latency"));
        cfg.parts = vec![Part::Throughput, Part::Latency];
        run_size(&plan, &cfg, &mut dut, &mut entry, &mut Quiet).unwrap();
        assert_eq!(entry.done, [Part::Throughput, Part::Latency]);
        assert!(entry.skipped.is_empty());
        let (ndr, pdr) = (entry.ndr().unwrap(), entry.pdr().unwrap());
        assert_eq!(dut.1, [0.01 * ndr, 0.5 * pdr, ndr]);
        let labels: Vec<&str> = entry.latency.iter().map(|p| p.load.as_str()).collect();
        assert_eq!(labels, ["idle", "50% PDR", "NDR"]);
        assert_eq!(entry.latency[1].streams[0]["pdv_ns"]["p50"], 7);
        assert_eq!(entry.latency[1].latency_ns["p99"], 2000);
    }

    #[test]
    fn burst_search_finds_the_buffer() {
        for buffer in [0u64, 1, 7, 1000, 123_457, 2_999_999, 3_000_000, 5_000_000] {
            let mut s = BurstSearch::new(3_000_000);
            let mut n_trials = 0;
            while let Some(n) = s.next() {
                s.record(n, u64::from(n > buffer));
                n_trials += 1;
            }
            let r = s.result();
            let want = buffer.min(3_000_000);
            assert!(
                r <= want && want - r <= (want / 1000).max(1),
                "{buffer}: {r}"
            );
            assert!(n_trials <= 25, "{buffer}: {n_trials}");
        }
    }
}
