//! The chunk stream's tests: placement, the window, prediction, and
//! properties over reordering, loss and duplicates.

use super::*;
use crate::spead::fsim::{payload_byte, Fsim, FsimConfig};
use crate::spead::wire::{ctrl, emit_packet, id, Flavour};

/// A small F-engine: 64 channels in streams of 4, 32 samples, 128-byte
/// packets, `n_ants` antennas.
fn small_fsim(n_ants: usize) -> FsimConfig {
    FsimConfig {
        n_ants,
        n_channels_total: 64,
        n_channels_per_stream: 4,
        n_samples_per_channel: 32,
        packet_payload: 128,
        ..FsimConfig::default()
    }
}

/// One-item placement for hand-made packets: item 0x1600 is the heap number;
/// chunk = heap / 4, index = heap % 4, heaps of 8 bytes.
struct Simple {
    ids: [u64; 1],
}

impl Place for Simple {
    fn item_ids(&self) -> &[u64] {
        &self.ids
    }
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
        let n = input.items[0]?;
        if n == 999 {
            return None;
        }
        Some(Placement {
            chunk_id: (n / 4) as i64,
            heap_index: (n % 4) as usize,
            heap_offset: (n % 4) as usize * 8,
        })
    }
}

fn stream(max_chunks: usize, n_chunks: usize, max_heaps: usize) -> ChunkStream<Simple> {
    ChunkStream::new(
        ChunkConfig {
            max_chunks,
            n_chunks,
            chunk_bytes: 32,
            present_len: 4,
            max_heaps,
            packet_presence: None,
            copy: CopyMode::Plain,
        },
        Simple { ids: [0x1600] },
    )
}

/// Packet `part` (of 2, 4 bytes each) of heap `n`, or a single 8-byte packet.
fn pkt(n: u64, part: Option<u64>) -> Vec<u8> {
    let f = Flavour::SPEAD_64_48;
    let data: Vec<u8> = (0..8).map(|i| (n * 10 + i) as u8).collect();
    let (off, pl) = match part {
        None => (0, &data[..]),
        Some(p) => (p * 4, &data[p as usize * 4..p as usize * 4 + 4]),
    };
    let mut buf = vec![0u8; 200];
    let items = [f.immediate(0x1600, n).unwrap()];
    let len = emit_packet(&mut buf, f, n, Some(8), off, &items, pl).unwrap();
    buf.truncate(len);
    buf
}

impl<P: Place> ChunkStream<P> {
    fn forget_prediction(&mut self) {
        self.heaps.predict.valid = false;
    }
}

#[test]
fn header_prediction_takes_the_following_packets_of_a_heap() {
    let cfg = small_fsim(2);
    let place = KatgpucbfPlace::for_fsim(&cfg, 2);
    let per_heap = cfg.packets_per_heap() as u64;
    let (buf, _) = Fsim::new(cfg).unwrap().packets_buffer(4).unwrap();
    let mut s = ChunkStream::new(place.chunk_config(2, 4), place);
    assert_eq!(s.push_buffer(&buf).0, buf.len());
    s.flush();
    let st = s.stats();
    let heaps = 2 * 4;
    assert_eq!(st.heaps_complete, heaps);
    // Every packet but each heap's first.
    assert_eq!(st.packets_predicted, heaps * (per_heap - 1));
}

fn expect_heap(c: &Chunk, n: u64) {
    let i = (n % 4) as usize;
    assert_eq!(c.present[i], 1, "heap {n} present");
    let want: Vec<u8> = (0..8).map(|k| (n * 10 + k) as u8).collect();
    assert_eq!(&c.data[i * 8..i * 8 + 8], &want[..]);
}

#[test]
fn single_packet_heaps_fill_chunks() {
    let mut s = stream(2, 4, 4);
    for n in 0..8 {
        assert_eq!(s.push(0, &pkt(n, None)), Push::Accepted);
    }
    assert!(s.poll_chunk().is_none());
    s.flush();
    let c0 = s.poll_chunk().unwrap();
    let c1 = s.poll_chunk().unwrap();
    assert_eq!((c0.chunk_id, c1.chunk_id), (0, 1));
    for n in 0..4 {
        expect_heap(&c0, n);
        expect_heap(&c1, n + 4);
    }
    assert_eq!(s.stats().heaps_single_packet, 8);
    assert_eq!(s.stats().fraction_present(), 1.0);
    // Duplicate single-packet heap is counted.
    let mut s = stream(2, 4, 4);
    assert_eq!(s.push(0, &pkt(1, None)), Push::Accepted);
    assert_eq!(
        s.push(0, &pkt(1, None)),
        Push::Discarded(ChunkDiscard::Duplicate)
    );
}

#[test]
fn reordered_and_duplicate_packets() {
    let mut s = stream(2, 4, 4);
    assert_eq!(s.push(0, &pkt(2, Some(1))), Push::Accepted);
    assert_eq!(s.push(0, &pkt(1, Some(1))), Push::Accepted);
    assert_eq!(
        s.push(0, &pkt(2, Some(1))),
        Push::Discarded(ChunkDiscard::Duplicate)
    );
    assert_eq!(s.push(0, &pkt(1, Some(0))), Push::Accepted);
    assert_eq!(s.push(0, &pkt(2, Some(0))), Push::Accepted);
    s.flush();
    let c = s.poll_chunk().unwrap();
    expect_heap(&c, 1);
    expect_heap(&c, 2);
    assert_eq!(c.present, vec![0, 1, 1, 0]);
    assert_eq!(s.stats().packets_duplicate, 1);
    assert_eq!(s.stats().heaps_complete, 2);
}

#[test]
fn loss_of_any_packet_leaves_heap_absent_and_counted() {
    for lost in 0..2 {
        let mut s = stream(2, 4, 4);
        for part in 0..2 {
            if part != lost {
                assert_eq!(s.push(0, &pkt(3, Some(part))), Push::Accepted);
            }
        }
        s.flush();
        let c = s.poll_chunk().unwrap();
        assert_eq!(c.present[3], 0);
        assert_eq!(s.stats().heaps_incomplete_flushed, 1);
        assert_eq!(s.stats().packets_in_incomplete_heaps, 1);
    }
}

#[test]
fn eviction_of_oldest_live_heap() {
    let mut s = stream(2, 4, 2);
    assert_eq!(s.push(0, &pkt(0, Some(0))), Push::Accepted);
    assert_eq!(s.push(0, &pkt(1, Some(0))), Push::Accepted);
    assert_eq!(s.push(0, &pkt(2, Some(0))), Push::Accepted); // evicts heap 0
    assert_eq!(s.stats().heaps_incomplete_evicted, 1);
    assert_eq!(s.push(0, &pkt(1, Some(1))), Push::Accepted);
    assert_eq!(s.push(0, &pkt(2, Some(1))), Push::Accepted);
    // Heap 0's second packet starts a new live heap that cannot complete.
    assert_eq!(s.push(0, &pkt(0, Some(1))), Push::Accepted);
    s.flush();
    let c = s.poll_chunk().unwrap();
    assert_eq!(c.present, vec![0, 1, 1, 0]);
    assert_eq!(s.stats().heaps_incomplete_flushed, 1);
}

#[test]
fn window_moves_too_old_and_jumps() {
    let mut s = stream(2, 4, 4);
    assert_eq!(s.push(0, &pkt(0, None)), Push::Accepted); // chunk 0
    assert_eq!(s.push(0, &pkt(4, None)), Push::Accepted); // chunk 1
    assert_eq!(s.window(), (0, 2));
    assert_eq!(s.push(0, &pkt(8, None)), Push::Accepted); // chunk 2 flushes 0
    assert_eq!(s.window(), (1, 3));
    let c0 = s.poll_chunk().unwrap();
    assert_eq!(c0.chunk_id, 0);
    s.add_free_chunk(c0);
    assert_eq!(
        s.push(0, &pkt(1, None)),
        Push::Discarded(ChunkDiscard::TooOld)
    );
    assert_eq!(s.stats().heaps_too_old, 1);
    // Far ahead: chunk 10 flushes 1 and 2 and restarts the window at 9..11.
    assert_eq!(s.push(0, &pkt(40, None)), Push::Accepted);
    assert_eq!(s.window(), (9, 11));
    assert_eq!(s.poll_chunk().unwrap().chunk_id, 1);
    assert_eq!(s.poll_chunk().unwrap().chunk_id, 2);
    assert!(s.poll_chunk().is_none());
    // A rejected heap (multi-packet) is counted once, its packets each.
    assert_eq!(
        s.push(0, &pkt(999, Some(0))),
        Push::Discarded(ChunkDiscard::Rejected)
    );
    assert_eq!(
        s.push(0, &pkt(999, Some(1))),
        Push::Discarded(ChunkDiscard::Rejected)
    );
    assert_eq!(s.stats().heaps_rejected, 1);
    assert_eq!(s.stats().packets_rejected, 2);
}

#[test]
fn live_heap_dies_with_its_flushed_chunk() {
    let mut s = stream(1, 4, 4);
    assert_eq!(s.push(0, &pkt(1, Some(0))), Push::Accepted); // chunk 0
    assert_eq!(s.push(0, &pkt(5, None)), Push::Accepted); // chunk 1 flushes 0
    assert_eq!(s.stats().heaps_incomplete_flushed, 1);
    // The rest of heap 1 is now too old.
    assert_eq!(
        s.push(0, &pkt(1, Some(1))),
        Push::Discarded(ChunkDiscard::TooOld)
    );
}

#[test]
fn free_ring_bounds_memory_and_stalls() {
    let mut s = stream(2, 2, 4);
    assert_eq!(s.push(0, &pkt(0, None)), Push::Accepted);
    assert_eq!(s.push(0, &pkt(4, None)), Push::Accepted);
    let p = pkt(8, None);
    assert_eq!(s.push(0, &p), Push::Stall); // chunk 0 flushed, none free
    assert_eq!(s.stats().stalls, 1);
    let c = s.poll_chunk().unwrap();
    assert_eq!(c.chunk_id, 0);
    s.add_free_chunk(c);
    assert_eq!(s.push(0, &p), Push::Accepted);
    assert_eq!(s.window(), (1, 3));
    assert_eq!(s.stats().packets, 3);
}

#[test]
fn packet_presence() {
    let mut s = ChunkStream::new(
        ChunkConfig {
            max_chunks: 1,
            n_chunks: 1,
            chunk_bytes: 32,
            present_len: 8,
            max_heaps: 4,
            packet_presence: Some(4),
            copy: CopyMode::Plain,
        },
        Simple { ids: [0x1600] },
    );
    // heap_index from Simple is n % 4; with packet presence use heap 0 and 2's indices.
    assert_eq!(s.push(0, &pkt(0, Some(1))), Push::Accepted);
    assert_eq!(s.push(0, &pkt(2, Some(0))), Push::Accepted);
    s.flush();
    let c = s.poll_chunk().unwrap();
    assert_eq!(c.present, vec![0, 1, 1, 0, 0, 0, 0, 0]);
}

#[test]
fn empty_packet_at_heap_end_with_packet_presence() {
    let mut s = ChunkStream::new(
        ChunkConfig {
            max_chunks: 1,
            n_chunks: 1,
            chunk_bytes: 32,
            present_len: 8,
            max_heaps: 4,
            packet_presence: Some(4),
            copy: CopyMode::Plain,
        },
        Simple { ids: [0x1600] },
    );
    let f = Flavour::SPEAD_64_48;
    let mut buf = [0u8; 100];
    let items = [f.immediate(0x1600, 3).unwrap()];
    let n = emit_packet(&mut buf, f, 3, Some(8), 8, &items, &[]).unwrap();
    assert_eq!(s.push(0, &buf[..n]), Push::Accepted);
    s.flush();
    assert_eq!(s.poll_chunk().unwrap().present, vec![0; 8]);
}

#[test]
fn end_of_stream_flushes() {
    let mut s = stream(2, 4, 4);
    assert_eq!(s.push(0, &pkt(0, None)), Push::Accepted);
    let f = Flavour::SPEAD_64_48;
    let mut buf = [0u8; 100];
    let stop = f.immediate(id::STREAM_CTRL, ctrl::STOP).unwrap();
    let n = emit_packet(&mut buf, f, 50, Some(0), 0, &[stop], &[]).unwrap();
    assert_eq!(s.push(0, &buf[..n]), Push::Stopped);
    assert_eq!(s.poll_chunk().unwrap().chunk_id, 0);
    assert_eq!(
        s.push(0, &pkt(1, None)),
        Push::Discarded(ChunkDiscard::AfterStop)
    );
}

#[test]
fn katgpucbf_place_rules() {
    for step in [6u64, 8] {
        let mut p = KatgpucbfPlace::new(3, 16, 2, step);
        let mut at = |ts: u64, feng: u64, len: u64| {
            let items = [Some(ts), Some(feng)];
            p.place(&PlaceInput {
                sender: 0,
                heap_cnt: 0,
                heap_length: len,
                items: &items,
                packet: &[],
            })
        };
        // heap 5 = chunk 2, time 1 in chunk; index 1 * 3 + 2.
        assert_eq!(
            at(5 * step, 2, 16),
            Some(Placement {
                chunk_id: 2,
                heap_index: 5,
                heap_offset: 80
            })
        );
        assert_eq!(at(5 * step + 2, 2, 16), None, "misaligned timestamp");
        assert_eq!(at(5 * step, 3, 16), None, "feng_id out of range");
        assert_eq!(at(5 * step, 0, 15), None, "wrong heap length");
    }
    let p = KatgpucbfPlace::new(3, 16, 2, 6);
    assert_eq!(p.heap_identity(2, 5), (2, 30));
    assert_eq!(p.chunk_timestamp(2), 24);
}

#[test]
fn fsim_heaps_land_in_katgpucbf_layout() {
    let cfg = small_fsim(3);
    let place = KatgpucbfPlace::for_fsim(&cfg, 2);
    let mut s = ChunkStream::new(place.chunk_config(2, 4), place.clone());
    let mut sim = Fsim::new(cfg.clone()).unwrap();
    let (buf, _) = sim.packets_buffer(4).unwrap();
    let (used, last) = s.push_buffer(&buf);
    assert_eq!((used, last), (buf.len(), Push::Accepted));
    s.flush();
    let mut n = 0;
    while let Some(c) = s.poll_chunk() {
        assert_eq!(c.chunk_id, n);
        assert!(c.present.iter().all(|&p| p == 1));
        for hi in 0..place.heaps_per_chunk() {
            let (feng, ts) = place.heap_identity(c.chunk_id, hi);
            let hb = cfg.heap_bytes();
            for off in (0..hb).step_by(97) {
                assert_eq!(c.data[hi * hb + off], payload_byte(feng, ts, off as u64));
            }
        }
        n += 1;
    }
    assert_eq!(n, 2);
    assert_eq!(s.stats().heaps_complete, 12);
    assert_eq!(s.stats().packets_accepted, 12 * 4);
}

proptest::proptest! {
    /// Packets reordered within a chunk's span land in the same chunks as in order.
    #[test]
    fn reordering_within_window_changes_nothing(keys in proptest::collection::vec(proptest::prelude::any::<u16>(), 96)) {
        let cfg = small_fsim(3);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
        let mut pk: Vec<&[u8]> = Vec::new();
        let mut start = 0;
        for &e in &ends {
            pk.push(&buf[start..e]);
            start = e;
        }
        // 24 packets per chunk; shuffle within each chunk's group.
        let mut shuffled = Vec::new();
        for (g, group) in pk.chunks(24).enumerate() {
            let mut v: Vec<(u16, &[u8])> = group.iter().enumerate().map(|(i, p)| (keys[(g * 24 + i) % keys.len()], *p)).collect();
            v.sort_by_key(|(k, _)| *k);
            shuffled.extend(v.into_iter().map(|(_, p)| p));
        }
        let run = |packets: &[&[u8]]| {
            let mut s = ChunkStream::new(place.chunk_config(2, 8), place.clone());
            for p in packets {
                assert_eq!(s.push(0, p), Push::Accepted);
            }
            s.flush();
            let mut out = Vec::new();
            while let Some(c) = s.poll_chunk() {
                out.push(c);
            }
            out
        };
        let a = run(&pk);
        let b = run(&shuffled);
        proptest::prop_assert_eq!(a.len(), 4);
        proptest::prop_assert_eq!(a, b);
    }
}

proptest::proptest! {
    /// With packets randomly lost and duplicated (in order otherwise), a heap
    /// is present exactly when all its packets arrived, and every present
    /// heap's bytes are right.
    #[test]
    fn header_prediction_changes_no_outcome(
        ops in proptest::collection::vec((0u8..12, proptest::prelude::any::<u8>(), proptest::prelude::any::<u8>()), 120),
    ) {
        // The same perturbed packet sequence through two streams, one of which
        // forgets its prediction before every packet (the full path only):
        // every result, counter and chunk byte must agree.
        let cfg = small_fsim(3);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
        let mut fast = ChunkStream::new(place.chunk_config(2, 8), place.clone());
        let mut full = ChunkStream::new(place.chunk_config(2, 8), place.clone());
        let mut start = 0;
        let mut held: Option<Vec<u8>> = None;
        for (i, &e) in ends.iter().enumerate() {
            let mut p = buf[start..e].to_vec();
            start = e;
            let (op, a, b) = ops[i % ops.len()];
            let mut sender = 0;
            match op {
                // Lost.
                0 => continue,
                // A header byte changed (any item, the offset's value bits included).
                1 => {
                    let at = usize::from(a) % 96;
                    p[at] ^= b.max(1);
                }
                // Truncated.
                2 => p.truncate(p.len() - 1 - usize::from(a) % 64),
                // From another sender.
                3 => sender = 1,
                // Held back, delivered after the next one.
                4 => {
                    if let Some(h) = held.replace(p) {
                        p = h;
                    } else {
                        continue;
                    }
                }
                // Trailing bytes beyond the packet.
                5 => p.extend_from_slice(&[a, b]),
                _ => {}
            }
            let copies = if op == 6 { 2 } else { 1 };
            for _ in 0..copies {
                full.forget_prediction();
                let r_full = full.push_len(sender, &p);
                let r_fast = fast.push_len(sender, &p);
                proptest::prop_assert_eq!(r_fast, r_full);
            }
        }
        if let Some(h) = held {
            full.forget_prediction();
            proptest::prop_assert_eq!(fast.push_len(0, &h), full.push_len(0, &h));
        }
        fast.flush();
        full.flush();
        let mut st = fast.stats().clone();
        st.packets_predicted = 0;
        proptest::prop_assert_eq!(&st, full.stats());
        proptest::prop_assert_eq!(full.stats().packets_predicted, 0);
        while let Some(c) = full.poll_chunk() {
            proptest::prop_assert_eq!(Some(c), fast.poll_chunk());
        }
        proptest::prop_assert!(fast.poll_chunk().is_none());
    }

    /// `push_buffer`'s runs of predicted packets against the packet-by-packet
    /// full path, on one buffer of perturbed packets fed in segments, with
    /// or without packet presence, streaming copies, a free ring small
    /// enough to stall, and optionally the first packets from another sender
    /// (whose prediction a buffer, sender 0, must not use): every return
    /// value, counter and chunk byte must agree.
    #[test]
    fn predicted_runs_change_no_outcome(
        ops in proptest::collection::vec((0u8..16, proptest::prelude::any::<u8>(), proptest::prelude::any::<u8>()), 160),
        cuts in proptest::collection::vec(0u8..8, 160),
        presence in proptest::prelude::any::<bool>(),
        prefix in 0usize..3,
    ) {
        let cfg = FsimConfig {
            n_ants: 3,
            n_channels_total: 64,
            n_channels_per_stream: 4,
            n_samples_per_channel: 128,
            packet_payload: 256,
            ..FsimConfig::default()
        };
        let per_heap = cfg.packets_per_heap();
        proptest::prop_assert_eq!(per_heap, 8);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
        let mut ccfg = place.chunk_config(2, 2);
        if presence {
            ccfg.packet_presence = Some(256);
            ccfg.present_len = place.heaps_per_chunk() * per_heap;
        }
        proptest::prop_assert_eq!(ccfg.copy, CopyMode::Stream);
        let mut fast = ChunkStream::new(ccfg.clone(), place.clone());
        let mut full = ChunkStream::new(ccfg, place.clone());
        // The perturbed packets, in segments (whole packets) of one buffer each.
        let mut segments: Vec<Vec<u8>> = vec![Vec::new()];
        let mut start = 0;
        let mut held: Option<Vec<u8>> = None;
        for (i, &e) in ends.iter().enumerate() {
            let mut p = buf[start..e].to_vec();
            start = e;
            if i < prefix {
                let r = fast.push(1, &p);
                full.forget_prediction();
                proptest::prop_assert_eq!(r, full.push(1, &p));
                continue;
            }
            let (op, a, b) = ops[i % ops.len()];
            match op {
                0 => continue,
                // A header byte changed.
                1 => p[usize::from(a) % 96] ^= b.max(1),
                // The payload offset's value bits changed (item 3).
                2 => p[8 + 3 * 8 + 2 + usize::from(a) % 6] ^= b.max(1),
                // Truncated (the next packet then starts inside it).
                3 if a < 16 => p.truncate(p.len() - 1 - usize::from(b) % 64),
                // Held back, delivered after the next one.
                4 => {
                    if let Some(h) = held.replace(p) {
                        p = h;
                    } else {
                        continue;
                    }
                }
                _ => {}
            }
            let copies = if op == 6 { 2 } else { 1 };
            for _ in 0..copies {
                segments.last_mut().unwrap().extend_from_slice(&p);
            }
            if cuts[i % cuts.len()] == 0 {
                segments.push(Vec::new());
            }
        }
        if let Some(h) = held {
            segments.last_mut().unwrap().extend_from_slice(&h);
        }
        // push_buffer without its runs or prediction: push_len packet by packet.
        fn by_packet<P: Place>(s: &mut ChunkStream<P>, buf: &[u8]) -> (usize, Push) {
            let mut at = 0;
            let mut last = Push::Accepted;
            while at < buf.len() {
                s.forget_prediction();
                let (r, len) = s.push_len(0, &buf[at..]);
                last = r;
                match r {
                    Push::Stall => return (at, r),
                    Push::Stopped => return (at + len, r),
                    Push::Discarded(ChunkDiscard::Malformed) => return (at, r),
                    _ => at += len,
                }
            }
            (at, last)
        }
        let mut chunks_fast = Vec::new();
        let mut chunks_full = Vec::new();
        for seg in &segments {
            let (mut at_fast, mut at_full) = (0, 0);
            loop {
                let r_fast = fast.push_buffer(&seg[at_fast..]);
                let r_full = by_packet(&mut full, &seg[at_full..]);
                proptest::prop_assert_eq!(r_fast, r_full);
                at_fast += r_fast.0;
                at_full += r_full.0;
                if r_fast.1 != Push::Stall {
                    break;
                }
                // Chunks come back only when the stream stalls.
                for (s, out) in [(&mut fast, &mut chunks_fast), (&mut full, &mut chunks_full)] {
                    while let Some(c) = s.poll_chunk() {
                        out.push(c.clone());
                        s.add_free_chunk(c);
                    }
                }
            }
        }
        fast.flush();
        full.flush();
        let mut st = fast.stats().clone();
        st.packets_predicted = 0;
        proptest::prop_assert_eq!(&st, full.stats());
        proptest::prop_assert_eq!(full.stats().packets_predicted, 0);
        while let Some(c) = full.poll_chunk() {
            chunks_full.push(c);
        }
        while let Some(c) = fast.poll_chunk() {
            chunks_fast.push(c);
        }
        proptest::prop_assert_eq!(chunks_fast, chunks_full);
    }

    #[test]
    fn loss_and_duplicates_reflected_in_present(fate in proptest::collection::vec(0u8..20, 96)) {
        use crate::spead::check::Checker;
        let cfg = small_fsim(3);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let per_heap = cfg.packets_per_heap();
        let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(8).unwrap();
        let mut s = ChunkStream::new(place.chunk_config(2, 8), place.clone());
        // fate 0: lost; 1: duplicated; otherwise delivered once.
        let mut start = 0;
        let mut heap_whole = vec![true; ends.len() / per_heap];
        for (i, &e) in ends.iter().enumerate() {
            let p = &buf[start..e];
            start = e;
            match fate[i % fate.len()] {
                0 => heap_whole[i / per_heap] = false,
                1 => {
                    proptest::prop_assert_eq!(s.push(0, p), Push::Accepted);
                    let again = s.push(0, p);
                    proptest::prop_assert!(matches!(again, Push::Accepted | Push::Discarded(ChunkDiscard::Duplicate)));
                }
                _ => proptest::prop_assert_eq!(s.push(0, p), Push::Accepted),
            }
        }
        s.flush();
        let mut checker = Checker::new(place.clone(), 0);
        let mut present = Vec::new();
        while let Some(c) = s.poll_chunk() {
            proptest::prop_assert_eq!(checker.check(&c, |_| {}), 0);
            present.extend(c.present.iter().map(|&p| p == 1));
        }
        // Heap order in the stream (timestamp-major, antenna-minor) is the
        // present-map order across consecutive chunks here.
        proptest::prop_assert_eq!(present, heap_whole.clone());
        proptest::prop_assert_eq!(
            s.stats().heaps_complete as usize,
            heap_whole.iter().filter(|&&w| w).count()
        );
    }
}
