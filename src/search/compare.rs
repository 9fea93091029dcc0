//! Comparing two search reports (or two suite reports) goal by goal, sans-IO:
//! the texts are passed in, the comparison comes out.
//!
//! A goal's value is its lower bound, the highest rate known to meet it. A
//! change counts only when it is larger than both searches' widths: the
//! relative width `1 - lower/upper` each reached (or, with no upper bound,
//! the width its goal asked for), since within that the two searches cannot
//! tell the rates apart. A suite report (a top-level `sizes` array of
//! `{"frame": ..., "throughput": REPORT}`) is compared size by size.

use serde::Serialize;

use super::searcher::GoalResult;
use super::Report;

/// Why two reports cannot be compared.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CompareError {
    /// A text is not a search or suite report (exit status 2).
    #[error("{0}")]
    Invalid(String),
    /// The reports measured different things (exit status 2 unless forced).
    #[error("{0} (--force compares them anyway)")]
    Mismatch(String),
}

/// One report, read: a search, or a suite's searches by frame size.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    /// What was measured (`source`).
    pub source: Option<String>,
    /// Per frame size (`None` for a search report), its search.
    pub sizes: Vec<(Option<String>, Report)>,
    /// A suite report (`sizes` at the top level).
    pub suite: bool,
}

impl Input {
    /// Reads a search report or a suite report from JSON text; `name` names it
    /// in errors.
    pub fn parse(text: &str, name: &str) -> Result<Input, CompareError> {
        let bad = |why: String| CompareError::Invalid(format!("{name}: {why}"));
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let report = |v: &serde_json::Value, at: &str| {
            serde_json::from_value::<Report>(v.clone())
                .map_err(|e| bad(format!("{at}is not a search report: {e}")))
        };
        let Some(sizes) = v.get("sizes") else {
            let r = report(&v, "")?;
            return Ok(Input {
                source: r.source.clone(),
                sizes: vec![(None, r)],
                suite: false,
            });
        };
        let sizes = sizes
            .as_array()
            .ok_or_else(|| bad("`sizes` is not an array".into()))?;
        let mut out: Vec<(Option<String>, Report)> = Vec::with_capacity(sizes.len());
        for (i, s) in sizes.iter().enumerate() {
            let frame = match s.get("frame") {
                Some(serde_json::Value::String(f)) => f.clone(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                _ => return Err(bad(format!("sizes[{i}] has no `frame`"))),
            };
            if out
                .iter()
                .any(|(f, _)| f.as_deref() == Some(frame.as_str()))
            {
                return Err(bad(format!("frame {frame} appears twice")));
            }
            let t = s
                .get("throughput")
                .ok_or_else(|| bad(format!("sizes[{i}] (frame {frame}) has no `throughput`")))?;
            out.push((Some(frame.clone()), report(t, &format!("frame {frame}: "))?));
        }
        let source = v.get("source").and_then(|s| s.as_str()).map(String::from);
        Ok(Input {
            source,
            sizes: out,
            suite: true,
        })
    }
}

/// What one goal's change amounts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within the widths.
    Same,
    /// Lower by more than the widths.
    Regression,
    /// Higher by more than the widths.
    Progression,
    /// In one report only.
    Missing,
}

/// One goal at one frame size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The frame size (suite reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame: Option<String>,
    /// The goal's name.
    pub goal: String,
    /// The old lower bound (packets/s); None: even the minimum rate failed, or
    /// the goal is not in the old report.
    pub old_pps: Option<f64>,
    /// The new lower bound.
    pub new_pps: Option<f64>,
    /// `new / old - 1`, when both are known.
    pub change: Option<f64>,
    /// The larger of the two widths: a change must pass it to count.
    pub width: f64,
    /// What the change amounts to.
    pub verdict: Verdict,
    /// A regression past the threshold: the comparison fails.
    pub fails: bool,
}

/// The comparison of two reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The old report's source.
    pub old_source: Option<String>,
    /// The new report's source.
    pub new_source: Option<String>,
    /// The regression threshold asked for (None: the widths).
    pub threshold: Option<f64>,
    /// Differences between the reports that `force` let pass.
    pub forced: Vec<String>,
    /// Size by size, goal by goal.
    pub rows: Vec<Row>,
    /// Rows that regressed.
    pub regressions: usize,
    /// Rows that progressed.
    pub progressions: usize,
    /// Whether any regression passed the threshold.
    pub failed: bool,
}

/// Compares `old` with `new`. Reports of different sources, kinds or frame
/// sizes are refused unless `force`; then only what both hold is compared.
pub fn compare(
    old: &Input,
    new: &Input,
    threshold: Option<f64>,
    force: bool,
) -> Result<Comparison, CompareError> {
    if old.suite != new.suite {
        return Err(CompareError::Invalid(
            "one report is a suite, the other a single search".into(),
        ));
    }
    let mut forced = Vec::new();
    let mut differ = |what: String| {
        if force {
            forced.push(what);
            Ok(())
        } else {
            Err(CompareError::Mismatch(what))
        }
    };
    if let (Some(a), Some(b)) = (&old.source, &new.source) {
        if a != b {
            differ(format!("different sources: {a:?} and {b:?}"))?;
        }
    }
    let frames = |i: &Input| -> Vec<String> {
        i.sizes
            .iter()
            .filter_map(|(f, _)| f.clone())
            .collect::<Vec<_>>()
    };
    let (fo, fnew) = (frames(old), frames(new));
    if fo != fnew {
        differ(format!(
            "different frame sizes: [{}] and [{}]",
            fo.join(","),
            fnew.join(",")
        ))?;
    }
    let mut rows = Vec::new();
    for (frame, o) in &old.sizes {
        let Some((_, n)) = new.sizes.iter().find(|(f, _)| f == frame) else {
            continue;
        };
        for g in &o.outcome.goals {
            let other = n.outcome.goals.iter().find(|h| h.goal.name == g.goal.name);
            if let Some(h) = other {
                if h.goal.loss_ratio != g.goal.loss_ratio {
                    differ(format!(
                        "goal {} has loss ratio {} and {}",
                        g.goal.name, g.goal.loss_ratio, h.goal.loss_ratio
                    ))?;
                }
            }
            rows.push(row(frame.clone(), Some(g), other, threshold));
        }
        for h in &n.outcome.goals {
            if !o.outcome.goals.iter().any(|g| g.goal.name == h.goal.name) {
                rows.push(row(frame.clone(), None, Some(h), threshold));
            }
        }
    }
    let count = |v| rows.iter().filter(|r| r.verdict == v).count();
    Ok(Comparison {
        old_source: old.source.clone(),
        new_source: new.source.clone(),
        threshold,
        forced,
        regressions: count(Verdict::Regression),
        progressions: count(Verdict::Progression),
        failed: rows.iter().any(|r| r.fails),
        rows,
    })
}

/// A goal's width: the one its search reached, else the one it asked for.
fn width_of(g: &GoalResult) -> f64 {
    g.width.unwrap_or(g.goal.width)
}

fn row(
    frame: Option<String>,
    old: Option<&GoalResult>,
    new: Option<&GoalResult>,
    threshold: Option<f64>,
) -> Row {
    let width = old.into_iter().chain(new).map(width_of).fold(0.0, f64::max);
    let goal = old.or(new).map(|g| g.goal.name.clone()).unwrap_or_default();
    let (old_pps, new_pps) = (old.and_then(|g| g.lower_pps), new.and_then(|g| g.lower_pps));
    let change = match (old_pps, new_pps) {
        (Some(a), Some(b)) if a > 0.0 => Some(b / a - 1.0),
        _ => None,
    };
    let verdict = match (old, new, change) {
        (None, _, _) | (_, None, _) => Verdict::Missing,
        (_, _, Some(c)) if c < -width => Verdict::Regression,
        (_, _, Some(c)) if c > width => Verdict::Progression,
        (_, _, Some(_)) => Verdict::Same,
        // One search failed even at its minimum rate: that is the change.
        _ => match (old_pps, new_pps) {
            (Some(_), None) => Verdict::Regression,
            (None, Some(_)) => Verdict::Progression,
            _ => Verdict::Same,
        },
    };
    let fails =
        verdict == Verdict::Regression && change.is_none_or(|c| -c > threshold.unwrap_or(0.0));
    Row {
        frame,
        goal,
        old_pps,
        new_pps,
        change,
        width,
        verdict,
        fails,
    }
}

impl std::fmt::Display for Comparison {
    /// The table: one line per goal and size, then a count.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let suite = self.rows.iter().any(|r| r.frame.is_some());
        if suite {
            write!(f, "{:<8}", "frame")?;
        }
        writeln!(
            f,
            "{:<10} {:>12} {:>12} {:>9} {:>8}  verdict",
            "goal", "old Mpps", "new Mpps", "change %", "width %"
        )?;
        let mpps = |v: Option<f64>| v.map_or("-".to_string(), |p| format!("{:.6}", p / 1e6));
        for r in &self.rows {
            if suite {
                write!(f, "{:<8}", r.frame.as_deref().unwrap_or("-"))?;
            }
            let change = r
                .change
                .map_or("-".to_string(), |c| format!("{:+.3}", c * 100.0));
            let verdict = match r.verdict {
                Verdict::Same => "",
                Verdict::Regression if r.fails => "REGRESSION",
                Verdict::Regression => "regression (within the threshold)",
                Verdict::Progression => "progression",
                Verdict::Missing => "in one report only",
            };
            writeln!(
                f,
                "{:<10} {:>12} {:>12} {:>9} {:>8.3}  {verdict}",
                r.goal,
                mpps(r.old_pps),
                mpps(r.new_pps),
                change,
                r.width * 100.0
            )?;
        }
        let same = self.rows.len() - self.regressions - self.progressions;
        let n = |k: usize, what: &str| format!("{k} {what}{}", if k == 1 { "" } else { "s" });
        writeln!(
            f,
            "compare: {}, {}, {same} within the widths",
            n(self.regressions, "regression"),
            n(self.progressions, "progression")
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};

    fn report() -> Report {
        let model: SimModel = "ndr=12e6,pdr=12.24e6,plr=0.005".parse().unwrap();
        let mut s = MdrSearch::new(SearchConfig::csit()).unwrap();
        let mut r = drive(&mut s, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
        r.source = Some("sim A".into());
        r
    }

    fn input(r: &Report) -> Input {
        Input::parse(&serde_json::to_string(r).unwrap(), "r").unwrap()
    }

    #[test]
    fn changes_count_only_past_the_widths() {
        let old = report();
        let same = compare(&input(&old), &input(&old), None, false).unwrap();
        assert!(same.rows.iter().all(|r| r.verdict == Verdict::Same));
        assert!(!same.failed && same.rows.len() == 2);
        let mut new = old.clone();
        let lo = old.outcome.goals[0].lower_pps.unwrap();
        // Within the width (0.5 %): no change.
        new.outcome.goals[0].lower_pps = Some(lo * 0.997);
        let c = compare(&input(&old), &input(&new), None, false).unwrap();
        assert_eq!(c.rows[0].verdict, Verdict::Same);
        new.outcome.goals[0].lower_pps = Some(lo * 0.98);
        let c = compare(&input(&old), &input(&new), None, false).unwrap();
        assert_eq!(
            (c.rows[0].verdict, c.regressions, c.failed),
            (Verdict::Regression, 1, true)
        );
        // A threshold above the drop: still a regression, no failure.
        let c = compare(&input(&old), &input(&new), Some(0.05), false).unwrap();
        assert_eq!((c.regressions, c.failed), (1, false));
        let c = compare(&input(&new), &input(&old), None, false).unwrap();
        assert_eq!((c.progressions, c.failed), (1, false));
        // The minimum rate failing is a regression.
        new.outcome.goals[1].lower_pps = None;
        let c = compare(&input(&old), &input(&new), Some(0.5), false).unwrap();
        assert_eq!(c.rows[1].verdict, Verdict::Regression);
        assert!(c.rows[1].fails);
    }

    #[test]
    fn different_sources_and_sizes_are_refused_unless_forced() {
        let old = report();
        let mut new = old.clone();
        new.source = Some("sim B".into());
        let e = compare(&input(&old), &input(&new), None, false).unwrap_err();
        assert!(
            matches!(&e, CompareError::Mismatch(m) if m.contains("sim B")),
            "{e}"
        );
        let c = compare(&input(&old), &input(&new), None, true).unwrap();
        assert_eq!(c.forced.len(), 1);
        let suite = |frames: &[&str]| {
            let sizes: Vec<_> = frames
                .iter()
                .map(|f| serde_json::json!({"frame": f, "throughput": old}))
                .collect();
            let v = serde_json::json!({"suite": 1, "source": "sim A", "sizes": sizes});
            Input::parse(&v.to_string(), "s").unwrap()
        };
        let e = compare(&suite(&["64", "1518"]), &suite(&["64"]), None, false).unwrap_err();
        assert!(e.to_string().contains("frame sizes"), "{e}");
        let c = compare(&suite(&["64", "1518"]), &suite(&["64"]), None, true).unwrap();
        assert_eq!(c.rows.len(), 2);
        assert!(c.rows.iter().all(|r| r.frame.as_deref() == Some("64")));
        assert!(compare(&suite(&["64"]), &input(&old), None, true).is_err());
    }

    #[test]
    fn bad_input_is_named() {
        for (text, why) in [
            ("{", "not JSON"),
            ("{\"a\": 1}", "not a search report"),
            ("{\"sizes\": 3}", "not an array"),
            ("{\"sizes\": [{\"throughput\": {}}]}", "no `frame`"),
            ("{\"sizes\": [{\"frame\": 64}]}", "no `throughput`"),
            (
                "{\"sizes\": [{\"frame\": 64, \"throughput\": {}}]}",
                "frame 64: ",
            ),
        ] {
            let e = Input::parse(text, "x.json").unwrap_err();
            assert!(
                matches!(&e, CompareError::Invalid(m) if m.starts_with("x.json: ") && m.contains(why)),
                "{text}: {e}"
            );
        }
    }
}
