//! Heap reassembly: packets in, complete heaps out.
//!
//! Tolerates reordering, duplicates (counted), a missing heap length (the heap is
//! delivered when it is evicted or flushed and its bytes are contiguous, as spead2
//! does), and packets from several senders (heaps are keyed by sender and heap
//! counter). At most `max_heaps` heaps are live; a packet of a new heap when all
//! slots are taken evicts the oldest. Every discarded packet and heap is counted by
//! its cause ([`AssembleStats`]); nothing is dropped silently (unlike a known spead2 bug, where
//! a heap whose first packet was lost vanished without a counter).
//!
//! Sans-IO and allocation-free in steady state: heap buffers come back through
//! [`Assembler::recycle`].
//!
//! Call order: [`Assembler::push`] for each packet, then drain
//! [`Assembler::poll_heap`]; [`Assembler::flush`] at the end.

use std::collections::VecDeque;

use super::wire::{
    self, ctrl, decode, heap_items, id, Descriptor, Flavour, Item, ItemPointer, WORD,
};

/// Why a packet was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discard {
    /// The packet did not decode.
    Malformed(wire::Error),
    /// Its payload offset was already received for this heap.
    Duplicate,
    /// Its heap length differs from the heap's, or is smaller than data already seen.
    InconsistentLength,
    /// Its flavour differs from the heap's.
    InconsistentFlavour,
    /// The heap would exceed `max_heap_size`.
    TooLarge,
    /// It arrived after the end of stream.
    AfterStop,
}

/// Counters by cause.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AssembleStats {
    /// Packets offered.
    pub packets: u64,
    /// Packets accepted into a heap.
    pub packets_accepted: u64,
    /// Packets that did not decode.
    pub packets_malformed: u64,
    /// Duplicate packets.
    pub packets_duplicate: u64,
    /// Packets whose heap length or flavour disagreed with their heap.
    pub packets_inconsistent: u64,
    /// Packets of heaps larger than the limit.
    pub packets_too_large: u64,
    /// Packets after the end-of-stream heap.
    pub packets_after_stop: u64,
    /// Heaps delivered complete (all bytes of the stated heap length).
    pub heaps_complete: u64,
    /// Heaps without a heap length delivered because they were contiguous.
    pub heaps_unsized: u64,
    /// Incomplete heaps evicted to make room (their packets are lost).
    pub heaps_evicted: u64,
    /// Incomplete heaps dropped at a flush or end of stream.
    pub heaps_flushed: u64,
    /// Packets that were in evicted or flushed incomplete heaps.
    pub packets_in_dropped_heaps: u64,
    /// Payload bytes delivered in heaps.
    pub bytes: u64,
    /// Whether an end-of-stream heap arrived.
    pub stopped: bool,
}

/// A reassembled heap.
#[derive(Debug, Clone, Default)]
pub struct Heap {
    /// Sender the caller named for its packets.
    pub sender: u32,
    /// Heap counter.
    pub cnt: u64,
    /// Flavour of its packets.
    pub flavour: Flavour,
    /// Heap length from the packets, if any gave it.
    pub heap_length: Option<u64>,
    /// Item pointers other than the four standard ones, in arrival order.
    pub pointers: Vec<ItemPointer>,
    /// The payload.
    pub payload: Vec<u8>,
    /// Whether it carried stream control STOP.
    pub end_of_stream: bool,
}

impl Heap {
    /// Its items with spead2's rules (see [`wire::heap_items`]).
    pub fn items(&self) -> Vec<Item<'_>> {
        heap_items(self.flavour, &self.pointers, &self.payload)
    }

    /// Descriptors carried in 0x5 items (malformed ones are skipped).
    pub fn descriptors(&self) -> Vec<Descriptor> {
        self.items()
            .iter()
            .filter(|i| i.id == id::DESCRIPTOR)
            .filter_map(|i| match i.value {
                wire::ItemValue::Bytes(b) => Descriptor::parse(b).ok(),
                wire::ItemValue::Immediate(_) => None,
            })
            .collect()
    }
}

#[inline]
fn pointer(w: &[u8]) -> ItemPointer {
    let mut b = [0u8; 8];
    b.copy_from_slice(w);
    ItemPointer(u64::from_be_bytes(b))
}

#[derive(Debug)]
struct Live {
    heap: Heap,
    /// Received payload offsets, sorted.
    offsets: Vec<u64>,
    received: u64,
    /// Bytes the heap must at least have (payload ends, item addresses).
    min_length: u64,
    age: u64,
}

/// Limits.
#[derive(Debug, Clone, Copy)]
pub struct AssembleConfig {
    /// Live heaps at once (per assembler, all senders).
    pub max_heaps: usize,
    /// Largest heap accepted, in bytes.
    pub max_heap_size: u64,
}

impl Default for AssembleConfig {
    fn default() -> Self {
        AssembleConfig {
            max_heaps: 16,
            max_heap_size: 64 << 20,
        }
    }
}

/// The heap reassembler.
#[derive(Debug)]
pub struct Assembler {
    cfg: AssembleConfig,
    live: Vec<Live>,
    spare: Vec<Heap>,
    spare_offsets: Vec<Vec<u64>>,
    ready: VecDeque<Heap>,
    age: u64,
    stats: AssembleStats,
}

impl Assembler {
    /// An assembler with `cfg` limits (`max_heaps` at least 1).
    pub fn new(cfg: AssembleConfig) -> Assembler {
        let cfg = AssembleConfig {
            max_heaps: cfg.max_heaps.max(1),
            ..cfg
        };
        Assembler {
            cfg,
            live: Vec::with_capacity(cfg.max_heaps),
            spare: Vec::new(),
            spare_offsets: Vec::new(),
            ready: VecDeque::new(),
            age: 0,
            stats: AssembleStats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> &AssembleStats {
        &self.stats
    }

    /// Heaps currently being assembled.
    pub fn live_heaps(&self) -> usize {
        self.live.len()
    }

    /// Next finished heap, if any.
    #[must_use]
    pub fn poll_heap(&mut self) -> Option<Heap> {
        self.ready.pop_front()
    }

    /// Gives a delivered heap's buffers back for reuse.
    pub fn recycle(&mut self, mut heap: Heap) {
        if self.spare.len() < self.cfg.max_heaps * 2 {
            heap.pointers.clear();
            heap.payload.clear();
            self.spare.push(heap);
        }
    }

    /// Offers one packet from `sender`. Returns why it was discarded, if it was.
    pub fn push(&mut self, sender: u32, data: &[u8]) -> Result<(), Discard> {
        self.stats.packets += 1;
        if self.stats.stopped {
            self.stats.packets_after_stop += 1;
            return Err(Discard::AfterStop);
        }
        let h = match decode(data) {
            Ok(h) => h,
            Err(e) => {
                self.stats.packets_malformed += 1;
                return Err(Discard::Malformed(e));
            }
        };
        let f = h.flavour;
        if h.heap_length.is_some_and(|l| l > self.cfg.max_heap_size)
            || h.payload_offset + h.payload_length > self.cfg.max_heap_size
        {
            self.stats.packets_too_large += 1;
            return Err(Discard::TooLarge);
        }
        let pos = match self
            .live
            .iter()
            .position(|l| l.heap.cnt == h.heap_cnt && l.heap.sender == sender)
        {
            Some(p) => p,
            None => {
                if self.live.len() == self.cfg.max_heaps {
                    self.evict_oldest();
                }
                let mut heap = self.spare.pop().unwrap_or_default();
                heap.sender = sender;
                heap.cnt = h.heap_cnt;
                heap.flavour = f;
                heap.heap_length = None;
                heap.end_of_stream = false;
                self.age += 1;
                self.live.push(Live {
                    heap,
                    offsets: self.spare_offsets.pop().unwrap_or_default(),
                    received: 0,
                    min_length: 0,
                    age: self.age,
                });
                self.live.len() - 1
            }
        };
        let r = self.accept(pos, data, &h);
        // A heap created by a packet that was then refused holds nothing: drop it.
        if r.is_err() && self.live.get(pos).is_some_and(|l| l.offsets.is_empty()) {
            let l = self.live.swap_remove(pos);
            self.spare_offsets.push(l.offsets);
            self.recycle(l.heap);
        }
        r
    }

    fn accept(&mut self, pos: usize, data: &[u8], h: &wire::Header) -> Result<(), Discard> {
        let f = h.flavour;
        let live = &mut self.live[pos];
        if live.heap.flavour != f {
            self.stats.packets_inconsistent += 1;
            return Err(Discard::InconsistentFlavour);
        }
        if let Some(pl) = h.heap_length {
            if live.heap.heap_length.is_some_and(|l| l != pl) || pl < live.min_length {
                self.stats.packets_inconsistent += 1;
                return Err(Discard::InconsistentLength);
            }
        }
        let slot = match live.offsets.binary_search(&h.payload_offset) {
            Ok(_) => {
                self.stats.packets_duplicate += 1;
                return Err(Discard::Duplicate);
            }
            Err(s) => s,
        };
        // Addressed items set a lower bound on the heap length.
        let start = h.payload_start();
        let pointers = &data[WORD..start];
        let mut min_length = live.min_length.max(h.payload_offset + h.payload_length);
        for w in pointers.chunks_exact(WORD) {
            let p = pointer(w);
            if !p.is_immediate() {
                min_length = min_length.max(p.value(f));
            }
        }
        if let Some(pl) = h.heap_length.or(live.heap.heap_length) {
            if min_length > pl {
                self.stats.packets_inconsistent += 1;
                return Err(Discard::InconsistentLength);
            }
        }
        if min_length > self.cfg.max_heap_size {
            self.stats.packets_too_large += 1;
            return Err(Discard::TooLarge);
        }
        // Accepted: keep the pointers spead2 keeps (padding and non-standard ids).
        for w in pointers.chunks_exact(WORD) {
            let p = pointer(w);
            let item_id = p.id(f);
            if item_id == id::NULL || item_id > id::PAYLOAD_LENGTH {
                live.heap.pointers.push(p);
                if item_id == id::STREAM_CTRL && p.is_immediate() && p.value(f) == ctrl::STOP {
                    live.heap.end_of_stream = true;
                }
            }
        }
        if live.heap.heap_length.is_none() {
            live.heap.heap_length = h.heap_length;
        }
        live.min_length = min_length;
        let want = live.heap.heap_length.unwrap_or(min_length) as usize;
        if live.heap.payload.len() < want {
            live.heap.payload.resize(want, 0);
        }
        let off = h.payload_offset as usize;
        let len = h.payload_length as usize;
        live.heap.payload[off..off + len].copy_from_slice(&data[start..start + len]);
        live.offsets.insert(slot, h.payload_offset);
        live.received += h.payload_length;
        self.stats.packets_accepted += 1;
        let complete = live
            .heap
            .heap_length
            .is_some_and(|l| live.received == l && live.min_length == l);
        let eos = live.heap.end_of_stream;
        if complete {
            let live = self.live.swap_remove(pos);
            self.finish(live, false);
        }
        if eos {
            self.stats.stopped = true;
            self.flush();
        }
        Ok(())
    }

    fn evict_oldest(&mut self) {
        if let Some((pos, _)) = self.live.iter().enumerate().min_by_key(|(_, l)| l.age) {
            let live = self.live.swap_remove(pos);
            self.finish(live, true);
        }
    }

    /// Delivers a heap or counts it dropped; keeps its offsets list for reuse.
    fn finish(&mut self, mut live: Live, evicted: bool) {
        let mut offsets = std::mem::take(&mut live.offsets);
        let n_packets = offsets.len() as u64;
        offsets.clear();
        if self.spare_offsets.len() < self.cfg.max_heaps {
            self.spare_offsets.push(offsets);
        }
        let sized_complete = live
            .heap
            .heap_length
            .is_some_and(|l| live.received == l && live.min_length == l);
        let unsized_contiguous =
            live.heap.heap_length.is_none() && live.received == live.min_length;
        if live.heap.end_of_stream {
            // The end-of-stream heap is control, not data: neither delivered nor
            // counted as a heap (spead2 does not deliver it either; its sender pads
            // it with one byte). `stats.stopped` records it.
            self.recycle(live.heap);
        } else if sized_complete || unsized_contiguous {
            if sized_complete {
                self.stats.heaps_complete += 1;
            } else {
                self.stats.heaps_unsized += 1;
            }
            live.heap.payload.truncate(live.received as usize);
            self.stats.bytes += live.received;
            self.ready.push_back(live.heap);
        } else {
            if evicted {
                self.stats.heaps_evicted += 1;
            } else {
                self.stats.heaps_flushed += 1;
            }
            self.stats.packets_in_dropped_heaps += n_packets;
            self.recycle(live.heap);
        }
    }

    /// Finishes every live heap (at the end of a stream or input).
    pub fn flush(&mut self) {
        let mut live = std::mem::take(&mut self.live);
        live.sort_by_key(|l| l.age);
        for l in live.drain(..) {
            self.finish(l, false);
        }
        self.live = live;
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::spead::send::{Packetizer, SendHeap};
    use crate::spead::wire::{emit_packet, ItemValue};

    fn packets(f: Flavour, heap: &SendHeap, max: usize) -> Vec<Vec<u8>> {
        let (ptrs, payload) = heap.layout(f).unwrap();
        let mut pk = Packetizer::new(f, heap.cnt, &ptrs, &payload, max).unwrap();
        let mut out = Vec::new();
        let mut buf = vec![0u8; max];
        while let Some(r) = pk.next_packet(&mut buf) {
            out.push(buf[..r.unwrap()].to_vec());
        }
        out
    }

    fn heap(cnt: u64) -> SendHeap {
        SendHeap::new(cnt).immediate(0x1000, cnt * 7).bytes(
            0x1001,
            (0..300u32)
                .map(|i| (i as u8) ^ cnt as u8)
                .collect::<Vec<_>>(),
        )
    }

    fn check_heap(h: &Heap, cnt: u64) {
        assert_eq!(h.cnt, cnt);
        let items = h.items();
        let want = heap(cnt);
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].value, ItemValue::Immediate(cnt * 7));
        match (&want.items[1].1, items[0].value) {
            (crate::spead::send::SendValue::Bytes(w), ItemValue::Bytes(g)) => assert_eq!(&w[..], g),
            _ => panic!("item 0x1001 should be bytes"),
        }
    }

    #[test]
    fn in_order_reversed_and_duplicates() {
        for f in [Flavour::SPEAD_64_40, Flavour::SPEAD_64_48] {
            let mut a = Assembler::new(AssembleConfig::default());
            let pk = packets(f, &heap(5), 100);
            assert!(pk.len() >= 4);
            for p in pk[1..].iter().rev() {
                a.push(0, p).unwrap();
                assert_eq!(a.push(0, p), Err(Discard::Duplicate));
            }
            assert!(a.poll_heap().is_none());
            a.push(0, &pk[0]).unwrap();
            let h = a.poll_heap().unwrap();
            check_heap(&h, 5);
            assert!(a.poll_heap().is_none());
            assert_eq!(a.stats().packets_duplicate, pk.len() as u64 - 1);
            assert_eq!(a.stats().heaps_complete, 1);
        }
    }

    #[test]
    fn loss_of_any_packet_is_counted() {
        let f = Flavour::SPEAD_64_40;
        let pk = packets(f, &heap(1), 100);
        for lost in 0..pk.len() {
            let mut a = Assembler::new(AssembleConfig::default());
            for (i, p) in pk.iter().enumerate() {
                if i != lost {
                    a.push(0, p).unwrap();
                }
            }
            assert!(a.poll_heap().is_none());
            a.flush();
            assert!(a.poll_heap().is_none());
            assert_eq!(a.stats().heaps_flushed, 1, "lost packet {lost}");
            assert_eq!(a.stats().packets_in_dropped_heaps, pk.len() as u64 - 1);
        }
    }

    #[test]
    fn eviction_of_oldest_incomplete() {
        let f = Flavour::SPEAD_64_40;
        let mut a = Assembler::new(AssembleConfig {
            max_heaps: 2,
            ..AssembleConfig::default()
        });
        let p1 = packets(f, &heap(1), 100);
        let p2 = packets(f, &heap(2), 100);
        let p3 = packets(f, &heap(3), 100);
        a.push(0, &p1[0]).unwrap();
        a.push(0, &p2[0]).unwrap();
        // Heap 3 evicts heap 1 (the oldest).
        for p in &p3 {
            a.push(0, p).unwrap();
        }
        assert_eq!(a.stats().heaps_evicted, 1);
        check_heap(&a.poll_heap().unwrap(), 3);
        for p in &p2[1..] {
            a.push(0, p).unwrap();
        }
        check_heap(&a.poll_heap().unwrap(), 2);
        // The rest of heap 1 alone does not make a heap.
        for p in &p1[1..] {
            a.push(0, p).unwrap();
        }
        assert!(a.poll_heap().is_none());
        a.flush();
        assert_eq!(a.stats().heaps_flushed, 1);
    }

    #[test]
    fn several_senders_same_counter() {
        let f = Flavour::SPEAD_64_48;
        let pk = packets(f, &heap(9), 120);
        let mut a = Assembler::new(AssembleConfig::default());
        for p in &pk {
            a.push(1, p).unwrap();
            a.push(2, p).unwrap();
        }
        let h1 = a.poll_heap().unwrap();
        let h2 = a.poll_heap().unwrap();
        assert_eq!((h1.sender, h2.sender), (1, 2));
        check_heap(&h1, 9);
        check_heap(&h2, 9);
        assert_eq!(a.stats().packets_duplicate, 0);
    }

    #[test]
    fn missing_heap_length_delivered_when_contiguous() {
        let f = Flavour::SPEAD_64_40;
        let item = f.addressed(0x1001, 0).unwrap();
        let mut a = Assembler::new(AssembleConfig::default());
        let mut buf = [0u8; 200];
        let n = emit_packet(&mut buf, f, 4, None, 0, &[item], &[1, 2, 3]).unwrap();
        a.push(0, &buf[..n]).unwrap();
        let n = emit_packet(&mut buf, f, 4, None, 3, &[], &[4, 5]).unwrap();
        a.push(0, &buf[..n]).unwrap();
        assert!(a.poll_heap().is_none());
        a.flush();
        let h = a.poll_heap().unwrap();
        assert_eq!(h.items()[0].value, ItemValue::Bytes(&[1, 2, 3, 4, 5]));
        assert_eq!(a.stats().heaps_unsized, 1);
    }

    #[test]
    fn end_of_stream_flushes_and_stops() {
        let f = Flavour::SPEAD_64_40;
        let mut a = Assembler::new(AssembleConfig::default());
        let p1 = packets(f, &heap(1), 100);
        a.push(0, &p1[0]).unwrap();
        for p in packets(f, &SendHeap::end_of_stream(2), 100) {
            a.push(0, &p).unwrap();
        }
        assert!(a.stats().stopped);
        assert_eq!(a.stats().heaps_flushed, 1);
        assert_eq!(a.push(0, &p1[1]), Err(Discard::AfterStop));
        assert!(a.poll_heap().is_none());
    }

    #[test]
    fn inconsistent_and_malformed_counted() {
        let f = Flavour::SPEAD_64_40;
        let mut a = Assembler::new(AssembleConfig::default());
        let mut buf = [0u8; 200];
        let n = emit_packet(&mut buf, f, 4, Some(10), 0, &[], &[1, 2, 3]).unwrap();
        a.push(0, &buf[..n]).unwrap();
        let n = emit_packet(&mut buf, f, 4, Some(12), 3, &[], &[4, 5]).unwrap();
        assert_eq!(a.push(0, &buf[..n]), Err(Discard::InconsistentLength));
        assert!(matches!(
            a.push(0, &[0x53, 4, 3]),
            Err(Discard::Malformed(_))
        ));
        let s = a.stats();
        assert_eq!(
            (s.packets_inconsistent, s.packets_malformed, s.packets),
            (1, 1, 3)
        );
    }

    proptest::proptest! {
        /// Any order, with duplicates, of several heaps' packets gives back every
        /// heap intact, each duplicate counted.
        #[test]
        fn any_order_with_duplicates(
            order in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..60),
            max in 60usize..300,
        ) {
            let f = Flavour::SPEAD_64_48;
            let mut pk: Vec<Vec<u8>> = (1..=3).flat_map(|c| packets(f, &heap(c), max)).collect();
            let n_unique = pk.len();
            // Duplicate some packets, then shuffle by the random keys.
            for (i, k) in order.iter().enumerate() {
                if k % 3 == 0 {
                    let d = pk[i % n_unique].clone();
                    pk.push(d);
                }
            }
            let mut keyed: Vec<(u32, Vec<u8>)> = pk
                .into_iter()
                .enumerate()
                .map(|(i, p)| (order[i % order.len()].wrapping_mul(2_654_435_761).wrapping_add(i as u32), p))
                .collect();
            keyed.sort_by_key(|(k, _)| *k);
            let mut a = Assembler::new(AssembleConfig::default());
            let mut dups = 0;
            for (_, p) in &keyed {
                if a.push(0, p) == Err(Discard::Duplicate) {
                    dups += 1;
                }
            }
            let mut got = Vec::new();
            while let Some(h) = a.poll_heap() {
                got.push(h);
            }
            // Every heap arrives intact; a duplicate arriving after its heap completed
            // starts a new heap (as in spead2), which completes only if all of its
            // packets came again.
            for h in &got {
                check_heap(h, h.cnt);
            }
            for c in 1..=3 {
                proptest::prop_assert!(got.iter().any(|h| h.cnt == c), "heap {} missing", c);
            }
            proptest::prop_assert_eq!(a.stats().packets_duplicate, dups);
            proptest::prop_assert_eq!(a.stats().packets_accepted + dups, keyed.len() as u64);
        }
    }
}
