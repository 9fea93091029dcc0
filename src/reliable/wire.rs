//! The reliable-channel segment header, smoltcp style.
//!
//! Every packet is one segment: a fixed 32-byte header, zero, one or two ACK
//! blocks (one per channel), then the chunk payload. All integers are
//! big-endian.
//!
//! ```text
//!  0       version (1)
//!  1       flags: DATA 0x01, PUT 0x02, ACK_PRIORITY 0x04, ACK_DATA 0x08,
//!          ABORT 0x10 (the sender gave up on this peer and stops)
//!  2       channel (0 priority, 1 data) the DATA part belongs to
//!  3       SACK range counts: low nibble for the priority ACK block, high nibble for data
//!  4..8    seq        segment sequence number in the channel's space (DATA)
//!  8..12   frag_id    fragment (message) id in the channel's space (DATA)
//! 12..16   frag_len   total fragment length in bytes (DATA)
//! 16..20   offset     this chunk's offset inside the fragment (DATA)
//! 20..22   chunk_len  payload bytes in this segment
//! 22..24   region     PUT target region (PUT)
//! 24..32   put_offset PUT target offset in the region (PUT)
//! 32..     ACK blocks, priority first: cum (u32, next expected seq), then
//!          `n` SACK ranges `[start u32, end u32)`, highest first, all above cum;
//!          each starts just above a missing segment, the first is the
//!          receiver's highest run, and the others are consecutive runs (a
//!          window that rotates through the older ones from ACK to ACK), so
//!          every gap between two of them is missing at the receiver
//!  ..      chunk payload (`chunk_len` bytes)
//! ```
//!
//! Contract: once [`Packet::check_len`] (or [`Packet::new_checked`]) returns
//! `Ok`, no accessor panics. [`Repr::parse`] validates everything else (flags,
//! channel, chunk inside its fragment, SACK ranges well-formed) and returns an
//! error instead of panicking on any input.

use super::seq;
use thiserror::Error;

/// Wire version carried in byte 0.
pub const VERSION: u8 = 1;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 32;
/// Most SACK ranges one ACK block may carry.
pub const MAX_SACK_RANGES: usize = 8;
/// Bytes of an ACK block without ranges.
pub const ACK_BLOCK_LEN: usize = 4;
/// Bytes of one SACK range.
pub const SACK_RANGE_LEN: usize = 8;
/// Largest encoded ACK block.
pub const MAX_ACK_BLOCK_LEN: usize = ACK_BLOCK_LEN + MAX_SACK_RANGES * SACK_RANGE_LEN;

/// Flag bits of byte 1.
pub mod flags {
    /// The segment carries a sequence number and a chunk of a fragment.
    pub const DATA: u8 = 0x01;
    /// The fragment is a PUT into a registered region.
    pub const PUT: u8 = 0x02;
    /// An ACK block for the priority channel is present.
    pub const ACK_PRIORITY: u8 = 0x04;
    /// An ACK block for the data channel is present.
    pub const ACK_DATA: u8 = 0x08;
    /// The sender gave up on the channel pair (its retry limit, its peer
    /// timeout, or its application failed): the receiver stops too.
    pub const ABORT: u8 = 0x10;
    /// Every defined bit.
    pub const ALL: u8 = DATA | PUT | ACK_PRIORITY | ACK_DATA | ABORT;
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 1;
    pub const CHANNEL: usize = 2;
    pub const RANGES: usize = 3;
    pub const SEQ: Field = 4..8;
    pub const FRAG_ID: Field = 8..12;
    pub const FRAG_LEN: Field = 12..16;
    pub const OFFSET: Field = 16..20;
    pub const CHUNK_LEN: Field = 20..22;
    pub const REGION: Field = 22..24;
    pub const PUT_OFFSET: Field = 24..32;
}

/// Why a segment was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// The buffer is shorter than the header says.
    #[error("segment truncated")]
    Truncated,
    /// Unknown wire version.
    #[error("unknown wire version {0}")]
    Version(u8),
    /// Undefined flag bits set, or PUT without DATA.
    #[error("bad flags {0:#04x}")]
    Flags(u8),
    /// Channel number other than 0 or 1.
    #[error("bad channel {0}")]
    Channel(u8),
    /// Neither data nor an ACK: nothing to do.
    #[error("empty segment")]
    Empty,
    /// Payload bytes on a segment without DATA.
    #[error("payload without data flag")]
    PayloadWithoutData,
    /// The chunk's offset and size fall outside its fragment.
    #[error("chunk outside its fragment")]
    ChunkOutsideFragment,
    /// More SACK ranges than allowed, or ranges not above cum / not descending / empty.
    #[error("malformed SACK ranges")]
    BadSack,
}

/// Shorthand result.
pub type Result<T> = core::result::Result<T, Error>;

/// One of the two channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// Small MTU; ACKs and tiny messages.
    Priority = 0,
    /// Everything else.
    Data = 1,
}

impl Channel {
    /// Both channels, in index order.
    pub const ALL: [Channel; 2] = [Channel::Priority, Channel::Data];

    /// 0 for priority, 1 for data.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The channel with wire number `n`.
    pub const fn from_u8(n: u8) -> Option<Channel> {
        match n {
            0 => Some(Channel::Priority),
            1 => Some(Channel::Data),
            _ => None,
        }
    }
}

/// A read/write view of a segment in a buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], f: field::Field) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[f]);
    u16::from_be_bytes(a)
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(a)
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks its length ([`Packet::check_len`]).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the header, the ACK blocks and the chunk
    /// the header announces. After `Ok`, no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if len < self.total_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Wire version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// Flag byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Raw channel byte.
    pub fn channel(&self) -> u8 {
        self.buffer.as_ref()[field::CHANNEL]
    }
    /// SACK range count of the ACK block for channel `ch` (0 or 1).
    pub fn sack_count(&self, ch: usize) -> usize {
        let b = self.buffer.as_ref()[field::RANGES];
        usize::from(if ch == 0 { b & 0x0f } else { b >> 4 })
    }
    /// Segment sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ.start)
    }
    /// Fragment id.
    pub fn frag_id(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FRAG_ID.start)
    }
    /// Total fragment length.
    pub fn frag_len(&self) -> u32 {
        be32(self.buffer.as_ref(), field::FRAG_LEN.start)
    }
    /// Chunk offset inside the fragment.
    pub fn offset(&self) -> u32 {
        be32(self.buffer.as_ref(), field::OFFSET.start)
    }
    /// Chunk payload length.
    pub fn chunk_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHUNK_LEN)
    }
    /// PUT region id.
    pub fn region(&self) -> u16 {
        be16(self.buffer.as_ref(), field::REGION)
    }
    /// PUT offset in the region.
    pub fn put_offset(&self) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.buffer.as_ref()[field::PUT_OFFSET]);
        u64::from_be_bytes(a)
    }

    /// ACK block for channel `ch` is present.
    pub fn has_ack(&self, ch: usize) -> bool {
        let bit = if ch == 0 {
            flags::ACK_PRIORITY
        } else {
            flags::ACK_DATA
        };
        self.flags() & bit != 0
    }

    fn ack_block_len(&self, ch: usize) -> usize {
        if self.has_ack(ch) {
            ACK_BLOCK_LEN + self.sack_count(ch) * SACK_RANGE_LEN
        } else {
            0
        }
    }

    /// Offset of the ACK block for channel `ch` (meaningful when present).
    pub fn ack_block_start(&self, ch: usize) -> usize {
        if ch == 0 {
            HEADER_LEN
        } else {
            HEADER_LEN + self.ack_block_len(0)
        }
    }

    /// Offset of the payload.
    pub fn payload_start(&self) -> usize {
        HEADER_LEN + self.ack_block_len(0) + self.ack_block_len(1)
    }

    /// Header + ACK blocks + payload, as announced by the header.
    pub fn total_len(&self) -> usize {
        self.payload_start() + usize::from(self.chunk_len())
    }

    /// Cumulative ACK (next expected seq) of channel `ch`'s block.
    pub fn ack_cum(&self, ch: usize) -> u32 {
        be32(self.buffer.as_ref(), self.ack_block_start(ch))
    }

    /// SACK range `i` of channel `ch`'s block as `(start, end)`.
    pub fn ack_range(&self, ch: usize, i: usize) -> (u32, u32) {
        let at = self.ack_block_start(ch) + ACK_BLOCK_LEN + i * SACK_RANGE_LEN;
        let b = self.buffer.as_ref();
        (be32(b, at), be32(b, at + 4))
    }

    /// The chunk payload.
    pub fn payload(&self) -> &[u8] {
        let s = self.payload_start();
        &self.buffer.as_ref()[s..s + usize::from(self.chunk_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version byte.
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    /// Sets the flag byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the channel byte.
    pub fn set_channel(&mut self, v: u8) {
        self.buffer.as_mut()[field::CHANNEL] = v;
    }
    /// Sets both SACK range counts.
    pub fn set_sack_counts(&mut self, prio: u8, data: u8) {
        self.buffer.as_mut()[field::RANGES] = (prio & 0x0f) | (data << 4);
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the fragment id.
    pub fn set_frag_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::FRAG_ID].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the fragment length.
    pub fn set_frag_len(&mut self, v: u32) {
        self.buffer.as_mut()[field::FRAG_LEN].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the chunk offset.
    pub fn set_offset(&mut self, v: u32) {
        self.buffer.as_mut()[field::OFFSET].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the chunk length.
    pub fn set_chunk_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHUNK_LEN].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the PUT region.
    pub fn set_region(&mut self, v: u16) {
        self.buffer.as_mut()[field::REGION].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the PUT offset.
    pub fn set_put_offset(&mut self, v: u64) {
        self.buffer.as_mut()[field::PUT_OFFSET].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the cumulative ACK of channel `ch`'s block (flags and counts must be set first).
    pub fn set_ack_cum(&mut self, ch: usize, v: u32) {
        let at = self.ack_block_start(ch);
        self.buffer.as_mut()[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets SACK range `i` of channel `ch`'s block.
    pub fn set_ack_range(&mut self, ch: usize, i: usize, start: u32, end: u32) {
        let at = self.ack_block_start(ch) + ACK_BLOCK_LEN + i * SACK_RANGE_LEN;
        let b = self.buffer.as_mut();
        b[at..at + 4].copy_from_slice(&start.to_be_bytes());
        b[at + 4..at + 8].copy_from_slice(&end.to_be_bytes());
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let s = self.payload_start();
        let n = usize::from(self.chunk_len());
        &mut self.buffer.as_mut()[s..s + n]
    }
}

/// A SACK range `[start, end)` of received sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackRange {
    /// First received seq.
    pub start: u32,
    /// One past the last received seq.
    pub end: u32,
}

/// An ACK block: everything before `cum` was received, plus the SACK ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRepr {
    /// Next expected sequence number (all before it received).
    pub cum: u32,
    /// SACK ranges, highest first; only the first `n_ranges` are meaningful.
    pub ranges: [SackRange; MAX_SACK_RANGES],
    /// Number of valid ranges.
    pub n_ranges: u8,
}

impl AckRepr {
    /// A cumulative-only ACK.
    pub const fn cumulative(cum: u32) -> AckRepr {
        AckRepr {
            cum,
            ranges: [SackRange { start: 0, end: 0 }; MAX_SACK_RANGES],
            n_ranges: 0,
        }
    }

    /// The valid ranges.
    pub fn ranges(&self) -> &[SackRange] {
        &self.ranges[..usize::from(self.n_ranges).min(MAX_SACK_RANGES)]
    }

    /// Encoded length of this block.
    pub fn buffer_len(&self) -> usize {
        ACK_BLOCK_LEN + usize::from(self.n_ranges) * SACK_RANGE_LEN
    }

    /// The highest sequence number this block acknowledges, plus one.
    pub fn end(&self) -> u32 {
        match self.ranges().first() {
            Some(r) => r.end,
            None => self.cum,
        }
    }
}

/// Where a PUT lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutRepr {
    /// Registered region id at the receiver.
    pub region: u16,
    /// Offset of the fragment's first byte in the region.
    pub offset: u64,
}

/// The sequenced part of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr {
    /// Sequence number in the channel's space.
    pub seq: u32,
    /// Fragment id in the channel's space.
    pub frag_id: u32,
    /// Total fragment length.
    pub frag_len: u32,
    /// Offset of this chunk in the fragment.
    pub offset: u32,
    /// Target of a PUT, or `None` for a message.
    pub put: Option<PutRepr>,
}

/// A parsed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Channel the data belongs to (ACK-only segments travel on priority).
    pub channel: Channel,
    /// Sequenced data, if any.
    pub data: Option<DataRepr>,
    /// ACK blocks for the priority and data channels.
    pub acks: [Option<AckRepr>; 2],
    /// The chunk bytes.
    pub payload: &'a [u8],
    /// The sender gave up and stops ([`flags::ABORT`]).
    pub abort: bool,
}

impl<'a> Repr<'a> {
    /// Parses and validates a length-checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &'a Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        if packet.version() != VERSION {
            return Err(Error::Version(packet.version()));
        }
        let fl = packet.flags();
        if fl & !flags::ALL != 0 || (fl & flags::PUT != 0 && fl & flags::DATA == 0) {
            return Err(Error::Flags(fl));
        }
        let channel = Channel::from_u8(packet.channel()).ok_or(Error::Channel(packet.channel()))?;
        let mut acks = [None, None];
        for (ch, slot) in acks.iter_mut().enumerate() {
            if !packet.has_ack(ch) {
                if packet.sack_count(ch) != 0 {
                    return Err(Error::BadSack);
                }
                continue;
            }
            let n = packet.sack_count(ch);
            if n > MAX_SACK_RANGES {
                return Err(Error::BadSack);
            }
            let mut ack = AckRepr::cumulative(packet.ack_cum(ch));
            let mut floor_above = None::<u32>; // previous range's start
            for i in 0..n {
                let (start, end) = packet.ack_range(ch, i);
                // Non-empty, strictly above cum (a gap below), and below the previous range with a gap.
                let ok = seq::lt(start, end)
                    && seq::gt(start, ack.cum)
                    && floor_above.is_none_or(|f| seq::lt(end, f))
                    && seq::diff(end, ack.cum) > 0
                    && seq::diff(end, ack.cum) < (1 << 30);
                if !ok {
                    return Err(Error::BadSack);
                }
                ack.ranges[i] = SackRange { start, end };
                floor_above = Some(start);
            }
            ack.n_ranges = n as u8;
            *slot = Some(ack);
        }
        let payload = packet.payload();
        let data = if fl & flags::DATA != 0 {
            let frag_len = packet.frag_len();
            let offset = packet.offset();
            let end = u64::from(offset) + payload.len() as u64;
            if end > u64::from(frag_len) {
                return Err(Error::ChunkOutsideFragment);
            }
            let put = if fl & flags::PUT != 0 {
                Some(PutRepr {
                    region: packet.region(),
                    offset: packet.put_offset(),
                })
            } else {
                None
            };
            Some(DataRepr {
                seq: packet.seq(),
                frag_id: packet.frag_id(),
                frag_len,
                offset,
                put,
            })
        } else {
            if !payload.is_empty() {
                return Err(Error::PayloadWithoutData);
            }
            if acks[0].is_none() && acks[1].is_none() && fl & flags::ABORT == 0 {
                return Err(Error::Empty);
            }
            None
        };
        Ok(Repr {
            channel,
            data,
            acks,
            payload,
            abort: fl & flags::ABORT != 0,
        })
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
            + self
                .acks
                .iter()
                .flatten()
                .map(AckRepr::buffer_len)
                .sum::<usize>()
            + self.payload.len()
    }

    /// Writes the segment into `packet`, whose buffer must be at least
    /// [`Repr::buffer_len`] bytes and the payload at most `u16::MAX` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let mut fl = 0;
        if let Some(d) = &self.data {
            fl |= flags::DATA;
            if d.put.is_some() {
                fl |= flags::PUT;
            }
        }
        if self.acks[0].is_some() {
            fl |= flags::ACK_PRIORITY;
        }
        if self.acks[1].is_some() {
            fl |= flags::ACK_DATA;
        }
        if self.abort {
            fl |= flags::ABORT;
        }
        packet.set_version(VERSION);
        packet.set_flags(fl);
        packet.set_channel(self.channel as u8);
        let n0 = self.acks[0].map_or(0, |a| a.n_ranges);
        let n1 = self.acks[1].map_or(0, |a| a.n_ranges);
        packet.set_sack_counts(n0, n1);
        let d = self.data.unwrap_or(DataRepr {
            seq: 0,
            frag_id: 0,
            frag_len: 0,
            offset: 0,
            put: None,
        });
        packet.set_seq(d.seq);
        packet.set_frag_id(d.frag_id);
        packet.set_frag_len(d.frag_len);
        packet.set_offset(d.offset);
        packet.set_chunk_len(self.payload.len() as u16);
        let p = d.put.unwrap_or(PutRepr {
            region: 0,
            offset: 0,
        });
        packet.set_region(p.region);
        packet.set_put_offset(p.offset);
        for (ch, ack) in self.acks.iter().enumerate() {
            if let Some(a) = ack {
                packet.set_ack_cum(ch, a.cum);
                for (i, r) in a.ranges().iter().enumerate() {
                    packet.set_ack_range(ch, i, r.start, r.end);
                }
            }
        }
        packet.payload_mut().copy_from_slice(self.payload);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // A data segment on the data channel, a PUT, with a data-channel ACK of one SACK range.
    static BYTES: [u8; 32 + 12 + 3] = [
        0x01, 0x0b, 0x01, 0x10, // version, flags DATA|PUT|ACK_DATA, channel 1, counts 0/1
        0x00, 0x00, 0x00, 0x07, // seq 7
        0x00, 0x00, 0x00, 0x02, // frag 2
        0x00, 0x00, 0x00, 0x0a, // frag_len 10
        0x00, 0x00, 0x00, 0x04, // offset 4
        0x00, 0x03, 0x00, 0x05, // chunk_len 3, region 5
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, // put offset 256
        0x00, 0x00, 0x00, 0x64, // cum 100
        0x00, 0x00, 0x00, 0x66, 0x00, 0x00, 0x00, 0x68, // range [102, 104)
        0xaa, 0xbb, 0xcc, // payload
    ];

    fn repr() -> Repr<'static> {
        let mut ack = AckRepr::cumulative(100);
        ack.ranges[0] = SackRange {
            start: 102,
            end: 104,
        };
        ack.n_ranges = 1;
        Repr {
            channel: Channel::Data,
            data: Some(DataRepr {
                seq: 7,
                frag_id: 2,
                frag_len: 10,
                offset: 4,
                put: Some(PutRepr {
                    region: 5,
                    offset: 256,
                }),
            }),
            acks: [None, Some(ack)],
            payload: &[0xaa, 0xbb, 0xcc],
            abort: false,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.version(), 1);
        assert_eq!(p.channel(), 1);
        assert_eq!(p.seq(), 7);
        assert_eq!(p.frag_id(), 2);
        assert_eq!(p.frag_len(), 10);
        assert_eq!(p.offset(), 4);
        assert_eq!(p.chunk_len(), 3);
        assert_eq!(p.region(), 5);
        assert_eq!(p.put_offset(), 256);
        assert!(!p.has_ack(0));
        assert!(p.has_ack(1));
        assert_eq!(p.ack_cum(1), 100);
        assert_eq!(p.ack_range(1, 0), (102, 104));
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 47];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version(1);
        p.set_flags(0x0b);
        p.set_channel(1);
        p.set_sack_counts(0, 1);
        p.set_seq(7);
        p.set_frag_id(2);
        p.set_frag_len(10);
        p.set_offset(4);
        p.set_chunk_len(3);
        p.set_region(5);
        p.set_put_offset(256);
        p.set_ack_cum(1, 100);
        p.set_ack_range(1, 0, 102, 104);
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc]);
        assert_eq!(&buf[..], &BYTES[..]);
    }

    #[test]
    fn parse() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let r = repr();
        assert_eq!(r.buffer_len(), BYTES.len());
        let mut buf = [0u8; 47];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..], &BYTES[..]);
    }

    #[test]
    fn impossible_lengths() {
        for n in 0..BYTES.len() {
            assert_eq!(
                Packet::new_checked(&BYTES[..n]).unwrap_err(),
                Error::Truncated,
                "len {n}"
            );
        }
        // Trailing padding is allowed and ignored.
        let mut padded = BYTES.to_vec();
        padded.extend_from_slice(&[0; 20]);
        let p = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    fn mutated(f: impl FnOnce(&mut [u8])) -> Result<()> {
        let mut b = BYTES;
        f(&mut b);
        let p = Packet::new_checked(&b[..])?;
        Repr::parse(&p).map(|_| ())
    }

    #[test]
    fn forged_headers_rejected() {
        assert_eq!(mutated(|b| b[0] = 2), Err(Error::Version(2)));
        assert_eq!(mutated(|b| b[1] = 0x8b), Err(Error::Flags(0x8b)));
        assert_eq!(mutated(|b| b[1] = 0x0a), Err(Error::Flags(0x0a))); // PUT without DATA
        assert_eq!(mutated(|b| b[2] = 2), Err(Error::Channel(2)));
        // offset 8 + 3 bytes > frag_len 10
        assert_eq!(mutated(|b| b[19] = 8), Err(Error::ChunkOutsideFragment));
        // offset near u32::MAX must not overflow
        assert_eq!(
            mutated(|b| b[16..20].copy_from_slice(&u32::MAX.to_be_bytes())),
            Err(Error::ChunkOutsideFragment)
        );
        // SACK range at/below cum, empty, or inverted
        assert_eq!(mutated(|b| b[39] = 100), Err(Error::BadSack));
        assert_eq!(mutated(|b| b[43] = 102), Err(Error::BadSack));
        // SACK count on an absent block
        assert_eq!(mutated(|b| b[3] = 0x11), Err(Error::BadSack));
    }

    #[test]
    fn ack_only_and_empty() {
        let r = Repr {
            channel: Channel::Priority,
            data: None,
            acks: [Some(AckRepr::cumulative(u32::MAX)), None],
            payload: &[],
            abort: false,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        buf[1] = 0; // no ack, no data
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p), Err(Error::Empty));
        // An abort alone is not empty; with an ACK block it round-trips too.
        for acks in [[None, None], [None, Some(AckRepr::cumulative(7))]] {
            let r = Repr {
                channel: Channel::Priority,
                data: None,
                acks,
                payload: &[],
                abort: true,
            };
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut Packet::new_unchecked(&mut buf[..]));
            assert_eq!(buf[1] & flags::ABORT, flags::ABORT);
            let p = Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(Repr::parse(&p).unwrap(), r);
        }
    }

    #[test]
    fn ranges_across_wrap() {
        let mut ack = AckRepr::cumulative(u32::MAX - 1);
        ack.ranges[0] = SackRange { start: 3, end: 9 };
        ack.ranges[1] = SackRange {
            start: u32::MAX,
            end: 1,
        };
        ack.n_ranges = 2;
        let r = Repr {
            channel: Channel::Priority,
            data: None,
            acks: [None, Some(ack)],
            payload: &[],
            abort: false,
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        assert_eq!(ack.end(), 9);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                if let Ok(r) = Repr::parse(&p) {
                    let mut out = vec![0u8; r.buffer_len()];
                    r.emit(&mut Packet::new_unchecked(&mut out[..]));
                    let p2 = Packet::new_checked(&out[..]).unwrap();
                    proptest::prop_assert_eq!(Repr::parse(&p2).unwrap(), r);
                }
            }
        }

        #[test]
        fn mutated_fixture_never_panics(i in 0usize..47, v: u8) {
            let mut b = BYTES;
            b[i] = v;
            if let Ok(p) = Packet::new_checked(&b[..]) {
                if let Ok(r) = Repr::parse(&p) {
                    proptest::prop_assert!(r.buffer_len() <= b.len());
                }
            }
        }
    }
}
