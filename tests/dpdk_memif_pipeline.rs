//! dpdk-testpmd as an external peer over net_memif: every packet a capture
//! sends through it comes back intact, in order and in count. A test binary
//! of its own, so nothing else competes with testpmd for the two cores.
#![cfg(feature = "dpdk")]

mod util;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

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
    let cap = util::record(dir.path(), 2000);
    let back = dir.path().join("back.pcap");
    let memif = format!(
        "\"--vdev=net_memif0,role=client,socket={},socket-abstract=no\"",
        sock.display()
    );
    // The receiving stage first: a memif client posts its receive buffers when
    // polled, and the first frame testpmd returns must find one.
    let text = format!(
        "[pipeline]\nlcores = \"0\"\npin = false\n{}[port.m]\nkind = \"dpdk\"\ndevice = \"net_memif0\"\n[port.src]\nkind = \"pcap\"\nread = \"{}\"\npace = \"recorded\"\n[port.dst]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.in]\nkind = \"forward\"\nlcore = 0\nrx = \"m\"\ntx = \"dst\"\n[stage.out]\nkind = \"forward\"\nlcore = 0\nrx = \"src\"\ntx = \"m\"\n",
        util::eal(&memif),
        cap.display(),
        back.display()
    );
    let file = util::write(dir.path(), "memif.toml", &text);
    let r = util::run_json(
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
    let sent = util::capture(&cap);
    let got = util::capture(&back);
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
