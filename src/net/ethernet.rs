//! Ethernet II frames (IEEE 802.3 with an EtherType; no FCS: ports hand
//! frames over without it).
//!
//! ```text
//! 0..6 destination  6..12 source  12..14 EtherType  14.. payload
//! ```

use super::{get_mac, get_u16, set_u16, Error};

/// EtherType values.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// An IEEE 802.1Q VLAN tag (a customer tag).
    pub const VLAN: u16 = 0x8100;
    /// An IEEE 802.1ad service tag (the outer tag of QinQ).
    pub const QINQ: u16 = 0x88a8;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// MPLS unicast.
    pub const MPLS: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MULTICAST: u16 = 0x8848;
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const DESTINATION: Field = 0..6;
    pub const SOURCE: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const PAYLOAD: usize = 14;
}

/// Bytes of an Ethernet II header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// The broadcast address.
pub const BROADCAST: [u8; 6] = [0xff; 6];

/// A view of an Ethernet II frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// A view without any check.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// A view of a buffer that holds the header ([`Frame::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Error> {
        let f = Frame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// `Ok` when the buffer holds the 14-byte header.
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

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        get_mac(self.buffer.as_ref(), field::DESTINATION.start)
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        get_mac(self.buffer.as_ref(), field::SOURCE.start)
    }

    /// The EtherType.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// What follows the header (Ethernet padding included).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&a);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&a);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        set_u16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }

    /// What follows the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// An Ethernet II header's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Source address.
    pub src_addr: [u8; 6],
    /// Destination address.
    pub dst_addr: [u8; 6],
    /// EtherType.
    pub ethertype: u16,
}

impl Repr {
    /// Reads a checked frame's header.
    pub fn parse<T: AsRef<[u8]>>(f: &Frame<T>) -> Result<Repr, Error> {
        f.check_len()?;
        Ok(Repr {
            src_addr: f.src_addr(),
            dst_addr: f.dst_addr(),
            ethertype: f.ethertype(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into a frame of at least [`Repr::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, f: &mut Frame<T>) {
        f.set_dst_addr(self.dst_addr);
        f.set_src_addr(self.src_addr);
        f.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static FRAME: [u8; 18] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, // destination
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x08, 0x00, // IPv4
        0xaa, 0xbb, 0xcc, 0xdd, // payload
    ];

    const REPR: Repr = Repr {
        src_addr: [2, 0, 0, 0, 0, 1],
        dst_addr: [2, 0, 0, 0, 0, 2],
        ethertype: ethertype::IPV4,
    };

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(f.src_addr(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 18];
        let mut f = Frame::new_unchecked(&mut b[..]);
        f.set_dst_addr([2, 0, 0, 0, 0, 2]);
        f.set_src_addr([2, 0, 0, 0, 0, 1]);
        f.set_ethertype(ethertype::IPV4);
        f.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        assert_eq!(b, FRAME);
    }

    #[test]
    fn parse_and_emit() {
        let f = Frame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(Repr::parse(&f).unwrap(), REPR);
        let mut b = FRAME;
        b[..14].fill(0);
        REPR.emit(&mut Frame::new_unchecked(&mut b[..]));
        assert_eq!(b, FRAME);
        assert_eq!(REPR.buffer_len(), 14);
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Frame::new_checked(&FRAME[..n]), Err(Error::Truncated));
        }
        assert!(Frame::new_checked(&FRAME[..14])
            .unwrap()
            .payload()
            .is_empty());
    }
}
