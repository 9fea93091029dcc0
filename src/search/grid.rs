//! The discrete logarithmic rate grid.
//!
//! Every rate the search measures is `min * exp(i * step)` for an integer index `i` in
//! `0..=top`, with the last point exactly the maximum rate. Halving and doubling an interval
//! happen on indices, so "the middle of 2 and 8 is 4" (deviation 1, logarithmic rates), a
//! relative width goal is a whole number of steps, and a rate is never measured twice under
//! slightly different floating-point values.

/// A logarithmic grid between a minimum and a maximum rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Grid {
    min: f64,
    max: f64,
    step: f64,
    top: usize,
}

impl Grid {
    /// A grid from `min` to `max` (both > 0, `min < max`) whose step is at most
    /// `-ln(1 - finest_width) / steps_per_width`, adjusted so that `max` is a grid point.
    pub fn new(min: f64, max: f64, finest_width: f64, steps_per_width: u32) -> Grid {
        let span = (max / min).ln();
        let wanted = -(1.0 - finest_width).ln() / f64::from(steps_per_width.max(1));
        let top = ((span / wanted).ceil() as usize).max(1);
        Grid {
            min,
            max,
            step: span / top as f64,
            top,
        }
    }

    /// Index of the maximum rate.
    pub fn top(&self) -> usize {
        self.top
    }

    /// Rate of index `i` (packets/s).
    pub fn rate(&self, i: usize) -> f64 {
        if i >= self.top {
            self.max
        } else if i == 0 {
            self.min
        } else {
            self.min * (self.step * i as f64).exp()
        }
    }

    /// Largest index whose rate does not exceed `rate` (clamped into the grid).
    pub fn floor_index(&self, rate: f64) -> usize {
        if rate.is_nan() || rate <= self.min {
            return 0;
        }
        let i = ((rate / self.min).ln() / self.step + 1e-9).floor();
        (i as usize).min(self.top)
    }

    /// Number of whole steps that fit in relative width `width` (at least 1).
    pub fn steps_for_width(&self, width: f64) -> usize {
        let steps = (-(1.0 - width).ln() / self.step + 1e-9).floor();
        (steps as usize).max(1)
    }

    /// Relative width `1 - lo/hi` of the interval between two indices.
    pub fn relative_width(&self, lo: usize, hi: usize) -> f64 {
        1.0 - self.rate(lo) / self.rate(hi)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn grid_points_and_widths() {
        let g = Grid::new(2e4, 2.0 * 14.88e6, 0.005, 1);
        assert_eq!(g.rate(0), 2e4);
        assert_eq!(g.rate(g.top()), 2.0 * 14.88e6);
        assert!(g.relative_width(10, 11) <= 0.005);
        assert!(g.relative_width(10, 11) > 0.0049);
        assert_eq!(g.steps_for_width(0.005), 1);
        assert_eq!(g.steps_for_width(0.0099), 1);
        assert_eq!(g.steps_for_width(0.01), 2);
        for i in [0, 1, 17, 500, g.top() - 1, g.top()] {
            assert_eq!(g.floor_index(g.rate(i)), i);
            if i < g.top() {
                assert_eq!(g.floor_index(g.rate(i) * 1.000001), i);
            }
        }
        assert_eq!(g.floor_index(1.0), 0);
        assert_eq!(g.floor_index(1e12), g.top());
        // Logarithmic middle: the middle of 2 and 8 is 4.
        let g = Grid::new(1.0, 8.0, 0.5, 1);
        assert_eq!(g.top(), 3);
        let (lo, hi) = (1usize, 3usize);
        assert!((g.rate(lo + (hi - lo) / 2) - 4.0).abs() < 1e-12);
    }
}
