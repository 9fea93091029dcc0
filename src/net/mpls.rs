//! MPLS label stack entries (RFC 3032), after EtherType 0x8847 / 0x8848.
//!
//! ```text
//! 0..4 label (20 bits), traffic class (3), bottom of stack (1), TTL (8)
//! ```

use super::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const ENTRY: Field = 0..4;
    pub const PAYLOAD: usize = 4;
}

/// Bytes of one label stack entry.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// A view of one label stack entry and what follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Entry<T> {
    /// A view without any check.
    #[inline(always)]
    pub const fn new_unchecked(buffer: T) -> Entry<T> {
        Entry { buffer }
    }

    /// A view of a buffer that holds the entry ([`Entry::check_len`]).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Entry<T>, Error> {
        let e = Entry::new_unchecked(buffer);
        e.check_len()?;
        Ok(e)
    }

    /// `Ok` when the buffer holds the 4-byte entry.
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

    fn word(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::ENTRY];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The label (20 bits).
    #[inline]
    pub fn label(&self) -> u32 {
        self.word() >> 12
    }

    /// Traffic class (3 bits).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((self.word() >> 9) & 7) as u8
    }

    /// Whether this is the last entry of the stack.
    #[inline]
    pub fn bottom_of_stack(&self) -> bool {
        self.word() & 0x100 != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.word() as u8
    }

    /// What follows the entry (the next entry, or the payload).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Entry<T> {
    /// Sets the whole entry (label masked to 20 bits, traffic class to 3).
    #[inline]
    pub fn set(&mut self, label: u32, traffic_class: u8, bottom_of_stack: bool, ttl: u8) {
        let w = ((label & 0x000f_ffff) << 12)
            | (u32::from(traffic_class & 7) << 9)
            | (u32::from(bottom_of_stack) << 8)
            | u32::from(ttl);
        self.buffer.as_mut()[field::ENTRY].copy_from_slice(&w.to_be_bytes());
    }

    /// What follows the entry, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// A label stack entry's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The label (20 bits).
    pub label: u32,
    /// Traffic class (3 bits).
    pub traffic_class: u8,
    /// Last entry of the stack.
    pub bottom_of_stack: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Repr {
    /// Reads an entry.
    pub fn parse<T: AsRef<[u8]>>(e: &Entry<T>) -> Result<Repr, Error> {
        e.check_len()?;
        Ok(Repr {
            label: e.label(),
            traffic_class: e.traffic_class(),
            bottom_of_stack: e.bottom_of_stack(),
            ttl: e.ttl(),
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the entry into a buffer of at least [`Repr::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, e: &mut Entry<T>) {
        e.set(
            self.label,
            self.traffic_class,
            self.bottom_of_stack,
            self.ttl,
        );
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // Label 0x12345, traffic class 5, bottom of stack, TTL 64.
    static ENTRY: [u8; 5] = [0x12, 0x34, 0x5b, 0x40, 0x45];

    const REPR: Repr = Repr {
        label: 0x12345,
        traffic_class: 5,
        bottom_of_stack: true,
        ttl: 64,
    };

    #[test]
    fn deconstruct() {
        let e = Entry::new_checked(&ENTRY[..]).unwrap();
        assert_eq!(
            (e.label(), e.traffic_class(), e.bottom_of_stack(), e.ttl()),
            (0x12345, 5, true, 64)
        );
        assert_eq!(e.payload(), &[0x45]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 5];
        let mut e = Entry::new_unchecked(&mut b[..]);
        e.set(0x12345, 5, true, 64);
        e.payload_mut()[0] = 0x45;
        assert_eq!(b, ENTRY);
    }

    #[test]
    fn parse_and_emit() {
        assert_eq!(
            Repr::parse(&Entry::new_unchecked(&ENTRY[..])).unwrap(),
            REPR
        );
        let mut b = [0u8; 4];
        REPR.emit(&mut Entry::new_unchecked(&mut b[..]));
        assert_eq!(b, ENTRY[..4]);
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Entry::new_checked(&ENTRY[..n]), Err(Error::Truncated));
        }
    }
}
