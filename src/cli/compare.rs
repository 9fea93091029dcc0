//! `linerate compare OLD.json NEW.json`: two search (or suite) reports, goal
//! by goal and size by size; a change counts only beyond the searches' widths.

use std::path::PathBuf;

use super::output::write_json_if;
use super::Failure;
use crate::search::compare::{compare, CompareError, Input};

/// Arguments of `linerate compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The earlier report (`search --json` or `suite --json`).
    pub old: PathBuf,
    /// The later report.
    pub new: PathBuf,
    /// Exit 1 only on a regression larger than this ("2%" or 0.02); default:
    /// any regression past the widths.
    #[arg(long, value_name = "RATIO")]
    pub threshold: Option<String>,
    /// Compare reports of different sources or frame sizes (only what both hold).
    #[arg(long)]
    pub force: bool,
    /// Write the comparison as JSON ("-" for stdout).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

fn parse_threshold(s: &str) -> Result<f64, Failure> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    };
    match v {
        Ok(v) if (0.0..1.0).contains(&v) => Ok(v),
        _ => Err(Failure::Input(format!(
            "bad --threshold {s:?}: a ratio in [0, 1) such as 0.02, or a percentage such as 2%"
        ))),
    }
}

fn read(path: &PathBuf) -> Result<Input, Failure> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Input(format!("cannot read {name}: {e}")))?;
    Input::parse(&text, &name).map_err(|e| Failure::Input(e.to_string()))
}

/// Compares, prints the table (unless the JSON goes to stdout) and fails
/// (exit 1) on a regression past the threshold.
pub(super) fn run(args: &CompareArgs) -> Result<(), Failure> {
    let threshold = args.threshold.as_deref().map(parse_threshold).transpose()?;
    let (old, new) = (read(&args.old)?, read(&args.new)?);
    // Both kinds of refusal are bad input (exit 2).
    let c = compare(&old, &new, threshold, args.force)
        .map_err(|e: CompareError| Failure::Input(e.to_string()))?;
    for f in &c.forced {
        eprintln!("warning: {f}");
    }
    if args.json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
        print!("{c}");
    }
    write_json_if(args.json.as_deref(), &c)?;
    if c.failed {
        return Err(Failure::Runtime(format!(
            "{} regression{} past {}",
            c.regressions,
            if c.regressions == 1 { "" } else { "s" },
            threshold.map_or("the widths".to_string(), |t| format!("{}%", t * 100.0))
        )));
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn thresholds() {
        assert_eq!(parse_threshold("2%").unwrap(), 0.02);
        assert_eq!(parse_threshold("0.05").unwrap(), 0.05);
        for bad in ["x", "-1", "150%", "1"] {
            assert_eq!(parse_threshold(bad).unwrap_err().exit_status(), 2, "{bad}");
        }
    }
}
