//! Plain binary search, one goal at a time, every trial at the final duration: the classic
//! NDR and PDR searches that MDR replaces, kept for comparison.
//!
//! For each goal: one trial at the maximum rate (if it meets the goal, the maximum is the
//! lower bound); then bisection of (minimum, maximum) on the logarithmic grid, assuming the
//! minimum meets the goal, until the interval meets the width; if the lower bound is still the
//! unmeasured minimum, it is measured last (a failure there is reported as such). Trials of
//! one goal are not used for another.

use super::grid::Grid;
use super::measurer::TrialCounts;
use super::searcher::{
    ConfigError, GoalResult, Outcome, Phase, SearchConfig, Searcher, TrialRecord, TrialRequest,
};

#[derive(Debug, Clone, Copy)]
struct GoalState {
    lo: usize,
    hi: usize,
    lo_measured: Option<bool>,
    top_checked: bool,
    min_fails: bool,
    max_good: bool,
    done: bool,
    lo_count: usize,
}

/// The plain binary searcher; drive it through [`Searcher`].
#[derive(Debug, Clone)]
pub struct BinarySearch {
    cfg: SearchConfig,
    grid: Grid,
    goals: Vec<GoalState>,
    current: usize,
    pending: Option<(TrialRequest, usize)>,
    trials: Vec<TrialRecord>,
    elapsed: f64,
    timed_out: bool,
    phase_starts: Vec<(f64, Phase)>,
}

impl BinarySearch {
    /// A new binary search over the same grid MDR would use.
    pub fn new(cfg: SearchConfig) -> Result<BinarySearch, ConfigError> {
        cfg.validate()?;
        let finest = cfg
            .goals
            .iter()
            .map(|g| g.width)
            .fold(f64::INFINITY, f64::min);
        let grid = Grid::new(cfg.min_rate, cfg.max_rate, finest, 1);
        let top = grid.top();
        let goals = vec![
            GoalState {
                lo: 0,
                hi: top,
                lo_measured: None,
                top_checked: false,
                min_fails: false,
                max_good: false,
                done: false,
                lo_count: 0,
            };
            cfg.goals.len()
        ];
        Ok(BinarySearch {
            cfg,
            grid,
            goals,
            current: 0,
            pending: None,
            trials: Vec::new(),
            elapsed: 0.0,
            timed_out: false,
            phase_starts: Vec::new(),
        })
    }

    fn next_index(&mut self) -> Option<usize> {
        while self.current < self.goals.len() {
            let g = self.current;
            let steps = self.grid.steps_for_width(self.cfg.goals[g].width);
            let s = &mut self.goals[g];
            if !s.done {
                if !s.top_checked {
                    return Some(self.grid.top());
                }
                if s.hi - s.lo > steps {
                    return Some(s.lo + (s.hi - s.lo) / 2);
                }
                if s.lo_measured.is_none() {
                    return Some(s.lo);
                }
                s.done = true;
            }
            self.current += 1;
        }
        None
    }
}

impl Searcher for BinarySearch {
    fn next_trial(&mut self) -> Option<TrialRequest> {
        if let Some((req, _)) = self.pending {
            return Some(req);
        }
        let idx = self.next_index()?;
        let d = self.cfg.final_duration;
        if let Some(b) = self.cfg.time_budget {
            if self.elapsed + d + self.cfg.trial_overhead > b * (1.0 + 1e-9) {
                self.timed_out = true;
                self.current = self.goals.len();
                return None;
            }
        }
        let phase = Phase::Binary(self.current as u32);
        if self.phase_starts.last().map(|&(_, p)| p) != Some(phase) {
            self.phase_starts.push((self.elapsed, phase));
        }
        let req = TrialRequest {
            phase,
            rate_pps: self.grid.rate(idx),
            duration_s: d,
        };
        self.pending = Some((req, idx));
        Some(req)
    }

    fn record(&mut self, counts: TrialCounts) {
        let Some((req, idx)) = self.pending.take() else {
            return;
        };
        self.elapsed += req.duration_s + self.cfg.trial_overhead;
        let rec = TrialRecord::new(&req, counts, self.elapsed);
        self.trials.push(rec);
        let g = self.current;
        let bad = rec.loss_ratio > self.cfg.goals[g].loss_ratio;
        let top = self.grid.top();
        let s = &mut self.goals[g];
        if !s.top_checked {
            s.top_checked = true;
            if !bad {
                s.lo = top;
                s.hi = top;
                s.lo_measured = Some(true);
                s.max_good = true;
                s.lo_count = 1;
                s.done = true;
            }
            return;
        }
        if idx == s.lo && s.lo_measured.is_none() {
            s.lo_measured = Some(!bad);
            s.lo_count = 1;
            if bad {
                s.min_fails = true;
                s.hi = s.lo;
            }
            return;
        }
        if bad {
            s.hi = idx;
        } else {
            s.lo = idx;
            s.lo_measured = Some(true);
            s.lo_count = 1;
        }
    }

    fn trials(&self) -> &[TrialRecord] {
        &self.trials
    }

    fn outcome(&self) -> Outcome {
        let goals = self
            .goals
            .iter()
            .zip(&self.cfg.goals)
            .map(|(s, goal)| {
                let lower = (s.lo_measured == Some(true)).then(|| self.grid.rate(s.lo));
                let upper = if s.max_good {
                    None
                } else {
                    s.top_checked.then(|| self.grid.rate(s.hi))
                };
                GoalResult {
                    goal: goal.clone(),
                    lower_pps: lower,
                    upper_pps: upper,
                    width: match (lower, upper) {
                        (Some(l), Some(u)) => Some(1.0 - l / u),
                        _ => None,
                    },
                    trial_count: s.lo_count,
                    trial_duration_sum_s: s.lo_count as f64 * self.cfg.final_duration,
                    max_rate_is_lower_bound: s.max_good,
                    min_rate_fails: s.min_fails,
                    incomplete: !s.done,
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
        "binary"
    }
}
