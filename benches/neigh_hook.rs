//! The fast-path cost of a port owning addresses (ARP/NDP answering): the same
//! mem wire moving bursts of 32 IPv4 64-byte frames round and round (transmit
//! a burst, receive it, transmit the same packets again), three ways:
//!
//! - `a`: bare, no addresses;
//! - `b`: wrapped by the neighbour binding, read as an analyzer reads it (the
//!   stage parses each frame and offers the port only those it does not
//!   recognise): a flag read per transmitted burst, a branch per received one;
//! - `c`: wrapped, read as a forward or sink stage reads it: an ethertype check
//!   per received frame on top of `b`.
//!
//! `cargo bench --bench neigh_hook` alternates a, b, c for 7 rounds and prints
//! ns per packet (medians) and the ratios as JSON. `neigh_hook a|b|c N` runs N
//! bursts of one variant only, for callgrind:
//! `valgrind --tool=callgrind target/release/deps/neigh_hook-* b 100000`.

use std::time::Instant as StdInstant;

use linerate::buf::{Burst, Pool, PoolConfig};
use linerate::neigh::{bind, Config, Owned};
use linerate::port::mem::{self, MemConfig};
use linerate::port::OpenPort;

const BURST: usize = 32;

fn wire(variant: &str, pool: &Pool) -> OpenPort {
    let port = mem::open(&MemConfig::default());
    if variant == "a" {
        return port;
    }
    let (mut port, _) = bind::wrap(
        port,
        Config {
            mac: [2, 0, 0, 0, 0, 2],
            addrs: vec![Owned::parse("10.2.0.2/24").unwrap()],
        },
        pool.clone(),
    );
    // Send (and receive, and drop) the start-up announcement outside the
    // measurement.
    let now = linerate::time::monotonic_now();
    port.tx[0].flush(now);
    let mut b = Burst::new();
    while port.rx[0].rx_burst(now, &mut b, BURST) > 0 {
        b.clear();
    }
    if variant == "b" {
        port.rx[0].set_inspected();
    }
    port
}

/// Runs `bursts` round trips; returns ns per packet.
fn run(variant: &str, bursts: usize, pool: &Pool) -> f64 {
    let mut port = wire(variant, pool);
    let mut b = Burst::new();
    for _ in 0..BURST {
        let mut p = pool.alloc().expect("pool");
        let mut f = [0u8; 60];
        f[12] = 0x08;
        f[14] = 0x45;
        p.set_data(&f).unwrap();
        b.push(p).unwrap();
    }
    let (mut tx, mut rx) = (port.tx.remove(0), port.rx.remove(0));
    let t0 = StdInstant::now();
    let mut moved = 0usize;
    for _ in 0..bursts {
        let now = linerate::time::monotonic_now();
        tx.tx_burst(now, &mut b);
        let got = rx.rx_burst(now, &mut b, BURST);
        moved += got;
        assert!(
            got == BURST,
            "the wire lost packets: {got} of {BURST} came back"
        );
    }
    let ns = t0.elapsed().as_nanos() as f64;
    std::hint::black_box(moved);
    ns / (bursts * BURST) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let pool = Pool::new(&PoolConfig::default()).expect("pool");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some(v @ ("a" | "b" | "c")) => {
            let n = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(100_000);
            let ns = run(v, n, &pool);
            println!("{{\"variant\":\"{v}\",\"bursts\":{n},\"ns_per_packet\":{ns:.2}}}");
        }
        _ => {
            let n = 200_000;
            let mut r = [Vec::new(), Vec::new(), Vec::new()];
            for v in ["a", "b", "c"] {
                run(v, n / 10, &pool);
            }
            for _ in 0..7 {
                for (i, v) in ["a", "b", "c"].iter().enumerate() {
                    r[i].push(run(v, n, &pool));
                }
            }
            let [ma, mb, mc] = r.map(|mut v| median(&mut v));
            println!(
                "{{\"bench\":\"neigh_hook\",\"a_bare_ns\":{ma:.2},\"b_analyzer_ns\":{mb:.2},\"c_per_frame_ns\":{mc:.2},\"b_over_a\":{:.3},\"c_over_a\":{:.3}}}",
                mb / ma,
                mc / ma
            );
        }
    }
}
