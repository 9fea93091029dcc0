//! [`udp_payload`]: from an Ethernet frame to its UDP payload, or why not.

use core::ops::Range;

use super::ethernet::{self, ethertype};
use super::ipv4::{self, protocol};
use super::ipv6::{self, ExtError};
use super::{udp, vlan, Error};

/// VLAN tags [`udp_payload`] walks at most (802.1ad outer + 802.1Q inner).
pub const MAX_TAGS: usize = 2;

/// Why a frame holds no UDP payload that [`udp_payload`] can hand over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WhyNot {
    /// Shorter than its headers, or than an IP length field says.
    #[error("truncated frame")]
    Truncated,
    /// Neither IPv4 nor IPv6 (the EtherType after any tags).
    #[error("not IP (EtherType {0:#06x})")]
    NotIp(u16),
    /// More than [`MAX_TAGS`] VLAN tags.
    #[error("too many VLAN tags")]
    TooManyTags,
    /// An MPLS label stack of more than [`super::encap::MAX_LABELS`] entries.
    #[error("too many MPLS labels")]
    TooManyLabels,
    /// An IP version that does not match the EtherType, or an IPv4 header
    /// length under 20 bytes.
    #[error("malformed IP header")]
    BadIpHeader,
    /// An IPv4 fragment, or an IPv6 packet with a fragment header: not
    /// reassembled, never parsed as UDP.
    #[error("IP fragment")]
    Fragment,
    /// An IPv6 extension header that cannot be looked past (ESP, "no next
    /// header"), or too many of them.
    #[error("IPv6 extension header {0} refused")]
    Extension(u8),
    /// Another protocol than UDP.
    #[error("not UDP (protocol {0})")]
    NotUdp(u8),
    /// A length field that contradicts another: an IPv4 total length under
    /// its header length, a UDP length under 8 or past the IP payload.
    #[error("bad length field")]
    BadLength,
}

/// The IP version of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// Where a UDP datagram sits in a frame (offsets into the frame it was found in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpView<'a> {
    frame: &'a [u8],
    version: IpVersion,
    l3: usize,
    l4: usize,
    end: usize,
}

impl<'a> UdpView<'a> {
    /// The IP version.
    #[inline]
    pub fn version(&self) -> IpVersion {
        self.version
    }

    /// Offset of the IP header.
    #[inline]
    pub fn ip_offset(&self) -> usize {
        self.l3
    }

    /// Offset of the UDP header.
    #[inline]
    pub fn udp_offset(&self) -> usize {
        self.l4
    }

    /// The payload's bytes in the frame (its length is the UDP length's;
    /// Ethernet padding after it is not payload).
    #[inline]
    pub fn payload_range(&self) -> Range<usize> {
        self.l4 + udp::HEADER_LEN..self.end
    }

    /// The payload.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.frame.get(self.payload_range()).unwrap_or(&[])
    }

    /// The IP header and what follows (for the version's view: an
    /// [`ipv4::Packet`] or an [`ipv6::Packet`], which check as `Ok`).
    #[inline]
    pub fn ip(&self) -> &'a [u8] {
        self.frame.get(self.l3..).unwrap_or(&[])
    }

    /// The UDP datagram (a [`udp::Packet`] that checks as `Ok`).
    #[inline]
    pub fn udp(&self) -> udp::Packet<&'a [u8]> {
        udp::Packet::new_unchecked(self.frame.get(self.l4..self.end).unwrap_or(&[0; 8]))
    }
}

impl From<Error> for WhyNot {
    fn from(e: Error) -> WhyNot {
        match e {
            Error::Truncated => WhyNot::Truncated,
            Error::Fragment => WhyNot::Fragment,
            Error::Malformed | Error::Checksum => WhyNot::BadIpHeader,
        }
    }
}

/// Walks an Ethernet frame (no FCS) through up to two VLAN tags, IPv4 (with
/// options) or IPv6 (with its extension headers) to a UDP datagram, and says
/// where its payload is, or why there is none. Lengths are checked against
/// each other and the frame; checksums are not (callers that need the IPv4
/// header checksum check it on [`UdpView::ip`]). Allocation-free; never panics.
#[inline]
pub fn udp_payload(frame: &[u8]) -> Result<UdpView<'_>, WhyNot> {
    let eth = ethernet::Frame::new_checked(frame)?;
    let mut et = eth.ethertype();
    let mut l3 = ethernet::HEADER_LEN;
    let mut tags = 0;
    while vlan::is_tag(et) {
        if tags == MAX_TAGS {
            return Err(WhyNot::TooManyTags);
        }
        let tag = vlan::Tag::new_checked(frame.get(l3..).unwrap_or(&[]))?;
        et = tag.ethertype();
        l3 += vlan::HEADER_LEN;
        tags += 1;
    }
    ip_udp(frame, l3, et)
}

/// The IP and UDP half of [`udp_payload`]: the datagram of an IP packet of
/// EtherType `et` at offset `l3` of `frame`.
#[inline]
pub(super) fn ip_udp(frame: &[u8], l3: usize, et: u16) -> Result<UdpView<'_>, WhyNot> {
    let ip = frame.get(l3..).unwrap_or(&[]);
    let (version, l4, end) = match et {
        ethertype::IPV4 => {
            let p = ipv4::Packet::new_checked(ip)?;
            if p.version() != 4 {
                return Err(WhyNot::BadIpHeader);
            }
            let total = usize::from(p.total_len());
            if total < p.header_len() {
                return Err(WhyNot::BadLength);
            }
            if total > ip.len() {
                return Err(WhyNot::Truncated);
            }
            if p.is_fragment() {
                return Err(WhyNot::Fragment);
            }
            if p.protocol() != protocol::UDP {
                return Err(WhyNot::NotUdp(p.protocol()));
            }
            (IpVersion::V4, l3 + p.header_len(), l3 + total)
        }
        ethertype::IPV6 => {
            let p = ipv6::Packet::new_checked(ip)?;
            if p.version() != 6 {
                return Err(WhyNot::BadIpHeader);
            }
            let end = ipv6::HEADER_LEN + usize::from(p.payload_len());
            if end > ip.len() {
                return Err(WhyNot::Truncated);
            }
            let nh = p.next_header();
            let (upper, at) = ipv6::upper_layer(nh, p.payload()).map_err(|e| match e {
                ExtError::Truncated => WhyNot::BadLength,
                ExtError::Fragment => WhyNot::Fragment,
                ExtError::Esp => WhyNot::Extension(protocol::ESP),
                ExtError::NoNextHeader => WhyNot::Extension(protocol::IPV6_NO_NEXT),
                ExtError::TooMany => WhyNot::Extension(nh),
            })?;
            if upper != protocol::UDP {
                return Err(WhyNot::NotUdp(upper));
            }
            (IpVersion::V6, l3 + ipv6::HEADER_LEN + at, l3 + end)
        }
        other => return Err(WhyNot::NotIp(other)),
    };
    // The UDP header and its length within the IP payload.
    let room = end - l4;
    let u = udp::Packet::new_checked(frame.get(l4..end).unwrap_or(&[]))
        .map_err(|_| WhyNot::BadLength)?;
    let len = usize::from(u.len());
    if len < udp::HEADER_LEN || len > room {
        return Err(WhyNot::BadLength);
    }
    Ok(UdpView {
        frame,
        version,
        l3,
        l4,
        end: l4 + len,
    })
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::net::{ethernet, ipv4, ipv6, udp, vlan};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// Ethernet [+ tags] + IPv4 + UDP with `payload` bytes of 0xaa and
    /// `pad` bytes of Ethernet padding.
    fn v4_frame(tags: &[u16], payload: usize, pad: usize) -> Vec<u8> {
        let l3 = 14 + 4 * tags.len();
        let mut f = vec![0u8; l3 + 28 + payload + pad];
        let types: Vec<u16> = tags.iter().copied().chain([ethertype::IPV4]).collect();
        let mut e = ethernet::Frame::new_unchecked(&mut f[..]);
        e.set_ethertype(types[0]);
        for (i, &t) in types[1..].iter().enumerate() {
            let mut tag = vlan::Tag::new_unchecked(&mut f[14 + 4 * i..]);
            tag.set_tci(0, false, 100 + i as u16);
            tag.set_ethertype(t);
        }
        let ip = ipv4::Repr {
            src_addr: Ipv4Addr::new(10, 0, 0, 1),
            dst_addr: Ipv4Addr::new(10, 0, 0, 2),
            protocol: protocol::UDP,
            payload_len: 8 + payload,
            ttl: 64,
            dont_frag: true,
        };
        ip.emit(&mut ipv4::Packet::new_unchecked(&mut f[l3..]));
        let u = udp::Repr {
            src_port: 1,
            dst_port: 2,
            payload_len: payload,
        };
        u.emit(&mut udp::Packet::new_unchecked(&mut f[l3 + 20..]));
        f[l3 + 28..l3 + 28 + payload].fill(0xaa);
        f
    }

    #[test]
    fn untagged_single_and_double_tagged_frames_find_the_payload() {
        for tags in [
            &[][..],
            &[ethertype::VLAN],
            &[ethertype::QINQ, ethertype::VLAN],
        ] {
            let f = v4_frame(tags, 10, 6);
            let v = udp_payload(&f).unwrap();
            let l3 = 14 + 4 * tags.len();
            assert_eq!(v.version(), IpVersion::V4);
            assert_eq!((v.ip_offset(), v.udp_offset()), (l3, l3 + 20));
            assert_eq!(v.payload_range(), l3 + 28..l3 + 38);
            assert_eq!(v.payload(), &[0xaa; 10]);
            assert_eq!((v.udp().src_port(), v.udp().dst_port()), (1, 2));
            assert!(ipv4::Packet::new_checked(v.ip()).unwrap().verify_checksum());
        }
        let three = v4_frame(&[ethertype::QINQ, ethertype::VLAN, ethertype::VLAN], 10, 0);
        assert_eq!(udp_payload(&three), Err(WhyNot::TooManyTags));
    }

    #[test]
    fn each_reason_is_named() {
        let f = v4_frame(&[], 10, 0);
        for n in 0..f.len() {
            let r = udp_payload(&f[..n]);
            assert!(
                r == Err(WhyNot::Truncated) || r == Err(WhyNot::BadLength),
                "{n}: {r:?}"
            );
        }
        let mut g = f.clone();
        g[12..14].copy_from_slice(&ethertype::ARP.to_be_bytes());
        assert_eq!(udp_payload(&g), Err(WhyNot::NotIp(ethertype::ARP)));
        let mut g = f.clone();
        g[14] = 0x65;
        assert_eq!(udp_payload(&g), Err(WhyNot::BadIpHeader));
        let mut g = f.clone();
        g[14] = 0x44;
        assert_eq!(udp_payload(&g), Err(WhyNot::BadIpHeader));
        // The walk's answer after an edit of the IPv4 and UDP headers.
        let edited = |edit: &dyn Fn(&mut ipv4::Packet<&mut [u8]>), udp_len: u16| {
            let mut p = f.clone();
            edit(&mut ipv4::Packet::new_unchecked(&mut p[14..]));
            udp::Packet::new_unchecked(&mut p[34..]).set_len(udp_len);
            udp_payload(&p).map(|v| v.payload_range())
        };
        let frag = |ip: &mut ipv4::Packet<&mut [u8]>| ip.set_frag(false, true, 0);
        assert_eq!(edited(&frag, 18), Err(WhyNot::Fragment));
        let later = |ip: &mut ipv4::Packet<&mut [u8]>| ip.set_frag(false, false, 8);
        assert_eq!(edited(&later, 18), Err(WhyNot::Fragment));
        let tcp = |ip: &mut ipv4::Packet<&mut [u8]>| ip.set_protocol(protocol::TCP);
        assert_eq!(edited(&tcp, 18), Err(WhyNot::NotUdp(6)));
        let under_header = |ip: &mut ipv4::Packet<&mut [u8]>| ip.set_total_len(19);
        assert_eq!(edited(&under_header, 18), Err(WhyNot::BadLength));
        let no_udp_header = |ip: &mut ipv4::Packet<&mut [u8]>| ip.set_total_len(27);
        assert_eq!(edited(&no_udp_header, 18), Err(WhyNot::BadLength));
        let same = |_: &mut ipv4::Packet<&mut [u8]>| {};
        assert_eq!(edited(&same, 7), Err(WhyNot::BadLength));
        assert_eq!(edited(&same, 19), Err(WhyNot::BadLength));
        assert_eq!(edited(&same, 8), Ok(42..42));
        assert_eq!(edited(&same, 18), Ok(42..52));
    }

    #[test]
    fn ipv4_options_are_skipped() {
        let mut f = vec![0u8; 14 + 24 + 8 + 4];
        f[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        let mut ip = ipv4::Packet::new_unchecked(&mut f[14..]);
        ip.set_version_and_header_len(4, 24);
        ip.set_total_len(36);
        ip.set_protocol(protocol::UDP);
        udp::Repr {
            src_port: 1,
            dst_port: 2,
            payload_len: 4,
        }
        .emit(&mut udp::Packet::new_unchecked(&mut f[38..]));
        assert_eq!(udp_payload(&f).unwrap().payload_range(), 46..50);
    }

    #[test]
    fn ipv6_extension_headers_are_skipped_or_refused() {
        // Ethernet + IPv6 + hop-by-hop (8) + UDP + 4 bytes.
        let mut f = vec![0u8; 14 + 40 + 8 + 8 + 4];
        f[12..14].copy_from_slice(&ethertype::IPV6.to_be_bytes());
        ipv6::Repr {
            src_addr: Ipv6Addr::LOCALHOST,
            dst_addr: Ipv6Addr::LOCALHOST,
            next_header: protocol::HOP_BY_HOP,
            payload_len: 20,
            hop_limit: 64,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut f[14..]));
        f[54] = protocol::UDP;
        udp::Repr {
            src_port: 1,
            dst_port: 2,
            payload_len: 4,
        }
        .emit(&mut udp::Packet::new_unchecked(&mut f[62..]));
        let v = udp_payload(&f).unwrap();
        assert_eq!(
            (v.version(), v.udp_offset(), v.payload_range()),
            (IpVersion::V6, 62, 70..74)
        );
        f[54] = protocol::IPV6_FRAG;
        assert_eq!(udp_payload(&f), Err(WhyNot::Fragment));
        f[54] = protocol::ESP;
        assert_eq!(udp_payload(&f), Err(WhyNot::Extension(protocol::ESP)));
        f[54] = protocol::TCP;
        assert_eq!(udp_payload(&f), Err(WhyNot::NotUdp(protocol::TCP)));
        f[20] = protocol::UDP;
        f[54] = 0;
        // UDP straight after the header: its length field (0) is short.
        assert_eq!(udp_payload(&f), Err(WhyNot::BadLength));
        f[14] = 0x40;
        assert_eq!(udp_payload(&f), Err(WhyNot::BadIpHeader));
    }
}
