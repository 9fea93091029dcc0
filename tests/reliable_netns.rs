//! The reliable channel between two linerate processes over real loopback
//! UDP, with real faults:
//!
//! - a matrix (defaults, usnic mode, `sack = false`, `ordered = false` at 0,
//!   1, 5 and 20 % loss) inside a network namespace whose nftables rule drops
//!   UDP datagrams in the kernel, both directions; every cell delivers each
//!   message once, intact (in order where ordered), both processes exit 0;
//! - the 20 % cell through an `impair` relay with millisecond jitter, ours
//!   and usnic mode;
//! - a sender killed with SIGKILL: the receiver exits non-zero within
//!   `peer_timeout` + 2 s, naming the peer, with a JSON report.
//!
//! The namespace tests need root, `ip` and `nft` (scripts/test installs
//! nftables); without them they are skipped, unless
//! `LINERATE_REQUIRE_PEERS=1`, when that is a failure. Every namespace has a
//! name unique to the run and is deleted when its guard drops, on failure
//! too; every wait has a deadline, and a child still running at the end is
//! killed. Small message counts keep the matrix to seconds per cell.

mod util;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A network namespace with loopback up and an nftables rule dropping
/// `permille` of the UDP datagrams delivered in it; deleted on drop.
struct Netns {
    name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

fn tool_ok(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn sh(args: &[&str], stdin: Option<&str>) {
    let mut c = Command::new(args[0]);
    c.args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    if let Some(text) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let out = wait_output(child, Duration::from_secs(20), &format!("{args:?}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// `None` (skip) when the machine cannot make one and peers are not required.
    fn new(permille: u32) -> Option<Netns> {
        let able = tool_ok(&["ip", "netns", "list"]) && tool_ok(&["nft", "--version"]);
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
        if !able || !root {
            assert!(
                std::env::var("LINERATE_REQUIRE_PEERS").as_deref() != Ok("1"),
                "network namespaces with nftables are required (LINERATE_REQUIRE_PEERS=1) but \
                 this needs root, `ip` and `nft` (apt-get install nftables iproute2)"
            );
            eprintln!("skipping: needs root, ip and nft");
            return None;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "lr-rel-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        sh(&["ip", "netns", "add", &name], None);
        let ns = Netns { name };
        sh(
            &[
                "ip", "netns", "exec", &ns.name, "ip", "link", "set", "lo", "up",
            ],
            None,
        );
        let rules = format!(
            "table inet loss {{\n  chain in {{\n    type filter hook input priority 0\n    \
             meta l4proto udp numgen random mod 1000 < {permille} counter drop\n  }}\n}}\n"
        );
        sh(
            &["ip", "netns", "exec", &ns.name, "nft", "-f", "-"],
            Some(&rules),
        );
        Some(ns)
    }

    /// `linerate` run inside the namespace.
    fn linerate(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, env!("CARGO_BIN_EXE_linerate")]);
        c
    }

    /// Datagrams the rule dropped so far.
    fn dropped(&self) -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "list", "ruleset"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        text.split("counter packets ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// A child killed (and reaped) if it is still running when dropped.
struct Guard(Option<Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits for `child` at most `limit`; kills it and panics after that.
fn wait_output(child: Child, limit: Duration, what: &str) -> Output {
    let mut g = Guard(Some(child));
    let end = Instant::now() + limit;
    loop {
        let c = g.0.as_mut().unwrap();
        if c.try_wait().unwrap().is_some() {
            return g.0.take().unwrap().wait_with_output().unwrap();
        }
        assert!(
            Instant::now() < end,
            "{what}: still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn(mut c: Command, args: &[&str], json: &Path, file: &Path) -> Child {
    c.args(["run", "-q", "--duration", "90s"])
        .args(args)
        .arg("--json")
        .arg(json)
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// One side's pipeline: bind `me`, connect `peer`, the stage `kind` with
/// `extra` endpoint keys.
fn side(kind: &str, me: u16, peer: u16, messages: u64, extra: &str) -> String {
    format!(
        "[pipeline]\npin = false\n[pool]\nbuffers = 16384\n\
         [port.u]\nkind = \"udp\"\nbind = \"127.0.0.1:{me}\"\nconnect = \"127.0.0.1:{peer}\"\n\
         rcvbuf = \"8 MiB\"\nsndbuf = \"8 MiB\"\n\
         [stage.s]\nkind = \"{kind}\"\nrx = \"u\"\ntx = \"u\"\nmessages = {messages}\nsize = \"4 KiB\"\n{extra}\n"
    )
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Runs receiver and sender (with the receiver's peer on `relay_to_rx` and
/// the sender's on `relay_to_tx` when a relay sits between them); checks
/// that both exit 0 and every message arrived once, intact.
#[allow(clippy::too_many_arguments)]
fn transfer(
    ns: Option<&Netns>,
    dir: &Path,
    tag: &str,
    extra: &str,
    messages: u64,
    (tx_port, rx_port): (u16, u16),
    (tx_peer, rx_peer): (u16, u16),
) -> f64 {
    let recv = util::write(
        dir,
        &format!("{tag}-rx.toml"),
        &side("reliable_rx", rx_port, rx_peer, messages, extra),
    );
    let send = util::write(
        dir,
        &format!("{tag}-tx.toml"),
        &side("reliable_tx", tx_port, tx_peer, messages, extra),
    );
    let (rj, sj) = (
        dir.join(format!("{tag}-rx.json")),
        dir.join(format!("{tag}-tx.json")),
    );
    let cmd = || ns.map_or_else(util::bin, Netns::linerate);
    let receiver = Guard(Some(spawn(cmd(), &[], &rj, &recv)));
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let sender = spawn(cmd(), &[], &sj, &send);
    let s = wait_output(sender, Duration::from_secs(120), &format!("{tag} sender"));
    let mut receiver = receiver;
    let r = wait_output(
        receiver.0.take().unwrap(),
        Duration::from_secs(30),
        &format!("{tag} receiver"),
    );
    let secs = start.elapsed().as_secs_f64();
    assert!(
        s.status.success() && r.status.success(),
        "{tag}: sender {:?} {}\nreceiver {:?} {}",
        s.status,
        String::from_utf8_lossy(&s.stderr),
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
    let rv = json(&rj);
    let check = &rv["stages"]["s"]["detail"]["check"];
    assert_eq!(check["ok"], messages, "{tag}: {rv}");
    for bad in ["corrupt", "duplicate", "out_of_order"] {
        assert_eq!(check[bad], 0, "{tag}: {bad} in {check}");
    }
    let sv = json(&sj);
    assert_eq!(sv["stages"]["s"]["detail"]["unacked"], 0, "{tag}: {sv}");
    secs
}

/// The matrix of key combinations over kernel loss in a namespace.
#[test]
fn kernel_loss_matrix_in_a_namespace() {
    let cells: [(&str, &str); 4] = [
        ("defaults", ""),
        ("usnic", "mode = \"usnic\""),
        ("sack-false", "sack = false"),
        ("ordered-false", "ordered = false"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for permille in [0u32, 10, 50, 200] {
        let Some(ns) = Netns::new(permille) else {
            return;
        };
        for (name, extra) in cells {
            let tag = format!("{name}-{permille}");
            let secs = transfer(
                Some(&ns),
                dir.path(),
                &tag,
                extra,
                300,
                (47201, 47202),
                (47202, 47201),
            );
            eprintln!("{tag}: {secs:.2} s");
        }
        if permille > 0 {
            assert!(ns.dropped() > 0, "the nftables rule dropped nothing");
        }
    }
}

/// The 20 % cell through an `impair` relay with 0-2 ms of jitter each way
/// (a jittery path between two processes), ours and usnic mode: both deliver
/// exactly once. (Their speed is measured by scripts/bench-reliable-netns, not asserted here.)
#[test]
fn jitter_and_loss_through_an_impair_relay_both_modes() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra) in [("ours", ""), ("usnic", "mode = \"usnic\"")] {
        let p: Vec<u16> = (0..4).map(|_| util::free_udp_port()).collect();
        let (tx, rx, relay_tx, relay_rx) = (p[0], p[1], p[2], p[3]);
        let relay = format!(
            "[pipeline]\nlcores = \"0-1\"\npin = false\n[pool]\nbuffers = 16384\n\
             [port.a]\nkind = \"udp\"\nbind = \"127.0.0.1:{relay_tx}\"\nconnect = \"127.0.0.1:{tx}\"\n\
             rcvbuf = \"8 MiB\"\nsndbuf = \"8 MiB\"\n\
             [port.b]\nkind = \"udp\"\nbind = \"127.0.0.1:{relay_rx}\"\nconnect = \"127.0.0.1:{rx}\"\n\
             rcvbuf = \"8 MiB\"\nsndbuf = \"8 MiB\"\n\
             [stage.forth]\nkind = \"impair\"\nlcore = 0\nrx = \"a\"\ntx = \"b\"\nloss = 0.2\n\
             jitter = {{ distribution = \"uniform\", min = \"0ms\", max = \"2ms\", order = \"keep\" }}\nseed = 1\n\
             [stage.back]\nkind = \"impair\"\nlcore = 1\nrx = \"b\"\ntx = \"a\"\nloss = 0.2\n\
             jitter = {{ distribution = \"uniform\", min = \"0ms\", max = \"2ms\", order = \"keep\" }}\nseed = 2\n"
        );
        let relay = util::write(dir.path(), &format!("relay-{name}.toml"), &relay);
        let _relay = Guard(Some(
            util::bin()
                .args(["run", "-q", "--duration", "120s"])
                .arg(&relay)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        std::thread::sleep(Duration::from_millis(300));
        let secs = transfer(
            None,
            dir.path(),
            &format!("relay-{name}"),
            extra,
            200,
            (tx, rx),
            (relay_tx, relay_rx),
        );
        eprintln!("{name} through the relay: {secs:.2} s");
    }
}

/// The sender dies (SIGKILL) mid-run: the receiver, waiting for messages,
/// hears nothing for `peer_timeout` and exits 1 within `peer_timeout` + 2 s,
/// naming the stage and the peer's address, with a JSON report of what it
/// received.
#[test]
fn a_killed_sender_ends_the_receiver_within_peer_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (util::free_udp_port(), util::free_udp_port());
    let extra = "peer_timeout = \"2s\"";
    let recv = util::write(
        dir.path(),
        "rx.toml",
        &side("reliable_rx", b, a, 10_000_000, extra),
    );
    let send = util::write(
        dir.path(),
        "tx.toml",
        &side("reliable_tx", a, b, 10_000_000, extra),
    );
    let rj = dir.path().join("rx.json");
    let receiver = spawn(util::bin(), &[], &rj, &recv);
    std::thread::sleep(Duration::from_millis(200));
    let mut sender = Guard(Some(spawn(
        util::bin(),
        &[],
        &dir.path().join("tx.json"),
        &send,
    )));
    std::thread::sleep(Duration::from_millis(1500));
    let mut s = sender.0.take().unwrap();
    assert!(s.try_wait().unwrap().is_none(), "the sender ended early");
    s.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    s.wait().unwrap();
    let r = wait_output(receiver, Duration::from_secs(15), "receiver");
    let took = killed.elapsed();
    assert_eq!(r.status.code(), Some(1), "{r:?}");
    assert!(
        took <= Duration::from_secs(4),
        "the receiver took {took:?} to notice"
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("reliable_rx stage `s`")
            && err.contains(&format!("127.0.0.1:{a}"))
            && err.contains("peer_timeout"),
        "{err}"
    );
    let v = json(&rj);
    let d = &v["stages"]["s"]["detail"];
    assert!(d["check"]["ok"].as_u64().unwrap() > 0, "{d}");
    assert!(d["failure"].as_str().unwrap().contains("peer_timeout"));
}
