//! `--metrics`: bad addresses, scrapes while a run stops, and Debian's real
//! Prometheus scraping a running pipeline once a second.

mod util;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use util::bin;

/// One HTTP GET with every wait bounded; `Err` for refused, reset or closed.
fn get(addr: SocketAddr, path: &str, timeout: Duration) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Whether an HTTP answer's body is shorter than its `Content-Length` says.
fn truncated(r: &str) -> bool {
    let Some((head, body)) = r.split_once("\r\n\r\n") else {
        return true;
    };
    let len = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse::<usize>().ok())?
    });
    len.is_some_and(|n| body.len() < n)
}

/// Kills and reaps a child process when dropped (also when a test fails).
struct Reap(Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn bad_metrics_addresses_exit_2() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    let udp = util::free_udp_port();
    let recv_bind = format!("127.0.0.1:{udp}");
    for addr in [
        "nonsense",
        "127.0.0.1",
        "localhost:9464",
        "8.8.8.8:80",
        &busy,
    ] {
        for args in [
            vec!["run", "pipelines/trial-mem.toml", "--duration", "1s"],
            vec![
                "trial",
                "pipelines/trial-mem.toml",
                "--rate",
                "1 kpps",
                "--duration",
                "1s",
            ],
            vec!["search", "--sim", "ndr=1e6,pdr=1e6,plr=0.005"],
            vec!["spead", "recv", &recv_bind, "--duration", "1s"],
        ] {
            let out = bin()
                .args(&args)
                .args(["--metrics", addr])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} --metrics {addr}: {err}"
            );
            assert!(err.contains(addr) || err.contains("--metrics"), "{err}");
        }
    }
}

#[test]
fn scrapes_while_running_and_stopping_never_hang() {
    let port = util::free_tcp_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("run.json");
    let child = bin()
        .args(["run", "pipelines/trial-mem.toml", "--duration", "2s", "-q"])
        .args(["--metrics", &addr.to_string(), "--json"])
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Reap(child);
    let timeout = Duration::from_secs(3);
    let start = Instant::now();
    let (mut ok, mut refused, mut last_tx) = (0, 0, 0.0);
    let mut exited_at = None;
    // Scrape as fast as possible until a second after the process has gone.
    while exited_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_secs(1)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the run did not end"
        );
        let t = Instant::now();
        match get(addr, "/metrics", timeout) {
            // Cut short by the process's exit mid-answer (fewer body bytes
            // than its Content-Length): a closed connection too.
            Ok(r) if r.starts_with("HTTP/1.1 200") && truncated(&r) => refused += 1,
            Ok(r) if r.starts_with("HTTP/1.1 200") => {
                assert!(
                    r.trim_end().ends_with("# EOF") || r.contains("# TYPE"),
                    "{r}"
                );
                let tx = r
                    .lines()
                    .find(|l| l.starts_with("linerate_port_tx_packets_total{"))
                    .and_then(|l| l.rsplit(' ').next())
                    .and_then(|v| v.parse::<f64>().ok());
                if let Some(tx) = tx {
                    assert!(tx >= last_tx, "a counter went down: {tx} < {last_tx}");
                    last_tx = tx;
                }
                ok += 1;
            }
            // Accepted, then closed unanswered as the process exits: the
            // closed connection the contract allows.
            Ok(r) if r.is_empty() => refused += 1,
            Ok(r) => panic!("unexpected answer: {r}"),
            Err(e) => {
                // Refused before start and after the end; never a timeout.
                assert!(
                    !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "a scrape hung: {e}"
                );
                refused += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert!(t.elapsed() < timeout, "a scrape took {:?}", t.elapsed());
        if exited_at.is_none() && child.0.try_wait().unwrap().is_some() {
            exited_at = Some(Instant::now());
        }
    }
    assert_eq!(child.0.wait().unwrap().code(), Some(0));
    assert!(ok >= 5, "only {ok} scrapes answered ({refused} refused)");
    assert!(refused >= 1, "the endpoint outlived the process");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let final_tx = report["ports"]["dut"]["tx_packets"].as_f64().unwrap();
    assert!(
        last_tx > 0.0 && last_tx <= final_tx,
        "{last_tx} vs {final_tx}"
    );
}

/// Prometheus's HTTP API: the value of an instant query's single result.
fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let enc: String = q
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let r = get(
        prom,
        &format!("/api/v1/query?query={enc}"),
        Duration::from_secs(5),
    )
    .ok()?;
    let body = r.split("\r\n\r\n").nth(1)?;
    let v: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

#[test]
fn prometheus_scrapes_a_running_pipeline() {
    let Ok(prometheus) = which("prometheus") else {
        assert!(
            std::env::var_os("LINERATE_REQUIRE_PEERS").is_none(),
            "prometheus is not installed (scripts/test installs Debian's `prometheus`)"
        );
        eprintln!("skipped: prometheus is not installed");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let metrics: SocketAddr = format!("127.0.0.1:{}", util::free_tcp_port())
        .parse()
        .unwrap();
    let web: SocketAddr = format!("127.0.0.1:{}", util::free_tcp_port())
        .parse()
        .unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\nscrape_configs:\n  - job_name: linerate\n    static_configs:\n      - targets: ['{metrics}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let prom = Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let _prom = Reap(prom);
    let t = Instant::now();
    while !get(web, "/-/ready", Duration::from_secs(2)).is_ok_and(|r| r.starts_with("HTTP/1.1 200"))
    {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Prometheus's first sample lands several seconds after it starts, so
    // run long enough for a few samples while running, and hold the final
    // counters for a few more scrapes.
    let json = dir.path().join("run.json");
    let out = bin()
        .args([
            "run",
            "pipelines/trial-mem.toml",
            "--duration",
            "12s",
            "-q",
            "--metrics-hold",
            "4s",
        ])
        .args(["--metrics", &metrics.to_string(), "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sent = report["stages"]["gen"]["packets_out"].as_f64().unwrap();
    let rx = report["ports"]["dut"]["rx_packets"].as_f64().unwrap();
    assert!(sent > 0.0 && rx > 0.0);
    let series = r#"linerate_stage_out_packets_total{job="linerate",stage="gen"}"#;
    let rx_series = r#"linerate_port_rx_packets_total{job="linerate",port="dut"}"#;
    // Prometheus may need a moment to make the last sample queryable.
    let t = Instant::now();
    loop {
        let last = query(web, series);
        let last_rx = query(web, rx_series);
        if last == Some(sent) && last_rx == Some(rx) {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "prometheus has {last:?} / {last_rx:?}, the report {sent} / {rx}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // It rose while running: several distinct samples, the first below the
    // final count, and the rise over the window is what the report says.
    let samples = query(web, &format!("count_over_time({series}[5m])")).unwrap();
    let first = query(web, &format!("min_over_time({series}[5m])")).unwrap();
    let rose = query(
        web,
        &format!("max_over_time({series}[5m]) - min_over_time({series}[5m])"),
    )
    .unwrap();
    assert!(samples >= 4.0, "only {samples} samples");
    assert!(
        first < sent,
        "no sample while running: first {first}, final {sent}"
    );
    assert_eq!(rose, sent - first);
    let up = query(web, r#"up{job="linerate"}"#);
    assert!(up.is_some());
}

fn which(name: &str) -> Result<std::path::PathBuf, ()> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .ok_or(())
}

/// The value of the first sample line of `series` (a name with its first
/// labels) in an exposition text.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The SPEAD stages of a running pipeline serve their heap and chunk counters
/// live: scraped while telescope-ingest runs (the simulator paced so the run
/// takes a few seconds), they rise, and the last scrape (held after the end)
/// equals the JSON report. The chunk sink's `plot` key draws its receive.
#[test]
fn spead_stage_counters_rise_live_and_end_at_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("sink");
    let text = std::fs::read_to_string("pipelines/telescope-ingest.toml")
        .unwrap()
        .replace("# rate = \"1 Gbps\"", "rate = \"250 Mbps\"");
    assert!(text.contains("rate = \"250 Mbps\""));
    // [stage.check] is the last section: the key lands in it.
    let text = format!("{text}plot = \"{}\"\n", plot.display());
    let pipeline = dir.path().join("ingest.toml");
    std::fs::write(&pipeline, text).unwrap();
    let port = util::free_tcp_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let json = dir.path().join("run.json");
    let child = bin()
        .arg("run")
        .arg(&pipeline)
        .args(["-q", "--metrics-hold", "2s", "--metrics", &addr.to_string()])
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reap(child);
    let heaps = r#"linerate_spead_heaps_complete_total{pipeline="telescope-ingest",stage="recv",kind="spead_recv""#;
    let chunks = r#"linerate_chunk_sink_chunks_total{pipeline="telescope-ingest",stage="check",kind="chunk_sink""#;
    let present = r#"linerate_chunk_sink_present_total{pipeline="telescope-ingest",stage="check""#;
    let recv_chunks = r#"linerate_spead_chunks_total{pipeline="telescope-ingest",stage="recv""#;
    let fraction = r#"linerate_spead_fraction_present{pipeline="telescope-ingest",stage="recv""#;
    let start = Instant::now();
    let mut seen: Vec<(f64, f64)> = Vec::new();
    let mut last = String::new();
    while child.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the run did not end"
        );
        if let Ok(r) = get(addr, "/metrics", Duration::from_secs(3)) {
            if let (Some(h), Some(c)) = (sample(&r, heaps), sample(&r, chunks)) {
                if let Some(&(ph, pc)) = seen.last() {
                    assert!(
                        h >= ph && c >= pc,
                        "a counter went down: {h} {c} after {ph} {pc}"
                    );
                }
                seen.push((h, c));
                last = r;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut err = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(child.0.wait().unwrap().code(), Some(0), "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let recv = &v["stages"]["recv"]["detail"];
    let sink = &v["stages"]["check"]["detail"];
    let (final_heaps, final_chunks) = (
        recv["stream"]["heaps_complete"].as_f64().unwrap(),
        sink["chunks"].as_f64().unwrap(),
    );
    assert_eq!(final_heaps, 4096.0);
    assert_eq!(final_chunks, 32.0);
    // Rising while running: values strictly between zero and the end.
    let mid_heaps = seen
        .iter()
        .filter(|s| s.0 > 0.0 && s.0 < final_heaps)
        .count();
    let mid_chunks = seen
        .iter()
        .filter(|s| s.1 > 0.0 && s.1 < final_chunks)
        .count();
    assert!(
        mid_heaps >= 2 && mid_chunks >= 2,
        "no rise seen while running: {seen:?}"
    );
    // The last scrape, held after the end, is the report.
    assert_eq!(sample(&last, heaps), Some(final_heaps), "{last}");
    assert_eq!(sample(&last, chunks), Some(final_chunks), "{last}");
    assert_eq!(
        sample(&last, recv_chunks),
        recv["chunks"].as_f64(),
        "{last}"
    );
    assert_eq!(sample(&last, present), sink["present"].as_f64(), "{last}");
    assert_eq!(sample(&last, fraction), Some(1.0), "{last}");
    // The sink's plot: both files, every interval of the run.
    let p = &sink["plot"];
    assert!(p["intervals"].as_u64().unwrap() >= 4, "{p}");
    let svg = std::fs::read_to_string(plot.with_extension("svg")).unwrap();
    assert!(svg.contains("chunk_sink of `recv`") && svg.contains("Gb/s"));
    assert_eq!(
        &std::fs::read(plot.with_extension("png")).unwrap()[1..4],
        b"PNG"
    );
}

/// A pipeline search serves its pipeline's port counters, not only the
/// search's progress (the resume wrappers once dropped the measurer's probe).
#[test]
fn a_pipeline_search_serves_its_port_counters() {
    let dir = tempfile::tempdir().unwrap();
    let port = util::free_tcp_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = bin()
        .args(["search", "pipelines/ndr-mem.toml", "--quiet"])
        .args(["--max-rate", "400 kpps", "--min-rate", "100 kpps"])
        .args(["--initial-duration", "0.1", "--final-duration", "0.2"])
        .args(["--phases", "0", "--width", "0.2"])
        .args(["--metrics-hold", "5s", "--metrics", &addr.to_string()])
        .arg("--json")
        .arg(dir.path().join("s.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Reap(child);
    let start = Instant::now();
    let mut last = String::new();
    // Scrape until the search has ended and the held endpoint answers with
    // its final numbers (or the process is gone).
    while start.elapsed() < Duration::from_secs(60) {
        match get(addr, "/metrics", Duration::from_secs(3)) {
            Ok(r) if !truncated(&r) => last = r,
            _ => {}
        }
        if child.0.try_wait().unwrap().is_some() {
            break;
        }
        if std::fs::metadata(dir.path().join("s.json")).is_ok() && !last.is_empty() {
            // The report is written: one more scrape of the held values.
            std::thread::sleep(Duration::from_millis(200));
            if let Ok(r) = get(addr, "/metrics", Duration::from_secs(3)) {
                if !truncated(&r) {
                    last = r;
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let tx = sample(
        &last,
        r#"linerate_port_tx_packets_total{pipeline="ndr-mem",port="dut""#,
    );
    assert!(
        tx.is_some_and(|v| v > 0.0),
        "no port counter served:\n{last}"
    );
}
