//! VXLAN headers (RFC 7348), the UDP payload to port [`PORT`].
//!
//! ```text
//! 0 flags (I 0x08: the VNI is valid)  1..4 reserved  4..7 VNI  7 reserved  8.. inner Ethernet frame
//! ```

use super::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const FLAGS: usize = 0;
    pub const VNI: Field = 4..7;
    pub const PAYLOAD: usize = 8;
}

/// Bytes of a VXLAN header.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// The IANA-assigned UDP destination port.
pub const PORT: u16 = 4789;

/// The flag that says the VNI is valid.
const FLAG_I: u8 = 0x08;

/// A view of a VXLAN header and the frame it carries.
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

    /// The flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// Whether the I flag (VNI valid) is set.
    #[inline]
    pub fn vni_valid(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// The VXLAN network identifier (24 bits).
    #[inline]
    pub fn vni(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VNI];
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }

    /// The inner Ethernet frame.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the VNI (masked to 24 bits).
    #[inline]
    pub fn set_vni(&mut self, v: u32) {
        self.buffer.as_mut()[field::VNI].copy_from_slice(&v.to_be_bytes()[1..]);
    }

    /// The inner frame, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// A VXLAN header's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
}

impl Repr {
    /// Reads a header whose I flag is set.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr, Error> {
        p.check_len()?;
        if !p.vni_valid() {
            return Err(Error::Malformed);
        }
        Ok(Repr { vni: p.vni() })
    }

    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (reserved fields zero) into a buffer of at least
    /// [`Repr::buffer_len`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.buffer.as_mut()[..HEADER_LEN].fill(0);
        p.set_flags(FLAG_I);
        p.set_vni(self.vni);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static PACKET: [u8; 10] = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0xee, 0xff];

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!((p.flags(), p.vni_valid(), p.vni()), (0x08, true, 0x123456));
        assert_eq!(p.payload(), &[0xee, 0xff]);
    }

    #[test]
    fn construct() {
        let mut b = [0u8; 10];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_flags(0x08);
        p.set_vni(0x123456);
        p.payload_mut().copy_from_slice(&[0xee, 0xff]);
        assert_eq!(b, PACKET);
    }

    #[test]
    fn parse_and_emit() {
        let r = Repr::parse(&Packet::new_unchecked(&PACKET[..])).unwrap();
        assert_eq!(r, Repr { vni: 0x123456 });
        let mut b = [0xaau8; 10];
        r.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b[..8], PACKET[..8]);
        let mut b = PACKET;
        b[0] = 0;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::Malformed)
        );
    }

    #[test]
    fn impossible_length() {
        for n in 0..HEADER_LEN {
            assert_eq!(Packet::new_checked(&PACKET[..n]), Err(Error::Truncated));
        }
    }
}
