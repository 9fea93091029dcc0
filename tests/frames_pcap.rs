//! Generated frames written to a capture are valid to an independent parser
//! (etherparse): Ethernet, IPv4 and UDP lengths and checksums, flows as asked.

mod util;

use std::time::Duration;

#[test]
fn checksums_verified_by_etherparse() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("gen.pcap");
    let text = format!(
        r#"
[pipeline]
pin = false
[port.cap]
kind = "pcap"
write = "{}"
[stage.gen]
kind = "generator"
tx = "cap"
count = 3000
frame = "imix"
imix = "64:3,65:1,777:2,1518:1,9018:1"
src_ip = "10.0.0.1-10.0.0.4"
dst_port = "5000-5009"
flows = "random"
[pool]
size = "10 KiB"
"#,
        cap.display()
    );
    let r = util::run_text("gen.toml", &text, Duration::from_secs(30));
    assert_eq!(r.ports["cap"].tx_packets, 3000);
    let mut reader = pcap_file::pcap::PcapReader::new(std::fs::File::open(&cap).unwrap()).unwrap();
    let mut flows = std::collections::BTreeSet::new();
    let mut n = 0;
    while let Some(p) = reader.next_packet() {
        let p = p.unwrap();
        let (src, dport, _) = util::check_udp_v4(&p.data, n);
        flows.insert((src, dport));
        n += 1;
    }
    assert_eq!(n, 3000);
    assert_eq!(flows.len(), 40, "4 source addresses x 10 destination ports");
}
