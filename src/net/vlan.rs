//! IEEE 802.1Q VLAN tags (EtherType 0x8100) and 802.1ad service tags (0x88a8,
//! the outer tag of QinQ): four bytes after the EtherType that announced them.
//!
//! ```text
//! 0..2 TCI: priority (3 bits), drop eligible (1), VLAN id (12)
//! 2..4 EtherType of what follows
//! ```

use super::{get_u16, set_u16, Error};

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const TCI: Field = 0..2;
    pub const ETHERTYPE: Field = 2..4;
    pub const PAYLOAD: usize = 4;
}

/// Bytes of a tag.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Whether an EtherType announces a tag (802.1Q or 802.1ad).
#[inline(always)]
pub fn is_tag(ethertype: u16) -> bool {
    ethertype == super::ethernet::ethertype::VLAN || ethertype == super::ethernet::ethertype::QINQ
}

/// A view of one tag (starting after the EtherType that announced it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Tag<T> {
    /// A view without any check.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Tag<T> {
        Tag { buffer }
    }

    /// A view of a buffer that holds the tag ([`Tag::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Tag<T>, Error> {
        let t = Tag::new_unchecked(buffer);
        t.check_len()?;
        Ok(t)
    }

    /// `Ok` when the buffer holds the 4-byte tag.
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

    /// Priority code point (0..=7).
    #[inline]
    pub fn priority(&self) -> u8 {
        (get_u16(self.buffer.as_ref(), field::TCI.start) >> 13) as u8
    }

    /// Drop eligible indicator.
    #[inline]
    pub fn drop_eligible(&self) -> bool {
        get_u16(self.buffer.as_ref(), field::TCI.start) & 0x1000 != 0
    }

    /// VLAN identifier (0..=4095).
    #[inline]
    pub fn vid(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TCI.start) & 0x0fff
    }

    /// EtherType of what follows the tag.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// What follows the tag.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tag<T> {
    /// Sets priority, drop eligible and VLAN id (`vid` and `priority` are
    /// masked to their 12 and 3 bits).
    #[inline]
    pub fn set_tci(&mut self, priority: u8, drop_eligible: bool, vid: u16) {
        let tci =
            (u16::from(priority & 7) << 13) | (u16::from(drop_eligible) << 12) | (vid & 0x0fff);
        set_u16(self.buffer.as_mut(), field::TCI.start, tci);
    }

    /// Sets the EtherType of what follows.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        set_u16(self.buffer.as_mut(), field::ETHERTYPE.start, t);
    }

    /// What follows the tag, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// A tag's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Priority code point (0..=7).
    pub priority: u8,
    /// Drop eligible indicator.
    pub drop_eligible: bool,
    /// VLAN identifier (0..=4095).
    pub vid: u16,
    /// EtherType of what follows.
    pub ethertype: u16,
}

impl Repr {
    /// Reads a tag.
    pub fn parse<T: AsRef<[u8]>>(t: &Tag<T>) -> Result<Repr, Error> {
        t.check_len()?;
        Ok(Repr {
            priority: t.priority(),
            drop_eligible: t.drop_eligible(),
            vid: t.vid(),
            ethertype: t.ethertype(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the tag into a buffer of at least [`Repr::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, t: &mut Tag<T>) {
        t.set_tci(self.priority, self.drop_eligible, self.vid);
        t.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::net::ethernet::ethertype;

    // Priority 5, drop eligible, VLAN 0x123, then IPv4.
    static TAG: [u8; 5] = [0xb1, 0x23, 0x08, 0x00, 0x45];

    const REPR: Repr = Repr {
        priority: 5,
        drop_eligible: true,
        vid: 0x123,
        ethertype: ethertype::IPV4,
    };

    #[test]
    fn deconstruct() {
        let t = Tag::new_checked(&TAG[..]).unwrap();
        assert_eq!((t.priority(), t.drop_eligible(), t.vid()), (5, true, 0x123));
        assert_eq!(t.ethertype(), ethertype::IPV4);
        assert_eq!(t.payload(), &[0x45]);
        assert!(is_tag(ethertype::VLAN) && is_tag(ethertype::QINQ) && !is_tag(ethertype::IPV4));
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 5];
        let mut t = Tag::new_unchecked(&mut b[..]);
        t.set_tci(5, true, 0x123);
        t.set_ethertype(ethertype::IPV4);
        t.payload_mut()[0] = 0x45;
        assert_eq!(b, TAG);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(Repr::parse(&Tag::new_unchecked(&TAG[..])).unwrap(), REPR);
        let mut b = [0u8; 5];
        REPR.emit(&mut Tag::new_unchecked(&mut b[..]));
        assert_eq!(b[..4], TAG[..4]);
        assert_eq!(REPR.buffer_len(), 4);
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Tag::new_checked(&TAG[..n]), Err(Error::Truncated));
        }
    }
}
