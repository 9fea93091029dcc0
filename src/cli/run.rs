//! `linerate run PIPELINE [--duration S] [--json PATH]`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::Failure;
use crate::runtime::build::{build, BuildError};
use crate::runtime::run::{run as run_pipeline, RunError, RunOptions, RunReport};
use crate::units::{parse_duration, si};

/// Arguments of `linerate run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    /// Stop after this long ("10s", "500ms"); default: until Ctrl-C or until
    /// every finite source has finished.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Write the report as JSON to this file ("-" for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Longest wait for in-flight packets when stopping.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    drain_timeout: Duration,
    /// How long every stage must have been idle before stopping: raise it when
    /// packets loop through a slow external peer.
    #[arg(long, value_parser = parse_duration, default_value = "20ms")]
    drain_quiet: Duration,
    /// No live stats on stderr.
    #[arg(long, short)]
    quiet: bool,
}

/// Set by Ctrl-C; a second Ctrl-C exits at once.
pub(crate) fn interrupt_flag() -> &'static AtomicBool {
    static FLAG: OnceLock<&'static AtomicBool> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let _ = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
        flag
    })
}

fn live_line(r: &RunReport, prev: &mut Option<RunReport>) -> String {
    let mut parts = vec![format!("{:>6.1}s", r.duration_s)];
    for (name, s) in &r.stages {
        let (now, before) = match prev.as_ref().and_then(|p| p.stages.get(name)) {
            Some(p) => (
                s.packets_in.max(s.packets_out),
                p.packets_in.max(p.packets_out),
            ),
            None => (s.packets_in.max(s.packets_out), 0),
        };
        let dt = prev
            .as_ref()
            .map_or(r.duration_s, |p| r.duration_s - p.duration_s)
            .max(1e-9);
        parts.push(format!("{name} {}pps", si((now - before) as f64 / dt)));
        if s.dropped > 0 {
            parts.push(format!("({} dropped)", s.dropped));
        }
    }
    for (name, p) in &r.ports {
        if p.dropped > 0 {
            parts.push(format!("{name}: {} dropped", p.dropped));
        }
    }
    *prev = Some(r.clone());
    parts.join("  ")
}

/// The summary table on stdout.
pub(crate) fn print_summary(r: &RunReport) {
    let mut out = std::io::stdout().lock();
    let secs = r.duration_s.max(1e-9);
    let _ = writeln!(
        out,
        "pipeline `{}`: {:.3} s, stopped by {}",
        r.pipeline,
        r.duration_s,
        r.stopped_by
            .map_or("?".to_string(), |s| format!("{s:?}").to_lowercase())
    );
    let _ = writeln!(
        out,
        "{:<16} {:<8} {:>5} {:>14} {:>14} {:>12} {:>11} {:>6}",
        "stage", "kind", "lcore", "packets in", "packets out", "dropped", "rate", "busy%"
    );
    for (name, s) in &r.stages {
        let moved = s.packets_in.max(s.packets_out);
        let polls = (s.busy_polls + s.idle_polls).max(1);
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>5} {:>14} {:>14} {:>12} {:>8}pps {:>5.1}%",
            name,
            s.kind,
            s.lcore,
            s.packets_in,
            s.packets_out,
            s.dropped,
            si(moved as f64 / secs),
            100.0 * s.busy_polls as f64 / polls as f64
        );
    }
    if !r.ports.is_empty() {
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>14} {:>14} {:>12}  detail",
            "port", "kind", "rx packets", "tx packets", "dropped"
        );
        for (name, p) in &r.ports {
            let detail: Vec<String> = p
                .detail
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            let _ = writeln!(
                out,
                "{:<16} {:<8} {:>14} {:>14} {:>12}  {}",
                name,
                p.kind,
                p.rx_packets,
                p.tx_packets,
                p.dropped,
                detail.join(" ")
            );
        }
    }
    for (name, g) in &r.rings {
        let _ = writeln!(
            out,
            "ring {name}: {} slots, {} enqueued, {} dequeued, {} dropped",
            g.size, g.enqueued, g.dequeued, g.dropped
        );
    }
    if r.pool.exhausted > 0 {
        let _ = writeln!(
            out,
            "pool: ran dry {} times (raise `buffers` in [pool])",
            r.pool.exhausted
        );
    }
    if r.left_in_flight > 0 {
        let _ = writeln!(
            out,
            "warning: {} packets were still in flight when the drain timed out",
            r.left_in_flight
        );
    }
}

/// Writes a JSON value to a path ("-" is stdout).
pub(crate) fn write_json<T: serde::Serialize>(
    path: &std::path::Path,
    value: &T,
) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Runtime(format!("cannot encode the report: {e}")))?;
    crate::report::write_text(path, &(text + "\n"))
        .map_err(|e| Failure::Input(format!("cannot write {}: {e}", path.display())))
}

pub(super) fn run(args: &RunArgs) -> Result<(), Failure> {
    let plan = crate::pipeline::load(&args.pipeline)?;
    let built = build(&plan).map_err(|e| match e {
        BuildError::Input(m) => Failure::Input(m),
        BuildError::Runtime(m) => Failure::Runtime(m),
    })?;
    for w in &built.warnings {
        eprintln!("warning: {w}");
    }
    if !plan.pipeline.pin {
        eprintln!("note: lcores are not pinned (pin = false); they share the machine's cores");
    }
    let mut prev = None;
    let quiet = args.quiet;
    let mut tick = |r: &RunReport| {
        if !quiet {
            eprintln!("{}", live_line(r, &mut prev));
        }
    };
    let opts = RunOptions {
        duration: args.duration,
        interrupt: interrupt_flag(),
        drain_timeout: args.drain_timeout,
        drain_quiet: args.drain_quiet,
        on_tick: Some(&mut tick),
    };
    let (report, failure) = match run_pipeline(built, opts) {
        Ok(r) => (r, None),
        Err(RunError::Stages { report, failures }) => (*report, Some(failures.join("; "))),
        Err(e) => return Err(Failure::Runtime(e.to_string())),
    };
    if args.json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
        print_summary(&report);
    }
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    match failure {
        Some(f) => Err(Failure::Runtime(f)),
        None => Ok(()),
    }
}
