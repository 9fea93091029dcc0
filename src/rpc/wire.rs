//! The copyrpc wire format: flow metadata, message headers, batches.
//!
//! Everything on a ring is a multiple of [`ALIGNMENT`] (32) bytes. One batch is
//! written with one write-with-immediate; the immediate value is the batch length
//! divided by 32 ([`encode_imm`]).
//!
//! ```text
//! batch:   | flow metadata (32) | message 1 (padded) | message 2 ... |
//! flow metadata: consumer_pos u64 LE | credit_grant u64 LE | message_count u32 LE | 12 zero bytes
//! message:       call_id u32 LE | piggyback u32 LE | len u32 LE | payload (len) | pad to 32
//! ```
//!
//! `call_id` has [`RESPONSE_FLAG`] set on responses; `piggyback` carries the
//! response allowance in 32-byte blocks (the caller's reservation, see
//! [`crate::rpc::flow`]). A flow metadata block whose `message_count` is
//! [`WRAP_MESSAGE_COUNT`] is a wrap marker: the reader skips to the start of the
//! ring.
//!
//! The views follow smoltcp: once `new_checked` returned `Ok`, no accessor
//! panics. [`Batch::new_checked`] validates a whole batch (every header and every
//! padded length within the given bytes), so iterating its messages never fails.

#![forbid(unsafe_code)]

use thiserror::Error;

/// Alignment of every message, batch and ring position, in bytes.
pub const ALIGNMENT: u64 = 32;
/// Size of a message header, in bytes.
pub const HEADER_SIZE: usize = 12;
/// Size of the flow metadata at the head of every batch, in bytes.
pub const FLOW_METADATA_SIZE: usize = 32;
/// Bit of `call_id` marking a response.
pub const RESPONSE_FLAG: u32 = 0x8000_0000;
/// `message_count` value of a wrap marker.
pub const WRAP_MESSAGE_COUNT: u32 = u32::MAX;

/// A parse error: the bytes are not a well-formed batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WireError {
    /// Fewer bytes than a flow metadata block or a message header needs.
    #[error("truncated: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes the structure needs.
        needed: u64,
        /// Bytes there are.
        available: u64,
    },
    /// A message's payload length runs past the end of the batch.
    #[error("message {index} of length {len} runs past the batch")]
    LengthPastBatch {
        /// Index of the message in its batch.
        index: u32,
        /// Its claimed payload length.
        len: u32,
    },
    /// The message count cannot fit into the bytes given.
    #[error("message count {count} overruns the batch")]
    CountOverrun {
        /// The claimed message count.
        count: u32,
    },
}

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const CONSUMER_POS: Field = 0..8;
    pub const CREDIT_GRANT: Field = 8..16;
    pub const MESSAGE_COUNT: Field = 16..20;
    pub const META_PAD: Field = 20..32;

    pub const CALL_ID: Field = 0..4;
    pub const PIGGYBACK: Field = 4..8;
    pub const LEN: Field = 8..12;
    #[inline]
    pub const fn payload(len: usize) -> Field {
        12..12 + len
    }
}

/// Encodes a batch length (a multiple of 32) as an immediate value.
#[inline]
pub fn encode_imm(delta: u64) -> u32 {
    u32::try_from(delta / ALIGNMENT).unwrap_or(u32::MAX)
}

/// Decodes an immediate value into a batch length in bytes.
#[inline]
pub fn decode_imm(imm: u32) -> u64 {
    u64::from(imm) * ALIGNMENT
}

/// `x` rounded up to a multiple of [`ALIGNMENT`].
#[inline]
pub const fn align_up(x: u64) -> u64 {
    (x + ALIGNMENT - 1) & !(ALIGNMENT - 1)
}

/// `x` rounded down to a multiple of [`ALIGNMENT`].
#[inline]
pub const fn align_down(x: u64) -> u64 {
    x & !(ALIGNMENT - 1)
}

/// Bytes a message with `payload_len` bytes of payload takes on a ring:
/// `ceil((12 + payload_len) / 32) * 32`.
#[inline]
pub const fn padded_message_size(payload_len: u32) -> u64 {
    align_up(HEADER_SIZE as u64 + payload_len as u64)
}

/// `call_id` with the response flag set.
#[inline]
pub const fn to_response_id(call_id: u32) -> u32 {
    call_id | RESPONSE_FLAG
}

/// `call_id` without the response flag.
#[inline]
pub const fn from_response_id(call_id: u32) -> u32 {
    call_id & !RESPONSE_FLAG
}

/// Whether `call_id` marks a response.
#[inline]
pub const fn is_response(call_id: u32) -> bool {
    call_id & RESPONSE_FLAG != 0
}

#[inline]
fn u32_at(b: &[u8], f: field::Field) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_le_bytes(a)
}

#[inline]
fn u64_at(b: &[u8], f: field::Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_le_bytes(a)
}

/// A view of a 32-byte flow metadata block.
#[derive(Debug, Clone)]
pub struct FlowMeta<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> FlowMeta<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        FlowMeta { buffer }
    }

    /// Wraps a buffer, checking it holds at least 32 bytes.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let m = Self::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }

    /// Checks the buffer is long enough for every accessor.
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let available = self.buffer.as_ref().len();
        if available < FLOW_METADATA_SIZE {
            return Err(WireError::Truncated {
                needed: FLOW_METADATA_SIZE as u64,
                available: available as u64,
            });
        }
        Ok(())
    }

    /// The sender's receive-ring consumer position.
    #[inline]
    pub fn consumer_pos(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::CONSUMER_POS)
    }

    /// Credit granted to the reader, in bytes.
    #[inline]
    pub fn credit_grant(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::CREDIT_GRANT)
    }

    /// Number of messages that follow, or [`WRAP_MESSAGE_COUNT`].
    #[inline]
    pub fn message_count(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::MESSAGE_COUNT)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> FlowMeta<T> {
    /// Sets the consumer position.
    #[inline]
    pub fn set_consumer_pos(&mut self, v: u64) {
        self.buffer.as_mut()[field::CONSUMER_POS].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the credit grant.
    #[inline]
    pub fn set_credit_grant(&mut self, v: u64) {
        self.buffer.as_mut()[field::CREDIT_GRANT].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the message count.
    #[inline]
    pub fn set_message_count(&mut self, v: u32) {
        self.buffer.as_mut()[field::MESSAGE_COUNT].copy_from_slice(&v.to_le_bytes());
    }

    /// Zeroes the padding.
    #[inline]
    pub fn clear_padding(&mut self) {
        self.buffer.as_mut()[field::META_PAD].fill(0);
    }
}

/// The owned form of a flow metadata block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowMetaRepr {
    /// The sender's receive-ring consumer position (piggy-backed).
    pub consumer_pos: u64,
    /// Credit granted to the reader, in bytes.
    pub credit_grant: u64,
    /// Number of messages that follow, or [`WRAP_MESSAGE_COUNT`].
    pub message_count: u32,
}

impl FlowMetaRepr {
    /// Parses a checked view.
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(m: &FlowMeta<T>) -> Result<Self, WireError> {
        m.check_len()?;
        Ok(FlowMetaRepr {
            consumer_pos: m.consumer_pos(),
            credit_grant: m.credit_grant(),
            message_count: m.message_count(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        FLOW_METADATA_SIZE
    }

    /// Whether this is a wrap marker.
    #[inline]
    pub const fn is_wrap(&self) -> bool {
        self.message_count == WRAP_MESSAGE_COUNT
    }

    /// Writes the block (the view must have been checked).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut FlowMeta<T>) {
        m.set_consumer_pos(self.consumer_pos);
        m.set_credit_grant(self.credit_grant);
        m.set_message_count(self.message_count);
        m.clear_padding();
    }
}

/// A view of one message: header and payload (the padding is not included).
#[derive(Debug, Clone)]
pub struct Message<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Message<T> {
    /// Wraps a buffer without checking its length.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Self {
        Message { buffer }
    }

    /// Wraps a buffer, checking it holds the header and the whole payload.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let m = Self::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }

    /// Checks the header and the payload it announces fit in the buffer.
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_SIZE {
            return Err(WireError::Truncated {
                needed: HEADER_SIZE as u64,
                available: b.len() as u64,
            });
        }
        let needed = HEADER_SIZE as u64 + u64::from(self.len());
        if (b.len() as u64) < needed {
            return Err(WireError::Truncated {
                needed,
                available: b.len() as u64,
            });
        }
        Ok(())
    }

    /// The call id, with [`RESPONSE_FLAG`] on responses.
    #[inline]
    pub fn call_id(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::CALL_ID)
    }

    /// The piggy-back field: the response allowance in 32-byte blocks.
    #[inline]
    pub fn piggyback(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::PIGGYBACK)
    }

    /// The payload length.
    #[inline]
    pub fn len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::LEN)
    }

    /// Whether the payload is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::payload(self.len() as usize)]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Message<T> {
    /// Sets the call id.
    #[inline]
    pub fn set_call_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::CALL_ID].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the piggy-back field.
    #[inline]
    pub fn set_piggyback(&mut self, v: u32) {
        self.buffer.as_mut()[field::PIGGYBACK].copy_from_slice(&v.to_le_bytes());
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_len(&mut self, v: u32) {
        self.buffer.as_mut()[field::LEN].copy_from_slice(&v.to_le_bytes());
    }

    /// The payload, mutable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len() as usize;
        &mut self.buffer.as_mut()[field::payload(len)]
    }
}

/// The owned form of a message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRepr {
    /// The call id, with [`RESPONSE_FLAG`] on responses.
    pub call_id: u32,
    /// The response allowance in 32-byte blocks.
    pub piggyback: u32,
    /// The payload length.
    pub len: u32,
}

impl MessageRepr {
    /// Parses a view's header (checking the payload fits).
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(m: &Message<T>) -> Result<Self, WireError> {
        m.check_len()?;
        Ok(MessageRepr {
            call_id: m.call_id(),
            piggyback: m.piggyback(),
            len: m.len(),
        })
    }

    /// Bytes the message takes on the ring, padding included.
    #[inline]
    pub const fn buffer_len(&self) -> u64 {
        padded_message_size(self.len)
    }

    /// Writes the header (the payload is written through [`Message::payload_mut`]).
    /// The buffer must hold at least [`HEADER_SIZE`] bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Message<T>) {
        m.set_call_id(self.call_id);
        m.set_piggyback(self.piggyback);
        m.set_len(self.len);
    }
}

/// A validated batch: flow metadata, then `message_count` padded messages.
///
/// A wrap marker is a batch of exactly [`FLOW_METADATA_SIZE`] bytes whose count
/// is [`WRAP_MESSAGE_COUNT`].
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    bytes: &'a [u8],
    meta: FlowMetaRepr,
    len: usize,
    released: u64,
}

impl<'a> Batch<'a> {
    /// Parses and validates the batch at the start of `bytes` (which may hold
    /// more after it): every message header and payload must lie within `bytes`.
    #[inline]
    pub fn new_checked(bytes: &'a [u8]) -> Result<Self, WireError> {
        let meta = FlowMetaRepr::parse(&FlowMeta::new_checked(bytes)?)?;
        if meta.is_wrap() {
            return Ok(Batch {
                bytes,
                meta,
                len: FLOW_METADATA_SIZE,
                released: 0,
            });
        }
        // Every message takes at least 32 bytes: reject counts that cannot fit
        // before walking them.
        let max_count = (bytes.len() - FLOW_METADATA_SIZE) as u64 / ALIGNMENT;
        if u64::from(meta.message_count) > max_count {
            return Err(WireError::CountOverrun {
                count: meta.message_count,
            });
        }
        let mut off = FLOW_METADATA_SIZE;
        let mut released = 0u64;
        for index in 0..meta.message_count {
            let rest = &bytes[off..];
            let msg = Message::new_checked(rest).map_err(|e| match e {
                WireError::Truncated { needed, .. } if needed > HEADER_SIZE as u64 => {
                    WireError::LengthPastBatch {
                        index,
                        len: Message::new_unchecked(rest).len(),
                    }
                }
                other => other,
            })?;
            let padded = padded_message_size(msg.len());
            if padded > rest.len() as u64 {
                return Err(WireError::LengthPastBatch {
                    index,
                    len: msg.len(),
                });
            }
            if is_response(msg.call_id()) {
                released += u64::from(msg.piggyback()) * ALIGNMENT;
            }
            off += padded as usize;
        }
        Ok(Batch {
            bytes,
            meta,
            len: off,
            released,
        })
    }

    /// The flow metadata.
    #[inline]
    pub fn meta(&self) -> FlowMetaRepr {
        self.meta
    }

    /// Whether this is a wrap marker.
    #[inline]
    pub fn is_wrap(&self) -> bool {
        self.meta.is_wrap()
    }

    /// Bytes of reservation the batch's responses release: the sum of their
    /// piggy-back fields times 32, summed while validating (no overflow: fewer
    /// than 2^26 messages fit a ring, each releasing less than 2^37 bytes).
    #[inline]
    pub fn released(&self) -> u64 {
        self.released
    }

    /// Length of the batch on the ring, in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch is only a metadata block.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == FLOW_METADATA_SIZE
    }

    /// The messages, in order (none for a wrap marker).
    #[inline]
    pub fn messages(&self) -> Messages<'a> {
        let count = if self.is_wrap() {
            0
        } else {
            self.meta.message_count
        };
        Messages {
            bytes: &self.bytes[..self.len],
            off: FLOW_METADATA_SIZE,
            left: count,
        }
    }
}

/// Iterator over the messages of a validated [`Batch`].
#[derive(Debug, Clone)]
pub struct Messages<'a> {
    bytes: &'a [u8],
    off: usize,
    left: u32,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Message<&'a [u8]>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let rest = self.bytes.get(self.off..)?;
        let msg = Message::new_checked(rest).ok()?;
        let padded = padded_message_size(msg.len()) as usize;
        self.off = self.off.saturating_add(padded);
        self.left -= 1;
        Some(msg)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static META_BYTES: [u8; 32] = [
        0x40, 0, 0, 0, 0, 0, 0, 0, // consumer_pos 64
        0x00, 0x01, 0, 0, 0, 0, 0, 0, // credit_grant 256
        0x02, 0, 0, 0, // message_count 2
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    static MSG_BYTES: [u8; 32] = [
        0x07, 0, 0, 0x80, // call_id 7 | response
        0x03, 0, 0, 0, // piggyback 3
        0x04, 0, 0, 0, // len 4
        0xde, 0xad, 0xbe, 0xef, // payload
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn padded_sizes() {
        assert_eq!(padded_message_size(0), 32);
        assert_eq!(padded_message_size(20), 32);
        assert_eq!(padded_message_size(21), 64);
        assert_eq!(padded_message_size(52), 64);
        assert_eq!(padded_message_size(53), 96);
    }

    #[test]
    fn imm_roundtrip() {
        assert_eq!(encode_imm(0), 0);
        assert_eq!(encode_imm(96), 3);
        assert_eq!(decode_imm(3), 96);
        for d in (0..1000u64).map(|x| x * 32) {
            assert_eq!(decode_imm(encode_imm(d)), d);
        }
    }

    #[test]
    fn response_flag() {
        assert!(!is_response(5));
        assert!(is_response(to_response_id(5)));
        assert_eq!(from_response_id(to_response_id(5)), 5);
    }

    #[test]
    fn meta_deconstruct() {
        let m = FlowMeta::new_checked(&META_BYTES[..]).unwrap();
        assert_eq!(m.consumer_pos(), 64);
        assert_eq!(m.credit_grant(), 256);
        assert_eq!(m.message_count(), 2);
    }

    #[test]
    fn meta_construct() {
        let mut buf = [0xffu8; 32];
        let mut m = FlowMeta::new_checked(&mut buf[..]).unwrap();
        let repr = FlowMetaRepr {
            consumer_pos: 64,
            credit_grant: 256,
            message_count: 2,
        };
        repr.emit(&mut m);
        assert_eq!(buf, META_BYTES);
        assert_eq!(repr.buffer_len(), 32);
    }

    #[test]
    fn meta_parse() {
        let m = FlowMeta::new_checked(&META_BYTES[..]).unwrap();
        let repr = FlowMetaRepr::parse(&m).unwrap();
        assert_eq!(
            repr,
            FlowMetaRepr {
                consumer_pos: 64,
                credit_grant: 256,
                message_count: 2
            }
        );
        assert!(!repr.is_wrap());
    }

    #[test]
    fn meta_truncated() {
        assert_eq!(
            FlowMeta::new_checked(&META_BYTES[..31]).unwrap_err(),
            WireError::Truncated {
                needed: 32,
                available: 31
            }
        );
    }

    #[test]
    fn msg_deconstruct_parse() {
        let m = Message::new_checked(&MSG_BYTES[..]).unwrap();
        assert_eq!(m.call_id(), 0x8000_0007);
        assert_eq!(m.piggyback(), 3);
        assert_eq!(m.len(), 4);
        assert_eq!(m.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let r = MessageRepr::parse(&m).unwrap();
        assert_eq!(r.buffer_len(), 32);
        assert!(is_response(r.call_id));
    }

    #[test]
    fn msg_construct_emit() {
        let mut buf = [0u8; 32];
        let mut m = Message::new_unchecked(&mut buf[..]);
        MessageRepr {
            call_id: 0x8000_0007,
            piggyback: 3,
            len: 4,
        }
        .emit(&mut m);
        m.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, MSG_BYTES);
    }

    #[test]
    fn msg_impossible_length() {
        let mut bytes = MSG_BYTES;
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            Message::new_checked(&bytes[..]),
            Err(WireError::Truncated { .. })
        ));
        assert!(Message::new_checked(&MSG_BYTES[..11]).is_err());
    }

    fn batch_bytes() -> Vec<u8> {
        let mut v = META_BYTES.to_vec();
        v.extend_from_slice(&MSG_BYTES);
        v.extend_from_slice(&MSG_BYTES);
        v
    }

    #[test]
    fn batch_parse() {
        let v = batch_bytes();
        let b = Batch::new_checked(&v).unwrap();
        assert_eq!(b.len(), 96);
        assert_eq!(b.messages().count(), 2);
        assert!(b
            .messages()
            .all(|m| m.payload() == [0xde, 0xad, 0xbe, 0xef]));
        // Two responses releasing 3 blocks each.
        assert_eq!(b.released(), 2 * 3 * 32);
        // A request releases nothing.
        let mut req = v.clone();
        req[32 + 3] = 0;
        assert_eq!(Batch::new_checked(&req).unwrap().released(), 3 * 32);
        // Trailing bytes after the batch are not part of it.
        let mut longer = v.clone();
        longer.extend_from_slice(&[0u8; 64]);
        assert_eq!(Batch::new_checked(&longer).unwrap().len(), 96);
    }

    #[test]
    fn batch_wrap_marker() {
        let mut v = META_BYTES.to_vec();
        v[16..20].copy_from_slice(&WRAP_MESSAGE_COUNT.to_le_bytes());
        let b = Batch::new_checked(&v).unwrap();
        assert!(b.is_wrap());
        assert_eq!(b.len(), 32);
        assert_eq!(b.messages().count(), 0);
    }

    #[test]
    fn batch_count_overrun() {
        let mut v = batch_bytes();
        v[16..20].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(
            Batch::new_checked(&v).unwrap_err(),
            WireError::CountOverrun { count: 3 }
        );
        v[16..20].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
        assert!(Batch::new_checked(&v).is_err());
    }

    #[test]
    fn batch_length_past_end() {
        let mut v = batch_bytes();
        // Second message claims 30 payload bytes: padded 64 > 32 left.
        v[64 + 8..64 + 12].copy_from_slice(&30u32.to_le_bytes());
        assert_eq!(
            Batch::new_checked(&v).unwrap_err(),
            WireError::LengthPastBatch { index: 1, len: 30 }
        );
        // Padding past the end, even if the payload fits.
        let mut w = batch_bytes();
        w.truncate(64 + 16);
        assert!(Batch::new_checked(&w).is_err());
    }
}
