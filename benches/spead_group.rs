//! A SPEAD receive group from memory buffers: 1 member against 2 (or more),
//! each member on its own pinned core, alternating rounds, medians.
//!
//! ```text
//! cargo bench --bench spead_group -- [ROUNDS] [MIB_PER_MEMBER] [MEMBERS] [BATCH] [NAP_US]
//! ```
//!
//! The packets are the F-engine simulator's in `single` mode of
//! `spead_chunks` (64 antennas, 1 KiB heaps in one packet, 32 heaps per
//! antenna per chunk). Member k gets the heaps of antennas `a % n == k` (what
//! multicast groups or RSS by source would give it), as one buffer it walks
//! in bursts of 32 packets (`Member::push_burst`, as the stage hands it a
//! port's burst), as many times as needed for `MIB_PER_MEMBER` of packets
//! (the timestamps keep increasing: each pass is a fresh stretch of chunks).
//! Each member copies its buffer on its own thread before the clock starts,
//! into huge-page memory (2 MiB-aligned, THP-advised, as the chunks are): a
//! receiver's packets sit in a DPDK mbuf pool in hugepages, and this input
//! models that pool, where a plain `Vec` would add a page walk every few
//! packets that no real receiver pays.
//! `BATCH` is the chunks a member gets per take of the group's lock (default:
//! the group's, a member's window of 4). The main thread is the consumer: it
//! takes every chunk and gives it back, polling every `NAP_US` (default
//! 1000) us (it sleeps in between, so it does not compete with the members
//! for their cores), and times that work. On 2 cores it shares one with a
//! member: each wake-up takes from that member, and a lossless group runs at
//! its slower member's pace (100 us read 1.40-1.61x, 1000 us 1.62-1.79x in
//! one run); the 13 or so chunks not in the window (24 in all) cover 2 ms
//! at 12 M packets/s, so the nap never stalls a member.
//!
//! Diagnostics, in the environment:
//! - `LR_LOSSY=1` makes the group lossy (members no longer wait for each
//!   other, and the slower one's late heaps are counted too old);
//! - `LR_NTS=T` makes the stretch of packets `T` timestamps (default 1024: 71
//!   MiB of input for one member; 64 keeps it in the caches);
//! - `LR_APART=1` gives each member a group of its own (members then share
//!   no chunk, slot or lock, only the consumer thread and the machine);
//! - `LR_ONE_BY_ONE=1`: members push packet by packet (`Member::push`, no
//!   prefetch);
//! - `LR_SMALLPAGES=1`: the input in a plain `Vec` (4 KiB pages);
//! - `LR_PLAIN=1`: the chunks written with ordinary stores, not
//!   non-temporal ones;
//! - `LR_BARE=1|store|cas|cas-hot|cas-burst`: no group at all, each member
//!   copies each payload with the same non-temporal stores to the bytes the
//!   group would place it at (a ring of 24 chunks of its own), adding only: a
//!   plain store to the heap's owner word (`store`), a compare-and-swap of it
//!   as the group's claim (`cas`; `cas-hot` on one chunk's words, which stay
//!   cached), or the claims of each burst of 32 before its copies
//!   (`cas-burst`). `LR_BARE=1` is the memory system's ceiling for these
//!   packets on this machine, the others what a claim per packet costs.
//!
//! Prints one JSON line per round (rate, chunks, the group's lock takes by
//! members and by the consumer, lossless waits, the consumer's busy time)
//! and the medians with their ratio.

mod spead_common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use linerate::buf::copy::{store_fence, stream_copy};
use linerate::spead::chunk::{ChunkBuf, Push};
use linerate::spead::fsim::{Fsim, FENG_ID_ID};
use linerate::spead::group::GroupStats;
use linerate::spead::wire::decode_visit;
use spead_common::{cfg, group, median, Members, HEAPS_PER_CHUNK, N_TS};

/// One member's packets, back to back, and where each ends.
type Packets = (Vec<u8>, Vec<usize>);

/// A member's input as it receives it: huge-page backed (2 MiB-aligned,
/// THP-advised, as the chunks are), modelling a DPDK mbuf pool in hugepages;
/// `LR_SMALLPAGES=1` keeps it in plain 4 KiB pages (a `Vec`, a diagnostic).
fn input(bytes: &[u8]) -> ChunkBuf {
    if std::env::var_os("LR_SMALLPAGES").is_some() {
        return ChunkBuf::from(bytes.to_vec());
    }
    let mut b = ChunkBuf::new(bytes.len().next_multiple_of(2 << 20));
    b[..bytes.len()].copy_from_slice(bytes);
    b
}

/// An owner word on a cache line of its own (as the group's).
#[repr(align(64))]
#[derive(Default)]
struct Owner(AtomicU64);

/// Payload bytes per packet (the simulator's 1 KiB heaps).
const PAYLOAD: usize = 1024;

/// The bare copy (`LR_BARE`): what a member does per packet besides its copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bare {
    /// `1`: nothing (the memory system's ceiling for these packets).
    Copy,
    /// `store`: a load and a plain store of the heap's owner word.
    Store,
    /// `cas`: a compare-and-swap of it (the group's claim).
    Cas,
    /// `cas-hot`: the same on one chunk's owner words (they stay cached).
    CasHot,
    /// `cas-burst`: the claims of a burst of 32 first, then its copies.
    CasBurst,
}

impl Bare {
    fn from_env() -> Option<Bare> {
        Some(match std::env::var("LR_BARE").ok()?.as_str() {
            "store" => Bare::Store,
            "cas" => Bare::Cas,
            "cas-hot" => Bare::CasHot,
            "cas-burst" => Bare::CasBurst,
            _ => Bare::Copy,
        })
    }
}

/// A claim as the group makes one: a load, then a compare-and-swap.
fn claim(o: &AtomicU64) {
    let v = o.load(Ordering::Relaxed);
    let _ = o.compare_exchange(v, v + 1, Ordering::Relaxed, Ordering::Relaxed);
}

/// A bare-copy member's destination: its ring of chunks and owner words.
struct BareSet {
    ring: Vec<ChunkBuf>,
    owners: Vec<Owner>,
}

/// The bare copy: member `k` of `n` copies each packet's payload with the
/// group's non-temporal stores to the bytes the group would place it at
/// (heap `t * 64 + a`, its antennas interleaved with the other members'), in
/// a ring of 24 chunks of its own, and does nothing else but what `kind`
/// adds (no decode, no placement, no group). Returns the packets copied.
fn bare(
    kind: Bare,
    (k, n, passes): (usize, usize, usize),
    (buf, ends): (&[u8], &[usize]),
    ring: &mut [ChunkBuf],
    owners: &[Owner],
) -> u64 {
    let (ants, per_chunk, chunks) = (64 / n, 2048 / n, ring.len());
    // Packet `j`'s chunk in the ring and heap index.
    let at = |j: usize| {
        let (c, i) = (j / per_chunk, j % per_chunk);
        (c % chunks, (i / ants) * 64 + (i % ants) * n + k)
    };
    let owner = |(c, slot): (usize, usize)| {
        let c = if kind == Bare::CasHot { 0 } else { c };
        &owners[c * 2048 + slot].0
    };
    let mut j = 0usize;
    for _ in 0..passes {
        for run in ends.chunks(BURST) {
            if kind == Bare::CasBurst {
                for jj in j..j + run.len() {
                    claim(owner(at(jj)));
                }
            }
            for &e in run {
                let (c, slot) = at(j);
                match kind {
                    Bare::Store => {
                        let o = owner((c, slot));
                        o.store(o.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                    }
                    Bare::Cas | Bare::CasHot => claim(owner((c, slot))),
                    Bare::Copy | Bare::CasBurst => {}
                }
                let dst = &mut ring[c][slot * PAYLOAD..(slot + 1) * PAYLOAD];
                stream_copy(dst, &buf[e - PAYLOAD..e]);
                j += 1;
            }
        }
    }
    store_fence();
    j as u64
}

/// Timestamps in one stretch of packets: `N_TS`, or `LR_NTS` in the
/// environment (a diagnostic: a short stretch keeps the members' input in the
/// caches, so only the chunks' writes reach memory).
fn n_ts() -> u64 {
    let n: u64 = std::env::var("LR_NTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(N_TS);
    n.div_ceil(HEAPS_PER_CHUNK).max(1) * HEAPS_PER_CHUNK
}

/// Packets for `n_ts()` timestamps, split by antenna over `n` members.
fn split(n: usize) -> Vec<Packets> {
    let mut f = Fsim::new(cfg()).expect("valid simulator");
    let (buf, ends) = f.packets_buffer(n_ts()).expect("packets");
    let mut out: Vec<Packets> = vec![(Vec::new(), Vec::new()); n];
    let mut start = 0;
    for &e in &ends {
        let p = &buf[start..e];
        start = e;
        let mut feng = 0;
        decode_visit(p, |item, v| {
            if item == FENG_ID_ID {
                feng = v;
            }
        })
        .expect("simulator packets decode");
        let o = &mut out[feng as usize % n];
        o.0.extend_from_slice(p);
        o.1.push(o.0.len());
    }
    out
}

/// Packets per burst (a port's burst).
const BURST: usize = 32;

/// A stalled member waits for the other member or the consumer: it backs off
/// instead of hammering the group's lock.
fn backoff() {
    for _ in 0..256 {
        std::hint::spin_loop();
    }
}
/// One round's figures.
struct Round {
    pps: f64,
    chunks: u64,
    consumer_busy_s: f64,
}

/// One round with `n` members; returns packets per second over all members.
fn round(
    n: usize,
    packets: &std::sync::Arc<Vec<Packets>>,
    passes: usize,
    batch: usize,
    nap: Duration,
) -> Round {
    // `LR_APART=1`: one group per member (a diagnostic: nothing shared
    // between members but the consumer thread, the machine and its memory).
    let apart = std::env::var_os("LR_APART").is_some();
    let bare_kind = Bare::from_env();
    let one_by_one = std::env::var_os("LR_ONE_BY_ONE").is_some();
    let (groups, members): (Vec<_>, Vec<_>) = if apart {
        (0..n).map(|_| group(batch, 1)).unzip()
    } else {
        let (g, m) = group(batch, n);
        (vec![g], vec![m])
    };
    let members: Vec<_> = members.into_iter().flatten().collect();
    let set = packets.clone();
    let chunks_per_pass = (n_ts() / HEAPS_PER_CHUNK) as i64;
    let threads = Members::spawn(
        members,
        move |k| {
            // The bare copy's ring and owner words, made (their pages
            // touched) before the clock.
            let (chunks, words) = match bare_kind {
                None => (0, 0),
                Some(Bare::Copy) => (24, 0),
                Some(_) => (24, 24 * 2048),
            };
            let ring: Vec<ChunkBuf> = (0..chunks).map(|_| ChunkBuf::new(2048 * PAYLOAD)).collect();
            let owners: Vec<Owner> = (0..words).map(|_| Owner::default()).collect();
            let bare_set = BareSet { ring, owners };
            (input(&set[k].0), set[k].1.clone(), bare_set)
        },
        move |k, mut m, (buf, ends, mut b): (ChunkBuf, Vec<usize>, BareSet)| {
            let t0 = Instant::now();
            if let Some(kind) = bare_kind {
                let copied = bare(kind, (k, n, passes), (&buf, &ends), &mut b.ring, &b.owners);
                return (copied, Instant::now(), buf);
            }
            for pass in 0..passes {
                m.place_mut().shift = pass as i64 * chunks_per_pass;
                if one_by_one {
                    let mut start = 0;
                    for &e in &ends {
                        let p = &buf[start..e];
                        start = e;
                        while let Push::Stall = m.push(0, p) {
                            // Waiting for the other member or the consumer:
                            // back off instead of hammering the group's lock.
                            m.sync();
                            backoff();
                        }
                    }
                    m.sync();
                    continue;
                }
                // Bursts of `BURST` packets, as a port hands them.
                let mut start = 0;
                let mut burst: [&[u8]; BURST] = [&[]; BURST];
                for run in ends.chunks(BURST) {
                    for (slot, &e) in burst.iter_mut().zip(run) {
                        *slot = &buf[start..e];
                        start = e;
                    }
                    let mut at = 0;
                    while at < run.len() {
                        m.sync();
                        at += m.push_burst(0, &burst[at..run.len()]).taken;
                        if at < run.len() {
                            backoff();
                        }
                    }
                }
                m.sync();
            }
            m.flush();
            // The member's end: what comes after (freeing its input) is not
            // receiving.
            let end = Instant::now();
            let st = m.stats();
            eprintln!(
                "member {k}: {:.3} s, {} accepted, {} stalls, {} too old, {} dup",
                t0.elapsed().as_secs_f64(),
                st.packets_accepted,
                st.stalls,
                st.packets_too_old,
                st.packets_duplicate
            );
            (st.packets_accepted, end, buf)
        },
    );
    let start = threads.go();
    let mut chunks = 0u64;
    let mut busy = Duration::ZERO;
    loop {
        let done = threads.done();
        let t = Instant::now();
        for group in &groups {
            while let Some(c) = group.poll_chunk() {
                chunks += 1;
                group.add_free_chunk(c);
            }
        }
        busy += t.elapsed();
        if done {
            break;
        }
        // The consumer sleep-polls: a chunk is 2048 packets (over 150 us at
        // any rate here) and the spare chunks cover the nap, while a spinning
        // third thread would take a core's share from a member on this
        // 2-core machine (and none from a single member).
        std::thread::sleep(nap);
    }
    let ends = threads.join();
    // From the start to the last member's end (their inputs freed after).
    let last = ends.iter().map(|e| e.1).max().unwrap_or(start);
    let secs = (last - start).as_secs_f64();
    let accepted: u64 = ends.iter().map(|e| e.0).sum();
    let st = groups
        .iter()
        .map(|g| g.stats())
        .fold(GroupStats::default(), |a, b| GroupStats {
            takes: a.takes + b.takes,
            ahead: a.ahead + b.ahead,
            consumer_takes: a.consumer_takes + b.consumer_takes,
            waits: a.waits + b.waits,
            ..a
        });
    eprintln!(
        "group: {} member lock takes ({} chunks given ahead), {} consumer takes, {} waits",
        st.takes, st.ahead, st.consumer_takes, st.waits
    );
    Round {
        pps: accepted as f64 / secs,
        chunks,
        consumer_busy_s: busy.as_secs_f64(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let rounds: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let mib: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(512);
    let many: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let batch: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(0);
    let nap = Duration::from_micros(args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1000));
    // One packet set per member count, long enough for MIB_PER_MEMBER.
    let pkt = 1024 + 64;
    let per_member_packets = mib * (1 << 20) / pkt;
    let sets: Vec<(usize, std::sync::Arc<Vec<Packets>>, usize)> = [1, many]
        .into_iter()
        .map(|n| {
            // One stretch of timestamps, walked `passes` times.
            let set = split(n);
            let passes = per_member_packets.div_ceil(set[0].1.len().max(1));
            (n, std::sync::Arc::new(set), passes)
        })
        .collect();
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); 2];
    for r in 0..rounds {
        for i in 0..2 {
            let i = (i + r) % 2;
            let (n, set, passes) = &sets[i];
            let x = round(*n, set, *passes, batch, nap);
            println!(
                "{{\"members\": {n}, \"round\": {r}, \"mpps\": {:.3}, \"chunks\": {}, \"consumer_busy_ms\": {:.2}}}",
                x.pps / 1e6,
                x.chunks,
                x.consumer_busy_s * 1e3
            );
            res[i].push(x.pps);
        }
    }
    let (one, more) = (median(res[0].clone()), median(res[1].clone()));
    println!(
        "{{\"median_mpps_1\": {:.3}, \"median_mpps_{many}\": {:.3}, \"ratio\": {:.3}}}",
        one / 1e6,
        more / 1e6,
        more / one
    );
}
