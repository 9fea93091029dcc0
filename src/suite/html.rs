//! One self-contained HTML report per suite (`linerate suite --html PATH`):
//! the result table, then the plots inline (NDR and PDR against frame size
//! in Mpps and in Gb/s with the line rate, latency against load, the
//! frame-loss curve, back-to-back frames), then each size's search. No
//! external reference: it opens anywhere, offline.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::{render, SuiteReport, L1_OVERHEAD};
use crate::plot::PlotError;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

/// One line of a chart.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

/// A line chart: x is numeric, or categories (`names`, at 0, 1, ...).
struct Chart {
    title: String,
    x_desc: &'static str,
    y_desc: &'static str,
    names: Option<Vec<String>>,
    series: Vec<Series>,
    /// Where the legend goes (clear of the lines).
    legend: SeriesLabelPosition,
}

fn draw<DB: DrawingBackend>(
    c: &Chart,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> crate::plot::DrawResult<DB> {
    root.fill(&WHITE)?;
    let all = c.series.iter().flat_map(|s| s.points.iter());
    let ymax = all.clone().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.1;
    let (xlo, xhi) = match &c.names {
        Some(n) => (-0.5, n.len() as f64 - 0.5),
        None => {
            let lo = all.clone().map(|p| p.0).fold(f64::INFINITY, f64::min);
            let hi = all.map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
            if lo.is_finite() && hi > lo {
                (lo, hi)
            } else {
                (0.0, 1.0)
            }
        }
    };
    let mut chart = crate::plot::frame(root, 15, 45)
        .caption(&c.title, crate::plot::TITLE)
        .build_cartesian_2d(xlo..xhi, 0.0..ymax)?;
    let names = c.names.clone();
    let fmt_x = move |x: &f64| match &names {
        Some(n) => {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                n.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
        None => format!("{x}"),
    };
    // Round numbers: the ticks plotters picks, without needless decimals.
    let fmt_y = |y: &f64| {
        if ymax >= 100.0 {
            format!("{y:.0}")
        } else if ymax >= 1.0 {
            format!("{y:.1}")
        } else {
            format!("{y:.3}")
        }
    };
    let mut mesh = crate::plot::mesh(&mut chart);
    mesh.x_desc(c.x_desc)
        .y_desc(c.y_desc)
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&fmt_y);
    if let Some(n) = &c.names {
        // One tick per category, at the integers.
        mesh.x_labels(n.len() * 2 + 1);
    }
    mesh.draw()?;
    for (i, s) in c.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let style = color.stroke_width(2);
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(s.points.clone(), 8, 5, style))?
                .label(&s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        } else {
            chart
                .draw_series(LineSeries::new(s.points.clone(), style))?
                .label(&s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    crate::plot::legend(&mut chart, c.legend.clone()).draw()?;
    Ok(())
}

fn svg(c: &Chart) -> Result<String, PlotError> {
    crate::report::register_plot_font();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1000, 520)).into_drawing_area();
        let err = |e: &dyn std::fmt::Display| PlotError::Draw {
            path: "(inline svg)".into(),
            message: e.to_string(),
        };
        draw(c, &root).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}

/// NDR and PDR against frame size, in Mpps (`gbps` false) or L1 Gb/s, with
/// the line rate where known.
fn rate_chart(r: &SuiteReport, gbps: bool) -> Chart {
    let names: Vec<String> = r.sizes.iter().map(|s| s.frame.clone()).collect();
    let conv = |pps: f64, frame: f64| {
        if gbps {
            pps * 8.0 * (frame + L1_OVERHEAD) / 1e9
        } else {
            pps / 1e6
        }
    };
    let mut series = Vec::new();
    for (name, last) in [("NDR", false), ("PDR", true)] {
        let points = r
            .sizes
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i as f64, conv(s.goal_lower(last)?, s.frame_bytes))))
            .collect();
        series.push(Series {
            label: name.into(),
            points,
            dashed: false,
        });
    }
    if let Some(line) = r.line_rate_bps {
        let points = r
            .sizes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    i as f64,
                    conv(super::pps_at(line, s.frame_bytes), s.frame_bytes),
                )
            })
            .collect();
        series.push(Series {
            label: "line rate".into(),
            points,
            dashed: true,
        });
    }
    Chart {
        title: if gbps {
            "Throughput by frame size, Gb/s at L1".into()
        } else {
            "Throughput by frame size, Mpps".into()
        },
        x_desc: "frame size [bytes]",
        y_desc: if gbps {
            "rate [Gb/s, L1]"
        } else {
            "rate [Mpps]"
        },
        names: Some(names),
        series,
        legend: SeriesLabelPosition::UpperRight,
    }
}

fn latency_chart(r: &SuiteReport) -> Option<Chart> {
    let mut loads: Vec<String> = Vec::new();
    for p in r.sizes.iter().flat_map(|s| &s.latency) {
        if !loads.contains(&p.load) {
            loads.push(p.load.clone());
        }
    }
    if loads.is_empty() {
        return None;
    }
    let mut series = Vec::new();
    for s in &r.sizes {
        for q in ["p50", "p99"] {
            let points: Vec<(f64, f64)> = s
                .latency
                .iter()
                .filter_map(|p| {
                    let i = loads.iter().position(|l| *l == p.load)?;
                    Some((i as f64, p.latency_ns.get(q)?.as_f64()? / 1e3))
                })
                .collect();
            if !points.is_empty() {
                series.push(Series {
                    label: format!("{} B {q}", s.frame),
                    points,
                    dashed: q == "p99",
                });
            }
        }
    }
    Some(Chart {
        title: "Latency by load (p50 solid, p99 dashed)".into(),
        x_desc: "load",
        y_desc: "latency [µs]",
        names: Some(loads),
        series,
        legend: SeriesLabelPosition::UpperLeft,
    })
}

fn loss_chart(r: &SuiteReport) -> Option<Chart> {
    let series: Vec<Series> = r
        .sizes
        .iter()
        .filter(|s| !s.loss_curve.is_empty())
        .map(|s| Series {
            label: format!("{} B", s.frame),
            points: s
                .loss_curve
                .iter()
                .map(|l| (l.percent, 100.0 * l.loss_ratio))
                .collect(),
            dashed: false,
        })
        .collect();
    (!series.is_empty()).then(|| Chart {
        title: "Frame loss rate (RFC 2544 26.3)".into(),
        x_desc: "offered load [% of the maximum rate]",
        y_desc: "frames lost [%]",
        names: None,
        series,
        legend: SeriesLabelPosition::UpperLeft,
    })
}

fn b2b_chart(r: &SuiteReport) -> Option<Chart> {
    let names: Vec<String> = r.sizes.iter().map(|s| s.frame.clone()).collect();
    let avg: Vec<(f64, f64)> = r
        .sizes
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i as f64, s.back_to_back.as_ref()?.implied_buffer_s * 1e6)))
        .collect();
    (!avg.is_empty()).then(|| Chart {
        title: "Back-to-back: implied buffer time (RFC 9004)".into(),
        x_desc: "frame size [bytes]",
        y_desc: "buffer time [µs]",
        names: Some(names),
        series: vec![Series {
            label: "average burst / rate".into(),
            points: avg,
            dashed: false,
        }],
        legend: SeriesLabelPosition::UpperLeft,
    })
}

/// NDR and PDR against frame size (Mpps, with the line rate) to `path`
/// (`.svg` or `.png`): `linerate suite --plot`.
pub fn plot(r: &SuiteReport, path: &std::path::Path) -> Result<(), PlotError> {
    let c = rate_chart(r, false);
    crate::plot::to_file(path, |a| draw(&c, a), |a| draw(&c, a))
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1300px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}\
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:right}\
th{background:#f0f3f8}.wide{overflow-x:auto}.plot svg{max-width:100%;height:auto}.bad{color:#c81e1e}small{color:#666}";

/// The report as one HTML document.
pub fn render(r: &SuiteReport) -> Result<String, PlotError> {
    let mut h = String::with_capacity(256 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>linerate suite: {src}</title><style>{STYLE}</style></head><body>\n\
         <h1>linerate suite{int}</h1>\n<p>Measured: <code>{src}</code><br>\
         linerate {ver} on {cpu} ({cores} CPUs); line rate {line}.</p>\n",
        src = esc(&r.source),
        int = if r.interrupted {
            " <span class=\"bad\">INTERRUPTED (the parts finished so far)</span>"
        } else {
            ""
        },
        ver = esc(&r.version),
        cpu = esc(&r.machine.cpu),
        cores = r.machine.cores,
        line = r
            .line_rate_bps
            .map_or("unknown".into(), |b| format!("{} Gb/s", b / 1e9)),
    );
    h.push_str("<h2>Results</h2>\n<div class=\"wide\"><table><tr>");
    for c in render::header(r) {
        let _ = write!(h, "<th>{}</th>", esc(&c));
    }
    h.push_str("</tr>\n");
    for s in &r.sizes {
        h.push_str("<tr>");
        for c in render::row(r, s) {
            let _ = write!(
                h,
                "<td>{}</td>",
                if c.is_empty() { "-".into() } else { esc(&c) }
            );
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table></div>\n");
    let mut charts = vec![rate_chart(r, false), rate_chart(r, true)];
    charts.extend(latency_chart(r));
    charts.extend(loss_chart(r));
    charts.extend(b2b_chart(r));
    h.push_str("<h2>Plots</h2>\n");
    for c in &charts {
        let _ = writeln!(h, "<div class=\"plot\">{}</div>", svg(c)?);
    }
    for (part, why, at) in r.skipped_notes() {
        let _ = writeln!(
            h,
            "<p><small>{} skipped at {}: {}</small></p>",
            esc(&part),
            esc(&at),
            esc(&why)
        );
    }
    h.push_str("<h2>Each size's search</h2>\n");
    for s in &r.sizes {
        if let Some(t) = &s.throughput {
            let _ = writeln!(
                h,
                "<h3>{} bytes</h3>\n<div class=\"plot\">{}</div>",
                esc(&s.frame),
                crate::search::plot::svg_string(t)?
            );
        }
    }
    h.push_str("</body></html>\n");
    Ok(h)
}
