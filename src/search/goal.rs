//! Goals written as text (`--goal "name=NDR,loss=0,width=0.005"`), parsed with
//! an error that names what is wrong (fuzzed: fuzz/fuzz_targets/search_parse.rs).

use super::searcher::Goal;

/// Bad input: the message for exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub(crate) String);

/// Parses one `--goal` value.
pub fn parse_goal(s: &str, default_width: f64, index: usize) -> Result<Goal, InputError> {
    let bad = |why: String| InputError(format!("bad --goal {s:?}: {why}"));
    if let Ok(ratio) = s.trim().parse::<f64>() {
        return Ok(Goal::new(format!("goal{index}"), ratio, default_width));
    }
    let mut goal = Goal::new(format!("goal{index}"), f64::NAN, default_width);
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
        let num = || {
            v.trim()
                .parse::<f64>()
                .map_err(|e| bad(format!("{k}: {e}")))
        };
        match k.trim() {
            "name" => goal.name = v.trim().to_string(),
            "loss" => goal.loss_ratio = num()?,
            "width" => goal.width = num()?,
            "exceed" => goal.exceed_ratio = num()?,
            "sum" => goal.duration_sum = Some(num()?),
            other => {
                return Err(bad(format!(
                    "unknown key {other:?} (valid: name, loss, width, exceed, sum)"
                )))
            }
        }
    }
    if goal.loss_ratio.is_nan() {
        return Err(bad("loss=R is required".into()));
    }
    Ok(goal)
}
