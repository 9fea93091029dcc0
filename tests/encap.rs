//! Encapsulated frames: every frame the generator builds under each
//! encapsulation (none, VLAN range, QinQ, MPLS, VXLAN), frame size and inner
//! address family, read back by an independent parser (etherparse) with its
//! checksums, lengths, tags, labels, VNI and flow fields; the same frames
//! dissected by tshark from a pcap the pipeline wrote; and trials over the
//! mem wire that reconcile exactly with the analyzer's per-id counts.

mod util;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use etherparse::{LinkExtHeader, NetHeaders, PacketHeaders, PayloadSlice, TransportHeader};
use linerate::traffic::analyzer::{stamped, EncapKind};
use linerate::traffic::stamp::{Repr, Stamp};
use linerate::traffic::template::{
    AddrRange, Encap, FrameBuilder, FrameSpec, PortRange, Sizes, Vxlan, DEFAULT_SRC_V6,
};

const VXLAN: Vxlan = Vxlan {
    vni: 0xabcdef,
    src: Ipv4Addr::new(192, 168, 0, 1),
    dst: Ipv4Addr::new(192, 168, 0, 2),
    port: 4789,
    src_mac: Some([2, 0, 0, 0, 1, 1]),
    dst_mac: None,
};

fn encaps() -> Vec<Encap> {
    vec![
        Encap::None,
        Encap::Vlan {
            first: 4093,
            count: 3,
        },
        Encap::QinQ {
            outer: 100,
            inner: 4095,
        },
        Encap::Mpls(vec![16, 0xfffff, 3]),
        Encap::Vxlan(VXLAN),
    ]
}

/// Three source ports and two destination addresses (six flows, times the
/// VLAN range).
fn spec(encap: &Encap, v6: bool, sizes: &Sizes) -> FrameSpec {
    let (src_ip, dst_ip) = if v6 {
        (
            AddrRange::v6(DEFAULT_SRC_V6),
            AddrRange::parse("fd00::2-fd00::3").unwrap(),
        )
    } else {
        (
            AddrRange::v4(Ipv4Addr::new(10, 0, 0, 1)),
            AddrRange::parse("10.0.0.2-10.0.0.3").unwrap(),
        )
    };
    let mut f = FrameSpec {
        src_ip,
        dst_ip,
        src_port: PortRange::parse("5000-5002").unwrap(),
        encap: encap.clone(),
        ..FrameSpec::default()
    };
    let min = f.min_frame();
    f.sizes = match sizes {
        Sizes::Fixed(s) => Sizes::Fixed((*s).max(min)),
        Sizes::Imix(v) => Sizes::Imix(v.iter().map(|&(s, w)| (s.max(min), w)).collect()),
    };
    f
}

/// The inner IP/UDP packet at the start of `ip`, checked: header checksum,
/// lengths and UDP checksum; returns the addresses, ports and stamp.
fn inner_ip(ip: &[u8], v6: bool) -> (IpAddr, IpAddr, u16, u16, Repr) {
    let h = PacketHeaders::from_ip_slice(ip).expect("etherparse reads the IP packet");
    let Some(TransportHeader::Udp(u)) = h.transport else {
        panic!("no UDP header")
    };
    let PayloadSlice::Udp(payload) = h.payload else {
        panic!("no UDP payload")
    };
    assert_eq!(usize::from(u.length), 8 + payload.len(), "UDP length");
    let (src, dst) = match h.net {
        Some(NetHeaders::Ipv4(h4, _)) => {
            assert!(!v6, "IPv4 where IPv6 was built");
            assert_eq!(
                h4.header_checksum,
                h4.calc_header_checksum(),
                "IPv4 checksum"
            );
            assert_eq!(usize::from(h4.total_len), ip.len(), "IPv4 total length");
            assert_eq!(u.checksum, u.calc_checksum_ipv4(&h4, payload).unwrap());
            (IpAddr::from(h4.source), IpAddr::from(h4.destination))
        }
        Some(NetHeaders::Ipv6(h6, _)) => {
            assert!(v6, "IPv6 where IPv4 was built");
            assert_eq!(usize::from(h6.payload_length) + 40, ip.len(), "IPv6 length");
            assert_eq!(u.checksum, u.calc_checksum_ipv6(&h6, payload).unwrap());
            (IpAddr::from(h6.source), IpAddr::from(h6.destination))
        }
        other => panic!("not IP: {other:?}"),
    };
    let st = Repr::parse(&Stamp::new_checked(payload).unwrap()).unwrap();
    (src, dst, u.source_port, u.destination_port, st)
}

/// What one frame says, checked layer by layer: (the encapsulation's id,
/// the inner flow, the stamp).
fn read(frame: &[u8], encap: &Encap, v6: bool) -> (u32, (IpAddr, IpAddr, u16, u16), Repr) {
    let eth_type = u16::from_be_bytes([frame[12], frame[13]]);
    let inner_type: u16 = if v6 { 0x86dd } else { 0x0800 };
    let (id, ip): (u32, &[u8]) = match encap {
        Encap::None => {
            assert_eq!(eth_type, inner_type);
            (0, &frame[14..])
        }
        Encap::Vlan { .. } | Encap::QinQ { .. } => {
            let h = PacketHeaders::from_ethernet_slice(frame).unwrap();
            let tags: Vec<_> = h
                .link_exts
                .iter()
                .map(|e| match e {
                    LinkExtHeader::Vlan(v) => (v.vlan_id.value(), v.ether_type.0),
                    other => panic!("{other:?}"),
                })
                .collect();
            match encap {
                Encap::Vlan { .. } => {
                    assert_eq!(eth_type, 0x8100, "802.1Q TPID");
                    assert_eq!(tags.len(), 1);
                    assert_eq!(tags[0].1, inner_type);
                    (u32::from(tags[0].0), &frame[18..])
                }
                _ => {
                    assert_eq!(eth_type, 0x88a8, "802.1ad outer TPID");
                    assert_eq!(tags, vec![(100, 0x8100), (4095, inner_type)]);
                    (100 << 12 | 4095, &frame[22..])
                }
            }
        }
        Encap::Mpls(labels) => {
            assert_eq!(eth_type, 0x8847);
            for (i, want) in labels.iter().enumerate() {
                let at = 14 + 4 * i;
                let w = u32::from_be_bytes(frame[at..at + 4].try_into().unwrap());
                assert_eq!(w >> 12, *want, "label {i}");
                assert_eq!(w & 0x100 != 0, i + 1 == labels.len(), "bottom of stack");
                assert_eq!(w & 0xff, 64, "TTL");
                assert_eq!((w >> 9) & 7, 0, "traffic class");
            }
            (labels[0], &frame[14 + 4 * labels.len()..])
        }
        Encap::Vxlan(x) => {
            let h = PacketHeaders::from_ethernet_slice(frame).unwrap();
            let Some(NetHeaders::Ipv4(o, _)) = &h.net else {
                panic!("outer IPv4")
            };
            assert_eq!(o.header_checksum, o.calc_header_checksum());
            assert_eq!(usize::from(o.total_len), frame.len() - 14);
            assert_eq!((o.source, o.destination), (x.src.octets(), x.dst.octets()));
            let Some(TransportHeader::Udp(u)) = &h.transport else {
                panic!("outer UDP")
            };
            let PayloadSlice::Udp(vx) = h.payload else {
                panic!("outer UDP payload")
            };
            assert_eq!(u.destination_port, 4789);
            assert_eq!(usize::from(u.length), 8 + vx.len());
            // 0 ("no checksum") is what RFC 7348 recommends over IPv4.
            assert!(u.checksum == 0 || u.checksum == u.calc_checksum_ipv4(o, vx).unwrap());
            let link = h.link.unwrap().ethernet2().unwrap();
            assert_eq!(link.source, [2, 0, 0, 0, 1, 1], "vxlan.src_mac");
            assert_eq!(
                link.destination,
                [2, 0, 0, 0, 0, 2],
                "the generator's dst_mac"
            );
            assert_eq!(vx[0], 0x08, "VXLAN flags: I");
            assert_eq!(&vx[1..4], &[0, 0, 0]);
            assert_eq!(vx[7], 0);
            let vni = u32::from_be_bytes([0, vx[4], vx[5], vx[6]]);
            let inner = &vx[8..];
            let ie = PacketHeaders::from_ethernet_slice(inner).unwrap();
            assert!(ie.link_exts.is_empty());
            assert_eq!(u16::from_be_bytes([inner[12], inner[13]]), inner_type);
            let (.., sport, _, _) = inner_ip(&inner[14..], v6);
            assert_eq!(
                u.source_port, sport,
                "the outer source port is the inner one"
            );
            (vni, &inner[14..])
        }
    };
    let (s, d, sp, dp, st) = inner_ip(ip, v6);
    (id, (s, d, sp, dp), st)
}

#[test]
fn every_frame_of_every_encapsulation_size_and_family_reads_back() {
    let imix = Sizes::Imix(vec![(64, 7), (570, 4), (1518, 1)]);
    let sizes = [
        Sizes::Fixed(64),
        Sizes::Fixed(128),
        Sizes::Fixed(1518),
        imix,
    ];
    let mut buf = vec![0u8; 9018];
    for encap in encaps() {
        for v6 in [false, true] {
            for size in &sizes {
                let spec = spec(&encap, v6, size);
                let flows = spec.flows();
                assert_eq!(flows, 6 * u64::from(encap.vlans()));
                let mut b = FrameBuilder::new(&spec);
                let wanted: BTreeSet<usize> = match &spec.sizes {
                    Sizes::Fixed(s) => [*s].into(),
                    Sizes::Imix(v) => v.iter().map(|x| x.0).collect(),
                };
                let (mut seen_flows, mut seen_sizes, mut ids) =
                    (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
                for n in 0..2 * flows.max(12) {
                    let st = Repr {
                        stream: 7,
                        seq: n * 0x1_0001,
                        tx_ns: n * 999,
                        epoch: 3,
                        flags: 0,
                    };
                    let expect_len = b.next_frame_len();
                    let len = b.write(&mut buf, &st);
                    let frame = &buf[..len];
                    let what = format!("{} v6={v6} {size:?} packet {n}", encap.name());
                    assert_eq!(
                        len + 4,
                        expect_len,
                        "{what}: the size counts the whole frame"
                    );
                    assert!(wanted.contains(&(len + 4)), "{what}: size {}", len + 4);
                    seen_sizes.insert(len + 4);
                    let (id, flow, got) = read(frame, &encap, v6);
                    assert_eq!(got, st, "{what}: stamp");
                    if let Encap::Vlan { first, count } = encap {
                        // The VLAN id varies fastest of the flow fields.
                        assert_eq!(
                            id,
                            u32::from(first) + (n % u64::from(count)) as u32,
                            "{what}"
                        );
                    }
                    assert!([5000, 5001, 5002].contains(&flow.2), "{what}");
                    assert_eq!(flow.3, 1024, "{what}");
                    seen_flows.insert((id, flow));
                    ids.insert(id);
                    // The analyzer's walk finds the stamp and the same id.
                    let (kind, aid, s) = stamped(frame, 4789).expect("the analyzer's walk");
                    assert_eq!(Repr::parse(&s).unwrap(), st, "{what}");
                    let want_kind = match encap {
                        Encap::None => EncapKind::None,
                        Encap::Vlan { .. } => EncapKind::Vlan,
                        Encap::QinQ { .. } => EncapKind::QinQ,
                        Encap::Mpls(_) => EncapKind::Mpls,
                        Encap::Vxlan(_) => EncapKind::Vxlan,
                    };
                    assert_eq!((kind, aid), (want_kind, id), "{what}");
                }
                assert_eq!(seen_flows.len() as u64, flows, "every flow");
                assert_eq!(seen_sizes, wanted, "every size");
                let want_ids = match &encap {
                    Encap::None => 1,
                    Encap::Vlan { count, .. } => usize::from(*count),
                    _ => 1,
                };
                assert_eq!(ids.len(), want_ids);
            }
        }
    }
}

/// A pipeline that writes `count` frames of a generator with `keys` to a pcap.
fn record(dir: &std::path::Path, name: &str, keys: &str, count: u32) -> std::path::PathBuf {
    let cap = dir.join(format!("{name}.pcap"));
    let text = format!(
        "[pipeline]\npin = false\n[port.cap]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.gen]\nkind = \"generator\"\ntx = \"cap\"\ncount = {count}\nrate = \"100 kpps\"\nmax_lag = \"1s\"\nsrc_port = \"7000-7003\"\n{keys}\n",
        cap.display()
    );
    util::run_text(&format!("{name}.toml"), &text, Duration::from_secs(30));
    cap
}

/// tshark's fields of every frame in `cap`, checksums verified.
fn tshark(cap: &std::path::Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = std::process::Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(cap).args([
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
        "-d",
        "udp.port==4789,vxlan",
        "-T",
        "fields",
        "-E",
        "separator=|",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

#[test]
fn tshark_dissects_every_encapsulation_with_good_checksums() {
    if std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_err()
    {
        util::missing("tshark (apt-get install tshark)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Status 1 is "good" for tshark's checksum fields; an absent field is
    // empty (an outer UDP checksum of 0 is not checked).
    let good = |s: &str| !s.is_empty() && s.split(',').all(|x| x == "1");
    let fields = [
        "frame.len",
        "eth.type",
        "vlan.id",
        "ieee8021ad.id",
        "mpls.label",
        "mpls.bottom",
        "mpls.ttl",
        "vxlan.vni",
        "vxlan.flags",
        "ip.checksum.status",
        "udp.checksum.status",
        "udp.srcport",
    ];
    let cases = [
        ("vlan", "vlan = \"100-103\"\nframe = 128"),
        ("qinq", "qinq = [300, 4000]\nframe = \"imix\""),
        ("mpls", "mpls = [1000, 2000]\nframe = 1518\nip = \"v6\""),
        (
            "vxlan",
            "vxlan = { vni = 5000, src = \"192.168.7.1\", dst = \"192.168.7.2\" }\nframe = 200",
        ),
    ];
    for (name, keys) in cases {
        let cap = record(dir.path(), name, keys, 24);
        let rows = tshark(&cap, &fields);
        assert_eq!(rows.len(), 24, "{name}: {rows:?}");
        let mut vids = BTreeSet::new();
        for r in &rows {
            let f = |k: &str| r[fields.iter().position(|x| *x == k).unwrap()].as_str();
            let len: usize = f("frame.len").parse().unwrap();
            match name {
                "vlan" => {
                    assert_eq!(len, 124, "{r:?}");
                    vids.insert(f("vlan.id").to_string());
                    assert!(
                        good(f("ip.checksum.status")) && good(f("udp.checksum.status")),
                        "{r:?}"
                    );
                }
                "qinq" => {
                    assert_eq!(f("ieee8021ad.id"), "300", "{r:?}");
                    assert_eq!(f("vlan.id"), "4000", "{r:?}");
                    assert!(f("eth.type").starts_with("0x88a8"), "{r:?}");
                    // The IMIX's 64 becomes the smallest QinQ frame, 72.
                    assert!([68, 566, 1514].contains(&len), "{r:?}");
                    assert!(
                        good(f("ip.checksum.status")) && good(f("udp.checksum.status")),
                        "{r:?}"
                    );
                }
                "mpls" => {
                    assert_eq!(len, 1514);
                    assert_eq!(f("mpls.label"), "1000,2000", "{r:?}");
                    assert_eq!(f("mpls.bottom"), "0,1", "{r:?}");
                    assert_eq!(f("mpls.ttl"), "64,64", "{r:?}");
                    assert!(good(f("udp.checksum.status")), "{r:?}");
                }
                _ => {
                    assert_eq!(len, 196);
                    assert_eq!(f("vxlan.vni"), "5000", "{r:?}");
                    assert_eq!(f("vxlan.flags"), "0x0800", "{r:?}");
                    assert_eq!(f("ip.checksum.status"), "1,1", "outer and inner: {r:?}");
                    // The inner UDP checksum is checked; the outer one is 0.
                    assert!(f("udp.checksum.status").contains('1'), "{r:?}");
                    let ports: Vec<&str> = f("udp.srcport").split(',').collect();
                    assert_eq!(ports[0], ports[1], "outer source port = inner: {r:?}");
                }
            }
        }
        if name == "vlan" {
            assert_eq!(vids.len(), 4, "every VLAN of the range: {vids:?}");
        }
    }
}

/// A trial pipeline over the mem wire whose generator wraps its frames with
/// `gen` and whose analyzer has `ana`.
fn runner(gen: &str, ana: &str) -> linerate::trial::TrialRunner {
    let text = format!(
        "[pipeline]\nlcores = \"0-1\"\npin = false\n[port.dut]\nkind = \"mem\"\nring = 65536\n[stage.gen]\nkind = \"generator\"\nlcore = 0\ntx = \"dut\"\nsrc_port = \"1000-1015\"\nmax_lag = \"1s\"\n{gen}\n[stage.ana]\nkind = \"analyzer\"\nlcore = 1\nrx = \"dut\"\n{ana}\n"
    );
    let plan = linerate::pipeline::load_str(std::path::Path::new("t.toml"), &text).unwrap();
    linerate::trial::TrialRunner::start(
        &plan,
        linerate::trial::TrialOptions {
            drain: Duration::from_millis(300),
            stats_interval: None,
        },
    )
    .unwrap()
}

#[test]
fn vlan_and_vxlan_trials_reconcile_exactly_per_id() {
    let stop = AtomicBool::new(false);
    let vx =
        "vxlan = { vni = 777, src = \"192.168.0.1\", dst = \"192.168.0.2\" }\nframe = \"imix\"";
    for (gen, ana, ids) in [
        ("vlan = \"100-107\"", "expect = \"vlan\"", 8),
        (vx, "expect = \"vxlan\"", 1),
        ("vlan = \"10-19\"", "expect = \"vlan\"\nencap_ids = 4", 4),
    ] {
        let mut r = runner(gen, ana);
        let t = r
            .trial(50_000.0, Duration::from_millis(200), &stop, &mut |_, _| {})
            .unwrap();
        assert_eq!(t.offered, 10_000, "{gen}");
        assert_eq!(t.received, t.offered, "{gen}: {t:?}");
        assert_eq!(t.encap.unexpected_encap, 0);
        let by_id: u64 = t.encap.by_id.values().sum();
        assert_eq!(
            by_id + t.encap.other_ids,
            t.received,
            "{gen}: {:?}",
            t.encap
        );
        assert_eq!(t.encap.by_id.len(), ids, "{:?}", t.encap);
        if ids == 8 {
            // Round robin over 16 ports x 8 VLANs: an even share each.
            assert!(t.encap.by_id.values().all(|&n| n == 1250), "{:?}", t.encap);
            assert!(t.encap.by_id.contains_key("vlan 107"));
        } else if ids == 1 {
            assert_eq!(t.encap.by_id["vni 777"], t.received);
        } else {
            assert_eq!(
                t.encap.other_ids, 6_000,
                "six of ten VLANs beyond the table"
            );
        }
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["encap"]["unexpected_encap"], 0);
        drop(r);
    }
}

#[test]
fn frames_in_an_encapsulation_not_expected_are_counted_not_lost_silently() {
    let stop = AtomicBool::new(false);
    for (gen, ana) in [
        ("vlan = 5", ""),
        ("", "expect = \"vlan\""),
        ("mpls = [16]", "expect = \"qinq\""),
    ] {
        let mut r = runner(gen, ana);
        let t = r
            .trial(50_000.0, Duration::from_millis(100), &stop, &mut |_, _| {})
            .unwrap();
        assert_eq!(t.offered, 5_000);
        assert_eq!(t.received, 0, "{gen} / {ana}");
        assert_eq!(t.encap.unexpected_encap, t.offered, "{gen} / {ana}");
        assert_eq!(t.streams[0].unexpected_encap, t.offered);
        drop(r);
    }
}
