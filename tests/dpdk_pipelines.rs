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

/// Frames a generator built straight in mbufs, written out by net_pcap and
/// checked by an independent parser (etherparse): lengths and both
/// checksums, the stamp's sequence in order, and the last-in-burst flag on
/// every burst's last packet only.
fn generated_frames_are_valid(stage: &str, expect_len: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("gen.pcap");
    let text = format!(
        "[pipeline]\npin = false\n{}[port.nic]\nkind = \"dpdk\"\ndevice = \"net_pcap0\"\n[stage.gen]\nkind = \"generator\"\ntx = \"nic\"\ncount = 2000\nburst = 32\n{stage}",
        util::eal(&format!("\"--vdev=net_pcap0,tx_pcap={}\"", cap.display()))
    );
    let file = util::write(dir.path(), "gen.toml", &text);
    let r = util::run_json(&["run", "-q", "--duration", "5s"], &file);
    assert_eq!(r["ports"]["nic"]["tx_packets"], 2000, "{r}");
    let frames = util::capture(&cap);
    assert_eq!(frames.len(), 2000);
    let mut lasts = 0;
    for (n, f) in frames.iter().enumerate() {
        if let Some(len) = expect_len {
            assert_eq!(f.len(), len, "frame {n}");
        }
        let (_, _, payload) = util::check_udp_v4(f, n);
        let st = linerate::traffic::stamp::Repr::parse(
            &linerate::traffic::stamp::Stamp::new_unchecked(payload),
        )
        .unwrap();
        assert_eq!(st.seq, n as u64, "frame {n}");
        if st.flags & linerate::traffic::stamp::FLAG_LAST_IN_BURST != 0 {
            lasts += 1;
        }
    }
    // Bursts of up to 32 (fewer when pacing or the end cut one short).
    assert!((2000 / 32..=2000).contains(&lasts), "{lasts} bursts");
    assert_ne!(frames[2000 - 1][..], frames[2000 - 2][..]);
}

#[test]
fn one_flow_frames_built_in_mbufs_are_valid() {
    generated_frames_are_valid("frame = 64\n", Some(60));
}

#[test]
fn imix_multi_flow_frames_built_in_mbufs_are_valid() {
    generated_frames_are_valid(
        "frame = \"imix\"\nsrc_ip = \"10.0.0.1-10.0.0.3\"\ndst_port = \"7-11\"\n",
        None,
    );
}
