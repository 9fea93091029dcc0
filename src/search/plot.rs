//! The picture of a search, like the graphs CSIT publishes: trials over (accounted) time as
//! horizontal bars at their rate, each goal's lower and upper bound as step lines, and the
//! phase boundaries as vertical lines. SVG and PNG through `plotters`.
//!
//! Text is rendered with `plotters`' `ab_glyph` feature and DejaVu Sans Mono bundled in
//! `src/search/fonts/` (Bitstream Vera license, see `DejaVu-LICENSE.txt`), so no system font
//! library (fontconfig, freetype) is needed.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::{Phase, Report};

static FONT: &[u8] = include_bytes!("fonts/DejaVuSansMono.ttf");
static REGISTER: Once = Once::new();

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The file name ends neither in `.svg` nor in `.png`.
    #[error("plot path {0:?} must end in .svg or .png")]
    Format(String),
    /// The drawing backend failed (e.g. the file cannot be written).
    #[error("cannot draw plot {path:?}: {message}")]
    Draw {
        /// The file.
        path: String,
        /// The backend's message.
        message: String,
    },
}

const GOAL_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

fn register_font() {
    REGISTER.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The bundled font is valid; a failure would only lose text, not the plot.
            let _ = plotters::style::register_font("sans-serif", style, FONT);
        }
    });
}

/// Draws the report to `path` (`.svg` or `.png`, 1200x700).
pub fn plot(report: &Report, path: &Path) -> Result<(), PlotError> {
    register_font();
    let name = path.display().to_string();
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: name.clone(),
        message: e.to_string(),
    };
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let size = (1200, 700);
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(report, &root).map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw(report, &root).map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        _ => Err(PlotError::Format(name)),
    }
}

/// The y range worth showing: around the final bounds, including the trials near them.
fn y_range(report: &Report) -> (f64, f64) {
    let bounds: Vec<f64> = report
        .outcome
        .goals
        .iter()
        .flat_map(|g| [g.lower_pps, g.upper_pps])
        .flatten()
        .collect();
    let (mut lo, mut hi) = if bounds.is_empty() {
        (report.config.min_rate, report.config.max_rate)
    } else {
        let lo = bounds.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = bounds.iter().copied().fold(0.0, f64::max);
        (lo * 0.97, hi * 1.03)
    };
    lo = lo.max(0.0);
    if hi <= lo {
        hi = lo * 1.1 + 1.0;
    }
    (lo, hi)
}

fn draw<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (ylo, yhi) = y_range(report);
    let scale = 1e-6;
    let t_end = report.trials.last().map_or(1.0, |t| t.end_s).max(1.0);
    let title = format!(
        "{} search: {} trials, {:.1} s of trials",
        report.algorithm.to_uppercase(),
        report.outcome.trial_count,
        report.outcome.trial_duration_sum_s
    );
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..t_end * 1.02, ylo * scale..yhi * scale)?;
    chart
        .configure_mesh()
        .x_desc("accounted search time [s]   (bars: trials; green no loss, orange within the largest goal loss ratio, red above)")
        .y_desc("transmit rate [Mpps]")
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;

    // Phase boundaries.
    for (i, p) in report.phases.iter().enumerate() {
        let x = p.start_s;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, ylo * scale), (x, yhi * scale)],
            RGBColor(150, 180, 230).stroke_width(1),
        )))?;
        let label = match p.phase {
            Phase::Initial => "init".to_string(),
            Phase::Intermediate(n) => format!("phase {n}"),
            Phase::Final => "final".to_string(),
            Phase::Binary(n) => format!(
                "binary {}",
                report
                    .config
                    .goals
                    .get(n as usize)
                    .map_or("", |g| g.name.as_str())
            ),
        };
        let y = yhi * scale - (yhi - ylo) * scale * (0.03 + 0.04 * (i % 2) as f64);
        chart.draw_series(std::iter::once(Text::new(
            label,
            (x, y),
            ("sans-serif", 13).into_font().color(&RGBColor(60, 90, 160)),
        )))?;
    }

    let clamp = |r: f64| r.clamp(ylo, yhi) * scale;
    // Each goal's bounds over time.
    for (g, goal) in report.config.goals.iter().enumerate() {
        let color = GOAL_COLORS[g % GOAL_COLORS.len()];
        for (upper, name) in [(false, "lower"), (true, "upper")] {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            let mut prev: Option<(f64, f64)> = None;
            for snap in &report.bounds_history {
                let v = if upper {
                    snap.upper_pps.get(g).copied().flatten()
                } else {
                    snap.lower_pps.get(g).copied().flatten()
                };
                if let Some(v) = v {
                    let y = clamp(v);
                    if let Some((_, py)) = prev {
                        pts.push((snap.end_s, py));
                    }
                    pts.push((snap.end_s, y));
                    prev = Some((snap.end_s, y));
                }
            }
            if let Some(&(_, y)) = pts.last() {
                pts.push((t_end, y));
            }
            let style = color.stroke_width(2);
            let label = format!("{} {name} (loss ratio {})", goal.name, goal.loss_ratio);
            if upper {
                chart
                    .draw_series(DashedLineSeries::new(pts, 8, 5, style))?
                    .label(label)
                    .legend(move |(x, y)| {
                        EmptyElement::at((x, y))
                            + PathElement::new(vec![(0, 0), (7, 0)], color.stroke_width(2))
                            + PathElement::new(vec![(12, 0), (20, 0)], color.stroke_width(2))
                    });
            } else {
                chart
                    .draw_series(LineSeries::new(pts, style))?
                    .label(label)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
        }
    }
    // Trials, on top of the bounds: a bar from start to end at the rate (clamped to the
    // view), colored by loss.
    let max_ratio = report
        .config
        .goals
        .iter()
        .map(|g| g.loss_ratio)
        .fold(0.0, f64::max);
    let mut start = 0.0;
    for t in &report.trials {
        let color = if t.loss_ratio == 0.0 {
            RGBColor(30, 150, 60)
        } else if t.loss_ratio <= max_ratio {
            RGBColor(230, 150, 20)
        } else {
            RGBColor(200, 30, 30)
        };
        let y = clamp(t.rate_pps);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(start, y), (t.end_s, y)],
            color.stroke_width(4),
        )))?;
        start = t.end_s;
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};

    #[test]
    fn draws_svg_and_png() {
        let model: SimModel = "ndr=12e6,pdr=12.24e6,plr=0.005".parse().unwrap();
        let mut s = MdrSearch::new(SearchConfig::csit()).unwrap();
        let report = drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("search.svg");
        let png = dir.path().join("search.png");
        plot(&report, &svg).unwrap();
        plot(&report, &png).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"));
        assert!(text.contains("NDR lower") && text.contains("final"));
        let bytes = std::fs::read(&png).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(matches!(
            plot(&report, &dir.path().join("x.gif")),
            Err(PlotError::Format(_))
        ));
    }
}
