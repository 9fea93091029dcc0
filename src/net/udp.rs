//! UDP headers (RFC 768).
//!
//! ```text
//! 0..2 source port  2..4 destination port  4..6 length (header + payload)  6..8 checksum
//! ```
//!
//! [`Packet::check_len`] checks the header fits; the length field is checked
//! by [`Repr::parse`] and clamped by [`Packet::payload`]. Over IPv4 a zero
//! checksum means "not computed"; a computed zero is sent as 0xffff.

use super::checksum;
use super::{get_u16, set_u16, Error};

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Bytes of a UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// A view of a UDP datagram.
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

    /// A view of a buffer that holds the header ([`Packet::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Ok` when the buffer holds the 8-byte header.
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

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// The length field (header and payload).
    #[inline]
    pub fn len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Whether the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The payload: from the header to the length field, clamped to the buffer.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let start = HEADER_LEN.min(b.len());
        let end = usize::from(self.len()).clamp(start, b.len());
        &b[start..end]
    }

    /// Whether the checksum is correct given the pseudo-header's sum
    /// ([`checksum::pseudo_header_v4`] or [`checksum::pseudo_header_v6`]).
    /// A zero checksum ("not computed", IPv4 only) passes.
    #[inline]
    pub fn verify_checksum(&self, pseudo_header: u32) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let b = self.buffer.as_ref();
        let n = usize::from(self.len()).min(b.len());
        checksum::finish(checksum::add_bytes(pseudo_header, &b[..n])) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::SRC_PORT.start, v);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::DST_PORT.start, v);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::LENGTH.start, v);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        set_u16(self.buffer.as_mut(), field::CHECKSUM.start, v);
    }

    /// Computes and sets the checksum over the length field's bytes, given
    /// the pseudo-header's sum; a computed 0 is written as 0xffff.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo_header: u32) {
        self.set_checksum(0);
        let n = usize::from(self.len()).min(self.buffer.as_ref().len());
        let c = checksum::finish(checksum::add_bytes(
            pseudo_header,
            &self.buffer.as_ref()[..n],
        ));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }

    /// The payload (as [`Packet::payload`]), writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        let b = self.buffer.as_mut();
        let start = HEADER_LEN.min(b.len());
        let end = end.clamp(start, b.len());
        &mut b[start..end]
    }
}

/// A UDP header's meaning (the checksum is the caller's: see
/// [`Packet::fill_checksum`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload bytes.
    pub payload_len: usize,
}

impl Repr {
    /// Reads a datagram's header: a length field that covers the header and
    /// fits the buffer.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        p.check_len()?;
        let len = usize::from(p.len());
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len > p.buffer.as_ref().len() {
            return Err(Error::Truncated);
        }
        Ok(Repr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            payload_len: len - HEADER_LEN,
        })
    }

    /// Bytes of the header [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header, checksum 0 ("not computed"), into a buffer of at
    /// least [`Repr::buffer_len`] bytes. A payload past 65527 bytes is
    /// written as the largest length.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_src_port(self.src_port);
        p.set_dst_port(self.dst_port);
        let len = (HEADER_LEN + self.payload_len).min(usize::from(u16::MAX));
        p.set_len(len as u16);
        p.set_checksum(0);
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::Ipv4Addr;

    /// 1024 -> 7148, four payload bytes, checksum over 10.0.0.1 -> 10.0.0.2.
    static DATAGRAM: [u8; 12] = [
        0x04, 0x00, 0x1b, 0xec, 0x00, 0x0c, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd,
    ];

    const REPR: Repr = Repr {
        src_port: 1024,
        dst_port: 7148,
        payload_len: 4,
    };

    fn pseudo() -> u32 {
        checksum::pseudo_header_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            17,
            12,
        )
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.len(), p.checksum()),
            (1024, 7148, 12, 0)
        );
        assert!(!p.is_empty());
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(p.verify_checksum(pseudo()), "zero: not computed");
    }

    #[test]
    fn construct_with_checksum() {
        let mut b = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_src_port(1024);
        p.set_dst_port(7148);
        p.set_len(12);
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b, DATAGRAM);
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.fill_checksum(pseudo());
        assert_ne!(p.checksum(), 0);
        assert!(p.verify_checksum(pseudo()));
        p.set_checksum(p.checksum() ^ 1);
        assert!(!p.verify_checksum(pseudo()));
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&DATAGRAM[..])).unwrap(),
            REPR
        );
        let mut b = DATAGRAM;
        b[..8].fill(0xee);
        REPR.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b, DATAGRAM);
        let mut b = DATAGRAM;
        b[5] = 7;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Malformed)
        );
        b[5] = 13;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Truncated)
        );
        assert_eq!(Packet::new_unchecked(&b[..]).payload().len(), 4);
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&DATAGRAM[..n]), Err(Error::Truncated));
        }
        let p = Packet::new_checked(&DATAGRAM[..8]).unwrap();
        assert!(p.payload().is_empty());
        assert!(!p.verify_checksum(0) || p.checksum() == 0);
    }
}
