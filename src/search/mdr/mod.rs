//! The MDR search core (FD.io CSIT's Multiple Drop Rate search, generalised to any number of
//! loss-ratio goals), sans-IO.
//!
//! # Algorithm
//!
//! * **Initial phase**: one trial at the maximum rate gives the MRR (its receive rate), one at
//!   the MRR gives the MRR2, one at the MRR2; every goal's interval starts as (MRR2, MRR).
//! * **Non-initial phases** `1..=P` (intermediate) and the final phase: trial durations grow
//!   geometrically from the initial to the final duration; width goals halve per phase.
//!   Each goal has an interval `(lo, hi)` of grid indices. `lo` is *valid* when its latest
//!   trial met the goal, `hi` when its latest trial failed it (or it is the maximum rate).
//!   The next rate is chosen with the seed's priorities:
//!   1. external search down: a goal whose `lo` is invalid moves down by two interval widths
//!      (the default mode starts gentler, see below);
//!   2. external search up: a goal whose `hi` is invalid moves up by two interval widths;
//!   3. internal search: a goal wider than the phase goal is bisected;
//!   4. re-measurement at the phase's duration: lower bounds, then upper bounds;
//!   5. otherwise the phase ends.
//!
//!   Goals are visited in their configured order inside each priority (NDR before PDR).
//! * The six deviations of the seed: (1) logarithmic rates on a discrete grid ([`Grid`]);
//!   (2) optimistic maximum: increases are capped at the maximum rate, an upper bound there
//!   is valid; (3) pessimistic minimum: decreases are capped at the minimum rate, and a goal
//!   whose lower bound at the minimum rate fails at the phase's duration stops (a clear
//!   failure in the final phase); (4) conservative updates: a trial above a valid upper bound
//!   never moves it, a failing trial below the lower bound always does; (5) sufficient
//!   width: an external step is at least the phase's width goal, and MRR2 is at least the
//!   first phase's width goal below the MRR; (6) timeout: a time budget over the accounted
//!   trial time (durations plus a per-trial overhead) ends the search with `timed_out`.
//!
//! # Beyond the seed
//!
//! Any number of goals; the draft's exceed-ratio / duration-sum classification per goal
//! ([`Goal::is_draft_mode`]); a trial is never proposed at a rate whose classification is
//! already settled at the current phase (the update is applied without measuring).
//!
//! Unless [`SearchConfig::seed_exact`] is set, four time savers, measured against MLRsearch
//! 1.2.1 on the simulated devices of `scripts/bench-search`:
//!
//! * the duration check: phase 2 opens with one trial of [`MdrSearch::check_duration`] one
//!   first-phase width goal below the lowest lower bound; if it meets the most tolerant goal
//!   the shorter trials met there, the device's short trials predict its longer ones, and the
//!   intermediate phases run trials of the initial duration and narrow to the final width
//!   ([`MdrSearch::trial_duration`]), so the final phase only confirms each lower bound
//!   (consistent devices at 30 s: 70.3 s instead of 85.9 s; MLRsearch 86.9 s). A failed check
//!   runs the phases at their own durations. Bounds are claimed on the same evidence either
//!   way, and a contradicted 1 s failure in those short phases is measured once more;
//!
//! * a trial that already fails a goal at a shorter duration is a valid upper bound (longer
//!   trials of a well-behaved device lose at least as much: buffers hide less, spikes are
//!   likelier), as MLRsearch and the draft do with exceed ratio 0: upper bounds are not
//!   re-measured; except, in an intermediate phase, a failure that the device contradicted
//!   (a higher load met the goal in a trial at least as long): that one was noise, and is
//!   re-measured at the phase's duration like any bound of the seed. On noisy devices such
//!   a one-second failure below the true rate otherwise caps the result for the rest of the
//!   search (on 1200 jittery devices, 60 % of the NDR error came from upper bounds decided
//!   by a short trial). Not in the final phase, where a re-measurement costs a final-duration
//!   trial (measured: more total time than MLRsearch on noisy devices at 60 s); there, only
//!   a goal with a nonzero loss ratio re-measures a contradicted failure, and only one
//!   measured at the final duration, once (see `contradicted`): on spiky devices at 60 s
//!   the NDR walk's final trials otherwise cap the PDR below its truth;
//! * an external search (a walk) takes `LINEAR_STEPS` steps of one interval width (at least
//!   the phase's width goal) before the steps double: on noisy and spiky devices a
//!   re-measured bound fails by a hair (a capacity dip, a loss spike) and a load one width
//!   further usually passes, while an exponential walk from the first step overshoots and
//!   ends far below the truth (2400 spiky devices at 60 s: mean absolute NDR error 3.4 %
//!   with eight linear steps, 4.2 % with six, 5.9 % with four, against MLRsearch's 13.2 %,
//!   with less trial time; equal on the other devices); the walk stays exponential, so a far
//!   bound is still found in a logarithmic number of trials;
//! * a downward step jumps at least to the forwarding-rate hint of the failing trial when that
//!   trial lost much more than the goal allows (devices whose long trials lose far more than
//!   short ones), instead of an exponential search at the final duration; when the load it
//!   jumped to fails too, the walk goes on in steps of the width goal, not of the jump.
//!
//! [`Goal::is_draft_mode`]: crate::search::searcher::Goal::is_draft_mode

use std::collections::BTreeMap;

use super::grid::Grid;
use super::measurer::TrialCounts;
use super::searcher::{
    ConfigError, GoalResult, Outcome, Phase, SearchConfig, Searcher, TrialRecord, TrialRequest,
};

mod bounds;
mod select;

/// Upper limit on trials, a safety net for pathological devices (reported as timed out).
const MAX_TRIALS: usize = 10_000;
/// Relative tolerance when comparing durations.
const DURATION_EPS: f64 = 1e-9;
/// The forwarding-rate hint of a failing lower bound is followed only when the trial lost at
/// least this much more than the goal allows. Smaller excesses are what trial-to-trial noise
/// produces (a 1-2 % capacity jitter); following them jumps far below the truth and costs a
/// bisection back up. Large ones come from devices whose longer trials lose much more
/// (buffers that hide loss in short trials), where one jump replaces an exponential search.
const HINT_MIN_EXCESS_LOSS: f64 = 0.05;
/// External steps of one interval width before the interval starts doubling (default mode).
const LINEAR_STEPS: u32 = 8;

/// One goal's interval of grid indices (`lo <= hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Lower bound index.
    pub lo: usize,
    /// Upper bound index.
    pub hi: usize,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    duration: f64,
    loss_ratio: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// Initial trial number 0, 1 or 2 is next.
    Initial(u8),
    /// Non-initial phase `p` (1..=P intermediate, P+1 final).
    Phase(u32),
    Done,
}

/// Classification of a load for one goal in one phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LoadState {
    /// Whether the load fails the goal (None: undecided, draft mode needs more trials).
    bad: Option<bool>,
    /// Whether the classification holds at the phase's duration / duration sum.
    confirmed: bool,
}

/// The MDR searcher. See the module documentation; drive it through [`Searcher`].
#[derive(Debug, Clone)]
pub struct MdrSearch {
    cfg: SearchConfig,
    grid: Grid,
    samples: BTreeMap<usize, Vec<Sample>>,
    trials: Vec<TrialRecord>,
    stage: Stage,
    intervals: Vec<Interval>,
    pending: Option<(TrialRequest, usize)>,
    /// Per goal: external steps taken so far in the current walk (default mode).
    ext_runs: Vec<u32>,
    elapsed: f64,
    timed_out: bool,
    phase_starts: Vec<(f64, Phase)>,
    initial_idx: [usize; 2],
    /// The duration check (default mode): None until decided; Some(true) when the check's
    /// longer trial met the most tolerant goal that the shorter trials' lower bounds met,
    /// so the intermediate phases from 2 on run at the initial duration.
    stable: Option<bool>,
    /// The load of the duration check, while its trial is pending.
    checking: Option<usize>,
}

impl MdrSearch {
    /// A new search; the grid's step is the finest goal width.
    pub fn new(cfg: SearchConfig) -> Result<MdrSearch, ConfigError> {
        cfg.validate()?;
        let finest = cfg
            .goals
            .iter()
            .map(|g| g.width)
            .fold(f64::INFINITY, f64::min);
        let grid = Grid::new(cfg.min_rate, cfg.max_rate, finest, 1);
        let n = cfg.goals.len();
        Ok(MdrSearch {
            cfg,
            grid,
            samples: BTreeMap::new(),
            trials: Vec::new(),
            stage: Stage::Initial(0),
            intervals: vec![Interval { lo: 0, hi: 0 }; n],
            pending: None,
            ext_runs: vec![0; n],
            elapsed: 0.0,
            timed_out: false,
            phase_starts: Vec::new(),
            initial_idx: [0, 0],
            stable: None,
            checking: None,
        })
    }

    /// The rate grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// The current intervals, one per goal.
    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// The current phase (None once done).
    pub fn phase(&self) -> Option<Phase> {
        match self.stage {
            Stage::Initial(_) => Some(Phase::Initial),
            Stage::Phase(p) => Some(self.phase_of(p)),
            Stage::Done => None,
        }
    }

    /// Accounted search time so far (trial durations plus overheads), seconds.
    pub fn elapsed(&self) -> f64 {
        self.elapsed
    }

    fn final_phase(&self) -> u32 {
        self.cfg.phases + 1
    }

    fn phase_of(&self, p: u32) -> Phase {
        if p == self.final_phase() {
            Phase::Final
        } else {
            Phase::Intermediate(p)
        }
    }

    /// Trial duration of non-initial phase `p`.
    pub fn phase_duration(&self, p: u32) -> f64 {
        let big_p = self.cfg.phases;
        if p > big_p {
            return self.cfg.final_duration;
        }
        let (a, b) = (self.cfg.initial_duration, self.cfg.final_duration);
        let e = f64::from(p - 1) / f64::from(big_p);
        (a * (b / a).powf(e)).min(b)
    }

    /// The duration of the trials phase `p` runs and classifies loads by: the phase's
    /// duration, or the initial duration in the intermediate phases from 2 on of a device
    /// that passed the duration check (see `duration_check`).
    pub fn trial_duration(&self, p: u32) -> f64 {
        if self.stable == Some(true) && (2..=self.cfg.phases).contains(&p) {
            self.cfg.initial_duration
        } else {
            self.phase_duration(p)
        }
    }

    /// The load of the duration check at the start of phase `p`, if one is due: in default
    /// mode, at the start of phase 2 when the last intermediate phase is longer than the
    /// initial duration and no goal is in draft mode, one first-phase width goal below the
    /// lowest lower bound that met its goal (far enough below that capacity jitter rarely
    /// fails it, near enough that a buffer hiding loss in short trials does). Its trial has
    /// [`MdrSearch::check_duration`]; `record` gives the verdict.
    fn duration_check(&self, p: u32) -> Option<usize> {
        if self.stable.is_some()
            || self.cfg.seed_exact
            || p != 2
            || self.phase_duration(self.cfg.phases)
                <= self.cfg.initial_duration * (1.0 + DURATION_EPS)
            || self.cfg.goals.iter().any(|g| g.is_draft_mode())
        {
            return None;
        }
        (0..self.cfg.goals.len())
            .filter(|&g| self.lo_valid(g, p))
            .map(|g| {
                let lo = self.intervals[g].lo;
                lo.saturating_sub(self.phase_steps(g, 1)).max(lo.min(1))
            })
            .min()
    }

    /// Duration of the duration check's trial: the geometric middle of the initial and the
    /// last intermediate duration (sqrt(30) ~ 2.34 s with CSIT's 1 s, 2 phases, 30 s). A
    /// longer check costs every device more (at the last intermediate duration, 5.48 s,
    /// consistent devices took 0.845x and noisy ones 0.865x MLRsearch's time instead of
    /// 0.809x and 0.840x); a device whose losses appear only after the check's duration
    /// pays with a failed final trial and a walk, never with a wrong bound.
    pub fn check_duration(&self) -> f64 {
        let a = self.cfg.initial_duration;
        a * (self.phase_duration(self.cfg.phases) / a).sqrt()
    }

    /// Whether measuring `x` in phase `p` could tell anything new: some goal has no settled
    /// classification of `x` at this phase yet.
    fn worth_measuring(&self, x: usize, p: u32) -> bool {
        (0..self.cfg.goals.len()).any(|g| !self.confirmed(x, g, p))
    }

    fn request(&mut self, phase: Phase, idx: usize, duration: f64) -> Option<TrialRequest> {
        if self.trials.len() >= MAX_TRIALS {
            self.finish(true);
            return None;
        }
        if let Some(budget) = self.cfg.time_budget {
            if self.elapsed + duration + self.cfg.trial_overhead > budget * (1.0 + DURATION_EPS) {
                self.finish(true);
                return None;
            }
        }
        let req = TrialRequest {
            phase,
            rate_pps: self.grid.rate(idx),
            duration_s: duration,
        };
        if self.phase_starts.last().map(|&(_, ph)| ph) != Some(phase) {
            self.phase_starts.push((self.elapsed, phase));
        }
        self.pending = Some((req, idx));
        Some(req)
    }

    fn finish(&mut self, timed_out: bool) {
        self.stage = Stage::Done;
        self.timed_out |= timed_out;
        self.pending = None;
    }

    fn start_phases(&mut self) {
        let [idx1, idx2] = self.initial_idx;
        for iv in &mut self.intervals {
            *iv = Interval { lo: idx2, hi: idx1 };
        }
        self.stage = Stage::Phase(1);
        // Apply the optimistic-maximum rule to intervals that start at the top.
        for g in 0..self.cfg.goals.len() {
            self.update_interval(g, idx1, 1);
        }
    }

    fn receive_rate(&self, trial: usize) -> f64 {
        let t = &self.trials[trial];
        t.received as f64 / t.duration_s
    }
}

impl Searcher for MdrSearch {
    fn next_trial(&mut self) -> Option<TrialRequest> {
        if let Some((req, _)) = self.pending {
            return Some(req);
        }
        let d0 = self.cfg.initial_duration;
        loop {
            match self.stage {
                Stage::Done => return None,
                Stage::Initial(0) => return self.request(Phase::Initial, self.grid.top(), d0),
                Stage::Initial(1) => {
                    let idx1 = self.grid.floor_index(self.receive_rate(0));
                    self.initial_idx = [idx1, idx1];
                    if idx1 >= self.grid.top() {
                        // No loss worth a step at the maximum rate: start from there.
                        self.start_phases();
                        continue;
                    }
                    return self.request(Phase::Initial, idx1, d0);
                }
                Stage::Initial(_) => {
                    let idx1 = self.initial_idx[0];
                    let widest = (0..self.cfg.goals.len())
                        .map(|g| self.phase_steps(g, 1))
                        .max()
                        .unwrap_or(1);
                    let idx2 = self
                        .grid
                        .floor_index(self.receive_rate(1))
                        .min(idx1.saturating_sub(widest));
                    self.initial_idx = [idx1, idx2];
                    if idx2 == idx1 {
                        self.start_phases();
                        continue;
                    }
                    return self.request(Phase::Initial, idx2, d0);
                }
                Stage::Phase(p) => {
                    if p == 2 && self.stable.is_none() {
                        match self.duration_check(p) {
                            Some(x) => {
                                self.checking = Some(x);
                                let d = self.check_duration();
                                return self.request(self.phase_of(p), x, d);
                            }
                            None => self.stable = Some(false),
                        }
                    }
                    let mut guard = 0;
                    let next = loop {
                        guard += 1;
                        let Some(x) = self.select(p) else { break None };
                        if self.worth_measuring(x, p) || guard > 64 {
                            break Some(x);
                        }
                        // Already settled at this phase: apply it without a trial.
                        let before = self.intervals.clone();
                        self.update_all(x, p);
                        if before == self.intervals {
                            break Some(x);
                        }
                    };
                    match next {
                        Some(x) => {
                            let phase = self.phase_of(p);
                            return self.request(phase, x, self.trial_duration(p));
                        }
                        None if p >= self.final_phase() => {
                            self.finish(false);
                            return None;
                        }
                        None => {
                            self.stage = Stage::Phase(p + 1);
                            self.ext_runs.iter_mut().for_each(|r| *r = 0);
                        }
                    }
                }
            }
        }
    }

    fn record(&mut self, counts: TrialCounts) {
        let Some((req, idx)) = self.pending.take() else {
            return;
        };
        self.elapsed += req.duration_s + self.cfg.trial_overhead;
        let rec = TrialRecord::new(&req, counts, self.elapsed);
        self.samples.entry(idx).or_default().push(Sample {
            duration: req.duration_s,
            loss_ratio: rec.loss_ratio,
        });
        self.trials.push(rec);
        if self.checking.take() == Some(idx) {
            // The verdict of the duration check: a longer trial at a lower load loses no
            // more than the most tolerant goal allows, where a shorter trial met it. Judged
            // by that goal only: a zero-loss goal fails on any spike, which is noise, not
            // loss hidden by short trials.
            let check = self.samples[&idx].last().map_or(1.0, |s| s.loss_ratio);
            // The most tolerant goal whose lower bound met it in the shorter trial.
            let q = (0..self.cfg.goals.len())
                .filter(|&g| {
                    let q = self.cfg.goals[g].loss_ratio;
                    let lo = self.intervals[g].lo;
                    let last = self.samples.get(&lo).and_then(|v| v.last());
                    last.is_some_and(|s| s.loss_ratio <= q)
                })
                .map(|g| self.cfg.goals[g].loss_ratio)
                .fold(f64::NEG_INFINITY, f64::max);
            self.stable = Some(check <= q);
        }
        match self.stage {
            Stage::Initial(i) => self.stage = Stage::Initial(i + 1),
            Stage::Phase(p) => {
                let walking: Vec<Option<bool>> = (0..self.cfg.goals.len())
                    .map(|g| {
                        let Interval { lo, hi } = self.intervals[g];
                        if idx < lo && self.lo_invalid(g, p) {
                            Some(true)
                        } else if idx > hi && self.hi_invalid(g, p) {
                            Some(false)
                        } else {
                            None
                        }
                    })
                    .collect();
                self.update_all(idx, p);
                for (g, w) in walking.into_iter().enumerate() {
                    let still = match w {
                        Some(true) => self.lo_invalid(g, p),
                        Some(false) => self.hi_invalid(g, p),
                        None => self.lo_invalid(g, p) || self.hi_invalid(g, p),
                    };
                    self.ext_runs[g] = match (w, still) {
                        (_, false) => 0,
                        (Some(_), true) => self.ext_runs[g] + 1,
                        (None, true) => self.ext_runs[g],
                    };
                }
            }
            Stage::Done => {}
        }
        if self.stage == Stage::Initial(3) {
            self.start_phases();
        }
    }

    fn trials(&self) -> &[TrialRecord] {
        &self.trials
    }

    fn outcome(&self) -> Outcome {
        let p = match self.stage {
            Stage::Phase(p) => p,
            Stage::Initial(_) => 1,
            Stage::Done => self.final_phase(),
        };
        let top = self.grid.top();
        let done_ok = self.stage == Stage::Done && !self.timed_out;
        let goals = (0..self.cfg.goals.len())
            .map(|g| {
                let Interval { lo, hi } = self.intervals[g];
                let started =
                    matches!(self.stage, Stage::Phase(_) | Stage::Done) && !self.trials.is_empty();
                let min_fails = started && self.goal_failed(g, p);
                let lo_ok = started && self.lo_valid(g, p);
                let hi_measured_bad = self.role(hi, g, p) == Some(true);
                let lower = lo_ok.then(|| self.grid.rate(lo));
                let upper = if min_fails {
                    Some(self.grid.rate(0))
                } else if started
                    && (hi_measured_bad || hi == top && lo < top && self.hi_valid(g, p))
                {
                    // A failing trial, or the maximum rate (optimistic maximum).
                    Some(self.grid.rate(hi))
                } else {
                    None
                };
                let max_lb = lo_ok && lo == top;
                let evidence = self.samples.get(&lo).filter(|_| lo_ok);
                let confirmed = lo_ok && self.confirmed(lo, g, p);
                GoalResult {
                    goal: self.cfg.goals[g].clone(),
                    lower_pps: lower,
                    upper_pps: upper,
                    width: match (lower, upper) {
                        (Some(l), Some(u)) => Some(1.0 - l / u),
                        _ => None,
                    },
                    trial_count: evidence.map_or(0, Vec::len),
                    trial_duration_sum_s: evidence
                        .map_or(0.0, |v| v.iter().map(|s| s.duration).sum()),
                    max_rate_is_lower_bound: max_lb,
                    min_rate_fails: min_fails,
                    incomplete: !done_ok || !(min_fails || confirmed),
                }
            })
            .collect();
        Outcome {
            goals,
            timed_out: self.timed_out,
            trial_count: self.trials.len(),
            trial_duration_sum_s: self.trials.iter().map(|t| t.duration_s).sum(),
        }
    }

    fn phase_starts(&self) -> Vec<(f64, Phase)> {
        self.phase_starts.clone()
    }

    fn config(&self) -> &SearchConfig {
        &self.cfg
    }

    fn algorithm(&self) -> &'static str {
        "mdr"
    }
}

#[cfg(test)]
mod test;
