//! The Linux kernel as a real device under test: a router in a network
//! namespace between two veth pairs (scripts/kernel-dut), driven through DPDK's
//! net_af_packet with no static neighbour entry and no MAC address typed in.
//! The generator's port resolves the router (`gateway`); the analyzer's port
//! answers the router's ARP/NDP for its address.
//!
//! Needs root (namespaces, veths) and the `dpdk` feature. Without root the
//! tests say they were skipped and pass, unless LINERATE_REQUIRE_PEERS=1. Each
//! test uses its own namespace and interfaces (unique names), removes them even
//! when it fails, and runs linerate under `timeout`.
#![cfg(feature = "dpdk")]

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

mod util;

use util::kernel_dut::Dut;

/// One DPDK process polling at a time: the machine may have two cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// The kernel-dut pipeline on this router's interfaces: IPv4 or IPv6, one
/// way or both ways with flows over 16 source ports.
fn pipeline(dut: &Dut, v6: bool, bidir: bool) -> String {
    let n = &dut.name;
    let (gw_a, src_a, gw_b, src_b) = if v6 {
        ("fd00:1::1", "fd00:1::2", "fd00:2::1", "fd00:2::2")
    } else {
        ("10.1.0.1", "10.1.0.2", "10.2.0.1", "10.2.0.2")
    };
    let mut p = format!(
        r#"
[pipeline]
name = "kernel-dut-test"
lcores = "0-1"
{eal}
[port.a]
kind = "dpdk"
device = "net_af_packet0"
ip = ["10.1.0.2/24", "fd00:1::2/64"]

[port.b]
kind = "dpdk"
device = "net_af_packet1"
ip = ["10.2.0.2/24", "fd00:2::2/64"]

[stage.gen]
kind = "generator"
lcore = 1
tx = "a"
gateway = "{gw_a}"
src_ip = "{src_a}"
dst_ip = "{src_b}"
src_port = "1024-1039"

[stage.ana]
kind = "analyzer"
lcore = 0
rx = "b"
"#,
        eal = util::eal(&format!(
            "\"--vdev=net_af_packet0,iface={n}-a\", \"--vdev=net_af_packet1,iface={n}-b\""
        )),
    );
    if bidir {
        p.push_str(&format!(
            r#"
[stage.gen_back]
kind = "generator"
lcore = 0
tx = "b"
stream = 1
gateway = "{gw_b}"
src_ip = "{src_b}"
dst_ip = "{src_a}"
src_port = "2048-2063"

[stage.ana_back]
kind = "analyzer"
lcore = 1
rx = "a"
"#
        ));
    }
    p
}

/// Runs `linerate ARGS... --json OUT FILE` under `timeout`; the JSON.
fn linerate(args: &[&str], file: &Path, limit_s: u32) -> serde_json::Value {
    let dir = file.parent().unwrap();
    let json = dir.join("out.json");
    let out = Command::new("timeout")
        .arg(limit_s.to_string())
        .arg(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed ({:?}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn low_rate_trial_arrives_whole(v6: bool) {
    let test = if v6 { "trial_v6" } else { "trial_v4" };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up(test, &[], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", &pipeline(&dut, v6, false));
    let r = linerate(&["trial", "--rate", "2 kpps", "--duration", "1s"], &f, 120);
    let sent = r["sent"].as_u64().unwrap();
    assert!(sent > 0, "{r}");
    // Everything that left arrived, through the kernel's forwarding.
    assert_eq!(r["received"].as_u64(), Some(sent), "{r}\n{}", dut.stats());
    assert!(r["latency_ns"]["samples"].as_u64().unwrap() > 0, "{r}");
    assert_ne!(r["limited_by"], "dut", "{r}");
    // The router asked for the analyzer's address (no static neighbour) and
    // port b answered it; trial deltas may miss an answer given before the
    // trial, so look at the router's own view instead: it forwarded.
    let s = dut.stats();
    assert!(s["b"]["tx_packets"].as_u64().unwrap() >= sent, "{s}");
}

#[test]
fn low_rate_trial_through_the_kernel_arrives_whole_v4() {
    low_rate_trial_arrives_whole(false);
}

#[test]
fn low_rate_trial_through_the_kernel_arrives_whole_v6() {
    low_rate_trial_arrives_whole(true);
}

#[test]
fn short_search_against_the_kernel_finishes_with_bounds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up("search", &[], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", &pipeline(&dut, false, false));
    let r = linerate(
        &[
            "search",
            "--quiet",
            "--min-rate",
            "500 pps",
            "--max-rate",
            "50 kpps",
            "--initial-duration",
            "0.2",
            "--final-duration",
            "0.5",
            "--phases",
            "0",
            "--width",
            "0.1",
        ],
        &f,
        300,
    );
    let goals = r["outcome"]["goals"].as_array().unwrap();
    assert_eq!(goals.len(), 2, "{r}");
    for g in goals {
        assert!(
            g["lower_pps"].as_f64().is_some() || g["min_rate_fails"] == true,
            "goal without a bound: {g}"
        );
        assert_eq!(g["incomplete"], false, "{g}");
    }
    // Every lossy trial says where its loss was.
    for t in r["trials"].as_array().unwrap() {
        if t["received"].as_u64() < t["offered"].as_u64() {
            assert!(t["limited_by"].is_string(), "{t}");
        }
    }
}

#[test]
fn bidirectional_multi_flow_trial_against_the_kernel() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up("bidir", &[], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", &pipeline(&dut, false, true));
    let r = linerate(&["trial", "--rate", "4 kpps", "--duration", "1s"], &f, 120);
    let sent = r["sent"].as_u64().unwrap();
    assert!(sent > 0, "{r}");
    assert_eq!(r["received"].as_u64(), Some(sent), "{r}\n{}", dut.stats());
    // Both directions carried traffic: a stream each.
    let streams = r["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2, "{r}");
    for s in streams {
        assert!(s["received"].as_u64().unwrap() > 0, "{s}");
    }
    // Each port resolved its gateway and answered the router for its address.
    let s = dut.stats();
    for dev in ["a", "b"] {
        assert!(s[dev]["rx_packets"].as_u64().unwrap() > 0, "{s}");
    }
}

/// A receiver too slow for the traffic: its receive ring holds 8 frames
/// (net_af_packet's socket ring, `framecnt=8`; net_af_xdp's, `rx_desc = 8`),
/// and the analyzer polls on the generator's lcore, after each burst of 32 has
/// gone through the router (the kernel forwards inside our send call). The
/// kernel drops what the ring cannot hold; the trial must count those drops
/// as ours (`socket_rx_dropped` or `kernel_rx_dropped`, and `rx_dropped`) and
/// say the receiver, not the device, limited it.
fn full_receive_ring_is_blamed_on_our_receiver(xdp: bool) {
    let test = if xdp { "slowrx_xdp" } else { "slowrx" };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up(test, &[], &[]) else {
        return;
    };
    let n = &dut.name;
    let mut p = pipeline(&dut, false, false)
        .replace(
            "[stage.ana]\nkind = \"analyzer\"\nlcore = 0",
            "[stage.ana]\nkind = \"analyzer\"\nlcore = 1",
        )
        // Late, not unsent: the generator sends everything, in full bursts,
        // however long a loaded machine takes over the 100,000 packets (the
        // trial waits for the generator up to its `max_lag` past the end).
        .replace("[stage.gen]\n", "[stage.gen]\nmax_lag = \"60s\"\n");
    let counter = if xdp {
        p = p
            .replace(
                &format!("net_af_packet0,iface={n}-a\""),
                &format!("net_af_xdp0,iface={n}-a,start_queue=0,queue_count=1\""),
            )
            .replace(
                &format!("net_af_packet1,iface={n}-b\""),
                &format!("net_af_xdp1,iface={n}-b,start_queue=0,queue_count=1\""),
            )
            .replace("device = \"net_af_packet0\"", "device = \"net_af_xdp0\"")
            .replace(
                "device = \"net_af_packet1\"",
                "device = \"net_af_xdp1\"\nrx_desc = 8",
            );
        "kernel_rx_dropped"
    } else {
        p = p.replace(
            &format!("iface={n}-b\""),
            &format!("iface={n}-b,framecnt=8\""),
        );
        "socket_rx_dropped"
    };
    assert!(
        p.contains("max_lag") && (p.contains("framecnt=8") || p.contains("rx_desc = 8")),
        "{p}"
    );
    assert_eq!(p.contains("net_af_xdp1"), xdp, "{p}");
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", &p);
    let before = dut.stats();
    let r = linerate(
        &["trial", "--rate", "2 Mpps", "--duration", "0.05s"],
        &f,
        120,
    );
    let after = dut.stats();
    let sent = r["sent"].as_u64().unwrap();
    let lost = r["lost"].as_u64().unwrap();
    let dropped = r["rx_dropped"].as_u64().unwrap();
    let kernel = r["ports"]["b"]["detail"][counter].as_u64().unwrap();
    assert_eq!(r["unsent"].as_u64(), Some(0), "{r}");
    assert!(kernel > 0 && dropped >= kernel, "{r}");
    // The router forwarded what we sent (its own counters): the loss was ours.
    let forwarded =
        after["b"]["tx_packets"].as_u64().unwrap() - before["b"]["tx_packets"].as_u64().unwrap();
    assert!(
        forwarded >= sent,
        "router forwarded {forwarded} of {sent}: {after}"
    );
    // Every lost packet is one the kernel dropped at our ring, no more.
    assert!(dropped <= lost + 8, "{r}");
    assert_eq!(r["limited_by"], "receiver", "{r}");
}

#[test]
fn a_full_af_packet_receive_ring_is_blamed_on_our_receiver_not_the_dut() {
    full_receive_ring_is_blamed_on_our_receiver(false);
}

#[test]
fn a_full_af_xdp_receive_ring_is_blamed_on_our_receiver_not_the_dut() {
    full_receive_ring_is_blamed_on_our_receiver(true);
}

/// Jumbo frames through the kernel: the router built with `--mtu 9000` on
/// every interface forwards 9018-byte frames (9000-byte IP packets) whole.
/// net_af_packet's ring frames (`framesz`) and the ports' mbufs (`mbuf_size`)
/// hold them; a router left at MTU 1500 would drop or fragment every one.
#[test]
fn jumbo_frames_cross_the_kernel_at_mtu_9000() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up("jumbo", &[], &[]) else {
        return;
    };
    // `up` again, with the MTU (it removes the plain router first).
    let out = dut.script(60, "up", &["--mtu", "9000"]);
    assert!(
        out.status.success(),
        "kernel-dut up --mtu: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = &dut.name;
    let ring = "blocksz=20480,framesz=10240,framecnt=512";
    let p = pipeline(&dut, false, false)
        .replace(&format!("iface={n}-a\""), &format!("iface={n}-a,{ring}\""))
        .replace(&format!("iface={n}-b\""), &format!("iface={n}-b,{ring}\""))
        .replace(
            "device = \"net_af_packet0\"\n",
            "device = \"net_af_packet0\"\nmbufs = 4095\nmbuf_size = 10240\n",
        )
        .replace(
            "device = \"net_af_packet1\"\n",
            "device = \"net_af_packet1\"\nmbufs = 4095\nmbuf_size = 10240\n",
        )
        .replace(
            "[stage.gen]\n",
            "[stage.gen]\nframe = 9018\nmax_lag = \"1s\"\n",
        )
        + "[pool]\nsize = \"10 KiB\"\n";
    assert_eq!(p.matches("mbuf_size").count(), 2, "{p}");
    assert_eq!(p.matches("framesz=10240").count(), 2, "{p}");
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", &p);
    let r = linerate(&["trial", "--rate", "2 kpps", "--duration", "1s"], &f, 120);
    assert_eq!(r["sent"], 2000, "{r}");
    assert_eq!(r["received"], 2000, "{r}\n{}", dut.stats());
    assert_eq!(r["ports"]["a"]["detail"]["eth_obytes"], 2000 * 9014, "{r}");
    let s = dut.stats();
    assert!(s["b"]["tx_packets"].as_u64().unwrap() >= 2000, "{s}");
}

/// A short suite through the kernel router, two frame sizes one after the
/// other in one process (the ports open again for the second): every part in
/// the report, a CSV row per size, an HTML page with its plots.
#[test]
fn short_suite_against_the_kernel_reports_every_part() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dut) = Dut::up("suite", &[], &[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", &pipeline(&dut, false, false));
    let (csv, html) = (dir.path().join("s.csv"), dir.path().join("s.html"));
    let r = linerate(
        &[
            "suite",
            "--quiet",
            "--frames",
            "64,512",
            "--quick",
            "--b2b-trials",
            "2",
            "--min-rate",
            "500 pps",
            "--max-rate",
            "30 kpps",
            "--csv",
            csv.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
        &f,
        600,
    );
    let sizes = r["sizes"].as_array().unwrap();
    let frames: Vec<_> = sizes.iter().map(|s| s["frame"].as_str().unwrap()).collect();
    assert_eq!(frames, ["64", "512"], "{r}");
    for s in sizes {
        let done: Vec<_> = s["done"].as_array().unwrap().iter().collect();
        assert_eq!(done.len(), 4, "every part done: {s}");
        assert_eq!(
            s["throughput"]["outcome"]["goals"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        // Latency at no load, 10, 50 and 90 % of the PDR and at the NDR, each
        // with its streams (percentiles and delay variation).
        let latency = s["latency"].as_array().unwrap();
        assert_eq!(latency.len(), 5, "{s}");
        for l in latency {
            assert!(l["streams"][0]["pdv_ns"]["p99"].is_u64(), "{l}");
        }
        assert!(
            s["back_to_back"].is_object() || s["skipped"]["b2b"].is_string(),
            "{s}"
        );
        assert!(!s["loss_curve"].as_array().unwrap().is_empty(), "{s}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(rows.iter().all(|r| r.len() == rows[0].len()), "{text}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.matches("<svg").count() >= 4);
}
