//! Trial selection of the MDR search: external-step sizing and the seed's priorities for the next load.

use super::{Interval, MdrSearch, HINT_MIN_EXCESS_LOSS, LINEAR_STEPS};

impl MdrSearch {
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
    pub(super) fn external_step(&self, g: usize, p: u32, down: bool) -> usize {
        let Interval { lo, hi } = self.intervals[g];
        let goal = self.phase_steps(g, p);
        let width = hi - lo;
        if self.cfg.seed_exact {
            return (2 * width).max(goal);
        }
        // One interval width (at least the goal) for the first steps of a walk, then the
        // interval doubles: exponential search that starts gently.
        // After a jump to a forwarding-rate hint that still failed, the hint was off by
        // noise, not by the interval: continue with steps of the goal width (else the
        // next step is the whole jump again, far below the truth).
        let width = if down && self.hint_index(g, hi) == Some(lo) {
            0
        } else {
            width
        };
        let base = width.max(goal);
        let mut step = if self.ext_runs[g] < LINEAR_STEPS {
            base
        } else {
            2 * base
        };
        if down {
            if let Some(h) = self.hint_index(g, lo) {
                step = step.max(lo - h);
            }
        }
        step
    }

    /// The grid index of the forwarding-rate hint `rate * (1 - loss) / (1 - goal loss
    /// ratio)` of the latest trial at `idx`, when it lost at least `HINT_MIN_EXCESS_LOSS`
    /// more than goal `g` allows.
    fn hint_index(&self, g: usize, idx: usize) -> Option<usize> {
        let s = self.samples.get(&idx)?.last()?;
        let q = self.cfg.goals[g].loss_ratio;
        (s.loss_ratio - q >= HINT_MIN_EXCESS_LOSS).then(|| {
            let hint = self.grid.rate(idx) * (1.0 - s.loss_ratio) / (1.0 - q);
            self.grid.floor_index(hint).min(idx)
        })
    }

    /// The next load of phase `p` by the seed's priorities, or None to end the phase.
    pub(super) fn select(&self, p: u32) -> Option<usize> {
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
}
