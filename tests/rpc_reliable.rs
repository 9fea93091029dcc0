//! RPC over the reliable channel's checked PUT on impaired mem wires (loss,
//! reordering, duplication), in simulated time: both sides call each other with
//! random sizes, answer in a shuffled order, and every call is answered exactly
//! once with the response made for it.

use linerate::buf::{Pool, PoolConfig};
use linerate::port::mem::{self, MemConfig};
use linerate::reliable::Config as ReliableConfig;
use linerate::rpc::transport::reliable::{PortLink, ReliableTransport};
use linerate::rpc::{Config, Endpoint, Handler, Request};
use linerate::time::Instant;
use std::collections::HashMap;
use std::time::Duration;

/// Request payload: tag (4 LE) | wanted response length (4 LE) | filler.
fn request_payload(tag: u32, resp_len: u32, len: usize) -> Vec<u8> {
    let mut v = vec![(tag % 251) as u8; len.max(8)];
    v[..4].copy_from_slice(&tag.to_le_bytes());
    v[4..8].copy_from_slice(&resp_len.to_le_bytes());
    v
}

fn response_payload(tag: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| (tag.wrapping_mul(31) + i) as u8).collect()
}

#[derive(Default)]
struct Side {
    inbox: Vec<(Request, u32, u32)>,
    /// Call id -> (tag, wanted response length).
    outstanding: HashMap<u32, (u32, u32)>,
    answered: u64,
    errors: Vec<String>,
}

impl Handler<(u32, u32)> for Side {
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        let tag = u32::from_le_bytes(payload[..4].try_into().unwrap());
        let want = u32::from_le_bytes(payload[4..8].try_into().unwrap());
        if payload[8..].iter().any(|&b| b != (tag % 251) as u8) {
            self.errors.push(format!("request {tag} corrupted"));
        }
        self.inbox.push((req, tag, want));
    }
    fn on_response(&mut self, call_id: u32, user: (u32, u32), payload: &[u8]) {
        match self.outstanding.remove(&call_id) {
            Some(u) if u == user => {
                if payload != response_payload(user.0, user.1).as_slice() {
                    self.errors
                        .push(format!("response to {} does not match its call", user.0));
                }
                self.answered += 1;
            }
            other => self.errors.push(format!(
                "response for call id {call_id} ({user:?}) not outstanding: {other:?}"
            )),
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn impaired(seed: u64) -> MemConfig {
    MemConfig {
        loss: 0.03,
        duplicate: 0.02,
        reorder: 0.03,
        delay: Duration::from_micros(20),
        seed,
        ring: 1 << 14,
        ..MemConfig::default()
    }
}

/// Runs `calls` calls from each side over two impaired wires; returns how
/// many datagrams the wires lost, duplicated and reordered.
fn run(seed: u64, ring: u64, calls: u32, depth: u32) -> (u64, u64, u64) {
    let pool = Pool::new(&PoolConfig {
        name: "rpc-reliable".into(),
        count: 1 << 15,
        buf_size: 2048,
        headroom: 0,
        ..PoolConfig::default()
    })
    .unwrap();
    let mut wire_ab = mem::open(&impaired(seed));
    let mut wire_ba = mem::open(&impaired(seed ^ 0x5555));
    let mut link_a = PortLink::new(
        wire_ba.rx.pop().unwrap(),
        wire_ab.tx.pop().unwrap(),
        pool.cache(),
        pool.cache(),
    );
    let mut link_b = PortLink::new(
        wire_ab.rx.pop().unwrap(),
        wire_ba.tx.pop().unwrap(),
        pool.cache(),
        pool.cache(),
    );
    let rcfg = ReliableConfig::default();
    let mut ta = ReliableTransport::new(rcfg.clone(), ring).unwrap();
    let mut tb = ReliableTransport::new(rcfg, ring).unwrap();
    let (ia, ib) = (ta.info(), tb.info());
    ta.connect(ib).unwrap();
    tb.connect(ia).unwrap();
    let config = Config::new(ring);
    let mut eps: [Endpoint<(u32, u32)>; 2] = [
        Endpoint::new(config, config.local_info()).unwrap(),
        Endpoint::new(config, config.local_info()).unwrap(),
    ];
    let mut sides = [Side::default(), Side::default()];
    let mut made = [0u32; 2];
    let mut rng = Rng(seed);
    let max_payload = eps[0].max_payload().min(700) as u64;
    let max_resp = eps[0].max_response_allowance().min(700) as u64;
    let mut now = Instant::from_micros(1);
    let deadline = now + Duration::from_secs(120);
    while sides[0].answered < u64::from(calls) || sides[1].answered < u64::from(calls) {
        assert!(now < deadline, "no progress: {:?} {:?}", eps[0], eps[1]);
        now += Duration::from_micros(2);
        link_a.pump(&mut ta, now);
        link_b.pump(&mut tb, now);
        for (i, t) in [&mut ta, &mut tb].into_iter().enumerate() {
            let (ep, side) = (&mut eps[i], &mut sides[i]);
            ep.poll(t, side).unwrap_or_else(|e| panic!("side {i}: {e}"));
            assert!(ep.invariant_holds(), "side {i}");
            // Answer a random part of the inbox, in a random order.
            let n = side.inbox.len();
            for _ in 0..rng.below(n as u64 + 1) {
                let k = rng.below(side.inbox.len() as u64) as usize;
                let (req, tag, want) = side.inbox.swap_remove(k);
                ep.reply(&req, &response_payload(tag, want)).unwrap();
            }
            while made[i] < calls && ep.pending_calls() < depth {
                let tag = made[i] | ((i as u32) << 24);
                let want = rng.below(max_resp + 1) as u32;
                let len = 8 + rng.below(max_payload - 7) as usize;
                match ep.call(&request_payload(tag, want, len), want, (tag, want)) {
                    Ok(id) => {
                        side.outstanding.insert(id, (tag, want));
                        made[i] += 1;
                    }
                    Err(e) if e.kind.is_retryable() => break,
                    Err(e) => panic!("side {i}: call refused: {:?}", e.kind),
                }
            }
            ep.poll(t, side).unwrap_or_else(|e| panic!("side {i}: {e}"));
            assert!(side.errors.is_empty(), "side {i}: {:?}", side.errors);
        }
    }
    for (i, s) in sides.iter().enumerate() {
        assert_eq!(s.answered, u64::from(calls), "side {i}");
        assert!(s.outstanding.is_empty(), "side {i}");
        assert!(ta.failure().is_none() && tb.failure().is_none());
    }
    assert!(eps[0].stats().wraps > 0, "the rings wrapped");
    // The channel repaired losses (resends) and dropped duplicates under the RPC.
    let (sa, sb) = (ta.endpoint().stats(), tb.endpoint().stats());
    assert!(sa.retransmits + sb.retransmits > 0);
    assert!(sa.rx_duplicates + sb.rx_duplicates > 0);
    eprintln!(
        "seed {seed} ring {ring} depth {depth}: writes {} + {}, consumer reads {} + {}, resends {} + {}",
        eps[0].stats().writes,
        eps[1].stats().writes,
        eps[0].stats().consumer_reads,
        eps[1].stats().consumer_reads,
        sa.retransmits,
        sb.retransmits
    );
    let (ra, rb) = (wire_ab.stats.report(), wire_ba.stats.report());
    let get = |k| ra.detail.get(k).copied().unwrap_or(0) + rb.detail.get(k).copied().unwrap_or(0);
    (get("lost"), get("duplicated"), get("reordered"))
}

#[test]
fn rpc_over_reliable_put_on_an_impaired_wire() {
    for (seed, ring, depth) in [(1u64, 4096u64, 16u32), (7, 8192, 64), (42, 65536, 256)] {
        let (lost, dup, reord) = run(seed, ring, 3000, depth);
        // The wires really impaired the traffic the RPC got through.
        assert!(lost > 0 && dup > 0 && reord > 0, "{lost} {dup} {reord}");
    }
}

#[test]
fn rpc_bench_over_reliable_mem_wires() {
    use linerate::cli::rpc::{self as cli, BenchArgs, BenchTransport};
    for loss in [0.0, 0.02] {
        let args = BenchArgs {
            transport: BenchTransport::ReliableMem,
            ring: 1 << 16,
            loss,
            server_core: None,
            shm: None,
            depth: vec![1, 16],
            msg_size: 32,
            resp_size: 32,
            duration: Duration::from_millis(300),
            pingpong: Duration::ZERO,
            core: None,
            timeout: Duration::from_secs(30),
            client: None,
            server: None,
            client_netns: None,
            server_netns: None,
            client_device: None,
            server_device: None,
            eal: String::new(),
            json: None,
        };
        let report = cli::bench(&args)
            .expect("bench over reliable-mem")
            .expect("a report");
        assert_eq!(report.transport, BenchTransport::ReliableMem);
        assert_eq!(report.depths.len(), 2);
        // Every call was answered (the bench drains each depth and fails
        // otherwise); some were measured even if a thread was descheduled.
        let rpcs: u64 = report.depths.iter().map(|d| d.rpcs).sum();
        assert!(rpcs > 0, "{:?}", report.depths);
        // Every response checked: its length, its call's echoed sequence
        // number and its bytes.
        for d in &report.depths {
            assert!(d.calls > 0 && d.verified == d.calls, "{d:?}");
        }
    }
}
