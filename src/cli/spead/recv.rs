//! `linerate spead recv`: a pipeline made from the flags (a udp port, a
//! `spead_recv` stage and, with `--chunks`, a `chunk_sink`), run on the
//! runtime as `linerate run` runs a file. Its live stats, JSON report,
//! plots, `--metrics` and Ctrl-C / SIGTERM handling are the stages' and the
//! runtime's own; this file only writes the pipeline and summarises the report.

use std::fmt::Write as _;
use std::path::Path;

use super::*;
use crate::cli::metrics_args::start_metrics;
use crate::cli::run::{build_plan, drive, print_summary, Drive};
use crate::runtime::build::Built;
use crate::runtime::run::RunReport;

/// The name the generated pipeline has in messages and reports.
const PIPELINE: &str = "spead-recv";

/// The receiving stage's and the chunk sink's names in the pipeline.
const RECV: &str = "recv";
const SINK: &str = "sink";

/// Wrong bytes the chunk sink locates (the first ones; all are counted).
const KEEP_WRONG: usize = 100;

pub(super) fn recv(a: &RecvArgs) -> Result<i32, Failure> {
    let text = pipeline_text(a)?;
    if a.print_pipeline {
        print!("{text}");
        return Ok(0);
    }
    let (live, server) = start_metrics(&a.metrics, "spead_recv")?;
    let r = open(&text).and_then(|built| run_built(built, a, &live));
    a.metrics.stop(server);
    r
}

/// `text` as a TOML basic string (JSON's escapes are TOML's).
fn quoted(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// The pipeline `spead recv` runs, as TOML (`--print-pipeline` shows it):
/// a udp port bound to the address (spead2's default 8 MiB socket buffer),
/// buffers for jumbo datagrams, and the stages the flags ask for.
pub(super) fn pipeline_text(a: &RecvArgs) -> Result<String, Failure> {
    let bind = socket_addr("bind address", &a.bind)?;
    if let Some(d) = &a.duration {
        parse_duration(d).map_err(input)?;
    }
    if a.sink == SinkArg::Write && a.out.is_none() {
        return Err(Failure::Input("--sink write needs --out DIR".into()));
    }
    let mut t = String::new();
    let _ = writeln!(t, "[pipeline]\nname = \"{PIPELINE}\"\npin = false\n");
    let _ = writeln!(
        t,
        "[pool]\nbuffers = 4096\nsize = {}\nheadroom = 128\n",
        MAX_DATAGRAM + 128
    );
    let _ = writeln!(
        t,
        "[port.udp]\nkind = \"udp\"\nbind = {}\nrcvbuf = \"8 MiB\"\n",
        quoted(&bind.to_string())
    );
    let _ = writeln!(
        t,
        "[stage.{RECV}]\nkind = \"spead_recv\"\nrx = \"udp\"\nburst = {BURST_MAX}"
    );
    let plot = a
        .plot
        .as_ref()
        .map(|p| quoted(&p.to_string_lossy()))
        .map(|p| format!("plot = {p}\n"))
        .unwrap_or_default();
    if !a.chunks {
        let _ = writeln!(t, "mode = \"heaps\"\nmax_heaps = {}", a.max_heaps.max(1));
        if a.verbose {
            let _ = writeln!(t, "print = true");
        }
        t += &plot;
        return Ok(t);
    }
    let f = a.feng.fsim(a.flavour.flavour());
    f.validate().map_err(Failure::Input)?;
    let flavour = match a.flavour {
        FlavourArg::S64_40 => "64-40",
        FlavourArg::S64_48 => "64-48",
    };
    let copy = match a.copy {
        CopyArg::Stream => "stream",
        CopyArg::Plain => "plain",
    };
    let _ = writeln!(
        t,
        "mode = \"chunks\"\nflavour = \"{flavour}\"\nn_ants = {}\nn_channels_total = {}\n\
         n_channels_per_stream = {}\nn_samples_per_channel = {}\nn_pols = {}\n\
         packet_payload = {}\nheaps_per_fengine_per_chunk = {}\nmax_chunks = {}\n\
         n_chunks = {}\nmax_heaps = {}\ncopy = \"{copy}\"\n",
        f.n_ants,
        f.n_channels_total,
        f.n_channels_per_stream,
        f.n_samples_per_channel,
        f.n_pols,
        f.packet_payload,
        a.heaps_per_fengine_per_chunk,
        a.max_chunks,
        a.n_chunks.max(a.max_chunks),
        a.max_heaps.max(f.n_ants * 2),
    );
    let mode = match (a.sink, &a.out) {
        (SinkArg::Write, Some(dir)) => {
            format!("mode = \"write\"\ndir = {}", quoted(&dir.to_string_lossy()))
        }
        (SinkArg::Check, _) => "mode = \"check\"".into(),
        _ => "mode = \"discard\"".into(),
    };
    let _ = write!(
        t,
        "[stage.{SINK}]\nkind = \"chunk_sink\"\nfrom = \"{RECV}\"\n{mode}\nkeep_wrong = {KEEP_WRONG}\n{plot}"
    );
    Ok(t)
}

/// Plans and builds the pipeline: the udp port is bound when this returns,
/// so a sender started after it loses nothing to a port nobody listens on.
pub(super) fn open(text: &str) -> Result<Built, Failure> {
    let plan = crate::pipeline::load_str(Path::new(PIPELINE), text).map_err(input)?;
    build_plan(&plan)
}

/// Runs the built pipeline until the end-of-stream heap, `--duration`, or
/// Ctrl-C / SIGTERM; prints the run's summary and the receive's, writes the
/// JSON report. Exit status 1 when a stage failed (a wrong byte under
/// `--sink check`, a chunk that could not be written).
pub(super) fn run_built(
    built: Built,
    a: &RecvArgs,
    live: &crate::metrics::Live,
) -> Result<i32, Failure> {
    let duration = match &a.duration {
        Some(d) => Some(parse_duration(d).map_err(input)?),
        None => None,
    };
    let d = Drive {
        duration,
        drain_timeout: Duration::from_secs(1),
        drain_quiet: Duration::from_millis(20),
        quiet: false,
    };
    let (report, failure) = drive(built, live, &d)?;
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !to_stdout {
        print_summary(&report);
        print!("{}", receive_summary(a, &report));
    }
    write_json_if(a.json.as_deref(), &json_report(a, &report))?;
    match failure {
        Some(f) => Err(Failure::Runtime(f)),
        None => Ok(0),
    }
}

/// A stage's detail in the report (null when it has none).
fn detail<'r>(r: &'r RunReport, stage: &str) -> &'r serde_json::Value {
    static NULL: serde_json::Value = serde_json::Value::Null;
    r.stages
        .get(stage)
        .and_then(|s| s.detail.as_ref())
        .unwrap_or(&NULL)
}

/// The run's report plus the receive's own fields: `mode`, `secs` (the
/// whole receive), `span_s` and `gbps` (over the time the packets arrived
/// in), the receiver's counters as `heaps` or `chunks`, and `check`.
fn json_report(a: &RecvArgs, r: &RunReport) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    let rx = detail(r, RECV);
    let (mode, counters) = if a.chunks {
        ("chunks", "chunks")
    } else {
        ("heaps", "heaps")
    };
    if let Some(m) = v.as_object_mut() {
        m.insert("mode".into(), mode.into());
        m.insert("secs".into(), r.duration_s.into());
        m.insert("span_s".into(), rx["seconds"].clone());
        m.insert("gbps".into(), rx["gbps"].clone());
        m.insert(counters.into(), rx["stream"].clone());
        if a.chunks && a.sink == SinkArg::Check {
            m.insert("check".into(), detail(r, SINK)["check"].clone());
        }
    }
    v
}

/// The receive in a few lines: packets and heaps by cause, chunks and the
/// fraction present, Gb/s; with `--sink check`, what was checked and where
/// the first wrong bytes are (on stderr).
fn receive_summary(a: &RecvArgs, r: &RunReport) -> String {
    let rx = detail(r, RECV);
    let s = &rx["stream"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let gbps = rx["gbps"].as_f64().unwrap_or(0.0);
    let mut out = String::new();
    if !a.chunks {
        let _ = writeln!(
            out,
            "received {} packets: {} heaps complete, {} unsized, {} evicted, {} flushed incomplete, \
             {} duplicate, {} malformed packets; {gbps:.3} Gb/s",
            n(&s["packets"]),
            n(&s["heaps_complete"]),
            n(&s["heaps_unsized"]),
            n(&s["heaps_evicted"]),
            n(&s["heaps_flushed"]),
            n(&s["packets_duplicate"]),
            n(&s["packets_malformed"]),
        );
        return out;
    }
    let (evicted, flushed) = (
        n(&s["heaps_incomplete_evicted"]),
        n(&s["heaps_incomplete_flushed"]),
    );
    let _ = writeln!(
        out,
        "received {} packets: {} heaps complete, {} incomplete (evicted {evicted}, flushed {flushed}), \
         {} too old, {} rejected; {} chunks, {:.6} present; {gbps:.3} Gb/s",
        n(&s["packets"]),
        n(&s["heaps_complete"]),
        evicted + flushed,
        n(&s["heaps_too_old"]),
        n(&s["heaps_rejected"]),
        n(&s["chunks"]),
        rx["fraction_present"].as_f64().unwrap_or(1.0),
    );
    let check = &detail(r, SINK)["check"];
    if a.sink == SinkArg::Check && check.is_object() {
        for w in check["first_wrong"].as_array().into_iter().flatten() {
            eprintln!(
                "wrong byte: chunk {} heap {} (feng {}, timestamp {}) offset {}: {:#04x}, expected {:#04x}",
                w["chunk_id"], w["heap_index"], w["feng_id"], w["timestamp"], w["heap_offset"],
                n(&w["got"]), n(&w["expected"])
            );
        }
        let _ = writeln!(
            out,
            "checked {} heaps ({} bytes): {} wrong bytes",
            n(&check["heaps_checked"]),
            n(&check["bytes_checked"]),
            n(&check["wrong_bytes"])
        );
    }
    out
}
