//! The picture of a search, like the graphs CSIT publishes: trials over (accounted) time as
//! horizontal bars at their rate, each goal's lower and upper bound as step lines, and the
//! phase boundaries as vertical lines. SVG and PNG through `plotters`.
//!
//! Text is rendered with `plotters`' `ab_glyph` feature and DejaVu Sans Mono bundled in
//! `src/search/fonts/` (Bitstream Vera license, see `DejaVu-LICENSE.txt`), so no system font
//! library (fontconfig, freetype) is needed.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Phase, Report};

pub use crate::plot::PlotError;

const GOAL_COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

fn register_font() {
    crate::report::register_plot_font();
}

/// Draws the report to `path` (`.svg` or `.png`, 1200x700).
pub fn plot(report: &Report, path: &Path) -> Result<(), PlotError> {
    crate::plot::to_file(path, |r| draw(report, r), |r| draw(report, r))
}

/// The report drawn as SVG text (for the HTML report, which inlines it).
pub fn svg_string(report: &Report) -> Result<String, PlotError> {
    register_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, crate::plot::SIZE).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| PlotError::Draw {
            path: "(inline svg)".into(),
            message: e.to_string(),
        };
        draw(report, &root).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}

/// The rate axis: every trial and every bound on it, on a log scale when the
/// rates span more than 10x (a search from 20 kpps to line rate would
/// otherwise squash all but the top trials into the bottom pixels).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateAxis {
    /// Lowest rate shown, packets/s.
    pub lo: f64,
    /// Highest rate shown, packets/s.
    pub hi: f64,
    /// Logarithmic.
    pub log: bool,
}

impl RateAxis {
    pub(crate) fn of(report: &Report) -> RateAxis {
        let rates: Vec<f64> = report
            .trials
            .iter()
            .map(|t| t.rate_pps)
            .chain(
                report
                    .outcome
                    .goals
                    .iter()
                    .flat_map(|g| [g.lower_pps, g.upper_pps])
                    .flatten(),
            )
            .chain(report.bounds_history.iter().flat_map(|b| {
                b.lower_pps
                    .iter()
                    .chain(b.upper_pps.iter())
                    .copied()
                    .flatten()
            }))
            .filter(|r| r.is_finite() && *r > 0.0)
            .collect();
        let (lo, hi) = if rates.is_empty() {
            (report.config.min_rate, report.config.max_rate)
        } else {
            (
                rates.iter().copied().fold(f64::INFINITY, f64::min),
                rates.iter().copied().fold(0.0, f64::max),
            )
        };
        let (lo, hi) = (lo.max(1.0), hi.max(1.0));
        if hi / lo > 10.0 {
            RateAxis {
                lo: lo / 1.25,
                hi: hi * 1.25,
                log: true,
            }
        } else {
            let pad = ((hi - lo) * 0.06).max(hi * 0.005);
            RateAxis {
                lo: (lo - pad).max(0.0),
                hi: hi + pad,
                log: false,
            }
        }
    }

    /// Packets/s to the chart's y coordinate.
    fn y(&self, pps: f64) -> f64 {
        if self.log {
            pps.max(1.0).log10()
        } else {
            pps * 1e-6
        }
    }

    /// The chart's y coordinate back to packets/s.
    fn pps(&self, y: f64) -> f64 {
        if self.log {
            10f64.powf(y)
        } else {
            y * 1e6
        }
    }

    /// Whether a rate is inside the axis.
    #[cfg(test)]
    pub(crate) fn shows(&self, pps: f64) -> bool {
        (self.lo..=self.hi).contains(&pps)
    }
}

/// The loss on the way (unsent packets apart), as a ratio of offered.
fn path_loss_ratio(t: &super::TrialRecord) -> f64 {
    let unsent = t.unsent.unwrap_or(0);
    if t.offered == 0 {
        0.0
    } else {
        t.offered.saturating_sub(unsent).saturating_sub(t.received) as f64 / t.offered as f64
    }
}

const NO_LOSS: RGBColor = RGBColor(30, 150, 60);
const SOME_LOSS: RGBColor = RGBColor(230, 150, 20);
const LOSS: RGBColor = RGBColor(200, 30, 30);
const UNSENT: RGBColor = RGBColor(130, 40, 200);
const PHASE: RGBColor = RGBColor(150, 180, 230);

/// Width of the legend panel, right of the chart.
const LEGEND_W: u32 = 290;

fn draw<DB: DrawingBackend>(
    report: &Report,
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let (w, _) = root.dim_in_pixel();
    let (area, legend) = root.split_horizontally(w.saturating_sub(LEGEND_W));
    let axis = RateAxis::of(report);
    let (ylo, yhi) = (axis.y(axis.lo), axis.y(axis.hi));
    let t_end = report.trials.last().map_or(1.0, |t| t.end_s).max(1.0);
    let title = format!(
        "{} search: {} trials, {:.1} s of trials",
        report.algorithm.to_uppercase(),
        report.outcome.trial_count,
        report.outcome.trial_duration_sum_s
    );
    let mut chart = crate::plot::frame(&area, 15, 45)
        .caption(title, crate::plot::TITLE)
        .build_cartesian_2d(0.0..t_end * 1.02, ylo..yhi)?;
    let fmt_y = |y: &f64| {
        let mpps = axis.pps(*y) / 1e6;
        if mpps >= 10.0 {
            format!("{mpps:.1}")
        } else if mpps >= 0.1 {
            format!("{mpps:.3}")
        } else {
            format!("{mpps:.4}")
        }
    };
    crate::plot::mesh(&mut chart)
        .x_desc("accounted search time [s]")
        .y_desc(if axis.log {
            "transmit rate [Mpps, log scale]"
        } else {
            "transmit rate [Mpps]"
        })
        .y_label_formatter(&fmt_y)
        .draw()?;

    // Phase boundaries.
    for (i, p) in report.phases.iter().enumerate() {
        let x = p.start_s;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(x, ylo), (x, yhi)],
            PHASE.stroke_width(1),
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
        let y = yhi - (yhi - ylo) * (0.03 + 0.04 * (i % 2) as f64);
        chart.draw_series(std::iter::once(Text::new(
            label,
            (x, y),
            ("sans-serif", 13).into_font().color(&RGBColor(60, 90, 160)),
        )))?;
    }

    // Each goal's bounds over time.
    for g in 0..report.config.goals.len() {
        let color = GOAL_COLORS[g % GOAL_COLORS.len()];
        for upper in [false, true] {
            let mut pts: Vec<(f64, f64)> = Vec::new();
            let mut prev: Option<(f64, f64)> = None;
            for snap in &report.bounds_history {
                let v = if upper {
                    snap.upper_pps.get(g).copied().flatten()
                } else {
                    snap.lower_pps.get(g).copied().flatten()
                };
                if let Some(v) = v {
                    let y = axis.y(v);
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
            if upper {
                chart.draw_series(DashedLineSeries::new(pts, 8, 5, style))?;
            } else {
                chart.draw_series(LineSeries::new(pts, style))?;
            }
        }
    }
    // Trials, on top of the bounds: a bar from start to end at the rate,
    // colored by the loss on the way; a purple mark where the generator could
    // not send everything (unsent, counted as loss by the search).
    let max_ratio = report
        .config
        .goals
        .iter()
        .map(|g| g.loss_ratio)
        .fold(0.0, f64::max);
    let mut start = 0.0;
    for t in &report.trials {
        let loss = path_loss_ratio(t);
        let color = if loss == 0.0 {
            NO_LOSS
        } else if loss <= max_ratio {
            SOME_LOSS
        } else {
            LOSS
        };
        let y = axis.y(t.rate_pps);
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(start, y), (t.end_s, y)],
            color.stroke_width(4),
        )))?;
        if t.unsent.unwrap_or(0) > 0 {
            chart.draw_series(std::iter::once(TriangleMarker::new(
                ((start + t.end_s) / 2.0, y),
                6,
                UNSENT.filled(),
            )))?;
        }
        start = t.end_s;
    }
    draw_legend(report, &legend)
}

use crate::plot::DrawResult;

/// The legend, in its own panel beside the chart so it never covers a trial.
fn draw_legend<DB: DrawingBackend>(
    report: &Report,
    area: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let font = ("sans-serif", 13).into_font();
    let mut y = 60;
    let x = 8;
    type Sample<'a, DB> = &'a dyn Fn(&DrawingArea<DB, Shift>, i32) -> DrawResult<DB>;
    let row = |area: &DrawingArea<DB, Shift>,
               y: &mut i32,
               sample: Sample<'_, DB>,
               text: String|
     -> DrawResult<DB> {
        sample(area, *y)?;
        area.draw(&Text::new(text, (x + 30, *y - 7), font.clone()))?;
        *y += 22;
        Ok(())
    };
    for (g, goal) in report.config.goals.iter().enumerate() {
        let color = GOAL_COLORS[g % GOAL_COLORS.len()];
        row(
            area,
            &mut y,
            &|a, y| {
                a.draw(&PathElement::new(
                    vec![(x, y), (x + 22, y)],
                    color.stroke_width(2),
                ))
            },
            format!("{} lower (loss {})", goal.name, goal.loss_ratio),
        )?;
        row(
            area,
            &mut y,
            &|a, y| {
                a.draw(&PathElement::new(
                    vec![(x, y), (x + 8, y)],
                    color.stroke_width(2),
                ))?;
                a.draw(&PathElement::new(
                    vec![(x + 13, y), (x + 22, y)],
                    color.stroke_width(2),
                ))
            },
            format!("{} upper", goal.name),
        )?;
    }
    y += 8;
    let max_ratio = report
        .config
        .goals
        .iter()
        .map(|g| g.loss_ratio)
        .fold(0.0, f64::max);
    for (color, text) in [
        (NO_LOSS, "trial: no loss".to_string()),
        (SOME_LOSS, format!("trial: loss <= {max_ratio}")),
        (LOSS, format!("trial: loss > {max_ratio}")),
    ] {
        row(
            area,
            &mut y,
            &|a, y| {
                a.draw(&PathElement::new(
                    vec![(x, y), (x + 22, y)],
                    color.stroke_width(4),
                ))
            },
            text,
        )?;
    }
    row(
        area,
        &mut y,
        &|a, y| a.draw(&TriangleMarker::new((x + 11, y), 6, UNSENT.filled())),
        "unsent > 0 (not sent in time;".to_string(),
    )?;
    area.draw(&Text::new(
        "counted as loss, shown apart)",
        (x + 30, y - 11),
        font.clone(),
    ))?;
    y += 18;
    row(
        area,
        &mut y,
        &|a, y| {
            a.draw(&PathElement::new(
                vec![(x + 11, y - 8), (x + 11, y + 8)],
                PHASE.stroke_width(1),
            ))
        },
        "phase start".to_string(),
    )?;
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};

    fn search(model: &str, min: f64, max: f64) -> Report {
        let model: SimModel = model.parse().unwrap();
        let cfg = SearchConfig {
            min_rate: min,
            max_rate: max,
            ..SearchConfig::csit()
        };
        let mut s = MdrSearch::new(cfg).unwrap();
        drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap()
    }

    /// Every trial is drawn, at its rate, on the axis: one bar each.
    fn check_every_trial_drawn(report: &Report, name: &str) -> RateAxis {
        let axis = RateAxis::of(report);
        for t in &report.trials {
            assert!(
                axis.shows(t.rate_pps),
                "{name}: trial at {} off {axis:?}",
                t.rate_pps
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("s.svg");
        plot(report, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        // Bars are the only 4-wide strokes, plus three legend samples.
        let bars = text.matches("stroke-width=\"4\"").count();
        assert_eq!(bars, report.trials.len() + 3, "{name}");
        axis
    }

    #[test]
    fn irregular_searches_show_every_trial() {
        // The maximum rate passes: its bound is the top of the search.
        let r = search("ndr=50e6,pdr=50e6,plr=0.005", 20e3, 14.88e6);
        assert!(r.outcome.goals[0].lower_pps.is_some());
        let axis = check_every_trial_drawn(&r, "max rate is a lower bound");
        assert!(axis.shows(14.88e6));
        // The minimum rate fails.
        let r = search("ndr=1e3,pdr=1e3,plr=0.005", 20e3, 14.88e6);
        assert!(r.outcome.goals.iter().any(|g| g.min_rate_fails));
        let axis = check_every_trial_drawn(&r, "min rate fails");
        assert!(axis.shows(20e3));
        assert!(axis.log, "20 kpps .. 14.88 Mpps needs a log axis");
        // A narrow search stays linear.
        let r = search("ndr=12e6,pdr=12.2e6,plr=0.005", 11e6, 14e6);
        assert!(!check_every_trial_drawn(&r, "narrow").log);
    }

    #[test]
    fn unsent_is_apart_from_loss() {
        let mut r = search("ndr=12e6,pdr=12.2e6,plr=0.005", 11e6, 14e6);
        let t = &mut r.trials[0];
        t.unsent = Some(t.offered - t.received);
        assert_eq!(path_loss_ratio(t), 0.0);
        let dir = tempfile::tempdir().unwrap();
        let svg = dir.path().join("s.svg");
        plot(&r, &svg).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("unsent &gt; 0") || text.contains("unsent > 0"));
    }

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
