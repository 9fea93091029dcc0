//! [`walk`]: from an Ethernet frame through VLAN tags (802.1Q, 802.1ad
//! QinQ), an MPLS label stack or a VXLAN tunnel to the UDP datagram inside,
//! saying what it passed on the way.

use super::ethernet::{self, ethertype};
use super::walk::{ip_udp, UdpView, WhyNot, MAX_TAGS};
use super::{mpls, udp_payload, vlan, vxlan};

/// MPLS label stack entries [`walk`] looks past at most.
pub const MAX_LABELS: usize = 8;

/// What a frame's datagram was wrapped in, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Encap {
    /// VLAN tags walked (0..=[`MAX_TAGS`]) in front of the IP header (the
    /// outer frame's, for VXLAN).
    pub tags: u8,
    /// Their VLAN ids, outer first (`vids[..tags]`).
    pub vids: [u16; MAX_TAGS],
    /// Whether the outer tag was an 802.1ad service tag (TPID 0x88a8).
    pub service_tag: bool,
    /// MPLS label stack entries walked (0..=[`MAX_LABELS`]).
    pub labels: u8,
    /// The outermost MPLS label (0 without labels).
    pub label: u32,
    /// The VNI, when the datagram was found inside VXLAN.
    pub vni: Option<u32>,
}

/// Walks `frame` like [`udp_payload`], and also through an MPLS label stack
/// (the IP version read from the first nibble after the bottom entry) and,
/// when `vxlan_port` is given and the datagram goes to it with the VXLAN I
/// flag set and an inner Ethernet frame that holds UDP, into it (its own
/// VLAN tags walked, not recorded). The view's offsets are into the frame it was found in (the
/// inner one for VXLAN). Allocation-free; never panics.
pub fn walk(frame: &[u8], vxlan_port: Option<u16>) -> Result<(Encap, UdpView<'_>), WhyNot> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let mut e = Encap::default();
    let mut et = eth.ethertype();
    let mut l3 = ethernet::HEADER_LEN;
    while vlan::is_tag(et) {
        let i = usize::from(e.tags);
        if i == MAX_TAGS {
            return Err(WhyNot::TooManyTags);
        }
        let tag = vlan::Tag::new_checked(frame.get(l3..).unwrap_or(&[]))?;
        if i == 0 {
            e.service_tag = et == ethertype::QINQ;
        }
        e.vids[i] = tag.vid();
        et = tag.ethertype();
        l3 += vlan::HEADER_LEN;
        e.tags += 1;
    }
    if et == ethertype::MPLS || et == ethertype::MPLS_MULTICAST {
        loop {
            if usize::from(e.labels) == MAX_LABELS {
                return Err(WhyNot::TooManyLabels);
            }
            let entry = mpls::Entry::new_checked(frame.get(l3..).unwrap_or(&[]))?;
            if e.labels == 0 {
                e.label = entry.label();
            }
            e.labels += 1;
            l3 += mpls::HEADER_LEN;
            if entry.bottom_of_stack() {
                break;
            }
        }
        // No EtherType after the stack: the IP version says which it is.
        et = match frame.get(l3).map(|b| b >> 4) {
            Some(4) => ethertype::IPV4,
            Some(6) => ethertype::IPV6,
            Some(_) => return Err(WhyNot::NotIp(et)),
            None => return Err(WhyNot::Truncated),
        };
    }
    let outer = ip_udp(frame, l3, et)?;
    match vxlan_port {
        Some(port) if outer.udp().dst_port() == port => {
            let v = vxlan::Packet::new_checked(outer.payload())?;
            if !v.vni_valid() {
                return Ok((e, outer));
            }
            // A datagram to the port whose inner frame holds no UDP is taken
            // as plain UDP (its payload is no stamp, whatever it is).
            match udp_payload(v.into_inner().get(vxlan::HEADER_LEN..).unwrap_or(&[])) {
                Ok(inner) => {
                    e.vni = Some(v.vni());
                    Ok((e, inner))
                }
                Err(_) => Ok((e, outer)),
            }
        }
        _ => Ok((e, outer)),
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::net::stack::{UdpV4, UDP_V4_HEADERS};

    /// Ethernet/IPv4/UDP with `payload` bytes of 0xaa.
    fn plain(payload: usize, dst_port: u16) -> Vec<u8> {
        let mut f = vec![0xaau8; UDP_V4_HEADERS + payload];
        UdpV4 {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.0.0.1:1".parse().unwrap(),
            dst: std::net::SocketAddrV4::new("10.0.0.2".parse().unwrap(), dst_port),
            ttl: 64,
            payload_len: payload,
        }
        .emit(&mut f);
        f
    }

    /// `f` with `extra` bytes inserted before its IP header and the
    /// EtherType set to `et`.
    fn insert(f: &[u8], et: u16, extra: &[u8]) -> Vec<u8> {
        let mut g = f[..12].to_vec();
        g.extend_from_slice(&et.to_be_bytes());
        g.extend_from_slice(extra);
        g.extend_from_slice(&f[14..]);
        g
    }

    #[test]
    fn tags_labels_and_tunnels_are_walked_and_recorded() {
        let f = plain(10, 7);
        let (e, v) = walk(&f, Some(4789)).unwrap();
        assert_eq!((e, v.payload()), (Encap::default(), &[0xaa; 10][..]));
        // QinQ: 0x88a8 100, 0x8100 200.
        let q = insert(&f, ethertype::QINQ, &[0, 100, 0x81, 0, 0, 200, 8, 0]);
        let (e, v) = walk(&q, None).unwrap();
        assert_eq!((e.tags, e.vids, e.service_tag), (2, [100, 200], true));
        assert_eq!(v.payload(), &[0xaa; 10]);
        // Two labels, 16 then 17 (bottom of stack), TTL 64.
        let mut labels = [0u8; 8];
        mpls::Entry::new_unchecked(&mut labels[..4]).set(16, 0, false, 64);
        mpls::Entry::new_unchecked(&mut labels[4..]).set(17, 0, true, 64);
        let m = insert(&f, ethertype::MPLS, &labels);
        let (e, v) = walk(&m, None).unwrap();
        assert_eq!((e.labels, e.label, e.tags), (2, 16, 0));
        assert_eq!(v.payload(), &[0xaa; 10]);
        // A stack without a bottom entry runs out of labels or of frame.
        let mut deep = Vec::new();
        for _ in 0..MAX_LABELS {
            deep.extend_from_slice(&labels[..4]);
        }
        let m = insert(&f, ethertype::MPLS, &deep);
        assert_eq!(walk(&m, None).unwrap_err(), WhyNot::TooManyLabels);
        assert_eq!(
            walk(&m[..14 + 8], None).unwrap_err(),
            WhyNot::Truncated,
            "a cut stack"
        );
        // VXLAN: the plain frame inside an outer one to port 4789.
        let mut x = plain(8 + f.len(), 4789);
        let at = UDP_V4_HEADERS;
        vxlan::Repr { vni: 0x12345 }.emit(&mut vxlan::Packet::new_unchecked(&mut x[at..]));
        x[at + 8..].copy_from_slice(&f);
        let (e, v) = walk(&x, Some(4789)).unwrap();
        assert_eq!(e.vni, Some(0x12345));
        assert_eq!(v.payload(), &[0xaa; 10]);
        // Not decapsulated on another port, or without the I flag.
        assert_eq!(walk(&x, Some(4790)).unwrap().0.vni, None);
        assert_eq!(walk(&x, None).unwrap().1.payload().len(), 8 + f.len());
        x[at] = 0;
        assert_eq!(walk(&x, Some(4789)).unwrap().0.vni, None);
    }

    #[test]
    fn every_cut_of_every_encapsulation_is_refused_not_a_panic() {
        let f = plain(4, 9);
        let q = insert(&f, ethertype::VLAN, &[0, 5, 8, 0]);
        let mut x = plain(8 + q.len(), 4789);
        vxlan::Repr { vni: 1 }.emit(&mut vxlan::Packet::new_unchecked(&mut x[UDP_V4_HEADERS..]));
        x[UDP_V4_HEADERS + 8..].copy_from_slice(&q);
        for n in 0..x.len() {
            let _ = walk(&x[..n], Some(4789));
        }
        assert_eq!(walk(&x, Some(4789)).unwrap().1.payload().len(), 4);
    }
}
