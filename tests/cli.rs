//! The command line as a user meets it: JSON report keys, Ctrl-C, --dot, and
//! each command's exit status and message for one failure of each kind.

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

/// Arguments as the OS strings a path joins.
fn os<'a>(v: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
    v.iter().map(|s| std::ffi::OsStr::new(*s)).collect()
}

/// Runs the binary; its exit status and stderr.
fn status_of(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = util::bin().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The manual's exit statuses (0 ok, 1 runtime failure, 2 bad input), each
/// message under its command's prefix, for one failure of each command that
/// once returned its status by hand; a `--json` path that cannot be written
/// is bad input, whichever command it is given to.
#[test]
fn exit_statuses_are_the_manuals() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "f", "not a directory");
    let unwritable = file.join("r.json");
    let cases: [(Vec<&std::ffi::OsStr>, i32, &str); 6] = [
        (
            os(&["search", "--sim", "ndr=1e6", "--goal", "loss"]),
            2,
            "error: ",
        ),
        (
            os(&["reliable", "compare", "--loss", "120"]),
            2,
            "linerate reliable compare: --loss 120",
        ),
        (
            os(&["rpc", "bench", "--depth", "0"]),
            2,
            "linerate rpc: queue depths must be at least 1",
        ),
        (
            os(&["spead", "send", "127.0.0.1:9", "--rate", "fast"]),
            2,
            "linerate spead: ",
        ),
        (
            os(&[
                "search",
                "-q",
                "--sim",
                "ndr=1e3,pdr=1.1e3",
                "--final-duration",
                "1",
            ]),
            1,
            "",
        ),
        (
            [
                os(&[
                    "search",
                    "-q",
                    "--sim",
                    "ndr=5e6",
                    "--final-duration",
                    "1",
                    "--json",
                ]),
                vec![unwritable.as_os_str()],
            ]
            .concat(),
            2,
            "error: cannot write ",
        ),
    ];
    for (args, want, prefix) in &cases {
        let (code, stderr) = status_of(args);
        assert_eq!(code, Some(*want), "{args:?}: {stderr}");
        assert!(stderr.starts_with(prefix), "{args:?}: {stderr}");
    }
    // The same unwritable path given to `reliable compare --json`.
    let (code, stderr) = status_of(
        &[
            os(&[
                "reliable",
                "compare",
                "--loss",
                "0",
                "--messages",
                "20",
                "--seeds",
                "1",
                "--json",
            ]),
            vec![unwritable.as_os_str()],
        ]
        .concat(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with("linerate reliable compare: cannot write "),
        "{stderr}"
    );
    // doctor reports only (0); with --strict it is 1 exactly when its report
    // has a problem.
    let (code, stderr) = status_of(&os(&["doctor"]));
    assert_eq!(code, Some(0), "{stderr}");
    let out = util::bin().args(["doctor", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let problem = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["status"] == "problem");
    let (code, stderr) = status_of(&os(&["doctor", "--strict"]));
    assert_eq!(code, Some(i32::from(problem)), "{stderr}");
}
