//! `linerate spead send`: a pipeline made from the flags (a udp port
//! connected to the destination and a `spead_send` stage), run on the
//! runtime as `linerate run` runs a file: heaps paced onto a UDP socket.

use std::fmt::Write as _;
use std::path::Path;

use super::*;
use crate::cli::run::{build_plan, drive, print_summary, Drive};
use crate::runtime::run::RunReport;

/// The name the generated pipeline has in messages and reports.
const PIPELINE: &str = "spead-send";

/// The sending stage's name in the pipeline.
const SEND: &str = "send";

fn bits_per_second(rate: &str, packet: usize) -> Result<f64, Failure> {
    let r: Rate = rate.parse().map_err(input)?;
    Ok(match r {
        Rate::Pps(p) => p * packet as f64 * 8.0,
        Rate::L2Bps(b) | Rate::L1Bps(b) => b,
        Rate::Percent(_) => {
            return Err(Failure::Input(
                "a percentage rate needs a port line rate; give Gbps or pps".into(),
            ))
        }
    })
}

/// The pipeline `spead send` runs, as TOML (`--print-pipeline` shows it): a
/// udp port connected to the destination (a 4 MiB socket buffer), buffers
/// for jumbo datagrams, and a `spead_send` stage.
pub(super) fn pipeline_text(a: &SendArgs) -> Result<String, Failure> {
    let packet = parse_size(&a.packet).map_err(input)? as usize;
    if packet > MAX_DATAGRAM {
        return Err(Failure::Input(format!(
            "--packet {packet} is above the {MAX_DATAGRAM}-byte datagrams this command sends"
        )));
    }
    let dest = socket_addr("destination", &a.dest)?;
    let bps = bits_per_second(&a.rate, packet)?;
    if !(bps >= 0.0 && bps.is_finite()) {
        return Err(Failure::Input(format!("--rate `{}` is not a rate", a.rate)));
    }
    if a.heaps == 0 {
        return Err(Failure::Input("--heaps must be at least 1".into()));
    }
    let flavour = match a.flavour {
        FlavourArg::S64_40 => "64-40",
        FlavourArg::S64_48 => "64-48",
    };
    let mut t = String::new();
    let _ = writeln!(t, "[pipeline]\nname = \"{PIPELINE}\"\npin = false\n");
    let _ = writeln!(
        t,
        "[pool]\nbuffers = 4096\nsize = {}\nheadroom = 128\n",
        MAX_DATAGRAM + 128
    );
    let _ = writeln!(
        t,
        "[port.udp]\nkind = \"udp\"\nconnect = {}\nsndbuf = \"4 MiB\"\n",
        serde_json::Value::from(dest.to_string())
    );
    let _ = writeln!(
        t,
        "[stage.{SEND}]\nkind = \"spead_send\"\ntx = \"udp\"\nburst = {BURST_MAX}\nflavour = \"{flavour}\"\nend_of_stream = {}",
        !a.no_stop
    );
    if bps > 0.0 {
        let _ = writeln!(t, "rate = \"{bps} bps\"");
    }
    if a.fsim {
        let f = a.feng.fsim(a.flavour.flavour());
        f.validate().map_err(Failure::Input)?;
        if f.max_packet() > packet {
            return Err(Failure::Input(format!(
                "F-engine packets are {} bytes, more than --packet {packet}",
                f.max_packet()
            )));
        }
        let _ = writeln!(
            t,
            "source = \"fsim\"\ntimestamps = {}\nn_ants = {}\nn_channels_total = {}\n\
             n_channels_per_stream = {}\nn_samples_per_channel = {}\nn_pols = {}\n\
             packet_payload = {}",
            a.heaps,
            f.n_ants,
            f.n_channels_total,
            f.n_channels_per_stream,
            f.n_samples_per_channel,
            f.n_pols,
            f.packet_payload,
        );
    } else {
        let size = parse_size(&a.heap_size).map_err(input)?;
        let _ = writeln!(
            t,
            "source = \"heaps\"\nheaps = {}\nheap_size = {size}\npacket_size = {packet}",
            a.heaps
        );
    }
    Ok(t)
}

pub(super) fn send(a: &SendArgs) -> Result<(), Failure> {
    let text = pipeline_text(a)?;
    if a.print_pipeline {
        print!("{text}");
        return Ok(());
    }
    let plan = crate::pipeline::load_str(Path::new(PIPELINE), &text).map_err(input)?;
    let live = crate::metrics::Live::new("spead_send");
    let built = build_plan(&plan)?;
    let d = Drive {
        duration: None,
        drain_timeout: Duration::from_secs(1),
        drain_quiet: Duration::from_millis(20),
        quiet: false,
    };
    let (report, failure) = drive(built, &live, &d)?;
    let v = json_report(&report);
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if !to_stdout {
        print_summary(&report);
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        println!(
            "sent {} heaps, {} packets, {} bytes in {:.3} s: {:.3} Gb/s, {:.0} packets/s",
            v["heaps"],
            v["packets"],
            v["bytes"],
            report.duration_s,
            f("gbps"),
            f("pps")
        );
    }
    write_json_if(a.json.as_deref(), &v)?;
    match failure {
        Some(f) => Err(Failure::Runtime(f)),
        None => Ok(()),
    }
}

/// The run's report plus the send's own fields: `heaps`, `packets` (the
/// end-of-stream heap's included), `bytes`, `refused` (datagrams the kernel
/// refused because nobody listened at the destination yet: counted, not
/// fatal), and `secs`, `gbps`, `pps` over the whole send.
fn json_report(r: &RunReport) -> serde_json::Value {
    let mut v = serde_json::to_value(r).unwrap_or_default();
    let d = r
        .stages
        .get(SEND)
        .and_then(|s| s.detail.clone())
        .unwrap_or_default();
    let n = |k: &str| d[k].as_u64().unwrap_or(0);
    let (packets, bytes) = (n("packets"), n("bytes"));
    let secs = r.duration_s.max(1e-9);
    if let Some(m) = v.as_object_mut() {
        m.insert("heaps".into(), n("heaps").into());
        m.insert("packets".into(), packets.into());
        m.insert("bytes".into(), bytes.into());
        let refused = r.ports.get("udp").map_or(0, |p| p.dropped);
        m.insert("refused".into(), refused.into());
        m.insert("secs".into(), r.duration_s.into());
        m.insert("gbps".into(), (bytes as f64 * 8.0 / secs / 1e9).into());
        m.insert("pps".into(), (packets as f64 / secs).into());
    }
    v
}
