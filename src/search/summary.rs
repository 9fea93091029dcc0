//! The summary table of a search report, as `linerate search` prints it.

use super::Report;
use crate::trial::LimitedBy;

pub(crate) fn mpps(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.6}", v / 1e6))
}

/// Prints the summary table of a report: a row per goal, then the search's
/// totals and what the tool itself lost.
pub fn print_summary(report: &Report, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let (any_generator, any_receiver) = goal_rows(report, out)?;
    search_lines(report, out)?;
    tool_lines(report, out)?;
    if any_generator {
        writeln!(
            out,
            "* at the marked bounds {}; the device itself was not measured there",
            LimitedBy::Generator.advice()
        )?;
    }
    if any_receiver {
        writeln!(
            out,
            "+ at the marked bounds {}; the device itself was not measured there",
            LimitedBy::Receiver.advice()
        )?;
    }
    Ok(())
}

/// The table's header and a row per goal; whether any bound was the
/// generator's limit, and whether any was the receiver's.
fn goal_rows(report: &Report, out: &mut dyn std::io::Write) -> std::io::Result<(bool, bool)> {
    writeln!(
        out,
        "{:<10} {:>10} {:>14} {:>14} {:>9} {:>7} {:>9}  notes",
        "goal", "loss", "lower Mpps", "upper Mpps", "width %", "trials", "dur s"
    )?;
    // A bound measured where the tool, not the device, lost most packets is
    // the tool's limit: `*` where the generator did not send them, `+` where
    // our own receiver dropped them.
    let limited = |rate: Option<f64>, by: LimitedBy| {
        rate.is_some_and(|r| {
            report
                .trials
                .iter()
                .any(|t| t.rate_pps == r && t.limited_by == Some(by))
        })
    };
    let mark = |rate: Option<f64>| {
        let m = mpps(rate);
        if limited(rate, LimitedBy::Generator) {
            format!("{m}*")
        } else if limited(rate, LimitedBy::Receiver) {
            format!("{m}+")
        } else {
            m
        }
    };
    let (mut any_generator, mut any_receiver) = (false, false);
    for g in &report.outcome.goals {
        let mut notes = Vec::new();
        if limited(g.lower_pps, LimitedBy::Generator) || limited(g.upper_pps, LimitedBy::Generator)
        {
            any_generator = true;
            notes.push("* generator-limited");
        }
        if limited(g.lower_pps, LimitedBy::Receiver) || limited(g.upper_pps, LimitedBy::Receiver) {
            any_receiver = true;
            notes.push("+ receiver-limited");
        }
        if g.max_rate_is_lower_bound {
            notes.push("no loss at the maximum rate: the lower bound is only a lower bound");
        }
        if g.min_rate_fails {
            notes.push("FAILED: the minimum rate already fails the goal");
        }
        if g.incomplete {
            notes.push("incomplete");
        }
        writeln!(
            out,
            "{:<10} {:>10} {:>14} {:>14} {:>9} {:>7} {:>9.1}  {}",
            g.goal.name,
            g.goal.loss_ratio,
            mark(g.lower_pps),
            mark(g.upper_pps),
            g.width.map_or("-".into(), |w| format!("{:.3}", w * 100.0)),
            g.trial_count,
            g.trial_duration_sum_s,
            notes.join("; ")
        )?;
    }
    Ok((any_generator, any_receiver))
}

/// The search's totals, and whether it was interrupted or resumed.
fn search_lines(report: &Report, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{} search: {} trials, {:.1} s of trial time{}",
        report.algorithm,
        report.outcome.trial_count,
        report.outcome.trial_duration_sum_s,
        if report.outcome.timed_out {
            " (TIME BUDGET EXCEEDED)"
        } else {
            ""
        }
    )?;
    if report.interrupted {
        writeln!(
            out,
            "INTERRUPTED by {} after {} trials: the bounds are those at that moment \
             (continue with --resume REPORT.json)",
            report.signal.as_deref().unwrap_or("a signal"),
            report.trials.len()
        )?;
    }
    if let Some(from) = &report.resumed_from {
        writeln!(
            out,
            "resumed from {}: {} trials from the earlier run, {} new",
            from.display(),
            report.trials.iter().filter(|t| t.resumed).count(),
            report.trials.iter().filter(|t| !t.resumed).count()
        )?;
    }
    Ok(())
}

/// What the tool, not the device, did not carry: packets the generator did
/// not send, a generator short of the rate, drops at our own receiver.
fn tool_lines(report: &Report, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    // Unsent packets, where the measurer reported them: counted as lost above, shown apart
    // so a generator that cannot keep up is not mistaken for the device losing packets.
    let known: Vec<u64> = report.trials.iter().filter_map(|t| t.unsent).collect();
    let unsent: u64 = known.iter().sum();
    if unsent > 0 {
        writeln!(
            out,
            "unsent: {unsent} packets in {} of {} trials (the generator did not keep up; \
             counted as lost)",
            known.iter().filter(|&&u| u > 0).count(),
            known.len()
        )?;
    }
    // Trials whose generators sent below the rate they were judged at.
    let tol = crate::trial::TX_SHORT_TOLERANCE;
    let short: Vec<f64> = report
        .trials
        .iter()
        .filter_map(|t| t.tx_pps.map(|tx| tx / t.rate_pps))
        .filter(|f| *f < 1.0 - tol)
        .collect();
    if !short.is_empty() {
        writeln!(
            out,
            "generator short of the rate: in {} of {} trials it sent more than {:.0} % below \
             the trial's rate (at worst {:.1} % of it); those trials are judged at the rate \
             they asked for",
            short.len(),
            report.trials.iter().filter(|t| t.tx_pps.is_some()).count(),
            tol * 100.0,
            short.iter().copied().fold(f64::INFINITY, f64::min) * 100.0
        )?;
    }
    // Likewise our receiver's own drops (a port's missed count, a kernel socket ring).
    let known: Vec<u64> = report.trials.iter().filter_map(|t| t.rx_dropped).collect();
    let dropped: u64 = known.iter().sum();
    if dropped > 0 {
        writeln!(
            out,
            "receiver dropped: {dropped} packets in {} of {} trials (our receiving ports; \
             counted as lost)",
            known.iter().filter(|&&u| u > 0).count(),
            known.len()
        )?;
    }
    Ok(())
}
