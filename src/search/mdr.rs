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
//! Unless [`SearchConfig::seed_exact`] is set, three time savers, measured against MLRsearch
//! 1.2.1 on the simulated devices of `scripts/bench-search`:
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
//!   short ones), instead of an exponential search at the final duration.

use std::collections::BTreeMap;

use super::grid::Grid;
use super::measurer::TrialCounts;
use super::types::{
    ConfigError, Goal, GoalResult, Outcome, Phase, SearchConfig, Searcher, TrialRecord,
    TrialRequest,
};

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

    /// Duration sum goal `g` needs in phase `p` (draft mode), interpolated like durations.
    fn phase_duration_sum(&self, g: &Goal, p: u32) -> f64 {
        let d = self.phase_duration(p);
        let Some(sum) = g.duration_sum else { return d };
        let big_p = self.cfg.phases;
        if p > big_p {
            return sum;
        }
        let a = self.cfg.initial_duration;
        let e = f64::from(p - 1) / f64::from(big_p);
        (a * (sum / a).powf(e)).max(d)
    }

    /// Width goal of goal `g` in phase `p`, in grid steps.
    pub fn phase_steps(&self, g: usize, p: u32) -> usize {
        let base = self.grid.steps_for_width(self.cfg.goals[g].width);
        let fin = self.final_phase();
        base << (fin - p.min(fin)).min(20)
    }

    fn state(&self, idx: usize, g: usize, p: u32) -> Option<LoadState> {
        let samples = self.samples.get(&idx)?;
        let last = samples.last()?;
        let goal = &self.cfg.goals[g];
        let d = self.phase_duration(p);
        let long_enough = |s: &Sample| s.duration >= d * (1.0 - DURATION_EPS);
        if !goal.is_draft_mode() {
            let bad = last.loss_ratio > goal.loss_ratio;
            let confirmed = if bad {
                // A short failing trial is accepted as an upper bound (default mode) unless
                // the device contradicted it in an intermediate phase (see `contradicted`).
                let distrusted = self.cfg.seed_exact
                    || p < self.final_phase() && self.contradicted(idx, g, last.duration);
                // In the final phase, a single final-duration failure of a goal with a
                // nonzero loss ratio that the device contradicted (a pass two widths or
                // more above it) is measured once more.
                let far = idx + 2 * self.phase_steps(g, p);
                let retry = p == self.final_phase()
                    && !self.cfg.seed_exact
                    && goal.loss_ratio > 0.0
                    && long_enough(last)
                    && samples.iter().filter(|s| long_enough(s)).count() == 1
                    && self.contradicted_from(far, g, last.duration);
                (long_enough(last) || !distrusted) && !retry
            } else {
                long_enough(last)
            };
            return Some(LoadState {
                bad: Some(bad),
                confirmed,
            });
        }
        // The draft's classification (as MLRsearch 1.2.1's TargetStat.estimates).
        let (mut good_long, mut bad_long, mut good_short, mut bad_short) = (0.0, 0.0, 0.0, 0.0);
        for s in samples {
            let bad = s.loss_ratio > goal.loss_ratio;
            match (long_enough(s), bad) {
                (true, true) => bad_long += s.duration,
                (true, false) => good_long += s.duration,
                (false, true) => bad_short += s.duration,
                (false, false) => good_short += s.duration,
            }
        }
        let coeff = goal.exceed_ratio;
        let short_excess = bad_short - good_short * coeff / (1.0 - coeff);
        let excess = bad_long + f64::max(0.0, short_excess);
        let dursum = f64::max(good_long + excess, self.phase_duration_sum(goal, p));
        let limit = dursum * coeff;
        let optimistic = excess <= limit * (1.0 + DURATION_EPS);
        let pessimistic = dursum - good_long <= limit * (1.0 + DURATION_EPS);
        Some(if optimistic == pessimistic {
            LoadState {
                bad: Some(!optimistic),
                confirmed: true,
            }
        } else {
            LoadState {
                bad: None,
                confirmed: false,
            }
        })
    }

    /// Whether a failure of goal `g` at load `idx` in a trial of `duration` is contradicted:
    /// a higher load met the goal in a trial at least as long. A well-behaved device never
    /// does that (higher loads and longer trials lose at least as much), so the failure was
    /// noise (a capacity dip, a loss spike) and is not trusted as an upper bound without a
    /// re-measurement at the current phase's duration (the seed's rule). A pass in a
    /// shorter trial contradicts nothing: buffers hide loss in short trials.
    ///
    /// In the final phase (see `state`), a failure of a goal with a nonzero loss ratio at
    /// the final duration, contradicted by a pass at least two width goals higher in a trial
    /// as long, is measured once more (its second final-duration trial decides; nearer
    /// passes are the boundary's coin tosses, where a re-measurement gains at most a width
    /// and costs a final trial: with one width, spiky 10 s took 1.008x MLRsearch's time). Such a goal fails on
    /// capacity dips, and one trial per load turns a dip into an upper bound below the
    /// truth; that happens most when another goal's trials classify loads for it (the NDR
    /// walk, just below the PDR, at the final duration). A zero-loss goal gains nothing on
    /// spiky devices (a spike makes most long trials fail again), so it is not re-measured.
    fn contradicted(&self, idx: usize, g: usize, duration: f64) -> bool {
        self.contradicted_from(idx + 1, g, duration)
    }

    /// Whether a load at index `from` or above met goal `g` in a trial at least `duration`
    /// long.
    fn contradicted_from(&self, from: usize, g: usize, duration: f64) -> bool {
        let q = self.cfg.goals[g].loss_ratio;
        self.samples.range(from..).any(|(_, v)| {
            v.iter()
                .any(|s| s.loss_ratio <= q && s.duration >= duration * (1.0 - DURATION_EPS))
        })
    }

    fn role(&self, idx: usize, g: usize, p: u32) -> Option<bool> {
        self.state(idx, g, p).and_then(|s| s.bad)
    }

    fn confirmed(&self, idx: usize, g: usize, p: u32) -> bool {
        self.state(idx, g, p).is_some_and(|s| s.confirmed)
    }

    fn lo_invalid(&self, g: usize, p: u32) -> bool {
        self.role(self.intervals[g].lo, g, p) == Some(true)
    }

    fn lo_valid(&self, g: usize, p: u32) -> bool {
        self.role(self.intervals[g].lo, g, p) == Some(false)
    }

    fn hi_valid(&self, g: usize, p: u32) -> bool {
        let hi = self.intervals[g].hi;
        hi == self.grid.top() && self.role(hi, g, p) != Some(false)
            || self.role(hi, g, p) == Some(true)
    }

    fn hi_invalid(&self, g: usize, p: u32) -> bool {
        let hi = self.intervals[g].hi;
        hi < self.grid.top() && self.role(hi, g, p) == Some(false)
    }

    /// A goal whose lower bound is the minimum rate and fails there at this phase's duration
    /// (a failure at the minimum is only believed from a trial of the phase's duration).
    fn goal_failed(&self, g: usize, p: u32) -> bool {
        let lo = self.intervals[g].lo;
        lo == 0
            && self.role(0, g, p) == Some(true)
            && self.confirmed(0, g, p)
            && self.measured_at_phase(0, p)
    }

    /// Whether the latest trial at `idx` has the duration of phase `p`.
    fn measured_at_phase(&self, idx: usize, p: u32) -> bool {
        let d = self.phase_duration(p);
        self.samples
            .get(&idx)
            .and_then(|v| v.last())
            .is_some_and(|s| s.duration >= d * (1.0 - DURATION_EPS))
    }

    /// Applies the seed's update rules for a load `x` just classified, to goal `g`.
    fn update_interval(&mut self, g: usize, x: usize, p: u32) {
        let Some(bad) = self.role(x, g, p) else {
            return;
        };
        let top = self.grid.top();
        let Interval { lo, hi } = self.intervals[g];
        let lo_bad = self.role(lo, g, p) == Some(true);
        let hi_good = hi < top && self.role(hi, g, p) == Some(false);
        let mut iv = self.intervals[g];
        if x != lo && x != hi {
            if x > hi {
                // External search up: the old (invalid) upper bound becomes a valid lower bound.
                // Above a valid upper bound nothing changes (conservative updates).
                if hi_good {
                    iv = Interval { lo: hi, hi: x };
                }
            } else if x > lo {
                // Internal search.
                if bad {
                    iv.hi = x;
                } else if !lo_bad {
                    iv.lo = x;
                }
            } else if lo_bad {
                // External search down: the old (invalid) lower bound becomes a valid upper one.
                iv = Interval { lo: x, hi: lo };
            } else if bad {
                // A failing trial below a valid lower bound always moves it (conservative):
                // the new upper bound is the lowest failing load above it.
                let new_hi = self
                    .samples
                    .range(x + 1..=hi)
                    .map(|(&i, _)| i)
                    .find(|&i| self.role(i, g, p) == Some(true))
                    .unwrap_or(hi);
                iv = Interval { lo: x, hi: new_hi };
            }
        }
        // Optimistic maximum: if the maximum rate meets the goal, it is the lower bound.
        if iv.hi == top && self.role(top, g, p) == Some(false) {
            iv.lo = top;
        }
        self.intervals[g] = iv;
    }

    fn update_all(&mut self, x: usize, p: u32) {
        for g in 0..self.cfg.goals.len() {
            self.update_interval(g, x, p);
        }
    }

    /// The external search step (in grid steps) for goal `g` in phase `p`.
    ///
    /// The seed moves by two interval widths, at least the phase's width goal (sufficient
    /// width). Unless `seed_exact`, the first `LINEAR_STEPS` steps of a walk are one
    /// interval width (at least the goal: from a bound that a re-measurement just invalidated,
    /// success ends the search without a bisection), later ones two; and a downward
    /// step goes at least as far as the forwarding-rate hint `rate * (1 - loss) / (1 - goal
    /// loss ratio)` of the failing lower bound (as the initial phase uses the MRR) when it
    /// lost `HINT_MIN_EXCESS_LOSS` more than the goal allows, which finds devices whose long
    /// trials lose much more.
    fn external_step(&self, g: usize, p: u32, down: bool) -> usize {
        let Interval { lo, hi } = self.intervals[g];
        let goal = self.phase_steps(g, p);
        let width = hi - lo;
        if self.cfg.seed_exact {
            return (2 * width).max(goal);
        }
        // One interval width (at least the goal) for the first steps of a walk, then the
        // interval doubles: exponential search that starts gently.
        let base = width.max(goal);
        let mut step = if self.ext_runs[g] < LINEAR_STEPS {
            base
        } else {
            2 * base
        };
        if down {
            if let Some(s) = self.samples.get(&lo).and_then(|v| v.last()) {
                let q = self.cfg.goals[g].loss_ratio;
                if s.loss_ratio - q >= HINT_MIN_EXCESS_LOSS {
                    let hint = self.grid.rate(lo) * (1.0 - s.loss_ratio) / (1.0 - q);
                    step = step.max(lo - self.grid.floor_index(hint).min(lo));
                }
            }
        }
        step
    }

    /// The next load of phase `p` by the seed's priorities, or None to end the phase.
    fn select(&self, p: u32) -> Option<usize> {
        let n = self.cfg.goals.len();
        let top = self.grid.top();
        let active: Vec<usize> = (0..n).filter(|&g| !self.goal_failed(g, p)).collect();
        // 1. External search down.
        for &g in &active {
            let lo = self.intervals[g].lo;
            if self.lo_invalid(g, p) && lo > 0 {
                let target = lo.saturating_sub(self.external_step(g, p, true));
                // Not below a load already known to meet the goal at this phase.
                let known = self
                    .samples
                    .range(target..lo)
                    .rev()
                    .map(|(&i, _)| i)
                    .find(|&i| self.role(i, g, p) == Some(false) && self.confirmed(i, g, p));
                return Some(known.unwrap_or(target));
            }
        }
        // 2. External search up.
        for &g in &active {
            let hi = self.intervals[g].hi;
            if self.hi_invalid(g, p) {
                let target = (hi + self.external_step(g, p, false)).min(top);
                // Not above a load already known to fail the goal.
                let known = self
                    .samples
                    .range(hi + 1..=target)
                    .map(|(&i, _)| i)
                    .find(|&i| self.role(i, g, p) == Some(true) && self.confirmed(i, g, p));
                return Some(known.unwrap_or(target));
            }
        }
        // 3. Internal search.
        for &g in &active {
            let Interval { lo, hi } = self.intervals[g];
            if self.lo_valid(g, p) && self.hi_valid(g, p) && hi - lo > self.phase_steps(g, p) {
                return Some(lo + (hi - lo) / 2);
            }
        }
        // 4. Re-measure lower bounds, then upper bounds, at this phase's duration.
        for &g in &active {
            let lo = self.intervals[g].lo;
            if !self.confirmed(lo, g, p) || lo == 0 && !self.measured_at_phase(0, p) {
                return Some(lo);
            }
        }
        for &g in &active {
            let hi = self.intervals[g].hi;
            if hi < top && !self.confirmed(hi, g, p) {
                return Some(hi);
            }
        }
        None
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
                            return self.request(phase, x, self.phase_duration(p));
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
mod test {
    use super::*;
    use crate::search::measurer::Measurer;
    use crate::search::sim::{SimDut, SimModel};

    fn cfg() -> SearchConfig {
        SearchConfig {
            min_rate: 1e6,
            max_rate: 16e6,
            ..SearchConfig::csit()
        }
    }

    /// As [`cfg`], in seed-exact mode.
    fn seed() -> SearchConfig {
        SearchConfig {
            seed_exact: true,
            ..cfg()
        }
    }

    /// A search placed in phase `p` with the given samples `(index, duration, loss ratio)`
    /// and intervals.
    fn placed(
        cfg: SearchConfig,
        p: u32,
        samples: &[(usize, f64, f64)],
        iv: &[(usize, usize)],
    ) -> MdrSearch {
        let mut s = MdrSearch::new(cfg).unwrap();
        for &(i, duration, loss_ratio) in samples {
            s.samples.entry(i).or_default().push(Sample {
                duration,
                loss_ratio,
            });
        }
        s.intervals = iv.iter().map(|&(lo, hi)| Interval { lo, hi }).collect();
        s.stage = Stage::Phase(p);
        s
    }

    fn counts(rate: f64, duration: f64, loss_ratio: f64) -> TrialCounts {
        let offered = (rate * duration).floor() as u64;
        TrialCounts::new(
            offered,
            offered - (offered as f64 * loss_ratio).ceil() as u64,
        )
    }

    #[test]
    fn phase_durations_and_widths() {
        let s = MdrSearch::new(SearchConfig::csit()).unwrap();
        assert_eq!(s.phase_duration(1), 1.0);
        assert!((s.phase_duration(2) - 30f64.sqrt()).abs() < 1e-12);
        assert_eq!(s.phase_duration(3), 30.0);
        let base = s.grid().steps_for_width(0.005);
        assert_eq!(base, 1);
        let exact = MdrSearch::new(SearchConfig {
            seed_exact: true,
            ..SearchConfig::csit()
        })
        .unwrap();
        // Width goals double per earlier phase, in both modes (the seed's rule).
        for s in [&s, &exact] {
            assert_eq!(
                [
                    s.phase_steps(0, 1),
                    s.phase_steps(0, 2),
                    s.phase_steps(0, 3)
                ],
                [4, 2, 1]
            );
        }
    }

    #[test]
    fn initial_phase_max_mrr_mrr2() {
        let mut s = MdrSearch::new(cfg()).unwrap();
        let top = s.grid().top();
        let t0 = s.next_trial().unwrap();
        assert_eq!(
            (t0.phase, t0.rate_pps, t0.duration_s),
            (Phase::Initial, 16e6, 1.0)
        );
        assert_eq!(s.next_trial(), Some(t0), "the same trial until recorded");
        // Received 8 Mpps: MRR.
        s.record(TrialCounts::new(16_000_000, 8_000_000));
        let t1 = s.next_trial().unwrap();
        let idx1 = s.grid().floor_index(8e6);
        assert_eq!(t1.rate_pps, s.grid().rate(idx1));
        // At the MRR almost everything passes: MRR2 would be within the width goal, so it is
        // placed the first phase's width goal below (sufficient width).
        s.record(counts(t1.rate_pps, 1.0, 0.0001));
        let t2 = s.next_trial().unwrap();
        let idx2 = idx1 - s.phase_steps(0, 1);
        assert_eq!(t2.rate_pps, s.grid().rate(idx2));
        s.record(counts(t2.rate_pps, 1.0, 0.0));
        assert_eq!(s.intervals(), &[Interval { lo: idx2, hi: idx1 }; 2]);
        assert!(idx1 < top);
        assert_eq!(s.phase(), Some(Phase::Intermediate(1)));
    }

    #[test]
    fn external_search_down_doubles_width() {
        // NDR lower bound invalid (lost packets): the seed moves down by two interval widths
        // (the interval triples), the default mode by one (it doubles, as in MLRsearch).
        let samples = [(100, 1.0, 0.001), (110, 1.0, 0.01)];
        let s = placed(seed(), 1, &samples, &[(100, 110), (100, 110)]);
        assert_eq!(s.select(1), Some(80));
        let s = placed(cfg(), 1, &samples, &[(100, 110), (100, 110)]);
        assert_eq!(s.select(1), Some(90));
        // PDR lower bound invalid and NDR fine: PDR's turn, two widths (12) down, but not
        // below a load already known to meet the goal (102: 0.1 % loss is within PLR).
        let samples = [
            (100, 1.0, 0.0),
            (102, 1.0, 0.001),
            (104, 1.0, 0.01),
            (110, 1.0, 0.01),
        ];
        let s = placed(seed(), 1, &samples, &[(100, 102), (104, 110)]);
        assert_eq!(s.select(1), Some(102));
        let s = placed(cfg(), 1, &samples, &[(100, 102), (104, 110)]);
        assert_eq!(s.select(1), Some(102));
        let s = placed(seed(), 1, &samples[2..], &[(100, 102), (104, 110)]);
        assert_eq!(s.select(1), Some(92));
        let s = placed(cfg(), 1, &samples[2..], &[(100, 102), (104, 110)]);
        assert_eq!(s.select(1), Some(98));
    }

    #[test]
    fn external_search_down_updates_bounds() {
        let mut s = placed(
            seed(),
            1,
            &[(100, 1.0, 0.001), (110, 1.0, 0.01)],
            &[(100, 110), (100, 110)],
        );
        // Still losing at 80: 80 is the new (invalid) lower bound, 100 a valid upper bound.
        s.samples.entry(80).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0001,
        });
        s.update_all(80, 1);
        assert_eq!(s.intervals[0], Interval { lo: 80, hi: 100 });
        assert!(s.lo_invalid(0, 1) && s.hi_valid(0, 1));
        // Width is now 20, the next step goes 40 further down (20 in the default mode).
        assert_eq!(s.select(1), Some(40));
        let mut fast = s.clone();
        fast.cfg.seed_exact = false;
        assert_eq!(fast.select(1), Some(60));
        // No loss at 40: valid lower bound; the old invalid lower bound is a valid upper one.
        s.samples.entry(40).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0,
        });
        s.update_all(40, 1);
        assert_eq!(s.intervals[0], Interval { lo: 40, hi: 80 });
        assert!(s.lo_valid(0, 1) && s.hi_valid(0, 1));
    }

    #[test]
    fn external_search_up() {
        // PDR upper bound invalid (loss within PLR at 110): move up by two widths (seed) or
        // one (default).
        let samples = [(100, 1.0, 0.0), (110, 1.0, 0.001)];
        let s = placed(cfg(), 1, &samples, &[(100, 110), (100, 110)]);
        assert_eq!(s.select(1), Some(120));
        let mut s = placed(seed(), 1, &samples, &[(100, 110), (100, 110)]);
        // NDR's hi is valid (loss > 0) and NDR is narrow enough? No: width 10 > 4 steps, but
        // external search has priority over internal search.
        assert_eq!(s.select(1), Some(130));
        s.samples.entry(130).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.002,
        });
        s.update_all(130, 1);
        assert_eq!(s.intervals[1], Interval { lo: 110, hi: 130 });
        assert_eq!(
            s.intervals[0],
            Interval { lo: 100, hi: 110 },
            "conservative: above a valid upper bound"
        );
        s.samples.entry(170).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.2,
        });
        s.update_all(170, 1);
        assert_eq!(s.intervals[1], Interval { lo: 130, hi: 170 });
    }

    #[test]
    fn sufficient_width_for_external_steps() {
        // Interval width 0 (lo == hi at an invalid bound): the step is the phase's width goal.
        let s = placed(cfg(), 1, &[(100, 1.0, 0.001)], &[(100, 100), (100, 100)]);
        assert_eq!(s.select(1), Some(100 - s.phase_steps(0, 1)));
        // The first step from a narrow interval is one width goal (seed: two widths). In the
        // final phase the goal is one step.
        let samples = [(100, 30.0, 0.001), (101, 1.0, 0.1)];
        let s = placed(cfg(), 3, &samples, &[(100, 101); 2]);
        assert_eq!(s.select(3), Some(99));
        let s = placed(seed(), 3, &samples, &[(100, 101); 2]);
        assert_eq!(s.select(3), Some(98));
        // In phase 2 the goal (2 steps) is more than two widths: both step by the goal.
        let s = placed(cfg(), 2, &samples, &[(100, 101); 2]);
        assert_eq!(s.select(2), Some(98));
    }

    #[test]
    fn external_walk_starts_linear_then_doubles() {
        // Final phase (goal one step): NDR's lower bound fails at the final duration and
        // every load below fails too. Default mode: eight steps of one width, then doubling.
        let samples = [(100, 30.0, 0.001), (101, 1.0, 0.1)];
        let mut s = placed(cfg(), 3, &samples, &[(100, 101); 2]);
        let mut walk = Vec::new();
        for _ in 0..11 {
            let t = s.next_trial().unwrap();
            walk.push(s.grid().floor_index(t.rate_pps * 1.000001));
            s.record(counts(t.rate_pps, t.duration_s, 0.001));
        }
        assert_eq!(walk, [99, 98, 97, 96, 95, 94, 93, 92, 90, 86, 78]);
        // The seed: two interval widths every time.
        let mut s = placed(seed(), 3, &samples, &[(100, 101); 2]);
        let mut walk = Vec::new();
        for _ in 0..3 {
            let t = s.next_trial().unwrap();
            walk.push(s.grid().floor_index(t.rate_pps * 1.000001));
            s.record(counts(t.rate_pps, t.duration_s, 0.001));
        }
        assert_eq!(walk, [98, 94, 86]);
    }

    #[test]
    fn forwarding_rate_hint_for_external_steps() {
        // 10 % loss at the lower bound: 90 % was forwarded, so the NDR is at least ~21 steps
        // of 0.5 % below; one jump gets there instead of an exponential search.
        let s = placed(
            cfg(),
            1,
            &[(100, 1.0, 0.1), (102, 1.0, 0.5)],
            &[(100, 102); 2],
        );
        let hint = s.grid().floor_index(s.grid().rate(100) * 0.9);
        assert!(100 - hint > 20);
        assert_eq!(s.select(1), Some(hint));
        // A small excess (2 %, what capacity jitter produces) is not followed: one width.
        let s = placed(
            cfg(),
            1,
            &[(100, 1.0, 0.02), (102, 1.0, 0.5)],
            &[(100, 102); 2],
        );
        assert_eq!(s.select(1), Some(100 - s.phase_steps(0, 1)));
        // For PDR the hint is corrected by the goal's loss ratio.
        let mut c = cfg();
        c.goals.remove(0);
        let s = placed(c, 1, &[(100, 1.0, 0.1), (102, 1.0, 0.5)], &[(100, 102)]);
        let hint = s.grid().floor_index(s.grid().rate(100) * 0.9 / 0.995);
        assert_eq!(s.select(1), Some(hint));
    }

    #[test]
    fn internal_search_bisects_in_log_space() {
        let mut s = placed(
            cfg(),
            1,
            &[(100, 1.0, 0.0), (120, 1.0, 0.5)],
            &[(100, 120), (100, 120)],
        );
        assert_eq!(s.select(1), Some(110));
        s.samples.entry(110).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.001,
        });
        s.update_all(110, 1);
        // Bad for NDR: new NDR upper bound; good for PDR: new PDR lower bound.
        assert_eq!(
            s.intervals(),
            &[Interval { lo: 100, hi: 110 }, Interval { lo: 110, hi: 120 }]
        );
        // NDR first.
        assert_eq!(s.select(1), Some(105));
    }

    #[test]
    fn remeasure_priorities() {
        // Phase 2 (5.48 s): everything narrow, measured at 1 s only.
        let samples = [
            (100, 1.0, 0.0),
            (101, 1.0, 0.001),
            (103, 1.0, 0.0),
            (104, 1.0, 0.5),
        ];
        let mut c = cfg();
        c.seed_exact = true;
        let mut s = placed(c, 2, &samples, &[(100, 101), (103, 104)]);
        let d = s.phase_duration(2);
        let mut order = Vec::new();
        while let Some(x) = s.select(2) {
            order.push(x);
            let loss = samples.iter().find(|t| t.0 == x).unwrap().2;
            s.samples.get_mut(&x).unwrap().push(Sample {
                duration: d,
                loss_ratio: loss,
            });
            s.update_all(x, 2);
        }
        // NDR lower, PDR lower, NDR upper, PDR upper.
        assert_eq!(order, [100, 103, 101, 104]);
        // Without seed_exact, short failing trials are accepted as upper bounds, unless a
        // higher load contradicts them: 103 passed at 1 s, so NDR's upper bound 101 (failed
        // at 1 s) is re-measured; PDR's 104 is not.
        let mut s = placed(cfg(), 2, &samples, &[(100, 101), (103, 104)]);
        assert_eq!(s.select(2), Some(100));
        s.samples.get_mut(&100).unwrap().push(Sample {
            duration: d,
            loss_ratio: 0.0,
        });
        assert_eq!(s.select(2), Some(103));
        s.samples.get_mut(&103).unwrap().push(Sample {
            duration: d,
            loss_ratio: 0.0,
        });
        assert_eq!(s.select(2), Some(101));
        s.samples.get_mut(&101).unwrap().push(Sample {
            duration: d,
            loss_ratio: 0.001,
        });
        assert_eq!(s.select(2), None);
    }

    #[test]
    fn contradicted_short_failures_are_remeasured() {
        // Phase 2 (5.48 s): NDR (100, 101), 101 failed at 1 s; PDR settled far above.
        let d = 30f64.sqrt();
        let base = [
            (100, d, 0.0),
            (101, 1.0, 0.0001),
            (110, d, 0.001),
            (111, d, 0.5),
        ];
        let s = placed(cfg(), 2, &base, &[(100, 101), (110, 111)]);
        assert_eq!(
            s.select(2),
            None,
            "an uncontradicted short failure is accepted"
        );
        // A higher load met NDR in a trial at least as long: 101's failure was noise and is
        // re-measured at the phase's duration, as in the seed.
        let mut s = placed(cfg(), 2, &base, &[(100, 101), (110, 111)]);
        s.samples.entry(103).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0,
        });
        assert!(s.contradicted(101, 0, 1.0));
        assert_eq!(s.select(2), Some(101));
        // It passes at 5.48 s: 101 is now an invalid upper bound, and the external search
        // goes up by the phase's width goal (2 steps).
        s.samples.get_mut(&101).unwrap().push(Sample {
            duration: d,
            loss_ratio: 0.0,
        });
        s.update_all(101, 2);
        assert_eq!(s.intervals[0], Interval { lo: 100, hi: 101 });
        assert!(s.hi_invalid(0, 2));
        assert_eq!(s.select(2), Some(103));
        // A pass in a shorter trial contradicts nothing (buffers hide loss in short trials).
        let mut s = placed(cfg(), 2, &base, &[(100, 101), (110, 111)]);
        s.samples.insert(
            101,
            vec![Sample {
                duration: d,
                loss_ratio: 0.0001,
            }],
        );
        s.samples.entry(103).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0,
        });
        assert!(!s.contradicted(101, 0, d));
        assert_eq!(s.select(2), None);
        // In the final phase a contradicted short failure is accepted (a re-measurement
        // would cost a final-duration trial).
        let fin = [
            (100, 30.0, 0.0),
            (101, 1.0, 0.0001),
            (103, 1.0, 0.0),
            (110, 30.0, 0.001),
            (111, d, 0.5),
        ];
        let s = placed(cfg(), 3, &fin, &[(100, 101), (110, 111)]);
        assert!(s.contradicted(101, 0, 1.0));
        assert_eq!(s.select(3), None);
    }

    /// Runs `select` and applies loads that need no trial, as `next_trial` does; returns the
    /// next load to measure.
    fn settle(s: &mut MdrSearch, p: u32) -> Option<usize> {
        for _ in 0..64 {
            let x = s.select(p)?;
            if s.worth_measuring(x, p) {
                return Some(x);
            }
            s.update_all(x, p);
        }
        panic!("no progress");
    }

    #[test]
    fn contradicted_final_pdr_failures_are_remeasured_once() {
        // Final phase (30 s). NDR (100, 101) settled; PDR passed at 106 in 30 s, then a 30 s
        // trial at 104 (for the NDR walk, say) failed it: conservative update, PDR (103,
        // 104). The failure is contradicted by the pass at 106, so it is measured once more.
        let fin = [
            (100, 30.0, 0.0),
            (101, 30.0, 0.0001),
            (102, 30.0, 0.0),
            (103, 30.0, 0.001),
            (104, 30.0, 0.02),
            (106, 30.0, 0.002),
            (107, 30.0, 0.5),
        ];
        let mut s = placed(cfg(), 3, &fin, &[(100, 101), (106, 107)]);
        s.update_all(104, 3);
        assert!(s.contradicted(104, 1, 30.0));
        assert!(!s.confirmed(104, 1, 3));
        assert_eq!(settle(&mut s, 3), Some(104));
        assert_eq!(s.intervals[1], Interval { lo: 103, hi: 104 });
        // A pass only one width above is the boundary's coin toss: a failure at 105 is
        // trusted.
        let mut near = placed(cfg(), 3, &fin, &[(100, 101), (106, 107)]);
        near.samples.entry(105).or_default().push(Sample {
            duration: 30.0,
            loss_ratio: 0.02,
        });
        assert!(near.contradicted(105, 1, 30.0));
        assert!(near.confirmed(105, 1, 3));
        // The zero-loss goal trusts its contradicted final-duration failure (102 passed).
        assert!(s.contradicted(101, 0, 30.0));
        assert!(s.confirmed(101, 0, 3));
        // It passes the second time: 104 is an invalid upper bound, the external search goes
        // up one width.
        let mut again = s.clone();
        again.samples.get_mut(&104).unwrap().push(Sample {
            duration: 30.0,
            loss_ratio: 0.003,
        });
        again.update_all(104, 3);
        assert!(again.hi_invalid(1, 3));
        assert_eq!(settle(&mut again, 3), Some(105));
        // It fails again: the second final-duration failure decides, the phase ends.
        s.samples.get_mut(&104).unwrap().push(Sample {
            duration: 30.0,
            loss_ratio: 0.01,
        });
        s.update_all(104, 3);
        assert!(s.confirmed(104, 1, 3));
        assert_eq!(settle(&mut s, 3), None);
        assert_eq!(s.intervals[1], Interval { lo: 103, hi: 104 });
        // The seed-exact mode trusts a final-duration failure.
        let mut s = placed(seed(), 3, &fin, &[(100, 101), (106, 107)]);
        s.update_all(104, 3);
        assert!(s.confirmed(104, 1, 3));
    }

    #[test]
    fn conservative_updates() {
        let mut s = placed(
            cfg(),
            1,
            &[(100, 1.0, 0.0), (110, 1.0, 0.01)],
            &[(100, 110), (100, 110)],
        );
        // A good trial above a valid upper bound never moves it.
        s.samples.entry(120).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0,
        });
        s.update_all(120, 1);
        assert_eq!(s.intervals[0], Interval { lo: 100, hi: 110 });
        // A bad trial below a valid lower bound always moves it: it becomes the (invalid)
        // lower bound, the upper bound is the lowest failing load above it.
        s.samples.entry(90).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.1,
        });
        s.update_all(90, 1);
        assert_eq!(s.intervals[0], Interval { lo: 90, hi: 110 });
        assert!(s.lo_invalid(0, 1));
    }

    #[test]
    fn optimistic_maximum() {
        let c = cfg();
        let top = MdrSearch::new(c.clone()).unwrap().grid().top();
        // External up never passes the maximum.
        let s = placed(
            c.clone(),
            1,
            &[(top - 3, 1.0, 0.0), (top - 1, 1.0, 0.0)],
            &[(top - 3, top - 1); 2],
        );
        assert_eq!(s.select(1), Some(top));
        // An upper bound at the maximum rate is valid without a failing trial.
        let s = placed(c.clone(), 1, &[(top - 1, 1.0, 0.0)], &[(top - 1, top); 2]);
        assert!(s.hi_valid(0, 1) && s.hi_valid(1, 1));
        // No loss at line rate: the result says the maximum is only a lower bound.
        let model = SimModel {
            ndr: 40e6,
            pdr: 41e6,
            ..SimModel::default()
        };
        let mut s = MdrSearch::new(c).unwrap();
        let r = crate::search::drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
        for g in &r.outcome.goals {
            assert!(g.max_rate_is_lower_bound && !g.incomplete, "{g:?}");
            assert_eq!((g.lower_pps, g.upper_pps), (Some(16e6), None));
        }
        assert!(r.trials.iter().all(|t| t.rate_pps <= 16e6));
    }

    #[test]
    fn pessimistic_minimum() {
        let c = cfg();
        // Decreases stop at the minimum rate.
        let s = placed(
            c.clone(),
            1,
            &[(3, 1.0, 0.01), (5, 1.0, 0.02)],
            &[(3, 5); 2],
        );
        assert_eq!(s.select(1), Some(0));
        // A lower bound at the minimum that fails at a shorter duration is re-measured...
        let s = placed(
            c.clone(),
            2,
            &[(0, 1.0, 0.01), (5, 1.0, 0.02)],
            &[(0, 5); 2],
        );
        assert_eq!(s.select(2), Some(0));
        // ...and once it fails at the phase's duration the goal stops refining.
        let d = s.phase_duration(2);
        let s = placed(c.clone(), 2, &[(0, d, 0.01), (5, 1.0, 0.02)], &[(0, 5); 2]);
        assert_eq!(s.select(2), None);
        // The minimum rate still losing is a clear failure in the result.
        let model = SimModel {
            ndr: 0.5e6,
            pdr: 0.51e6,
            ..SimModel::default()
        };
        let mut s = MdrSearch::new(c).unwrap();
        let r = crate::search::drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
        for g in &r.outcome.goals {
            assert!(g.min_rate_fails, "{g:?}");
            assert_eq!((g.lower_pps, g.upper_pps), (None, Some(1e6)));
        }
        assert!(r.trials.iter().all(|t| t.rate_pps >= 1e6));
    }

    #[test]
    fn timeout_stops_within_budget() {
        let mut c = cfg();
        c.time_budget = Some(40.0);
        c.trial_overhead = 0.5;
        let mut s = MdrSearch::new(c).unwrap();
        let model = SimModel {
            ndr: 5e6,
            pdr: 5.1e6,
            ..SimModel::default()
        };
        let r = crate::search::drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
        assert!(r.outcome.timed_out);
        let accounted: f64 = r.trials.iter().map(|t| t.duration_s + 0.5).sum();
        assert!(accounted <= 40.0, "{accounted}");
        assert!(r.outcome.goals.iter().all(|g| g.incomplete));
        assert_eq!(r.trials.last().unwrap().end_s, accounted);
    }

    #[test]
    fn settled_loads_are_not_measured_again() {
        // The maximum rate failed at 1 s; an external step up landing there needs no trial.
        let c = cfg();
        let top = MdrSearch::new(c.clone()).unwrap().grid().top();
        let mut s = placed(
            c,
            1,
            &[(top, 1.0, 0.3), (top - 4, 1.0, 0.0), (top - 2, 1.0, 0.001)],
            &[(top - 4, top - 2); 2],
        );
        let t = s.next_trial().unwrap();
        assert_ne!(t.rate_pps, s.grid().rate(top));
        assert_eq!(
            s.intervals[1],
            Interval {
                lo: top - 2,
                hi: top
            }
        );
    }

    #[test]
    fn draft_mode_needs_duration_sum() {
        let mut c = cfg();
        c.final_duration = 1.0;
        c.phases = 0;
        c.goals = vec![Goal {
            exceed_ratio: 0.5,
            duration_sum: Some(4.0),
            ..Goal::new("PDR", 0.005, 0.01)
        }];
        let mut s = placed(c, 1, &[], &[(100, 110)]);
        let st = |s: &MdrSearch| s.state(100, 0, 1).unwrap();
        s.samples.entry(100).or_default().push(Sample {
            duration: 1.0,
            loss_ratio: 0.01,
        });
        assert_eq!(
            st(&s),
            LoadState {
                bad: None,
                confirmed: false
            }
        );
        s.samples.get_mut(&100).unwrap().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0,
        });
        s.samples.get_mut(&100).unwrap().push(Sample {
            duration: 1.0,
            loss_ratio: 0.0,
        });
        // 1 bad second out of 3, 4 needed: even a 4th bad one keeps it within 50 %.
        assert_eq!(
            st(&s),
            LoadState {
                bad: Some(false),
                confirmed: true
            }
        );
        s.samples.get_mut(&100).unwrap().push(Sample {
            duration: 1.0,
            loss_ratio: 0.02,
        });
        s.samples.get_mut(&100).unwrap().push(Sample {
            duration: 1.0,
            loss_ratio: 0.02,
        });
        // 3 bad out of 5: the exceed ratio is passed.
        assert_eq!(
            st(&s),
            LoadState {
                bad: Some(true),
                confirmed: true
            }
        );
    }

    /// A measurer that fails the test if asked for a rate outside the grid's range.
    struct Bounded<M>(M, f64, f64);
    impl<M: Measurer> Measurer for Bounded<M> {
        fn measure(
            &mut self,
            rate: f64,
            d: f64,
        ) -> Result<TrialCounts, crate::search::MeasureError> {
            assert!(
                rate >= self.1 && rate <= self.2,
                "rate {rate} outside the limits"
            );
            self.0.measure(rate, d)
        }
    }

    #[test]
    fn consistent_dut_contains_truth() {
        let c = SearchConfig::csit();
        let model = SimModel {
            ndr: 12e6,
            pdr: 12.24e6,
            ..SimModel::default()
        };
        let mut s = MdrSearch::new(c.clone()).unwrap();
        let mut m = Bounded(SimDut::new(model), c.min_rate, c.max_rate);
        let r = crate::search::drive(&mut s, &mut m, &mut |_, _| {}).unwrap();
        for g in &r.outcome.goals {
            let truth = model.true_rate(g.goal.loss_ratio, 30.0);
            assert!(
                g.lower_pps.unwrap() <= truth && truth <= g.upper_pps.unwrap(),
                "{g:?}"
            );
            assert!(g.width.unwrap() <= g.goal.width * (1.0 + 1e-9));
            assert!(!g.incomplete && !g.max_rate_is_lower_bound && !g.min_rate_fails);
            assert!(g.trial_count >= 1 && g.trial_duration_sum_s >= 30.0);
        }
        let phases: Vec<Phase> = r.phases.iter().map(|p| p.phase).collect();
        assert_eq!(
            phases,
            [
                Phase::Initial,
                Phase::Intermediate(1),
                Phase::Intermediate(2),
                Phase::Final
            ]
        );
    }
}
