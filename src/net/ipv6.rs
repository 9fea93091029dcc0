//! IPv6 headers (RFC 8200) and the walk over their extension headers.
//!
//! ```text
//! 0..4 version (4 bits), traffic class (8), flow label (20)
//! 4..6 payload length  6 next header  7 hop limit  8..24 source  24..40 destination
//! ```
//!
//! [`upper_layer`] skips hop-by-hop, routing, destination-options,
//! authentication, mobility, HIP and Shim6 headers, and refuses by name what
//! it cannot look past: a fragment header, ESP, "no next header".

use std::net::Ipv6Addr;

use super::ipv4::protocol;
use super::{get_u16, set_u16, Error};

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
    // An extension header, relative to its start.
    pub const EXT_NXT_HDR: usize = 0;
    pub const EXT_LEN: usize = 1;
}

/// Bytes of the fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Extension headers [`upper_layer`] walks at most before it gives up.
pub const MAX_EXTENSIONS: usize = 8;

/// A view of an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without any check.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view of a buffer that holds the fixed header ([`Packet::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Ok` when the buffer holds the 40-byte fixed header.
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The version field (6 in an IPv6 packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW.start] >> 4
    }

    /// Traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }

    /// Payload length: bytes after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// The next header (the first extension header's type, or the upper layer's).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// The payload (extension headers included): the payload length's bytes
    /// after the fixed header, clamped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let start = HEADER_LEN.min(b.len());
        let end = (HEADER_LEN + usize::from(self.payload_len())).clamp(start, b.len());
        &b[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 6, traffic class and flow label.
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the source address from its 128-bit value.
    #[inline(always)]
    pub fn set_src_bits(&mut self, a: u128) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.to_be_bytes());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address from its 128-bit value.
    #[inline(always)]
    pub fn set_dst_bits(&mut self, a: u128) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.to_be_bytes());
    }

    /// The payload (as [`Packet::payload`]), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.payload_len());
        let b = self.buffer.as_mut();
        let start = HEADER_LEN.min(b.len());
        let end = end.clamp(start, b.len());
        &mut b[start..end]
    }
}

/// Why [`upper_layer`] could not reach the upper-layer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtError {
    /// An extension header runs past the payload.
    Truncated,
    /// A fragment header: the upper layer is not whole here.
    Fragment,
    /// ESP: what follows is encrypted.
    Esp,
    /// "No next header" (59): there is no upper layer.
    NoNextHeader,
    /// More than [`MAX_EXTENSIONS`] extension headers.
    TooMany,
}

/// Walks the extension headers at the start of `payload` (an IPv6 payload
/// whose first header is `next_header`) and returns the upper layer's
/// protocol and its offset in `payload`. Headers it does not know are taken
/// for the upper layer.
#[inline]
pub fn upper_layer(next_header: u8, payload: &[u8]) -> Result<(u8, usize), ExtError> {
    let mut nh = next_header;
    let mut at = 0usize;
    for _ in 0..=MAX_EXTENSIONS {
        let len_unit = match nh {
            protocol::HOP_BY_HOP
            | protocol::IPV6_ROUTE
            | protocol::IPV6_OPTS
            | protocol::MOBILITY
            | protocol::HIP
            | protocol::SHIM6 => 8,
            protocol::AH => 4,
            protocol::IPV6_FRAG => return Err(ExtError::Fragment),
            protocol::ESP => return Err(ExtError::Esp),
            protocol::IPV6_NO_NEXT => return Err(ExtError::NoNextHeader),
            _ => return Ok((nh, at)),
        };
        let h = payload.get(at..at + 2).ok_or(ExtError::Truncated)?;
        let n = usize::from(h[field::EXT_LEN]);
        // Lengths in units past the first: 8-byte units past the first 8,
        // or (AH) 4-byte units past the first 8.
        let len = if len_unit == 8 {
            (n + 1) * 8
        } else {
            (n + 2) * 4
        };
        if at + len > payload.len() {
            return Err(ExtError::Truncated);
        }
        nh = h[field::EXT_NXT_HDR];
        at += len;
    }
    Err(ExtError::TooMany)
}

/// An IPv6 fixed header's meaning (traffic class and flow label 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload bytes (extension headers included).
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Repr {
    /// Reads a packet's fixed header: version 6 and a payload length that
    /// fits the buffer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        p.check_len()?;
        if p.version() != 6 {
            return Err(Error::Malformed);
        }
        let len = usize::from(p.payload_len());
        if HEADER_LEN + len > p.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: len,
            hop_limit: p.hop_limit(),
        })
    }

    /// Bytes of the header [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the fixed header into a packet of at least
    /// [`Repr::buffer_len`] bytes. A payload length past 65535 is written as
    /// 65535.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_tc_flow(0, 0);
        p.set_payload_len(self.payload_len.min(usize::from(u16::MAX)) as u16);
        p.set_next_header(self.next_header);
        p.set_hop_limit(self.hop_limit);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// fd00::1 -> fd00::2, UDP, hop limit 64, four payload bytes.
    static PACKET: [u8; 44] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x04, 0x11, 0x40, // version .. hop limit
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, // source
        0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, // destination
        0xaa, 0xbb, 0xcc, 0xdd,
    ];

    fn repr() -> Repr {
        Repr {
            src_addr: "fd00::1".parse().unwrap(),
            dst_addr: "fd00::2".parse().unwrap(),
            next_header: protocol::UDP,
            payload_len: 4,
            hop_limit: 64,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!((p.version(), p.traffic_class(), p.flow_label()), (6, 0, 0));
        assert_eq!(
            (p.payload_len(), p.next_header(), p.hop_limit()),
            (4, 17, 64)
        );
        assert_eq!(p.src_addr(), "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "fd00::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 44];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0, 0);
        p.set_payload_len(4);
        p.set_next_header(17);
        p.set_hop_limit(64);
        p.set_src_bits(0xfd00 << 112 | 1);
        p.set_dst_addr("fd00::2".parse().unwrap());
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b, PACKET);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_tc_flow(0xb8, 0x12345);
        assert_eq!(
            (p.traffic_class(), p.flow_label(), p.version()),
            (0xb8, 0x12345, 6)
        );
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&PACKET[..])).unwrap(),
            repr()
        );
        let mut b = PACKET;
        b[..40].fill(0);
        repr().emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, PACKET);
        let mut b = PACKET;
        b[0] = 0x40;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Malformed)
        );
        let mut b = PACKET;
        b[5] = 5;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Truncated)
        );
        assert_eq!(Packet::new_unchecked(&b[..]).payload().len(), 4);
    }

    #[test]
    fn extension_headers_are_skipped_or_refused_by_name() {
        // Hop-by-hop (8 bytes) -> destination options (16) -> AH (12) -> UDP.
        let mut p = vec![0u8; 8 + 16 + 12 + 8];
        p[0] = protocol::IPV6_OPTS;
        p[8] = protocol::AH;
        p[9] = 1;
        p[24] = protocol::UDP;
        p[25] = 1;
        assert_eq!(upper_layer(protocol::HOP_BY_HOP, &p), Ok((17, 36)));
        assert_eq!(upper_layer(protocol::UDP, &p), Ok((17, 0)));
        assert_eq!(
            upper_layer(protocol::HOP_BY_HOP, &p[..30]),
            Err(ExtError::Truncated)
        );
        assert_eq!(
            upper_layer(protocol::HOP_BY_HOP, &p[..1]),
            Err(ExtError::Truncated)
        );
        p[24] = protocol::IPV6_FRAG;
        assert_eq!(
            upper_layer(protocol::HOP_BY_HOP, &p),
            Err(ExtError::Fragment)
        );
        p[24] = protocol::ESP;
        assert_eq!(upper_layer(protocol::HOP_BY_HOP, &p), Err(ExtError::Esp));
        p[24] = protocol::IPV6_NO_NEXT;
        assert_eq!(
            upper_layer(protocol::HOP_BY_HOP, &p),
            Err(ExtError::NoNextHeader)
        );
        // A chain longer than the limit.
        let chain = vec![0u8; 8 * (MAX_EXTENSIONS + 2)];
        assert_eq!(
            upper_layer(protocol::HOP_BY_HOP, &chain),
            Err(ExtError::TooMany)
        );
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&PACKET[..n]), Err(Error::Truncated));
        }
        assert!(Packet::new_checked(&PACKET[..40])
            .unwrap()
            .payload()
            .is_empty());
    }
}
