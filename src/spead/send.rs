//! Sending heaps: items and payload cut into packets, end-of-stream heaps, pacing.
//!
//! Sans-IO: a [`Packetizer`] writes each packet into a buffer the caller owns and
//! a [`Pacer`] says when the next packet is due given `now`; the caller owns the
//! socket and the clock.
//!
//! Every packet carries the heap counter, heap length, payload offset and payload
//! length; the heap's other item pointers go in the first packet (as spead2 does
//! when they fit), so the first packet's payload is shorter.

use super::wire::{self, ctrl, emit_packet, id, Descriptor, Error, Flavour, ItemPointer, WORD};
use crate::time::Instant;

/// An item to send: immediate or addressed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendValue {
    /// An immediate value (fits the flavour's heap-address bits).
    Immediate(u64),
    /// Bytes placed in the heap payload.
    Bytes(Vec<u8>),
}

/// A heap to send, owning its item values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendHeap {
    /// Heap counter.
    pub cnt: u64,
    /// Items, in order.
    pub items: Vec<(u64, SendValue)>,
}

impl SendHeap {
    /// A heap with no items.
    pub fn new(cnt: u64) -> SendHeap {
        SendHeap {
            cnt,
            items: Vec::new(),
        }
    }

    /// Adds an immediate item.
    pub fn immediate(mut self, item_id: u64, value: u64) -> SendHeap {
        self.items.push((item_id, SendValue::Immediate(value)));
        self
    }

    /// Adds an addressed item.
    pub fn bytes(mut self, item_id: u64, value: impl Into<Vec<u8>>) -> SendHeap {
        self.items.push((item_id, SendValue::Bytes(value.into())));
        self
    }

    /// Adds a descriptor item (0x5) carrying `d` as a packet.
    pub fn descriptor(self, flavour: Flavour, d: &wire::Descriptor) -> Result<SendHeap, Error> {
        let pkt = d.to_packet(flavour, 1)?;
        Ok(self.bytes(id::DESCRIPTOR, pkt))
    }

    /// The end-of-stream heap: a stream control item with value STOP.
    pub fn end_of_stream(cnt: u64) -> SendHeap {
        SendHeap::new(cnt).immediate(id::STREAM_CTRL, ctrl::STOP)
    }

    /// The item pointers and payload for `flavour`.
    pub fn layout(&self, flavour: Flavour) -> Result<(Vec<ItemPointer>, Vec<u8>), Error> {
        let mut ptrs = Vec::with_capacity(self.items.len());
        let mut payload = Vec::new();
        for (item_id, v) in &self.items {
            match v {
                SendValue::Immediate(x) => ptrs.push(flavour.immediate(*item_id, *x)?),
                SendValue::Bytes(b) => {
                    ptrs.push(flavour.addressed(*item_id, payload.len() as u64)?);
                    payload.extend_from_slice(b);
                }
            }
        }
        Ok((ptrs, payload))
    }
}

/// Cuts one heap (its item pointers and payload) into packets of at most
/// `max_packet` bytes.
#[derive(Debug, Clone)]
pub struct Packetizer<'a> {
    flavour: Flavour,
    cnt: u64,
    pointers: &'a [ItemPointer],
    payload: &'a [u8],
    max_packet: usize,
    offset: usize,
    first: bool,
}

impl<'a> Packetizer<'a> {
    /// Prepares the packets of heap `cnt`. Fails if `max_packet` cannot hold the
    /// header, the four standard items and all of `pointers` in the first packet
    /// (a first packet with no room for payload sends the payload from the second).
    pub fn new(
        flavour: Flavour,
        cnt: u64,
        pointers: &'a [ItemPointer],
        payload: &'a [u8],
        max_packet: usize,
    ) -> Result<Packetizer<'a>, Error> {
        let first_header = WORD * (5 + pointers.len());
        if first_header > max_packet || max_packet < WORD * 5 + 1 {
            return Err(Error::TooManyItems(pointers.len()));
        }
        if payload.len() as u64 > flavour.max_value() || cnt > flavour.max_value() {
            return Err(Error::ValueTooLarge {
                value: cnt.max(payload.len() as u64),
                bits: flavour.heap_address_bits(),
            });
        }
        Ok(Packetizer {
            flavour,
            cnt,
            pointers,
            payload,
            max_packet,
            offset: 0,
            first: true,
        })
    }

    /// Number of packets the heap takes.
    pub fn n_packets(&self) -> usize {
        let first_room = self.max_packet - WORD * (5 + self.pointers.len());
        let rest_room = self.max_packet - WORD * 5;
        if self.payload.len() <= first_room {
            1
        } else {
            1 + (self.payload.len() - first_room).div_ceil(rest_room)
        }
    }

    /// Writes the next packet into `buf` and returns its length, or `None` when
    /// the heap is sent. `buf` must hold `max_packet` bytes.
    pub fn next_packet(&mut self, buf: &mut [u8]) -> Option<Result<usize, Error>> {
        if !self.first && self.offset >= self.payload.len() {
            return None;
        }
        let ptrs: &[ItemPointer] = if self.first { self.pointers } else { &[] };
        let room = self.max_packet - WORD * (5 + ptrs.len());
        let end = (self.offset + room).min(self.payload.len());
        let r = emit_packet(
            buf,
            self.flavour,
            self.cnt,
            Some(self.payload.len() as u64),
            self.offset as u64,
            ptrs,
            &self.payload[self.offset..end],
        );
        self.first = false;
        self.offset = end;
        Some(r)
    }
}

/// Paces packets at a bit rate: `poll(now)` says whether a packet may go now or
/// when it will be due. Sans-IO: the caller sleeps or spins until then.
#[derive(Debug, Clone)]
pub struct Pacer {
    nanos_per_byte: f64,
    next: f64,
    burst_nanos: f64,
}

impl Pacer {
    /// A pacer at `bits_per_second` starting at `start`; it lets the sender catch
    /// up at most `burst_nanos` of lateness (beyond that, lost time is forgiven).
    pub fn new(bits_per_second: f64, start: Instant, burst_nanos: u64) -> Pacer {
        let nanos_per_byte = if bits_per_second > 0.0 {
            8e9 / bits_per_second
        } else {
            0.0
        };
        Pacer {
            nanos_per_byte,
            next: start.as_nanos() as f64,
            burst_nanos: burst_nanos as f64,
        }
    }

    /// When the next packet is due.
    pub fn next_due(&self) -> Instant {
        Instant::from_nanos(self.next as u64)
    }

    /// If a packet of `bytes` may be sent at `now`, books it and returns `Ok(())`;
    /// else returns the instant it is due.
    pub fn poll(&mut self, now: Instant, bytes: usize) -> Result<(), Instant> {
        let n = now.as_nanos() as f64;
        if n < self.next {
            return Err(self.next_due());
        }
        if n - self.next > self.burst_nanos {
            self.next = n - self.burst_nanos;
        }
        self.next += bytes as f64 * self.nanos_per_byte;
        Ok(())
    }
}

/// The descriptors of generic heaps (`spead send`, `spead_send` with
/// `source = "heaps"`): a heap index (0x1000) and the data bytes (0x1001).
pub fn generic_descriptors(flavour: Flavour) -> [Descriptor; 2] {
    [
        Descriptor {
            id: 0x1000,
            name: "heap_index".into(),
            description: "index of the heap in this run".into(),
            shape: vec![],
            format: vec![(b'u', u64::from(flavour.heap_address_bits()))],
            dtype: String::new(),
        },
        Descriptor {
            id: 0x1001,
            name: "data".into(),
            description: "payload bytes".into(),
            shape: vec![None],
            format: vec![(b'u', 8)],
            dtype: String::new(),
        },
    ]
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::spead::wire::{decode, heap_items, ItemValue, Packet};

    #[test]
    fn heap_cut_into_packets() {
        let f = Flavour::SPEAD_64_48;
        let heap = SendHeap::new(3)
            .immediate(0x1600, 12345)
            .bytes(0x4300, (0..2000u32).map(|i| i as u8).collect::<Vec<_>>());
        let (ptrs, payload) = heap.layout(f).unwrap();
        let mut pk = Packetizer::new(f, 3, &ptrs, &payload, 1000).unwrap();
        let n = pk.n_packets();
        let mut buf = vec![0u8; 1000];
        let mut got = vec![0u8; payload.len()];
        let mut all_ptrs = Vec::new();
        let mut count = 0;
        while let Some(r) = pk.next_packet(&mut buf) {
            let len = r.unwrap();
            assert!(len <= 1000);
            let h = decode(&buf[..len]).unwrap();
            assert_eq!(h.heap_cnt, 3);
            assert_eq!(h.heap_length, Some(2000));
            let p = Packet::new_checked(&buf[..len]).unwrap();
            let off = h.payload_offset as usize;
            got[off..off + p.payload().len()].copy_from_slice(p.payload());
            if count == 0 {
                assert_eq!(h.n_items, 6);
            } else {
                assert_eq!(h.n_items, 4);
            }
            all_ptrs.extend(p.items());
            count += 1;
        }
        assert_eq!(count, n);
        assert_eq!(count, 3);
        assert_eq!(got, payload);
        let items = heap_items(f, &all_ptrs, &got);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].value, ItemValue::Bytes(&payload[..]));
        assert_eq!(items[1].value, ItemValue::Immediate(12345));
    }

    #[test]
    fn end_of_stream_heap() {
        let f = Flavour::SPEAD_64_40;
        let (ptrs, payload) = SendHeap::end_of_stream(9).layout(f).unwrap();
        let mut pk = Packetizer::new(f, 9, &ptrs, &payload, 1500).unwrap();
        let mut buf = vec![0u8; 1500];
        let len = pk.next_packet(&mut buf).unwrap().unwrap();
        assert!(pk.next_packet(&mut buf).is_none());
        let p = Packet::new_checked(&buf[..len]).unwrap();
        assert!(p
            .items()
            .any(|x| x.is_immediate() && x.id(f) == id::STREAM_CTRL && x.value(f) == ctrl::STOP));
    }

    #[test]
    fn pacer_spaces_packets() {
        // 8 Gb/s: 1 ns per byte.
        let mut p = Pacer::new(8e9, Instant::ZERO, 0);
        assert!(p.poll(Instant::ZERO, 1000).is_ok());
        assert_eq!(
            p.poll(Instant::from_nanos(500), 1000),
            Err(Instant::from_nanos(1000))
        );
        assert!(p.poll(Instant::from_nanos(1000), 1000).is_ok());
        assert_eq!(p.next_due(), Instant::from_nanos(2000));
        // Late by a lot: with no burst allowance the schedule restarts from now.
        assert!(p.poll(Instant::from_nanos(10_000), 1000).is_ok());
        assert_eq!(p.next_due(), Instant::from_nanos(11_000));
    }

    #[test]
    fn too_many_pointers_is_an_error() {
        let f = Flavour::SPEAD_64_40;
        let ptrs = vec![f.immediate(0x1000, 1).unwrap(); 200];
        assert!(Packetizer::new(f, 0, &ptrs, &[], 1000).is_err());
    }
}
