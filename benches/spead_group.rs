//! A SPEAD receive group from memory buffers: 1 member against 2 (or more),
//! each member on its own pinned core, alternating rounds, medians.
//!
//! ```text
//! cargo bench --bench spead_group -- [ROUNDS] [MIB_PER_MEMBER] [MEMBERS]
//! ```
//!
//! The packets are the F-engine simulator's in `single` mode of
//! `spead_chunks` (64 antennas, 1 KiB heaps in one packet, 32 heaps per
//! antenna per chunk). Member k gets the heaps of antennas `a % n == k` (what
//! multicast groups or RSS by source would give it), as one buffer it walks
//! packet by packet, as many times as needed for `MIB_PER_MEMBER` of packets
//! (the timestamps keep increasing: each pass is a fresh stretch of chunks).
//! The main thread is the consumer: it takes every chunk and gives it back,
//! polling every 100 us (it sleeps in between, so it does not compete with
//! the members for their cores).
//! Prints one JSON line per round and the medians with their ratio.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use linerate::spead::chunk::{KatgpucbfPlace, Place, PlaceInput, Placement, Push};
use linerate::spead::fsim::{Fsim, FsimConfig, FENG_ID_ID};
use linerate::spead::group::{ChunkGroup, Eviction};
use linerate::spead::wire::decode_visit;

fn cfg() -> FsimConfig {
    FsimConfig {
        n_ants: 64,
        n_channels_total: 4096,
        n_channels_per_stream: 1,
        n_samples_per_channel: 256,
        n_pols: 2,
        packet_payload: 1024,
        ..FsimConfig::default()
    }
}

/// Heaps per antenna per chunk.
const HEAPS_PER_CHUNK: u64 = 32;
/// Timestamps in one stretch of packets (32 chunks).
const N_TS: u64 = 1024;

/// One member's packets, back to back, and where each ends.
type Packets = (Vec<u8>, Vec<usize>);

/// Packets for `N_TS` timestamps, split by antenna over `n` members.
fn split(n: usize) -> Vec<Packets> {
    let mut f = Fsim::new(cfg()).expect("valid simulator");
    let (buf, ends) = f.packets_buffer(N_TS).expect("packets");
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

/// katgpucbf's placement, shifted by whole stretches: pass `p` over the same
/// packets lands in fresh chunks, as later timestamps would.
#[derive(Clone)]
struct Shifted {
    inner: KatgpucbfPlace,
    shift: i64,
}

impl Place for Shifted {
    fn item_ids(&self) -> &[u64] {
        self.inner.item_ids()
    }
    #[inline]
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
        let mut p = self.inner.place(input)?;
        p.chunk_id += self.shift;
        Some(p)
    }
}

/// One round with `n` members; returns packets per second over all members.
fn round(n: usize, packets: &[Packets], passes: usize) -> (f64, u64) {
    let inner = KatgpucbfPlace::for_fsim(&cfg(), HEAPS_PER_CHUNK);
    let group = ChunkGroup::new(inner.chunk_config(4, 24), Eviction::Lossless).expect("group");
    let place = Shifted { inner, shift: 0 };
    let members: Vec<_> = (0..n)
        .map(|_| group.member(place.clone()).expect("member"))
        .collect();
    let go = Arc::new(AtomicBool::new(false));
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let threads: Vec<_> = members
        .into_iter()
        .enumerate()
        .map(|(k, mut m)| {
            let (buf, ends) = packets[k].clone();
            let go = go.clone();
            let core = cores.get(k % cores.len().max(1)).copied();
            std::thread::spawn(move || {
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                let t0 = Instant::now();
                let chunks_per_pass = (N_TS / HEAPS_PER_CHUNK) as i64;
                for pass in 0..passes {
                    m.place_mut().shift = pass as i64 * chunks_per_pass;
                    let mut start = 0;
                    for &e in &ends {
                        let p = &buf[start..e];
                        start = e;
                        while let Push::Stall = m.push(0, p) {
                            // Waiting for the other member or the consumer:
                            // back off instead of hammering the group's lock.
                            m.sync();
                            for _ in 0..256 {
                                std::hint::spin_loop();
                            }
                        }
                    }
                    m.sync();
                }
                m.flush();
                let st = m.stats();
                eprintln!(
                    "member {k}: {:.3} s, {} accepted, {} stalls, {} too old, {} dup",
                    t0.elapsed().as_secs_f64(),
                    st.packets_accepted,
                    st.stalls,
                    st.packets_too_old,
                    st.packets_duplicate
                );
                st.packets_accepted
            })
        })
        .collect();
    let start = Instant::now();
    go.store(true, Ordering::Release);
    let mut chunks = 0u64;
    let mut done = 0;
    while done < threads.len() {
        while let Some(c) = group.poll_chunk() {
            chunks += 1;
            group.add_free_chunk(c);
        }
        done = threads.iter().filter(|t| t.is_finished()).count();
        // The consumer sleep-polls: a chunk is 2048 packets (over 100 us at
        // any rate here) and 16 spare chunks cover the nap, while a spinning
        // third thread would take a core's share from a member on this
        // 2-core machine (and none from a single member).
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let secs = start.elapsed().as_secs_f64();
    let accepted: u64 = threads.into_iter().map(|t| t.join().expect("member")).sum();
    (accepted as f64 / secs, chunks)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
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
    // One packet set per member count, long enough for MIB_PER_MEMBER.
    let pkt = 1024 + 64;
    let per_member_packets = mib * (1 << 20) / pkt;
    let sets: Vec<(usize, Vec<Packets>, usize)> = [1, many]
        .into_iter()
        .map(|n| {
            // One stretch of timestamps, walked `passes` times.
            let set = split(n);
            let passes = per_member_packets.div_ceil(set[0].1.len().max(1));
            (n, set, passes)
        })
        .collect();
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); 2];
    for r in 0..rounds {
        for i in 0..2 {
            let i = (i + r) % 2;
            let (n, set, passes) = &sets[i];
            let (pps, chunks) = round(*n, set, *passes);
            println!(
                "{{\"members\": {n}, \"round\": {r}, \"mpps\": {:.3}, \"chunks\": {chunks}}}",
                pps / 1e6
            );
            res[i].push(pps);
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
