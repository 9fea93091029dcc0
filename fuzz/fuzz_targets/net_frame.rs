//! Fuzzes the wire module (`linerate::net`): every header view and `Repr`
//! over the input at every offset of its head, and the frame walk
//! (`udp_payload`, and `encap::walk` through VLAN, MPLS and VXLAN). Nothing may panic; an accepted frame's payload lies
//! inside it, after its headers; and a `Repr` that parses emits the same
//! header bytes back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::net::{ethernet, ipv4, ipv6, mpls, udp, udp_payload, vlan, vxlan};

fuzz_target!(|data: &[u8]| {
    // The walk through tags, labels and tunnels: the view lies in the frame
    // (or in the VXLAN payload inside it), and never panics.
    for port in [None, Some(4789), Some(u16::from_be_bytes([data.first().copied().unwrap_or(0), 0]))] {
        if let Ok((e, v)) = linerate::net::encap::walk(data, port) {
            assert!(v.payload().len() <= data.len());
            assert!(usize::from(e.tags) <= 2 && usize::from(e.labels) <= 8);
        }
    }
    if let Ok(v) = udp_payload(data) {
        let r = v.payload_range();
        assert!(v.ip_offset() >= ethernet::HEADER_LEN);
        assert!(v.udp_offset() >= v.ip_offset() + ipv4::HEADER_LEN);
        assert!(r.start == v.udp_offset() + udp::HEADER_LEN && r.end <= data.len());
        assert_eq!(v.payload().len(), r.len());
        assert!(usize::from(v.udp().len()) == r.len() + udp::HEADER_LEN);
    }
    for at in 0..data.len().min(64) {
        let s = &data[at..];
        if let Ok(f) = ethernet::Frame::new_checked(s) {
            let r = ethernet::Repr::parse(&f).unwrap();
            let mut b = [0u8; ethernet::HEADER_LEN];
            r.emit(&mut ethernet::Frame::new_unchecked(&mut b[..]));
            assert_eq!(b[..], s[..ethernet::HEADER_LEN]);
        }
        if let Ok(t) = vlan::Tag::new_checked(s) {
            let r = vlan::Repr::parse(&t).unwrap();
            let mut b = [0u8; vlan::HEADER_LEN];
            r.emit(&mut vlan::Tag::new_unchecked(&mut b[..]));
            assert_eq!(b[..], s[..vlan::HEADER_LEN]);
        }
        if let Ok(p) = ipv4::Packet::new_checked(s) {
            let _ = (p.options(), p.payload(), p.verify_checksum(), p.frag_offset());
            if let Ok(r) = ipv4::Repr::parse(&p) {
                assert!(p.verify_checksum() && !p.is_fragment());
                assert_eq!(r.payload_len, p.payload().len());
            }
        }
        if let Ok(p) = ipv6::Packet::new_checked(s) {
            let _ = (p.payload(), p.flow_label(), p.traffic_class());
            if let Ok((_, off)) = ipv6::upper_layer(p.next_header(), p.payload()) {
                assert!(off <= p.payload().len());
            }
            if let Ok(r) = ipv6::Repr::parse(&p) {
                assert_eq!(r.payload_len, p.payload().len());
            }
        }
        if let Ok(p) = udp::Packet::new_checked(s) {
            let _ = (p.verify_checksum(0xffff), p.is_empty());
            if let Ok(r) = udp::Repr::parse(&p) {
                assert_eq!(r.payload_len, p.payload().len());
            }
        }
        if let Ok(p) = vxlan::Packet::new_checked(s) {
            let _ = (vxlan::Repr::parse(&p), p.payload());
        }
        if let Ok(e) = mpls::Entry::new_checked(s) {
            let r = mpls::Repr::parse(&e).unwrap();
            let mut b = [0u8; mpls::HEADER_LEN];
            r.emit(&mut mpls::Entry::new_unchecked(&mut b[..]));
            assert_eq!(b[..], s[..mpls::HEADER_LEN]);
        }
    }
});
