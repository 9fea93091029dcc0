//! 9018-byte frames, the largest the generator builds, through the mem wire,
//! a pair of udp sockets and a capture: every frame arrives whole and stamped
//! (an analyzer counts a frame as received only when it finds its stamp).
//! The dpdk ports' jumbo frames are in `dpdk_jumbo.rs`.

mod util;

use std::path::Path;

/// The frame size, FCS included, and the bytes a port carries of it.
const FRAME: u64 = 9018;
const CARRIED: u64 = FRAME - 4;

/// A trial of `n` packets on `file` (`--rate n/s` for 1 s): its JSON.
fn trial(file: &Path, n: u64) -> serde_json::Value {
    let rate = format!("{n} pps");
    util::run_json(&["trial", "--rate", &rate, "--duration", "1s"], file)
}

/// Every packet offered was sent and received, once, stamped and in order.
fn reconciles(t: &serde_json::Value, n: u64) {
    assert_eq!(t["offered"], n, "{t}");
    assert_eq!(t["sent"], n, "{t}");
    assert_eq!(t["received"], n, "{t}");
    assert_eq!(t["lost"], 0, "{t}");
    for k in ["duplicates", "reordered", "stale", "invalid_latency"] {
        assert_eq!(t[k], 0, "{k}: {t}");
    }
    assert_eq!(t["streams"][0]["received"], n, "{t}");
}

/// The generator and analyzer around `ports`, with pool buffers for jumbo frames.
fn pipeline(ports: &str, tx: &str, rx: &str) -> String {
    format!(
        r#"[pipeline]
lcores = "0-1"
pin = false
[pool]
size = "10 KiB"
{ports}
[stage.gen]
kind = "generator"
lcore = 0
tx = "{tx}"
frame = {FRAME}
# Punctuality is not what is tested: late packets go out late.
max_lag = "1s"
[stage.ana]
kind = "analyzer"
lcore = 1
rx = "{rx}"
"#
    )
}

#[test]
fn jumbo_frames_cross_the_mem_wire() {
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(
        dir.path(),
        "mem.toml",
        &pipeline("[port.dut]\nkind = \"mem\"\nring = 8192\n", "dut", "dut"),
    );
    let t = trial(&f, 2000);
    reconciles(&t, 2000);
    assert_eq!(t["ports"]["dut"]["rx_bytes"], 2000 * CARRIED, "{t}");
}

#[test]
fn jumbo_frames_cross_udp_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (util::free_udp_port(), util::free_udp_port());
    let ports = format!(
        "[port.out]\nkind = \"udp\"\nbind = \"127.0.0.1:{a}\"\nconnect = \"127.0.0.1:{b}\"\nsndbuf = \"4 MiB\"\n\
         [port.in]\nkind = \"udp\"\nbind = \"127.0.0.1:{b}\"\nrcvbuf = \"16 MiB\"\n"
    );
    let f = util::write(dir.path(), "udp.toml", &pipeline(&ports, "out", "in"));
    let t = trial(&f, 1000);
    reconciles(&t, 1000);
    assert_eq!(t["ports"]["in"]["rx_bytes"], 1000 * CARRIED, "{t}");
}

#[test]
fn jumbo_frames_written_to_a_capture_read_back_into_the_analyzer() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("jumbo.pcap");
    let gen = format!(
        "[pipeline]\npin = false\n[pool]\nsize = \"10 KiB\"\n[port.cap]\nkind = \"pcap\"\nwrite = \"{}\"\n\
         [stage.gen]\nkind = \"generator\"\ntx = \"cap\"\ncount = 1000\nframe = {FRAME}\n",
        cap.display()
    );
    let f = util::write(dir.path(), "gen.toml", &gen);
    let r = util::run_json(&["run", "-q", "--duration", "10s"], &f);
    assert_eq!(r["ports"]["cap"]["tx_packets"], 1000, "{r}");
    let frames = util::capture(&cap);
    assert_eq!(frames.len(), 1000);
    for (n, frame) in frames.iter().enumerate() {
        assert_eq!(frame.len() as u64, CARRIED, "frame {n}");
        util::check_udp_v4(frame, n);
    }
    let ana = format!(
        "[pipeline]\npin = false\n[pool]\nsize = \"10 KiB\"\n[port.cap]\nkind = \"pcap\"\nread = \"{}\"\n\
         [stage.ana]\nkind = \"analyzer\"\nrx = \"cap\"\n",
        cap.display()
    );
    let f = util::write(dir.path(), "ana.toml", &ana);
    let r = util::run_json(&["run", "-q", "--duration", "10s"], &f);
    let a = &r["stages"]["ana"];
    assert_eq!(a["packets_in"], 1000, "{r}");
    assert_eq!(a["bytes_in"], 1000 * CARRIED, "{r}");
    let d = &a["detail"];
    assert_eq!((&d["foreign"], &d["stale"]), (&0.into(), &0.into()), "{r}");
    let s = &d["streams"][0];
    assert_eq!(
        (&s["received"], &s["unique"], &s["gaps"]),
        (&1000.into(), &1000.into(), &0.into()),
        "{r}"
    );
}

#[test]
fn a_frame_larger_than_the_pool_buffers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = pipeline("[port.dut]\nkind = \"mem\"\n", "dut", "dut").replace("10 KiB", "8 KiB");
    let f = util::write(dir.path(), "small.toml", &text);
    let out = util::bin().arg("check").arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a 9018-byte frame does not fit a pool buffer"),
        "{err}"
    );
}
