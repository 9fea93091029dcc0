//! One self-contained HTML report per search (`linerate search --html PATH`):
//! what a lab engineer attaches to a ticket. The configuration, the result
//! table, every trial and the plot (inline SVG) in one file with no external
//! reference, so it opens anywhere, offline.

use std::fmt::Write as _;

use super::{plot, Report};

/// Escapes text for HTML element content and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn mpps(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.6}", v / 1e6))
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1300px}\
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}\
th{background:#f0f3f8}td.l,th.l{text-align:left}tr.fail td{background:#fde8e8}\
.ok{color:#1e963c}.bad{color:#c81e1e}.unsent{color:#8228c8}.plot svg{max-width:100%;height:auto}\
small{color:#666}";

/// The report as one HTML document; `source` says what was measured (the
/// pipeline file, the simulated model or the command).
pub fn render(report: &Report, source: &str) -> Result<String, plot::PlotError> {
    let svg = plot::svg_string(report)?;
    let mut h = String::with_capacity(svg.len() + 64 * 1024);
    let failed = report.outcome.timed_out || report.outcome.goals.iter().any(|g| g.min_rate_fails);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>linerate {alg} search: {src}</title><style>{STYLE}</style></head><body>\n\
         <h1>linerate {alg} search <span class=\"{cls}\">{verdict}</span></h1>\n\
         <p>Measured: <code>{src}</code><br>linerate {ver}; {n} trials, {dur:.1} s of trial time.</p>\n",
        alg = esc(&report.algorithm.to_uppercase()),
        src = esc(source),
        cls = if failed || report.interrupted {
            "bad"
        } else {
            "ok"
        },
        verdict = if report.interrupted {
            "INTERRUPTED (the trials finished so far)"
        } else if failed {
            "FAILED"
        } else {
            "complete"
        },
        ver = env!("CARGO_PKG_VERSION"),
        n = report.outcome.trial_count,
        dur = report.outcome.trial_duration_sum_s,
    );

    h.push_str(
        "<h2>Result</h2>\n<table><tr><th class=\"l\">goal</th><th>loss ratio</th>\
        <th>lower Mpps</th><th>upper Mpps</th><th>width %</th><th>trials at lower</th>\
        <th>their duration s</th><th class=\"l\">notes</th></tr>\n",
    );
    for g in &report.outcome.goals {
        let mut notes = Vec::new();
        if g.max_rate_is_lower_bound {
            notes.push("no loss at the maximum rate: the lower bound is only a lower bound");
        }
        if g.min_rate_fails {
            notes.push("FAILED: the minimum rate already fails the goal");
        }
        if g.incomplete {
            notes.push("incomplete (time budget)");
        }
        let _ =
            writeln!(
            h,
            "<tr{}><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.1}</td><td class=\"l\">{}</td></tr>",
            if g.min_rate_fails { " class=\"fail\"" } else { "" },
            esc(&g.goal.name),
            g.goal.loss_ratio,
            mpps(g.lower_pps),
            mpps(g.upper_pps),
            g.width.map_or("-".into(), |w| format!("{:.3}", w * 100.0)),
            g.trial_count,
            g.trial_duration_sum_s,
            esc(&notes.join("; "))
        );
    }
    h.push_str("</table>\n");

    let _ = write!(
        h,
        "<h2>The search</h2>\n<div class=\"plot\">{svg}</div>\n\
         <p><small>Bars: trials at their rate over accounted search time, colored by the loss \
         on the way; purple marks: packets the generator could not send in time (counted as \
         loss by the search, shown apart). Lines: each goal's bounds.</small></p>\n"
    );

    h.push_str(
        "<h2>Every trial</h2>\n<table><tr><th>#</th><th class=\"l\">phase</th>\
        <th>rate Mpps</th><th>duration s</th><th>offered</th><th>received</th><th>lost</th>\
        <th>unsent</th><th>sent at Mpps</th><th>loss ratio</th><th>ends at s</th></tr>\n",
    );
    for (i, t) in report.trials.iter().enumerate() {
        let unsent = t.unsent.unwrap_or(0);
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td>{:.6}</td><td>{:.3}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td>{:.6}</td><td>{:.1}</td></tr>",
            i + 1,
            esc(&t.phase.to_string()),
            t.rate_pps / 1e6,
            t.duration_s,
            t.offered,
            t.received,
            t.offered.saturating_sub(t.received),
            if unsent > 0 { " class=\"unsent\"" } else { "" },
            t.unsent.map_or("-".into(), |u| u.to_string()),
            t.tx_pps.map_or("-".into(), |r| format!("{:.6}", r / 1e6)),
            t.loss_ratio,
            t.end_s
        );
    }
    h.push_str("</table>\n");

    let config = serde_json::to_string_pretty(&report.config).unwrap_or_default();
    let _ = write!(
        h,
        "<h2>Configuration</h2>\n<pre>{}</pre>\n</body></html>\n",
        esc(&config)
    );
    Ok(h)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};

    #[test]
    fn self_contained_with_every_trial() {
        let model: SimModel = "ndr=12e6,pdr=12.24e6,plr=0.005".parse().unwrap();
        let mut s = MdrSearch::new(SearchConfig::csit()).unwrap();
        let report = drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
        let h = render(&report, "sim <model> & co").unwrap();
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert!(h.contains("sim &lt;model&gt; &amp; co"));
        assert!(h.contains("<svg"));
        // One row per trial in the trial table, plus its header.
        let table = h.split("<h2>Every trial</h2>").nth(1).unwrap();
        let table = table.split("</table>").next().unwrap();
        assert_eq!(table.matches("<tr>").count(), report.trials.len() + 1);
        // Nothing fetched from elsewhere.
        for external in ["src=\"http", "href=\"http", "<script", "<link"] {
            assert!(!h.contains(external), "{external}");
        }
        assert!(h.contains("NDR") && h.contains("&quot;final_duration&quot;"));
    }
}
