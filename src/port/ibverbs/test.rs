//! The ibverbs port's tests, against a software loopback model of the queues.

use super::*;
use crate::buf::Burst;
use crate::buf::{Packet, PoolConfig};
use crate::time::Instant;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A software model of two raw packet queue pairs on one link: sends are
/// read from their slots only when the "NIC" gets to them (at the next
/// poll of either side), so a slot rewritten before its completion shows
/// up as corrupt data; the receive side applies the flow rule and drops
/// frames that find no posted slot, as a NIC does.
#[derive(Default)]
struct Link {
    frames: VecDeque<Vec<u8>>,
    filtered: u64,
    no_slot: u64,
}

struct FakeSend {
    link: Arc<Mutex<Link>>,
    mem: Vec<u8>,
    in_flight: VecDeque<SendSlot>,
    done: VecDeque<Completion>,
    fail_posts: bool,
    fail_status: Option<u32>,
}

impl FakeSend {
    fn new(link: &Arc<Mutex<Link>>, c: &IbverbsConfig) -> Self {
        FakeSend {
            link: link.clone(),
            mem: vec![0; c.tx_depth as usize * c.buffer_size as usize],
            in_flight: VecDeque::new(),
            done: VecDeque::new(),
            fail_posts: false,
            fail_status: None,
        }
    }

    /// The NIC reads and transmits every posted send.
    fn transmit(&mut self) {
        let mut link = self.link.lock().unwrap();
        while let Some(s) = self.in_flight.pop_front() {
            link.frames
                .push_back(self.mem[s.offset..s.offset + s.len as usize].to_vec());
            if s.signaled {
                self.done.push_back(Completion {
                    wr_id: s.wr_id,
                    len: 0,
                    status: self.fail_status.unwrap_or(STATUS_OK),
                });
            }
        }
    }
}

impl SendQueue for FakeSend {
    fn mem_mut(&mut self) -> &mut [u8] {
        &mut self.mem
    }

    fn post(&mut self, sends: &[SendSlot]) -> Result<(), IbvError> {
        if self.fail_posts {
            return Err(IbvError::Invalid("queue pair in error state".into()));
        }
        for s in sends {
            assert!(s.offset + s.len as usize <= self.mem.len());
            self.in_flight.push_back(*s);
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError> {
        self.transmit();
        let n = out.len().min(self.done.len());
        for (o, c) in out.iter_mut().zip(self.done.drain(..n)) {
            *o = c;
        }
        Ok(n)
    }
}

struct FakeRecv {
    link: Arc<Mutex<Link>>,
    flow: FlowMatch,
    mem: Vec<u8>,
    posted: VecDeque<RecvSlot>,
    done: VecDeque<Completion>,
    bad_status_every: Option<u64>,
    seen: u64,
}

impl FakeRecv {
    fn new(link: &Arc<Mutex<Link>>, c: &IbverbsConfig) -> Self {
        FakeRecv {
            link: link.clone(),
            flow: c.flow().unwrap(),
            mem: vec![0; c.buffers as usize * c.buffer_size as usize],
            posted: VecDeque::new(),
            done: VecDeque::new(),
            bad_status_every: None,
            seen: 0,
        }
    }
}

impl RecvQueue for FakeRecv {
    fn post(&mut self, slots: &[RecvSlot]) -> Result<(), IbvError> {
        for s in slots {
            if s.offset + s.len as usize > self.mem.len() {
                return Err(IbvError::Invalid("slot outside the region".into()));
            }
            assert!(!self.posted.contains(s), "slot {s:?} posted twice");
            self.posted.push_back(*s);
        }
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError> {
        {
            let mut link = self.link.lock().unwrap();
            while let Some(f) = link.frames.pop_front() {
                if !flow_selects(&self.flow, &f) {
                    link.filtered += 1;
                    continue;
                }
                let Some(s) = self.posted.pop_front() else {
                    link.no_slot += 1;
                    continue;
                };
                let len = f.len().min(s.len as usize);
                self.mem[s.offset..s.offset + len].copy_from_slice(&f[..len]);
                self.seen += 1;
                let bad = self.bad_status_every.is_some_and(|k| self.seen % k == 0);
                self.done.push_back(Completion {
                    wr_id: s.wr_id,
                    len: f.len() as u32,
                    // IBV_WC_LOC_LEN_ERR for a frame longer than the slot.
                    status: if bad || f.len() > s.len as usize {
                        1
                    } else {
                        STATUS_OK
                    },
                });
            }
        }
        let n = out.len().min(self.done.len());
        for (o, c) in out.iter_mut().zip(self.done.drain(..n)) {
            *o = c;
        }
        Ok(n)
    }

    fn mem(&self) -> &[u8] {
        &self.mem
    }
}

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

fn config() -> IbverbsConfig {
    IbverbsConfig {
        dst_mac: Some(MAC),
        dst_ip: Some(Ipv4Addr::new(10, 0, 0, 2)),
        dst_port: Some(7148),
        rx_depth: 64,
        buffers: 64,
        tx_depth: 32,
        buffer_size: 1536,
        ..IbverbsConfig::default()
    }
}

/// An Ethernet/IPv4/UDP frame of `len` bytes to `ip:port`, numbered `i`.
fn frame(mac: [u8; 6], ip: [u8; 4], port: u16, i: u32, len: usize) -> Vec<u8> {
    use crate::net::stack::{UdpV4, UDP_V4_HEADERS};
    let mut f = vec![0u8; len];
    UdpV4 {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: mac,
        src: "10.0.0.1:1024".parse().unwrap(),
        dst: std::net::SocketAddrV4::new(ip.into(), port),
        ttl: 64,
        payload_len: len - UDP_V4_HEADERS,
    }
    .emit(&mut f);
    let body = &mut f[UDP_V4_HEADERS..];
    body[..4].copy_from_slice(&i.to_be_bytes());
    for (k, b) in body[4..].iter_mut().enumerate() {
        *b = (i as usize + k) as u8;
    }
    f
}

/// The UDP payload of a frame made by [`frame`].
fn body(f: &[u8]) -> &[u8] {
    crate::net::udp_payload(f).unwrap().payload()
}

/// The UDP destination port of a frame made by [`frame`].
fn dst_port(f: &[u8]) -> u16 {
    crate::net::udp_payload(f).unwrap().udp().dst_port()
}

fn burst_of(pool: &Pool, frames: &[Vec<u8>]) -> Burst {
    let mut b = Burst::new();
    for f in frames {
        let mut p: Packet = pool.alloc().unwrap();
        p.set_data(f).unwrap();
        b.push(p).unwrap();
    }
    b
}

fn pool() -> Pool {
    Pool::new(&PoolConfig {
        count: 4096,
        ..PoolConfig::default()
    })
    .unwrap()
}

fn pair(c: &IbverbsConfig, pool: &Pool) -> (Arc<Mutex<Link>>, OpenPort) {
    let link = Arc::new(Mutex::new(Link::default()));
    let stats = new_stats();
    let rx = IbvRx::new(
        FakeRecv::new(&link, c),
        c.buffers,
        c.buffer_size,
        pool,
        stats.clone(),
    )
    .unwrap();
    let port = assemble(c, stats, Some(rx), Some(FakeSend::new(&link, c)), pool);
    (link, port)
}

#[test]
fn flow_rule_selects_mac_ip_and_port() {
    let m = config().flow().unwrap();
    let ip = [10, 0, 0, 2];
    assert!(flow_selects(&m, &frame(MAC, ip, 7148, 0, 64)));
    assert!(!flow_selects(
        &m,
        &frame([2, 0, 0, 0, 0, 9], ip, 7148, 0, 64)
    ));
    assert!(!flow_selects(&m, &frame(MAC, [10, 0, 0, 3], 7148, 0, 64)));
    assert!(!flow_selects(&m, &frame(MAC, ip, 7149, 0, 64)));
    use crate::net::{ethernet, ipv4};
    let mut v6 = frame(MAC, ip, 7148, 0, 64);
    ethernet::Frame::new_unchecked(&mut v6[..]).set_ethertype(ethernet::ethertype::IPV6);
    assert!(!flow_selects(&m, &v6), "an IPv4 spec needs IPv4");
    let mut tcp = frame(MAC, ip, 7148, 0, 64);
    ipv4::Packet::new_unchecked(&mut tcp[ethernet::HEADER_LEN..]).set_protocol(ipv4::protocol::TCP);
    assert!(!flow_selects(&m, &tcp), "a UDP spec needs UDP");
    assert!(!flow_selects(&m, &frame(MAC, ip, 7148, 0, 64)[..20]));
    let mac_only = FlowMatch {
        dst_ip: None,
        dst_port: None,
        ..m
    };
    assert!(flow_selects(&mac_only, &v6));
    assert!(!flow_selects(&mac_only, &MAC[..5]));
    // The rule the kernel gets for this match has one spec per field set.
    let r = m.rule(1);
    let specs = r.attr.num_of_specs;
    assert_eq!(specs, 3);
    let r = mac_only.rule(1);
    let specs = r.attr.num_of_specs;
    assert_eq!(specs, 1);
}

#[test]
fn config_problems_name_their_key() {
    assert!(config().problems().is_empty());
    assert!(IbverbsConfig::default().problems().is_empty());
    let keys = |c: IbverbsConfig| c.problems().into_iter().map(|p| p.0).collect::<Vec<_>>();
    assert_eq!(
        keys(IbverbsConfig {
            buffers: 65,
            ..config()
        }),
        ["buffers"]
    );
    assert_eq!(
        keys(IbverbsConfig {
            buffers: 0,
            ..config()
        }),
        ["buffers"]
    );
    assert_eq!(
        keys(IbverbsConfig {
            inline: 2000,
            buffer_size: 1024,
            ..config()
        }),
        ["inline"]
    );
    assert_eq!(
        keys(IbverbsConfig {
            dst_mac: None,
            ..config()
        }),
        ["dst_ip", "dst_port"]
    );
    assert_eq!(
        keys(IbverbsConfig {
            rx_depth: 8,
            tx_depth: 1 << 20,
            buffers: 8,
            ..config()
        }),
        ["rx_depth", "tx_depth"]
    );
    assert_eq!(
        keys(IbverbsConfig {
            ib_port: 0,
            buffer_size: 32,
            ..config()
        }),
        ["ib_port", "buffer_size", "inline"]
    );
    assert!(
        keys(IbverbsConfig {
            rx_depth: 32768,
            buffers: 32768,
            tx_depth: 32768,
            buffer_size: 16384,
            ..config()
        })
        .is_empty(),
        "the largest geometry (1 GiB registered) is valid"
    );
}

#[test]
fn recv_slots_account_for_every_slot() {
    let mut s = RecvSlots::new(8, 100);
    let first: Vec<RecvSlot> = s.take_batch().to_vec();
    assert_eq!(first.len(), 8);
    assert_eq!((first[0].wr_id, first[0].offset, first[0].len), (0, 0, 100));
    assert_eq!(first[7].offset, 700);
    assert_eq!((s.posted(), s.waiting()), (8, 0));
    assert!(!s.should_post(2));
    assert_eq!(s.complete(3).unwrap().offset, 300);
    assert_eq!(s.complete(3), Err(SlotError::NotOutstanding(3)));
    assert_eq!(s.complete(8), Err(SlotError::Unknown(8)));
    assert_eq!(s.complete(u64::MAX), Err(SlotError::Unknown(u64::MAX)));
    assert!(!s.should_post(2), "one waiting, seven posted");
    s.complete(5).unwrap();
    assert!(s.should_post(2));
    assert_eq!(s.take_batch().len(), 2);
    s.unpost();
    assert_eq!((s.posted(), s.waiting()), (6, 2));
    for i in [0, 1, 2] {
        s.complete(i).unwrap();
    }
    assert!(s.should_post(100), "fewer than half posted");
}

proptest::proptest! {
    #[test]
    fn recv_slots_never_lose_a_slot(ops in proptest::collection::vec((0u8..3, 0u64..20), 1..300)) {
        let mut s = RecvSlots::new(16, 64);
        s.take_batch();
        let mut held = std::collections::BTreeSet::new();
        held.extend(0..16u64);
        for (op, id) in ops {
            match op {
                0 => {
                    let r = s.complete(id);
                    proptest::prop_assert_eq!(r.is_ok(), held.remove(&id));
                }
                1 => {
                    for x in s.take_batch() {
                        proptest::prop_assert!(held.insert(x.wr_id));
                    }
                }
                _ => {
                    let b: Vec<u64> = s.take_batch().iter().map(|x| x.wr_id).collect();
                    s.unpost();
                    proptest::prop_assert!(b.iter().all(|x| !held.contains(x)));
                }
            }
            proptest::prop_assert_eq!(s.posted(), held.len());
            proptest::prop_assert_eq!(s.posted() + s.waiting(), 16);
        }
    }

    #[test]
    fn send_ring_retires_in_order(bursts in proptest::collection::vec((1usize..40, proptest::bool::ANY), 1..100)) {
        let mut r = SendRing::new(64, 10);
        let mut signaled = VecDeque::new();
        for (n, complete) in bursts {
            let n = n.min(r.free());
            let mut sends: Vec<SendSlot> = (0..n).map(|_| r.push(10)).collect();
            r.close_burst(&mut sends);
            for s in &sends {
                proptest::prop_assert_eq!(s.offset, (s.wr_id % 64) as usize * 10);
                if s.signaled {
                    signaled.push_back(s.wr_id);
                }
            }
            proptest::prop_assert!(r.outstanding() <= 64);
            if complete || r.free() == 0 {
                while let Some(id) = signaled.pop_front() {
                    r.complete(id).unwrap();
                }
                // The last of every burst is signaled: nothing is left.
                proptest::prop_assert_eq!(r.outstanding(), 0);
            }
        }
    }
}

#[test]
fn send_ring_signals_sparsely_and_rolls_back() {
    let mut r = SendRing::new(16, 100);
    let sends: Vec<SendSlot> = (0..8).map(|_| r.push(60)).collect();
    assert_eq!(
        sends
            .iter()
            .filter(|s| s.signaled)
            .map(|s| s.wr_id)
            .collect::<Vec<_>>(),
        [3, 7],
        "every depth/4-th"
    );
    assert_eq!(r.free(), 8);
    assert_eq!(r.complete(3), Ok(4));
    assert_eq!(r.complete(3), Err(SlotError::NotOutstanding(3)));
    assert_eq!(r.complete(8), Err(SlotError::NotOutstanding(8)));
    r.rollback(2);
    assert_eq!((r.outstanding(), r.free()), (2, 14));
    assert_eq!(r.push(1).wr_id, 6, "rolled-back ids are reused");
}

#[test]
fn loopback_delivers_every_selected_frame_intact() {
    let c = config();
    let pool = pool();
    let (link, mut port) = pair(&c, &pool);
    let mut tx = port.tx.pop().unwrap();
    let mut rx = port.rx.pop().unwrap();
    let now = Instant::ZERO;
    let mut sent = Vec::new();
    let mut received = Vec::new();
    let mut out = Burst::new();
    // 3000 frames through 32 send slots and 64 receive slots: both rings
    // wrap many times; every third frame is for another port (filtered).
    let mut i = 0u32;
    let (mut all_bytes, mut inline) = (0u64, 0u64);
    while i < 3000 {
        let frames: Vec<Vec<u8>> = (i..(i + 24).min(3000))
            .map(|k| {
                let port = if k % 3 == 2 { 9 } else { 7148 };
                frame(MAC, [10, 0, 0, 2], port, k, 60 + (k as usize * 7) % 1400)
            })
            .collect();
        let mut b = burst_of(&pool, &frames);
        let taken = tx.tx_burst(now, &mut b);
        for f in &frames[..taken] {
            all_bytes += f.len() as u64;
            inline += u64::from(f.len() <= 60);
            if dst_port(f) != 9 {
                sent.push(f.clone());
            }
        }
        i += taken as u32;
        drop(b);
        loop {
            let n = rx.rx_burst(now, &mut out, 32);
            for p in out.drain() {
                received.push(p.data().to_vec());
            }
            if n == 0 {
                break;
            }
        }
    }
    tx.flush(now);
    while rx.rx_burst(now, &mut out, 32) > 0 {
        for p in out.drain() {
            received.push(p.data().to_vec());
        }
    }
    assert_eq!(received.len(), 2000);
    assert!(
        received == sent,
        "every selected frame, intact and in order"
    );
    let l = link.lock().unwrap();
    assert_eq!((l.filtered, l.no_slot), (1000, 0));
    let r = port.stats.report();
    assert_eq!(
        (r.kind, r.tx_packets, r.rx_packets, r.dropped),
        ("ibverbs", 3000, 2000, 0)
    );
    assert_eq!(r.tx_bytes, all_bytes);
    assert_eq!(r.rx_bytes, sent.iter().map(|f| f.len() as u64).sum::<u64>());
    assert_eq!(r.detail["rx_posted"], 64, "every slot back with the NIC");
    assert_eq!(r.detail["tx_outstanding"], 0);
    assert_eq!((r.detail["tx_inline"], inline), (15, 15), "60-byte frames");
    assert!(r.detail["tx_signaled"] >= 3000 / 24);
    for k in [
        "rx_completion_errors",
        "rx_too_big",
        "rx_bogus_completions",
        "tx_post_errors",
        "tx_completion_errors",
    ] {
        assert_eq!(r.detail[k], 0, "{k}");
    }
}

#[test]
fn frames_beyond_the_posted_slots_are_dropped_by_the_nic_not_the_port() {
    let c = IbverbsConfig {
        buffers: 4,
        ..config()
    };
    let pool = pool();
    let (link, mut port) = pair(&c, &pool);
    let mut tx = port.tx.pop().unwrap();
    let mut rx = port.rx.pop().unwrap();
    let frames: Vec<Vec<u8>> = (0..10)
        .map(|k| frame(MAC, [10, 0, 0, 2], 7148, k, 100))
        .collect();
    let mut b = burst_of(&pool, &frames);
    assert_eq!(tx.tx_burst(Instant::ZERO, &mut b), 10);
    tx.flush(Instant::ZERO);
    let mut out = Burst::new();
    assert_eq!(rx.rx_burst(Instant::ZERO, &mut out, 32), 4);
    assert_eq!(link.lock().unwrap().no_slot, 6);
    let r = port.stats.report();
    assert_eq!(
        r.detail["rx_posted"], 4,
        "reposted at once: fewer than half were posted"
    );
    let seqs: Vec<u8> = out.iter().map(|p| body(p.data())[3]).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
}

#[test]
fn completion_errors_and_small_pool_buffers_are_counted_and_slots_reused() {
    let c = config();
    let small = Pool::new(&PoolConfig {
        count: 256,
        buf_size: 512,
        ..PoolConfig::default()
    })
    .unwrap();
    let link = Arc::new(Mutex::new(Link::default()));
    let stats = new_stats();
    let mut fr = FakeRecv::new(&link, &c);
    fr.bad_status_every = Some(5);
    let rx = IbvRx::new(fr, c.buffers, c.buffer_size, &small, stats.clone()).unwrap();
    let mut port = assemble(&c, stats, Some(rx), Some(FakeSend::new(&link, &c)), &small);
    assert_eq!(port.warnings.len(), 1, "{:?}", port.warnings);
    assert!(port.warnings[0].contains("rx_too_big"));
    let mut rx = port.rx.pop().unwrap();
    let mut out = Burst::new();
    let mut got = 0;
    for k in 0..201u32 {
        // Every 10th (k = 3 mod 10) is too big for a 384-byte pool buffer;
        // the last is larger than a slot (a length error from the NIC).
        let len = match k {
            200 => 1600,
            _ if k % 10 == 3 => 1000,
            _ => 200,
        };
        link.lock()
            .unwrap()
            .frames
            .push_back(frame(MAC, [10, 0, 0, 2], 7148, k, len));
        if k % 16 == 15 || k == 200 {
            while rx.rx_burst(Instant::ZERO, &mut out, 32) > 0 {
                got += out.len();
                out.clear();
            }
        }
    }
    assert_eq!(link.lock().unwrap().no_slot, 0);
    let r = port.stats.report();
    let errors = r.detail["rx_completion_errors"];
    let too_big = r.detail["rx_too_big"];
    // Every 5th completion (k = 4 mod 5) fails, and the oversized frame.
    assert_eq!(errors, 40 + 1);
    assert_eq!(too_big, 20);
    assert_eq!(got as u64, 201 - errors - too_big);
    assert_eq!((r.rx_packets, r.dropped), (got as u64, errors + too_big));
    assert_eq!(r.detail["rx_posted"], 64);
}

#[test]
fn a_failed_post_drops_and_counts_the_burst() {
    let c = config();
    let pool = pool();
    let link = Arc::new(Mutex::new(Link::default()));
    let mut fs = FakeSend::new(&link, &c);
    fs.fail_posts = true;
    let mut port = assemble::<FakeRecv, _>(&c, new_stats(), None, Some(fs), &pool);
    assert!(port.rx.is_empty());
    let mut tx = port.tx.pop().unwrap();
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|k| frame(MAC, [10, 0, 0, 2], 7148, k, 100))
        .collect();
    let mut b = burst_of(&pool, &frames);
    assert_eq!(tx.tx_burst(Instant::ZERO, &mut b), 5);
    assert!(b.is_empty());
    let r = port.stats.report();
    assert_eq!((r.tx_packets, r.dropped), (0, 5));
    assert_eq!(
        (r.detail["tx_post_errors"], r.detail["tx_outstanding"]),
        (1, 0)
    );
    drop(tx);
    assert_eq!(
        pool.stats().free,
        pool.stats().count,
        "every buffer back in the pool"
    );
}

#[test]
fn a_full_send_ring_refuses_until_completions_retire_it() {
    let c = config();
    let pool = pool();
    let link = Arc::new(Mutex::new(Link::default()));
    let mut fs = FakeSend::new(&link, &c);
    fs.fail_status = Some(5); // IBV_WC_WR_FLUSH_ERR: retired, counted
    let mut port = assemble::<FakeRecv, _>(&c, new_stats(), None, Some(fs), &pool);
    let mut tx = port.tx.pop().unwrap();
    let frames: Vec<Vec<u8>> = (0..40)
        .map(|k| frame(MAC, [10, 0, 0, 2], 7148, k, 100))
        .collect();
    let mut b = burst_of(&pool, &frames);
    // 32 slots: the first call takes 32 (nothing completed yet: the fake
    // NIC transmits at the next poll).
    assert_eq!(tx.tx_burst(Instant::ZERO, &mut b), 32);
    assert_eq!(b.len(), 8);
    assert_eq!(tx.tx_burst(Instant::ZERO, &mut b), 8);
    let r = port.stats.report();
    assert_eq!(r.tx_packets, 40);
    assert!(r.detail["tx_completion_errors"] >= 1);
    assert_eq!(link.lock().unwrap().frames.len(), 32);
}

#[test]
fn the_no_device_error_says_what_is_missing() {
    let none = Environment::default();
    let m = explain(&IbvError::NoDevice, &none);
    assert!(m.contains("no RDMA device"), "{m}");
    assert!(m.contains("/sys/class/infiniband has none"), "{m}");
    assert!(m.contains("no libibverbs provider is installed"), "{m}");
    assert!(m.contains("apt-get install ibverbs-providers"), "{m}");
    let providers = Environment {
        kernel_devices: vec![],
        providers: vec!["mlx5".into(), "rxe".into()],
    };
    let m = explain(&IbvError::NoDevice, &providers);
    assert!(m.contains("providers installed: mlx5, rxe"), "{m}");
    let orphan = Environment {
        kernel_devices: vec!["mlx5_0".into()],
        providers: vec![],
    };
    let m = explain(&IbvError::NoDevice, &orphan);
    assert!(
        m.contains("RDMA device(s) mlx5_0 but libibverbs found none"),
        "{m}"
    );
    assert!(m.contains("no libibverbs provider drives them"), "{m}");
    let m = explain(
        &IbvError::NoSuchDevice {
            name: "mlx5_9".into(),
            available: "mlx5_0, mlx5_1".into(),
        },
        &orphan,
    );
    assert!(m.contains("no RDMA device named `mlx5_9`"), "{m}");
    assert!(m.contains("mlx5_0, mlx5_1"), "{m}");
}
