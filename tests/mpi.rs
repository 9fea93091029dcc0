//! Multi-host runs under mpirun (feature `mpi`): ranks on this machine,
//! `--oversubscribe --allow-run-as-root` so it works on a small CI box as root.
//! Skipped with a printed reason when mpirun is missing, unless
//! `LINERATE_REQUIRE_PEERS=1`, when that is a failure. Every run has a wall
//! clock limit (`timeout`) so nothing hangs.
#![cfg(feature = "mpi")]

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn mpirun() -> Option<Command> {
    let found = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("LINERATE_REQUIRE_PEERS").as_deref() != Ok("1"),
            "mpirun is required (LINERATE_REQUIRE_PEERS=1) but missing: apt-get install openmpi-bin"
        );
        eprintln!("skipped: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)");
        return None;
    }
    // A hard wall-clock limit around mpirun, killed (-k) if it ignores TERM.
    let mut c = Command::new("timeout");
    c.args([
        "-k",
        "5",
        "90",
        "mpirun",
        "--oversubscribe",
        "--allow-run-as-root",
    ]);
    Some(c)
}

fn run(np: usize, args: &[&str]) -> Option<Output> {
    let mut c = mpirun()?;
    c.arg("-np")
        .arg(np.to_string())
        .arg(env!("CARGO_BIN_EXE_linerate"));
    c.args(args);
    Some(c.output().expect("run mpirun"))
}

#[test]
fn three_ranks_reduce_exactly_over_many_rounds() {
    let Some(out) = run(
        3,
        &["hosts", "--names", "a,b,c", "--rounds", "20", "--json"],
    ) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["ranks"], 3);
    // Rank r contributes 1 and r: sums 3 and 0+1+2.
    assert_eq!(doc["sum"]["ranks"], 3);
    assert_eq!(doc["sum"]["rank_ids"], 3);
    let names: Vec<&str> = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    // Every rank announced itself with the pid rank 0 gathered.
    for h in doc["hosts"].as_array().unwrap() {
        let line = format!(
            "rank {} host {} pid {}",
            h["rank"],
            h["name"].as_str().unwrap(),
            h["pid"]
        );
        assert!(stderr.contains(&line), "{line:?} not in {stderr}");
    }
}

#[test]
fn more_hosts_than_ranks_exits_2_naming_the_key() {
    let Some(out) = run(2, &["hosts", "--names", "a,b,c"]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--names: 3 hosts named"), "{stderr}");
    assert!(stderr.contains("hosts without a rank: c"), "{stderr}");
}

/// Starts 3 ranks looping for a long time, waits for host b's pid, sends it
/// `signal`, and returns the exit status, stderr and the seconds from the
/// signal to the end of the job.
fn signal_rank_b(signal: &str) -> Option<(Option<i32>, String, f64)> {
    let mut c = mpirun()?;
    c.args(["-np", "3", env!("CARGO_BIN_EXE_linerate")]);
    c.args([
        "hosts",
        "--names",
        "a,b,c",
        "--rounds",
        "100000",
        "--interval-ms",
        "5",
        "--timeout",
        "3",
    ]);
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    let mut line = String::new();
    let started = Instant::now();
    let pid = loop {
        line.clear();
        if err.read_line(&mut line).expect("read stderr") == 0 {
            panic!("mpirun ended before rank b started: {text}");
        }
        text.push_str(&line);
        if let Some(rest) = line.strip_prefix("rank 1 host b pid ") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no rank b in {text}"
        );
    };
    // Let a few rounds pass so the signal lands mid-run.
    std::thread::sleep(Duration::from_millis(500));
    let sent = Instant::now();
    assert!(Command::new("kill")
        .args([signal, &pid])
        .status()
        .unwrap()
        .success());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    text.push_str(&rest);
    let status = child.wait().unwrap();
    Some((status.code(), text, sent.elapsed().as_secs_f64()))
}

#[test]
fn a_hung_rank_ends_the_job_naming_its_host() {
    let Some((code, stderr, secs)) = signal_rank_b("-STOP") else {
        return;
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: a (rank 0): host b (rank 1) did not answer"),
        "{stderr}"
    );
    // The 3 s timeout, plus mpirun's teardown; far below the 90 s guard.
    assert!(secs < 30.0, "took {secs} s");
}

#[test]
fn a_killed_rank_ends_the_job_non_zero() {
    let Some((code, stderr, secs)) = signal_rank_b("-KILL") else {
        return;
    };
    // mpirun notices the death itself and names the rank; the ranks'
    // start-up lines map it to the host.
    assert_ne!(code, Some(0), "{stderr}");
    assert_ne!(code, Some(124), "the wall-clock guard fired: {stderr}");
    assert!(stderr.contains("process rank 1"), "{stderr}");
    assert!(stderr.contains("rank 1 host b pid"), "{stderr}");
    assert!(secs < 30.0, "took {secs} s");
}

/// Two emulated hosts (network namespaces from scripts/mpi-hosts), removed
/// when dropped, even when the test fails.
struct Namespaces(String);

impl Namespaces {
    fn up() -> Option<Namespaces> {
        let prefix = format!("lr{}", std::process::id() % 100_000_000);
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mpi-hosts");
        let ok = Command::new(script)
            .args(["up", &prefix])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let ns = Namespaces(prefix);
        if !ok {
            assert!(
                std::env::var("LINERATE_REQUIRE_PEERS").as_deref() != Ok("1"),
                "scripts/mpi-hosts up failed (needs root and iproute2)"
            );
            eprintln!("skipped: cannot create network namespaces (needs root and iproute2)");
            return None;
        }
        Some(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mpi-hosts");
        let _ = Command::new(script).args(["down", &self.0]).status();
    }
}

fn two_hosts(a_ns: &str, b_ns: &str) -> String {
    format!(
        r#"[pipeline]
lcores = "0"
pin = false
[host.a]
rank = 0
netns = "{a_ns}"
[host.b]
rank = 1
netns = "{b_ns}"
[port.out]
kind = "udp"
host = "a"
bind = "10.77.0.1:47100"
connect = "10.77.0.2:47100"
[port.in]
kind = "udp"
host = "b"
bind = "10.77.0.2:47100"
[stage.gen]
kind = "generator"
host = "a"
tx = "out"
[stage.ana]
kind = "analyzer"
host = "b"
rx = "in"
"#
    )
}

#[test]
fn each_rank_enters_its_hosts_namespace() {
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::up() else {
        return;
    };
    let (a, b) = (format!("{}-a", ns.0), format!("{}-b", ns.0));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(&file, two_hosts(&a, &b)).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let out = run(
        2,
        &[
            "hosts",
            "--pipeline",
            file.to_str().unwrap(),
            "--rounds",
            "3",
            "--json",
        ],
    )
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (i, n) in [&a, &b].into_iter().enumerate() {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                n,
                "stat",
                "-L",
                "-c",
                "%i",
                "/proc/self/ns/net",
            ])
            .output()
            .unwrap();
        let inode: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        assert_eq!(
            doc["hosts"][i]["netns_inode"], inode,
            "host {i} not in {n}: {doc}"
        );
        assert_eq!(doc["hosts"][i]["name"], ["a", "b"][i]);
    }
}

#[test]
fn a_pipeline_with_more_hosts_than_ranks_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(&file, two_hosts("na", "nb")).unwrap();
    let Some(out) = run(1, &["hosts", "--pipeline", file.to_str().unwrap()]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[host.b] `rank`: rank 1, but mpirun started 1 rank"),
        "{stderr}"
    );
}
