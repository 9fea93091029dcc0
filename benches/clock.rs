//! The cost of a timestamp: CLOCK_MONOTONIC through the vDSO (what the runtime
//! reads once per pass and the analyzer once per received burst), next to the
//! TSC. Prints a markdown table row; `cargo bench --bench clock`.

use std::hint::black_box;
use std::time::Instant;

fn per_call(n: u64, f: impl Fn() -> u64) -> f64 {
    let t = Instant::now();
    let mut acc = 0u64;
    for _ in 0..n {
        acc = acc.wrapping_add(f());
    }
    black_box(acc);
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    const N: u64 = 20_000_000;
    let mut mono = Vec::new();
    let mut tsc = Vec::new();
    for _ in 0..5 {
        mono.push(per_call(N, || linerate::time::monotonic_now().as_nanos()));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: rdtsc reads a counter; no memory-safety preconditions.
        tsc.push(per_call(N, || unsafe { core::arch::x86_64::_rdtsc() }));
    }
    mono.sort_by(f64::total_cmp);
    tsc.sort_by(f64::total_cmp);
    println!(
        "| cost of a timestamp (median of 5 x 20M calls) | CLOCK_MONOTONIC {:.1} ns | rdtsc {:.1} ns |",
        mono[2],
        tsc.get(2).copied().unwrap_or(f64::NAN)
    );
}
