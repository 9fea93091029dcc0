//! Interrupted runs keep their results: `search` and `trial` stopped by SIGINT
//! or SIGTERM write a report of everything finished, marked interrupted, and
//! exit 130 or 143; a second signal exits at once; `search --resume` continues
//! such a report to bounds around the simulated device's true rates with fewer
//! new trials than a fresh search, and refuses a report of another
//! configuration. `run` and `spead recv` stop on SIGTERM as on Ctrl-C;
//! `spead recv` runs its stages on the runtime, serves their counters with
//! `--metrics` and writes the run's report when interrupted.
//! Every wait has a timeout; a child still running at the end is killed.

mod util;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use linerate::search::{Report, SimModel};

const MODEL: &str = "ndr=3e6,pdr=3.1e6,plr=0.005";

/// A child process killed when dropped (a failed assertion leaves none behind).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} failed");
}

/// Waits for the child's exit status, at most `limit`.
fn wait(g: &mut Guard, limit: Duration) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(s) = g.0.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        assert!(
            start.elapsed() < limit,
            "the process did not end within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines of a child's pipe, read on a thread, delivered through a channel.
fn lines(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits until `n` lines satisfying `pred` have come, at most `limit`.
fn await_lines(
    rx: &mpsc::Receiver<String>,
    n: usize,
    pred: impl Fn(&str) -> bool,
    limit: Duration,
) {
    let deadline = Instant::now() + limit;
    let mut seen = 0;
    while seen < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("only {seen} of {n} expected lines within {limit:?}"));
        if pred(&line) {
            seen += 1;
        }
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> T {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn search(args: &[&str]) -> Command {
    let mut c = util::bin();
    c.args(["search", "--sim", MODEL, "--final-duration", "10"])
        .args(args);
    c
}

/// A fresh search's trial count.
fn fresh_trials() -> usize {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fresh.json");
    let out = search(&["-q", "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    read_json::<Report>(&json).trials.len()
}

/// Runs a search slowed to real time, interrupts it with `sig` after a few
/// trials, and returns the report it wrote.
fn interrupted_search(sig: &str, code: i32, dir: &std::path::Path) -> (std::path::PathBuf, Report) {
    let json = dir.join(format!("{sig}.json"));
    let mut child = search(&["--sim-time-scale", "0.05", "--json", json.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = lines(child.stderr.take().unwrap());
    let mut g = Guard(child);
    // Not a terminal: one line per finished trial.
    await_lines(
        &stderr,
        5,
        |l| l.contains("Mpps") && l.contains("loss"),
        Duration::from_secs(30),
    );
    signal(&g.0, sig);
    assert_eq!(wait(&mut g, Duration::from_secs(20)), code, "{sig}");
    let report: Report = read_json(&json);
    assert!(report.interrupted, "{sig}");
    let name = if sig == "INT" { "SIGINT" } else { "SIGTERM" };
    assert_eq!(report.signal.as_deref(), Some(name));
    assert!(report.trials.len() >= 5, "{}", report.trials.len());
    assert_eq!(report.bounds_history.len(), report.trials.len());
    assert_eq!(report.outcome.goals.len(), 2);
    (json, report)
}

#[test]
fn a_search_interrupted_keeps_its_trials_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = fresh_trials();
    for (sig, code) in [("INT", 130), ("TERM", 143)] {
        let (json, earlier) = interrupted_search(sig, code, dir.path());
        assert!(
            earlier.trials.len() < fresh,
            "the search ended before the signal"
        );
        let resumed_json = dir.path().join(format!("{sig}-resumed.json"));
        let out = search(&[
            "-q",
            "--resume",
            json.to_str().unwrap(),
            "--json",
            resumed_json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let summary = String::from_utf8_lossy(&out.stdout);
        assert!(summary.contains("resumed from"), "{summary}");
        let r: Report = read_json(&resumed_json);
        assert!(!r.interrupted);
        let old = r.trials.iter().filter(|t| t.resumed).count();
        let new = r.trials.len() - old;
        assert_eq!(old, earlier.trials.len(), "every earlier trial is reused");
        assert!(r.trials[..old].iter().all(|t| t.resumed));
        assert!(
            new < fresh,
            "{new} new trials, a fresh search takes {fresh}"
        );
        let model: SimModel = MODEL.parse().unwrap();
        for g in &r.outcome.goals {
            let truth = model.true_rate(g.goal.loss_ratio, 10.0);
            let (lo, hi) = (g.lower_pps.unwrap(), g.upper_pps.unwrap());
            assert!(
                lo <= truth && truth < hi,
                "{}: [{lo}, {hi}] misses {truth}",
                g.goal.name
            );
        }
    }
}

#[test]
fn resume_refuses_a_report_of_another_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = search(&["-q", "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let path = json.to_str().unwrap();
    let not_a_report = util::write(dir.path(), "x.json", "{\"trials\": 3}");
    for (args, why) in [
        (vec!["--plr", "0.01"], "goals"),
        (vec!["--initial-duration", "2"], "parameters"),
        (vec!["--binary"], "binary"),
    ] {
        let mut a = vec!["-q", "--resume", path];
        a.extend(args);
        let out = search(&a).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("another configuration") && err.contains(why),
            "{err}"
        );
    }
    // Another device.
    let out = util::bin()
        .args(["search", "-q", "--sim", "ndr=4e6,pdr=4.1e6,plr=0.005"])
        .args(["--final-duration", "10", "--resume", path])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("it measured sim"), "{err}");
    let out = search(&["-q", "--resume", not_a_report.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a search report"));
}

#[test]
fn a_second_signal_exits_at_once() {
    // The first SIGTERM waits for the measuring command (5 s) to finish its
    // trial; the second does not wait.
    let child = util::bin()
        .args(["search", "-q", "--final-duration", "1", "--measure-cmd"])
        .arg("sleep 5; echo '{\"offered\": 1, \"received\": 1}' # {rate} {duration}")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut g = Guard(child);
    signal(&g.0, "TERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        g.0.try_wait().unwrap().is_none(),
        "the first signal waits for the trial"
    );
    let start = Instant::now();
    signal(&g.0, "TERM");
    assert_eq!(wait(&mut g, Duration::from_secs(10)), 143);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

const TRIAL_PIPELINE: &str = r#"
[pipeline]
lcores = "0-1"
pin = false

[port.dut]
kind = "mem"
capacity = "2 Mpps"
ring = 65536

[stage.gen]
kind = "generator"
lcore = 1
tx = "dut"
frame = 64

[stage.ana]
kind = "analyzer"
lcore = 0
rx = "dut"
"#;

#[test]
fn a_trial_interrupted_keeps_the_finished_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "trial.toml", TRIAL_PIPELINE);
    for (sig, code, name) in [("INT", 130, "SIGINT"), ("TERM", 143, "SIGTERM")] {
        let json = dir.path().join(format!("{sig}.json"));
        let mut child = util::bin()
            .args([
                "trial",
                "--rate",
                "50 kpps",
                "--duration",
                "300ms",
                "--repeat",
                "100",
            ])
            .arg("--json")
            .arg(&json)
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        let mut g = Guard(child);
        await_lines(
            &stdout,
            2,
            |l| l.starts_with("trial "),
            Duration::from_secs(60),
        );
        signal(&g.0, sig);
        assert_eq!(wait(&mut g, Duration::from_secs(20)), code, "{sig}");
        let v: serde_json::Value = read_json(&json);
        assert_eq!(v["interrupted"], true);
        assert_eq!(v["signal"], name);
        let trials = v["trials"].as_array().unwrap();
        assert!((2..100).contains(&trials.len()), "{}", trials.len());
        for t in trials {
            // Nothing lost on the wire (a generator that lost its core on a
            // busy machine leaves packets unsent: not our concern here).
            assert_eq!(t["lost"], t["unsent"], "{t}");
            assert!(t["received"].as_u64().unwrap() > 0, "{t}");
        }
    }
}

#[test]
fn run_stops_on_sigterm_as_on_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(
        dir.path(),
        "run.toml",
        r#"
[pipeline]
lcores = "0"
pin = false
[port.w]
kind = "mem"
[stage.src]
kind = "source"
tx = "w"
rate = "10 kpps"
[stage.rx]
kind = "sink"
rx = "w"
"#,
    );
    let json = dir.path().join("run.json");
    let child = util::bin()
        .args(["run", "--quiet", "--json"])
        .arg(&json)
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut g = Guard(child);
    std::thread::sleep(Duration::from_millis(700));
    signal(&g.0, "TERM");
    assert_eq!(wait(&mut g, Duration::from_secs(20)), 0);
    let v: serde_json::Value = read_json(&json);
    assert_eq!(v["stopped_by"], "interrupt");
    assert!(v["stages"]["rx"]["packets_in"].as_u64().unwrap() > 0);
}

#[test]
fn spead_recv_stops_on_sigterm_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("recv.json");
    let port = util::free_udp_port();
    let child = util::bin()
        .args(["spead", "recv", &format!("127.0.0.1:{port}"), "--json"])
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut g = Guard(child);
    std::thread::sleep(Duration::from_millis(700));
    signal(&g.0, "TERM");
    assert_eq!(wait(&mut g, Duration::from_secs(20)), 0);
    let v: serde_json::Value = read_json(&json);
    assert!(v.is_object(), "{v}");
}

/// A metrics scrape's body (empty when the endpoint does not answer yet).
fn scrape(addr: &str) -> String {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// The value of the first sample of `metric` whose labels contain `labels`.
fn sample(text: &str, metric: &str, labels: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(&format!("{metric}{{")) && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn spead_recv_runs_its_stages_on_the_runtime_and_ctrl_c_writes_their_report() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("recv.json");
    let bind = format!("127.0.0.1:{}", util::free_udp_port());
    let metrics = format!("127.0.0.1:{}", util::free_tcp_port());
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
    let child = util::bin()
        .args(["spead", "recv", &bind, "--chunks", "--sink", "check"])
        .args(geo)
        .args(["--heaps-per-fengine-per-chunk", "2", "--metrics", &metrics])
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut g = Guard(child);
    // Listening once its metrics answer (the pipeline is built first).
    let start = Instant::now();
    while !scrape(&metrics).contains("stage=\"recv\"") {
        assert!(start.elapsed() < Duration::from_secs(20), "no metrics");
        std::thread::sleep(Duration::from_millis(50));
    }
    // 8 timestamps of 2 antennas, no end-of-stream heap: the receive runs on.
    let sent = util::bin()
        .args(["spead", "send", &bind, "--fsim", "--flavour", "64-48"])
        .args(["--heaps", "8", "--rate", "50 Mbps", "--no-stop"])
        .args(geo)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(sent.success());
    // The stage's own counter, served while it runs.
    let heaps = "linerate_spead_heaps_complete_total";
    let labels = "stage=\"recv\",kind=\"spead_recv\"";
    while sample(&scrape(&metrics), heaps, labels) != Some(16.0) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            scrape(&metrics)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(&g.0, "INT");
    assert_eq!(wait(&mut g, Duration::from_secs(20)), 0);
    let v: serde_json::Value = read_json(&json);
    // The run's report: stopped by the interrupt, the stages' details.
    assert_eq!(v["pipeline"], "spead-recv");
    assert_eq!(v["stopped_by"], "interrupt");
    let recv = &v["stages"]["recv"];
    assert_eq!(recv["kind"], "spead_recv");
    assert_eq!(recv["detail"]["heaps_complete"], 16);
    assert_eq!(recv["detail"]["ended_by"], "drain");
    let sink = &v["stages"]["sink"];
    assert_eq!(sink["kind"], "chunk_sink");
    assert_eq!(sink["detail"]["check"]["heaps_checked"], 16);
    // And the command's own fields, taken from them.
    assert_eq!(v["mode"], "chunks");
    assert_eq!(v["chunks"], recv["detail"]["stream"]);
    assert_eq!(v["check"]["wrong_bytes"], 0);
}
