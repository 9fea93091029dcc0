//! A SPEAD receive over time (`linerate spead recv --plot PATH`): the rate in
//! Gb/s on top and, below, the fraction of the expected data present (chunks:
//! heaps present in the chunks' `present` maps; heaps: heaps completed out of
//! those ended), per interval and cumulative. SVG or PNG through `plotters`.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

/// Cumulative counts at one moment of the receive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the receive started.
    pub t: f64,
    /// Payload bytes received so far.
    pub bytes: u64,
    /// Units present so far (heaps present in chunks, or heaps complete).
    pub good: u64,
    /// Units expected so far (slots of finished chunks, or heaps ended).
    pub total: u64,
}

/// Samples at a steady interval for a plot of a run of any length: when they
/// fill their capacity, every other one is dropped and the interval doubles,
/// so memory stays bounded and nothing is allocated after the start.
#[derive(Debug, Clone)]
pub struct Sampler {
    every: f64,
    next: f64,
    samples: Vec<Sample>,
}

impl Sampler {
    /// A sampler every `every_s` seconds keeping at most `cap` (>= 4) samples.
    pub fn new(every_s: f64, cap: usize) -> Sampler {
        Sampler {
            every: every_s,
            next: 0.0,
            samples: Vec::with_capacity(cap.max(4)),
        }
    }

    /// Whether a sample at `t` is due.
    #[inline]
    pub fn due(&self, t: f64) -> bool {
        t >= self.next
    }

    /// Records `s` (call when [`Sampler::due`]; also for the last sample).
    pub fn push(&mut self, s: Sample) {
        if self.samples.last().is_some_and(|l| s.t <= l.t) {
            return;
        }
        if self.samples.len() == self.samples.capacity() {
            let mut i = 0;
            self.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.every *= 2.0;
        }
        self.samples.push(s);
        self.next = s.t + self.every;
    }

    /// Records the last sample, at the end: one that closes an interval
    /// shorter than half the usual replaces the sample before it, so the plot
    /// ends without a sliver whose rate means nothing.
    pub fn push_last(&mut self, s: Sample) {
        let n = self.samples.len();
        if n >= 2 && s.t > self.samples[n - 1].t && s.t - self.samples[n - 1].t < self.every / 2.0 {
            self.samples[n - 1] = s;
        } else {
            self.push(s);
        }
    }

    /// The samples so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The interval between samples now.
    pub fn every_s(&self) -> f64 {
        self.every
    }
}

pub use crate::plot::PlotError;

/// Per interval between consecutive samples: (end time, Gb/s, fraction
/// present in the interval when anything was expected in it, cumulative
/// fraction present when anything was expected so far).
pub fn intervals(samples: &[Sample]) -> Vec<(f64, f64, Option<f64>, Option<f64>)> {
    samples
        .windows(2)
        .filter(|w| w[1].t > w[0].t)
        .map(|w| {
            let (a, b) = (w[0], w[1]);
            let gbps = b.bytes.saturating_sub(a.bytes) as f64 * 8.0 / (b.t - a.t) / 1e9;
            let dt = b.total.saturating_sub(a.total);
            let frac = (dt > 0).then(|| b.good.saturating_sub(a.good) as f64 / dt as f64);
            let cum = (b.total > 0).then(|| b.good as f64 / b.total as f64);
            (b.t, gbps, frac, cum)
        })
        .collect()
}

/// Draws the receive to `path` (`.svg` or `.png`, 1200x700); `what` names
/// the fraction ("heaps present in chunks", "heaps complete").
pub fn plot(title: &str, what: &str, samples: &[Sample], path: &Path) -> Result<(), PlotError> {
    crate::plot::to_file(
        path,
        |r| draw(title, what, samples, r),
        |r| draw(title, what, samples, r),
    )
}

fn draw<DB: DrawingBackend>(
    title: &str,
    what: &str,
    samples: &[Sample],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let root = root.titled(title, crate::plot::TITLE)?;
    let (top, bottom) = root.split_vertically(330);
    let iv = intervals(samples);
    let t_end = samples.last().map_or(1.0, |s| s.t).max(0.001);
    let g_max = iv.iter().map(|i| i.1).fold(0.0, f64::max).max(0.001) * 1.1;
    let blue = RGBColor(31, 119, 180);
    let green = RGBColor(44, 160, 44);

    let mut rate = crate::plot::frame(&top, 12, 30).build_cartesian_2d(0.0..t_end, 0.0..g_max)?;
    crate::plot::mesh(&mut rate)
        .y_desc("received [Gb/s]")
        .draw()?;
    // Steps: each interval's rate held over the interval.
    let mut pts = Vec::new();
    let mut prev_t = samples.first().map_or(0.0, |s| s.t);
    for &(t, g, _, _) in &iv {
        pts.push((prev_t, g));
        pts.push((t, g));
        prev_t = t;
    }
    rate.draw_series(LineSeries::new(pts, blue.stroke_width(2)))?;

    let fr: Vec<f64> = iv.iter().filter_map(|i| i.2.or(i.3)).collect();
    let f_lo = fr.iter().copied().fold(1.0, f64::min);
    // Zoom on the interesting part, but keep 1.0 in sight.
    let f_lo = if f_lo > 0.9 {
        (f_lo - 0.01).max(0.0)
    } else {
        0.0
    };
    let mut frac =
        crate::plot::frame(&bottom, 12, 40).build_cartesian_2d(0.0..t_end, f_lo..1.0005)?;
    crate::plot::mesh(&mut frac)
        .x_desc("time since start [s]")
        .y_desc(format!("fraction {what}"))
        .draw()?;
    frac.draw_series(
        iv.iter()
            .filter_map(|i| i.2.map(|f| Circle::new((i.0, f), 3, green.filled()))),
    )?
    .label("per interval")
    .legend(move |(x, y)| Circle::new((x + 10, y), 3, green.filled()));
    frac.draw_series(LineSeries::new(
        iv.iter().filter_map(|i| i.3.map(|c| (i.0, c))),
        BLACK.stroke_width(1),
    ))?
    .label("so far")
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    crate::plot::legend(&mut frac, SeriesLabelPosition::LowerRight).draw()?;
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn intervals_and_files() {
        let s = |t, bytes, good, total| Sample {
            t,
            bytes,
            good,
            total,
        };
        let samples = [
            s(0.0, 0, 0, 0),
            s(0.5, 125_000_000, 90, 100),
            s(1.0, 250_000_000, 90, 100),
            s(1.5, 250_000_000, 190, 200),
        ];
        let iv = intervals(&samples);
        assert_eq!(iv.len(), 3);
        assert!((iv[0].1 - 2.0).abs() < 1e-9);
        assert_eq!(iv[0].2, Some(0.9));
        assert_eq!(iv[1].2, None);
        assert_eq!(iv[1].3, Some(0.9));
        assert_eq!(iv[2].2, Some(1.0));
        assert_eq!(iv[2].3, Some(0.95));
        let dir = tempfile::tempdir().unwrap();
        for ext in ["svg", "png"] {
            let p = dir.path().join(format!("r.{ext}"));
            plot("recv", "heaps present", &samples, &p).unwrap();
            assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        }
        assert!(matches!(
            plot("recv", "x", &samples, &dir.path().join("r.gif")),
            Err(PlotError::Format(_))
        ));
    }

    /// Every interval in which data was expected is drawn: one marker per
    /// interval (plus the legend's), and the rate step over the whole run.
    #[test]
    fn every_interval_is_drawn() {
        let mut sampler = Sampler::new(0.5, 64);
        let mut t = 0.0;
        let (mut bytes, mut good, mut total) = (0u64, 0u64, 0u64);
        while t < 10.0 {
            if sampler.due(t) {
                sampler.push(Sample {
                    t,
                    bytes,
                    good,
                    total,
                });
            }
            t += 0.01;
            bytes += 1_000_000;
            total += 10;
            // A loss now and then, so the fractions differ.
            good += if (t * 100.0).round() as u64 % 37 == 0 {
                9
            } else {
                10
            };
        }
        sampler.push_last(Sample {
            t,
            bytes,
            good,
            total,
        });
        let samples = sampler.samples();
        let n = intervals(samples).len();
        assert_eq!(n, samples.len() - 1);
        assert!(n >= 19, "{n}");
        // The last sample closed a sliver: it replaced the one before.
        let w = samples.windows(2).last().unwrap();
        assert!(w[1].t - w[0].t >= 0.25, "{w:?}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.svg");
        plot("recv", "heaps present", samples, &p).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        let markers = svg.matches("<circle").count();
        assert_eq!(markers, n + 1, "one marker per interval and the legend's");
        let png = dir.path().join("r.png");
        plot("recv", "heaps present", samples, &png).unwrap();
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
    }

    #[test]
    fn sampler_thins_when_full() {
        let mut s = Sampler::new(1.0, 8);
        for i in 0..20 {
            let t = i as f64;
            if s.due(t) {
                s.push(Sample {
                    t,
                    bytes: i,
                    good: i,
                    total: i,
                });
            }
        }
        assert!(s.samples().len() <= 8);
        assert_eq!(s.samples()[0].t, 0.0);
        assert!(s.every_s() >= 2.0);
        assert!(s.samples().windows(2).all(|w| w[1].t > w[0].t));
        // Stays within its first allocation.
        assert_eq!(s.samples.capacity(), 8);
    }
}
