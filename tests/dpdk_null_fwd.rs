//! net_null forwarding: N bursts from net_null0 to net_null1 on one thread,
//! and the ethdev counters reconcile with what the loop saw. Also checks the
//! mempool accounting and the mbuf accessors on received mbufs.
//! One test function: the EAL can be initialised once per process.
#![cfg(feature = "dpdk")]

use linerate::sys::dpdk::{self, eal, Burst, EthPort, PktmbufPool, PoolConfig, PortConfig};

#[test]
fn null_pair_forwarding_counts_reconcile() {
    let prefix = format!("linerate-test-null-{}", std::process::id());
    let args = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
        "--log-level=lib.eal:notice",
        "--vdev=net_null0",
        "--vdev=net_null1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--file-prefix={prefix}")])
    .collect::<Vec<_>>();
    let e = dpdk::init(&args).expect("EAL init with --no-huge and two net_null vdevs");
    // Same args again: the same handle; other args: the once-per-process error.
    assert!(std::ptr::eq(
        e,
        dpdk::init(&args).expect("second init, same args")
    ));
    let again = dpdk::init(&["--no-huge"]).unwrap_err().to_string();
    assert!(again.contains("once per process"), "{again}");
    assert_eq!(eal::lcore_id(), Some(0), "the main thread is EAL lcore 0");
    assert!(eal::version().starts_with("DPDK "), "{}", eal::version());

    let pool =
        PktmbufPool::create(e, &PoolConfig::new("null_fwd", 4095, eal::socket_id())).expect("pool");
    assert_eq!(pool.in_use(), 0);
    assert_eq!(pool.avail(), 4095);

    let mut p0 = EthPort::by_name(e, "net_null0").expect("net_null0 probed");
    let mut p1 = EthPort::by_name(e, "net_null1").expect("net_null1 probed");
    assert_eq!(p0.info().expect("info").driver, "net_null");
    let missing = EthPort::by_name(e, "net_null7").unwrap_err().to_string();
    assert!(
        missing.contains("net_null0") && missing.contains("net_null1"),
        "{missing}"
    );
    let cfg = PortConfig {
        rx_desc: 256,
        tx_desc: 256,
        ..PortConfig::default()
    };
    // Two rx queues on net_null0: RSS configuration (net_null accepts it).
    let cfg0 = PortConfig {
        rx_queues: 2,
        ..cfg.clone()
    };
    p0.configure(&cfg0, &pool)
        .expect("configure net_null0 with 2 rx queues");
    let too_many = PortConfig {
        rx_queues: u16::MAX,
        ..cfg.clone()
    };
    let err = p1.configure(&too_many, &pool).unwrap_err().to_string();
    assert!(err.contains("rx queues requested"), "{err}");
    p1.configure(&cfg, &pool).expect("configure net_null1");
    p0.start().expect("start 0");
    p1.start().expect("start 1");
    assert!(p0.link().expect("link").up);
    let mut rx = p0.rx_queue(0).expect("rx queue");
    let mut rx_q1 = p0.rx_queue(1).expect("second rx queue");
    assert!(p0.rx_queue(2).is_err());
    let mut tx = p1.tx_queue(0).expect("tx queue");
    assert!(p1.tx_queue(0).is_err(), "a queue can be taken once");

    const BURSTS: usize = 1000;
    let (mut received, mut sent, mut dropped, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut burst = Burst::new();
    for _ in 0..BURSTS {
        let n = rx.rx_burst(&mut burst);
        received += n as u64;
        for m in burst.as_slice() {
            assert_eq!(u32::from(m.data_len()), m.pkt_len());
            assert_eq!(m.nb_segs(), 1);
            assert_eq!(m.refcnt(), 1);
            assert_eq!(m.data().len(), usize::from(m.data_len()));
            bytes += u64::from(m.pkt_len());
        }
        let s = tx.tx_burst(&mut burst);
        sent += s as u64;
        dropped += burst.len() as u64;
        burst.clear();
    }
    assert!(
        received >= BURSTS as u64,
        "net_null delivers full bursts: {received}"
    );
    // The second rx queue (RSS) delivers too: net_null fills every queue.
    let q1 = rx_q1.rx_burst(&mut burst) as u64;
    assert!(q1 > 0, "rx queue 1 received nothing");
    bytes += burst
        .as_slice()
        .iter()
        .map(|m| u64::from(m.pkt_len()))
        .sum::<u64>();
    received += q1;
    dropped += q1;
    burst.clear();
    assert_eq!(received, sent + dropped);

    let s0 = p0.stats().expect("stats 0");
    let s1 = p1.stats().expect("stats 1");
    assert_eq!(s0.ipackets, received, "{s0:?}");
    assert_eq!(s1.opackets, sent, "{s1:?}");
    // net_null's frames are 64 bytes by default (devarg size=); its 22.11
    // stats count packets only, so the bytes are checked from the mbufs.
    assert_eq!(bytes, received * 64);
    let xs = p0.xstats().expect("xstats");
    let good = xs
        .iter()
        .find(|(n, _)| n == "rx_good_packets")
        .map(|(_, v)| *v);
    assert_eq!(good, Some(received), "{xs:?}");
    assert_eq!(p0.xstat("rx_good_packets").expect("xstat"), Some(received));
    assert_eq!(p0.xstat("no_such_counter").expect("xstat"), None);

    // Every mbuf went back: the rx ring holds none (net_null allocates on rx).
    drop(burst);
    p0.close().expect("close 0");
    p1.close().expect("close 1");
    assert_eq!(pool.in_use(), 0, "all mbufs returned to the pool");

    // A non-EAL thread registers and then uses its own lcore cache.
    let pool = &pool;
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(eal::lcore_id(), None);
            let reg = eal::register_thread(e).expect("rte_thread_register");
            assert_eq!(eal::lcore_id(), Some(reg.lcore_id()));
            let mut m = pool.alloc().expect("alloc");
            assert_eq!(m.data_len(), 0);
            m.append(60).expect("append 60").fill(0xab);
            assert_eq!(m.pkt_len(), 60);
            drop(m);
            drop(reg);
            assert_eq!(eal::lcore_id(), None);
        });
    });
    assert_eq!(pool.in_use(), 0);
}
