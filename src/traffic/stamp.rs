//! The payload stamp a generator writes and an analyzer reads: 18 bytes, so it
//! fits the UDP payload of a 64-byte IPv4 frame (60 bytes without FCS, 42 of
//! Ethernet/IPv4/UDP headers) and of an 84-byte IPv6 frame (62 bytes of
//! Ethernet/IPv6/UDP headers). The stamp is the same in both families.
//!
//! ```text
//! 0      2      4              12       16     17     18
//! | magic|stream|   sequence   | tx_ns  |epoch |flags |
//! ```
//!
//! All fields big-endian. `tx_ns` is the low 32 bits of the transmit time in
//! CLOCK_MONOTONIC nanoseconds: the analyzer subtracts with wrapping arithmetic,
//! which is exact for any latency below 2^32 ns (4.29 s). `epoch` is the trial the
//! packet belongs to (mod 256), so late packets of an earlier trial are told
//! apart. Once [`Stamp::new_checked`] succeeds no accessor panics.

use core::fmt;

/// The stamp's magic number ("LR").
pub const MAGIC: u16 = 0x4c52;
/// Length of a stamp in bytes.
pub const LEN: usize = 18;

/// Flag: the packet is the last of the burst it was sent in (per-batch latency).
pub const FLAG_LAST_IN_BURST: u8 = 0x01;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const MAGIC: Field = 0..2;
    pub const STREAM: Field = 2..4;
    pub const SEQ: Field = 4..12;
    pub const TX_NS: Field = 12..16;
    pub const EPOCH: usize = 16;
    pub const FLAGS: usize = 17;
}

/// A stamp that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Fewer than [`LEN`] bytes.
    Truncated,
    /// The magic number does not match.
    BadMagic,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => write!(f, "stamp truncated"),
            Error::BadMagic => write!(f, "not a linerate stamp"),
        }
    }
}

/// A zero-copy view of a stamp.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Stamp<T> {
    /// A view without checks; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Stamp<T> {
        Stamp { buffer }
    }

    /// A view of a buffer that holds a whole stamp with the right magic.
    pub fn new_checked(buffer: T) -> Result<Stamp<T>, Error> {
        let s = Stamp::new_unchecked(buffer);
        s.check()?;
        Ok(s)
    }

    /// Checks length and magic.
    pub fn check(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < LEN {
            return Err(Error::Truncated);
        }
        if self.magic() != MAGIC {
            return Err(Error::BadMagic);
        }
        Ok(())
    }

    fn u16_at(&self, f: field::Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The magic number.
    pub fn magic(&self) -> u16 {
        self.u16_at(field::MAGIC)
    }

    /// The stream id.
    pub fn stream(&self) -> u16 {
        self.u16_at(field::STREAM)
    }

    /// The sequence number within the stream.
    pub fn seq(&self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.buffer.as_ref()[field::SEQ]);
        u64::from_be_bytes(w)
    }

    /// Low 32 bits of the transmit time in nanoseconds.
    pub fn tx_ns(&self) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.buffer.as_ref()[field::TX_NS]);
        u32::from_be_bytes(w)
    }

    /// The trial epoch (mod 256).
    pub fn epoch(&self) -> u8 {
        self.buffer.as_ref()[field::EPOCH]
    }

    /// Flags.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Stamp<T> {
    /// Sets the magic number.
    pub fn set_magic(&mut self) {
        self.buffer.as_mut()[field::MAGIC].copy_from_slice(&MAGIC.to_be_bytes());
    }

    /// Sets the stream id.
    pub fn set_stream(&mut self, v: u16) {
        self.buffer.as_mut()[field::STREAM].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u64) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the transmit time (its low 32 bits are kept).
    pub fn set_tx_ns(&mut self, v: u64) {
        self.buffer.as_mut()[field::TX_NS].copy_from_slice(&(v as u32).to_be_bytes());
    }

    /// Sets the epoch.
    pub fn set_epoch(&mut self, v: u8) {
        self.buffer.as_mut()[field::EPOCH] = v;
    }

    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
}

/// A stamp's contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Stream id.
    pub stream: u16,
    /// Sequence number.
    pub seq: u64,
    /// Transmit time in nanoseconds (only the low 32 bits travel).
    pub tx_ns: u64,
    /// Trial epoch.
    pub epoch: u8,
    /// Flags.
    pub flags: u8,
}

impl Repr {
    /// Parses a checked stamp.
    pub fn parse<T: AsRef<[u8]>>(s: &Stamp<T>) -> Result<Repr, Error> {
        s.check()?;
        Ok(Repr {
            stream: s.stream(),
            seq: s.seq(),
            tx_ns: u64::from(s.tx_ns()),
            epoch: s.epoch(),
            flags: s.flags(),
        })
    }

    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes the stamp.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, s: &mut Stamp<T>) {
        s.set_magic();
        s.set_stream(self.stream);
        s.set_seq(self.seq);
        s.set_tx_ns(self.tx_ns);
        s.set_epoch(self.epoch);
        s.set_flags(self.flags);
    }

    /// The one's-complement sum (unfolded) of the emitted stamp's nine
    /// big-endian 16-bit words, from the fields: a generator adds it to the
    /// UDP checksum without reading back the bytes it just wrote (that read
    /// cost a store-forwarding stall per packet).
    #[inline]
    pub fn word_sum(&self) -> u32 {
        let w = |v: u64, shift: u32| ((v >> shift) & 0xffff) as u32;
        u32::from(MAGIC)
            + u32::from(self.stream)
            + w(self.tx_ns, 16)
            + w(self.tx_ns, 0)
            + (u32::from(self.epoch) << 8)
            + seq_flags_sum(self.seq, self.flags)
    }
}

/// The part of [`Repr::word_sum`] from the sequence and the flags, the fields
/// that change from packet to packet within a burst.
#[inline]
pub fn seq_flags_sum(seq: u64, flags: u8) -> u32 {
    let w = |shift: u32| ((seq >> shift) & 0xffff) as u32;
    w(48) + w(32) + w(16) + w(0) + u32::from(flags)
}

/// Latency from a stamp's 32-bit transmit time to a full receive time.
#[inline]
pub fn latency_ns(tx_ns_lo: u32, rx_ns: u64) -> u64 {
    u64::from((rx_ns as u32).wrapping_sub(tx_ns_lo))
}

#[cfg(test)]
mod test {
    use super::*;

    static BYTES: [u8; 18] = [
        0x4c, 0x52, 0x00, 0x07, 0, 0, 0, 0, 0, 0, 0x01, 0x02, 0xde, 0xad, 0xbe, 0xef, 3, 1,
    ];

    #[test]
    fn word_sum_matches_the_emitted_bytes() {
        let mut rng = crate::rng::SplitMix64::new(7);
        for _ in 0..1000 {
            let r = Repr {
                stream: rng.next_u64() as u16,
                seq: rng.next_u64(),
                tx_ns: rng.next_u64(),
                epoch: rng.next_u64() as u8,
                flags: rng.next_u64() as u8,
            };
            let mut b = [0u8; LEN];
            r.emit(&mut Stamp::new_unchecked(&mut b[..]));
            let bytes: u32 = b
                .chunks(2)
                .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
                .sum();
            assert_eq!(r.word_sum(), bytes);
        }
    }

    #[test]
    fn deconstruct() {
        let s = Stamp::new_checked(&BYTES[..]).unwrap();
        assert_eq!(s.stream(), 7);
        assert_eq!(s.seq(), 0x0102);
        assert_eq!(s.tx_ns(), 0xdead_beef);
        assert_eq!(s.epoch(), 3);
        assert_eq!(s.flags(), FLAG_LAST_IN_BURST);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 18];
        let mut s = Stamp::new_unchecked(&mut buf[..]);
        s.set_magic();
        s.set_stream(7);
        s.set_seq(0x0102);
        s.set_tx_ns(0x1234_dead_beef);
        s.set_epoch(3);
        s.set_flags(1);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn parse_and_emit() {
        let r = Repr::parse(&Stamp::new_unchecked(&BYTES[..])).unwrap();
        assert_eq!(
            r,
            Repr {
                stream: 7,
                seq: 0x0102,
                tx_ns: 0xdead_beef,
                epoch: 3,
                flags: 1
            }
        );
        let mut buf = [0u8; 18];
        r.emit(&mut Stamp::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn impossible_lengths_and_foreign_bytes() {
        assert_eq!(
            Stamp::new_checked(&BYTES[..17]).unwrap_err(),
            Error::Truncated
        );
        let mut other = BYTES;
        other[0] = 0;
        assert_eq!(Stamp::new_checked(&other[..]).unwrap_err(), Error::BadMagic);
    }

    #[test]
    fn latency_wraps() {
        assert_eq!(latency_ns(0xffff_fff0, 0x1_0000_0010), 0x20);
        assert_eq!(latency_ns(100, 350), 250);
    }
}
