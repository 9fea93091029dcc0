use super::*;
use crate::buf::copy::CopyMode;
use crate::spead::chunk::{ChunkStream, KatgpucbfPlace, PlaceInput, Placement};
use crate::spead::fsim::{Fsim, FsimConfig, FENG_ID_ID};
use crate::spead::wire::{ctrl, decode_visit, emit_packet, id, Flavour};

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

/// The simulator's packets for `n_ts` timestamps, each with its F-engine.
fn fsim_packets(cfg: &FsimConfig, n_ts: u64) -> Vec<(u64, Vec<u8>)> {
    let (buf, ends) = Fsim::new(cfg.clone())
        .unwrap()
        .packets_buffer(n_ts)
        .unwrap();
    let mut out = Vec::new();
    let mut start = 0;
    for &e in &ends {
        let p = buf[start..e].to_vec();
        start = e;
        let mut feng = 0;
        decode_visit(&p, |item, v| {
            if item == FENG_ID_ID {
                feng = v;
            }
        })
        .unwrap();
        out.push((feng, p));
    }
    out
}

fn config(place: &KatgpucbfPlace) -> ChunkConfig {
    let mut c = place.chunk_config(2, 16);
    c.max_heaps = 256;
    c.copy = CopyMode::Plain;
    c
}

/// Chunks, sorted by id, with the data of absent heaps zeroed (neither
/// receiver promises anything about those bytes).
fn normalise(mut chunks: Vec<Chunk>, stride: usize) -> Vec<Chunk> {
    chunks.sort_by_key(|c| c.chunk_id);
    for c in &mut chunks {
        for (i, &p) in c.present.iter().enumerate() {
            if p == 0 {
                c.data[i * stride..(i + 1) * stride].fill(0);
            }
        }
    }
    chunks
}

fn single(place: &KatgpucbfPlace, packets: &[&[u8]]) -> (Vec<Chunk>, ChunkStats) {
    let mut s = ChunkStream::new(config(place), place.clone());
    let mut out = Vec::new();
    for p in packets {
        assert_eq!(s.push(0, p), Push::Accepted);
        while let Some(c) = s.poll_chunk() {
            out.push(c.clone());
            s.add_free_chunk(c);
        }
    }
    s.flush();
    while let Some(c) = s.poll_chunk() {
        out.push(c);
    }
    (out, s.stats().clone())
}

proptest::proptest! {
    /// Heaps spread over members by F-engine (as multicast groups or RSS
    /// would), packets reordered within each chunk's span between and
    /// within members, some lost: the group builds the chunks and present
    /// maps a single receiver builds from the same packets, and the
    /// members' counters add up to its counters. The consumer gives
    /// every chunk back, and there are more chunks of packets (20) than
    /// the group has (16): recycled chunks (a new generation of owner
    /// words and members' present rows, nothing cleared) build the same
    /// chunks as fresh ones. Members take their packets one by one
    /// (`burst` 0) or in bursts of up to `burst` (a member's next packets
    /// in the same order: `Member::push_burst`).
    #[test]
    fn a_group_builds_what_a_single_receiver_builds(
        members in 1usize..4,
        burst in 0usize..9,
        keys in proptest::collection::vec((proptest::prelude::any::<u16>(), 0u8..10), 192),
    ) {
        let cfg = small_fsim(4);
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let all = fsim_packets(&cfg, 40);
        let per_chunk = all.len() / 20;
        let mut order: Vec<(u64, &[u8])> = Vec::new();
        for (g, group) in all.chunks(per_chunk).enumerate() {
            let mut v: Vec<(u16, u8, u64, &[u8])> = group
                .iter()
                .enumerate()
                .map(|(i, (f, p))| {
                    let (k, loss) = keys[(g * per_chunk + i) % keys.len()];
                    (k, loss, *f, &p[..])
                })
                .collect();
            v.sort_by_key(|x| x.0);
            // One packet in ten lost.
            order.extend(v.into_iter().filter(|x| x.1 != 0).map(|x| (x.2, x.3)));
        }
        let packets: Vec<&[u8]> = order.iter().map(|x| x.1).collect();
        let (want, want_stats) = single(&place, &packets);

        let group = ChunkGroup::new(config(&place), Eviction::Lossy).unwrap();
        let mut ms: Vec<Member<KatgpucbfPlace>> =
            (0..members).map(|_| group.member(place.clone()).unwrap()).collect();
        let mut got = Vec::new();
        let mut at = 0;
        while at < order.len() {
            let k = order[at].0 as usize % members;
            let m = &mut ms[k];
            m.sync();
            if burst == 0 {
                proptest::prop_assert_eq!(m.push(0, order[at].1), Push::Accepted);
                at += 1;
            } else {
                // This member's next packets, up to `burst` of them.
                let run: Vec<&[u8]> = order[at..]
                    .iter()
                    .take_while(|x| x.0 as usize % members == k)
                    .take(burst)
                    .map(|x| x.1)
                    .collect();
                let r = m.push_burst(0, &run);
                proptest::prop_assert_eq!(r, Pushed { taken: run.len(), stopped: false });
                at += run.len();
            }
            while let Some(c) = group.poll_chunk() {
                got.push(c.clone());
                group.add_free_chunk(c);
            }
        }
        for m in &mut ms {
            m.flush();
        }
        group.flush();
        while let Some(c) = group.poll_chunk() {
            got.push(c);
        }
        let stride = group.inner.stride;
        let got = normalise(got, stride);
        let want = normalise(want, stride);
        proptest::prop_assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(&want) {
            proptest::prop_assert_eq!(a.chunk_id, b.chunk_id);
            proptest::prop_assert_eq!(&a.present, &b.present);
            proptest::prop_assert!(a.data[..] == b.data[..], "chunk {} data", a.chunk_id);
        }
        let sum = sum_stats(ms.iter().map(|m| m.stats()));
        proptest::prop_assert_eq!(sum.packets, want_stats.packets);
        proptest::prop_assert_eq!(sum.packets_accepted, want_stats.packets_accepted);
        proptest::prop_assert_eq!(sum.heaps_complete, want_stats.heaps_complete);
        proptest::prop_assert_eq!(sum.bytes, want_stats.bytes);
        proptest::prop_assert_eq!(sum.packets_too_old, 0);
        let gs = group.stats();
        proptest::prop_assert_eq!(gs.chunks, want_stats.chunks);
        proptest::prop_assert_eq!(gs.present, want_stats.present);
        proptest::prop_assert_eq!(gs.present_slots, want_stats.present_slots);
    }
}

/// Heap number `n` (item 0x1600) in chunk `n / 4`, index `n % 4`, 8 bytes.
#[derive(Clone)]
struct Simple {
    ids: [u64; 1],
}

impl Place for Simple {
    fn item_ids(&self) -> &[u64] {
        &self.ids
    }
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
        let n = input.items[0]?;
        Some(Placement {
            chunk_id: (n / 4) as i64,
            heap_index: (n % 4) as usize,
            heap_offset: (n % 4) as usize * 8,
        })
    }
}

/// Members get `batch` chunks per take of the group's lock.
fn simple_group_batch(eviction: Eviction, batch: usize) -> ChunkGroup {
    ChunkGroup::with_batch(
        ChunkConfig {
            max_chunks: 2,
            n_chunks: 8,
            chunk_bytes: 32,
            present_len: 4,
            max_heaps: 4,
            packet_presence: None,
            copy: CopyMode::Plain,
        },
        eviction,
        batch,
    )
    .unwrap()
}

/// One chunk per lock take (the eviction tests' exact windows).
fn simple_group(eviction: Eviction) -> ChunkGroup {
    simple_group_batch(eviction, 1)
}

fn pkt(n: u64) -> Vec<u8> {
    let f = Flavour::SPEAD_64_48;
    let data: Vec<u8> = (0..8).map(|i| (n * 10 + i) as u8).collect();
    let mut buf = vec![0u8; 200];
    let items = [f.immediate(0x1600, n).unwrap()];
    let len = emit_packet(&mut buf, f, n, Some(8), 0, &items, &data).unwrap();
    buf.truncate(len);
    buf
}

fn simple() -> Simple {
    Simple { ids: [0x1600] }
}

#[test]
fn lossy_moves_on_and_delivers_once_the_laggard_lets_go() {
    let g = simple_group(Eviction::Lossy);
    let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
    assert_eq!(b.push(0, &pkt(1)), Push::Accepted);
    for n in [0, 4, 8, 12, 16] {
        assert_eq!(a.push(0, &pkt(n)), Push::Accepted);
    }
    // Chunk 0 left the group's window (4 chunks) while b held it: not
    // delivered yet.
    assert_eq!(g.window(), (1, 5));
    assert_eq!(g.stats().evicted_held, 1);
    assert!(g.poll_chunk().is_none());
    b.sync();
    let c = g.poll_chunk().unwrap();
    assert_eq!((c.chunk_id, &c.present[..]), (0, &[1, 1, 0, 0][..]));
    assert_eq!(&c.data[8..16], &[10, 11, 12, 13, 14, 15, 16, 17]);
    // b's later heap for chunk 0 is too old; another member's duplicate of a
    // heap is a duplicate.
    assert_eq!(b.push(0, &pkt(2)), Push::Discarded(ChunkDiscard::TooOld));
    assert_eq!(b.push(0, &pkt(4)), Push::Discarded(ChunkDiscard::Duplicate));
    assert_eq!(b.stats().packets_too_old, 1);
    assert_eq!(b.stats().packets_duplicate, 1);
}

#[test]
fn a_member_behind_the_window_refuses_old_heaps_without_the_lock() {
    let g = simple_group(Eviction::Lossy);
    let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
    for n in [0, 4, 8, 12, 16, 20] {
        assert_eq!(a.push(0, &pkt(n)), Push::Accepted);
    }
    // b never synced: its first heap for chunk 0 finds it gone at the lock.
    let takes = g.stats().takes;
    assert_eq!(b.push(0, &pkt(1)), Push::Discarded(ChunkDiscard::TooOld));
    assert_eq!(g.stats().takes, takes + 1);
    // Then it knows where the window starts: no more takes for old chunks.
    assert_eq!(b.push(0, &pkt(2)), Push::Discarded(ChunkDiscard::TooOld));
    assert_eq!(b.push(0, &pkt(5)), Push::Discarded(ChunkDiscard::TooOld));
    assert_eq!(g.stats().takes, takes + 1);
    assert_eq!(b.stats().packets_too_old, 3);
    // A heap inside the window is still accepted.
    assert_eq!(b.push(0, &pkt(21)), Push::Accepted);
}

#[test]
fn lossless_waits_for_the_laggard() {
    let g = simple_group(Eviction::Lossless);
    let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
    assert_eq!(b.push(0, &pkt(1)), Push::Accepted);
    assert_eq!(a.push(0, &pkt(0)), Push::Accepted);
    assert_eq!(a.push(0, &pkt(4)), Push::Accepted);
    assert_eq!(a.push(0, &pkt(8)), Push::Accepted);
    assert_eq!(a.push(0, &pkt(12)), Push::Accepted);
    // Chunk 4 would push chunk 0 out of the group's window (4 chunks)
    // before b is done with it: a waits.
    assert_eq!(a.push(0, &pkt(16)), Push::Stall);
    assert_eq!(a.stats().stalls, 1);
    assert_eq!(g.stats().waits, 1);
    // b moves on (letting go of chunk 0 as its own window slides), then a.
    assert_eq!(b.push(0, &pkt(9)), Push::Accepted);
    assert_eq!(a.push(0, &pkt(16)), Push::Accepted);
    let c = g.poll_chunk().unwrap();
    assert_eq!((c.chunk_id, &c.present[..]), (0, &[1, 1, 0, 0][..]));
    assert_eq!(g.stats().evicted_held, 0);
}

#[test]
fn a_burst_stops_where_it_stalls_and_goes_on_from_there() {
    let g = simple_group(Eviction::Lossless);
    let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
    let p: Vec<Vec<u8>> = (0..20).map(pkt).collect();
    let r = b.push_burst(0, &[&p[1]]);
    assert_eq!(
        r,
        Pushed {
            taken: 1,
            stopped: false
        }
    );
    // As `lossless_waits_for_the_laggard`: chunk 4 waits for b.
    let burst: Vec<&[u8]> = [0, 4, 8, 12, 16, 17].iter().map(|&n| &p[n][..]).collect();
    let r = a.push_burst(0, &burst);
    assert_eq!(
        r,
        Pushed {
            taken: 4,
            stopped: false
        }
    );
    assert_eq!((a.stats().stalls, a.stats().packets_accepted), (1, 4));
    assert!(g.poll_chunk().is_none());
    // Offered again while b still holds chunk 0: still stalled (its first
    // packet alone, the plain way), nothing taken, nothing counted twice.
    assert_eq!(a.push_burst(0, &burst[4..]).taken, 0);
    assert_eq!((a.stats().stalls, a.stats().packets_accepted), (2, 4));
    assert_eq!(b.push_burst(0, &[&p[9]]).taken, 1);
    assert_eq!(a.push_burst(0, &burst[4..]).taken, 2);
    assert_eq!(a.stats().packets_accepted, 6);
    // Chunk 0 went out with both members' bytes in it.
    let c = g.poll_chunk().unwrap();
    assert_eq!((c.chunk_id, &c.present[..]), (0, &[1, 1, 0, 0][..]));
    let want: Vec<u8> = (0..8).chain(10..18).collect();
    assert_eq!(&c.data[..16], &want[..]);
    assert_eq!(&c.data[16..], &[0; 16][..]);
}

#[test]
fn a_burst_counts_what_one_by_one_counts() {
    // Duplicates inside one burst, a heap too old, a stop heap.
    let f = Flavour::SPEAD_64_48;
    let mut stop = vec![0u8; 200];
    let items = [f.immediate(id::STREAM_CTRL, ctrl::STOP).unwrap()];
    let n = emit_packet(&mut stop, f, 99, Some(0), 0, &items, &[]).unwrap();
    stop.truncate(n);
    let p: Vec<Vec<u8>> = [1, 1, 2, 12, 21, 1, 21].into_iter().map(pkt).collect();
    let mut seq: Vec<&[u8]> = p.iter().map(|x| &x[..]).collect();
    seq.push(&stop);
    seq.push(&p[2]);
    let one = simple_group(Eviction::Lossy);
    let mut m1 = one.member(simple()).unwrap();
    let want: Vec<Push> = seq.iter().map(|x| m1.push(0, x)).collect();
    assert!(want.contains(&Push::Discarded(ChunkDiscard::Duplicate)));
    assert!(want.contains(&Push::Discarded(ChunkDiscard::TooOld)));
    let burst = simple_group(Eviction::Lossy);
    let mut m2 = burst.member(simple()).unwrap();
    let r = m2.push_burst(0, &seq);
    assert_eq!(
        r,
        Pushed {
            taken: seq.len(),
            stopped: true
        }
    );
    assert_eq!(m2.stats(), m1.stats());
    m1.finish();
    m2.finish();
    let drain = |g: &ChunkGroup| {
        g.flush();
        std::iter::from_fn(|| g.poll_chunk()).collect::<Vec<_>>()
    };
    assert_eq!(drain(&burst), drain(&one));
}

#[test]
fn a_group_refuses_what_it_cannot_share() {
    let mut cfg = simple_group(Eviction::Lossy).config().clone();
    cfg.packet_presence = Some(4);
    assert_eq!(
        ChunkGroup::new(cfg.clone(), Eviction::Lossy).unwrap_err(),
        GroupError::PacketPresence
    );
    cfg.packet_presence = None;
    cfg.chunk_bytes = 30;
    assert!(matches!(
        ChunkGroup::new(cfg, Eviction::Lossy),
        Err(GroupError::Stride(30, 4))
    ));
    // A placement off the stride is out of bounds, never written.
    struct Off;
    impl Place for Off {
        fn item_ids(&self) -> &[u64] {
            &[0x1600]
        }
        fn place(&mut self, _: &PlaceInput<'_>) -> Option<Placement> {
            Some(Placement {
                chunk_id: 0,
                heap_index: 1,
                heap_offset: 4,
            })
        }
    }
    let g = simple_group(Eviction::Lossy);
    let mut m = g.member(Off).unwrap();
    assert_eq!(
        m.push(0, &pkt(1)),
        Push::Discarded(ChunkDiscard::OutOfBounds)
    );
}

#[test]
fn members_on_threads_fill_the_same_chunks() {
    // Lossless, so the result cannot depend on timing: 3 members on 3
    // threads, the consumer on this one.
    let cfg = small_fsim(6);
    let place = KatgpucbfPlace::for_fsim(&cfg, 2);
    let all = fsim_packets(&cfg, 40);
    let packets: Vec<&[u8]> = all.iter().map(|x| &x.1[..]).collect();
    let (want, _) = single(&place, &packets);
    let group = ChunkGroup::new(config(&place), Eviction::Lossless).unwrap();
    // Every member joins before any receives (as in spead2).
    let members: Vec<_> = (0..3)
        .map(|_| group.member(place.clone()).unwrap())
        .collect();
    let threads: Vec<_> = (0..3u64)
        .zip(members)
        .map(|(k, mut m)| {
            let mine: Vec<Vec<u8>> = all
                .iter()
                .filter(|x| x.0 % 3 == k)
                .map(|x| x.1.clone())
                .collect();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                if k > 0 {
                    // Bursts of 3 and 6 (member 0 takes them one by one).
                    let all: Vec<&[u8]> = mine.iter().map(|p| &p[..]).collect();
                    for burst in all.chunks(3 * k as usize) {
                        let mut at = 0;
                        while at < burst.len() {
                            m.sync();
                            let r = m.push_burst(0, &burst[at..]);
                            at += r.taken;
                            if at < burst.len() {
                                assert!(std::time::Instant::now() < deadline, "stalled");
                                std::thread::yield_now();
                            }
                        }
                    }
                    m.flush();
                    return m.stats().clone();
                }
                for p in &mine {
                    loop {
                        m.sync();
                        match m.push(0, p) {
                            Push::Stall => {
                                assert!(std::time::Instant::now() < deadline, "stalled");
                                std::thread::yield_now();
                            }
                            r => {
                                assert_eq!(r, Push::Accepted);
                                break;
                            }
                        }
                    }
                }
                m.flush();
                m.stats().clone()
            })
        })
        .collect();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Consume (and give back) until every member has finished.
    while !threads.iter().all(|t| t.is_finished()) {
        assert!(std::time::Instant::now() < deadline, "members stuck");
        match group.poll_chunk() {
            Some(c) => {
                let copy = c.clone();
                group.add_free_chunk(c);
                got.push(copy);
            }
            None => std::thread::yield_now(),
        }
    }
    let stats: Vec<ChunkStats> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    group.flush();
    while let Some(c) = group.poll_chunk() {
        got.push(c);
    }
    let stride = group.inner.stride;
    assert_eq!(normalise(got, stride), normalise(want, stride));
    assert_eq!(sum_stats(&stats).packets_accepted, packets.len() as u64);
    // Heaps of several packets: members take the single receiver's
    // header-prediction fast path too.
    assert!(sum_stats(&stats).packets_predicted > 0);
}

#[test]
fn a_member_takes_the_lock_once_per_batch() {
    for (batch, takes) in [(1, 6), (2, 3), (3, 2)] {
        let g = simple_group_batch(Eviction::Lossless, batch);
        let mut a = g.member(simple()).unwrap();
        for chunk in 0..6 {
            assert_eq!(a.push(0, &pkt(chunk * 4)), Push::Accepted);
            while let Some(c) = g.poll_chunk() {
                g.add_free_chunk(c);
            }
        }
        let st = g.stats();
        assert_eq!((st.takes, st.ahead), (takes, 6 - takes), "batch {batch}");
        assert_eq!(st.waits + st.stalls, 0);
    }
}

#[test]
fn a_member_moving_inside_its_batch_lets_a_lossless_group_move_on() {
    // Members keep 2 chunks and get 3 per lock take.
    let g = simple_group_batch(Eviction::Lossless, 3);
    let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
    assert_eq!(b.push(0, &pkt(1)), Push::Accepted);
    assert_eq!(b.held(), 3, "chunk 0 and two ahead");
    for n in [0, 4, 8, 12, 16, 20] {
        assert_eq!(a.push(0, &pkt(n)), Push::Accepted);
    }
    // Chunk 6 would leave the group's window (4 chunks behind it) past
    // chunk 0, which b still holds: a waits.
    assert_eq!(a.push(0, &pkt(24)), Push::Stall);
    assert!(g.poll_chunk().is_none());
    // b moves to chunk 2, which it was given ahead: no lock take, and its
    // window (2 chunks) lets go of chunk 0, which it says with a store.
    let takes = g.stats().takes;
    assert_eq!(b.push(0, &pkt(9)), Push::Accepted);
    assert_eq!(g.stats().takes, takes);
    // So the group moves past chunk 0 (and delivers it), and waits at
    // chunk 1, which b still holds.
    assert_eq!(a.push(0, &pkt(24)), Push::Stall);
    let c = g.poll_chunk().unwrap();
    assert_eq!((c.chunk_id, &c.present[..]), (0, &[1, 1, 0, 0][..]));
    g.add_free_chunk(c);
    // b moves on to chunk 4 (a lock take), letting go of chunks 1 and 2.
    assert_eq!(b.push(0, &pkt(17)), Push::Accepted);
    assert_eq!(a.push(0, &pkt(24)), Push::Accepted);
    assert_eq!(g.poll_chunk().unwrap().chunk_id, 1);
    assert_eq!(g.stats().evicted_held, 0);
}

#[test]
fn a_stop_heap_releases_the_chunks_given_ahead() {
    let g = simple_group_batch(Eviction::Lossless, 2);
    let (mut a, mut b) = (g.member(simple()).unwrap(), g.member(simple()).unwrap());
    assert_eq!(b.push(0, &pkt(1)), Push::Accepted);
    assert_eq!(b.held(), 2);
    for n in [0, 4, 8, 12] {
        assert_eq!(a.push(0, &pkt(n)), Push::Accepted);
    }
    assert_eq!(a.push(0, &pkt(16)), Push::Stall);
    let f = Flavour::SPEAD_64_48;
    let mut buf = [0u8; 100];
    let stop = f.immediate(id::STREAM_CTRL, ctrl::STOP).unwrap();
    let n = emit_packet(&mut buf, f, 50, Some(0), 0, &[stop], &[]).unwrap();
    assert_eq!(b.push(0, &buf[..n]), Push::Stopped);
    assert_eq!(b.held(), 0);
    // b is done with every chunk: the group no longer waits for it.
    for n in [16, 20, 24, 28, 32] {
        assert_eq!(a.push(0, &pkt(n)), Push::Accepted);
        while let Some(c) = g.poll_chunk() {
            g.add_free_chunk(c);
        }
    }
    assert_eq!(g.stats().evicted_held, 0);
}
