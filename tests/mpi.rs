//! Multi-host runs under mpirun (feature `mpi`): ranks on this machine,
//! `--oversubscribe --allow-run-as-root` so it works on a small CI box as root.
//! Skipped with a printed reason when mpirun is missing, unless
//! `LINERATE_REQUIRE_PEERS=1`, when that is a failure. Every run has a wall
//! clock limit (`timeout`) so nothing hangs.
#![cfg(feature = "mpi")]

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Tests that assert loss-free traffic or a device's capacity run one at a
/// time: on a small CI box two MPI jobs at once starve each other's ranks.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn mpirun() -> Option<Command> {
    let found = Command::new("mpirun")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        util::missing("mpirun (apt-get install openmpi-bin libopenmpi-dev)");
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

/// This machine's name as MPI sees it (gethostname).
fn this_machine() -> String {
    String::from_utf8(Command::new("hostname").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string()
}

/// Three hosts bound by `hostname` (`a` and `c` on `on_ac`, `b` on `on_b`),
/// with no ports to open.
fn by_hostname(on_ac: &str, on_b: &str) -> String {
    format!(
        r#"[pipeline]
lcores = "0"
pin = false
[host.a]
hostname = "{on_ac}"
[host.b]
hostname = "{on_b}"
[host.c]
hostname = "{on_ac}"
[port.out]
kind = "mem"
host = "a"
[port.in]
kind = "mem"
host = "b"
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
fn hosts_bound_by_hostname_take_the_ranks_mpirun_placed_there() {
    let Some(mut c) = mpirun() else {
        return;
    };
    // Rank 0 runs on a machine of its own: a UTS namespace with another
    // name (MPI's processor name is gethostname), ranks 1 and 2 here.
    if !Command::new("unshare")
        .args(["-u", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        util::missing("unshare -u (needs root and util-linux)");
        return;
    }
    let here = this_machine();
    let there = format!("lrhost{}", std::process::id());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hn.toml");
    std::fs::write(&file, by_hostname(&here, &there)).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&check.stdout);
    assert!(check.status.success(), "{plan}");
    assert!(
        plan.contains(&format!("b: hostname {there} (a rank mpirun places there)")),
        "{plan}"
    );
    let bin = env!("CARGO_BIN_EXE_linerate");
    let f = file.to_str().unwrap();
    let out = c
        .args(["-np", "1", "unshare", "-u", "sh", "-c"])
        .arg(format!(
            "hostname {there} && exec {bin} hosts --pipeline {f} --json"
        ))
        .args([":", "-np", "2", bin, "hosts", "--pipeline", f, "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let bound: Vec<(String, String)> = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["name"].as_str().unwrap().to_string(),
                h["machine"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // b where its machine is; a and c on this machine's ranks, in rank order.
    assert_eq!(
        bound,
        [
            ("b".to_string(), there.clone()),
            ("a".to_string(), here.clone()),
            ("c".to_string(), here.clone())
        ],
        "{doc}"
    );
}

#[test]
fn a_hostname_mpirun_placed_no_rank_on_exits_2_naming_the_key() {
    let here = this_machine();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hn.toml");
    let nowhere = format!("lrnowhere{}", std::process::id());
    std::fs::write(&file, by_hostname(&here, &nowhere)).unwrap();
    let Some(out) = run(3, &["hosts", "--pipeline", file.to_str().unwrap()]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let e = format!(
        "[host.b] `hostname`: mpirun placed no rank on {nowhere:?}; it placed {here} (ranks 0, 1, 2)"
    );
    assert!(stderr.contains(&e), "{e:?} not in {stderr}");
    // Two hosts for this machine's one rank: the second names the first.
    std::fs::write(&file, by_hostname(&here, &here)).unwrap();
    let out = run(2, &["hosts", "--pipeline", file.to_str().unwrap()]).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let e = format!(
        "[host.c] `hostname`: {here:?} has 2 ranks (0, 1), all bound already (to hosts a, b)"
    );
    assert!(stderr.contains(&e), "{e:?} not in {stderr}");
}

/// Which process of a job a test signals.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// The rank whose stderr announcement starts with this.
    Rank(&'a str),
    /// mpirun itself (it passes a SIGTERM on to every rank and SIGKILLs
    /// them a second later).
    Mpirun,
}

/// How a signalled job ended.
struct Signalled {
    code: Option<i32>,
    stderr: String,
    /// From the signal to the end of the job.
    secs: f64,
}

/// mpirun's pid: the child of the `timeout` wrapper.
fn mpirun_pid(wrapper: u32) -> String {
    let kids = std::fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))
        .expect("the timeout wrapper's children");
    kids.split_whitespace()
        .next()
        .expect("mpirun under the timeout wrapper")
        .to_string()
}

/// Starts `np` ranks running `args`, waits until every rank has announced
/// itself, sends `target` `signal` after `delay`, and returns how the job
/// ended. The one helper of every kill, hang and interrupt test.
fn signal_job(
    np: usize,
    args: &[&str],
    target: Target<'_>,
    signal: &str,
    delay: Duration,
) -> Option<Signalled> {
    let mut c = mpirun()?;
    c.args(["-np", &np.to_string(), env!("CARGO_BIN_EXE_linerate")]);
    c.args(args);
    let mut child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut text = String::new();
    let mut line = String::new();
    let started = Instant::now();
    let mut pids = std::collections::BTreeMap::new();
    while pids.len() < np {
        line.clear();
        if err.read_line(&mut line).expect("read stderr") == 0 {
            panic!("mpirun ended before its {np} ranks started: {text}");
        }
        text.push_str(&line);
        if line.starts_with("rank ") {
            let pid = line
                .split(" pid ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next());
            pids.insert(line.clone(), pid.unwrap().to_string());
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not every rank started: {text}"
        );
    }
    let pid = match target {
        Target::Rank(who) => pids
            .iter()
            .find(|(l, _)| l.starts_with(who))
            .unwrap_or_else(|| panic!("no {who:?} in {text}"))
            .1
            .clone(),
        Target::Mpirun => mpirun_pid(child.id()),
    };
    // Let the run get under way so the signal lands mid-run.
    std::thread::sleep(delay);
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
    Some(Signalled {
        code: status.code(),
        stderr: text,
        secs: sent.elapsed().as_secs_f64(),
    })
}

/// Three ranks checking in every 5 ms for a long time, host b signalled.
fn signal_rank_b(signal: &str) -> Option<Signalled> {
    signal_job(
        3,
        &[
            "hosts",
            "--names",
            "a,b,c",
            "--rounds",
            "100000",
            "--interval-ms",
            "5",
            "--timeout",
            "3",
        ],
        Target::Rank("rank 1 host b pid "),
        signal,
        Duration::from_millis(500),
    )
}

#[test]
fn a_hung_rank_ends_the_job_naming_its_host() {
    let Some(j) = signal_rank_b("-STOP") else {
        return;
    };
    assert_eq!(j.code, Some(1), "{}", j.stderr);
    assert!(
        j.stderr
            .contains("error: a (rank 0): host b (rank 1) did not answer"),
        "{}",
        j.stderr
    );
    // The 3 s timeout, plus mpirun's teardown; far below the 90 s guard.
    assert!(j.secs < 30.0, "took {} s", j.secs);
}

#[test]
fn a_killed_rank_ends_the_job_non_zero() {
    let Some(j) = signal_rank_b("-KILL") else {
        return;
    };
    // mpirun notices the death itself and names the rank; the ranks'
    // start-up lines map it to the host.
    assert_ne!(j.code, Some(0), "{}", j.stderr);
    assert_ne!(
        j.code,
        Some(124),
        "the wall-clock guard fired: {}",
        j.stderr
    );
    assert!(j.stderr.contains("process rank 1"), "{}", j.stderr);
    assert!(j.stderr.contains("rank 1 host b pid"), "{}", j.stderr);
    assert!(j.secs < 30.0, "took {} s", j.secs);
}

/// Two emulated hosts (network namespaces from scripts/mpi-hosts), removed
/// when dropped, even when the test fails.
struct Namespaces(String);

impl Namespaces {
    fn up() -> Option<Namespaces> {
        Namespaces::make("up", "")
    }

    /// `scripts/mpi-hosts MODE` under a prefix unique to this process and
    /// `tag` (tests run in parallel).
    fn make(mode: &str, tag: &str) -> Option<Namespaces> {
        // Unique within this process whatever the tag (tests run in
        // parallel, and `up` first removes its prefix's namespaces).
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("lr{tag}{n}{}", std::process::id() % 100_000);
        assert!(
            prefix.len() <= 10,
            "{prefix}: scripts/mpi-hosts takes 10 at most"
        );
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mpi-hosts");
        let ok = Command::new(script)
            .args([mode, &prefix])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let ns = Namespaces(prefix);
        if !ok {
            util::missing("network namespaces: scripts/mpi-hosts failed (needs root and iproute2)");
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

/// Runs `np` ranks of `linerate ARGS FILE`, returning the exit status code,
/// stdout and stderr.
fn run_file(
    np: usize,
    args: &[&str],
    file: &std::path::Path,
) -> Option<(Option<i32>, String, String)> {
    let mut all: Vec<&str> = args.to_vec();
    all.push(file.to_str().unwrap());
    let out = run(np, &all)?;
    Some((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The shipped `pipelines/NAME`, `edit`ed (into this run's namespaces),
/// written into a temporary directory: the directory (removed on drop) and
/// the file.
fn shipped(
    name: &str,
    edit: impl FnOnce(String) -> String,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let path = format!("{}/pipelines/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, edit(text)).unwrap();
    (dir, file)
}

/// `linerate run FILE --duration DURATION --quiet --timeout 20` on `np`
/// ranks, which must succeed: the JSON report (written beside `file`) and
/// the human one (stdout).
fn run_report(
    np: usize,
    duration: &str,
    file: &std::path::Path,
) -> Option<(serde_json::Value, String)> {
    let json = file.with_extension("json");
    let (code, out, err) = run_file(
        np,
        &[
            "run",
            "--duration",
            duration,
            "--quiet",
            "--timeout",
            "20",
            "--json",
            json.to_str().unwrap(),
        ],
        file,
    )?;
    assert_eq!(code, Some(0), "{err}");
    let doc = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON");
    Some((doc, out))
}

/// Both hosts send and both receive (stream 0 a -> b, stream 1 b -> a).
fn both_ways(a_ns: &str, b_ns: &str, clock: &str) -> String {
    format!(
        r#"[pipeline]
lcores = "0"
pin = false
[host.a]
rank = 0
netns = "{a_ns}"
clock = "{clock}"
[host.b]
rank = 1
netns = "{b_ns}"
clock = "{clock}"
[port.ab]
kind = "udp"
host = "a"
bind = "10.77.0.1:47100"
connect = "10.77.0.2:47100"
[port.ba]
kind = "udp"
host = "b"
bind = "10.77.0.2:47100"
connect = "10.77.0.1:47100"
[stage.gen_a]
kind = "generator"
host = "a"
tx = "ab"
stream = 0
[stage.ana_a]
kind = "analyzer"
host = "a"
rx = "ab"
[stage.gen_b]
kind = "generator"
host = "b"
tx = "ba"
stream = 1
[stage.ana_b]
kind = "analyzer"
host = "b"
rx = "ba"
"#
    )
}

#[test]
fn a_two_rank_trial_reconciles_the_reduced_counts_exactly() {
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::make("up", "r") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(
        &file,
        two_hosts(&format!("{}-a", ns.0), &format!("{}-b", ns.0)),
    )
    .unwrap();
    let (code, out, err) = run_file(
        2,
        &[
            "trial",
            "--rate",
            "10 kpps",
            "--duration",
            "1s",
            "--repeat",
            "2",
            "--json",
            "-",
        ],
        &file,
    )
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let trials: Vec<serde_json::Value> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(trials.len(), 2);
    for t in &trials {
        let u = |v: &serde_json::Value| v.as_u64().unwrap();
        let (a, b) = (&t["hosts"]["a"], &t["hosts"]["b"]);
        // The totals are the hosts' sums; each host holds only its part.
        assert_eq!(u(&t["offered"]), 10_000, "{t}");
        for k in [
            "offered",
            "sent",
            "unsent",
            "received",
            "duplicates",
            "reordered",
        ] {
            assert_eq!(u(&t[k]), u(&a[k]) + u(&b[k]), "{k}: {t}");
        }
        assert_eq!(u(&a["received"]), 0, "{t}");
        assert_eq!(u(&b["offered"]), 0, "{t}");
        assert_eq!(u(&a["generators"]["gen"]["sent"]), u(&t["sent"]), "{t}");
        assert_eq!(
            u(&b["analyzers"]["ana"]["received"]),
            u(&t["received"]),
            "{t}"
        );
        // The ports' counters come from the host that owns each port.
        assert_eq!(u(&a["ports"]["out"]["tx_packets"]), u(&t["sent"]), "{t}");
        assert_eq!(u(&t["ports"]["out"]["tx_packets"]), u(&t["sent"]), "{t}");
        assert!(
            u(&b["ports"]["in"]["rx_packets"]) >= u(&t["received"]),
            "{t}"
        );
        assert_eq!(u(&t["lost"]), u(&t["offered"]) - u(&t["received"]), "{t}");
        // The send and receive spans cross the wire with the counts, each
        // measured on its own host's clock.
        let f = |v: &serde_json::Value| v.as_f64().unwrap();
        assert!(f(&t["tx_span_s"]) > 0.0 && f(&t["rx_span_s"]) > 0.0, "{t}");
        assert_eq!(a["generators"]["gen"]["tx_span_s"], t["tx_span_s"], "{t}");
        assert_eq!(a["generators"]["gen"]["tx_pps"], t["tx_pps"], "{t}");
        assert_eq!(b["analyzers"]["ana"]["rx_span_s"], t["rx_span_s"], "{t}");
        assert_eq!(b["analyzers"]["ana"]["rx_pps"], t["rx_pps"], "{t}");
        // Stamped on a, read on b, monotonic clocks: no latency, and why.
        assert_eq!(t["clock"]["latency"], false, "{t}");
        assert_eq!(u(&t["latency_ns"]["samples"]), 0, "{t}");
        let why = t["clock"]["why"].as_str().unwrap();
        assert!(
            why.contains("stream 0 is sent on host a and received on host b"),
            "{why}"
        );
        assert!(why.contains("clock = \"tai\""), "{why}");
    }
    assert_eq!(trials[0]["trial"], 1);
    assert_eq!(trials[1]["trial"], 2);
}

#[test]
fn tai_clocks_give_one_way_latency_and_the_merged_histogram_pools_the_hosts() {
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::make("up", "t") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("both.toml");
    let (a, b) = (format!("{}-a", ns.0), format!("{}-b", ns.0));
    std::fs::write(&file, both_ways(&a, &b, "tai")).unwrap();
    let results = dir.path().join("results");
    let (code, out, err) = run_file(
        2,
        &[
            "trial",
            "--rate",
            "4 kpps",
            "--duration",
            "1s",
            "--json",
            "-",
            "--results",
            results.to_str().unwrap(),
        ],
        &file,
    )
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(t["clock"]["clock"], "tai", "{t}");
    assert_eq!(t["clock"]["latency"], true, "{t}");
    assert!(t["clock"]["offset_bound_ns"].as_u64().is_some(), "{t}");
    let streams = t["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{t}");
    let samples: u64 = streams
        .iter()
        .map(|s| s["latency_ns"]["samples"].as_u64().unwrap())
        .sum();
    assert!(samples > 0, "{t}");
    assert_eq!(t["latency_ns"]["samples"].as_u64(), Some(samples), "{t}");
    // The merged histogram is exactly the pool of every host's samples:
    // re-record each stream's values (one host's each) and compare.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(results.join("0.json")).unwrap()).unwrap();
    let merged = linerate::latency::decode(
        doc["latency"]["histogram_v2_deflate_base64"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let mut pooled = hdrhistogram::Histogram::<u64>::new_from(&merged);
    for (_, h) in doc["stream_histograms_v2_deflate_base64"]
        .as_object()
        .unwrap()
    {
        let h = linerate::latency::decode(h.as_str().unwrap()).unwrap();
        for v in h.iter_recorded() {
            pooled
                .record_n(v.value_iterated_to(), v.count_at_value())
                .unwrap();
        }
    }
    assert_eq!(pooled.len(), samples);
    let values = |h: &hdrhistogram::Histogram<u64>| -> Vec<(u64, u64)> {
        h.iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    };
    assert_eq!(values(&pooled), values(&merged));
}

#[test]
fn a_three_rank_trial_through_a_kernel_router() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::make("up3", "k") else {
        return;
    };
    let p = &ns.0;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("three.toml");
    std::fs::write(
        &file,
        format!(
            r#"[pipeline]
lcores = "0"
pin = false
[host.gen]
rank = 0
netns = "{p}-g"
[host.dut]
rank = 1
netns = "{p}-d"
[host.ana]
rank = 2
netns = "{p}-n"
[port.out]
kind = "udp"
host = "gen"
bind = "10.78.1.2:47100"
connect = "10.78.2.2:47100"
[port.in]
kind = "udp"
host = "ana"
bind = "10.78.2.2:47100"
# Room for the whole trial (4,000 datagrams), so an analyzer rank that a loaded
# machine descheduled for a while still reads everything (the default buffer
# held ~70 ms: 3042 of 3604 arrived once at load 10).
rcvbuf = "16 MiB"
[stage.gen]
kind = "generator"
host = "gen"
tx = "out"
[stage.ana]
kind = "analyzer"
host = "ana"
rx = "in"
"#
        ),
    )
    .unwrap();
    let (code, out, err) = run_file(
        3,
        &[
            "trial",
            "--rate",
            "4 kpps",
            "--duration",
            "1s",
            "--json",
            "-",
        ],
        &file,
    )
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let sent = t["sent"].as_u64().unwrap();
    assert!(sent > 0, "{t}");
    assert_eq!(t["received"].as_u64(), Some(sent), "{t}");
    assert_eq!(t["hosts"]["dut"]["rank"], 1, "{t}");
    assert_eq!(t["hosts"]["dut"]["received"], 0, "{t}");
    assert_eq!(t["hosts"]["ana"]["received"].as_u64(), Some(sent), "{t}");
    // The kernel in the DUT namespace forwarded every packet.
    let stats = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mpi-hosts"))
        .args(["stats", p])
        .output()
        .unwrap();
    let s: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let out_dev = format!("{p}-dn");
    assert!(s[&out_dev]["tx_packets"].as_u64().unwrap() >= sent, "{s}");
    assert_eq!(t["clock"]["latency"], false, "{t}");
}

#[test]
fn a_search_across_hosts_brackets_the_known_capacity() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::make("up", "s") else {
        return;
    };
    let (a, b) = (format!("{}-a", ns.0), format!("{}-b", ns.0));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dut.toml");
    // Host b is the device: udp in, a 4 kpps wire (low, so that a loaded CI machine still
    // offers it on time), udp back to host a,
    // where the analyzer sits beside the generator (loop-back to the sender).
    std::fs::write(
        &file,
        format!(
            r#"[pipeline]
lcores = "0"
pin = false
[host.a]
rank = 0
netns = "{a}"
[host.b]
rank = 1
netns = "{b}"
[port.out]
kind = "udp"
host = "a"
bind = "10.77.0.1:47100"
connect = "10.77.0.2:47100"
[port.back]
kind = "udp"
host = "a"
bind = "10.77.0.1:47101"
[port.din]
kind = "udp"
host = "b"
bind = "10.77.0.2:47100"
[port.dout]
kind = "udp"
host = "b"
bind = "10.77.0.2:47101"
connect = "10.77.0.1:47101"
[port.wire]
kind = "mem"
host = "b"
capacity = "4 kpps"
queue = 256
[stage.gen]
kind = "generator"
host = "a"
tx = "out"
max_lag = "10ms"
[stage.ana]
kind = "analyzer"
host = "a"
rx = "back"
[stage.fin]
kind = "forward"
host = "b"
rx = "din"
tx = "wire"
[stage.fout]
kind = "forward"
host = "b"
rx = "wire"
tx = "dout"
"#
        ),
    )
    .unwrap();
    // Loop-back to the sender: latency, whatever the clocks.
    let (code, out, err) = run_file(
        2,
        &[
            "trial",
            "--rate",
            "2 kpps",
            "--duration",
            "0.5s",
            "--json",
            "-",
        ],
        &file,
    )
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let t: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(t["clock"]["latency"], true, "{t}");
    assert!(t["latency_ns"]["samples"].as_u64().unwrap() > 0, "{t}");
    let json = dir.path().join("search.json");
    let (code, _, err) = run_file(
        2,
        &[
            "search",
            "--quiet",
            "--min-rate",
            "0.5 kpps",
            "--max-rate",
            "16 kpps",
            "--initial-duration",
            "0.2",
            "--final-duration",
            "0.5",
            "--phases",
            "0",
            "--width",
            "0.1",
            "--json",
            json.to_str().unwrap(),
        ],
        &file,
    )
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let goals = r["outcome"]["goals"].as_array().unwrap();
    // The PDR (0.5 % loss) interval holds the wire's capacity: the 256-packet
    // queue lets a 0.5 s trial pass a little above it (to about 4.5 kpps);
    // a loaded machine (a generator late by more than max_lag) may lose a
    // little below it.
    let pdr = &goals[1];
    let lower = pdr["lower_pps"].as_f64().unwrap_or(0.0);
    let upper = pdr["upper_pps"].as_f64().unwrap_or(f64::INFINITY);
    assert!(
        lower <= 4e3 * 1.2 && upper >= 4e3 * 0.7,
        "PDR [{lower}, {upper}]: {pdr}\n{r}"
    );
    assert!(upper > lower, "{pdr}");
    // Every trial has its per-host breakdown, as in `trial`'s JSON: the
    // totals are the hosts' sums.
    let trials = r["trials"].as_array().unwrap();
    assert!(!trials.is_empty(), "{r}");
    for t in trials {
        let hosts = t["hosts"].as_object().unwrap_or_else(|| panic!("{t}"));
        assert_eq!(hosts.len(), 2, "{t}");
        for k in ["offered", "received"] {
            let sum: u64 = hosts.values().map(|h| h[k].as_u64().unwrap()).sum();
            assert_eq!(Some(sum), t[k].as_u64(), "{k}: {t}");
        }
        let ranks: Vec<u64> = hosts
            .values()
            .map(|h| h["rank"].as_u64().unwrap())
            .collect();
        assert!(ranks.contains(&0) && ranks.contains(&1), "{t}");
    }
}

/// Two emulated hosts (namespaces tagged `tag`) running `linerate ARGS
/// FILE`, `target` sent `signal` after `delay`. `{json}` in `args` is a
/// report path in the returned directory. For `run`, host a's generator
/// sends a steady 5 kpps.
fn signal_two_hosts(
    tag: &str,
    args: &[&str],
    target: Target<'_>,
    signal: &str,
    delay: Duration,
) -> Option<(Signalled, tempfile::TempDir)> {
    let ns = Namespaces::make("up", tag)?;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    let mut text = two_hosts(&format!("{}-a", ns.0), &format!("{}-b", ns.0));
    if args[0] == "run" {
        // A run's generator needs a rate of its own (a trial sets it).
        text = text.replace("tx = \"out\"", "tx = \"out\"\nrate = \"5 kpps\"");
    }
    std::fs::write(&file, text).unwrap();
    let json = dir.path().join("report.json");
    let mut all: Vec<String> = args
        .iter()
        .map(|a| a.replace("{json}", json.to_str().unwrap()))
        .collect();
    all.push(file.to_str().unwrap().into());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let j = signal_job(2, &all, target, signal, delay)?;
    Some((j, dir))
}

/// The report a signalled job left (`{json}`), naming the job's stderr if
/// there is none.
fn report_of(dir: &tempfile::TempDir, j: &Signalled) -> serde_json::Value {
    let path = dir.path().join("report.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), j.stderr));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The report of a job whose `mpirun` got SIGTERM: the job ended in time
/// and rank 0 wrote its report, marked interrupted by that signal.
fn sigterm_report(dir: &tempfile::TempDir, j: &Signalled) -> serde_json::Value {
    assert_ne!(
        j.code,
        Some(124),
        "the wall-clock guard fired: {}",
        j.stderr
    );
    assert!(j.secs < 30.0, "took {} s", j.secs);
    let doc = report_of(dir, j);
    assert_eq!(doc["interrupted"], true, "{doc}");
    assert_eq!(doc["signal"], "SIGTERM", "{doc}");
    doc
}

const TRIAL_20S: &[&str] = &[
    "trial",
    "--rate",
    "2 kpps",
    "--duration",
    "20s",
    "--timeout",
    "3",
];

/// Trials of 0.3 s, many: a signal lands after some have finished.
const REPEAT_50: &[&str] = &[
    "trial",
    "--rate",
    "2 kpps",
    "--repeat",
    "50",
    "--duration",
    "0.3s",
    "--timeout",
    "3",
    "--json",
    "{json}",
];

#[test]
fn a_rank_killed_mid_trial_ends_the_job_naming_it() {
    let Some((j, _dir)) = signal_two_hosts(
        "x",
        TRIAL_20S,
        Target::Rank("rank 1 host b pid "),
        "-KILL",
        Duration::from_millis(1500),
    ) else {
        return;
    };
    assert_ne!(j.code, Some(0), "{}", j.stderr);
    assert_ne!(
        j.code,
        Some(124),
        "the wall-clock guard fired: {}",
        j.stderr
    );
    assert!(j.stderr.contains("rank 1"), "{}", j.stderr);
    assert!(j.secs < 30.0, "took {} s", j.secs);
}

#[test]
fn a_rank_hung_mid_trial_is_named_by_its_missing_heartbeat() {
    // A trial of 30 s; rank b stops 1 s in.
    let mut args = TRIAL_20S.to_vec();
    args[4] = "30s";
    let Some((j, _dir)) = signal_two_hosts(
        "h",
        &args,
        Target::Rank("rank 1 host b pid "),
        "-STOP",
        Duration::from_millis(1000),
    ) else {
        return;
    };
    assert_eq!(j.code, Some(1), "{}", j.stderr);
    assert!(
        j.stderr.contains(
            "error: a (rank 0): host b (rank 1) did not answer at \"trial 1 (heartbeat)\""
        ),
        "{}",
        j.stderr
    );
    // Named within the 3 s timeout of its last heartbeat (plus mpirun's
    // teardown), long before the trial's 30 s were up.
    assert!(j.secs < 25.0, "took {} s", j.secs);
}

#[test]
fn an_interrupted_repeat_across_hosts_writes_the_finished_trials() {
    let Some((j, dir)) = signal_two_hosts(
        "i",
        REPEAT_50,
        Target::Rank("rank 0 host a pid "),
        "-TERM",
        // Long enough for a trial on a loaded machine, well before the 50th.
        Duration::from_millis(3000),
    ) else {
        return;
    };
    // Rank 0's status (128 + SIGTERM), passed on by mpirun.
    assert_eq!(j.code, Some(143), "{}", j.stderr);
    assert!(j.secs < 30.0, "took {} s", j.secs);
    assert!(j.stderr.contains("interrupted by SIGTERM"), "{}", j.stderr);
    let doc = report_of(&dir, &j);
    assert_eq!(doc["interrupted"], true, "{doc}");
    assert_eq!(doc["signal"], "SIGTERM", "{doc}");
    let trials = doc["trials"].as_array().unwrap();
    assert!(!trials.is_empty() && trials.len() < 50, "{doc}");
    for t in trials {
        assert!(t["hosts"]["a"].is_object(), "{t}");
    }
}

#[test]
fn sigterm_to_mpirun_keeps_the_finished_trials() {
    let Some((j, dir)) = signal_two_hosts(
        "m",
        REPEAT_50,
        Target::Mpirun,
        "-TERM",
        Duration::from_millis(3000),
    ) else {
        return;
    };
    // mpirun ends the ranks (SIGKILL a second after the SIGTERM): rank 0
    // wrote the finished trials at once.
    let doc = sigterm_report(&dir, &j);
    let trials = doc["trials"].as_array().unwrap();
    assert!(!trials.is_empty() && trials.len() < 50, "{doc}");
    for t in trials {
        assert!(
            t["hosts"]["a"].is_object() && t["hosts"]["b"].is_object(),
            "{t}"
        );
        assert!(t["received"].as_u64().unwrap() > 0, "{t}");
    }
}

#[test]
fn sigterm_to_mpirun_keeps_the_finished_search_trials() {
    // A search whose 10 s final trials cannot finish before the signal: the
    // short trials before them are what the report must keep. mpirun
    // SIGKILLs the ranks a second after passing the signal on, so this
    // guards that rank 0 ends the trial and writes the search's report
    // inside that second (no early-report thread, unlike `trial`).
    let Some((j, dir)) = signal_two_hosts(
        "e",
        &[
            "search",
            "--quiet",
            "--min-rate",
            "0.5 kpps",
            "--max-rate",
            "16 kpps",
            "--initial-duration",
            "0.2",
            "--final-duration",
            "10",
            "--timeout",
            "3",
            "--json",
            "{json}",
        ],
        Target::Mpirun,
        "-TERM",
        Duration::from_millis(3000),
    ) else {
        return;
    };
    let doc = sigterm_report(&dir, &j);
    let trials = doc["trials"].as_array().unwrap();
    assert!(!trials.is_empty(), "{doc}");
    // A report `--resume` reads: the search's own JSON, bounds included.
    assert_eq!(
        doc["bounds_history"].as_array().unwrap().len(),
        trials.len(),
        "{doc}"
    );
    assert!(doc["outcome"]["goals"].is_array(), "{doc}");
    assert!(doc["config"].is_object(), "{doc}");
    assert!(
        trials.iter().all(|t| t["received"].as_u64().is_some()),
        "{doc}"
    );
}

#[test]
fn an_interrupted_run_across_hosts_keeps_its_report() {
    for (tag, target) in [
        ("v", Target::Rank("rank 0 host a pid ")),
        ("w", Target::Mpirun),
    ] {
        // A run of 60 s with a steady 5 kpps; interrupted 2 s in.
        let Some((j, dir)) = signal_two_hosts(
            tag,
            &["run", "--duration", "60s", "--quiet", "--json", "{json}"],
            target,
            "-TERM",
            Duration::from_millis(2000),
        ) else {
            return;
        };
        // The other host stopped too (told through rank 0): the report came
        // long before the 60 s.
        assert!(j.secs < 30.0, "{tag}: took {} s", j.secs);
        let doc = report_of(&dir, &j);
        assert_eq!(doc["interrupted"], true, "{tag}: {doc}");
        assert_eq!(doc["signal"], "SIGTERM", "{tag}: {doc}");
        let a = &doc["hosts"]["a"];
        assert_eq!(a["stopped_by"], "interrupt", "{tag}: {doc}");
        assert!(
            a["ports"]["out"]["tx_packets"].as_u64().unwrap() > 0,
            "{tag}: {doc}"
        );
        if let Target::Rank(_) = target {
            // Signalled itself, rank 0 waited for host b's part.
            assert_eq!(j.code, Some(0), "{tag}: {}", j.stderr);
            assert_eq!(doc["hosts"]["b"]["stopped_by"], "interrupt", "{tag}: {doc}");
            assert!(doc.get("pending_hosts").is_none(), "{tag}: {doc}");
        }
    }
}

#[test]
fn a_rank_that_cannot_build_its_part_names_its_host() {
    let Some(ns) = Namespaces::make("up", "f") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    // Host b binds an address its namespace does not have.
    let text = two_hosts(&format!("{}-a", ns.0), &format!("{}-b", ns.0))
        .replace("bind = \"10.77.0.2:47100\"", "bind = \"10.99.0.2:47100\"");
    std::fs::write(&file, text).unwrap();
    let Some((code, _, err)) = run_file(
        2,
        &[
            "trial",
            "--rate",
            "1 kpps",
            "--duration",
            "1s",
            "--timeout",
            "5",
        ],
        &file,
    ) else {
        return;
    };
    assert!(matches!(code, Some(1) | Some(2)), "{code:?}: {err}");
    assert!(err.contains("b (rank 1): "), "{err}");
    assert!(err.contains("10.99.0.2"), "{err}");
    assert!(err.contains("error: host b (rank 1) failed"), "{err}");
}

#[test]
fn a_trial_file_with_more_hosts_than_ranks_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(&file, two_hosts("na", "nb")).unwrap();
    let Some((code, _, err)) =
        run_file(1, &["trial", "--rate", "1 kpps", "--duration", "1s"], &file)
    else {
        return;
    };
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("[host.b] `rank`: rank 1, but mpirun started 1 rank"),
        "{err}"
    );
}

#[test]
fn run_across_hosts_reports_each_hosts_part() {
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::make("up", "u") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(
        &file,
        two_hosts(&format!("{}-a", ns.0), &format!("{}-b", ns.0))
            .replace("tx = \"out\"", "tx = \"out\"\nrate = \"5 kpps\""),
    )
    .unwrap();
    let (code, out, err) = run_file(
        2,
        &["run", "--duration", "1s", "--quiet", "--json", "-"],
        &file,
    )
    .unwrap();
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let (a, b) = (&doc["hosts"]["a"], &doc["hosts"]["b"]);
    assert_eq!(a["rank"], 0, "{doc}");
    assert_eq!(b["rank"], 1, "{doc}");
    // Each host reports only its own part.
    assert!(a["stages"].get("ana").is_none(), "{doc}");
    assert!(b["stages"].get("gen").is_none(), "{doc}");
    let sent = a["ports"]["out"]["tx_packets"].as_u64().unwrap();
    let got = b["ports"]["in"]["rx_packets"].as_u64().unwrap();
    assert!(sent > 0 && got > 0 && got <= sent, "{doc}");
    // Without a duration a receiving host could not tell when to stop.
    let (code, _, err) = run_file(2, &["run"], &file).unwrap();
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--duration"), "{err}");
}

#[test]
fn a_three_rank_spead_ingest_reconciles_senders_and_receivers() {
    if mpirun().is_none() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(ns) = Namespaces::make("ingest", "g") else {
        return;
    };
    // The shipped file, in this run's namespaces.
    let (_dir, file) = shipped("telescope-ingest-hosts.toml", |s| {
        s.replace("\"ingest-", &format!("\"{}-", ns.0))
    });
    let (doc, out) = run_report(3, "10s", &file).unwrap();
    let spead = &doc["spead"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {doc}"));
    // The sender host sent both streams in full: 256 timestamps of 4 heaps.
    let s = &doc["hosts"]["s"]["stages"];
    assert_eq!(n(&spead["senders"]["s"]["heaps"]), 2 * 1024, "{doc}");
    assert_eq!(
        n(&spead["sent"]["packets"]),
        n(&s["fsim1"]["detail"]["packets"]) + n(&s["fsim2"]["detail"]["packets"]),
        "{doc}"
    );
    // Each receiver host's line is its own stages' counts, and the totals
    // are their exact sums.
    let mut sums = [0u64; 4];
    for (host, recv, check) in [("r1", "recv1", "check1"), ("r2", "recv2", "check2")] {
        let h = &doc["hosts"][host];
        let r = &spead["receivers"][host];
        let d = &h["stages"][recv]["detail"];
        assert_eq!(r["stages"], serde_json::json!([recv]), "{doc}");
        assert_eq!(n(&r["packets"]), n(&d["packets"]), "{doc}");
        assert_eq!(
            n(&r["packets"]),
            n(&h["ports"][&format!("in{}", &host[1..])]["rx_packets"])
        );
        assert_eq!(n(&r["heaps_complete"]), n(&d["heaps_complete"]), "{doc}");
        assert_eq!(n(&r["present"]), n(&d["stream"]["present"]), "{doc}");
        assert_eq!(
            n(&r["present_slots"]),
            n(&d["stream"]["present_slots"]),
            "{doc}"
        );
        // What arrived was placed byte for byte.
        assert_eq!(n(&h["stages"][check]["detail"]["wrong_bytes"]), 0, "{doc}");
        assert_eq!(n(&r["wrong_bytes"]), 0, "{doc}");
        // A receiver sees only its own stream: at most what was sent to it.
        assert!(n(&r["heaps_complete"]) > 0, "{doc}");
        assert!(n(&r["heaps_complete"]) <= 1024, "{doc}");
        let f = r["fraction_present"].as_f64().unwrap();
        let exact = n(&r["present"]) as f64 / n(&r["present_slots"]).max(1) as f64;
        assert!((f - exact).abs() < 1e-12, "{doc}");
        for (x, k) in sums
            .iter_mut()
            .zip(["packets", "heaps_complete", "present", "present_slots"])
        {
            *x += n(&r[k]);
        }
    }
    let t = &spead["received"];
    assert_eq!(
        [
            n(&t["packets"]),
            n(&t["heaps_complete"]),
            n(&t["present"]),
            n(&t["present_slots"])
        ],
        sums,
        "{doc}"
    );
    // The pooled fraction, not the mean of the receivers'.
    let pooled = sums[2] as f64 / sums[3].max(1) as f64;
    assert!((t["fraction_present"].as_f64().unwrap() - pooled).abs() < 1e-12);
    // The human report carries the same summary.
    assert!(out.contains("SPEAD ingest across hosts:"), "{out}");
    assert!(out.contains("received r2"), "{out}");
    assert!(out.contains("received total"), "{out}");
}

/// The shipped multicast ingest file in namespaces from `scripts/mpi-hosts
/// mcast` (a bridge with IGMP snooping), edited by `edit`, run for
/// `duration` on 3 ranks: the JSON report, the human one and the wall time.
fn mcast_ingest(
    tag: &str,
    duration: &str,
    edit: impl Fn(String) -> String,
) -> Option<(serde_json::Value, String, Duration)> {
    mpirun()?;
    let ns = Namespaces::make("mcast", tag)?;
    let (_dir, file) = shipped("telescope-ingest-hosts-mcast.toml", |s| {
        edit(s.replace("\"mcast-", &format!("\"{}-", ns.0)))
    });
    let start = Instant::now();
    let (doc, out) = run_report(3, duration, &file)?;
    let took = start.elapsed();
    drop(ns);
    Some((doc, out, took))
}

/// (receiver host, group) of the shipped multicast file: r1 joins 1 and 3,
/// r2 joins 2 and 3.
const MEMBERS: [(&str, u32); 4] = [("r1", 1), ("r1", 3), ("r2", 2), ("r2", 3)];

#[test]
fn a_three_rank_multicast_ingest_counts_each_group_at_its_members_only() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some((doc, out, _)) = mcast_ingest("m", "8s", |f| f) else {
        return;
    };
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {doc}"));
    let spead = &doc["spead"];
    let s = &doc["hosts"]["s"]["stages"];
    // Each group's stage sent its whole stream (n_ants = 4 heaps a
    // timestamp): different sizes, so a heap at the wrong socket shows.
    let heaps = [0, 1024, 768, 512];
    let mut packets = [0; 4];
    for g in 1..=3 {
        let d = &s[&format!("fsim{g}")]["detail"];
        assert_eq!(n(&d["heaps"]), heaps[g], "{doc}");
        packets[g] = n(&d["packets"]);
        assert_eq!(
            n(&doc["hosts"]["s"]["ports"][&format!("to_g{g}")]["tx_packets"]),
            packets[g],
            "{doc}"
        );
    }
    assert_eq!(
        n(&spead["senders"]["s"]["heaps"]),
        1024 + 768 + 512,
        "{doc}"
    );
    assert_eq!(
        n(&spead["sent"]["packets"]),
        packets.iter().sum::<u64>(),
        "{doc}"
    );
    // Every member of a group counted that group's heaps and no others:
    // each socket took at most its group's packets and heaps (one leak of
    // another group's stream would exceed it), and something of each; the
    // shared group 3 was counted by both of its members.
    let mut per_host = std::collections::BTreeMap::<&str, [u64; 4]>::new();
    for (host, g) in MEMBERS {
        let h = &doc["hosts"][host];
        let d = &h["stages"][&format!("recv{}_g{g}", &host[1..])]["detail"];
        let port = n(&h["ports"][&format!("{host}_g{g}")]["rx_packets"]);
        assert_eq!(n(&d["packets"]), port, "{doc}");
        assert!(
            port > 0 && port <= packets[g as usize],
            "{host} group {g}: {doc}"
        );
        let complete = n(&d["heaps_complete"]);
        assert!(
            complete > 0 && complete <= heaps[g as usize],
            "{host} group {g}: {doc}"
        );
        let present = n(&d["stream"]["present"]);
        assert!(present <= heaps[g as usize], "{doc}");
        assert_eq!(
            n(&h["stages"][&format!("check{}_g{g}", &host[1..])]["detail"]["wrong_bytes"]),
            0,
            "{doc}"
        );
        let sums = per_host.entry(host).or_default();
        for (x, v) in
            sums.iter_mut()
                .zip([port, complete, present, n(&d["stream"]["present_slots"])])
        {
            *x += v;
        }
    }
    // Each receiver's line adds its own groups' stages exactly, with its own
    // pooled fraction; the totals add the receivers.
    let mut total = [0u64; 4];
    for (host, sums) in &per_host {
        let r = &spead["receivers"][*host];
        let k = &host[1..];
        assert_eq!(
            r["stages"],
            serde_json::json!([
                format!("recv{k}_g{}", if *host == "r1" { 1 } else { 2 }),
                format!("recv{k}_g3")
            ]),
            "{doc}"
        );
        let got = ["packets", "heaps_complete", "present", "present_slots"].map(|k| n(&r[k]));
        assert_eq!(got, *sums, "{host}: {doc}");
        let f = r["fraction_present"].as_f64().unwrap();
        assert!((f - sums[2] as f64 / sums[3] as f64).abs() < 1e-12, "{doc}");
        assert!(f > 0.0, "{doc}");
        assert_eq!(n(&r["wrong_bytes"]), 0, "{doc}");
        for (t, v) in total.iter_mut().zip(sums) {
            *t += v;
        }
    }
    let t = &spead["received"];
    assert_eq!(
        ["packets", "heaps_complete", "present", "present_slots"].map(|k| n(&t[k])),
        total,
        "{doc}"
    );
    let pooled = total[2] as f64 / total[3] as f64;
    assert!((t["fraction_present"].as_f64().unwrap() - pooled).abs() < 1e-12);
    assert!(!out.contains("NOTHING ARRIVED"), "{out}");
}

#[test]
fn a_multicast_receiver_whose_groups_nobody_sends_reports_nothing_present() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // r2 joins 239.2.0.9 and 239.2.0.10 instead: nobody sends to them.
    let silent = |f: String| {
        f.replace(
            "bind = \"239.2.0.2:7148\"\nmulticast = \"239.2.0.2\"",
            "bind = \"239.2.0.9:7148\"\nmulticast = \"239.2.0.9\"",
        )
        .replace(
            "bind = \"239.2.0.3:7148\"\nmulticast = \"239.2.0.3\"\ninterface = \"10.80.0.3\"",
            "bind = \"239.2.0.10:7148\"\nmulticast = \"239.2.0.10\"\ninterface = \"10.80.0.3\"",
        )
    };
    let Some((doc, out, took)) = mcast_ingest("n", "4s", silent) else {
        return;
    };
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v} in {doc}"));
    // The run ended on its duration (mpirun's own limit is 90 s).
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let r2 = &doc["spead"]["receivers"]["r2"];
    for k in [
        "packets",
        "heaps_complete",
        "present",
        "present_slots",
        "chunks",
    ] {
        assert_eq!(n(&r2[k]), 0, "{k}: {doc}");
    }
    // Nothing present is 0, not a vacuous 1 from no slots.
    assert_eq!(r2["fraction_present"].as_f64(), Some(0.0), "{doc}");
    assert!(
        out.lines()
            .any(|l| l.contains("received r2") && l.contains("NOTHING ARRIVED")),
        "{out}"
    );
    // r1 still took its groups, and the totals are r1's alone.
    let r1 = &doc["spead"]["receivers"]["r1"];
    assert!(n(&r1["heaps_complete"]) > 0, "{doc}");
    let t = &doc["spead"]["received"];
    for k in ["packets", "heaps_complete", "present", "present_slots"] {
        assert_eq!(n(&t[k]), n(&r1[k]), "{k}: {doc}");
    }
}

/// Applies the nft `rule` in namespace `ns`: the exit status and stderr.
fn nft(ns: &str, rule: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nft");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rule.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether nft is there.
fn drop_udp_possible() -> bool {
    Command::new("nft")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Drops `permille` of the UDP datagrams delivered in namespace `ns`
/// (nftables); false when nft is missing, a failure when the rule is refused.
fn drop_udp(ns: &str, permille: u32) -> bool {
    if !drop_udp_possible() {
        return false;
    }
    let rule = format!(
        "table inet loss {{\n chain in {{\n  type filter hook input priority 0\n  \
         meta l4proto udp numgen random mod 1000 < {permille} counter drop\n }}\n}}\n"
    );
    let (ok, err) = nft(ns, &rule);
    assert!(ok, "nft refused {rule}: {err}");
    true
}

/// Drops `permille` of the IPv4 UDP frames leaving device `dev` of namespace
/// `ns` (nftables' netdev egress hook); false when nft is missing or the
/// kernel has no egress hook, a failure when the rule is refused otherwise.
/// For DPDK's net_af_packet the loss has to be made on the way out: its
/// socket takes a received frame before netfilter's input hooks see it, and
/// its frames pass the egress hook only with `qdisc_bypass=0`.
#[cfg(feature = "dpdk")]
fn drop_udp_egress(ns: &str, dev: &str, permille: u32) -> bool {
    if !drop_udp_possible() {
        return false;
    }
    let rule = format!(
        "table netdev loss {{\n chain out {{\n  type filter hook egress device \"{dev}\" priority 0\n  \
         ip protocol udp numgen random mod 1000 < {permille} counter drop\n }}\n}}\n"
    );
    let (ok, err) = nft(ns, &rule);
    if !ok && err.contains("egress") {
        // A kernel before 5.16, or one built without NETFILTER_EGRESS.
        return false;
    }
    assert!(ok, "nft refused {rule}: {err}");
    true
}

/// Applies `lose(namespace, veth)` to both hosts of namespaces `PREFIX`
/// (`PREFIX-a` with veth `PREFIX-va`, `PREFIX-b` with `PREFIX-vb`): whether
/// both took. When not, nft or the kernel's egress hook is missing, and the
/// caller runs loss-free; a failure under `LINERATE_REQUIRE_PEERS=1` when
/// nft itself is missing.
fn lossy(p: &str, lose: impl Fn(&str, &str) -> bool) -> bool {
    let ok =
        lose(&format!("{p}-a"), &format!("{p}-va")) && lose(&format!("{p}-b"), &format!("{p}-vb"));
    if !ok {
        assert!(
            std::env::var("LINERATE_REQUIRE_PEERS").as_deref() != Ok("1") || drop_udp_possible(),
            "nft is required (LINERATE_REQUIRE_PEERS=1) but failed: apt-get install nftables"
        );
        eprintln!("no kernel loss (nft or its egress hook missing): the run is loss-free");
    }
    ok
}

/// The packets namespace `ns`'s loss rule dropped.
fn dropped_in(ns: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "list", "ruleset"])
        .output()
        .expect("nft list ruleset");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("counter packets ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Asserts that the loss rules of both hosts of namespaces `PREFIX` dropped
/// something.
fn assert_dropped_both_ways(p: &str, doc: &serde_json::Value) {
    let (a, b) = (dropped_in(&format!("{p}-a")), dropped_in(&format!("{p}-b")));
    assert!(a > 0 && b > 0, "no loss ({a} and {b} dropped): {doc}");
}

/// Runs the shipped reliable-channel file `name` (2000 messages of 8 KiB
/// from host a to host b) on 2 ranks in fresh namespaces (its `rel-` names
/// made this run's, then `edit`ed), with 5 % of the datagrams each way lost
/// in the kernel by `lose` (see [`lossy`]). Asserts that every message was
/// sent, acknowledged, and delivered once, intact and in order, and that the
/// lost ones were resent: the report.
fn reliable_between_two_ranks(
    tag: &str,
    name: &str,
    edit: impl Fn(String) -> String,
    lose: impl Fn(&str, &str) -> bool,
) -> Option<serde_json::Value> {
    mpirun()?;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespaces::make("up", tag)?;
    let p = &ns.0;
    let lossy = lossy(p, lose);
    let (_dir, file) = shipped(name, |s| edit(s.replace("rel-", &format!("{p}-"))));
    let (doc, _) = run_report(2, "60s", &file)?;
    let tx = &doc["hosts"]["a"]["stages"]["sender"]["detail"];
    let rx = &doc["hosts"]["b"]["stages"]["receiver"]["detail"];
    assert_eq!(doc["hosts"]["a"]["rank"], 0, "{doc}");
    assert_eq!(doc["hosts"]["b"]["rank"], 1, "{doc}");
    // Every message sent and acknowledged...
    assert_eq!(tx["messages"], 2000, "{doc}");
    assert_eq!(tx["unacked"], 0, "{doc}");
    // ...and delivered once, intact, in order, on the other host.
    assert_eq!(rx["endpoint"]["delivered"], 2000, "{doc}");
    assert_eq!(rx["check"]["ok"], 2000, "{doc}");
    assert_eq!(rx["check"]["bytes"], 2000 * 8192, "{doc}");
    for k in ["corrupt", "duplicate", "out_of_order"] {
        assert_eq!(rx["check"][k], 0, "{k}: {doc}");
    }
    if lossy {
        // Through real loss: the kernel dropped datagrams both ways.
        assert_dropped_both_ways(p, &doc);
        assert!(
            tx["endpoint"]["retransmits"].as_u64().unwrap_or(0) > 0,
            "{doc}"
        );
    }
    Some(doc)
}

#[test]
fn the_reliable_channel_between_two_ranks_delivers_every_message_once() {
    let Some(doc) = reliable_between_two_ranks(
        "c",
        "reliable-udp-hosts.toml",
        |s| s,
        |ns, _| drop_udp(ns, 50),
    ) else {
        return;
    };
    let rx = &doc["hosts"]["b"]["stages"]["receiver"]["detail"];
    // Stamped on host a, read on host b: no latency without clock = "tai".
    assert!(rx["latency_ns"].is_null(), "{doc}");
    assert!(
        rx["latency_note"]
            .as_str()
            .unwrap()
            .contains("stamped on host a and received on host b"),
        "{doc}"
    );
    assert_eq!(doc["clock"]["latency"], false, "{doc}");
}

#[cfg(feature = "dpdk")]
#[test]
fn the_reliable_channel_over_dpdk_ports_between_two_ranks_delivers_every_message_once() {
    // The loss is made on the way out of each rank's af_packet socket, which
    // then must not bypass the qdisc layer, where the egress hook sits.
    let Some(doc) = reliable_between_two_ranks(
        "d",
        "reliable-dpdk-hosts.toml",
        |s| s.replace("framecnt=4096", "framecnt=4096,qdisc_bypass=0"),
        |ns, dev| drop_udp_egress(ns, dev, 50),
    ) else {
        return;
    };
    // Through the DPDK ports, as datagrams in frames: each port resolved
    // the other (ARP) and sent and received frames of its own.
    for (host, port) in [("a", "da"), ("b", "db")] {
        let r = &doc["hosts"][host]["ports"][port];
        assert_eq!(r["kind"], "dpdk", "{doc}");
        assert!(r["tx_packets"].as_u64().unwrap() > 0, "{doc}");
        assert!(r["rx_packets"].as_u64().unwrap() > 0, "{doc}");
        assert_eq!(r["detail"]["neigh_resolutions"], 1, "{doc}");
        assert_eq!(r["detail"]["udp_tx_unsent"], 0, "{doc}");
    }
}

#[test]
fn the_reliable_channel_across_hosts_has_latency_with_tai_clocks() {
    if mpirun().is_none() {
        return;
    }
    let Some(ns) = Namespaces::make("up", "l") else {
        return;
    };
    let (a, b) = (format!("{}-a", ns.0), format!("{}-b", ns.0));
    let (_dir, file) = shipped("reliable-udp-hosts.toml", |s| {
        s.replace(
            "netns = \"rel-a\"",
            &format!("netns = \"{a}\"\nclock = \"tai\""),
        )
        .replace(
            "netns = \"rel-b\"",
            &format!("netns = \"{b}\"\nclock = \"tai\""),
        )
        .replace("messages = 2000", "messages = 200")
    });
    let (doc, _) = run_report(2, "30s", &file).unwrap();
    let rx = &doc["hosts"]["b"]["stages"]["receiver"]["detail"];
    assert_eq!(rx["check"]["ok"], 200, "{doc}");
    // Every delivered message has a one-way latency (one machine: one clock).
    assert_eq!(rx["latency_ns"]["samples"], 200, "{doc}");
    assert!(rx["latency_ns"]["min"].as_u64().unwrap() > 0, "{doc}");
    assert!(rx.get("latency_note").is_none(), "{doc}");
    assert_eq!(doc["clock"]["clock"], "tai", "{doc}");
    assert_eq!(doc["clock"]["latency"], true, "{doc}");
    assert!(doc["clock"]["offset_bound_ns"].is_u64(), "{doc}");
}

/// `rpc bench --transport TRANSPORT` between namespaces `PREFIX-a` (client
/// at `client`) and `PREFIX-b` (server at `server`), with `extra` arguments.
fn rpc_bench_cmd(
    transport: &str,
    (client, server): (&str, &str),
    prefix: &str,
    extra: &[&str],
) -> Vec<String> {
    let mut v: Vec<String> = [
        "rpc",
        "bench",
        "--transport",
        transport,
        "--client",
        client,
        "--server",
        server,
        "--client-netns",
        &format!("{prefix}-a"),
        "--server-netns",
        &format!("{prefix}-b"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `rpc bench --transport reliable-udp` between namespaces `PREFIX-a`
/// (client, 10.77.0.1) and `PREFIX-b` (server, 10.77.0.2), with `extra`
/// arguments.
fn rpc_bench_args(prefix: &str, extra: &[&str]) -> Vec<String> {
    let ends = ("10.77.0.1:47311", "10.77.0.2:47312");
    rpc_bench_cmd("reliable-udp", ends, prefix, extra)
}

/// Runs the bench with the transport's arguments `args` on 2 ranks, client
/// in namespace `PREFIX-a` and server in `PREFIX-b`, and returns its JSON
/// report, asserting that every call of every depth was answered with the
/// right payload and that it ran `transport` over `over` (`udp`, `dpdk`).
fn rpc_bench_over(
    prefix: &str,
    mut args: Vec<String>,
    transport: &str,
    over: &str,
) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rpc.json");
    args.extend(
        [
            "--depth",
            "1,64",
            "--duration",
            "400ms",
            "--msg-size",
            "200",
            "--resp-size",
            "100",
            "--timeout",
            "20s",
            "--json",
            json.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(2, &args).unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // Rank 0 prints the report, with both hosts.
    assert!(
        stdout.contains(&format!("rpc bench over reliable channel over {over}")),
        "{stdout}"
    );
    assert!(stdout.contains("host server (rank 1)"), "{stdout}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["transport"], transport, "{doc}");
    let depths = doc["depths"].as_array().unwrap();
    assert_eq!(depths.len(), 2, "{doc}");
    let mut calls = 0;
    for d in depths {
        // The bench fails on a damaged or missing response; these say it
        // checked every one.
        let c = d["calls"].as_u64().unwrap();
        assert!(c > 0, "{d}");
        assert_eq!(d["verified"], c, "{d}");
        calls += c;
    }
    let hosts = doc["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{doc}");
    for (rank, (h, host)) in hosts.iter().zip(["a", "b"]).enumerate() {
        assert_eq!(h["rank"], rank, "{doc}");
        assert_eq!(h["name"], ["client", "server"][rank], "{doc}");
        assert_eq!(h["netns"], format!("{prefix}-{host}"), "{doc}");
        // The server answered exactly the calls the client made.
        assert_eq!(h["rpcs"], calls, "{doc}");
    }
    doc
}

/// Runs `bench(PREFIX)` (see [`rpc_bench_over`]) between fresh namespaces
/// `PREFIX-a` and `PREFIX-b` twice: loss-free, then with 5 % of the
/// datagrams each way lost in the kernel by `lose` (see [`lossy`]), where
/// every call must still be answered and the lost ones resent. The
/// loss-free report.
fn rpc_bench_with_and_without_loss(
    tag: &str,
    bench: impl Fn(&str) -> serde_json::Value,
    lose: impl Fn(&str, &str) -> bool,
) -> Option<serde_json::Value> {
    mpirun()?;
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let ns = Namespaces::make("up", tag)?;
    let clean = bench(&ns.0);
    if !lossy(&ns.0, lose) {
        eprintln!("skipped the lossy half");
        return Some(clean);
    }
    let doc = bench(&ns.0);
    assert_dropped_both_ways(&ns.0, &doc);
    let resent: u64 = doc["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["reliable"]["retransmits"].as_u64().unwrap())
        .sum();
    assert!(resent > 0, "{doc}");
    Some(clean)
}

#[test]
fn rpc_bench_between_two_ranks_answers_every_call_with_and_without_loss() {
    rpc_bench_with_and_without_loss(
        "q",
        |p| rpc_bench_over(p, rpc_bench_args(p, &[]), "reliable-udp", "udp"),
        |ns, _| drop_udp(ns, 50),
    );
}

/// `rpc bench --transport reliable-dpdk` between namespaces `PREFIX-a`
/// (client, 10.77.0.11 on veth PREFIX-va) and `PREFIX-b` (server, 10.77.0.12
/// on PREFIX-vb), each rank driving its veth through net_af_packet.
#[cfg(feature = "dpdk")]
fn rpc_bench_dpdk_args(prefix: &str, extra: &[&str]) -> Vec<String> {
    let dev = |v: &str| format!("net_af_packet0,iface={prefix}-{v},framecnt=4096,qdisc_bypass=0");
    let (client_dev, server_dev) = (dev("va"), dev("vb"));
    let mut all = vec![
        "--client-device",
        &client_dev,
        "--server-device",
        &server_dev,
    ];
    all.extend(extra);
    let ends = ("10.77.0.11:47311", "10.77.0.12:47312");
    rpc_bench_cmd("reliable-dpdk", ends, prefix, &all)
}

#[cfg(feature = "dpdk")]
#[test]
fn rpc_bench_over_dpdk_ports_between_two_ranks_answers_every_call_with_and_without_loss() {
    // The frames are lost on their way out of each rank's socket.
    let Some(doc) = rpc_bench_with_and_without_loss(
        "r",
        |p| rpc_bench_over(p, rpc_bench_dpdk_args(p, &[]), "reliable-dpdk", "dpdk"),
        |ns, dev| drop_udp_egress(ns, dev, 50),
    ) else {
        return;
    };
    for h in doc["hosts"].as_array().unwrap() {
        assert!(
            h["address"].as_str().unwrap().starts_with("10.77.0.1"),
            "{doc}"
        );
    }
}

/// `rpc bench ARGS` on `np` ranks, which must exit 2 (bad input): stderr.
fn rpc_bench_rejected(np: usize, args: &[&str]) -> Option<String> {
    let mut all = vec!["rpc", "bench"];
    all.extend(args);
    let out = run(np, &all)?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    Some(stderr)
}

#[cfg(feature = "dpdk")]
#[test]
fn rpc_bench_over_dpdk_without_a_device_exits_2_naming_the_flag() {
    let Some(stderr) = rpc_bench_rejected(
        2,
        &[
            "--transport",
            "reliable-dpdk",
            "--client",
            "10.77.0.11:47321",
            "--server",
            "10.77.0.12:47322",
            "--client-device",
            "net_af_packet0,iface=nowhere",
        ],
    ) else {
        return;
    };
    assert!(stderr.contains("--server-device"), "{stderr}");
}

#[test]
fn rpc_bench_on_one_rank_exits_2_naming_the_missing_host() {
    let Some(stderr) = rpc_bench_rejected(
        1,
        &[
            "--transport",
            "reliable-udp",
            "--client",
            "127.0.0.1:47321",
            "--server",
            "127.0.0.1:47322",
        ],
    ) else {
        return;
    };
    assert!(stderr.contains("hosts without a rank: server"), "{stderr}");
    assert!(stderr.contains("mpirun -np 2"), "{stderr}");
}

/// Sends the server rank of a long rpc bench `signal` mid-run.
fn signal_rpc_server(tag: &str, signal: &str) -> Option<Signalled> {
    signal_rpc_rank(tag, "rank 1 host server pid ", signal)
}

/// Sends the rank announced as `who` of a long rpc bench `signal` mid-run.
fn signal_rpc_rank(tag: &str, who: &str, signal: &str) -> Option<Signalled> {
    let ns = Namespaces::make("up", tag)?;
    let args = rpc_bench_args(
        &ns.0,
        &["--depth", "1", "--duration", "30s", "--timeout", "3s"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    signal_job(
        2,
        &args,
        Target::Rank(who),
        signal,
        Duration::from_millis(1500),
    )
}

#[test]
fn a_hung_rpc_server_rank_is_named_within_the_timeout() {
    if mpirun().is_none() {
        return;
    }
    let Some(Signalled { code, stderr, secs }) = signal_rpc_server("u", "-STOP") else {
        return;
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "error: client (rank 0): host server (rank 1) stopped answering RPCs at depth 1"
        ),
        "{stderr}"
    );
    // The 3 s timeout, plus mpirun's teardown; far below the 30 s run.
    assert!(secs < 20.0, "took {secs} s");
}

#[test]
fn a_killed_rpc_server_rank_ends_the_bench_naming_it() {
    if mpirun().is_none() {
        return;
    }
    let Some(Signalled { code, stderr, secs }) = signal_rpc_server("k", "-KILL") else {
        return;
    };
    assert_ne!(code, Some(0), "{stderr}");
    assert_ne!(code, Some(124), "the wall-clock guard fired: {stderr}");
    // mpirun names the rank; the ranks' start-up lines map it to the host.
    assert!(stderr.contains("rank 1"), "{stderr}");
    assert!(stderr.contains("rank 1 host server pid"), "{stderr}");
    assert!(secs < 20.0, "took {secs} s");
}

#[test]
fn a_hung_rpc_client_rank_is_named_by_the_server() {
    if mpirun().is_none() {
        return;
    }
    let Some(Signalled { code, stderr, secs }) =
        signal_rpc_rank("c", "rank 0 host client pid ", "-STOP")
    else {
        return;
    };
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: server (rank 1): host client (rank 0) went quiet"),
        "{stderr}"
    );
    assert!(secs < 20.0, "took {secs} s");
}
