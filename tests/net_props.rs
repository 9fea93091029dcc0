//! The wire module against an independent parser (etherparse): on frames
//! etherparse builds (VLAN, QinQ, IPv4 with options, IPv6 with extension
//! headers, UDP) the module finds the same headers and payload; on random
//! bytes nothing panics, and where both find a UDP payload they agree.

use etherparse::{
    IpHeaders, IpNumber, Ipv4Header, Ipv6Extensions, Ipv6Header, Ipv6RawExtHeader,
    Ipv6RoutingExtensions, PacketBuilder, SlicedPacket, TransportSlice,
};
use linerate::net::{
    self, checksum, ethernet, ipv4, ipv6, mpls, udp, udp_payload, vlan, vxlan, IpVersion,
};
use proptest::prelude::*;

/// How a built frame is tagged.
fn tagging() -> impl Strategy<Value = Vec<u16>> {
    prop_oneof![
        Just(vec![]),
        (1u16..4095).prop_map(|v| vec![v]),
        (1u16..4095, 1u16..4095).prop_map(|(a, b)| vec![a, b]),
    ]
}

/// A frame etherparse builds, and where its UDP payload starts.
fn build(
    tags: &[u16],
    v6: bool,
    ext: u8,
    options_words: usize,
    ports: (u16, u16),
    payload: &[u8],
) -> Vec<u8> {
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip = if v6 {
        let raw = |n| Ipv6RawExtHeader::new_raw(IpNumber::UDP, &[n; 6]).unwrap();
        let mut exts = Ipv6Extensions::default();
        if ext & 1 != 0 {
            exts.hop_by_hop_options = Some(raw(1));
        }
        if ext & 2 != 0 {
            exts.destination_options = Some(raw(2));
        }
        if ext & 4 != 0 {
            exts.routing = Some(Ipv6RoutingExtensions {
                routing: raw(3),
                final_destination_options: None,
            });
        }
        IpHeaders::Ipv6(
            Ipv6Header {
                hop_limit: 64,
                source: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                destination: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
                ..Default::default()
            },
            exts,
        )
    } else {
        let mut h = Ipv4Header::new(0, 64, IpNumber::UDP, [10, 0, 0, 1], [10, 0, 0, 2]).unwrap();
        h.dont_fragment = true;
        // Options of NOPs ending in End of List.
        let mut opts = vec![1u8; options_words * 4];
        if let Some(l) = opts.last_mut() {
            *l = 0;
        }
        h.options = opts[..].try_into().unwrap();
        IpHeaders::Ipv4(h, Default::default())
    };
    let mut out = Vec::new();
    match tags {
        [] => eth.ip(ip).udp(ports.0, ports.1).write(&mut out, payload),
        [a] => eth
            .single_vlan((*a).try_into().unwrap())
            .ip(ip)
            .udp(ports.0, ports.1)
            .write(&mut out, payload),
        [a, b, ..] => eth
            .double_vlan((*a).try_into().unwrap(), (*b).try_into().unwrap())
            .ip(ip)
            .udp(ports.0, ports.1)
            .write(&mut out, payload),
    }
    .unwrap();
    out
}

/// Where etherparse finds the UDP payload, as a range of `frame`.
fn theirs(frame: &[u8]) -> Option<std::ops::Range<usize>> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(TransportSlice::Udp(u)) = p.transport else {
        return None;
    };
    // A zero UDP length means "to the end" to etherparse, and is refused here.
    if u.length() == 0 {
        return None;
    }
    let start = u.payload().as_ptr() as usize - frame.as_ptr() as usize;
    Some(start..start + u.payload().len())
}

/// Runs every view and `Repr` of the module over `b` at every offset of its
/// head, with the invariants the `net_frame` fuzz target asserts: none may
/// panic, what parses emits the same bytes back (where a header has no
/// reserved bits), and a parsed length is the payload's.
fn every_view(b: &[u8]) {
    if let Ok(v) = udp_payload(b) {
        let r = v.payload_range();
        assert!(v.ip_offset() >= ethernet::HEADER_LEN);
        assert!(v.udp_offset() >= v.ip_offset() + ipv4::HEADER_LEN);
        assert!(r.start == v.udp_offset() + udp::HEADER_LEN && r.end <= b.len());
        assert_eq!(usize::from(v.udp().len()), r.len() + udp::HEADER_LEN);
    }
    for at in 0..b.len().min(64) {
        let s = &b[at..];
        if let Ok(f) = ethernet::Frame::new_checked(s) {
            let r = ethernet::Repr::parse(&f).unwrap();
            let mut out = [0u8; ethernet::HEADER_LEN];
            r.emit(&mut ethernet::Frame::new_unchecked(&mut out[..]));
            assert_eq!(out[..], s[..ethernet::HEADER_LEN]);
        }
        if let Ok(t) = vlan::Tag::new_checked(s) {
            let r = vlan::Repr::parse(&t).unwrap();
            let mut out = [0u8; vlan::HEADER_LEN];
            r.emit(&mut vlan::Tag::new_unchecked(&mut out[..]));
            assert_eq!(out[..], s[..vlan::HEADER_LEN]);
        }
        if let Ok(p) = ipv4::Packet::new_checked(s) {
            let _ = (
                p.options(),
                p.payload(),
                p.verify_checksum(),
                p.frag_offset(),
            );
            if let Ok(r) = ipv4::Repr::parse(&p) {
                assert!(p.verify_checksum() && !p.is_fragment());
                assert_eq!(r.payload_len, p.payload().len());
            }
        }
        if let Ok(p) = ipv6::Packet::new_checked(s) {
            let _ = (p.flow_label(), p.traffic_class(), p.src_addr());
            if let Ok((_, off)) = ipv6::upper_layer(p.next_header(), p.payload()) {
                assert!(off <= p.payload().len());
            }
            if let Ok(r) = ipv6::Repr::parse(&p) {
                assert_eq!(r.payload_len, p.payload().len());
            }
        }
        if let Ok(p) = udp::Packet::new_checked(s) {
            let _ = (p.verify_checksum(0x1234), p.is_empty());
            if let Ok(r) = udp::Repr::parse(&p) {
                assert_eq!(r.payload_len, p.payload().len());
            }
        }
        if let Ok(p) = vxlan::Packet::new_checked(s) {
            let _ = (vxlan::Repr::parse(&p), p.vni(), p.payload());
        }
        if let Ok(e) = mpls::Entry::new_checked(s) {
            let r = mpls::Repr::parse(&e).unwrap();
            let mut out = [0u8; mpls::HEADER_LEN];
            r.emit(&mut mpls::Entry::new_unchecked(&mut out[..]));
            assert_eq!(out[..], s[..mpls::HEADER_LEN]);
        }
    }
}

proptest! {
    #[test]
    fn built_frames_parse_as_etherparse_wrote_them(
        tags in tagging(),
        v6 in any::<bool>(),
        ext in 0u8..8,
        options_words in 0usize..=10,
        ports in (any::<u16>(), any::<u16>()),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
        pad in 0usize..20,
    ) {
        let mut frame = build(&tags, v6, ext, options_words, ports, &payload);
        let want = theirs(&frame).expect("etherparse reads what it wrote");
        // Ethernet padding is not payload.
        frame.extend(std::iter::repeat_n(0xee, pad));
        let v = udp_payload(&frame).unwrap();
        prop_assert_eq!(v.payload_range(), want);
        prop_assert_eq!(v.payload(), &payload[..]);
        prop_assert_eq!((v.udp().src_port(), v.udp().dst_port()), ports);
        prop_assert_eq!(v.ip_offset(), 14 + 4 * tags.len());
        let ip = v.ip();
        if v6 {
            prop_assert_eq!(v.version(), IpVersion::V6);
            let p = ipv6::Packet::new_checked(ip).unwrap();
            let r = ipv6::Repr::parse(&p).unwrap();
            prop_assert_eq!(r.hop_limit, 64);
            prop_assert_eq!(r.payload_len, frame.len() - pad - v.ip_offset() - 40);
            let pseudo = checksum::pseudo_header_v6(p.src_addr(), p.dst_addr(), 17, (8 + payload.len()) as u32);
            prop_assert!(v.udp().verify_checksum(pseudo));
        } else {
            prop_assert_eq!(v.version(), IpVersion::V4);
            let p = ipv4::Packet::new_checked(ip).unwrap();
            prop_assert_eq!(p.header_len(), 20 + 4 * options_words);
            let r = ipv4::Repr::parse(&p).unwrap();
            prop_assert_eq!(r.payload_len, 8 + payload.len());
            prop_assert!(r.dont_frag);
            let pseudo = checksum::pseudo_header_v4(r.src_addr, r.dst_addr, 17, (8 + payload.len()) as u16);
            prop_assert!(v.udp().verify_checksum(pseudo));
        }
        // The tags as etherparse wrote them (802.1ad outside, 802.1Q inside).
        let e = ethernet::Frame::new_checked(&frame[..]).unwrap();
        if let [outer, rest @ ..] = &tags[..] {
            let t = vlan::Tag::new_checked(e.payload()).unwrap();
            prop_assert_eq!(t.vid(), *outer);
            if let [inner] = rest {
                prop_assert_eq!(e.ethertype(), ethernet::ethertype::QINQ);
                prop_assert_eq!(vlan::Tag::new_checked(t.payload()).unwrap().vid(), *inner);
            } else {
                prop_assert_eq!(e.ethertype(), ethernet::ethertype::VLAN);
            }
        }
    }

    #[test]
    fn an_emitted_frame_is_read_by_etherparse(
        v6 in any::<bool>(),
        vid in proptest::option::of(0u16..4095),
        ports in (any::<u16>(), any::<u16>()),
        payload in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let tag = if vid.is_some() { vlan::HEADER_LEN } else { 0 };
        let ip_len = if v6 { ipv6::HEADER_LEN } else { ipv4::HEADER_LEN };
        let n = ethernet::HEADER_LEN + tag + ip_len + udp::HEADER_LEN + payload.len();
        let mut f = vec![0u8; n];
        let inner = if v6 { ethernet::ethertype::IPV6 } else { ethernet::ethertype::IPV4 };
        let mut e = ethernet::Frame::new_unchecked(&mut f[..]);
        ethernet::Repr {
            src_addr: [2, 0, 0, 0, 0, 1],
            dst_addr: [2, 0, 0, 0, 0, 2],
            ethertype: if vid.is_some() { ethernet::ethertype::VLAN } else { inner },
        }
        .emit(&mut e);
        let l3 = ethernet::HEADER_LEN + tag;
        if let Some(vid) = vid {
            vlan::Repr { priority: 3, drop_eligible: false, vid, ethertype: inner }
                .emit(&mut vlan::Tag::new_unchecked(&mut f[ethernet::HEADER_LEN..]));
        }
        let ul = udp::HEADER_LEN + payload.len();
        let pseudo = if v6 {
            let r = ipv6::Repr {
                src_addr: "fd00::1".parse().unwrap(),
                dst_addr: "fd00::2".parse().unwrap(),
                next_header: 17,
                payload_len: ul,
                hop_limit: 64,
            };
            r.emit(&mut ipv6::Packet::new_unchecked(&mut f[l3..]));
            checksum::pseudo_header_v6(r.src_addr, r.dst_addr, 17, ul as u32)
        } else {
            let r = ipv4::Repr {
                src_addr: [10, 0, 0, 1].into(),
                dst_addr: [10, 0, 0, 2].into(),
                protocol: 17,
                payload_len: ul,
                ttl: 64,
                dont_frag: true,
            };
            r.emit(&mut ipv4::Packet::new_unchecked(&mut f[l3..]));
            checksum::pseudo_header_v4(r.src_addr, r.dst_addr, 17, ul as u16)
        };
        let l4 = l3 + ip_len;
        let mut u = udp::Packet::new_unchecked(&mut f[l4..]);
        udp::Repr { src_port: ports.0, dst_port: ports.1, payload_len: payload.len() }.emit(&mut u);
        u.payload_mut().copy_from_slice(&payload);
        u.fill_checksum(pseudo);
        let p = SlicedPacket::from_ethernet(&f).unwrap();
        let Some(TransportSlice::Udp(us)) = p.transport else {
            panic!("etherparse finds UDP");
        };
        prop_assert_eq!(us.payload(), &payload[..]);
        prop_assert_eq!((us.source_port(), us.destination_port()), ports);
        if !v6 {
            let h = etherparse::Ipv4HeaderSlice::from_slice(&f[l3..]).unwrap().to_header();
            prop_assert_eq!(h.calc_header_checksum(), h.header_checksum);
            let c = etherparse::UdpHeader::from_slice(&f[l4..]).unwrap().0
                .calc_checksum_ipv4_raw([10, 0, 0, 1], [10, 0, 0, 2], &payload).unwrap();
            let c = if c == 0 { 0xffff } else { c };
            prop_assert_eq!(c, us.checksum());
        }
    }

    #[test]
    fn random_bytes_never_panic_and_agree_where_both_parse(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..160),
        ethertype in prop_oneof![
            Just(ethernet::ethertype::IPV4),
            Just(ethernet::ethertype::IPV6),
            Just(ethernet::ethertype::VLAN),
            Just(ethernet::ethertype::QINQ),
            any::<u16>(),
        ],
        version in 0u8..16,
    ) {
        if bytes.len() > 14 {
            bytes[12..14].copy_from_slice(&ethertype.to_be_bytes());
            // Often a matching version and IHL 5, so the walk gets deep.
            bytes[14] = (version << 4) | (bytes[14] & 0x0f);
        }
        every_view(&bytes);
        let ours = udp_payload(&bytes);
        if let Ok(v) = ours {
            prop_assert!(v.payload_range().end <= bytes.len());
            prop_assert_eq!(v.payload().len(), v.payload_range().len());
            if let Some(t) = theirs(&bytes) {
                prop_assert_eq!(v.payload_range(), t);
            }
        }
    }

    #[test]
    fn built_frames_agree_after_a_random_flip(
        tags in tagging(),
        v6 in any::<bool>(),
        ext in 0u8..8,
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        at in any::<prop::sample::Index>(),
        x in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut f = build(&tags, v6, ext, 0, (1, 2), &payload);
        let i = at.index(f.len());
        f[i] ^= x;
        f.truncate(cut.index(f.len() + 1).max(1));
        every_view(&f);
        if let (Ok(v), Some(t)) = (udp_payload(&f), theirs(&f)) {
            prop_assert_eq!(v.payload_range(), t);
        }
    }
}

#[test]
fn the_error_and_reason_types_name_themselves() {
    assert_eq!(net::Error::Truncated.to_string(), "truncated header");
    assert_eq!(net::WhyNot::NotUdp(6).to_string(), "not UDP (protocol 6)");
}
