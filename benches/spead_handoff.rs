//! The cost of one chunk hand-off in a SPEAD receive group, measured: the `t`
//! of the group-lock model in docs/src/design/spead-group.md (its last section).
//!
//! ```text
//! cargo bench --bench spead_handoff -- [PASSES] [MEMBERS]
//! ```
//!
//! Each member (pinned to its own core) pushes, per chunk, two packets of
//! its share (the F-engine simulator's single-packet 1 KiB heaps, as
//! `spead_group`): the first needs a chunk the member does not hold (the
//! group's lock: `acquire`, the window moves, the member lets go of its
//! oldest chunk), the second lands in the chunk it now holds (no lock). Both
//! pushes do the same per-packet work (decode, place, claim, copy 1 KiB), so
//! their difference is the hand-off. The member is also the consumer, as a
//! pipeline's sink lcore would be: after the pair it takes every ready chunk
//! (`poll_chunk`, two lock takes, and between them, away from the lock, the
//! members' present bitmaps ORed) and gives it back
//! (`add_free_chunk`: one lock take with one push under it, timed alone too).
//! Each push and each poll is timed alone with `Instant` (its own cost, about
//! 20-40 ns on this VM, is in every figure and cancels in the difference).
//! With 2 members on 2 cores the lock's line moves between cores on each
//! take. Prints one JSON line per member count with the median and p99 in ns
//! of: a new-chunk push, a same-chunk push, their difference, the consumer's
//! poll + free per chunk, the free alone, and the wall time per chunk per
//! member (which includes first-touch page faults of the 24 chunks: use
//! enough passes).

mod spead_common;

use std::time::Instant;

use hdrhistogram::Histogram;
use linerate::spead::chunk::Push;
use linerate::spead::fsim::{Fsim, FENG_ID_ID, TIMESTAMP_ID};
use linerate::spead::group::ChunkGroup;
use linerate::spead::wire::decode_visit;
use spead_common::{cfg, group, Members, CHUNKS_PER_PASS, HEAPS_PER_CHUNK, N_TS};

/// Per member, per chunk of the stretch: its first two packets.
fn pairs(n: usize) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut f = Fsim::new(cfg()).expect("valid simulator");
    let (buf, ends) = f.packets_buffer(N_TS).expect("packets");
    let mut firsts: Vec<Vec<Vec<Vec<u8>>>> = vec![vec![Vec::new(); CHUNKS_PER_PASS as usize]; n];
    let mut stamps: Vec<u64> = Vec::new();
    let mut start = 0;
    for &e in &ends {
        let p = &buf[start..e];
        start = e;
        let (mut feng, mut ts) = (0, 0);
        decode_visit(p, |item, v| match item {
            FENG_ID_ID => feng = v,
            TIMESTAMP_ID => ts = v,
            _ => {}
        })
        .expect("simulator packets decode");
        let i = match stamps.iter().position(|&s| s == ts) {
            Some(i) => i,
            None => {
                stamps.push(ts);
                stamps.len() - 1
            }
        };
        let chunk = i / HEAPS_PER_CHUNK as usize;
        let slot = &mut firsts[feng as usize % n][chunk];
        if slot.len() < 2 {
            slot.push(p.to_vec());
        }
    }
    firsts
        .into_iter()
        .map(|m| {
            m.into_iter()
                .map(|mut c| {
                    assert_eq!(c.len(), 2, "two packets per chunk per member");
                    let b = c.pop().expect("second");
                    (c.pop().expect("first"), b)
                })
                .collect()
        })
        .collect()
}

struct Hists {
    new_chunk: Histogram<u64>,
    same_chunk: Histogram<u64>,
    diff: Histogram<u64>,
    consume: Histogram<u64>,
    /// `add_free_chunk` alone: one lock take with a push under it.
    free: Histogram<u64>,
    stalls: u64,
    chunks: u64,
    wall_ns: u64,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn ns(t: Instant) -> u64 {
    (t.elapsed().as_nanos() as u64).max(1)
}

fn round(n: usize, set: &[Vec<(Vec<u8>, Vec<u8>)>], passes: usize) -> Hists {
    // One chunk per lock take: every new chunk is a hand-off (`t` of the model).
    let (group, members) = group(1, n);
    let set = set.to_vec();
    let g = group.clone();
    let threads = Members::spawn(
        members,
        move |k| set[k].clone(),
        move |_, mut m, mine: Vec<(Vec<u8>, Vec<u8>)>| {
            let mut h = Hists {
                new_chunk: hist(),
                same_chunk: hist(),
                diff: hist(),
                consume: hist(),
                free: hist(),
                stalls: 0,
                chunks: 0,
                wall_ns: 0,
            };
            let t0 = Instant::now();
            for pass in 0..passes {
                m.place_mut().shift = pass as i64 * CHUNKS_PER_PASS;
                for (first, second) in &mine {
                    // The timed new-chunk push is the one that succeeds;
                    // stalls (the other member holds the window's head)
                    // are counted, and what they cost is in the wall time.
                    let a = loop {
                        let s = Instant::now();
                        match m.push(0, first) {
                            Push::Stall => {
                                h.stalls += 1;
                                m.sync();
                                drain(&g, &mut h);
                                for _ in 0..64 {
                                    std::hint::spin_loop();
                                }
                            }
                            _ => break ns(s),
                        }
                    };
                    let s = Instant::now();
                    let _ = m.push(0, second);
                    let b = ns(s);
                    h.new_chunk.record(a).ok();
                    h.same_chunk.record(b).ok();
                    h.diff.record(a.saturating_sub(b).max(1)).ok();
                    m.sync();
                    drain(&g, &mut h);
                }
            }
            m.flush();
            h.wall_ns = ns(t0);
            h
        },
    );
    threads.go();
    let mut out: Option<Hists> = None;
    for h in threads.join() {
        match &mut out {
            None => out = Some(h),
            Some(o) => {
                o.new_chunk.add(&h.new_chunk).ok();
                o.same_chunk.add(&h.same_chunk).ok();
                o.diff.add(&h.diff).ok();
                o.consume.add(&h.consume).ok();
                o.free.add(&h.free).ok();
                o.stalls += h.stalls;
                o.chunks += h.chunks;
                o.wall_ns = o.wall_ns.max(h.wall_ns);
            }
        }
    }
    drop(group);
    out.expect("at least one member")
}

/// Takes every ready chunk and gives it back, timing each.
fn drain(group: &ChunkGroup, h: &mut Hists) {
    loop {
        let s = Instant::now();
        match group.poll_chunk() {
            Some(c) => {
                let f = Instant::now();
                group.add_free_chunk(c);
                h.free.record(ns(f)).ok();
                h.consume.record(ns(s)).ok();
                h.chunks += 1;
            }
            None => return,
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let passes: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let many: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let timer = {
        let mut t = hist();
        for _ in 0..100_000 {
            let s = Instant::now();
            t.record(ns(s)).ok();
        }
        t.value_at_quantile(0.5)
    };
    for n in [1, many] {
        let set = pairs(n);
        let h = round(n, &set, passes);
        let q = |x: &Histogram<u64>| (x.value_at_quantile(0.5), x.value_at_quantile(0.99));
        let (nm, n99) = q(&h.new_chunk);
        let (sm, s99) = q(&h.same_chunk);
        let (dm, d99) = q(&h.diff);
        let (cm, c99) = q(&h.consume);
        let (fm, f99) = q(&h.free);
        let per_member_chunks = (passes as u64 * CHUNKS_PER_PASS as u64).max(1);
        println!(
            "{{\"members\": {n}, \"chunks\": {}, \"timer_ns\": {timer}, \
             \"new_chunk_push_ns\": [{nm}, {n99}], \"same_chunk_push_ns\": [{sm}, {s99}], \
             \"handoff_ns\": [{dm}, {d99}], \"consume_ns\": [{cm}, {c99}], \"free_ns\": [{fm}, {f99}], \
             \"stalls\": {}, \"wall_ns_per_chunk_per_member\": {:.0}}}",
            h.chunks,
            h.stalls,
            h.wall_ns as f64 / per_member_chunks as f64
        );
    }
}
