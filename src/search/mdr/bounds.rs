//! Bound bookkeeping of the MDR search: load classification per goal and phase, bound validity, interval updates.

use super::{Interval, LoadState, MdrSearch, Sample, DURATION_EPS};
use crate::search::searcher::Goal;

impl MdrSearch {
    /// Duration sum goal `g` needs in phase `p` (draft mode), interpolated like durations.
    pub(super) fn phase_duration_sum(&self, g: &Goal, p: u32) -> f64 {
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
        if self.stable == Some(true) && p == self.cfg.phases {
            // A device that passed the duration check narrows to the final width with
            // short trials; the final phase only confirms the lower bounds.
            return base;
        }
        base << (fin - p.min(fin)).min(20)
    }

    pub(super) fn state(&self, idx: usize, g: usize, p: u32) -> Option<LoadState> {
        let samples = self.samples.get(&idx)?;
        let last = samples.last()?;
        let goal = &self.cfg.goals[g];
        let d = self.trial_duration(p);
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
                // After the duration check, intermediate phases run trials of the initial
                // duration, so a contradicted failure is already "at the phase's duration":
                // it is measured once more there instead (the second trial decides).
                let shortcut = d < self.phase_duration(p) * (1.0 - DURATION_EPS)
                    && distrusted
                    && samples.iter().filter(|s| long_enough(s)).count() < 2;
                (long_enough(last) && !shortcut || !distrusted) && !retry
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
    pub(super) fn contradicted(&self, idx: usize, g: usize, duration: f64) -> bool {
        self.contradicted_from(idx + 1, g, duration)
    }

    /// Whether a load at index `from` or above met goal `g` in a trial at least `duration`
    /// long.
    pub(super) fn contradicted_from(&self, from: usize, g: usize, duration: f64) -> bool {
        let q = self.cfg.goals[g].loss_ratio;
        self.samples.range(from..).any(|(_, v)| {
            v.iter()
                .any(|s| s.loss_ratio <= q && s.duration >= duration * (1.0 - DURATION_EPS))
        })
    }

    pub(super) fn role(&self, idx: usize, g: usize, p: u32) -> Option<bool> {
        self.state(idx, g, p).and_then(|s| s.bad)
    }

    pub(super) fn confirmed(&self, idx: usize, g: usize, p: u32) -> bool {
        self.state(idx, g, p).is_some_and(|s| s.confirmed)
    }

    pub(super) fn lo_invalid(&self, g: usize, p: u32) -> bool {
        self.role(self.intervals[g].lo, g, p) == Some(true)
    }

    pub(super) fn lo_valid(&self, g: usize, p: u32) -> bool {
        self.role(self.intervals[g].lo, g, p) == Some(false)
    }

    pub(super) fn hi_valid(&self, g: usize, p: u32) -> bool {
        let hi = self.intervals[g].hi;
        hi == self.grid.top() && self.role(hi, g, p) != Some(false)
            || self.role(hi, g, p) == Some(true)
    }

    pub(super) fn hi_invalid(&self, g: usize, p: u32) -> bool {
        let hi = self.intervals[g].hi;
        hi < self.grid.top() && self.role(hi, g, p) == Some(false)
    }

    /// A goal whose lower bound is the minimum rate and fails there at this phase's duration
    /// (a failure at the minimum is only believed from a trial of the phase's duration).
    pub(super) fn goal_failed(&self, g: usize, p: u32) -> bool {
        let lo = self.intervals[g].lo;
        lo == 0
            && self.role(0, g, p) == Some(true)
            && self.confirmed(0, g, p)
            && self.measured_at_phase(0, p)
    }

    /// Whether the latest trial at `idx` has the duration of phase `p`.
    pub(super) fn measured_at_phase(&self, idx: usize, p: u32) -> bool {
        let d = self.trial_duration(p);
        self.samples
            .get(&idx)
            .and_then(|v| v.last())
            .is_some_and(|s| s.duration >= d * (1.0 - DURATION_EPS))
    }

    /// Applies the seed's update rules for a load `x` just classified, to goal `g`.
    pub(super) fn update_interval(&mut self, g: usize, x: usize, p: u32) {
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

    pub(super) fn update_all(&mut self, x: usize, p: u32) {
        for g in 0..self.cfg.goals.len() {
            self.update_interval(g, x, p);
        }
    }
}
