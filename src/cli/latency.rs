//! `linerate latency merge FILES... [--json PATH]`: exact latency across hosts.

use std::io::Write;
use std::path::PathBuf;

use super::output::write_json;
use super::Failure;
use crate::latency::{merge, StatsError, StatsFile, Summary};

/// Arguments of `linerate latency`.
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {
    #[command(subcommand)]
    command: LatencyCommand,
}

#[derive(Debug, clap::Subcommand)]
enum LatencyCommand {
    /// Merge stats files from several processes or hosts exactly: the combined
    /// percentiles are those of the pooled samples.
    Merge {
        /// Stats files written by `linerate trial --stats-file`.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write the result as JSON ("-" for stdout).
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

pub(super) fn run(args: &LatencyArgs) -> Result<(), Failure> {
    let LatencyCommand::Merge { files, json } = &args.command;
    let mut parsed = Vec::new();
    for f in files {
        parsed.push(StatsFile::read(f).map_err(|e| match e {
            StatsError::Invalid(..) => Failure::Input(e.to_string()),
            StatsError::Io(..) => Failure::Input(e.to_string()),
        })?);
    }
    let merged = merge(parsed.iter().map(|f| &f.histogram));
    let total = Summary::of(&merged);
    let per_file: Vec<serde_json::Value> = files
        .iter()
        .zip(&parsed)
        .map(|(p, f)| serde_json::json!({"file": p, "context": f.context, "latency_ns": Summary::of(&f.histogram)}))
        .collect();
    if json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "{:<40} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "file", "samples", "min", "p50", "p99", "p99.9", "max"
        );
        for (p, f) in files.iter().zip(&parsed) {
            let s = Summary::of(&f.histogram);
            let _ = writeln!(
                out,
                "{:<40} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
                p.display(),
                s.samples,
                s.min,
                s.p50,
                s.p99,
                s.p999,
                s.max
            );
        }
        let _ = writeln!(
            out,
            "{:<40} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "merged (exact)", total.samples, total.min, total.p50, total.p99, total.p999, total.max
        );
    }
    if let Some(path) = json {
        write_json(
            path,
            &serde_json::json!({"merged": {"latency_ns": total}, "files": per_file}),
        )?;
    }
    Ok(())
}
