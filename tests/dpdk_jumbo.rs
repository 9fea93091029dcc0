//! 9018-byte frames on dpdk ports whose mbufs hold them (`mbuf_size`):
//! a net_ring loop that reconciles exactly, net_pcap writing and reading them
//! back into the analyzer, and a frame larger than a port's mbufs refused at
//! check time, naming the port. Each run is its own process (the EAL starts
//! once per process).
#![cfg(feature = "dpdk")]

mod util;

const FRAME: u64 = 9018;
const CARRIED: u64 = FRAME - 4;

/// A dpdk port `name` on `device` with jumbo mbufs (fewer of them: the EAL
/// has 256 MB without hugepages).
fn port(name: &str, device: &str, mbuf_size: Option<u64>) -> String {
    let size = mbuf_size.map_or(String::new(), |s| format!("mbuf_size = {s}\n"));
    format!("[port.{name}]\nkind = \"dpdk\"\ndevice = \"{device}\"\nmbufs = 4095\n{size}")
}

#[test]
fn jumbo_frames_loop_through_net_ring_whole() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[pipeline]\nlcores = \"0-1\"\npin = false\n{}[pool]\nsize = \"10 KiB\"\n{}\
         [stage.gen]\nkind = \"generator\"\ntx = \"l\"\nlcore = 0\nframe = {FRAME}\nmax_lag = \"1s\"\n\
         [stage.ana]\nkind = \"analyzer\"\nrx = \"l\"\nlcore = 1\n",
        util::eal("\"--vdev=net_ring0\""),
        port("l", "net_ring0", Some(CARRIED)),
    );
    let file = util::write(dir.path(), "ring.toml", &text);
    let t = util::run_json(&["trial", "--rate", "2000 pps", "--duration", "1s"], &file);
    for k in ["offered", "sent", "received"] {
        assert_eq!(t[k], 2000, "{k}: {t}");
    }
    for k in [
        "lost",
        "duplicates",
        "reordered",
        "stale",
        "invalid_latency",
    ] {
        assert_eq!(t[k], 0, "{k}: {t}");
    }
    let l = &t["ports"]["l"];
    assert_eq!(l["rx_bytes"], 2000 * CARRIED, "{t}");
    assert_eq!(
        l["detail"]["copied_in"], 0,
        "built in the port's mbufs: {t}"
    );
    assert_eq!(l["detail"]["eth_ipackets"], 2000, "{t}");
}

#[test]
fn jumbo_frames_written_by_net_pcap_read_back_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("jumbo.pcap");
    let gen = format!(
        "[pipeline]\npin = false\n{}[pool]\nsize = \"10 KiB\"\n{}\
         [stage.gen]\nkind = \"generator\"\ntx = \"nic\"\ncount = 500\nframe = {FRAME}\n",
        util::eal(&format!("\"--vdev=net_pcap0,tx_pcap={}\"", cap.display())),
        port("nic", "net_pcap0", Some(CARRIED)),
    );
    let file = util::write(dir.path(), "gen.toml", &gen);
    let r = util::run_json(&["run", "-q", "--duration", "10s"], &file);
    assert_eq!(r["ports"]["nic"]["tx_packets"], 500, "{r}");
    let frames = util::capture(&cap);
    assert_eq!(frames.len(), 500);
    for (n, f) in frames.iter().enumerate() {
        assert_eq!(f.len() as u64, CARRIED, "frame {n}");
        util::check_udp_v4(f, n);
    }
    let ana = format!(
        "[pipeline]\npin = false\n{}{}[stage.ana]\nkind = \"analyzer\"\nrx = \"nic\"\n",
        util::eal(&format!(
            "\"--vdev=net_pcap0,rx_pcap={},tx_pcap=/dev/null\"",
            cap.display()
        )),
        port("nic", "net_pcap0", Some(CARRIED)),
    );
    let file = util::write(dir.path(), "ana.toml", &ana);
    let r = util::run_json(&["run", "-q", "--duration", "2s"], &file);
    let a = &r["stages"]["ana"];
    assert_eq!(a["bytes_in"], 500 * CARRIED, "{r}");
    let s = &a["detail"]["streams"][0];
    assert_eq!(
        (&s["received"], &s["unique"], &s["gaps"]),
        (&500.into(), &500.into(), &0.into()),
        "{r}"
    );
    assert_eq!(a["detail"]["foreign"], 0, "{r}");
}

#[test]
fn a_frame_larger_than_the_mbufs_is_refused_naming_the_port() {
    let dir = tempfile::tempdir().unwrap();
    for (mbuf_size, frame) in [(None, 2053), (Some(9000), FRAME)] {
        let text = format!(
            "{}[pool]\nsize = \"10 KiB\"\n{}[stage.gen]\nkind = \"generator\"\ntx = \"nic\"\nframe = {frame}\n",
            util::eal("\"--vdev=net_null0\""),
            port("nic", "net_null0", mbuf_size),
        );
        let file = util::write(dir.path(), "big.toml", &text);
        let out = util::bin().arg("check").arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "frame {frame}");
        let err = String::from_utf8_lossy(&out.stderr);
        let room = mbuf_size.unwrap_or(2048);
        assert!(
            err.contains(&format!(
                "a {frame}-byte frame does not fit port `nic`'s mbufs ({room} bytes of data room)"
            )) && err.contains(&format!(
                "`mbuf_size = {}` (or more) on [port.nic]",
                frame - 4
            )),
            "{err}"
        );
    }
}
