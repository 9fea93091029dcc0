//! What the C shim costs: DPDK's static-inline functions called out of line
//! through `src/sys/dpdk_shim.c` against the same work inlined into Rust.
//!
//! 1. per-packet accessor: `lr_pktmbuf_data_len` (shim call) vs reading
//!    `rte_mbuf.data_len` from the bindgen struct (what `Mbuf::data_len` does);
//! 2. per-burst: `lr_eth_rx_burst` (shim) vs the same dispatch written in
//!    Rust through `rte_eth_fp_ops` (what the inline `rte_eth_rx_burst` does),
//!    receiving 32 mbufs from net_null and freeing them in bulk.
//!
//! Runs alternating rounds and prints the median ns per operation.
//!   cargo bench --features dpdk --bench dpdk_shim

use std::hint::black_box;
use std::time::Instant;

use linerate::sys::dpdk::{self, eal, EthPort, PktmbufPool, PoolConfig, PortConfig};
use linerate::sys::ffi::dpdk as ffi;

const BURST: usize = 32;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// rte_eth_rx_burst, inlined in Rust (release build without RTE_ETHDEV_DEBUG).
#[inline(always)]
unsafe fn rx_burst_inline(port: u16, queue: u16, pkts: *mut *mut ffi::rte_mbuf, n: u16) -> u16 {
    // SAFETY (caller): port/queue are a started port's valid queue; pkts has
    // room for n pointers. No rx callbacks are installed in this benchmark,
    // so skipping the callback walk matches what the inline does.
    unsafe {
        let ops = &*std::ptr::addr_of!(ffi::rte_eth_fp_ops)
            .cast::<ffi::rte_eth_fp_ops>()
            .add(usize::from(port));
        let qd = *ops.rxq.data.add(usize::from(queue));
        (ops.rx_pkt_burst.unwrap_unchecked())(qd, pkts, n)
    }
}

fn main() {
    let args = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
        "--vdev=net_null0",
        "--file-prefix=linerate-bench-shim",
    ];
    let e = dpdk::init(&args).expect("EAL");
    let pool =
        PktmbufPool::create(e, &PoolConfig::new("bench", 8191, eal::socket_id())).expect("pool");
    let mut port = EthPort::by_name(e, "net_null0").expect("port");
    port.configure(&PortConfig::default(), &pool)
        .expect("configure");
    port.start().expect("start");
    let id = port.id();

    // 1. accessor on 32 held mbufs.
    let mut held = [std::ptr::null_mut::<ffi::rte_mbuf>(); BURST];
    assert!(pool.alloc_bulk_raw(&mut held));
    const ACC_ITERS: usize = 2_000_000;
    let (mut field, mut shim) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        let t = Instant::now();
        let mut s = 0u64;
        for _ in 0..ACC_ITERS {
            for &m in black_box(&held) {
                // SAFETY: m is a live mbuf we allocated.
                s += u64::from(unsafe { (*m).data_len });
            }
        }
        black_box(s);
        field.push(t.elapsed().as_nanos() as f64 / (ACC_ITERS * BURST) as f64);
        let t = Instant::now();
        let mut s = 0u64;
        for _ in 0..ACC_ITERS {
            for &m in black_box(&held) {
                // SAFETY: as above.
                s += u64::from(unsafe { ffi::lr_pktmbuf_data_len(m) });
            }
        }
        black_box(s);
        shim.push(t.elapsed().as_nanos() as f64 / (ACC_ITERS * BURST) as f64);
    }
    // SAFETY: the held mbufs are ours and unused afterwards.
    unsafe { PktmbufPool::free_bulk_raw(&mut held) };
    let (f, s) = (median(&mut field), median(&mut shim));
    println!(
        "data_len per mbuf: field {f:.2} ns, shim call {s:.2} ns, ratio shim/field {:.2}",
        s / f
    );

    // 2. rx_burst + free_bulk of 32 from net_null.
    const RX_ITERS: usize = 200_000;
    let (mut inl, mut shim) = (Vec::new(), Vec::new());
    let mut bufs = [std::ptr::null_mut::<ffi::rte_mbuf>(); BURST];
    for round in 0..11 {
        // Alternate which variant runs first in each round.
        for variant in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            for _ in 0..RX_ITERS {
                let n = if variant == 0 {
                    // SAFETY: started port, queue 0, room for BURST pointers.
                    unsafe { rx_burst_inline(id, 0, bufs.as_mut_ptr(), BURST as u16) }
                } else {
                    // SAFETY: as above, through the shim.
                    unsafe { ffi::lr_eth_rx_burst(id, 0, bufs.as_mut_ptr(), BURST as u16) }
                };
                // SAFETY: the n received mbufs are ours.
                unsafe { PktmbufPool::free_bulk_raw(&mut bufs[..usize::from(n)]) };
            }
            let ns = t.elapsed().as_nanos() as f64 / RX_ITERS as f64;
            if variant == 0 {
                inl.push(ns)
            } else {
                shim.push(ns)
            }
        }
    }
    let (i, s) = (median(&mut inl), median(&mut shim));
    println!(
        "rx_burst(32)+free_bulk per burst: inline {i:.1} ns, shim {s:.1} ns, ratio shim/inline {:.3} ({:.2} ns per packet difference)",
        s / i,
        (s - i) / BURST as f64
    );
    port.close().expect("close");
}
