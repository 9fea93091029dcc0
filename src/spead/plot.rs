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
    crate::report::register_plot_font();
    let name = path.display().to_string();
    let err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: name.clone(),
        message: e.to_string(),
    };
    let size = (1200, 700);
    match path.extension().and_then(|e| e.to_str()) {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(title, what, samples, &root).map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw(title, what, samples, &root).map_err(|e| err(&e))?;
            root.present().map_err(|e| err(&e))
        }
        _ => Err(PlotError::Format(name)),
    }
}

fn draw<DB: DrawingBackend>(
    title: &str,
    what: &str,
    samples: &[Sample],
    root: &DrawingArea<DB, Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 22))?;
    let (top, bottom) = root.split_vertically(330);
    let iv = intervals(samples);
    let t_end = samples.last().map_or(1.0, |s| s.t).max(0.001);
    let g_max = iv.iter().map(|i| i.1).fold(0.0, f64::max).max(0.001) * 1.1;
    let blue = RGBColor(31, 119, 180);
    let green = RGBColor(44, 160, 44);

    let mut rate = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..t_end, 0.0..g_max)?;
    rate.configure_mesh()
        .y_desc("received [Gb/s]")
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(235, 235, 235))
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
    let mut frac = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..t_end, f_lo..1.0005)?;
    frac.configure_mesh()
        .x_desc("time since start [s]")
        .y_desc(format!("fraction {what}"))
        .label_style(("sans-serif", 14))
        .light_line_style(RGBColor(235, 235, 235))
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
    frac.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()?;
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
}
