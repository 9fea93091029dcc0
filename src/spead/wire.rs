//! SPEAD version 4 packets on the wire.
//!
//! A packet is an 8-byte header, `n_items` 64-bit item pointers and a payload:
//!
//! ```text
//! byte 0    1    2              3                 4..6      6..8
//!      0x53 0x04 item-id bytes  heap-address bytes reserved  n_items
//! then n_items x u64 big-endian item pointers:
//!      bit 63: immediate flag | id (item-id bits - 1) | value or address (heap-address bits)
//! then the payload (payload-length bytes, at payload-offset within the heap)
//! ```
//!
//! The flavour SPEAD-64-XX has 64-bit item pointers with XX heap-address bits
//! (64-40 is spead2's default, 64-48 is MeerKAT's). Every XX that is a multiple of 8
//! between 8 and 56 is supported.
//!
//! Contract (as smoltcp's): once [`Packet::new_checked`] returned `Ok`, no accessor
//! panics, and [`Packet::header`] describes a packet whose payload lies inside the
//! buffer and inside the heap length (when one is given). Every malformed packet is
//! an [`Error`], never a panic: a fuzz target holds the decoder to that.
//!
//! Long on purpose: the codec for every flavour and its byte-fixture tests (a
//! fifth of the file) are one concern, read together.

use core::ops::Range;

/// A byte range inside a packet.
pub type Field = Range<usize>;

/// The first header byte.
pub const MAGIC: u8 = 0x53;
/// The second header byte: SPEAD version 4.
pub const VERSION: u8 = 4;
/// Bytes in the header and in each item pointer.
pub const WORD: usize = 8;

/// Item identifiers the protocol reserves.
pub mod id {
    /// Padding (may be addressed, delimiting the previous addressed item).
    pub const NULL: u64 = 0x0;
    /// Heap counter: which heap the packet belongs to (immediate).
    pub const HEAP_CNT: u64 = 0x1;
    /// Heap length in bytes (immediate, optional).
    pub const HEAP_LENGTH: u64 = 0x2;
    /// Where this packet's payload starts within the heap (immediate).
    pub const PAYLOAD_OFFSET: u64 = 0x3;
    /// This packet's payload length (immediate).
    pub const PAYLOAD_LENGTH: u64 = 0x4;
    /// An item descriptor: its value is a whole SPEAD packet.
    pub const DESCRIPTOR: u64 = 0x5;
    /// Stream control (immediate: [`super::ctrl`]).
    pub const STREAM_CTRL: u64 = 0x6;
    /// Descriptor field: the item's name.
    pub const DESCRIPTOR_NAME: u64 = 0x10;
    /// Descriptor field: the item's description.
    pub const DESCRIPTOR_DESCRIPTION: u64 = 0x11;
    /// Descriptor field: the item's shape.
    pub const DESCRIPTOR_SHAPE: u64 = 0x12;
    /// Descriptor field: the item's format (type code and bit width pairs).
    pub const DESCRIPTOR_FORMAT: u64 = 0x13;
    /// Descriptor field: the described item's id (immediate).
    pub const DESCRIPTOR_ID: u64 = 0x14;
    /// Descriptor field: a numpy header giving dtype and shape.
    pub const DESCRIPTOR_DTYPE: u64 = 0x15;
}

/// Values of the stream control item.
pub mod ctrl {
    /// The stream starts.
    pub const START: u64 = 0;
    /// Descriptors are sent again.
    pub const DESCRIPTOR_REISSUE: u64 = 1;
    /// The stream ends.
    pub const STOP: u64 = 2;
    /// Descriptors changed.
    pub const DESCRIPTOR_UPDATE: u64 = 3;
}

mod field {
    use super::Field;
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 1;
    pub const ITEM_ID_WIDTH: usize = 2;
    pub const HEAP_ADDRESS_WIDTH: usize = 3;
    pub const N_ITEMS: Field = 6..8;
    pub const HEADER: Field = 0..8;
}

/// The byte range of item pointer `i`.
#[allow(non_snake_case)]
pub const fn ITEM(i: usize) -> Field {
    WORD + WORD * i..WORD + WORD * (i + 1)
}

/// The byte range of a payload of `len` bytes after `n_items` item pointers.
#[allow(non_snake_case)]
pub const fn PAYLOAD(n_items: usize, len: usize) -> Field {
    WORD + WORD * n_items..WORD + WORD * n_items + len
}

/// Why a packet was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer ends before the structure it must hold.
    #[error("packet truncated: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the packet declares.
        need: usize,
        /// Bytes in the buffer.
        have: usize,
    },
    /// The first byte is not 0x53.
    #[error("bad magic {0:#04x} (SPEAD is 0x53)")]
    BadMagic(u8),
    /// The version is not 4.
    #[error("unsupported SPEAD version {0} (only 4)")]
    BadVersion(u8),
    /// The item-id and heap-address widths do not make a SPEAD-64-XX flavour.
    #[error("flavour {item_id_bytes}+{heap_address_bytes} bytes is not SPEAD-64-XX")]
    BadFlavour {
        /// Item id bytes (header byte 2).
        item_id_bytes: u8,
        /// Heap address bytes (header byte 3).
        heap_address_bytes: u8,
    },
    /// No immediate heap counter item.
    #[error("packet has no heap counter")]
    MissingHeapCnt,
    /// No immediate payload offset item.
    #[error("packet has no payload offset")]
    MissingPayloadOffset,
    /// No immediate payload length item.
    #[error("packet has no payload length")]
    MissingPayloadLength,
    /// The payload would end beyond the declared heap length.
    #[error("payload {offset}+{len} overflows the heap length {heap_length}")]
    PayloadOverflowsHeap {
        /// Payload offset.
        offset: u64,
        /// Payload length.
        len: u64,
        /// Heap length.
        heap_length: u64,
    },
    /// A value does not fit the flavour's field.
    #[error("value {value:#x} does not fit in {bits} bits")]
    ValueTooLarge {
        /// The value.
        value: u64,
        /// The field's width.
        bits: u32,
    },
    /// The caller's buffer is too small to emit into.
    #[error("buffer of {have} bytes too small, {need} needed")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Too many item pointers for the 16-bit count or the packet size.
    #[error("{0} item pointers do not fit")]
    TooManyItems(usize),
    /// A descriptor is malformed.
    #[error("malformed descriptor: {0}")]
    BadDescriptor(&'static str),
}

/// A SPEAD-64-XX flavour: 64-bit item pointers with `heap_address_bits` address bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flavour {
    heap_address_bits: u8,
}

impl Flavour {
    /// SPEAD-64-40, spead2's default.
    pub const SPEAD_64_40: Flavour = Flavour {
        heap_address_bits: 40,
    };
    /// SPEAD-64-48, MeerKAT's.
    pub const SPEAD_64_48: Flavour = Flavour {
        heap_address_bits: 48,
    };

    /// SPEAD-64-`heap_address_bits`; the width must be a multiple of 8 in 8..=56.
    pub const fn new(heap_address_bits: u32) -> Result<Flavour, Error> {
        if heap_address_bits % 8 != 0 || heap_address_bits < 8 || heap_address_bits > 56 {
            return Err(Error::BadFlavour {
                item_id_bytes: ((64u32.saturating_sub(heap_address_bits)) / 8) as u8,
                heap_address_bytes: (heap_address_bits / 8) as u8,
            });
        }
        Ok(Flavour {
            heap_address_bits: heap_address_bits as u8,
        })
    }

    /// Heap address (and immediate value) bits.
    pub const fn heap_address_bits(self) -> u32 {
        self.heap_address_bits as u32
    }

    /// Bits for the immediate flag and the item id together.
    pub const fn item_id_bits(self) -> u32 {
        64 - self.heap_address_bits as u32
    }

    /// Bytes of an immediate value when given as bytes (spead2 gives them this wide).
    pub const fn immediate_bytes(self) -> usize {
        self.heap_address_bits as usize / 8
    }

    /// The largest heap address or immediate value.
    pub const fn max_value(self) -> u64 {
        (1u64 << self.heap_address_bits) - 1
    }

    /// The largest item id.
    pub const fn max_id(self) -> u64 {
        (1u64 << (self.item_id_bits() - 1)) - 1
    }

    /// An immediate item pointer.
    pub const fn immediate(self, id: u64, value: u64) -> Result<ItemPointer, Error> {
        self.pointer(true, id, value)
    }

    /// An addressed item pointer (`address` is a byte offset into the heap payload).
    pub const fn addressed(self, id: u64, address: u64) -> Result<ItemPointer, Error> {
        self.pointer(false, id, address)
    }

    const fn pointer(self, immediate: bool, id: u64, value: u64) -> Result<ItemPointer, Error> {
        if id > self.max_id() {
            return Err(Error::ValueTooLarge {
                value: id,
                bits: self.item_id_bits() - 1,
            });
        }
        if value > self.max_value() {
            return Err(Error::ValueTooLarge {
                value,
                bits: self.heap_address_bits(),
            });
        }
        let flag = if immediate { 1u64 << 63 } else { 0 };
        Ok(ItemPointer(flag | (id << self.heap_address_bits) | value))
    }

    /// The 8-byte packet header for `n_items` pointers.
    pub const fn header(self, n_items: u16) -> [u8; 8] {
        let n = n_items.to_be_bytes();
        [
            MAGIC,
            VERSION,
            (self.item_id_bits() / 8) as u8,
            self.heap_address_bits / 8,
            0,
            0,
            n[0],
            n[1],
        ]
    }
}

impl Default for Flavour {
    fn default() -> Self {
        Flavour::SPEAD_64_40
    }
}

/// One raw 64-bit item pointer (interpret it with a [`Flavour`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ItemPointer(pub u64);

impl ItemPointer {
    /// Whether the value is immediate (else it is an address into the heap payload).
    #[inline]
    pub const fn is_immediate(self) -> bool {
        self.0 >> 63 != 0
    }

    /// The item id.
    #[inline]
    pub const fn id(self, f: Flavour) -> u64 {
        (self.0 << 1) >> (f.heap_address_bits as u32 + 1)
    }

    /// The immediate value or the address.
    #[inline]
    pub const fn value(self, f: Flavour) -> u64 {
        self.0 & f.max_value()
    }
}

/// The standard fields of a packet, as spead2's `decode_packet` finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The packet's flavour.
    pub flavour: Flavour,
    /// Number of item pointers (standard ones included).
    pub n_items: usize,
    /// Heap counter.
    pub heap_cnt: u64,
    /// Heap length, when the packet gives it.
    pub heap_length: Option<u64>,
    /// Offset of this payload within the heap.
    pub payload_offset: u64,
    /// Payload bytes.
    pub payload_length: u64,
}

impl Header {
    /// Bytes before the payload.
    #[inline]
    pub const fn payload_start(&self) -> usize {
        WORD + WORD * self.n_items
    }

    /// Bytes of the whole packet (trailing bytes beyond it are ignored, as spead2 does).
    #[inline]
    pub const fn packet_len(&self) -> usize {
        self.payload_start() + self.payload_length as usize
    }
}

/// A zero-copy view of a SPEAD packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be64(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

/// Decodes the header and standard items of `data`, checking everything a receiver
/// relies on (spead2's `decode_packet`, with a reason for every refusal).
#[inline]
pub fn decode(data: &[u8]) -> Result<Header, Error> {
    decode_visit(data, |_, _| {})
}

/// [`decode`], calling `visit(pointer, id)` for every immediate item pointer on
/// the way (one pass over the item table; receivers pick their items this way).
#[inline]
pub fn decode_visit(data: &[u8], mut visit: impl FnMut(u64, u64)) -> Result<Header, Error> {
    if data.len() < WORD {
        return Err(Error::Truncated {
            need: WORD,
            have: data.len(),
        });
    }
    if data[field::MAGIC] != MAGIC {
        return Err(Error::BadMagic(data[field::MAGIC]));
    }
    if data[field::VERSION] != VERSION {
        return Err(Error::BadVersion(data[field::VERSION]));
    }
    let idb = data[field::ITEM_ID_WIDTH];
    let hab = data[field::HEAP_ADDRESS_WIDTH];
    if idb == 0 || hab == 0 || u32::from(idb) + u32::from(hab) != 8 {
        return Err(Error::BadFlavour {
            item_id_bytes: idb,
            heap_address_bytes: hab,
        });
    }
    let flavour = Flavour {
        heap_address_bits: hab * 8,
    };
    let n_items = usize::from(u16::from_be_bytes([data[6], data[7]]));
    let start = WORD + WORD * n_items;
    if start > data.len() {
        return Err(Error::Truncated {
            need: start,
            have: data.len(),
        });
    }
    // Standard items by id (1..=4); values have at most 56 bits, so MAX means absent.
    const ABSENT: u64 = u64::MAX;
    let mut std_items = [ABSENT; 5];
    let shift = flavour.heap_address_bits + 1;
    let mask = flavour.max_value();
    for chunk in data[WORD..start].chunks_exact(WORD) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let p = u64::from_be_bytes(w);
        if p >> 63 == 0 {
            continue;
        }
        let v = p & mask;
        let item = (p << 1) >> shift;
        if (id::HEAP_CNT..=id::PAYLOAD_LENGTH).contains(&item) {
            std_items[item as usize] = v;
        } else {
            visit(item, v);
        }
    }
    let present = |v: u64| (v != ABSENT).then_some(v);
    let heap_cnt = present(std_items[1]).ok_or(Error::MissingHeapCnt)?;
    let heap_length = present(std_items[2]);
    let payload_offset = present(std_items[3]).ok_or(Error::MissingPayloadOffset)?;
    let payload_length = present(std_items[4]).ok_or(Error::MissingPayloadLength)?;
    let room = (data.len() - start) as u64;
    if payload_length > room {
        return Err(Error::Truncated {
            need: start.saturating_add(usize::try_from(payload_length).unwrap_or(usize::MAX)),
            have: data.len(),
        });
    }
    if let Some(hl) = heap_length {
        // Both fit in heap_address_bits <= 56, so the sum cannot overflow.
        if payload_offset + payload_length > hl {
            return Err(Error::PayloadOverflowsHeap {
                offset: payload_offset,
                len: payload_length,
                heap_length: hl,
            });
        }
    }
    Ok(Header {
        flavour,
        n_items,
        heap_cnt,
        heap_length,
        payload_offset,
        payload_length,
    })
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it; accessors may panic until [`Packet::check`] passed.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer holding a valid SPEAD packet.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks the header, the item table, the standard items and the payload bounds.
    pub fn check(&self) -> Result<(), Error> {
        decode(self.buffer.as_ref()).map(|_| ())
    }

    /// The standard fields (the packet is decoded again).
    pub fn header(&self) -> Result<Header, Error> {
        decode(self.buffer.as_ref())
    }

    /// The flavour from header bytes 2-3.
    pub fn flavour(&self) -> Flavour {
        Flavour {
            heap_address_bits: self.buffer.as_ref()[field::HEAP_ADDRESS_WIDTH].saturating_mul(8),
        }
    }

    /// The number of item pointers.
    pub fn n_items(&self) -> usize {
        let b = &self.buffer.as_ref()[field::N_ITEMS];
        usize::from(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Item pointer `i` (`i < n_items`).
    pub fn item(&self, i: usize) -> ItemPointer {
        ItemPointer(be64(self.buffer.as_ref(), ITEM(i).start))
    }

    /// All item pointers in packet order.
    pub fn items(&self) -> impl Iterator<Item = ItemPointer> + '_ {
        (0..self.n_items()).map(move |i| self.item(i))
    }

    /// The payload (payload-length bytes after the item pointers).
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let n = self.n_items();
        // The last payload-length item counts, as in `decode`, which checked
        // that one against the buffer (an earlier duplicate may claim more:
        // found by the spead_packet fuzz target).
        let len = self
            .items()
            .filter(|p| p.is_immediate() && p.id(self.flavour()) == id::PAYLOAD_LENGTH)
            .last()
            .map_or(0, |p| p.value(self.flavour()) as usize);
        &b[PAYLOAD(n, len)]
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the 8-byte header.
    pub fn set_header(&mut self, flavour: Flavour, n_items: u16) {
        self.buffer.as_mut()[field::HEADER].copy_from_slice(&flavour.header(n_items));
    }

    /// Writes item pointer `i`.
    pub fn set_item(&mut self, i: usize, p: ItemPointer) {
        self.buffer.as_mut()[ITEM(i)].copy_from_slice(&p.0.to_be_bytes());
    }

    /// The payload area for `len` bytes, mutable.
    pub fn payload_mut(&mut self, len: usize) -> &mut [u8] {
        let n = self.n_items();
        &mut self.buffer.as_mut()[PAYLOAD(n, len)]
    }
}

/// Writes one packet: header, the four standard items (heap length only when
/// given), `items`, then `payload`. Returns the packet length.
pub fn emit_packet(
    buf: &mut [u8],
    flavour: Flavour,
    heap_cnt: u64,
    heap_length: Option<u64>,
    payload_offset: u64,
    items: &[ItemPointer],
    payload: &[u8],
) -> Result<usize, Error> {
    let n_std = if heap_length.is_some() { 4 } else { 3 };
    let n_items = n_std + items.len();
    let n16 = u16::try_from(n_items).map_err(|_| Error::TooManyItems(n_items))?;
    let need = WORD + WORD * n_items + payload.len();
    if buf.len() < need {
        return Err(Error::BufferTooSmall {
            need,
            have: buf.len(),
        });
    }
    let mut p = Packet::new_unchecked(&mut buf[..need]);
    p.set_header(flavour, n16);
    p.set_item(0, flavour.immediate(id::HEAP_CNT, heap_cnt)?);
    let mut i = 1;
    if let Some(hl) = heap_length {
        p.set_item(i, flavour.immediate(id::HEAP_LENGTH, hl)?);
        i += 1;
    }
    p.set_item(i, flavour.immediate(id::PAYLOAD_OFFSET, payload_offset)?);
    p.set_item(
        i + 1,
        flavour.immediate(id::PAYLOAD_LENGTH, payload.len() as u64)?,
    );
    for (k, it) in items.iter().enumerate() {
        p.set_item(n_std + k, *it);
    }
    p.payload_mut(payload.len()).copy_from_slice(payload);
    Ok(need)
}

/// An owned packet representation: standard fields and the other item pointers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    /// Flavour.
    pub flavour: Flavour,
    /// Heap counter.
    pub heap_cnt: u64,
    /// Heap length, when given.
    pub heap_length: Option<u64>,
    /// Payload offset within the heap.
    pub payload_offset: u64,
    /// Payload length.
    pub payload_length: u64,
    /// Item pointers other than the four standard immediate ones, in packet order.
    pub items: Vec<ItemPointer>,
}

impl Repr {
    /// Parses a checked packet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, Error> {
        let h = packet.header()?;
        let f = h.flavour;
        let items = packet
            .items()
            .filter(|p| {
                !(p.is_immediate() && (id::HEAP_CNT..=id::PAYLOAD_LENGTH).contains(&p.id(f)))
            })
            .collect();
        Ok(Repr {
            flavour: f,
            heap_cnt: h.heap_cnt,
            heap_length: h.heap_length,
            payload_offset: h.payload_offset,
            payload_length: h.payload_length,
            items,
        })
    }

    /// Bytes the emitted packet takes.
    pub fn buffer_len(&self) -> usize {
        let n_std = if self.heap_length.is_some() { 4 } else { 3 };
        WORD + WORD * (n_std + self.items.len()) + self.payload_length as usize
    }

    /// Emits the packet with `payload` (whose length must be `payload_length`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        payload: &[u8],
    ) -> Result<usize, Error> {
        if payload.len() as u64 != self.payload_length {
            return Err(Error::BufferTooSmall {
                need: self.payload_length as usize,
                have: payload.len(),
            });
        }
        emit_packet(
            packet.buffer.as_mut(),
            self.flavour,
            self.heap_cnt,
            self.heap_length,
            self.payload_offset,
            &self.items,
            payload,
        )
    }
}

/// An item descriptor (the value of item 0x5): what spead2's `Descriptor` holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Descriptor {
    /// The described item's id.
    pub id: u64,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Shape; `None` is a variable-size dimension.
    pub shape: Vec<Option<u64>>,
    /// Format: (type code, bits) pairs, e.g. `('u', 8)`.
    pub format: Vec<(u8, u64)>,
    /// A numpy header (`{'descr': ..., 'fortran_order': ..., 'shape': ...}`), or empty.
    pub dtype: String,
}

impl Descriptor {
    /// The descriptor as a single SPEAD packet (heap counter `heap_cnt`), the value
    /// an item 0x5 carries.
    pub fn to_packet(&self, flavour: Flavour, heap_cnt: u64) -> Result<Vec<u8>, Error> {
        let ib = flavour.immediate_bytes();
        let idb = 8 - ib;
        let mut shape = Vec::with_capacity(self.shape.len() * (1 + ib));
        for d in &self.shape {
            let (flag, v) = match d {
                Some(v) => (0u8, *v),
                None => (1u8, 0),
            };
            if v > flavour.max_value() {
                return Err(Error::ValueTooLarge {
                    value: v,
                    bits: flavour.heap_address_bits(),
                });
            }
            shape.push(flag);
            shape.extend_from_slice(&v.to_be_bytes()[8 - ib..]);
        }
        let mut format = Vec::with_capacity(self.format.len() * (1 + idb));
        for &(code, bits) in &self.format {
            if idb < 8 && bits >> (8 * idb) != 0 {
                return Err(Error::ValueTooLarge {
                    value: bits,
                    bits: 8 * idb as u32,
                });
            }
            format.push(code);
            format.extend_from_slice(&bits.to_be_bytes()[8 - idb..]);
        }
        let mut fields: Vec<(u64, &[u8])> = vec![
            (id::DESCRIPTOR_NAME, self.name.as_bytes()),
            (id::DESCRIPTOR_DESCRIPTION, self.description.as_bytes()),
        ];
        if self.dtype.is_empty() {
            fields.push((id::DESCRIPTOR_SHAPE, &shape));
            fields.push((id::DESCRIPTOR_FORMAT, &format));
        } else {
            fields.push((id::DESCRIPTOR_SHAPE, &shape));
            fields.push((id::DESCRIPTOR_DTYPE, self.dtype.as_bytes()));
        }
        let mut items = vec![flavour.immediate(id::DESCRIPTOR_ID, self.id)?];
        let mut payload = Vec::new();
        for (fid, bytes) in fields {
            items.push(flavour.addressed(fid, payload.len() as u64)?);
            payload.extend_from_slice(bytes);
        }
        let mut buf = vec![0u8; WORD * (5 + items.len()) + payload.len()];
        let n = emit_packet(
            &mut buf,
            flavour,
            heap_cnt,
            Some(payload.len() as u64),
            0,
            &items,
            &payload,
        )?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Parses a descriptor packet (one complete single-packet heap).
    pub fn parse(data: &[u8]) -> Result<Descriptor, Error> {
        let p = Packet::new_checked(data)?;
        let h = p.header()?;
        if h.payload_offset != 0 || h.heap_length.is_some_and(|l| l != h.payload_length) {
            return Err(Error::BadDescriptor("not a single-packet heap"));
        }
        let f = h.flavour;
        let payload = p.payload();
        let pointers: Vec<ItemPointer> = p.items().collect();
        let items = heap_items(f, &pointers, payload);
        let ib = f.immediate_bytes();
        let idb = 8 - ib;
        let mut d = Descriptor::default();
        let mut have_id = false;
        for it in items {
            match (it.id, it.value) {
                (id::DESCRIPTOR_ID, ItemValue::Immediate(v)) => {
                    d.id = v;
                    have_id = true;
                }
                (id::DESCRIPTOR_NAME, ItemValue::Bytes(b)) => {
                    d.name = String::from_utf8_lossy(b).into_owned();
                }
                (id::DESCRIPTOR_DESCRIPTION, ItemValue::Bytes(b)) => {
                    d.description = String::from_utf8_lossy(b).into_owned();
                }
                (id::DESCRIPTOR_SHAPE, ItemValue::Bytes(b)) => {
                    d.shape = b
                        .chunks_exact(1 + ib)
                        .map(|c| {
                            if c[0] & 1 != 0 {
                                None
                            } else {
                                Some(be_bytes(&c[1..]))
                            }
                        })
                        .collect();
                }
                (id::DESCRIPTOR_FORMAT, ItemValue::Bytes(b)) => {
                    d.format = b
                        .chunks_exact(1 + idb)
                        .map(|c| (c[0], be_bytes(&c[1..])))
                        .collect();
                }
                (id::DESCRIPTOR_DTYPE, ItemValue::Bytes(b)) => {
                    d.dtype = String::from_utf8_lossy(b).into_owned();
                }
                _ => {}
            }
        }
        if !have_id {
            return Err(Error::BadDescriptor("no descriptor id item"));
        }
        Ok(d)
    }
}

fn be_bytes(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

/// An item's value in a heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemValue<'a> {
    /// An immediate value.
    Immediate(u64),
    /// An addressed value: bytes of the heap payload.
    Bytes(&'a [u8]),
}

/// One item of a heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// Item id.
    pub id: u64,
    /// Its value.
    pub value: ItemValue<'a>,
}

impl Item<'_> {
    /// The value as bytes the way spead2 gives them: immediates big-endian in
    /// `heap_address_bits / 8` bytes.
    pub fn to_bytes(&self, flavour: Flavour) -> Vec<u8> {
        match self.value {
            ItemValue::Immediate(v) => v.to_be_bytes()[8 - flavour.immediate_bytes()..].to_vec(),
            ItemValue::Bytes(b) => b.to_vec(),
        }
    }
}

/// The items of a heap from its (non-standard) item pointers and payload, with
/// spead2's rules: pointers stably sorted by (immediate flag, address); id 0 is
/// padding; an addressed item runs to the next addressed pointer or the end of the
/// payload; empty addressed items are skipped; an item whose range falls outside
/// the payload is skipped.
pub fn heap_items<'a>(f: Flavour, pointers: &[ItemPointer], payload: &'a [u8]) -> Vec<Item<'a>> {
    let mut sorted: Vec<ItemPointer> = pointers
        .iter()
        .copied()
        .filter(|p| !(p.is_immediate() && (id::HEAP_CNT..=id::PAYLOAD_LENGTH).contains(&p.id(f))))
        .collect();
    let mask = (1u64 << 63) | f.max_value();
    sorted.sort_by_key(|p| p.0 & mask);
    let mut out = Vec::with_capacity(sorted.len());
    let len = payload.len() as u64;
    for (i, p) in sorted.iter().enumerate() {
        let item_id = p.id(f);
        if item_id == id::NULL {
            continue;
        }
        if p.is_immediate() {
            out.push(Item {
                id: item_id,
                value: ItemValue::Immediate(p.value(f)),
            });
            continue;
        }
        let start = p.value(f);
        let end = match sorted.get(i + 1) {
            Some(n) if !n.is_immediate() => n.value(f),
            _ => len,
        };
        if start >= end || end > len {
            continue;
        }
        out.push(Item {
            id: item_id,
            value: ItemValue::Bytes(&payload[start as usize..end as usize]),
        });
    }
    out
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    // SPEAD-64-40, heap 7, heap length 4, offset 0, length 4, item 0x1000 immediate 0x1234,
    // payload de ad be ef.
    static PACKET: [u8; 52] = [
        0x53, 0x04, 0x03, 0x05, 0x00, 0x00, 0x00, 0x05, // header, 5 items
        0x80, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x07, // heap cnt 7
        0x80, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x04, // heap length 4
        0x80, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, // payload offset 0
        0x80, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x04, // payload length 4
        0x80, 0x10, 0x00, 0x00, 0x00, 0x00, 0x12, 0x34, // item 0x1000 = 0x1234
        0xde, 0xad, 0xbe, 0xef,
    ];

    fn repr() -> Repr {
        Repr {
            flavour: Flavour::SPEAD_64_40,
            heap_cnt: 7,
            heap_length: Some(4),
            payload_offset: 0,
            payload_length: 4,
            items: vec![ItemPointer(0x8010_0000_0000_1234)],
        }
    }

    #[test]
    fn duplicate_payload_length_the_last_counts() {
        // The fuzzer's case: a first payload-length item claiming 0x800 bytes,
        // a second one the 4 that are there. `check` takes the last; so must
        // `payload`, without panicking.
        let mut p = PACKET.to_vec();
        p[7] = 6;
        let dup = [0x80, 0x00, 0x04, 0x00, 0x00, 0x00, 0x08, 0x00];
        p.splice(8..8, dup);
        let pkt = Packet::new_checked(&p[..]).unwrap();
        assert_eq!(pkt.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.flavour(), Flavour::SPEAD_64_40);
        assert_eq!(p.n_items(), 5);
        let it = p.item(4);
        assert!(it.is_immediate());
        assert_eq!(it.id(Flavour::SPEAD_64_40), 0x1000);
        assert_eq!(it.value(Flavour::SPEAD_64_40), 0x1234);
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        let h = p.header().unwrap();
        assert_eq!(h.heap_cnt, 7);
        assert_eq!(h.heap_length, Some(4));
        assert_eq!(h.packet_len(), 52);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 52];
        let n = emit_packet(
            &mut buf,
            Flavour::SPEAD_64_40,
            7,
            Some(4),
            0,
            &[Flavour::SPEAD_64_40.immediate(0x1000, 0x1234).unwrap()],
            &[0xde, 0xad, 0xbe, 0xef],
        )
        .unwrap();
        assert_eq!(n, 52);
        assert_eq!(buf, PACKET);
    }

    #[test]
    fn parse() {
        let p = Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
    }

    #[test]
    fn emit() {
        let r = repr();
        let mut buf = vec![0u8; r.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        r.emit(&mut p, &[0xde, 0xad, 0xbe, 0xef]).unwrap();
        assert_eq!(&buf[..], &PACKET[..]);
    }

    #[test]
    fn flavour_64_48_fixture() {
        // SPEAD-64-48: item id 2 bytes, address 6 bytes; addressed item 0x4300 at 0.
        let f = Flavour::SPEAD_64_48;
        assert_eq!(f.header(3), [0x53, 0x04, 0x02, 0x06, 0, 0, 0, 3]);
        let p = f.addressed(0x4300, 0).unwrap();
        assert_eq!(p.0.to_be_bytes(), [0x43, 0x00, 0, 0, 0, 0, 0, 0]);
        let p = f.immediate(0x1600, 0xABCD_EF01_2345).unwrap();
        assert_eq!(
            p.0.to_be_bytes(),
            [0x96, 0x00, 0xAB, 0xCD, 0xEF, 0x01, 0x23, 0x45]
        );
        assert_eq!(p.id(f), 0x1600);
        assert_eq!(p.value(f), 0xABCD_EF01_2345);
        assert!(f.immediate(0x8000, 0).is_err());
        assert!(f.immediate(1, 1 << 48).is_err());
    }

    #[test]
    fn impossible_lengths() {
        assert_eq!(
            decode(&PACKET[..7]),
            Err(Error::Truncated { need: 8, have: 7 })
        );
        // item table cut
        assert!(matches!(
            decode(&PACKET[..40]),
            Err(Error::Truncated { .. })
        ));
        // payload cut
        assert!(matches!(
            decode(&PACKET[..51]),
            Err(Error::Truncated { .. })
        ));
        let mut bad = PACKET;
        bad[0] = 0x54;
        assert_eq!(decode(&bad), Err(Error::BadMagic(0x54)));
        let mut bad = PACKET;
        bad[1] = 3;
        assert_eq!(decode(&bad), Err(Error::BadVersion(3)));
        let mut bad = PACKET;
        bad[2] = 4;
        assert!(matches!(decode(&bad), Err(Error::BadFlavour { .. })));
        let mut bad = PACKET;
        bad[2] = 0;
        bad[3] = 8;
        assert!(matches!(decode(&bad), Err(Error::BadFlavour { .. })));
        // heap length 3 < payload 4
        let mut bad = PACKET;
        bad[23] = 3;
        assert!(matches!(
            decode(&bad),
            Err(Error::PayloadOverflowsHeap { .. })
        ));
        // heap counter made non-immediate
        let mut bad = PACKET;
        bad[8] = 0x00;
        assert_eq!(decode(&bad), Err(Error::MissingHeapCnt));
        let mut bad = PACKET;
        bad[24] = 0x00;
        assert_eq!(decode(&bad), Err(Error::MissingPayloadOffset));
        let mut bad = PACKET;
        bad[32] = 0x00;
        assert_eq!(decode(&bad), Err(Error::MissingPayloadLength));
        // trailing bytes are ignored, as spead2 does
        let mut long = PACKET.to_vec();
        long.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode(&long).unwrap().packet_len(), 52);
    }

    #[test]
    fn items_follow_spead2_rules() {
        let f = Flavour::SPEAD_64_40;
        let payload = [1u8, 2, 3, 4, 5, 6];
        let ptrs = [
            f.addressed(0x1001, 4).unwrap(),
            f.immediate(0x1002, 9).unwrap(),
            f.addressed(0x1000, 0).unwrap(),
            f.addressed(0x1003, 4).unwrap(), // empty: next is at 4 too
            f.addressed(0, 5).unwrap(),      // padding delimits 0x1003
        ];
        let items = heap_items(f, &ptrs, &payload);
        assert_eq!(
            items,
            vec![
                Item {
                    id: 0x1000,
                    value: ItemValue::Bytes(&payload[0..4])
                },
                Item {
                    id: 0x1003,
                    value: ItemValue::Bytes(&payload[4..5])
                },
                Item {
                    id: 0x1002,
                    value: ItemValue::Immediate(9)
                },
            ]
        );
    }

    #[test]
    fn descriptor_round_trip() {
        for f in [Flavour::SPEAD_64_40, Flavour::SPEAD_64_48] {
            let d = Descriptor {
                id: 0x1600,
                name: "timestamp".into(),
                description: "ADC sample count".into(),
                shape: vec![Some(3), None],
                format: vec![(b'u', 48)],
                dtype: String::new(),
            };
            let pkt = d.to_packet(f, 1).unwrap();
            assert_eq!(Descriptor::parse(&pkt).unwrap(), d);
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&data);
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = Repr::parse(&p);
                let _ = p.payload();
            }
        }

        #[test]
        fn repr_round_trip(
            bits in prop::sample::select(vec![8u32, 16, 24, 32, 40, 48, 56]),
            cnt in any::<u64>(),
            off in any::<u64>(),
            with_len in any::<bool>(),
            extra in proptest::collection::vec((any::<bool>(), 5u64..1_000_000, any::<u64>()), 0..8),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let f = Flavour::new(bits).unwrap();
            let cnt = cnt & f.max_value();
            let off = (off & f.max_value()).min(f.max_value() - 64);
            let heap_length = with_len.then_some(off + payload.len() as u64);
            let items: Vec<ItemPointer> = extra
                .iter()
                .filter_map(|&(imm, id, v)| {
                    let id = id & f.max_id();
                    if id <= 4 { return None; }
                    if imm { f.immediate(id, v & f.max_value()).ok() } else { f.addressed(id, v & f.max_value()).ok() }
                })
                .collect();
            let r = Repr {
                flavour: f,
                heap_cnt: cnt,
                heap_length,
                payload_offset: off,
                payload_length: payload.len() as u64,
                items,
            };
            let mut buf = vec![0u8; r.buffer_len()];
            let n = r.emit(&mut Packet::new_unchecked(&mut buf[..]), &payload).unwrap();
            prop_assert_eq!(n, buf.len());
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p).unwrap(), r);
            prop_assert_eq!(p.payload(), &payload[..]);
        }
    }
}
