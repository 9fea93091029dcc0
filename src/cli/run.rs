//! `linerate run PIPELINE [--duration S] [--json PATH]`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use super::metrics_args::{start_metrics, MetricsArgs};
use super::output::write_json;
use super::Failure;
use crate::metrics::Live;
use crate::pipeline::build::{build, BuildError};
use crate::runtime::build::Built;
use crate::runtime::run::{run as run_pipeline, Probe, RunError, RunOptions, RunReport};
use crate::sys::signals::interrupt_flag;
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
    /// Across hosts (a pipeline with `[host.NAME]` sections under mpirun,
    /// feature `mpi`): seconds to wait for a rank at each step.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    timeout: f64,
    #[command(flatten)]
    metrics: MetricsArgs,
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
    let text = summary(r);
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// The summary table of a run, as text.
fn summary(r: &RunReport) -> String {
    let mut out: Vec<u8> = Vec::new();
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
    // A replicated stage: its sum, then each replica indented under it.
    let rows = r.stages.iter().flat_map(|(name, s)| {
        let lcore = if s.replicas.is_empty() {
            s.lcore.to_string()
        } else {
            format!("x{}", s.replicas.len())
        };
        std::iter::once((name.clone(), lcore, s)).chain(
            s.replicas
                .iter()
                .enumerate()
                .map(move |(k, x)| (format!("  {name}[{k}]"), x.lcore.to_string(), x)),
        )
    });
    for (name, lcore, s) in rows.clone() {
        let moved = s.packets_in.max(s.packets_out);
        let polls = (s.busy_polls + s.idle_polls).max(1);
        let _ = writeln!(
            out,
            "{:<16} {:<8} {:>5} {:>14} {:>14} {:>12} {:>8}pps {:>5.1}%",
            name,
            s.kind,
            lcore,
            s.packets_in,
            s.packets_out,
            s.dropped,
            si(moved as f64 / secs),
            100.0 * s.busy_polls as f64 / polls as f64
        );
    }
    // What each stage knows beyond packet counts (a generator's offered and
    // unsent, a SPEAD receiver's heaps, a checker's wrong bytes), one line each.
    for (name, _, s) in rows {
        if let Some(d) = &s.detail {
            let mut fields = Vec::new();
            flatten("", d, &mut fields);
            if !fields.is_empty() {
                let _ = writeln!(out, "  {}: {}", name.trim(), fields.join(" "));
            }
        }
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
    String::from_utf8_lossy(&out).into_owned()
}

/// Builds a planned pipeline (opens its ports): a bad setting is exit 2, a
/// failure to open exit 1.
pub(crate) fn build_plan(plan: &crate::pipeline::Plan) -> Result<Built, Failure> {
    build(plan).map_err(|e| match e {
        BuildError::Input(m) => Failure::Input(m),
        BuildError::Runtime(m) => Failure::Runtime(m),
    })
}

/// How a built pipeline runs: `run`'s flags, or what a subcommand that
/// builds its own pipeline (`spead recv`) passes.
pub(crate) struct Drive {
    /// Stop after this long; `None`: when every finite stage has finished
    /// or on Ctrl-C / SIGTERM.
    pub duration: Option<Duration>,
    /// Longest wait for in-flight packets when stopping.
    pub drain_timeout: Duration,
    /// How long every stage must have been idle before stopping.
    pub drain_quiet: Duration,
    /// No live stats on stderr.
    pub quiet: bool,
}

/// Runs a built pipeline on the runtime, `live` serving its counters for
/// `--metrics`, its live stats on stderr once a second: the report, and
/// the stages' failures (joined) if any failed.
pub(crate) fn drive(
    built: Built,
    live: &Live,
    d: &Drive,
) -> Result<(RunReport, Option<String>), Failure> {
    live.set_pipeline(Probe::of(&built));
    for w in &built.warnings {
        eprintln!("warning: {w}");
    }
    let mut prev = None;
    let quiet = d.quiet;
    let mut tick = |r: &RunReport| {
        if !quiet {
            eprintln!("{}", live_line(r, &mut prev));
        }
    };
    let opts = RunOptions {
        duration: d.duration,
        interrupt: interrupt_flag(),
        drain_timeout: d.drain_timeout,
        drain_quiet: d.drain_quiet,
        on_tick: Some(&mut tick),
    };
    match run_pipeline(built, opts) {
        Ok(r) => Ok((r, None)),
        Err(RunError::Stages { report, failures }) => Ok((*report, Some(failures.join("; ")))),
        Err(e) => Err(Failure::Runtime(e.to_string())),
    }
}

pub(super) fn run(args: &RunArgs) -> Result<(), Failure> {
    let plan = crate::pipeline::load(&args.pipeline)?;
    #[cfg(feature = "mpi")]
    if !plan.pipeline.hosts.is_empty() {
        return across_hosts(args, &plan);
    }
    let (live, server) = start_metrics(&args.metrics, "run")?;
    let built = build_plan(&plan)?;
    if !plan.pipeline.pin {
        eprintln!("note: lcores are not pinned (pin = false); they share the machine's cores");
    }
    let drive_opts = Drive {
        duration: args.duration,
        drain_timeout: args.drain_timeout,
        drain_quiet: args.drain_quiet,
        quiet: args.quiet,
    };
    let (report, failure) = drive(built, &live, &drive_opts)?;
    if args.json.as_deref().is_none_or(|p| p.as_os_str() != "-") {
        print_summary(&report);
    }
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    args.metrics.stop(server);
    match failure {
        Some(f) => Err(Failure::Runtime(f)),
        None => Ok(()),
    }
}

/// `mpirun -np N linerate run FILE --duration S` with a file of several
/// hosts: every rank runs its host's part for the same duration; rank 0
/// prints each host's summary and writes one JSON report with a section per
/// host.
#[cfg(feature = "mpi")]
fn across_hosts(args: &RunArgs, plan: &crate::pipeline::Plan) -> Result<(), Failure> {
    use crate::hosts::trial::{agree, join, HostsError};
    let (duration, timeout) = hosts_times(args)?;
    let fail = super::hosts::report;
    let ranks = join(plan, timeout).map_err(fail)?;
    let me = ranks.host().name.clone();
    // The clock rule, as for trials: a reliable receiver's latency compares
    // the sender's stamp with its own clock, so across hosts it is shown
    // only when every host stamps on CLOCK_TAI.
    let tai = plan
        .pipeline
        .hosts
        .iter()
        .all(|h| h.clock == crate::pipeline::HostClock::Tai);
    if tai {
        crate::time::use_tai_stamps();
    }
    let across = plan.reliable_across_hosts();
    let built = build(&plan.part(&me));
    let status = match &built {
        Ok(_) => 0,
        Err(e) => {
            ranks.say(&e.to_string());
            if matches!(e, BuildError::Input(_)) {
                2
            } else {
                1
            }
        }
    };
    // Followers print nothing of a peer's failure: rank 0 says it once.
    let quiet_fail = |e: HostsError| {
        if ranks.is_driver() {
            fail(e)
        } else {
            Failure::Silent(e.code())
        }
    };
    agree(&ranks, "start", timeout, status).map_err(quiet_fail)?;
    let Ok(built) = built else {
        unreachable!("a failed build was reported by the status exchange")
    };
    let offsets = if tai && !across.is_empty() {
        crate::hosts::trial::measure_offsets(&ranks, timeout, 5)
    } else {
        Default::default()
    };
    let (mut report, status) = run_part(args, &ranks, built, duration);
    if let (Some(r), false) = (report.as_mut(), tai) {
        no_latency_across(r, &across, &me);
    }
    let wait = timeout + duration + args.drain_timeout;
    let text = report.as_ref().map(summary).unwrap_or_default();
    let value = report
        .as_ref()
        .and_then(|r| serde_json::to_value(r).ok())
        .unwrap_or_default();
    let signal = crate::sys::signals::name();
    if let (true, Some(sig), Some(path)) = (
        ranks.is_driver(),
        signal,
        args.json.as_deref().filter(|p| p.as_os_str() != "-"),
    ) {
        write_own_part(path, plan, duration, &ranks, sig, &value);
    }
    let mine = serde_json::to_vec(&serde_json::json!({"summary": text, "report": value}))
        .unwrap_or_default();
    // Every rank's report reaches rank 0, failed or not: what ran is reported.
    let rows = ranks.gather_bytes("reports", wait, &mine);
    let outcome = agree(&ranks, "finished", timeout, status);
    let Some(rows) = rows else {
        return outcome.map_err(quiet_fail);
    };
    let to_stdout = args.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let hosts = host_sections(&ranks, &rows, to_stdout);
    // SPEAD stages on several hosts: one ingest summary over all of them.
    let ingest = crate::hosts::ingest::summarise(hosts.iter().map(|(k, v)| (k.as_str(), v)));
    if let (Some(i), false) = (&ingest, to_stdout) {
        print!("{}", i.text());
    }
    // What crosses hosts and whether it has a latency, as for trials.
    let clock = (!across.is_empty()).then(|| clock_section(&across, &offsets, tai, to_stdout));
    if let Some(path) = &args.json {
        let mut doc = serde_json::json!({
            "pipeline": plan.pipeline.name,
            "duration_s": duration.as_secs_f64(),
            "hosts": hosts,
        });
        if let Some(i) = &ingest {
            doc["spead"] = serde_json::to_value(i).unwrap_or_default();
        }
        if let Some(sig) = signal {
            doc["interrupted"] = true.into();
            doc["signal"] = sig.into();
        }
        if let Some(c) = &clock {
            doc["clock"] = c.clone();
        }
        write_json(path, &doc)?;
    }
    outcome.map_err(quiet_fail)
}

/// A run across hosts' duration and step timeout, both required to be
/// positive.
#[cfg(feature = "mpi")]
fn hosts_times(args: &RunArgs) -> Result<(Duration, Duration), Failure> {
    let Some(duration) = args.duration else {
        return Err(Failure::Input(
            "--duration: a run across hosts needs one (a host that only receives cannot \
             tell when the senders are done)"
                .into(),
        ));
    };
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::Input(format!(
            "--timeout {} is not a positive number of seconds",
            args.timeout
        )));
    }
    Ok((duration, Duration::from_secs_f64(args.timeout)))
}

/// Interrupted (mpirun passes a SIGTERM on to every rank and SIGKILLs them
/// a second later): rank 0's own part (`value`) reaches the file at `path`
/// before any step with the other ranks; the whole report replaces it.
#[cfg(feature = "mpi")]
fn write_own_part(
    path: &std::path::Path,
    plan: &crate::pipeline::Plan,
    duration: Duration,
    ranks: &crate::hosts::mpi::Ranks,
    signal: &str,
    value: &serde_json::Value,
) {
    let mut section = value.clone();
    if let Some(m) = section.as_object_mut() {
        m.insert("rank".into(), 0.into());
    }
    let doc = serde_json::json!({
        "pipeline": plan.pipeline.name,
        "duration_s": duration.as_secs_f64(),
        "interrupted": true,
        "signal": signal,
        "hosts": {ranks.host().name.clone(): section},
        "pending_hosts": ranks.hosts()[1..].iter().map(|h| h.name.clone()).collect::<Vec<_>>(),
    });
    // The whole report's write, after it, reports a failure.
    let _ = write_json(path, &doc);
}

/// Runs this rank's part for `duration`; its report (if it ran) and its
/// status for the other ranks (0 or 1), a failure said to them.
#[cfg(feature = "mpi")]
fn run_part(
    args: &RunArgs,
    ranks: &crate::hosts::mpi::Ranks,
    built: crate::runtime::build::Built,
    duration: Duration,
) -> (Option<RunReport>, u64) {
    // A rank interrupted ends its part and tells the others (through rank
    // 0), which stop within a tick: the report comes now, not after the
    // duration.
    let mut tick = |_: &RunReport| {
        if ranks.stop_told() {
            crate::sys::signals::interrupt_without_signal();
        }
    };
    let opts = RunOptions {
        duration: Some(duration),
        interrupt: interrupt_flag(),
        drain_timeout: args.drain_timeout,
        drain_quiet: args.drain_quiet,
        on_tick: Some(&mut tick),
    };
    let ran = run_pipeline(built, opts);
    if interrupt_flag().load(std::sync::atomic::Ordering::Relaxed) {
        ranks.tell_stop();
    }
    match ran {
        Ok(r) => (Some(r), 0),
        Err(RunError::Stages { report, failures }) => {
            ranks.say(&failures.join("; "));
            (Some(*report), 1)
        }
        Err(e) => {
            ranks.say(&e.to_string());
            (None, 1)
        }
    }
}

/// Without TAI clocks on every host, the latency of what a reliable
/// receiver on host `me` got from another host is not comparable: it is
/// removed, with a note saying why.
#[cfg(feature = "mpi")]
fn no_latency_across(
    r: &mut RunReport,
    across: &std::collections::BTreeMap<String, (String, Vec<String>)>,
    me: &str,
) {
    for (stage, (host, from)) in across {
        let Some(d) = r
            .stages
            .get_mut(stage)
            .filter(|_| host == me)
            .and_then(|s| s.detail.as_mut())
        else {
            continue;
        };
        d["latency_ns"] = serde_json::Value::Null;
        d["latency_note"] = format!(
            "no latency: the messages were stamped on host {} and received on host {host}; \
             set clock = \"tai\" on every host for one-way latency",
            from.join(", ")
        )
        .into();
    }
}

/// Each host's summary printed (unless the JSON goes to stdout) and its
/// report section, by host name, from the gathered `rows`.
#[cfg(feature = "mpi")]
fn host_sections(
    ranks: &crate::hosts::mpi::Ranks,
    rows: &[Vec<u8>],
    to_stdout: bool,
) -> serde_json::Map<String, serde_json::Value> {
    let mut hosts = serde_json::Map::new();
    for (h, row) in ranks.hosts().iter().zip(rows) {
        let v: serde_json::Value = serde_json::from_slice(row).unwrap_or_default();
        if !to_stdout {
            println!("host {}:", h.label());
            print!("{}", v["summary"].as_str().unwrap_or("(no report)\n"));
        }
        let mut section = v["report"].clone();
        if let Some(m) = section.as_object_mut() {
            m.insert("rank".into(), h.rank.into());
        }
        hosts.insert(h.name.clone(), section);
    }
    hosts
}

/// The report's `clock` section for what crosses hosts (`across`), its
/// line printed unless the JSON goes to stdout: one-way latency with TAI
/// clocks on every host (within the measured `offsets`), else why not.
#[cfg(feature = "mpi")]
fn clock_section(
    across: &std::collections::BTreeMap<String, (String, Vec<String>)>,
    offsets: &std::collections::BTreeMap<String, crate::hosts::trial::Offset>,
    tai: bool,
    to_stdout: bool,
) -> serde_json::Value {
    let what: Vec<String> = across
        .iter()
        .map(|(stage, (host, from))| {
            format!(
                "reliable_rx `{stage}` on host {host} receives messages stamped on host {}",
                from.join(", ")
            )
        })
        .collect();
    let bound = offsets
        .values()
        .map(|o| o.offset_ns.unsigned_abs() + o.bound_ns)
        .max()
        .unwrap_or(0);
    let why = if tai {
        String::new()
    } else {
        format!(
            "no latency for what crosses hosts: {}; a stamp from one host's clock is not \
             comparable with another's unless both are synchronised. Set clock = \"tai\" \
             on every host (CLOCK_TAI, disciplined by PTP's phc2sys) for one-way latency",
            what.join("; ")
        )
    };
    if !to_stdout {
        if tai {
            println!(
                "clock tai on every host: one-way latency, host clocks within {bound} ns of rank 0's"
            );
        } else {
            println!("{why}");
        }
    }
    serde_json::json!({
        "clock": if tai { "tai" } else { "monotonic" },
        "latency": tai,
        "why": why,
        "offset_bound_ns": tai.then_some(bound),
    })
}

/// The scalar fields of a stage's detail as `key=value` (nested objects as
/// `outer.inner=value`; zero counters and lists, such as per-stream tables,
/// only in the JSON).
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => out.push(format!("{prefix}={}", short_float(f))),
            // Zero counters are left out, as in the port lines.
            _ if n.as_u64() == Some(0) => {}
            _ => out.push(format!("{prefix}={n}")),
        },
        Value::Bool(b) => out.push(format!("{prefix}={b}")),
        Value::String(s) if !prefix.is_empty() => out.push(format!("{prefix}={s}")),
        _ => {}
    }
}

/// A float with four significant digits, without trailing zeros.
fn short_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return format!("{f}");
    }
    let digits = (3 - f.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{f:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn details_flatten_to_scalars() {
        let v = serde_json::json!({"offered": 10, "fraction": 0.987654, "ok": true,
            "heaps": {"complete": 3, "too_old": 0}, "streams": [1, 2], "mode": "check"});
        let mut f = Vec::new();
        flatten("", &v, &mut f);
        assert_eq!(
            f,
            [
                "fraction=0.9877",
                "heaps.complete=3",
                "mode=check",
                "offered=10",
                "ok=true"
            ]
        );
        assert_eq!(short_float(1234.5678), "1235");
        assert_eq!(short_float(2.5), "2.5");
    }
}
