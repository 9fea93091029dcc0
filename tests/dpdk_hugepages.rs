//! The net_null forwarding check again, this time on hugepages (no
//! `--no-huge`), when the machine has at least 64 free 2 MiB pages and a
//! hugetlbfs mount (scripts/setup-hugepages.sh). Otherwise it prints that it
//! was skipped and passes, unless LINERATE_REQUIRE_HUGEPAGES=1.
#![cfg(feature = "dpdk")]

use linerate::sys::dpdk::{self, eal, Burst, EthPort, PktmbufPool, PoolConfig, PortConfig};

fn free_2m_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn hugetlbfs_mounted() -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
}

#[test]
fn null_forwarding_on_hugepages() {
    let free = free_2m_pages();
    if free < 64 || !hugetlbfs_mounted() {
        assert!(
            std::env::var("LINERATE_REQUIRE_HUGEPAGES").as_deref() != Ok("1"),
            "{free} free 2 MiB hugepages (need 64) or no hugetlbfs mount, and \
             LINERATE_REQUIRE_HUGEPAGES=1: run sudo scripts/setup-hugepages.sh"
        );
        println!("skipped: {free} free 2 MiB hugepages (need 64) or no hugetlbfs mount");
        return;
    }
    let args: Vec<String> = [
        "-l",
        "0",
        "-m",
        "64",
        "--huge-unlink",
        "--no-pci",
        "--no-telemetry",
        "--vdev=net_null0",
        "--vdev=net_null1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "--file-prefix=linerate-test-huge-{}",
        std::process::id()
    )])
    .collect();
    let e = dpdk::init(&args).expect("EAL init on hugepages");
    assert!(free_2m_pages() < free, "the EAL took hugepages");
    let pool = PktmbufPool::create(e, &PoolConfig::new("huge", 4095, eal::socket_id()))
        .expect("pool on hugepages");
    let mut p0 = EthPort::by_name(e, "net_null0").expect("p0");
    let mut p1 = EthPort::by_name(e, "net_null1").expect("p1");
    p0.configure(&PortConfig::default(), &pool).expect("cfg0");
    p1.configure(&PortConfig::default(), &pool).expect("cfg1");
    p0.start().expect("start0");
    p1.start().expect("start1");
    let mut rx = p0.rx_queue(0).expect("rx");
    let mut tx = p1.tx_queue(0).expect("tx");
    let (mut received, mut sent) = (0u64, 0u64);
    let mut b = Burst::new();
    for _ in 0..1000 {
        received += rx.rx_burst(&mut b) as u64;
        sent += tx.tx_burst(&mut b) as u64;
        b.clear();
    }
    assert_eq!(p0.stats().expect("s0").ipackets, received);
    assert_eq!(p1.stats().expect("s1").opackets, sent);
    p0.close().expect("close0");
    p1.close().expect("close1");
    assert_eq!(pool.in_use(), 0);
}
