//! `linerate trial PIPELINE --rate R --duration S [--json PATH]`: one
//! generator trial (or several with --repeat), with result files and a
//! periodic latency stats file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::metrics_args::{start_metrics, MetricsArgs};
use super::output::write_json;
use super::Failure;
use crate::latency::{encode, StatsFile};
use crate::runtime::run::Probe;
use crate::sys::signals::interrupt_flag;
use crate::trial::{StreamResult, TrialError, TrialOptions, TrialResult, TrialRunner};
use crate::units::{parse_duration, si, Rate};

/// Arguments of `linerate trial`.
#[derive(Debug, clap::Args)]
pub struct TrialArgs {
    /// The pipeline file (with generator and analyzer stages).
    pipeline: PathBuf,
    /// Aggregate rate of all generators: "10 Mpps", "5 Gbps", "40%".
    #[arg(long)]
    rate: Rate,
    /// Trial duration.
    #[arg(long, value_parser = parse_duration)]
    duration: Duration,
    /// Wait after the generators stop for packets still on their way.
    #[arg(long, value_parser = parse_duration, default_value = "200ms")]
    drain: Duration,
    /// Run the trial this many times back to back (one runtime).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Write the result(s) as JSON ("-" for stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one result file per trial into this directory (N.json: the
    /// trial's configuration, port counters and latency together).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Write a latency stats file (Collie's key: value format plus the full
    /// histogram) every second and at the end of each trial; `{pid}` in the
    /// path is replaced by the process id.
    #[arg(long)]
    stats_file: Option<PathBuf>,
    /// Plot the latency distribution here (PATH.svg and PATH.png): percentiles on
    /// the 1/(1-p) axis, per stream and merged, every trial of a --repeat overlaid.
    #[arg(long, value_name = "PATH")]
    plot: Option<PathBuf>,
    /// Across hosts (a pipeline with `[host.NAME]` sections under mpirun,
    /// feature `mpi`): seconds to wait for a rank at each step.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    timeout: f64,
    #[command(flatten)]
    metrics: MetricsArgs,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or("unknown".into(), |h| h.trim().to_string())
}

fn stats(
    path: &Path,
    pipeline: &str,
    trial: u32,
    rate: f64,
    duration: Duration,
    hist: &hdrhistogram::Histogram<u64>,
) -> Result<(), Failure> {
    let context = [
        ("host", hostname()),
        ("pid", std::process::id().to_string()),
        ("pipeline", pipeline.to_string()),
        ("trial", trial.to_string()),
        ("rate_pps", format!("{rate:.0}")),
        ("duration_s", format!("{}", duration.as_secs_f64())),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    StatsFile {
        context,
        histogram: hist.clone(),
    }
    .write(path)
    .map_err(|e| Failure::Runtime(e.to_string()))
}

fn next_result_path(dir: &Path) -> Result<PathBuf, Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::Input(format!("cannot create {}: {e}", dir.display())))?;
    let mut n = 0u64;
    for e in std::fs::read_dir(dir)
        .map_err(|e| Failure::Input(format!("cannot read {}: {e}", dir.display())))?
        .flatten()
    {
        if let Some(k) = e
            .path()
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
        {
            n = n.max(k + 1);
        }
    }
    Ok(dir.join(format!("{n}.json")))
}

fn print_result(r: &TrialResult) {
    let mut out = std::io::stdout().lock();
    let l = &r.latency_ns;
    let _ = writeln!(
        out,
        "trial {}: {}pps for {:.3} s",
        r.trial,
        si(r.rate_pps),
        r.duration_s
    );
    let _ = writeln!(
        out,
        "  offered {}  sent {}  unsent {}  received {}  lost {}  loss ratio {:.6}",
        r.offered, r.sent, r.unsent, r.received, r.lost, r.loss_ratio
    );
    // Each rate over the window its packets went out or arrived in, never
    // over the nominal duration.
    let _ = writeln!(
        out,
        "  tx {}pps over {:.3} s  rx {}pps over {:.3} s  duplicates {}  reordered {}  stale {}",
        si(r.tx_pps),
        r.tx_span_s,
        si(r.rx_pps),
        r.rx_span_s,
        r.duplicates,
        r.reordered,
        r.stale
    );
    let _ = writeln!(
        out,
        "  latency ns: samples {}  min {}  avg {:.0}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
        l.samples, l.min, l.avg, l.p50, l.p90, l.p99, l.p999, l.max
    );
    print_encap(&mut out, r);
    let g = &r.burst_gap_ns;
    let _ = writeln!(
        out,
        "  gaps between bursts ns: min {}  p50 {}  p99 {}  max {}",
        g.min, g.p50, g.p99, g.max
    );
    print_streams(&mut out, r);
    if let Some(short) = r.tx_shortfall() {
        let _ = writeln!(
            out,
            "  the generators did not keep the rate: they sent at {}pps, {:.1} % below the \
             offered {}pps (the trial is judged at the offered rate)",
            si(r.tx_pps),
            short * 100.0,
            si(r.rate_pps)
        );
    }
    // Replicas (and several generators or analyzers): each one's part.
    if r.generators.len() > 1 || r.analyzers.len() > 1 {
        for (name, g) in &r.generators {
            let _ = writeln!(
                out,
                "  {name}: offered {}  sent {}  unsent {}  tx {}pps over {:.3} s",
                g.offered,
                g.sent,
                g.unsent,
                si(g.tx_pps),
                g.tx_span_s
            );
        }
        for (name, a) in &r.analyzers {
            let _ = writeln!(
                out,
                "  {name}: received {}  duplicates {}  reordered {}  rx {}pps over {:.3} s",
                a.received,
                a.duplicates,
                a.reordered,
                si(a.rx_pps),
                a.rx_span_s
            );
        }
    }
    if r.rx_dropped > 0 {
        let _ = writeln!(
            out,
            "  our receiving ports dropped {} of the lost packets",
            r.rx_dropped
        );
    }
    if let Some(l) = r.limited_by {
        let _ = writeln!(out, "  limited by: {}", l.advice());
    }
    for (name, h) in &r.hosts {
        let _ = writeln!(
            out,
            "  host {name} (rank {}): offered {}  sent {}  unsent {}  received {}  duplicates {}  reordered {}",
            h.rank, h.offered, h.sent, h.unsent, h.received, h.duplicates, h.reordered
        );
    }
    if let Some(c) = &r.clock {
        if let Some(b) = c.offset_bound_ns {
            let _ = writeln!(
                out,
                "  clock tai on every host: one-way latency, host clocks within {b} ns of rank 0's"
            );
        }
        if !c.why.is_empty() {
            let _ = writeln!(out, "  {}", c.why);
        }
    }
}

/// A stream's delay variation, as the metrics serve it.
fn stream_delay(s: &StreamResult) -> crate::metrics::StreamDelay {
    crate::metrics::StreamDelay {
        stream: s.stream,
        pdv: s.pdv_ns,
        ipdv: s.ipdv_ns,
        jitter_ns: s.jitter_ns,
    }
}

/// One line per stream: its latency p99 and delay variation (PDV, IPDV,
/// RFC 3550 jitter; all in ns).
fn print_streams(out: &mut impl Write, r: &TrialResult) {
    if r.streams.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "  {:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10}   (ns)",
        "stream", "received", "lat p99", "pdv p99", "ipdv p99", "ipdv min", "jitter"
    );
    for s in &r.streams {
        let _ = writeln!(
            out,
            "  {:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10.0}",
            s.stream,
            s.received,
            s.latency_ns.p99,
            s.pdv_ns.p99,
            s.ipdv_ns.p99,
            s.ipdv_ns.min,
            s.jitter_ns
        );
    }
}

/// The counts per encapsulation id, and the packets (per stream) in an
/// encapsulation the analyzers did not expect; nothing for plain frames.
fn print_encap(out: &mut impl Write, r: &TrialResult) {
    let e = &r.encap;
    if e.by_id.is_empty() && e.other_ids == 0 && e.unexpected_encap == 0 {
        return;
    }
    let mut line = String::from("  encap:");
    for (id, n) in &e.by_id {
        line += &format!("  {id}: {n}");
    }
    if e.other_ids > 0 {
        line += &format!("  other ids: {}", e.other_ids);
    }
    line += &format!("  unexpected_encap {}", e.unexpected_encap);
    let _ = writeln!(out, "{line}");
    for s in r.streams.iter().filter(|s| s.unexpected_encap > 0) {
        let _ = writeln!(
            out,
            "  stream {}: unexpected_encap {}",
            s.stream, s.unexpected_encap
        );
    }
}

/// `mpirun -np N linerate trial FILE` with a file of several hosts: every
/// rank builds its host's part; rank 0 drives the trials and reports.
#[cfg(feature = "mpi")]
fn across_hosts(
    args: &TrialArgs,
    plan: &crate::pipeline::Plan,
    rate_pps: f64,
) -> Result<(), Failure> {
    use crate::hosts::trial::Cluster;
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::Input(format!(
            "--timeout {} is not a positive number of seconds",
            args.timeout
        )));
    }
    let fail = super::hosts::report;
    let options = TrialOptions {
        drain: args.drain,
        stats_interval: None,
    };
    let timeout = Duration::from_secs_f64(args.timeout);
    let mut cluster = Cluster::open(plan, options, timeout, interrupt_flag()).map_err(fail)?;
    if !cluster.is_driver() {
        return cluster.follow().map_err(|e| Failure::Silent(e.code()));
    }
    let interrupt = interrupt_flag();
    let mut results = Vec::new();
    // The finished trials reach the file within milliseconds of a signal,
    // whatever step the trial under way is in (see EarlyReport).
    let early =
        super::hosts::EarlyReport::start(args.json.as_deref(), serde_json::json!({"trials": []}));
    for _ in 0..args.repeat {
        if interrupt.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let r = match cluster.trial(rate_pps, args.duration) {
            // A signal to this rank: every rank agreed the trial under way is
            // not a result and ended it; report what finished.
            Err(crate::hosts::trial::HostsError::Interrupted(_))
                if crate::sys::signals::received().is_some() =>
            {
                break
            }
            r => r.map_err(fail)?,
        };
        if let Some(dir) = &args.results {
            let path = next_result_path(dir)?;
            let doc = serde_json::json!({
                "config": {"pipeline": plan.pipeline.name, "file": plan.pipeline.file, "rate_pps": rate_pps, "duration_s": args.duration.as_secs_f64(), "drain_s": args.drain.as_secs_f64()},
                "result": &r,
                "latency": {"summary": r.latency_ns, "histogram_v2_deflate_base64": encode(&r.histogram)},
                // Each stream's histogram as merged from the hosts that received it.
                "stream_histograms_v2_deflate_base64": r.streams.iter().map(|s| (s.stream.to_string(), encode(&s.histogram))).collect::<std::collections::BTreeMap<_, _>>(),
            });
            write_json(&path, &doc)?;
        }
        if args.json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
            print_result(&r);
        }
        let value = serde_json::to_value(&r).unwrap_or_default();
        early.update(|d| {
            if let Some(t) = d["trials"].as_array_mut() {
                t.push(value);
            }
        });
        results.push(r);
    }
    early.finish();
    if let Some(status) = crate::sys::signals::exit_status() {
        // The report first: the other ranks wait for it in `finish`.
        let r = interrupted(args, &results, status);
        cluster.finish();
        return r;
    }
    // Between trials the other ranks wait for this: they end cleanly.
    cluster.finish();
    if let Some(path) = &args.json {
        if results.len() == 1 {
            write_json(path, &results[0])?;
        } else {
            write_json(path, &results)?;
        }
    }
    if let Some(path) = &args.plot {
        plot_latency(&plan.pipeline.name, &results, path)?;
    }
    Ok(())
}

pub(super) fn run(args: &TrialArgs) -> Result<(), Failure> {
    let plan = crate::pipeline::load(&args.pipeline)?;
    let rate_pps = plan
        .trial_rate_pps(args.rate)
        .map_err(|e| Failure::Input(format!("--rate: {e}")))?;
    if args.duration.is_zero() {
        return Err(Failure::Input("--duration must be above zero".into()));
    }
    #[cfg(feature = "mpi")]
    if !plan.pipeline.hosts.is_empty() {
        return across_hosts(args, &plan, rate_pps);
    }
    let stats_path = args.stats_file.as_ref().map(|p| {
        PathBuf::from(
            p.to_string_lossy()
                .replace("{pid}", &std::process::id().to_string()),
        )
    });
    let options = TrialOptions {
        drain: args.drain,
        stats_interval: stats_path.as_ref().map(|_| Duration::from_secs(1)),
    };
    let (live, server) = start_metrics(&args.metrics, "trial")?;
    let mut runner = TrialRunner::start(&plan, options).map_err(|e| match e {
        TrialError::Input(m) => Failure::Input(m),
        TrialError::Build(crate::runtime::build::BuildError::Input(m)) => Failure::Input(m),
        other => Failure::Runtime(other.to_string()),
    })?;
    for w in runner.warnings() {
        eprintln!("warning: {w}");
    }
    live.set_pipeline(Probe::of(runner.built()));
    let interrupt = interrupt_flag();
    let name = plan.pipeline.name.clone();
    let mut results = Vec::new();
    for _ in 0..args.repeat {
        if interrupt.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let bar = ProgressBar::new(1000);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} trial {msg} [{elapsed_precise}] {wide_bar} {percent}%",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(format!("{}pps x {:?}", si(rate_pps), args.duration));
        let trial_no = results.len() as u32 + 1;
        let mut stats_err = None;
        live.progress(|p| p.trial_started(rate_pps, args.duration.as_secs_f64()));
        let r = runner.trial(rate_pps, args.duration, interrupt, &mut |f, hist| {
            bar.set_position((f * 1000.0) as u64);
            if let (Some(path), Some(h)) = (&stats_path, hist) {
                if let Err(e) = stats(path, &name, trial_no, rate_pps, args.duration, h) {
                    stats_err = Some(e);
                }
            }
        });
        bar.finish_and_clear();
        let r = match r {
            // A signal: the trial under way is not a result; stop here and
            // report what finished.
            Err(TrialError::Interrupted) => break,
            r => r.map_err(|e| Failure::Runtime(e.to_string()))?,
        };
        live.progress(|p| {
            p.trial_done(r.offered, r.unsent, r.received);
            p.last_delay = r.streams.iter().map(stream_delay).collect();
        });
        if let Some(e) = stats_err {
            return Err(e);
        }
        if let Some(path) = &stats_path {
            stats(path, &name, r.trial, rate_pps, args.duration, &r.histogram)?;
        }
        if let Some(dir) = &args.results {
            let path = next_result_path(dir)?;
            let doc = serde_json::json!({
                "config": {"pipeline": name, "file": plan.pipeline.file, "rate_pps": rate_pps, "duration_s": args.duration.as_secs_f64(), "drain_s": args.drain.as_secs_f64()},
                "result": &r,
                "latency": {"summary": r.latency_ns, "histogram_v2_deflate_base64": encode(&r.histogram)},
            });
            write_json(&path, &doc)?;
        }
        if args.json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
            print_result(&r);
        }
        results.push(r);
    }
    let _ = runner.finish();
    if let Some(status) = crate::sys::signals::exit_status() {
        return interrupted(args, &results, status);
    }
    if let Some(path) = &args.json {
        if results.len() == 1 {
            write_json(path, &results[0])?;
        } else {
            write_json(path, &results)?;
        }
    }
    if let Some(path) = &args.plot {
        plot_latency(&name, &results, path)?;
    }
    args.metrics.stop(server);
    Ok(())
}

/// After a signal: says how many trials finished, writes them to `--json`
/// with `"interrupted": true`, and exits with `status` (130 or 143).
fn interrupted(args: &TrialArgs, results: &[TrialResult], status: u8) -> Result<(), Failure> {
    let signal = crate::sys::signals::name().unwrap_or("a signal");
    eprintln!(
        "interrupted by {signal}: {} of {} trial(s) finished",
        results.len(),
        args.repeat
    );
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "interrupted": true,
            "signal": signal,
            "trials": results,
        });
        write_json(path, &doc)?;
    }
    Err(Failure::Silent(status))
}

/// The latency plot of all trials: each trial's merged curve, and its streams'
/// when it has more than one.
fn plot_latency(pipeline: &str, results: &[TrialResult], path: &Path) -> Result<(), Failure> {
    use crate::latency::plot::{plot, Curve};
    let mut curves = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let tag = if results.len() > 1 {
            format!("trial {} ", r.trial)
        } else {
            String::new()
        };
        curves.push(Curve {
            label: format!("{tag}all streams ({} samples)", r.histogram.len()),
            trial: i,
            merged: true,
            hist: &r.histogram,
            // One stream: its variation is the trial's.
            ipdv: (r.streams.len() == 1).then(|| &r.streams[0].ipdv),
        });
        if r.streams.len() > 1 {
            for s in &r.streams {
                curves.push(Curve {
                    label: format!("{tag}stream {}", s.stream),
                    trial: i,
                    merged: false,
                    hist: &s.histogram,
                    ipdv: Some(&s.ipdv),
                });
            }
        }
    }
    let title = format!(
        "{pipeline}: latency, {} trial{} at {}pps",
        results.len(),
        if results.len() == 1 { "" } else { "s" },
        results.first().map_or("?".into(), |r| si(r.rate_pps))
    );
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    }
    for ext in ["svg", "png"] {
        plot(&title, &curves, &path.with_extension(ext))
            .map_err(|e| Failure::Runtime(e.to_string()))?;
    }
    Ok(())
}
