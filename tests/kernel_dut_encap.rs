//! The Linux kernel as a device under test for encapsulated traffic
//! (scripts/kernel-dut --mode bridge and --mode vxlan), driven through DPDK's
//! net_af_packet: the analyzer's per-VLAN counts equal the bridge's own
//! nftables counters, and the kernel's VXLAN device takes the generator's
//! VXLAN frames (flags 0x08) and refuses the same frames with other flags.
//!
//! Needs root (namespaces, veths, nftables) and the `dpdk` feature. Without
//! root the tests say they were skipped and pass, unless
//! LINERATE_REQUIRE_PEERS=1. Each test uses its own namespace and interfaces
//! (unique names), removes them even when it fails, and runs linerate under
//! `timeout`.
#![cfg(feature = "dpdk")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

mod util;

use util::kernel_dut::Dut;

/// One DPDK process polling at a time: the machine may have two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// A shipped pipeline made to use this DUT's interfaces.
fn shipped(dut: &Dut, file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("pipelines")
        .join(file);
    std::fs::read_to_string(path)
        .unwrap()
        .replace("iface=lrdut-", &format!("iface={}-", dut.name))
}

/// Runs `linerate ARGS... [--json OUT] FILE` under `timeout`; the JSON, if asked.
fn linerate(args: &[&str], file: &Path, limit_s: u32, json: bool) -> serde_json::Value {
    let out_json = file.with_extension("json");
    let mut cmd = Command::new("timeout");
    cmd.arg(limit_s.to_string())
        .arg(env!("CARGO_BIN_EXE_linerate"))
        .args(args);
    if json {
        cmd.arg("--json").arg(&out_json);
    }
    let out = cmd.arg(file).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed ({:?}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !json {
        return serde_json::Value::Null;
    }
    serde_json::from_str(&std::fs::read_to_string(&out_json).unwrap()).unwrap()
}

fn count(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[test]
fn the_bridge_counts_per_vlan_what_the_analyzer_counts() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up(
        "bridge",
        &["nft"],
        &["--mode", "bridge", "--vlans", "100-107"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "vlan.toml", &shipped(&dut, "trial-vlan.toml"));
    let before = dut.stats();
    let r = linerate(
        &["trial", "--rate", "4 kpps", "--duration", "1s"],
        &f,
        120,
        true,
    );
    let after = dut.stats();
    let sent = count(&r["sent"]);
    assert!(sent > 0, "{r}");
    assert_eq!(count(&r["received"]), sent, "{r}\n{after}");
    assert_eq!(count(&r["encap"]["unexpected_encap"]), 0, "{r}");
    let ours = r["encap"]["by_id"].as_object().unwrap();
    assert_eq!(ours.len(), 8, "{r}");
    let mut total = 0;
    for vid in 100..108 {
        let theirs =
            count(&after["vlan"][vid.to_string()]) - count(&before["vlan"][vid.to_string()]);
        let mine = count(&ours[&format!("vlan {vid}")]);
        assert_eq!(
            mine, theirs,
            "VLAN {vid}: analyzer {mine}, nftables {theirs}\n{r}\n{after}"
        );
        total += mine;
    }
    assert_eq!(total, sent, "the per-VLAN counts sum to what was received");
}

/// The VXLAN frames a generator with `vni` writes to a pcap, with their
/// VXLAN flags byte set to `flags`.
fn vxlan_capture(dir: &Path, vni: u32, flags: u8, count: u32) -> PathBuf {
    let cap = dir.join(format!("vx{flags:02x}.pcap"));
    let text = format!(
        "[pipeline]\npin = false\n[port.cap]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.gen]\nkind = \"generator\"\ntx = \"cap\"\ncount = {count}\nrate = \"10 kpps\"\nmax_lag = \"1s\"\nsrc_ip = \"10.3.0.1\"\ndst_ip = \"10.3.0.2\"\nframe = 128\nvxlan = {{ vni = {vni}, src = \"10.1.0.2\", dst = \"10.1.0.1\", dst_mac = \"02:00:00:00:0a:01\" }}\n",
        cap.display()
    );
    util::run_text("vxcap.toml", &text, std::time::Duration::from_secs(30));
    let frames = util::capture(&cap);
    assert_eq!(frames.len(), count as usize);
    // Outer Ethernet (14), IPv4 (20) and UDP (8): the VXLAN flags follow.
    let mut w = pcap_file::pcap::PcapWriter::new(std::fs::File::create(&cap).unwrap()).unwrap();
    for (i, mut f) in frames.into_iter().enumerate() {
        assert_eq!(f[42], 0x08, "the generator sets the I flag");
        f[42] = flags;
        let p = pcap_file::pcap::PcapPacket::new(
            std::time::Duration::from_micros(100 * i as u64),
            f.len() as u32,
            &f,
        );
        w.write_packet(&p).unwrap();
    }
    cap
}

#[test]
fn the_kernel_vxlan_device_takes_our_header_and_refuses_other_flags() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up("vxlan", &["nft"], &["--mode", "vxlan", "--vni", "100"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // A whole trial through the tunnel end: everything arrives, decapsulated.
    let f = util::write(dir.path(), "vx.toml", &shipped(&dut, "trial-vxlan.toml"));
    let r = linerate(
        &["trial", "--rate", "2 kpps", "--duration", "1s"],
        &f,
        120,
        true,
    );
    let sent = count(&r["sent"]);
    assert!(sent > 0, "{r}");
    assert_eq!(count(&r["received"]), sent, "{r}\n{}", dut.stats());
    assert_eq!(count(&r["encap"]["unexpected_encap"]), 0, "{r}");
    // The same frames replayed with their flags byte as the generator wrote
    // it (0x08) and with a reserved bit set too (0x0c) or the I flag clear.
    let n = 200u64;
    let eal = format!(
        "[eal]\nargs = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"-l\", \"0\", \"--no-telemetry\", \"--log-level=lib.eal:error\", \"--vdev=net_af_packet0,iface={}-a\"]\n",
        dut.name
    );
    for flags in [0x08u8, 0x0c, 0x00] {
        let cap = vxlan_capture(dir.path(), 100, flags, n as u32);
        let text = format!(
            "{eal}[pipeline]\nlcores = \"0\"\npin = false\n[port.cap]\nkind = \"pcap\"\nread = \"{}\"\npace = \"recorded\"\n[port.a]\nkind = \"dpdk\"\ndevice = \"net_af_packet0\"\n[stage.replay]\nkind = \"forward\"\nlcore = 0\nrx = \"cap\"\ntx = \"a\"\n",
            cap.display()
        );
        let f = util::write(dir.path(), "replay.toml", &text);
        let before = dut.stats();
        linerate(&["run", "--quiet", "--duration", "5s"], &f, 60, false);
        // The bridge's forwarding runs inside the send; let softirqs finish.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = dut.stats();
        let d = |dev: &str, k: &str| count(&after[dev][k]) - count(&before[dev][k]);
        assert_eq!(d("a", "rx_packets"), n, "flags {flags:#04x}: {after}");
        if flags == 0x08 {
            assert_eq!(d("b", "tx_packets"), n, "decapsulated and sent on: {after}");
            assert_eq!(d("vx0", "rx_errors"), 0, "{after}");
        } else {
            assert_eq!(
                d("b", "tx_packets"),
                0,
                "flags {flags:#04x} refused: {after}"
            );
        }
        if flags == 0x0c {
            assert_eq!(
                d("vx0", "rx_errors"),
                n,
                "a reserved flag is a frame error: {after}"
            );
        }
    }
}
