//! Whole header stacks in front of a UDP datagram: written once into a
//! template, then patched per packet (lengths, with the IPv4 checksum
//! updated incrementally).

use std::net::SocketAddrV4;

use super::ethernet::{self, ethertype};
use super::ipv4::{self, protocol};
use super::udp;

/// Bytes of the Ethernet, IPv4 (no options) and UDP headers in front of a datagram.
pub const UDP_V4_HEADERS: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN;

/// Bytes of the Ethernet, IPv6 and UDP headers in front of a datagram.
pub const UDP_V6_HEADERS: usize = ethernet::HEADER_LEN + super::ipv6::HEADER_LEN + udp::HEADER_LEN;

/// An Ethernet/IPv4/UDP header stack: don't fragment, no IP options, UDP
/// checksum 0 ("not computed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpV4 {
    /// Ethernet source.
    pub src_mac: [u8; 6],
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// IPv4 source address and UDP source port.
    pub src: SocketAddrV4,
    /// IPv4 destination address and UDP destination port.
    pub dst: SocketAddrV4,
    /// Time to live.
    pub ttl: u8,
    /// Payload bytes after the UDP header.
    pub payload_len: usize,
}

impl UdpV4 {
    /// Bytes [`UdpV4::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        UDP_V4_HEADERS
    }

    /// Writes the three headers (IPv4 checksum set) into the first
    /// [`UDP_V4_HEADERS`] bytes of `buf`, which must hold them. Lengths past
    /// what a field holds are written as its largest value.
    pub fn emit(&self, buf: &mut [u8]) {
        let (eth, rest) = buf.split_at_mut(ethernet::HEADER_LEN);
        ethernet::Repr {
            src_addr: self.src_mac,
            dst_addr: self.dst_mac,
            ethertype: ethertype::IPV4,
        }
        .emit(&mut ethernet::Frame::new_unchecked(eth));
        let (ip, rest) = rest.split_at_mut(ipv4::HEADER_LEN);
        ipv4::Repr {
            src_addr: *self.src.ip(),
            dst_addr: *self.dst.ip(),
            protocol: protocol::UDP,
            payload_len: udp::HEADER_LEN + self.payload_len,
            ttl: self.ttl,
            dont_frag: true,
        }
        .emit(&mut ipv4::Packet::new_unchecked(ip));
        udp::Repr {
            src_port: self.src.port(),
            dst_port: self.dst.port(),
            payload_len: self.payload_len,
        }
        .emit(&mut udp::Packet::new_unchecked(
            &mut rest[..udp::HEADER_LEN],
        ));
    }
}

/// Sets the IPv4 total length and UDP length of headers written by
/// [`UdpV4::emit`] for a `payload`-byte datagram, the IPv4 checksum updated
/// incrementally (RFC 1624): the per-packet patch of a template. `headers`
/// must hold [`UDP_V4_HEADERS`] bytes; a `payload` past 65507 bytes is the
/// caller's to refuse (the lengths wrap).
#[inline(always)]
pub fn set_udp_v4_payload_len(headers: &mut [u8], payload: u16) {
    let (_, rest) = headers.split_at_mut(ethernet::HEADER_LEN);
    let (ip, udp_h) = rest.split_at_mut(ipv4::HEADER_LEN);
    let udp_len = payload.wrapping_add(udp::HEADER_LEN as u16);
    ipv4::Packet::new_unchecked(ip)
        .set_total_len_update_checksum(udp_len.wrapping_add(ipv4::HEADER_LEN as u16));
    udp::Packet::new_unchecked(udp_h).set_len(udp_len);
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::net::udp_payload;

    #[test]
    fn a_stack_is_a_frame_the_walk_reads_and_a_patch_keeps_it_valid() {
        let s = UdpV4 {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.0.0.1:1024".parse().unwrap(),
            dst: "10.0.0.2:7148".parse().unwrap(),
            ttl: 64,
            payload_len: 0,
        };
        let mut f = vec![0u8; UDP_V4_HEADERS + 100];
        s.emit(&mut f);
        assert_eq!(s.buffer_len(), 42);
        assert!(udp_payload(&f).unwrap().payload().is_empty());
        set_udp_v4_payload_len(&mut f, 100);
        let v = udp_payload(&f).unwrap();
        assert_eq!(v.payload_range(), 42..142);
        let ip = ipv4::Packet::new_checked(v.ip()).unwrap();
        assert!(ip.verify_checksum());
        let r = ipv4::Repr::parse(&ip).unwrap();
        assert_eq!(
            (r.src_addr, r.dst_addr, r.ttl, r.dont_frag),
            (*s.src.ip(), *s.dst.ip(), 64, true)
        );
        let mut g = f.clone();
        UdpV4 {
            payload_len: 100,
            ..s
        }
        .emit(&mut g);
        assert_eq!(f, g, "the patch equals a stack emitted whole");
    }
}
