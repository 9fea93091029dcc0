//! DPDK ports on real pipelines, each in its own process (the EAL starts
//! once per process): net_null forwarding, net_ring trials, a capture
//! replayed through net_pcap, and bad EAL arguments. dpdk-testpmd as a peer is
//! in `dpdk_memif_pipeline.rs`, a test binary of its own so it runs alone.
#![cfg(feature = "dpdk")]

mod util;

#[test]
fn null_forwarding_is_zero_copy_and_reconciles() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\npin = false\n{}[port.a]\nkind = \"dpdk\"\ndevice = \"net_null0\"\n[port.b]\nkind = \"dpdk\"\ndevice = \"net_null1\"\n[stage.fwd]\nkind = \"forward\"\nrx = \"a\"\ntx = \"b\"\n",
        util::eal("\"--vdev=net_null0\", \"--vdev=net_null1\"")
    );
    let file = util::write(dir.path(), "null.toml", &text);
    let r = util::run_json(&["run", "-q", "--duration", "500ms"], &file);
    let fwd = &r["stages"]["fwd"];
    let (a, b) = (&r["ports"]["a"], &r["ports"]["b"]);
    assert!(fwd["packets_in"].as_u64().unwrap() > 1000, "{r}");
    assert_eq!(fwd["packets_in"], a["rx_packets"]);
    assert_eq!(
        fwd["packets_out"].as_u64().unwrap() + fwd["dropped"].as_u64().unwrap(),
        fwd["packets_in"].as_u64().unwrap()
    );
    assert_eq!(b["tx_packets"], fwd["packets_out"]);
    assert_eq!(
        a["detail"]["eth_ipackets"], a["rx_packets"],
        "our count agrees with rte_eth_stats"
    );
    assert_eq!(b["detail"]["eth_opackets"], b["tx_packets"]);
    assert_eq!(
        b["detail"]["copied_in"], 0,
        "mbufs forwarded without a copy"
    );
    assert_eq!(
        a["detail"]["mbufs_in_use"], 0,
        "every mbuf back in its pool"
    );
}

#[test]
fn ring_loop_trial_counts_every_packet() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nlcores = \"0-1\"\npin = false\n{}[port.l]\nkind = \"dpdk\"\ndevice = \"net_ring0\"\nrx_desc = 4096\ntx_desc = 4096\n[stage.gen]\nkind = \"generator\"\ntx = \"l\"\nlcore = 0\nframe = \"imix\"\n[stage.ana]\nkind = \"analyzer\"\nrx = \"l\"\nlcore = 1\n",
        util::eal("\"--vdev=net_ring0\"")
    );
    let file = util::write(dir.path(), "ring.toml", &text);
    let r = util::run_json(
        &[
            "trial",
            "--rate",
            "50 kpps",
            "--duration",
            "1s",
            "--repeat",
            "2",
        ],
        &file,
    );
    for t in r.as_array().unwrap() {
        assert_eq!(t["offered"], 50_000, "{t}");
        assert_eq!(
            t["received"].as_u64().unwrap(),
            t["sent"].as_u64().unwrap(),
            "{t}"
        );
        assert_eq!(t["duplicates"], 0);
        assert_eq!(t["invalid_latency"], 0);
        assert!(t["latency_ns"]["samples"].as_u64().unwrap() > 0);
        assert_eq!(
            t["ports"]["l"]["detail"]["copied_in"], 0,
            "the generator builds its frames in the port's mbufs: no copy"
        );
    }
}

#[test]
fn a_capture_from_the_pcap_port_reads_back_through_net_pcap() {
    let dir = tempfile::tempdir().unwrap();
    let cap = util::record(dir.path(), 500);
    let out = dir.path().join("back.pcap");
    let text = format!(
        "[pipeline]\npin = false\n{}[port.nic]\nkind = \"dpdk\"\ndevice = \"net_pcap0\"\n[port.w]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.fwd]\nkind = \"forward\"\nrx = \"nic\"\ntx = \"w\"\n",
        util::eal(&format!("\"--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null\"", cap.display())),
        out.display()
    );
    let file = util::write(dir.path(), "np.toml", &text);
    let r = util::run_json(&["run", "-q", "--duration", "1s"], &file);
    assert_eq!(r["ports"]["nic"]["rx_packets"], 500, "{r}");
    assert_eq!(util::capture(&cap), util::capture(&out));
}

#[test]
fn bad_eal_arguments_exit_2_with_the_eal_reason() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!("{}[port.a]\nkind = \"dpdk\"\ndevice = \"net_nope0\"\n[stage.k]\nkind = \"sink\"\nrx = \"a\"\n", util::eal("\"--vdev=net_no_such_driver0\""));
    let file = util::write(dir.path(), "bad.toml", &text);
    let out = util::bin()
        .args(["run", "-q", "--duration", "1s"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the EAL did not start") && err.contains("net_no_such_driver0"),
        "{err}"
    );
}
