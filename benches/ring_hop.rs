//! Stage-to-stage ring hop cost across two pinned lcores, bulk 32, measured as
//! DPDK's `ring_perf_autotest` measures its SP/SC bulk test on two cores: one
//! thread enqueues bursts, the other dequeues them, and the cost is the
//! enqueuing thread's TSC cycles per element. Elements are 16 bytes, the size
//! of a `Packet` handle (DPDK's "element size 16B" line is the like-for-like
//! comparison).
//!
//! `cargo bench --bench ring_hop` prints one JSON line per run.

use std::time::Instant;

use linerate::buf::ring;

const BURST: usize = 32;
const ITERATIONS: usize = 1 << 21;

fn tsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc reads a counter; it has no memory-safety preconditions and
        // every x86_64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

fn pin(core: usize) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("warning: could not pin to core {core}");
    }
}

fn one_run() -> (f64, f64) {
    let (mut prod, mut cons) = ring::<[u64; 2]>(2048);
    let consumer = std::thread::spawn(move || {
        pin(1);
        let mut got = 0usize;
        let mut sum = 0u64;
        while got < ITERATIONS * BURST {
            got += cons.pop_bulk(BURST, |x| sum = sum.wrapping_add(x[0]));
        }
        sum
    });
    pin(0);
    let mut batch: Vec<[u64; 2]> = Vec::with_capacity(BURST);
    let t0 = Instant::now();
    let c0 = tsc();
    for i in 0..ITERATIONS {
        batch.extend((0..BURST as u64).map(|j| [i as u64, j]));
        while !batch.is_empty() {
            prod.push_bulk(&mut batch);
        }
    }
    let cycles = tsc() - c0;
    let ns = t0.elapsed().as_nanos() as f64;
    let _ = consumer.join();
    let n = (ITERATIONS * BURST) as f64;
    (cycles as f64 / n, ns / n)
}

fn main() {
    // cargo bench passes --bench; any other argument is a run count.
    let runs = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    for _ in 0..runs {
        let (cycles, ns) = one_run();
        println!("{{\"bench\":\"ring_hop\",\"burst\":{BURST},\"elem_bytes\":16,\"cycles_per_elem\":{cycles:.2},\"ns_per_elem\":{ns:.3}}}");
    }
}
