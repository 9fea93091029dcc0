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
    let replay = format!(
        r#"
[pipeline]
pin = false
[port.src]
kind = "pcap"
read = "{}"
[port.dst]
kind = "pcap"
write = "{}"
[stage.fwd]
kind = "forward"
rx = "src"
tx = "dst"
"#,
        first.display(),
        second.display()
    );
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
