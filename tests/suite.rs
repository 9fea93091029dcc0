//! `linerate suite`: on a simulated device whose capacity depends on the
//! frame size, each size's NDR and PDR bounds bracket the model's rates; on a
//! mem wire with a capacity in Gb/s, no size passes more than the wire's
//! packet rate at that size and each latency trial keeps the trial's
//! per-stream latency; bad input exits 2 before any trial; a signal keeps the
//! finished sizes and `--resume` continues them; the CSV parses and the HTML
//! renders in a browser.

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use util::bin;

const MODEL: &str = "ndr=12e6,pdr=12.2e6,plr=0.005,bps=5e9";

fn read_json(p: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn suite(args: &[&str]) -> std::process::Output {
    bin().arg("suite").args(args).output().unwrap()
}

/// The model's rate at `frame` bytes: min(pps, bps / (8 (S + 20))).
fn truth(pps: f64, frame: f64) -> f64 {
    pps.min(5e9 / (8.0 * (frame + 20.0)))
}

#[test]
fn sim_ndr_and_pdr_follow_the_bit_rate_limit() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let csv = dir.path().join("s.csv");
    let out = suite(&[
        "-q",
        "--sim",
        MODEL,
        "--line-rate",
        "10 Gbps",
        "--frames",
        "64,128,512,1518,9000,imix",
        "--final-duration",
        "10",
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_json(&json);
    assert_eq!(r["suite"], 1);
    assert_eq!(r["interrupted"], false);
    assert!(r["command"].as_array().unwrap().len() > 3);
    assert!(r["machine"]["cores"].as_u64().unwrap() >= 1);
    let sizes = r["sizes"].as_array().unwrap();
    let frames: Vec<&str> = sizes.iter().map(|s| s["frame"].as_str().unwrap()).collect();
    assert_eq!(frames, ["64", "128", "512", "1518", "9000", "imix"]);
    // The default IMIX, 7:4:1 of 64, 570 and 1518 bytes.
    let imix = (7.0 * 64.0 + 4.0 * 570.0 + 1518.0) / 12.0;
    for s in sizes {
        let frame = match s["frame"].as_str().unwrap() {
            "imix" => imix,
            f => f.parse::<f64>().unwrap(),
        };
        let goals = s["throughput"]["outcome"]["goals"].as_array().unwrap();
        for (g, pps) in goals.iter().zip([12e6, 12.2e6]) {
            let want = truth(12e6, frame) * pps / 12e6;
            let lo = g["lower_pps"].as_f64().unwrap();
            let hi = g["upper_pps"].as_f64().unwrap();
            assert!(lo <= want && want < hi, "{frame}: {lo} {want} {hi}");
            assert!(g["width"].as_f64().unwrap() <= 0.005 * (1.0 + 1e-9));
        }
        // The sim has no latency: said, not faked.
        assert!(s["latency"].as_array().unwrap().is_empty());
        assert!(s["skipped"]["latency"]
            .as_str()
            .unwrap()
            .contains("no latency"));
        // Loss at the maximum rate (the line rate), none two steps in a row at the end.
        let curve = s["loss_curve"].as_array().unwrap();
        assert_eq!(curve[0]["percent"], 100.0);
        assert!(curve[0]["loss_ratio"].as_f64().unwrap() > 0.0);
        let n = curve.len();
        assert!(n >= 2 && curve[n - 2..].iter().all(|c| c["loss_ratio"] == 0.0));
        // No buffer: not even one frame over the capacity passes; a mix of
        // sizes has no back-to-back figure (RFC 9004), said so.
        if s["frame"] == "imix" {
            assert!(s["back_to_back"].is_null());
            assert!(s["skipped"]["b2b"].as_str().unwrap().contains("RFC 9004"));
        } else {
            assert_eq!(s["back_to_back"]["average_frames"], 0.0);
        }
    }

    // The CSV: a header and a row per size, numbers where the table has them.
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 7);
    assert_eq!(rows[0][0], "frame");
    for row in &rows[1..] {
        assert_eq!(row.len(), rows[0].len());
    }
    let col = |name: &str| rows[0].iter().position(|c| *c == name).unwrap();
    for (row, s) in rows[1..].iter().zip(sizes) {
        let ndr: f64 = row[col("ndr_mpps")].parse().unwrap();
        let lo = s["throughput"]["outcome"]["goals"][0]["lower_pps"]
            .as_f64()
            .unwrap();
        assert!((ndr - lo / 1e6).abs() < 1e-6);
        let pct: f64 = row[col("ndr_pct_line")].parse().unwrap();
        assert!((40.0..=50.0).contains(&pct) || row[0] == "64", "{row:?}");
    }
}

#[test]
fn sim_buffer_gives_back_to_back_frames() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let out = suite(&[
        "-q",
        "--sim",
        "ndr=1e6,pdr=1.02e6,plr=0.005,buffer=5000,bps=5e9",
        "--line-rate",
        "10 Gbps",
        "--frames",
        "64,1518",
        "--only",
        "throughput,b2b",
        "--b2b-trials",
        "4",
        "--quick",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_json(&json);
    for s in r["sizes"].as_array().unwrap() {
        let b = &s["back_to_back"];
        let rate = b["rate_pps"].as_f64().unwrap();
        // The model loses ceil(r N) - buffer of a burst of N at rate R, with
        // r = 1 - pdr (1 - plr) / R: the longest burst is buffer / r.
        let frame: f64 = s["frame"].as_str().unwrap().parse().unwrap();
        let pdr = 1.02e6f64.min(1.02 * 5e9 / (8.0 * (frame + 20.0)));
        let r = 1.0 - pdr * 0.995 / rate;
        let want = 5000.0 / r;
        assert_eq!(
            b["trials"].as_array().unwrap().len(),
            3,
            "--quick: at most 3"
        );
        let avg = b["average_frames"].as_f64().unwrap();
        assert!(avg <= want && avg >= want * 0.998 - 1.0, "{avg} {want}");
        assert_eq!(b["implied_buffer_s"].as_f64().unwrap(), avg / rate);
        assert!(s["loss_curve"].as_array().unwrap().is_empty());
    }
}

#[test]
fn bad_input_exits_2_before_any_trial() {
    let dir = tempfile::tempdir().unwrap();
    let v6 = util::write(
        dir.path(),
        "v6.toml",
        "[pipeline]\nlcores = \"0-1\"\n[port.dut]\nkind = \"mem\"\n\
         [stage.gen]\nkind = \"generator\"\nlcore = 1\ntx = \"dut\"\nip = \"v6\"\n\
         [stage.ana]\nkind = \"analyzer\"\nlcore = 0\nrx = \"dut\"\n",
    );
    let small_pool = util::write(
        dir.path(),
        "pool.toml",
        "[pipeline]\nlcores = \"0-1\"\n[pool]\nsize = \"2 KiB\"\n[port.dut]\nkind = \"mem\"\n\
         [stage.gen]\nkind = \"generator\"\nlcore = 1\ntx = \"dut\"\n\
         [stage.ana]\nkind = \"analyzer\"\nlcore = 0\nrx = \"dut\"\n",
    );
    let v6s = v6.to_str().unwrap();
    let pools = small_pool.to_str().unwrap();
    for (args, says) in [
        (&["--sim", MODEL, "--frames", "64,jumbo"][..], "jumbo"),
        (&["--sim", MODEL, "--frames", ""], "empty"),
        (&["--sim", MODEL, "--frames", "64,,128"], "empty"),
        (&["--sim", MODEL, "--frames", "63"], "63"),
        (&["--sim", MODEL, "--frames", "64,64"], "twice"),
        (&["--sim", MODEL, "--only", "speed"], "speed"),
        (&["--sim", MODEL, "--latency-loads", "150%ndr"], "150"),
        (&["--sim", MODEL, "--b2b-trials", "0"], "b2b"),
        (&["--sim", "ndr=1e6,bps=0"], "bps"),
        (
            &["--sim", MODEL, "--measure-cmd", "x {rate} {duration}"],
            "PIPELINE",
        ),
        (&[v6s, "--frames", "64"], "64-byte"),
        (&[pools, "--frames", "9000"], "9000"),
    ] {
        let t = Instant::now();
        let out = suite(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: no trial, no table");
        assert!(t.elapsed() < Duration::from_secs(20));
    }
}

/// A child process killed when dropped.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn signal_keeps_finished_sizes_and_resume_continues() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let args = [
        "suite",
        "--sim",
        MODEL,
        "--line-rate",
        "10 Gbps",
        "--frames",
        "64,128,256",
        "--b2b-trials",
        "2",
        "--sim-time-scale",
        "0.003",
        "--json",
        json.to_str().unwrap(),
    ];
    let mut g = Guard(
        bin()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stderr = g.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The second size's search has run a trial: the first size is finished.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("no trial of the second size within 120 s");
        if line.starts_with("128 B throughput: initial") {
            break;
        }
    }
    let ok = Command::new("kill")
        .args(["-INT", &g.0.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let start = Instant::now();
    let code = loop {
        if let Some(s) = g.0.try_wait().unwrap() {
            break s.code();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no exit after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(code, Some(130));
    let r = read_json(&json);
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["signal"], "SIGINT");
    let first = r["sizes"][0].clone();
    assert_eq!(
        first["done"],
        serde_json::json!(["throughput", "latency", "b2b", "loss"])
    );
    let second = &r["sizes"][1];
    assert_eq!(second["throughput"]["interrupted"], true);
    let kept = second["throughput"]["trials"].as_array().unwrap().len();
    assert!(kept >= 1);
    assert!(r["sizes"][2]["throughput"].is_null());

    // Resumed: the first size as it was, the second continued from its trials.
    let json2 = dir.path().join("s2.json");
    let mut again: Vec<&str> = args[..args.len() - 2].to_vec();
    again.retain(|a| *a != "--sim-time-scale" && *a != "0.003");
    let out = bin()
        .args(&again)
        .args(["-q", "--resume", json.to_str().unwrap()])
        .args(["--json", json2.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r2 = read_json(&json2);
    assert_eq!(r2["interrupted"], false);
    assert_eq!(r2["sizes"][0], first);
    let trials = r2["sizes"][1]["throughput"]["trials"].as_array().unwrap();
    let resumed = trials.iter().filter(|t| t["resumed"] == true).count();
    assert_eq!(
        resumed, kept,
        "the earlier trials are replayed, not measured"
    );
    for s in r2["sizes"].as_array().unwrap() {
        assert_eq!(s["done"].as_array().unwrap().len(), 4);
    }

    // Another device's report is refused.
    let out = bin()
        .args([
            "suite",
            "--sim",
            "ndr=11e6,bps=5e9",
            "--frames",
            "64,128,256",
        ])
        .args(["--resume", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another device"));
    // So is one whose searches had other parameters.
    let out = bin()
        .args(&again)
        .args([
            "-q",
            "--final-duration",
            "20",
            "--resume",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("other parameters"));
    // So is a search report, or a suite of another pipeline.
    let pipe = util::write(
        dir.path(),
        "p.toml",
        "[pipeline]\nlcores = \"0-1\"\n[port.dut]\nkind = \"mem\"\n\
         [stage.gen]\nkind = \"generator\"\nlcore = 1\ntx = \"dut\"\n\
         [stage.ana]\nkind = \"analyzer\"\nlcore = 0\nrx = \"dut\"\n",
    );
    let out = bin()
        .args(["suite", pipe.to_str().unwrap(), "--frames", "64"])
        .args(["--resume", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A mem wire serving 0.5 Gb/s: the frame size is the generator's, so no
/// size passes more than the wire's packet rate at that size (plus what its
/// queue holds), and each latency trial has the trial's per-stream latency.
#[test]
fn mem_wire_capacity_in_gbps_bounds_each_size() {
    let dir = tempfile::tempdir().unwrap();
    let pipe = util::write(
        dir.path(),
        "mem.toml",
        "[pipeline]\nlcores = \"0-1\"\n\
         [port.dut]\nkind = \"mem\"\ncapacity = \"0.5 Gbps\"\nqueue = 64\nline_rate = \"1 Gbps\"\nring = 65536\n\
         [stage.gen]\nkind = \"generator\"\nlcore = 1\ntx = \"dut\"\nmax_lag = \"5ms\"\n\
         [stage.ana]\nkind = \"analyzer\"\nlcore = 0\nrx = \"dut\"\nlatency = \"packet\"\n",
    );
    let json = dir.path().join("m.json");
    let out = suite(&[
        pipe.to_str().unwrap(),
        "-q",
        "--quick",
        "--frames",
        "512,1518",
        "--only",
        "throughput,latency",
        "--latency-loads",
        "idle,50%pdr",
        "--json",
        json.to_str().unwrap(),
    ]);
    // A search may fail on a loaded machine (exit 1); the bounds it found hold.
    assert!(
        out.status.code() != Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_json(&json);
    assert_eq!(r["line_rate_bps"], 1e9);
    assert_eq!(r["machine"]["ports"][0]["kind"], "mem");
    for s in r["sizes"].as_array().unwrap() {
        let frame: f64 = s["frame"].as_str().unwrap().parse().unwrap();
        let cap = 0.5e9 / (8.0 * (frame + 20.0));
        assert_eq!(s["max_rate_pps"], 2.0 * cap);
        let t = &s["throughput"];
        let d = t["config"]["final_duration"].as_f64().unwrap();
        for g in t["outcome"]["goals"].as_array().unwrap() {
            if let Some(lo) = g["lower_pps"].as_f64() {
                // The queue's 64 packets over a trial, and the PDR's loss.
                assert!(lo <= (cap + 64.0 / d) * 1.006, "{frame}: {lo} > {cap}");
            }
        }
        for p in s["latency"].as_array().unwrap() {
            let streams = p["streams"].as_array().unwrap();
            assert_eq!(streams.len(), 1);
            assert!(streams[0]["latency_ns"]["samples"].as_u64().unwrap() > 0);
            assert!(p["latency_ns"]["p50"].as_u64().unwrap() > 0);
        }
    }
}

#[test]
fn html_report_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("suite.html");
    let out = suite(&[
        "-q",
        "--sim",
        "ndr=12e6,pdr=12.2e6,bps=8e9,buffer=20000",
        "--line-rate",
        "10 Gbps",
        "--quick",
        "--b2b-trials",
        "2",
        "--html",
        html.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.starts_with("<!DOCTYPE html>"));
    // The rate plots (Mpps, Gb/s), the loss curve, back-to-back, and a search per size.
    assert_eq!(text.matches("<svg").count(), 4 + 8, "{}", text.len());
    for external in ["src=\"http", "href=\"http", "<script", "<link"] {
        assert!(!text.contains(external), "{external}");
    }
    let Some(pixels) = util::screenshot(&html, dir.path()) else {
        return;
    };
    // The NDR line's blue is on the page: the first plot rendered.
    let near = |p: &[u8; 3], c: [u8; 3]| (0..3).all(|i| (p[i] as i32 - c[i] as i32).abs() <= 12);
    assert!(
        pixels.iter().any(|p| near(p, [31, 119, 180])),
        "no NDR line in the screenshot"
    );
}

/// One HTTP GET of `/metrics`; empty when nothing answers.
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn metrics_serve_the_suites_trials() {
    let addr = format!("127.0.0.1:{}", util::free_tcp_port());
    let mut g = Guard(
        bin()
            .args(["suite", "-q", "--sim", MODEL, "--line-rate", "10 Gbps"])
            .args(["--frames", "64,128", "--sim-time-scale", "0.002"])
            .args([
                "--b2b-trials",
                "1",
                "--metrics",
                &addr,
                "--metrics-hold",
                "5s",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let start = Instant::now();
    let trials = loop {
        let text = scrape(&addr);
        let n = text
            .lines()
            .find(|l| l.starts_with("linerate_trials_total") || l.starts_with("linerate_trials "))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok());
        if let Some(n) = n.filter(|&n| n >= 5.0) {
            break n;
        }
        assert!(
            g.0.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(60),
            "no trials served: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(trials >= 5.0);
}
