//! Write a capture, replay it, write it again: the packets are byte-identical,
//! and tcpdump reads the file when it is installed.

mod util;

use std::time::Duration;

fn packets(path: &std::path::Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// A pipeline that replays the capture `read` (with the pcap port's extra
/// `keys`, one per line) through a forward stage into the capture `write`.
fn replay_pipeline(read: &std::path::Path, keys: &str, write: &std::path::Path) -> String {
    format!(
        r#"
[pipeline]
pin = false
[port.src]
kind = "pcap"
read = "{}"
{keys}[port.dst]
kind = "pcap"
write = "{}"
[stage.fwd]
kind = "forward"
rx = "src"
tx = "dst"
"#,
        read.display(),
        write.display()
    )
}

#[test]
fn pcap_write_then_read_back_identical() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.pcap");
    let second = dir.path().join("second.pcap");
    let gen = format!(
        r#"
[pipeline]
pin = false
[port.cap]
kind = "pcap"
write = "{}"
[stage.src]
kind = "source"
tx = "cap"
count = 1000
frame = 200
"#,
        first.display()
    );
    let r = util::run_text("gen.toml", &gen, Duration::from_secs(30));
    assert_eq!(r.ports["cap"].tx_packets, 1000);
    let replay = replay_pipeline(&first, "", &second);
    let r = util::run_text("replay.toml", &replay, Duration::from_secs(30));
    assert_eq!(
        r.stopped_by,
        Some(linerate::runtime::run::StopReason::Finished)
    );
    let (a, b) = (packets(&first), packets(&second));
    assert_eq!(a.len(), 1000);
    assert_eq!(a, b);
    assert!(a.iter().all(|p| p.len() == 196));
    if let Ok(out) = std::process::Command::new("tcpdump")
        .arg("-nr")
        .arg(&second)
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.lines().count(), 1000);
        assert!(
            text.contains("10.0.0.1.1024 > 10.0.0.2.1024: UDP"),
            "{text:.200}"
        );
    } else {
        eprintln!("tcpdump not installed: skipped reading the capture with it");
    }
}

/// Packets and timestamps (ns) of a capture.
fn timed(path: &std::path::Path) -> Vec<(u64, Vec<u8>)> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        out.push((p.timestamp.as_nanos() as u64, p.data.into_owned()));
    }
    out
}

#[test]
fn replay_at_a_set_rate_with_a_vlan_tag() {
    let dir = tempfile::tempdir().unwrap();
    // 100 frames recorded at 5 kpps, replayed 200 times at 10 kpps: 2 s.
    let cap = util::record(dir.path(), 100);
    let out = dir.path().join("out.pcap");
    let keys = "pace = \"rate\"\nrate = \"10 kpps\"\nrepeat = 200\nvlan = 100\n";
    let replay = replay_pipeline(&cap, keys, &out);
    let r = util::run_text("rate.toml", &replay, Duration::from_secs(30));
    assert_eq!(
        r.stopped_by,
        Some(linerate::runtime::run::StopReason::Finished)
    );
    let (orig, got) = (packets(&cap), timed(&out));
    assert_eq!(got.len(), 20_000);
    // The rate: 19,999 gaps over the span from the first frame to the last.
    let span = (got[got.len() - 1].0 - got[0].0) as f64 * 1e-9;
    let pps = (got.len() - 1) as f64 / span;
    eprintln!("replayed at {pps:.1} pps");
    assert!((pps / 10_000.0 - 1.0).abs() < 0.01, "replayed at {pps} pps");
    // Each frame is the recorded one with an 802.1Q tag of VLAN 100 after its MACs.
    for (i, (_, f)) in got.iter().enumerate() {
        let o = &orig[i % orig.len()];
        assert_eq!(f.len(), o.len() + 4, "frame {i}");
        assert_eq!(&f[..12], &o[..12], "frame {i}");
        assert_eq!(&f[12..16], &[0x81, 0x00, 0x00, 100], "frame {i}");
        assert_eq!(&f[16..], &o[12..], "frame {i}");
    }
}
