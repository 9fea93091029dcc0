//! The command line as a user meets it: JSON report keys, Ctrl-C, --dot.

mod util;

use std::time::Duration;

const PIPE: &str = r#"
[pipeline]
name = "cli-test"
lcores = "0"
pin = false
[port.wire]
kind = "mem"
capacity = "100 kpps"
[stage.gen]
kind = "source"
tx = "wire"
rate = "50 kpps"
[stage.rx]
kind = "sink"
rx = "wire"
"#;

#[test]
fn json_report_has_the_contract_keys() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "p.toml", PIPE);
    let json = dir.path().join("r.json");
    let out = util::bin()
        .args(["run", "--duration", "300ms", "--json"])
        .arg(&json)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("pipeline `cli-test`") && stdout.contains("stopped by duration"),
        "{stdout}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["pipeline"], "cli-test");
    assert!(v["duration_s"].as_f64().unwrap() >= 0.3);
    for k in [
        "rx_packets",
        "rx_bytes",
        "tx_packets",
        "tx_bytes",
        "dropped",
    ] {
        assert!(
            v["ports"]["wire"][k].is_u64(),
            "ports.wire.{k} missing: {v}"
        );
    }
    for k in ["kind", "lcore", "packets_in", "packets_out", "dropped"] {
        assert!(
            !v["stages"]["gen"][k].is_null(),
            "stages.gen.{k} missing: {v}"
        );
    }
    assert_eq!(v["stages"]["gen"]["kind"], "source");
    let sent = v["stages"]["gen"]["packets_out"].as_u64().unwrap();
    let got = v["stages"]["rx"]["packets_in"].as_u64().unwrap();
    assert!(sent > 0);
    assert_eq!(sent, got + v["ports"]["wire"]["dropped"].as_u64().unwrap());
}

#[test]
fn ctrl_c_stops_cleanly_with_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "p.toml", PIPE);
    let child = util::bin()
        .args(["run", "-q"])
        .arg(&file)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: sending SIGINT to our own child process.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("stopped by interrupt"), "{stdout}");
}

#[test]
fn check_draws_the_graph() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "p.toml", PIPE);
    let out = util::bin()
        .args(["check", "--dot"])
        .arg(&file)
        .output()
        .unwrap();
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(dot.starts_with("digraph \"cli-test\""), "{dot}");
    assert!(
        dot.contains("\"gen\" -> \"port:wire\"") && dot.contains("\"port:wire\" -> \"rx\""),
        "{dot}"
    );
}
