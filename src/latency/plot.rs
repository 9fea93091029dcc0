//! The latency distribution as an HdrHistogram percentile plot: latency over
//! percentile on the standard `1/(1-p)` axis (90 %, 99 %, 99.9 %, ... evenly
//! spaced), one curve per stream and one for all streams merged, several
//! trials overlaid. When curves carry delay variation, a second panel below
//! draws, on the same axis, each one's PDV (solid: latency minus its minimum)
//! and signed IPDV (dashed). SVG or PNG through `plotters`.

use std::path::Path;

use hdrhistogram::Histogram;

use super::variation::SignedHistogram;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One curve.
pub struct Curve<'a> {
    /// Its legend entry.
    pub label: String,
    /// Which trial it belongs to (its color).
    pub trial: usize,
    /// The merged curve of its trial (drawn thick) rather than one stream's.
    pub merged: bool,
    /// The latency samples, nanoseconds.
    pub hist: &'a Histogram<u64>,
    /// The IPDV samples of a single stream, for the delay-variation panel
    /// (its PDV comes from `hist`); None draws no variation for this curve.
    pub ipdv: Option<&'a SignedHistogram>,
}

pub use crate::plot::PlotError;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Points per decade of `1/(1-p)`.
const STEPS_PER_DECADE: u32 = 24;

/// The curve's points: (`1/(1-p)`, latency in microseconds), from the median
/// side (p = 0) to the last percentile the samples can support (1 - 1/count).
pub fn points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    grid(h.len(), |p| h.value_at_quantile(p) as f64 / 1e3)
}

/// The PDV curve of a stream's latency histogram: [`points`] minus the
/// minimum, microseconds.
pub fn pdv_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let min = h.min() as f64 / 1e3;
    points(h).into_iter().map(|(x, y)| (x, y - min)).collect()
}

/// The signed IPDV curve, microseconds, on the same axis.
pub fn ipdv_points(h: &SignedHistogram) -> Vec<(f64, f64)> {
    grid(h.len(), |p| h.value_at_quantile(p) as f64 / 1e3)
}

/// `value(p)` at `1/(1-p)` = 1, then 24 steps a decade up to `n` samples.
fn grid(n: u64, value: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
    if n == 0 {
        return Vec::new();
    }
    let x_max = (n as f64).max(1.0);
    let mut out = Vec::new();
    let mut k = 0u32;
    loop {
        let x = 10f64.powf(f64::from(k) / f64::from(STEPS_PER_DECADE));
        let x = x.min(x_max);
        out.push((x, value(1.0 - 1.0 / x)));
        if x >= x_max {
            break;
        }
        k += 1;
    }
    out
}

/// The percentile a `1/(1-p)` value stands for, as an axis label.
fn percentile_label(x: f64) -> String {
    let p = 100.0 * (1.0 - 1.0 / x);
    if p < 99.0 {
        format!("{p:.0}%")
    } else {
        let digits = (-(1.0 - p / 100.0).log10()).round() as usize;
        format!("{p:.*}%", digits.saturating_sub(2))
    }
}

/// Draws `curves` to `path` (`.svg` or `.png`, 1200x700).
pub fn plot(title: &str, curves: &[Curve<'_>], path: &Path) -> Result<(), PlotError> {
    crate::plot::to_file(path, |r| draw(title, curves, r), |r| draw(title, curves, r))
}

fn draw<DB: DrawingBackend>(
    title: &str,
    curves: &[Curve<'_>],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    if curves.iter().all(|c| c.ipdv.is_none()) {
        return draw_latency(title, curves, root);
    }
    let (top, bottom) = root.split_vertically(crate::plot::SIZE.1 * 3 / 5);
    draw_latency(title, curves, &top)?;
    draw_variation(curves, &bottom)
}

/// The x axis's upper end: the most samples any curve has (at least 10).
fn x_end(all: &[Vec<(f64, f64)>]) -> f64 {
    all.iter().flatten().map(|p| p.0).fold(10.0, f64::max)
}

fn draw_latency<DB: DrawingBackend>(
    title: &str,
    curves: &[Curve<'_>],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let all: Vec<Vec<(f64, f64)>> = curves.iter().map(|c| points(c.hist)).collect();
    let x_max = x_end(&all);
    let y_max = all
        .iter()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(0.001)
        * 1.08;
    let mut chart = crate::plot::frame(root, 15, 45)
        .caption(title, crate::plot::TITLE)
        .build_cartesian_2d((1.0..x_max * 1.05).log_scale(), 0.0..y_max)?;
    crate::plot::mesh(&mut chart)
        .x_desc("percentile (axis: 1/(1-p))")
        .y_desc("latency [us]")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| {
            if y_max >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .draw()?;
    for (c, pts) in curves.iter().zip(all) {
        let color = COLORS[c.trial % COLORS.len()];
        let (style, legend_w) = if c.merged {
            (color.stroke_width(3), 3)
        } else {
            (color.mix(0.55).stroke_width(1), 1)
        };
        chart
            .draw_series(LineSeries::new(pts, style))?
            .label(c.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(
                    vec![(x, y), (x + 20, y)],
                    if legend_w == 3 {
                        color.stroke_width(3)
                    } else {
                        color.mix(0.55).stroke_width(1)
                    },
                )
            });
    }
    // Latency rises to the right, so the upper left corner is free.
    crate::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft).draw()?;
    Ok(())
}

/// PDV (solid) and IPDV (dashed) of the curves that carry them.
fn draw_variation<DB: DrawingBackend>(
    curves: &[Curve<'_>],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    type Points = Vec<(f64, f64)>;
    let with: Vec<(&Curve<'_>, Points, Points)> = curves
        .iter()
        .filter_map(|c| c.ipdv.map(|i| (c, pdv_points(c.hist), ipdv_points(i))))
        .collect();
    let all: Vec<Vec<(f64, f64)>> = with
        .iter()
        .flat_map(|(_, p, i)| [p.clone(), i.clone()])
        .collect();
    let x_max = x_end(&all);
    let ys = all.iter().flatten().map(|p| p.1);
    let (lo, hi) = ys.fold((0.0f64, 0.001f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let pad = (hi - lo) * 0.06;
    let mut chart = crate::plot::frame(root, 15, 45)
        .build_cartesian_2d((1.0..x_max * 1.05).log_scale(), (lo - pad)..(hi + pad))?;
    crate::plot::mesh(&mut chart)
        .x_desc("percentile (axis: 1/(1-p))")
        .y_desc("PDV (solid), IPDV (dashed) [us]")
        .x_label_formatter(&|x| percentile_label(*x))
        .y_label_formatter(&|y| {
            if hi - lo >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .draw()?;
    for (c, pdv, ipdv) in with {
        let color = COLORS[c.trial % COLORS.len()];
        let style = if c.merged {
            color.stroke_width(2)
        } else {
            color.mix(0.7).stroke_width(1)
        };
        chart
            .draw_series(LineSeries::new(pdv, style))?
            .label(format!("{}: PDV, IPDV", c.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(DashedLineSeries::new(ipdv, 6, 4, style))?;
    }
    crate::plot::legend(&mut chart, SeriesLabelPosition::UpperLeft).draw()?;
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn percentile_axis_and_files() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 1000).unwrap();
        }
        let pts = points(&h);
        // From p = 0 to 1 - 1/10000, rising.
        assert_eq!(pts[0].0, 1.0);
        assert_eq!(pts.last().unwrap().0, 10_000.0);
        assert!(pts.windows(2).all(|w| w[1].1 >= w[0].1));
        // p99 (x = 100) is about 9,900 us.
        let p99 = pts.iter().find(|p| (p.0 - 100.0).abs() < 1e-6).unwrap();
        assert!((p99.1 - 9_900.0).abs() < 20.0, "{p99:?}");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e5), "99.999%");
        assert!(points(&Histogram::<u64>::new(3).unwrap()).is_empty());
        let dir = tempfile::tempdir().unwrap();
        let curves = [Curve {
            label: "all".into(),
            trial: 0,
            merged: true,
            hist: &h,
            ipdv: None,
        }];
        for ext in ["svg", "png"] {
            let p = dir.path().join(format!("l.{ext}"));
            plot("latency", &curves, &p).unwrap();
            assert!(std::fs::metadata(&p).unwrap().len() > 1000);
        }
        assert!(matches!(
            plot("x", &curves, &dir.path().join("l.gif")),
            Err(PlotError::Format(_))
        ));
        // With delay variation: a second panel, and its curves.
        let mut ipdv = SignedHistogram::default();
        for v in -500..=1000i64 {
            ipdv.record(v * 100);
        }
        let pdv = pdv_points(&h);
        assert_eq!(pdv[0].1, 0.0, "p = 0 is the minimum");
        let p99 = pdv.iter().find(|p| (p.0 - 100.0).abs() < 1e-6).unwrap();
        assert!(
            (p99.1 - 9_899.0).abs() < 20.0,
            "p99 less the minimum: {p99:?}"
        );
        let i = ipdv_points(&ipdv);
        assert!(
            (i[0].1 + 50.0).abs() < 0.05,
            "p = 0 is the most negative: {i:?}"
        );
        assert!(i.windows(2).all(|w| w[1].1 >= w[0].1));
        let curves = [Curve {
            label: "all".into(),
            trial: 0,
            merged: true,
            hist: &h,
            ipdv: Some(&ipdv),
        }];
        let p = dir.path().join("v.svg");
        plot("latency", &curves, &p).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        assert!(
            svg.contains("PDV (solid), IPDV (dashed)"),
            "no second panel"
        );
    }
}
