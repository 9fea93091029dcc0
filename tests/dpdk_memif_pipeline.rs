//! dpdk-testpmd as an external peer over net_memif: every packet a capture
//! sends through it comes back intact, in order and in count. A test binary
//! of its own, so nothing else competes with testpmd for the two cores.
#![cfg(feature = "dpdk")]

mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

fn run_json(args: &[&str], file: &Path) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = util::bin()
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn eal(extra: &str) -> String {
    format!("[eal]\nargs = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"-l\", \"0\", \"--no-telemetry\", \"--log-level=lib.eal:error\", {extra}]\n")
}

fn capture(path: &Path) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// A capture of `count` generated IMIX frames, recorded at a steady 5 kpps, so
/// replaying it at its recorded pace does not burst (a 1024-slot memif ring
/// then absorbs a peer that loses its core for 200 ms on a busy machine).
fn record(dir: &Path, count: u32) -> std::path::PathBuf {
    let cap = dir.join("gen.pcap");
    let text = format!(
        "[pipeline]\npin = false\n[port.cap]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.gen]\nkind = \"generator\"\ntx = \"cap\"\ncount = {count}\nframe = \"imix\"\nrate = \"5 kpps\"\n",
        cap.display()
    );
    util::run_text("rec.toml", &text, Duration::from_secs(30));
    cap
}

#[test]
fn dpdk_testpmd_loops_every_packet_back_over_memif() {
    if Command::new("dpdk-testpmd")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        assert!(
            std::env::var("LINERATE_REQUIRE_PEERS").is_err(),
            "dpdk-testpmd is required (apt-get install dpdk)"
        );
        eprintln!("dpdk-testpmd not installed: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("memif.sock");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dpdk-testpmd-memif.sh");
    let mut testpmd = Command::new("bash")
        .arg(&script)
        .arg(&sock)
        .arg("io")
        .arg("0-1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..100 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(sock.exists(), "testpmd did not create its memif socket");
    let cap = record(dir.path(), 2000);
    let back = dir.path().join("back.pcap");
    let memif = format!(
        "\"--vdev=net_memif0,role=client,socket={},socket-abstract=no\"",
        sock.display()
    );
    // The receiving stage first: a memif client posts its receive buffers when
    // polled, and the first frame testpmd returns must find one.
    let text = format!(
        "[pipeline]\nlcores = \"0\"\npin = false\n{}[port.m]\nkind = \"dpdk\"\ndevice = \"net_memif0\"\n[port.src]\nkind = \"pcap\"\nread = \"{}\"\npace = \"recorded\"\n[port.dst]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.in]\nkind = \"forward\"\nlcore = 0\nrx = \"m\"\ntx = \"dst\"\n[stage.out]\nkind = \"forward\"\nlcore = 0\nrx = \"src\"\ntx = \"m\"\n",
        eal(&memif),
        cap.display(),
        back.display()
    );
    let file = util::write(dir.path(), "memif.toml", &text);
    let r = run_json(
        &[
            "run",
            "-q",
            "--duration",
            "10s",
            "--drain-timeout",
            "5s",
            "--drain-quiet",
            "1s",
        ],
        &file,
    );
    let _ = testpmd.kill();
    let _ = testpmd.wait();
    let sent = capture(&cap);
    let got = capture(&back);
    assert_eq!(r["ports"]["m"]["tx_packets"], 2000, "{r}");
    if got.len() != sent.len() {
        let missing: Vec<usize> = (0..sent.len())
            .filter(|i| !got.contains(&sent[*i]))
            .collect();
        panic!(
            "every packet should come back; missing {:?} of {}: {r}",
            missing,
            sent.len()
        );
    }
    assert_eq!(got, sent, "and intact, in order");
}
