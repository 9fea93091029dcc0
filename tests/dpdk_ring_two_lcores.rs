//! Two-lcore hop: the main lcore receives from net_null0 and enqueues to an
//! SP/SC mbuf ring; a registered non-EAL thread dequeues and transmits on
//! net_null1. Counts reconcile end to end and every mbuf returns to the pool.
#![cfg(feature = "dpdk")]

use std::sync::atomic::{AtomicBool, Ordering};

use linerate::sys::dpdk::{
    self, eal, mbuf_ring, Burst, EthPort, PktmbufPool, PoolConfig, PortConfig,
};

#[test]
fn rx_ring_tx_across_two_threads() {
    let args: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
        "--vdev=net_null0",
        "--vdev=net_null1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "--file-prefix=linerate-test-ring2-{}",
        std::process::id()
    )])
    .collect();
    let e = dpdk::init(&args).expect("EAL");
    let pool =
        PktmbufPool::create(e, &PoolConfig::new("ring2", 8191, eal::socket_id())).expect("pool");
    let mut p0 = EthPort::by_name(e, "net_null0").expect("p0");
    let mut p1 = EthPort::by_name(e, "net_null1").expect("p1");
    p0.configure(&PortConfig::default(), &pool).expect("cfg0");
    p1.configure(&PortConfig::default(), &pool).expect("cfg1");
    p0.start().expect("start0");
    p1.start().expect("start1");
    let mut rx = p0.rx_queue(0).expect("rx");
    let mut tx = p1.tx_queue(0).expect("tx");
    assert!(
        mbuf_ring(e, "bad", 1000, -1).is_err(),
        "size must be a power of two"
    );
    let (mut prod, mut cons) = mbuf_ring(e, "hop", 1024, eal::socket_id()).expect("ring");

    const BURSTS: u64 = 5_000;
    let done = AtomicBool::new(false);
    let ready = AtomicBool::new(false);
    let (received, enq_dropped) = std::thread::scope(|s| {
        let tx_side = s.spawn(|| {
            let _reg = eal::register_thread(e).expect("register tx thread");
            ready.store(true, Ordering::Release);
            let (mut dequeued, mut sent) = (0u64, 0u64);
            let mut b = Burst::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                let n = cons.dequeue(&mut b);
                dequeued += n as u64;
                sent += tx.tx_burst(&mut b) as u64;
                b.clear();
                if n == 0 && finished && cons.is_empty() {
                    break;
                }
            }
            (dequeued, sent)
        });
        let (mut received, mut dropped) = (0u64, 0u64);
        let mut b = Burst::new();
        while !ready.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        for _ in 0..BURSTS {
            received += rx.rx_burst(&mut b) as u64;
            prod.enqueue(&mut b);
            dropped += b.len() as u64;
            b.clear();
        }
        done.store(true, Ordering::Release);
        let (dequeued, sent) = tx_side.join().expect("tx thread");
        assert_eq!(received, dequeued + dropped, "ring conserves mbufs");
        assert_eq!(p1.stats().expect("stats").opackets, sent);
        (received, dropped)
    });
    assert!(received >= BURSTS, "{received}");
    assert_eq!(p0.stats().expect("stats").ipackets, received);
    println!("received {received}, dropped at the full ring {enq_dropped}");
    drop(prod);
    drop(cons);
    p0.close().expect("close0");
    p1.close().expect("close1");
    assert_eq!(
        pool.in_use(),
        0,
        "every mbuf went back, whichever thread freed it"
    );
}
