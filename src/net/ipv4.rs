//! IPv4 headers (RFC 791), options included (read and skipped, never
//! written).
//!
//! ```text
//! 0 version (4 bits), IHL (4 bits: header length in words)  1 DSCP/ECN
//! 2..4 total length  4..6 identification  6..8 flags (DF 0x4000, MF 0x2000),
//! fragment offset (13 bits, in 8-byte units)  8 TTL  9 protocol
//! 10..12 header checksum  12..16 source  16..20 destination  20..IHL*4 options
//! ```
//!
//! [`Packet::check_len`] checks the header (and its options) fit; the total
//! length is checked by [`Repr::parse`] and clamped by [`Packet::payload`].

use std::net::Ipv4Addr;

use super::checksum;
use super::{get_u16, set_u16, Error};

/// IP protocol numbers (shared with IPv6's next header).
pub mod protocol {
    /// IPv6 hop-by-hop options.
    pub const HOP_BY_HOP: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// Encapsulating security payload.
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6: no next header.
    pub const IPV6_NO_NEXT: u8 = 59;
    /// IPv6 destination options.
    pub const IPV6_OPTS: u8 = 60;
    /// Mobility header.
    pub const MOBILITY: u8 = 135;
    /// Host identity protocol.
    pub const HIP: u8 = 139;
    /// Shim6.
    pub const SHIM6: u8 = 140;
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;
}

/// Bytes of a header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// The flags' don't-fragment bit.
const DONT_FRAG: u16 = 0x4000;
/// The flags' more-fragments bit.
const MORE_FRAGS: u16 = 0x2000;

/// A view of an IPv4 packet.
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

    /// A view of a buffer that holds the whole header ([`Packet::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Ok` when the buffer holds 20 bytes, the IHL is at least 5 words and
    /// the buffer holds the header with its options.
    #[inline]
    pub fn check_len(&self) -> Result<(), Error> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(Error::Truncated)
        } else if self.header_len() < HEADER_LEN {
            Err(Error::Malformed)
        } else if len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The version field (4 in an IPv4 packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// The header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// DSCP (6 bits).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// ECN (2 bits).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 3
    }

    /// The total length field: header and payload bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// The identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// The don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF.start) & DONT_FRAG != 0
    }

    /// The more-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF.start) & MORE_FRAGS != 0
    }

    /// The fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (get_u16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x1fff) << 3
    }

    /// Whether this is a fragment (more follow, or it is not the first).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::FLG_OFF.start) & (MORE_FRAGS | 0x1fff) != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// The protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// The header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// The options (empty for a 20-byte header).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        b.get(HEADER_LEN..self.header_len()).unwrap_or(&[])
    }

    /// Whether the header checksum (options included) is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        let b = self.buffer.as_ref();
        b.get(..self.header_len())
            .is_some_and(|h| checksum::checksum(h) == 0)
    }

    /// The payload: from the end of the header to the total length, clamped
    /// to the buffer (Ethernet padding after the packet is not payload).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let start = self.header_len().min(b.len());
        let end = usize::from(self.total_len()).clamp(start, b.len());
        &b[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version and header length (in bytes: a multiple of 4, 20..=60).
    #[inline]
    pub fn set_version_and_header_len(&mut self, version: u8, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = (version << 4) | ((header_len / 4) as u8 & 0x0f);
    }

    /// Sets DSCP and ECN.
    #[inline]
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 3);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::IDENT.start, v);
    }

    /// Sets the flags and the fragment offset (in bytes, a multiple of 8).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = if dont_frag { DONT_FRAG } else { 0 }
            | if more_frags { MORE_FRAGS } else { 0 }
            | ((offset >> 3) & 0x1fff);
        set_u16(self.buffer.as_mut(), field::FLG_OFF.start, v);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes and sets the header checksum (over the header length).
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let n = self.header_len();
        let c = checksum::checksum(&self.buffer.as_ref()[..n]);
        self.set_checksum(c);
    }

    /// Sets the total length and updates the checksum incrementally (RFC
    /// 1624): the per-packet patch of a header made once.
    #[inline(always)]
    pub fn set_total_len_update_checksum(&mut self, v: u16) {
        let c = checksum::update(self.checksum(), self.total_len(), v);
        self.set_total_len(v);
        self.set_checksum(c);
    }

    /// The payload (as [`Packet::payload`]), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let end = usize::from(self.total_len());
        let b = self.buffer.as_mut();
        let start = start.min(b.len());
        let end = end.clamp(start, b.len());
        &mut b[start..end]
    }
}

/// An IPv4 header's meaning (options are skipped on parse, never emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload bytes (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// Don't fragment.
    pub dont_frag: bool,
}

impl Repr {
    /// Reads a packet's header: version 4, a total length that covers the
    /// header and fits the buffer, a correct checksum, and not a fragment.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        p.check_len()?;
        if p.version() != 4 {
            return Err(Error::Malformed);
        }
        let total = usize::from(p.total_len());
        if total < p.header_len() {
            return Err(Error::Malformed);
        }
        if total > p.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        if p.is_fragment() {
            return Err(Error::Fragment);
        }
        Ok(Repr {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: total - p.header_len(),
            ttl: p.ttl(),
            dont_frag: p.dont_frag(),
        })
    }

    /// Bytes of the header [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header, checksum included, into a packet of at least
    /// [`Repr::buffer_len`] bytes (identification 0, DSCP/ECN 0). A payload
    /// length past 65515 is written as the largest total length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_version_and_header_len(4, HEADER_LEN);
        p.set_dscp_ecn(0, 0);
        let total = (HEADER_LEN + self.payload_len).min(usize::from(u16::MAX));
        p.set_total_len(total as u16);
        p.set_ident(0);
        p.set_frag(self.dont_frag, false, 0);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src_addr(self.src_addr);
        p.set_dst_addr(self.dst_addr);
        p.fill_checksum();
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// 10.0.0.1 -> 10.0.0.2, UDP, DF, TTL 64, four payload bytes.
    static PACKET: [u8; 24] = [
        0x45, 0x00, 0x00, 0x18, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0xd3, 0x0a, 0x00, 0x00,
        0x01, 0x0a, 0x00, 0x00, 0x02, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    const REPR: Repr = Repr {
        src_addr: Ipv4Addr::new(10, 0, 0, 1),
        dst_addr: Ipv4Addr::new(10, 0, 0, 2),
        protocol: protocol::UDP,
        payload_len: 4,
        ttl: 64,
        dont_frag: true,
    };

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!((p.version(), p.header_len()), (4, 20));
        assert_eq!((p.dscp(), p.ecn(), p.total_len(), p.ident()), (0, 0, 24, 0));
        assert!(p.dont_frag() && !p.more_frags() && !p.is_fragment());
        assert_eq!((p.frag_offset(), p.ttl(), p.protocol()), (0, 64, 17));
        assert_eq!(p.checksum(), 0x26d3);
        assert!(p.verify_checksum());
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(10, 0, 0, 2));
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(4, 20);
        p.set_total_len(24);
        p.set_frag(true, false, 0);
        p.set_ttl(64);
        p.set_protocol(17);
        p.set_src_addr(Ipv4Addr::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Addr::new(10, 0, 0, 2));
        p.fill_checksum();
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b, PACKET);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&PACKET[..])).unwrap(),
            REPR
        );
        let mut b = PACKET;
        b[..20].fill(0);
        REPR.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, PACKET);
    }

    #[test]
    fn options_are_read_and_skipped() {
        // IHL 6: one word of options (NOP, NOP, NOP, end of list).
        let mut b = [0u8; 28];
        b[..20].copy_from_slice(&PACKET[..20]);
        b[20..24].copy_from_slice(&[1, 1, 1, 0]);
        b[24..].copy_from_slice(&PACKET[20..]);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version_and_header_len(4, 24);
        p.set_total_len(28);
        p.fill_checksum();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(Repr::parse(&p).unwrap(), REPR);
    }

    #[test]
    fn fragments_and_bad_fields_are_refused() {
        let mut b = PACKET;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_frag(false, true, 0);
        p.fill_checksum();
        assert!(p.is_fragment());
        assert_eq!(Repr::parse(&p), Err(Error::Fragment));
        p.set_frag(false, false, 1480);
        p.fill_checksum();
        assert_eq!(p.frag_offset(), 1480);
        assert_eq!(Repr::parse(&p), Err(Error::Fragment));
        let mut b = PACKET;
        b[11] ^= 1;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Checksum)
        );
        let mut b = PACKET;
        b[0] = 0x65;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Malformed)
        );
        let mut b = PACKET;
        b[3] = 25;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Truncated)
        );
        // A total length past the buffer is clamped by `payload`.
        assert_eq!(Packet::new_unchecked(&b[..]).payload().len(), 4);
    }

    #[test]
    fn incremental_length_patch_matches_a_full_checksum() {
        let mut b = PACKET;
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_total_len_update_checksum(1500);
        let c = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), c);
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&PACKET[..n]), Err(Error::Truncated));
        }
        let mut b = PACKET;
        b[0] = 0x44; // IHL 4: shorter than the fixed header
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Malformed));
        b[0] = 0x4f; // IHL 15: 60 bytes, past the buffer
        assert_eq!(Packet::new_checked(&b[..]), Err(Error::Truncated));
        let p = Packet::new_unchecked(&b[..]);
        assert!(p.options().is_empty() && p.payload().is_empty() && !p.verify_checksum());
    }
}
