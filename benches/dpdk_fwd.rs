//! Single-lcore forwarding on a net_null pair with the `sys::dpdk` wrappers
//! (Burst + RxQueue/TxQueue, burst 32), both directions as testpmd's `io`
//! mode does (port 0 -> 1 and 1 -> 0). Prints the rx packets per second
//! summed over both ports, read from the ethdev counters.
//!
//!   cargo bench --features dpdk --bench dpdk_fwd            (--no-huge)
//!   LINERATE_BENCH_HUGE=1 cargo bench --features dpdk --bench dpdk_fwd
//!   LINERATE_BENCH_SECS=5 ...                               (default 3)
//!   LINERATE_BENCH_MODE=one|ring|ring-noreg ...
//!   LINERATE_BENCH_CACHE=512 ...    (mempool per-lcore cache; default 256)
//!
//! Modes: `pair` (default; both directions on one lcore, like testpmd io),
//! `one` (net_null0 -> net_null1 on one lcore), `ring` (lcore 1 receives
//! from net_null0 and enqueues to an SP/SC rte_ring; a second thread pinned
//! to CPU 0, registered with rte_thread_register, dequeues and transmits on
//! net_null1, whose tx frees the mbufs on that thread: the cross-lcore free),
//! `ring-noreg` (the same with the second thread NOT registered, so its
//! frees bypass the mempool per-lcore cache). `one`/`ring*` print the tx
//! packets per second on net_null1.
//!
//! scripts/dpdk-bench-fwd.sh runs it alternately with dpdk-testpmd.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use linerate::sys::dpdk::{
    self, eal, mbuf_ring, Burst, EthPort, PktmbufPool, PoolConfig, PortConfig,
};

const BURST: usize = 32;

fn main() {
    let huge = std::env::var("LINERATE_BENCH_HUGE").as_deref() == Ok("1");
    let secs: u64 = std::env::var("LINERATE_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let lcore = std::env::var("LINERATE_BENCH_LCORE").unwrap_or_else(|_| "1".into());
    let mut args: Vec<String> = vec![
        "-l".into(),
        lcore,
        "--no-pci".into(),
        "--no-telemetry".into(),
    ];
    if huge {
        args.extend(["-m".into(), "256".into(), "--huge-unlink".into()]);
    } else {
        args.extend(["--no-huge".into(), "-m".into(), "256".into()]);
    }
    args.extend([
        "--vdev=net_null0".into(),
        "--vdev=net_null1".into(),
        format!("--file-prefix=linerate-bench-fwd-{}", std::process::id()),
        "--log-level=lib.eal:error".into(),
    ]);
    let e = dpdk::init(&args).expect("EAL");
    let mut pc = PoolConfig::new("fwd", 16383, eal::socket_id());
    if let Some(c) = std::env::var("LINERATE_BENCH_CACHE")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        pc.cache = c;
    }
    let pool = PktmbufPool::create(e, &pc).expect("pool");
    let mut p0 = EthPort::by_name(e, "net_null0").expect("p0");
    let mut p1 = EthPort::by_name(e, "net_null1").expect("p1");
    for p in [&mut p0, &mut p1] {
        p.configure(&PortConfig::default(), &pool)
            .expect("configure");
        p.start().expect("start");
    }
    let mode = std::env::var("LINERATE_BENCH_MODE").unwrap_or_else(|_| "pair".into());
    let (mut rx0, mut tx0) = (p0.rx_queue(0).expect("rx0"), p0.tx_queue(0).expect("tx0"));
    let (mut rx1, mut tx1) = (p1.rx_queue(0).expect("rx1"), p1.tx_queue(0).expect("tx1"));
    let mut b = Burst::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let t0 = Instant::now();
    let mut iters = 0u64;
    match mode.as_str() {
        "pair" => loop {
            rx0.rx_burst(&mut b);
            tx1.tx_burst(&mut b);
            b.clear();
            rx1.rx_burst(&mut b);
            tx0.tx_burst(&mut b);
            b.clear();
            iters += 1;
            if iters % 1024 == 0 && Instant::now() >= deadline {
                break;
            }
        },
        "one" => loop {
            rx0.rx_burst(&mut b);
            tx1.tx_burst(&mut b);
            b.clear();
            iters += 1;
            if iters % 1024 == 0 && Instant::now() >= deadline {
                break;
            }
        },
        "ring" | "ring-noreg" => {
            let register = mode == "ring";
            let (mut prod, mut cons) =
                mbuf_ring(e, "fwd_hop", 1024, eal::socket_id()).expect("ring");
            let stop = AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    // Explicitly CPU 0: a spawned thread inherits the EAL main
                    // lcore's affinity (CPU 1) and would time-share with it.
                    assert!(core_affinity::set_for_current(core_affinity::CoreId {
                        id: 0
                    }));
                    let _reg = register.then(|| eal::register_thread(e).expect("register"));
                    let mut b = Burst::new();
                    while !stop.load(Ordering::Relaxed) {
                        cons.dequeue(&mut b);
                        tx1.tx_burst(&mut b);
                        b.clear();
                    }
                });
                loop {
                    // Back-pressure: receive only when the ring has room for
                    // a whole burst (a NIC would count the rest as imissed),
                    // instead of hammering a full ring's consumer cache line.
                    if prod.len() + linerate::sys::dpdk::MAX_BURST < 1024 {
                        rx0.rx_burst(&mut b);
                        prod.enqueue(&mut b);
                        b.clear();
                    }
                    iters += 1;
                    if iters % 1024 == 0 && Instant::now() >= deadline {
                        break;
                    }
                }
                stop.store(true, Ordering::Relaxed);
            });
        }
        other => panic!("LINERATE_BENCH_MODE={other}: use pair, one, ring or ring-noreg"),
    }
    let dt = t0.elapsed().as_secs_f64();
    let s0 = p0.stats().expect("s0");
    let s1 = p1.stats().expect("s1");
    if mode == "pair" {
        let rx = s0.ipackets + s1.ipackets;
        let tx = s0.opackets + s1.opackets;
        println!(
            "linerate-wrappers fwd: rx_pps_total={:.0} tx_pps_total={:.0} secs={dt:.2} burst={BURST} huge={huge}",
            rx as f64 / dt,
            tx as f64 / dt
        );
    } else {
        println!(
            "linerate-wrappers {mode}: tx_pps={:.0} rx_pps={:.0} secs={dt:.2} burst={BURST} huge={huge}",
            s1.opackets as f64 / dt,
            s0.ipackets as f64 / dt
        );
    }
    p0.close().expect("close0");
    p1.close().expect("close1");
}
