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
        let sliced = etherparse::SlicedPacket::from_ethernet(&p.data).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else {
            panic!("not IPv4")
        };
        let header = ip.header().to_header();
        assert_eq!(
            header.header_checksum,
            header.calc_header_checksum(),
            "IPv4 checksum of packet {n}"
        );
        let Some(etherparse::TransportSlice::Udp(udp)) = sliced.transport else {
            panic!("not UDP")
        };
        let uh = udp.to_header();
        assert_eq!(
            uh.checksum,
            uh.calc_checksum_ipv4(&header, udp.payload()).unwrap(),
            "UDP checksum of packet {n}"
        );
        assert_eq!(usize::from(uh.length), udp.slice().len());
        flows.insert((header.source, uh.destination_port));
        n += 1;
    }
    assert_eq!(n, 3000);
    assert_eq!(flows.len(), 40, "4 source addresses x 10 destination ports");
}
