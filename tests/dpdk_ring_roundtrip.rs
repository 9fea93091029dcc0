//! net_ring round trip: frames written into mbufs, sent on net_ring0 (whose
//! tx feeds its own rx ring), received back in order with every byte checked.
//! Also exercises prepend/adj/trim/set_len on real mbufs.
#![cfg(feature = "dpdk")]

use linerate::sys::dpdk::{self, eal, Burst, EthPort, PktmbufPool, PoolConfig, PortConfig};

/// Deterministic frame contents: length and bytes depend on the index.
fn frame(i: u32) -> Vec<u8> {
    let len = 60 + (i.wrapping_mul(7919) % 1455) as usize; // 60..=1514
    let mut x = i.wrapping_mul(0x9e37_79b9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn ring_round_trip_every_byte() {
    let args: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-telemetry",
        "--vdev=net_ring0",
        "--vdev=net_ring1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "--file-prefix=linerate-test-ring-{}",
        std::process::id()
    )])
    .collect();
    let e = dpdk::init(&args).expect("EAL init with net_ring0");
    let pool =
        PktmbufPool::create(e, &PoolConfig::new("ring_rt", 2047, eal::socket_id())).expect("pool");
    assert!(!pool.is_packed());
    assert!(pool.object_size() > 2048, "{}", pool.object_size());
    round_trip(e, "net_ring0", &pool);

    // The same with mbuf headers packed apart from their data rooms.
    let mut cfg = PoolConfig::new("ring_rt_packed", 2047, eal::socket_id());
    cfg.packed = true;
    let packed = PktmbufPool::create(e, &cfg).expect("packed pool");
    assert!(packed.is_packed());
    assert!(
        packed.object_size() <= 512,
        "headers packed: {} bytes apart",
        packed.object_size()
    );
    round_trip(e, "net_ring1", &packed);
}

/// Buffer adjustments on `pool`'s mbufs, then 5000 frames through `dev` and
/// back, every byte checked.
fn round_trip(e: &'static dpdk::Eal, dev: &str, pool: &PktmbufPool) {
    let mut port = EthPort::by_name(e, dev).expect(dev);
    port.configure(&PortConfig::default(), pool)
        .expect("configure");
    port.start().expect("start");
    let mut tx = port.tx_queue(0).expect("tx");
    let mut rx = port.rx_queue(0).expect("rx");

    // Buffer adjustments on one mbuf.
    let mut m = pool.alloc().expect("alloc");
    let head0 = m.headroom();
    assert_eq!(head0, dpdk::mempool::HEADROOM);
    m.append(100).expect("append").copy_from_slice(&[7u8; 100]);
    m.prepend(14).expect("prepend").copy_from_slice(&[1u8; 14]);
    assert_eq!((m.data_len(), m.headroom()), (114, head0 - 14));
    assert_eq!(
        &m.data()[..15],
        &[1u8, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7]
    );
    assert!(m.adj(14));
    assert!(m.trim(40));
    assert_eq!(m.data(), &[7u8; 60][..]);
    assert!(!m.adj(61), "adj past the data fails and changes nothing");
    assert!(m.prepend(head0 + 1).is_none());
    assert!(m.append(m.tailroom() + 1).is_none());
    assert!(m.set_len(1000));
    assert_eq!(m.pkt_len(), 1000);
    assert!(!m.set_len(u16::MAX));
    drop(m);
    let m = pool.alloc_copy(&frame(7)).expect("alloc_copy");
    assert_eq!(m.as_ref(), &frame(7)[..]);
    assert!(
        pool.alloc_copy(&[0u8; 4000]).is_none(),
        "larger than the data room"
    );
    drop(m);

    const TOTAL: u32 = 5000;
    let (mut next_tx, mut next_rx) = (0u32, 0u32);
    let mut out = Burst::new();
    let mut inb = Burst::new();
    let mut spins = 0u32;
    while next_rx < TOTAL {
        while next_tx < TOTAL && !out.is_full() {
            let f = frame(next_tx);
            let mut m = pool.alloc().expect("pool has room");
            m.append(f.len() as u16).expect("fits").copy_from_slice(&f);
            out.push(m).expect("not full");
            next_tx += 1;
        }
        tx.tx_burst(&mut out);
        rx.rx_burst(&mut inb);
        for m in inb.drain() {
            let want = frame(next_rx);
            assert_eq!(m.pkt_len() as usize, want.len(), "frame {next_rx} length");
            assert_eq!(m.data(), &want[..], "frame {next_rx} bytes");
            next_rx += 1;
        }
        spins += 1;
        assert!(
            spins < 1_000_000,
            "stuck: sent {next_tx}, received {next_rx}"
        );
    }
    assert!(out.is_empty());
    let st = port.stats().expect("stats");
    assert_eq!(
        (st.ipackets, st.opackets),
        (u64::from(TOTAL), u64::from(TOTAL))
    );
    port.close().expect("close");
    assert_eq!(pool.in_use(), 0);
}
