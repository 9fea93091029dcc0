//! Power-of-two SPSC rings with virtual positions.
//!
//! Positions are monotonically increasing `u64` byte counts; the offset in the
//! ring is `pos & (size - 1)`. Everything is a multiple of 32 bytes.
//!
//! [`SendRing`] is the local send ring. It mirrors the peer's receive ring byte for
//! byte: what lies at offset `o` here is written to offset `o` there. `call()` and
//! `reply()` append messages to the open batch; a batch is closed (its flow
//! metadata filled) when it is flushed or when a message would not fit before the
//! ring end. The boundary rule is strict: a write that would end exactly at the
//! ring end also wraps (`offset + size < ring_size` means it fits), so at least
//! 32 bytes always remain for a wrap marker and no batch straddles the end.
//!
//! [`RecvCursor`] tracks the receive ring: the producer advances with immediate
//! values, the consumer with parsed batches.

#![forbid(unsafe_code)]

use super::wire::{
    encode_imm, FlowMeta, FlowMetaRepr, Message, MessageRepr, ALIGNMENT, FLOW_METADATA_SIZE,
    WRAP_MESSAGE_COUNT,
};
use thiserror::Error;

/// Smallest ring size accepted.
pub const MIN_RING_SIZE: u64 = 256;
/// Largest ring size accepted (an immediate value counts 32-byte blocks in 32 bits;
/// this keeps every offset in `u32` range too).
pub const MAX_RING_SIZE: u64 = 1 << 31;

/// A ring size that is not a power of two in range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("ring size {0} must be a power of two between {MIN_RING_SIZE} and {MAX_RING_SIZE}")]
pub struct BadRingSize(pub u64);

/// Checks a ring size.
pub fn check_ring_size(size: u64) -> Result<(), BadRingSize> {
    if size.is_power_of_two() && (MIN_RING_SIZE..=MAX_RING_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(BadRingSize(size))
    }
}

/// Bytes that fit between `pos` and the ring end.
#[inline]
pub const fn room_to_end(pos: u64, size: u64) -> u64 {
    size - (pos & (size - 1))
}

/// Whether `len` bytes written at `pos` stay strictly before the ring end.
#[inline]
pub const fn fits_before_end(pos: u64, len: u64, size: u64) -> bool {
    (pos & (size - 1)) + len < size
}

/// Copies a payload into its place in the ring (`dst` as long as `src`).
/// Payloads of 16 to 64 bytes, the usual small RPC, go as two overlapping
/// fixed-size moves instead of a `memcpy` call on the round trip.
#[inline(always)]
fn copy_payload(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if dst.len() == n && n == 32 {
        // The two halves below would be the same move.
        dst[..32].copy_from_slice(&src[..32]);
    } else if dst.len() == n && (32..=64).contains(&n) {
        dst[..32].copy_from_slice(&src[..32]);
        dst[n - 32..].copy_from_slice(&src[n - 32..]);
    } else if dst.len() == n && (16..32).contains(&n) {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else {
        dst.copy_from_slice(src);
    }
}

/// One contiguous piece of the send ring ready for a write-with-immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Virtual position of the segment's first byte (a batch's metadata).
    pub pos: u64,
    /// Offset in both rings.
    pub offset: u64,
    /// Bytes that carry data (a wrap marker's skipped tail is not copied).
    pub copy_len: u64,
    /// Bytes the receiver's producer advances by.
    pub delta: u64,
    /// The immediate value: `delta / 32`.
    pub imm: u32,
}

/// The local send ring and its batching state.
#[derive(Debug)]
pub struct SendRing {
    buf: Box<[u8]>,
    size: u64,
    producer: u64,
    flushed: u64,
    meta_pos: Option<u64>,
    batch_count: u32,
    last_wrap: Option<u64>,
}

impl SendRing {
    /// A zeroed ring of `size` bytes (a checked power of two).
    pub fn new(size: u64) -> Result<Self, BadRingSize> {
        check_ring_size(size)?;
        Ok(SendRing {
            buf: vec![0u8; size as usize].into_boxed_slice(),
            size,
            producer: 0,
            flushed: 0,
            meta_pos: None,
            batch_count: 0,
            last_wrap: None,
        })
    }

    /// Ring size in bytes.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Next byte position to write.
    #[inline]
    pub fn producer(&self) -> u64 {
        self.producer
    }

    /// First position not yet handed to the transport.
    #[inline]
    pub fn flushed(&self) -> u64 {
        self.flushed
    }

    /// Whether a batch is open.
    #[inline]
    pub fn batch_open(&self) -> bool {
        self.meta_pos.is_some()
    }

    /// Whether everything written was handed to the transport: nothing
    /// unflushed and no batch open (an open batch's metadata block is
    /// written, unflushed data: one comparison answers both).
    #[inline]
    pub fn all_flushed(&self) -> bool {
        debug_assert!(self.flushed <= self.producer);
        let all = self.flushed == self.producer;
        debug_assert!(!all || self.meta_pos.is_none());
        all
    }

    /// Messages in the open batch.
    #[inline]
    pub fn batch_count(&self) -> u32 {
        self.batch_count
    }

    #[inline]
    fn offset(&self, pos: u64) -> usize {
        (pos & (self.size - 1)) as usize
    }

    /// Bytes appending a message of `padded` ring bytes would add, counting a new
    /// batch's metadata and, when it would not fit before the ring end, the
    /// skipped tail (the wrap marker's extent) and the fresh batch's metadata.
    #[inline]
    pub fn consumption(&self, padded: u64) -> u64 {
        let meta = if self.batch_open() {
            0
        } else {
            FLOW_METADATA_SIZE as u64
        };
        if fits_before_end(self.producer, padded + meta, self.size) {
            padded + meta
        } else {
            room_to_end(self.producer, self.size) + FLOW_METADATA_SIZE as u64 + padded
        }
    }

    /// [`consumption`](Self::consumption) and [`needs_wrap`](Self::needs_wrap)
    /// in one: the bytes appending `padded` ring bytes adds, and whether it
    /// wraps first.
    #[inline]
    pub fn plan(&self, padded: u64) -> (u64, bool) {
        let meta = if self.batch_open() {
            0
        } else {
            FLOW_METADATA_SIZE as u64
        };
        if fits_before_end(self.producer, padded + meta, self.size) {
            (padded + meta, false)
        } else {
            (
                room_to_end(self.producer, self.size) + FLOW_METADATA_SIZE as u64 + padded,
                true,
            )
        }
    }

    /// Whether appending `padded` ring bytes needs a wrap first.
    #[inline]
    pub fn needs_wrap(&self, padded: u64) -> bool {
        let meta = if self.batch_open() {
            0
        } else {
            FLOW_METADATA_SIZE as u64
        };
        !fits_before_end(self.producer, padded + meta, self.size)
    }

    /// Closes the open batch, filling its metadata. Does nothing when none is open.
    #[inline]
    pub fn close_batch(&mut self, consumer_pos: u64, credit_grant: u64) {
        if let Some(meta_pos) = self.meta_pos.take() {
            let off = self.offset(meta_pos);
            let repr = FlowMetaRepr {
                consumer_pos,
                credit_grant,
                message_count: self.batch_count,
            };
            repr.emit(&mut FlowMeta::new_unchecked(
                &mut self.buf[off..off + FLOW_METADATA_SIZE],
            ));
            self.batch_count = 0;
        }
    }

    /// Writes a wrap marker at the producer (no batch may be open) and moves the
    /// producer to the start of the next lap. Returns the bytes skipped.
    #[inline]
    pub fn write_wrap_marker(&mut self, consumer_pos: u64, credit_grant: u64) -> u64 {
        debug_assert!(self.meta_pos.is_none());
        let off = self.offset(self.producer);
        let repr = FlowMetaRepr {
            consumer_pos,
            credit_grant,
            message_count: WRAP_MESSAGE_COUNT,
        };
        repr.emit(&mut FlowMeta::new_unchecked(
            &mut self.buf[off..off + FLOW_METADATA_SIZE],
        ));
        let skip = room_to_end(self.producer, self.size);
        self.last_wrap = Some(self.producer);
        self.producer += skip;
        skip
    }

    /// Bytes a wrap marker at the producer would skip.
    #[inline]
    pub fn wrap_skip(&self) -> u64 {
        room_to_end(self.producer, self.size)
    }

    /// Reserves the metadata block of a new batch at the producer. The caller
    /// has checked it fits before the ring end.
    #[inline]
    pub fn open_batch(&mut self) {
        if self.meta_pos.is_none() {
            self.meta_pos = Some(self.producer);
            self.producer += FLOW_METADATA_SIZE as u64;
        }
    }

    /// Appends a message to the open batch (opened here if needed). The caller
    /// has wrapped first when [`needs_wrap`](Self::needs_wrap) said so.
    #[inline(always)]
    pub fn append_message(&mut self, repr: MessageRepr, payload: &[u8]) {
        self.open_batch();
        self.put_message(repr, payload);
    }

    /// [`append_message`](Self::append_message) when the message fits
    /// before the ring end without a wrap (else nothing changes): the
    /// check [`needs_wrap`](Self::needs_wrap) makes and the append, with
    /// the batch's state read once. Returns whether it appended.
    #[inline(always)]
    pub fn append_if_fits(&mut self, repr: MessageRepr, payload: &[u8]) -> bool {
        let open = self.meta_pos.is_some();
        let meta = if open { 0 } else { FLOW_METADATA_SIZE as u64 };
        if !fits_before_end(self.producer, repr.buffer_len() + meta, self.size) {
            return false;
        }
        if !open {
            self.meta_pos = Some(self.producer);
            self.producer += FLOW_METADATA_SIZE as u64;
        }
        self.put_message(repr, payload);
        true
    }

    /// Writes a message at the producer, in the open batch.
    #[inline(always)]
    fn put_message(&mut self, repr: MessageRepr, payload: &[u8]) {
        debug_assert!(self.meta_pos.is_some());
        let off = self.offset(self.producer);
        let padded = repr.buffer_len() as usize;
        let slot = &mut self.buf[off..off + padded];
        // The padding after the payload is zeroed (the last 32-byte block
        // holds all of it; the header and payload overwrite the rest). Left
        // as the previous ring lap had it, it differed from one batch to the
        // next, and the shm transport's completion slot, which carries only
        // the words that changed, carried up to three more words each way.
        slot[padded - ALIGNMENT as usize..].fill(0);
        let mut msg = Message::new_unchecked(&mut *slot);
        repr.emit(&mut msg);
        copy_payload(msg.payload_mut(), payload);
        self.producer += padded as u64;
        self.batch_count += 1;
    }

    /// The next segment to hand to the transport, if any data is unflushed.
    /// Closed batches only: close the open batch first. A segment never crosses
    /// the ring end; one ending there includes the wrap marker's skipped tail in
    /// `delta` but not in `copy_len`.
    #[inline]
    pub fn next_segment(&self) -> Option<Segment> {
        let end = match self.meta_pos {
            Some(m) => m,
            None => self.producer,
        };
        if self.flushed >= end {
            return None;
        }
        let to_end = room_to_end(self.flushed, self.size);
        let delta = (end - self.flushed).min(to_end);
        let seg_end = self.flushed + delta;
        let copy_len = match self.last_wrap {
            Some(w) if w >= self.flushed && w < seg_end => {
                w + FLOW_METADATA_SIZE as u64 - self.flushed
            }
            _ => delta,
        };
        Some(Segment {
            pos: self.flushed,
            offset: self.flushed & (self.size - 1),
            copy_len,
            delta,
            imm: encode_imm(delta),
        })
    }

    /// Touches the two cache lines at the producer, where the next message goes,
    /// so that a call or reply after an idle wait does not start with a miss on
    /// a ring line last used a lap ago (at queue depth 1 that miss is on the
    /// round trip). Plain loads: nobody else touches the send ring, so the lines
    /// arrive exclusive and the later stores hit.
    #[inline]
    pub fn warm(&self) {
        let off = self.offset(self.producer) & !63;
        let end = (off + 128).min(self.buf.len());
        let mut i = off;
        while i < end {
            std::hint::black_box(self.buf[i]);
            i += 64;
        }
    }

    /// The segment the open batch becomes once closed, when it is all that
    /// is unflushed (the common case: one batch per flush): what
    /// [`next_segment`](Self::next_segment) returns after
    /// [`close_batch`](Self::close_batch), without its general walk. A batch
    /// never reaches the ring end and a wrap marker is always flushed before
    /// the batch after it opens, so the segment is the batch, whole.
    #[inline]
    pub fn sole_batch(&self) -> Option<Segment> {
        match self.meta_pos {
            Some(m) if m == self.flushed => {
                let delta = self.producer - m;
                Some(Segment {
                    pos: m,
                    offset: m & (self.size - 1),
                    copy_len: delta,
                    delta,
                    imm: encode_imm(delta),
                })
            }
            _ => None,
        }
    }

    /// [`sole_batch`](Self::sole_batch) and [`close_batch`](Self::close_batch)
    /// in one step: when the open batch is all that is unflushed, closes it
    /// with `consumer_pos` and the grant `grant` returns for the producer
    /// (the batch's end), and returns its segment; otherwise does nothing
    /// (and does not call `grant`). One check of the batch's position, not
    /// one to find the segment and another to close it (the express flush,
    /// on the round trip).
    #[inline(always)]
    pub fn close_sole(
        &mut self,
        consumer_pos: u64,
        grant: impl FnOnce(u64) -> u64,
    ) -> Option<Segment> {
        let m = self.flushed;
        if self.meta_pos != Some(m) {
            return None;
        }
        let delta = self.producer - m;
        let off = self.offset(m);
        let repr = FlowMetaRepr {
            consumer_pos,
            credit_grant: grant(self.producer),
            message_count: self.batch_count,
        };
        repr.emit(&mut FlowMeta::new_unchecked(
            &mut self.buf[off..off + FLOW_METADATA_SIZE],
        ));
        self.meta_pos = None;
        self.batch_count = 0;
        // A batch lies within the ring, which is at most `MAX_RING_SIZE`
        // bytes: its 32-byte blocks always fit the immediate.
        debug_assert!(delta <= MAX_RING_SIZE);
        Some(Segment {
            pos: m,
            offset: off as u64,
            copy_len: delta,
            delta,
            imm: (delta / ALIGNMENT) as u32,
        })
    }

    /// The bytes of a segment returned by [`next_segment`](Self::next_segment).
    #[inline]
    pub fn segment_bytes(&self, seg: &Segment) -> &[u8] {
        let off = seg.offset as usize;
        &self.buf[off..off + seg.copy_len as usize]
    }

    /// Marks a segment as handed to the transport.
    #[inline]
    pub fn mark_flushed(&mut self, seg: &Segment) {
        debug_assert_eq!(seg.pos, self.flushed);
        debug_assert_eq!(seg.delta % ALIGNMENT, 0);
        self.flushed += seg.delta;
    }
}

/// A receive-ring error caused by the peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum RecvError {
    /// Immediate values announced more data than the ring holds.
    #[error("peer overran the receive ring: {in_ring} bytes unconsumed, ring is {size}")]
    Overrun {
        /// Bytes announced and not consumed.
        in_ring: u64,
        /// Ring size.
        size: u64,
    },
}

/// Producer and consumer positions of the local receive ring.
#[derive(Debug, Clone)]
pub struct RecvCursor {
    size: u64,
    producer: u64,
    consumer: u64,
}

impl RecvCursor {
    /// A cursor for a ring of `size` bytes (a checked power of two).
    pub fn new(size: u64) -> Result<Self, BadRingSize> {
        check_ring_size(size)?;
        Ok(RecvCursor {
            size,
            producer: 0,
            consumer: 0,
        })
    }

    /// Bytes announced so far.
    #[inline]
    pub fn producer(&self) -> u64 {
        self.producer
    }

    /// Bytes parsed so far.
    #[inline]
    pub fn consumer(&self) -> u64 {
        self.consumer
    }

    /// Ring size.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Adds an immediate value's delta.
    #[inline]
    pub fn advance(&mut self, delta: u64) -> Result<(), RecvError> {
        let producer = self.producer.saturating_add(delta);
        let in_ring = producer - self.consumer;
        if in_ring > self.size {
            return Err(RecvError::Overrun {
                in_ring,
                size: self.size,
            });
        }
        self.producer = producer;
        Ok(())
    }

    /// The contiguous announced region at the consumer: `(offset, len)`, never
    /// crossing the ring end.
    #[inline]
    pub fn pending(&self) -> Option<(u64, u64)> {
        if self.consumer >= self.producer {
            return None;
        }
        let len = (self.producer - self.consumer).min(room_to_end(self.consumer, self.size));
        Some((self.consumer & (self.size - 1), len))
    }

    /// Consumes `len` bytes (at most what [`pending`](Self::pending) returned).
    #[inline]
    pub fn consume(&mut self, len: u64) {
        debug_assert!(self.consumer + len <= self.producer);
        self.consumer += len;
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::rpc::wire::{padded_message_size, Batch};

    #[test]
    fn sizes() {
        assert!(check_ring_size(1024).is_ok());
        assert!(check_ring_size(1000).is_err());
        assert!(check_ring_size(128).is_err());
        assert!(check_ring_size(1 << 32).is_err());
    }

    #[test]
    fn strict_boundary() {
        // 256-byte ring: 224 + 32 == 256 does not fit; 224 + 0 < 256 would.
        assert!(!fits_before_end(224, 32, 256));
        assert!(fits_before_end(192, 32, 256));
        assert!(!fits_before_end(0, 256, 256));
    }

    #[test]
    fn batch_then_wrap() {
        let mut r = SendRing::new(256).unwrap();
        let repr = MessageRepr {
            call_id: 1,
            piggyback: 2,
            len: 40,
        };
        let padded = padded_message_size(40); // 64
        assert_eq!(r.consumption(padded), 96);
        r.append_message(repr, &[7u8; 40]);
        r.append_message(repr, &[7u8; 40]);
        assert_eq!(r.producer(), 160);
        // Next one would end at 224 < 256: fits; then at 288: wrap.
        r.append_message(repr, &[7u8; 40]);
        assert_eq!(r.producer(), 224);
        assert!(r.needs_wrap(padded));
        assert_eq!(r.consumption(padded), 32 + 32 + 64);
        r.close_batch(0, 0);
        let skip = r.write_wrap_marker(0, 0);
        assert_eq!(skip, 32);
        assert_eq!(r.producer(), 256);

        let s1 = r.next_segment().unwrap();
        assert_eq!((s1.offset, s1.delta, s1.copy_len, s1.imm), (0, 256, 256, 8));
        let bytes = r.segment_bytes(&s1).to_vec();
        let b = Batch::new_checked(&bytes).unwrap();
        assert_eq!(b.len(), 224);
        assert_eq!(b.messages().count(), 3);
        assert!(Batch::new_checked(&bytes[224..]).unwrap().is_wrap());
        r.mark_flushed(&s1);
        r.append_message(repr, &[8u8; 40]);
        r.close_batch(5, 64);
        let s2 = r.next_segment().unwrap();
        assert_eq!((s2.offset, s2.delta), (0, 96));
        let b2 = Batch::new_checked(r.segment_bytes(&s2)).unwrap();
        assert_eq!(b2.meta().consumer_pos, 5);
        assert_eq!(b2.meta().credit_grant, 64);
        r.mark_flushed(&s2);
        assert!(r.next_segment().is_none());
    }

    /// `append_if_fits` is `needs_wrap` then `append_message`: at every
    /// ring offset, with a batch open or not, for messages up to the ring's
    /// size, it appends exactly when no wrap is needed (the same bytes and
    /// state as `append_message`) and otherwise changes nothing.
    #[test]
    fn append_if_fits_is_needs_wrap_then_append() {
        let state = |r: &SendRing| {
            (
                r.buf.to_vec(),
                r.producer,
                r.flushed,
                r.meta_pos,
                r.batch_count,
            )
        };
        for start in (0..512u64).step_by(32) {
            for open in [false, true] {
                for len in [0u32, 20, 32, 52, 100, 200, 400] {
                    let mut a = SendRing::new(256).unwrap();
                    a.producer = start;
                    a.flushed = start;
                    if open && fits_before_end(start, 32, 256) {
                        a.open_batch();
                    }
                    let mut b = SendRing::new(256).unwrap();
                    (b.producer, b.flushed, b.meta_pos) = (a.producer, a.flushed, a.meta_pos);
                    let repr = MessageRepr {
                        call_id: 7,
                        piggyback: 3,
                        len,
                    };
                    let payload: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
                    let before = state(&a);
                    let wrap = a.needs_wrap(padded_message_size(len));
                    assert_eq!(a.append_if_fits(repr, &payload), !wrap);
                    if wrap {
                        assert_eq!(state(&a), before);
                    } else {
                        b.append_message(repr, &payload);
                        assert_eq!(state(&a), state(&b));
                    }
                }
            }
        }
    }

    #[test]
    fn sole_batch_is_the_next_segment() {
        let mut r = SendRing::new(256).unwrap();
        let repr = MessageRepr {
            call_id: 1,
            piggyback: 2,
            len: 40,
        };
        assert_eq!(r.sole_batch(), None);
        // Lone batches around the ring: each the next segment once closed.
        for _ in 0..9 {
            if r.needs_wrap(padded_message_size(40)) {
                // A wrap marker is flushed on its own before the next batch.
                r.write_wrap_marker(0, 0);
                let s = r.next_segment().unwrap();
                r.mark_flushed(&s);
            }
            r.append_message(repr, &[3; 40]);
            let sole = r.sole_batch();
            r.close_batch(0, 0);
            assert_eq!(sole, r.next_segment());
            r.mark_flushed(&sole.unwrap());
        }
        // Not alone: a closed batch before it, or a wrap marker in between.
        let mut r = SendRing::new(256).unwrap();
        r.append_message(repr, &[3; 40]);
        r.close_batch(0, 0);
        r.append_message(repr, &[3; 40]);
        assert_eq!(r.sole_batch(), None);
        r.close_batch(0, 0);
        r.write_wrap_marker(0, 0);
        r.append_message(repr, &[3; 40]);
        assert_eq!(r.sole_batch(), None);
    }

    /// `close_sole` is `sole_batch` then `close_batch`: the same segment,
    /// the same ring bytes and state, the grant asked for at the batch's
    /// end; and nothing at all (no grant asked for) when the open batch is
    /// not alone.
    #[test]
    fn close_sole_is_sole_batch_and_close() {
        let (mut a, mut b) = (SendRing::new(256).unwrap(), SendRing::new(256).unwrap());
        for step in 0..40u32 {
            let len = [0, 20, 40, 52, 100][step as usize % 5];
            let repr = MessageRepr {
                call_id: step,
                piggyback: 2,
                len,
            };
            for r in [&mut a, &mut b] {
                if r.needs_wrap(padded_message_size(len)) {
                    r.write_wrap_marker(7, 32);
                    let s = r.next_segment().unwrap();
                    r.mark_flushed(&s);
                }
                for _ in 0..1 + step % 2 {
                    if !r.needs_wrap(padded_message_size(len)) {
                        r.append_message(repr, &[step as u8; 100][..len as usize]);
                    }
                }
            }
            let sole = a.sole_batch();
            let end = a.producer();
            a.close_batch(u64::from(step), 64);
            let mut asked = None;
            let got = b.close_sole(u64::from(step), |p| {
                asked = Some(p);
                64
            });
            assert_eq!(got, sole);
            assert_eq!(asked, sole.map(|_| end));
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
            if let Some(s) = got {
                a.mark_flushed(&s);
                b.mark_flushed(&s);
            }
        }
        // Not alone: a closed batch before it, or a wrap marker in between.
        let repr = MessageRepr {
            call_id: 1,
            piggyback: 2,
            len: 40,
        };
        let mut r = SendRing::new(256).unwrap();
        r.append_message(repr, &[3; 40]);
        r.close_batch(0, 0);
        r.append_message(repr, &[3; 40]);
        let before = format!("{r:?}");
        assert_eq!(r.close_sole(0, |_| unreachable!()), None);
        assert_eq!(format!("{r:?}"), before);
        r.close_batch(0, 0);
        r.write_wrap_marker(0, 0);
        r.append_message(repr, &[3; 40]);
        assert_eq!(r.close_sole(0, |_| unreachable!()), None);
        // No batch open.
        let mut r = SendRing::new(256).unwrap();
        assert_eq!(r.close_sole(0, |_| unreachable!()), None);
    }

    #[test]
    fn plan_is_consumption_and_wrap() {
        let mut r = SendRing::new(256).unwrap();
        for step in 0..40u32 {
            for len in [0, 20, 21, 52, 100, 180] {
                let padded = padded_message_size(len);
                assert_eq!(
                    r.plan(padded),
                    (r.consumption(padded), r.needs_wrap(padded)),
                    "step {step}, len {len}, producer {}, open {}",
                    r.producer(),
                    r.batch_open()
                );
            }
            // Walk the ring: open and closed batches at every offset.
            let repr = MessageRepr {
                call_id: 1,
                piggyback: 2,
                len: 8,
            };
            if r.needs_wrap(32) {
                r.close_batch(0, 0);
                r.write_wrap_marker(0, 0);
            }
            r.append_message(repr, &[1; 8]);
            if step % 3 == 0 {
                r.close_batch(0, 0);
            }
        }
    }

    #[test]
    fn wrap_copy_len_skips_tail() {
        let mut r = SendRing::new(256).unwrap();
        let repr = MessageRepr {
            call_id: 1,
            piggyback: 2,
            len: 0,
        };
        r.append_message(repr, &[]);
        r.close_batch(0, 0);
        r.write_wrap_marker(0, 0);
        let s = r.next_segment().unwrap();
        assert_eq!(s.delta, 256);
        assert_eq!(s.copy_len, 96);
    }

    #[test]
    fn recv_cursor() {
        let mut c = RecvCursor::new(256).unwrap();
        assert!(c.pending().is_none());
        c.advance(224).unwrap();
        assert_eq!(c.pending(), Some((0, 224)));
        c.consume(192);
        c.advance(96).unwrap();
        assert_eq!(c.pending(), Some((192, 64)));
        c.consume(64);
        assert_eq!(c.pending(), Some((0, 64)));
        assert!(matches!(c.advance(512), Err(RecvError::Overrun { .. })));
        assert!(c.advance(u64::MAX).is_err());
    }
}
