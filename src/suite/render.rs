//! The suite's results as rows: one per frame size, with the NDR and PDR in
//! Mpps, in Gb/s at L1 (with preamble and gap) and L2 (the frames), as a
//! percentage of the line rate, the latency at each load (median and 99th
//! percentile, µs), back-to-back frames and the loss at the maximum rate.
//! Written as CSV (`--csv`) and printed as a table.

use std::fmt::Write as _;

use super::{SizeReport, SuiteReport, L1_OVERHEAD};

/// One cell: a number to `prec` decimals, or empty.
fn num(v: Option<f64>, prec: usize) -> String {
    v.filter(|v| v.is_finite())
        .map_or(String::new(), |v| format!("{v:.prec$}"))
}

/// The latency loads of a report, in the order of the first size that has
/// them.
fn loads(r: &SuiteReport) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in &r.sizes {
        for p in &s.latency {
            if !out.contains(&p.load) {
                out.push(p.load.clone());
            }
        }
    }
    out
}

/// The column names.
pub fn header(r: &SuiteReport) -> Vec<String> {
    let mut h: Vec<String> = [
        "frame",
        "ndr_mpps",
        "ndr_gbps_l1",
        "ndr_gbps_l2",
        "ndr_pct_line",
        "pdr_mpps",
        "pdr_gbps_l1",
        "pdr_gbps_l2",
        "pdr_pct_line",
    ]
    .map(String::from)
    .to_vec();
    for l in loads(r) {
        let l = l.replace(['%', ' '], "").to_ascii_lowercase();
        h.push(format!("lat_{l}_p50_us"));
        h.push(format!("lat_{l}_p99_us"));
    }
    h.extend(
        ["b2b_avg_frames", "b2b_buffer_us", "loss_at_max"]
            .map(String::from)
            .to_vec(),
    );
    h
}

/// A rate's cells: Mpps, Gb/s at L1 and L2, % of the line rate.
fn rate_cells(pps: Option<f64>, frame: f64, line: Option<f64>) -> [String; 4] {
    let l1 = pps.map(|p| p * 8.0 * (frame + L1_OVERHEAD));
    [
        num(pps.map(|p| p / 1e6), 6),
        num(l1.map(|b| b / 1e9), 4),
        num(pps.map(|p| p * 8.0 * frame / 1e9), 4),
        num(l1.zip(line).map(|(b, l)| 100.0 * b / l), 2),
    ]
}

/// A size's cells, as [`header`] names them.
pub fn row(r: &SuiteReport, s: &SizeReport) -> Vec<String> {
    let mut v = vec![s.frame.clone()];
    v.extend(rate_cells(s.ndr(), s.frame_bytes, r.line_rate_bps));
    v.extend(rate_cells(s.pdr(), s.frame_bytes, r.line_rate_bps));
    for l in loads(r) {
        let p = s.latency.iter().find(|p| p.load == l);
        for q in ["p50", "p99"] {
            let ns = p.and_then(|p| p.latency_ns.get(q)).and_then(|x| x.as_f64());
            v.push(num(ns.map(|n| n / 1e3), 3));
        }
    }
    let b = s.back_to_back.as_ref();
    v.push(num(b.map(|b| b.average_frames), 1));
    v.push(num(b.map(|b| b.implied_buffer_s * 1e6), 3));
    v.push(num(s.loss_curve.first().map(|l| l.loss_ratio), 6));
    v
}

/// The report as CSV: a header and one row per size.
pub fn csv(r: &SuiteReport) -> String {
    let mut out = header(r).join(",");
    out.push('\n');
    for s in &r.sizes {
        // No cell holds a comma or a quote: frame names are digits or `imix`.
        out.push_str(&row(r, s).join(","));
        out.push('\n');
    }
    out
}

/// The report as an aligned text table.
pub fn table(r: &SuiteReport) -> String {
    let mut rows = vec![header(r)];
    rows.extend(r.sizes.iter().map(|s| row(r, s)));
    let n = rows[0].len();
    let widths: Vec<usize> = (0..n)
        .map(|i| rows.iter().map(|r| r[i].len().max(1)).max().unwrap_or(1))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                let c = if c.is_empty() { "-" } else { c };
                format!("{c:>w$}")
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}
