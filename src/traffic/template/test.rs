//! The templates' checksums, layouts and flows, against frames built the
//! obvious way.

use super::*;

use crate::net::checksum::{finish, pseudo_header_v4, pseudo_header_v6};

/// The IPv4 and UDP views of a frame the builder wrote.
fn v4(frame: &[u8]) -> (ipv4::Packet<&[u8]>, udp::Packet<&[u8]>) {
    (
        ipv4::Packet::new_checked(&frame[IP_AT..]).unwrap(),
        udp::Packet::new_checked(&frame[UDP_AT..]).unwrap(),
    )
}

fn verify(frame: &[u8]) {
    let (ip, udp) = v4(frame);
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    let datagram = &frame[UDP_AT..];
    let pseudo = pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 17, datagram.len() as u16);
    assert_eq!(finish(add_bytes(pseudo, datagram)), 0, "UDP checksum");
    assert_eq!(usize::from(udp.len()), datagram.len());
}

#[test]
fn checksums_are_correct_for_every_flow_and_size() {
    let spec = FrameSpec {
        src_ip: AddrRange::parse("10.0.0.1-10.0.0.3").unwrap(),
        dst_ip: AddrRange::parse("192.168.255.250-192.168.255.255").unwrap(),
        src_port: PortRange::parse("65530-65535").unwrap(),
        dst_port: PortRange::parse("1-2").unwrap(),
        sizes: Sizes::Imix(vec![(64, 3), (65, 1), (1518, 2), (9018, 1)]),
        ..FrameSpec::default()
    };
    let mut b = FrameBuilder::new(&spec);
    let mut buf = vec![0u8; 9014];
    for seq in 0..500u64 {
        let st = StampRepr {
            stream: 3,
            seq: seq * 0x0123_4567_89ab,
            tx_ns: seq * 7_777_777,
            epoch: seq as u8,
            flags: 1,
        };
        let n = b.write(&mut buf, &st);
        verify(&buf[..n]);
        let r = StampRepr::parse(&Stamp::new_unchecked(&buf[HEADERS..n])).unwrap();
        assert_eq!(r.seq, st.seq);
    }
}

#[test]
fn flows_cover_the_product_round_robin() {
    let spec = FrameSpec {
        src_port: PortRange::parse("100-103").unwrap(),
        dst_ip: AddrRange::parse("10.1.0.0-10.1.0.2").unwrap(),
        ..FrameSpec::default()
    };
    assert_eq!(spec.flows(), 12);
    let mut b = FrameBuilder::new(&spec);
    let mut buf = vec![0u8; 60];
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..12 {
        b.write(&mut buf, &StampRepr::default());
        let (ip, udp) = v4(&buf);
        seen.insert((ip.dst_addr().octets()[3], udp.src_port()));
    }
    assert_eq!(seen.len(), 12);
}

#[test]
fn round_robin_is_the_mixed_radix_order() {
    let spec = FrameSpec {
        src_ip: AddrRange::parse("10.0.0.1-10.0.0.3").unwrap(),
        dst_ip: AddrRange::parse("10.1.0.0-10.1.0.1").unwrap(),
        src_port: PortRange::parse("100-104").unwrap(),
        dst_port: PortRange::parse("7-9").unwrap(),
        ..FrameSpec::default()
    };
    let flows = spec.flows();
    assert_eq!(flows, 90);
    let mut b = FrameBuilder::new(&spec);
    let mut buf = vec![0u8; 60];
    for n in 0..3 * flows {
        b.write(&mut buf, &StampRepr::default());
        let k = n % flows;
        let want = (
            1 + (k / 3 / 5 / 2) % 3,
            (k / 3 / 5) % 2,
            100 + (k / 3) % 5,
            7 + k % 3,
        );
        let (ip, udp) = v4(&buf);
        let got = (
            u64::from(ip.src_addr().octets()[3]),
            u64::from(ip.dst_addr().octets()[3]),
            u64::from(udp.src_port()),
            u64::from(udp.dst_port()),
        );
        assert_eq!(got, want, "packet {n}");
    }
}

#[test]
fn imix_cycle_has_the_weights_interleaved() {
    let b = FrameBuilder::new(&FrameSpec {
        sizes: Sizes::default_imix(),
        ..FrameSpec::default()
    });
    assert_eq!(b.cycle.len(), 12);
    let count = |i| b.cycle.iter().filter(|&&c| c == i).count();
    assert_eq!((count(0), count(1), count(2)), (7, 4, 1));
    assert!(b
        .cycle
        .windows(3)
        .all(|w| !(w[0] == w[1] && w[1] == w[2] && w[0] != 0)));
    assert!((Sizes::default_imix().average() - 353.83).abs() < 0.01);
}

fn verify_v6(frame: &[u8]) {
    let eth = ethernet::Frame::new_checked(frame).unwrap();
    assert_eq!(eth.ethertype(), ethernet::ethertype::IPV6);
    let ip = ipv6::Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(ip.version(), 6);
    assert_eq!(ip.next_header(), 17, "next header UDP");
    let datagram = &frame[UDP_AT_V6..];
    let udp = udp::Packet::new_checked(datagram).unwrap();
    assert_eq!(usize::from(ip.payload_len()), datagram.len());
    assert_eq!(usize::from(udp.len()), datagram.len());
    let pseudo = pseudo_header_v6(ip.src_addr(), ip.dst_addr(), 17, datagram.len() as u32);
    assert_eq!(
        finish(add_bytes(pseudo, datagram)),
        0,
        "UDP checksum over the IPv6 pseudo-header"
    );
    assert_ne!(udp.checksum(), 0, "IPv6 UDP checksums are mandatory");
}

#[test]
fn ipv6_checksums_are_correct_for_every_flow_and_size() {
    let spec = FrameSpec {
        // Crosses a 32-bit boundary of the address.
        src_ip: AddrRange::parse("fd00::ffff:fffe-fd00::1:0:1").unwrap(),
        dst_ip: AddrRange::parse(
            "2001:db8:ffff:ffff:ffff:ffff:ffff:fffd-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
        )
        .unwrap(),
        src_port: PortRange::parse("65534-65535").unwrap(),
        dst_port: PortRange::parse("1-3").unwrap(),
        sizes: Sizes::Imix(vec![(84, 3), (85, 1), (1518, 2), (9018, 1)]),
        ..FrameSpec::default()
    };
    assert!(spec.is_v6());
    assert_eq!(spec.src_ip.count, 4);
    assert_eq!(spec.flows(), 4 * 3 * 2 * 3);
    let mut b = FrameBuilder::new(&spec);
    let mut buf = vec![0u8; 9014];
    let mut srcs = std::collections::BTreeSet::new();
    for seq in 0..2000u64 {
        let st = StampRepr {
            stream: 9,
            seq: seq.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            tx_ns: seq * 1_234_567,
            epoch: seq as u8,
            flags: (seq & 1) as u8,
        };
        let n = b.write(&mut buf, &st);
        verify_v6(&buf[..n]);
        srcs.insert(
            ipv6::Packet::new_checked(&buf[IP_AT..])
                .unwrap()
                .src_addr()
                .to_bits(),
        );
        let r = StampRepr::parse(&Stamp::new_unchecked(&buf[HEADERS_V6..n])).unwrap();
        assert_eq!(r.seq, st.seq);
    }
    let first = u128::from("fd00::ffff:fffe".parse::<Ipv6Addr>().unwrap());
    assert_eq!(
        srcs.into_iter().collect::<Vec<_>>(),
        (0..4).map(|i| first + i).collect::<Vec<_>>()
    );
}

#[test]
fn a_zero_ipv6_udp_checksum_is_sent_as_all_ones() {
    // Find a sequence number whose frame sums to 0, then check it is sent
    // as 0xffff and still verifies.
    let spec = FrameSpec {
        src_ip: AddrRange::v6(DEFAULT_SRC_V6),
        dst_ip: AddrRange::v6(DEFAULT_DST_V6),
        sizes: Sizes::Fixed(MIN_FRAME_V6),
        ..FrameSpec::default()
    };
    let mut b = FrameBuilder::new(&spec);
    let mut buf = [0u8; 80];
    let st = |seq| StampRepr {
        seq,
        ..StampRepr::default()
    };
    let n = b.write(&mut buf, &st(0));
    assert_eq!(n, 80);
    let sum = udp::Packet::new_checked(&buf[UDP_AT_V6..])
        .unwrap()
        .checksum();
    // The checksum is the complement of the other words' sum: adding
    // `sum` to the low word of the sequence number brings it to 0xffff,
    // i.e. a computed checksum of 0.
    let n = b.write(&mut buf, &st(u64::from(sum)));
    verify_v6(&buf[..n]);
    assert_eq!(
        udp::Packet::new_checked(&buf[UDP_AT_V6..])
            .unwrap()
            .checksum(),
        0xffff
    );
}

/// An IPv4 frame built the slow, obvious way: every header written
/// whole, both checksums summed over the bytes.
fn reference_v4(
    spec: &FrameSpec,
    len: usize,
    flow: (SocketAddrV4, SocketAddrV4),
    st: &StampRepr,
) -> Vec<u8> {
    let mut f = vec![0u8; len];
    UdpV4 {
        src_mac: spec.src_mac,
        dst_mac: spec.dst_mac,
        src: flow.0,
        dst: flow.1,
        ttl: 64,
        payload_len: len - HEADERS,
    }
    .emit(&mut f);
    st.emit(&mut Stamp::new_unchecked(
        &mut f[HEADERS..HEADERS + STAMP_LEN],
    ));
    let pseudo = pseudo_header_v4(*flow.0.ip(), *flow.1.ip(), 17, (len - UDP_AT) as u16);
    udp::Packet::new_unchecked(&mut f[UDP_AT..]).fill_checksum(pseudo);
    f
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Bursts written with `begin_burst`/`write_next` (the one-flow fast
    /// path and the general one, into roomy and exact buffers) are byte
    /// for byte the frames built naively, and their flows stay in range.
    #[test]
    fn burst_frames_equal_naively_built_ones(
        flows in proptest::sample::select(vec![(1u32, 1u32), (1, 3), (5, 2)]),
        sizes in proptest::sample::select(vec![
            Sizes::Fixed(64), Sizes::Fixed(67), Sizes::Fixed(1518),
            Sizes::Imix(vec![(64, 2), (65, 1), (130, 1)]),
        ]),
        random in proptest::bool::ANY,
        stamps in proptest::collection::vec(
            (proptest::num::u64::ANY, proptest::num::u64::ANY, proptest::num::u16::ANY, proptest::num::u8::ANY, 1usize..40),
            1..6,
        ),
        exact in proptest::bool::ANY,
    ) {
        let spec = FrameSpec {
            src_ip: AddrRange { count: flows.0, ..AddrRange::v4(Ipv4Addr::new(10, 255, 255, 254)) },
            dst_port: PortRange { first: 65535 - flows.1 as u16 + 1, count: flows.1 },
            order: if random { FlowOrder::Random } else { FlowOrder::RoundRobin },
            sizes,
            ..FrameSpec::default()
        };
        let mut b = FrameBuilder::new(&spec);
        proptest::prop_assert_eq!(b.one_flow_v4, flows == (1, 1));
        for (seq, tx_ns, stream, epoch, n) in stamps {
            let first = StampRepr { stream, seq, tx_ns, epoch, flags: 0 };
            b.begin_burst(&first);
            for i in 0..n {
                let len = b.next_frame_len() - FCS;
                let mut buf = vec![0xa5u8; if exact { len } else { 2048 }];
                let st = StampRepr { seq: seq.wrapping_add(i as u64), flags: (i + 1 == n) as u8, ..first };
                proptest::prop_assert_eq!(b.write_next(&mut buf, st.seq, st.flags), len);
                let (ip, udp) = v4(&buf[..len]);
                let flow = (
                    SocketAddrV4::new(ip.src_addr(), udp.src_port()),
                    SocketAddrV4::new(ip.dst_addr(), udp.dst_port()),
                );
                let (src, dport) = (ip.src_addr().to_bits(), udp.dst_port());
                proptest::prop_assert!(src.wrapping_sub(0x0aff_fffe) < flows.0);
                proptest::prop_assert!(dport > 65535 - flows.1 as u16);
                proptest::prop_assert_eq!(&buf[..len], &reference_v4(&spec, len, flow, &st)[..]);
            }
        }
    }
}

#[test]
fn address_ranges_parse_both_families() {
    let r = AddrRange::parse("fd00::1-fd00::100").unwrap();
    assert!(r.is_v6());
    assert_eq!(r.count, 256);
    assert_eq!(AddrRange::parse(" 10.0.0.1 - 10.0.0.1 ").unwrap().count, 1);
    assert!(AddrRange::parse("10.0.0.1-fd00::1")
        .unwrap_err()
        .contains("mixes an IPv4 and an IPv6 address"));
    assert!(AddrRange::parse("fd00::-fd01::")
        .unwrap_err()
        .contains("more than 2^32"));
    assert!(AddrRange::parse("fd00::2-fd00::1").is_err());
    assert!(AddrRange::parse("fd00::g").is_err());
    let full = AddrRange::parse("::1-::ffff:ffff").unwrap();
    assert_eq!(full.count, u32::MAX);
}

#[test]
fn small_sizes_are_raised_to_the_family_minimum_and_v4_destinations_mapped() {
    let spec = FrameSpec {
        src_ip: AddrRange::v6(DEFAULT_SRC_V6),
        sizes: Sizes::Fixed(64),
        ..FrameSpec::default()
    };
    assert_eq!(spec.min_frame(), MIN_FRAME_V6);
    let mut b = FrameBuilder::new(&spec);
    assert_eq!(b.next_frame_len(), MIN_FRAME_V6);
    let mut buf = [0u8; 80];
    b.write(&mut buf, &StampRepr::default());
    verify_v6(&buf);
    let dst = ipv6::Packet::new_checked(&buf[IP_AT..]).unwrap().dst_addr();
    assert_eq!(dst, "::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap());
}
