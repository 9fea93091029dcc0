use super::recv::{open, pipeline_text, run_built};
use super::*;

/// Runs the receiver of `args` on a socket bound here and now (its pipeline
/// built, so its udp port open), so the sender never sends to a port nobody
/// listens on yet.
fn spawn_receiver(args: SpeadArgs) -> std::thread::JoinHandle<i32> {
    let SpeadCommand::Recv(r) = args.command else {
        panic!("not a recv command")
    };
    let text = pipeline_text(&r).unwrap_or_else(|_| panic!("bad flags"));
    let built = open(&text).unwrap_or_else(|_| panic!("cannot bind {}", r.bind));
    std::thread::spawn(move || {
        run_built(built, &r, &crate::metrics::Live::new("spead_recv")).unwrap_or(1)
    })
}
use clap::Parser;
use std::net::UdpSocket;

#[derive(Debug, Parser)]
struct Top {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    Spead(SpeadArgs),
}

/// A loopback UDP port nothing listens on now (the OS's pick, released).
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn parse(args: &[&str]) -> SpeadArgs {
    let Cmd::Spead(a) = Top::try_parse_from(args).unwrap().cmd;
    a
}

#[test]
fn loopback_fsim_send_and_checked_chunk_recv() {
    let port = free_udp_port();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("recv.json");
    let geo = [
        "--n-ants",
        "2",
        "--n-channels-total",
        "64",
        "--n-channels-per-stream",
        "2",
        "--n-samples-per-channel",
        "64",
        "--packet-payload",
        "256",
    ];
    let bind = format!("127.0.0.1:{port}");
    let mut r = vec!["x", "spead", "recv", &bind, "--chunks", "--sink", "check"];
    r.extend_from_slice(&geo);
    r.extend_from_slice(&[
        "--heaps-per-fengine-per-chunk",
        "2",
        "--duration",
        "20s",
        "--json",
    ]);
    let json_s = json.to_str().unwrap().to_string();
    r.push(&json_s);
    let plot = dir.path().join("recv");
    let plot_s = plot.to_str().unwrap().to_string();
    r.extend_from_slice(&["--plot", &plot_s]);
    let h = spawn_receiver(parse(&r));
    let mut s = vec![
        "x",
        "spead",
        "send",
        &bind,
        "--fsim",
        "--flavour",
        "64-48",
        "--heaps",
        "8",
        "--rate",
        "50 Mbps",
    ];
    s.extend_from_slice(&geo);
    assert_eq!(crate::cli::status(&run(&parse(&s))), 0);
    assert_eq!(h.join().unwrap(), 0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["chunks"]["stopped"], true);
    assert_eq!(v["check"]["wrong_bytes"], 0);
    // Loopback at 50 Mb/s loses nothing here; every heap is checked.
    assert_eq!(v["chunks"]["heaps_complete"], 16);
    assert_eq!(v["check"]["heaps_checked"], 16);
    let svg = std::fs::read_to_string(plot.with_extension("svg")).unwrap();
    assert!(svg.contains("fraction heaps present in chunks") && svg.contains("Gb/s"));
    assert_eq!(
        &std::fs::read(plot.with_extension("png")).unwrap()[1..4],
        b"PNG"
    );
}

#[test]
fn loopback_generic_heaps_send_and_recv() {
    let port = free_udp_port();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("heaps.json");
    let json_s = json.to_str().unwrap().to_string();
    let bind = format!("127.0.0.1:{port}");
    let recv_args = parse(&[
        "x",
        "spead",
        "recv",
        &bind,
        "--duration",
        "20s",
        "--json",
        &json_s,
    ]);
    let h = spawn_receiver(recv_args);
    let send_json = dir.path().join("send.json");
    let send_s = send_json.to_str().unwrap().to_string();
    let s = parse(&[
        "x",
        "spead",
        "send",
        &bind,
        "--heaps",
        "5",
        "--heap-size",
        "10 KiB",
        "--packet",
        "1000",
        "--rate",
        "50 Mbps",
        "--json",
        &send_s,
    ]);
    assert_eq!(crate::cli::status(&run(&s)), 0);
    assert_eq!(h.join().unwrap(), 0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["mode"], "heaps");
    assert_eq!(v["heaps"]["stopped"], true);
    assert_eq!(v["heaps"]["heaps_complete"], 5);
    assert_eq!(v["heaps"]["packets_duplicate"], 0);
    // The receiver waited for the sender to start: the rate is over the
    // time the packets arrived in, not over the whole receive.
    let (span, secs) = (v["span_s"].as_f64().unwrap(), v["secs"].as_f64().unwrap());
    assert!(span < secs, "{v}");
    assert!(v["gbps"].as_f64().unwrap() > 0.0, "{v}");
    let sent: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&send_json).unwrap()).unwrap();
    assert_eq!(sent["heaps"], 5);
    // 10 KiB in <= 1000-byte packets: 11 per heap, plus the end-of-stream packet.
    assert_eq!(sent["packets"], 5 * 11 + 1);
}

#[test]
fn bad_input_is_status_2() {
    let a = parse(&["x", "spead", "send", "127.0.0.1:9", "--rate", "fast"]);
    assert_eq!(crate::cli::status(&run(&a)), 2);
    let a = parse(&[
        "x",
        "spead",
        "recv",
        "127.0.0.1:0",
        "--chunks",
        "--sink",
        "write",
    ]);
    assert_eq!(crate::cli::status(&run(&a)), 2);
}

#[test]
fn the_pipelines_the_flags_make_load_with_their_stages() {
    let load = |text: &str| {
        crate::pipeline::load_str(std::path::Path::new("flags.toml"), text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
    };
    let recv = |args: &[&str]| {
        let SpeadCommand::Recv(r) = parse(args).command else {
            panic!("not recv")
        };
        pipeline_text(&r).unwrap_or_else(|_| panic!("bad flags {args:?}"))
    };
    // Heaps: one receiver, printing and plotting.
    let text = recv(&[
        "x",
        "spead",
        "recv",
        "127.0.0.1:0",
        "--verbose",
        "--plot",
        "a \"b\"/p",
    ]);
    let plan = load(&text);
    let names: Vec<&str> = plan
        .pipeline
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["recv"]);
    assert!(text.contains("mode = \"heaps\"") && text.contains("print = true"));
    // Chunks written to a directory whose name needs escaping.
    let text = recv(&[
        "x",
        "spead",
        "recv",
        "127.0.0.1:0",
        "--chunks",
        "--sink",
        "write",
        "--out",
        "c\\\"d",
    ]);
    let plan = load(&text);
    let names: Vec<&str> = plan
        .pipeline
        .stages
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["recv", "sink"]);
    // The sender, generic and simulated, paced in packets/s.
    for extra in [&[][..], &["--fsim"][..]] {
        let mut args = vec!["x", "spead", "send", "127.0.0.1:9", "--rate", "10 kpps"];
        args.extend_from_slice(extra);
        let SpeadCommand::Send(s) = parse(&args).command else {
            panic!("not send")
        };
        let text = super::send::pipeline_text(&s).unwrap_or_else(|_| panic!("bad flags"));
        let plan = load(&text);
        assert_eq!(plan.pipeline.stages.len(), 1, "{text}");
    }
}
