//! The mem wire: an in-process link from a tx side to an rx side, with seeded,
//! reproducible impairments. It is the simulated link and the simulated device
//! under test of every later test and search.
//!
//! What happens to a packet handed to the tx side is the [`super::impair`]
//! engine's work (loss, the device model, duplication, reordering, delay), the
//! same engine the `impair` stage applies between real ports. The rx side
//! releases each packet when it is due. Every packet the wire does not deliver
//! is counted by cause, and the counts reconcile exactly: `accepted +
//! duplicated = delivered + lost + queue_dropped + overflow + in_flight`.

use std::sync::Arc;
use std::time::Duration;

use crate::buf::counter::{CacheAligned, Counter};
use crate::buf::{ring, Burst, Consumer, Packet, Producer, BURST_MAX};
use crate::time::Instant;

pub use super::impair::{Capacity, REORDER_HOLD};
use super::impair::{ImpairCounters, Impairer, Impairments};
use super::{OpenPort, PortCounters, PortReport, PortStats, RxQueue, TxQueue};

/// A mem wire's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct MemConfig {
    /// Service rate of the simulated device; `None` is an ideal wire.
    pub capacity: Option<Capacity>,
    /// Packets that may wait in the device before tail drop (with a capacity).
    pub queue: u32,
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet is duplicated.
    pub duplicate: f64,
    /// Probability that a packet is held back and overtaken by the next one.
    pub reorder: f64,
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Seed of the impairment decisions.
    pub seed: u64,
    /// Slots of the ring carrying packets to the rx side; a full ring drops
    /// (counted as `overflow`: the receiver did not keep up).
    pub ring: usize,
    /// The wire's line rate in L1 bits/s, for rates given in percent.
    pub line_rate_bps: Option<f64>,
    /// Queue pairs: each is a wire of its own from tx queue `k` to rx queue
    /// `k` (seed `seed + k`, `capacity / queues`), as an N-queue device that
    /// keeps each flow on its queue. The port's counters add them up.
    pub queues: u16,
}

impl Default for MemConfig {
    fn default() -> Self {
        let i = Impairments::default();
        MemConfig {
            capacity: i.capacity,
            queue: i.queue,
            loss: i.loss,
            duplicate: i.duplicate,
            reorder: i.reorder,
            delay: i.delay,
            seed: i.seed,
            ring: 4096,
            line_rate_bps: None,
            queues: 1,
        }
    }
}

impl MemConfig {
    /// The impairments this wire applies.
    pub fn impairments(&self) -> Impairments {
        Impairments {
            capacity: self.capacity,
            queue: self.queue,
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            delay: self.delay,
            jitter: None,
            seed: self.seed,
        }
    }

    /// Takes the impairments (all but jitter, which a wire released in
    /// order cannot reorder by) from `i`.
    pub fn with_impairments(self, i: &Impairments) -> Self {
        MemConfig {
            capacity: i.capacity,
            queue: i.queue,
            loss: i.loss,
            duplicate: i.duplicate,
            reorder: i.reorder,
            delay: i.delay,
            seed: i.seed,
            ..self
        }
    }
}

struct Stats {
    common: PortCounters,
    imp: CacheAligned<ImpairCounters>,
    /// Packets the ring refused (the receiver did not keep up).
    overflow: CacheAligned<Counter>,
    ring: crate::buf::RingStatsHandle,
    /// Packets held back for reordering right now (the packet and its copy).
    held: CacheAligned<std::sync::atomic::AtomicU64>,
}

impl PortStats for Stats {
    fn report(&self) -> PortReport {
        let mut r = self.common.report("mem");
        let i = &self.imp;
        r.dropped = i.lost.get() + i.queue_dropped.get() + self.overflow.get();
        for (k, v) in i.pairs() {
            if k != "jittered" {
                r.detail.insert(k, v);
            }
        }
        r.detail.insert("overflow", self.overflow.get());
        r.detail.insert("in_flight", self.in_flight());
        r
    }

    fn in_flight(&self) -> u64 {
        self.ring.in_flight() + self.held.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Opens a mem wire: its tx sides, its rx sides (one per queue pair) and its
/// counters.
pub fn open(config: &MemConfig) -> OpenPort {
    let n = config.queues.max(1);
    if n == 1 {
        return open_one(config);
    }
    let mut port = OpenPort {
        rx: Vec::new(),
        tx: Vec::new(),
        stats: Arc::new(()),
        warnings: Vec::new(),
    };
    let mut parts = Vec::new();
    for k in 0..n {
        let scale = |c: Capacity| match c {
            Capacity::Pps(x) => Capacity::Pps(x / f64::from(n)),
            Capacity::L2Bps(x) => Capacity::L2Bps(x / f64::from(n)),
            Capacity::L1Bps(x) => Capacity::L1Bps(x / f64::from(n)),
        };
        let one = open_one(&MemConfig {
            capacity: config.capacity.map(scale),
            seed: config.seed.wrapping_add(u64::from(k)),
            queues: 1,
            ..config.clone()
        });
        port.rx.extend(one.rx);
        port.tx.extend(one.tx);
        parts.push(one.stats);
    }
    port.stats = Arc::new(super::QueueStats::new("mem", parts));
    port
}

fn open_one(config: &MemConfig) -> OpenPort {
    let (producer, consumer) = ring::<(Packet, Instant)>(config.ring);
    let stats = Arc::new(Stats {
        common: PortCounters::default(),
        imp: CacheAligned::default(),
        overflow: CacheAligned::default(),
        ring: producer.stats_handle(),
        held: CacheAligned::default(),
    });
    let impairments = config.impairments();
    let tx = MemTx {
        engine: Impairer::new(&impairments),
        producer,
        staged: Vec::with_capacity(BURST_MAX * 2 + 1),
        stats: stats.clone(),
    };
    let rx = MemRx {
        consumer,
        timed: impairments.timed(),
        stats: stats.clone(),
    };
    OpenPort {
        rx: vec![Box::new(rx)],
        tx: vec![Box::new(tx)],
        stats,
        warnings: Vec::new(),
    }
}

struct MemTx {
    engine: Impairer,
    producer: Producer<(Packet, Instant)>,
    staged: Vec<(Packet, Instant)>,
    stats: Arc<Stats>,
}

impl MemTx {
    fn push_staged(&mut self) {
        self.stats
            .held
            .store(self.engine.held(), std::sync::atomic::Ordering::Relaxed);
        if self.staged.is_empty() {
            return;
        }
        self.producer.push_bulk(&mut self.staged);
        let n = self.staged.len() as u64;
        if n > 0 {
            self.stats.overflow.add(n);
            self.producer.count_dropped(n);
            self.staged.clear();
        }
    }
}

impl TxQueue for MemTx {
    fn tx_burst(&mut self, now: Instant, pkts: &mut Burst) -> usize {
        let taken = pkts.len();
        let bytes = pkts.bytes();
        self.engine
            .apply(now, pkts, &mut self.staged, &self.stats.imp);
        let counters = &self.stats.common.tx;
        counters.packets.add(taken as u64);
        counters.bytes.add(bytes);
        self.push_staged();
        taken
    }

    fn flush(&mut self, now: Instant) {
        if self.engine.flush(now, &mut self.staged) {
            self.push_staged();
        }
    }
}

struct MemRx {
    consumer: Consumer<(Packet, Instant)>,
    timed: bool,
    stats: Arc<Stats>,
}

impl RxQueue for MemRx {
    fn rx_burst(&mut self, now: Instant, out: &mut Burst, max: usize) -> usize {
        let max = max.min(out.room());
        let mut n = 0;
        let mut bytes = 0;
        if self.timed {
            while n < max {
                match self.consumer.peek() {
                    Some((_, release)) if *release <= now => {}
                    _ => break,
                }
                if let Some((pkt, _)) = self.consumer.pop() {
                    bytes += pkt.len() as u64;
                    let _ = out.push(pkt);
                    n += 1;
                }
            }
        } else {
            n = self.consumer.pop_bulk(max, |(pkt, _)| {
                bytes += pkt.len() as u64;
                let _ = out.push(pkt);
            });
        }
        let c = &self.stats.common.rx;
        c.packets.add(n as u64);
        c.bytes.add(bytes);
        n
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::{Pool, PoolConfig};

    fn run(config: MemConfig, n: usize, step_ns: u64) -> (Vec<u32>, PortReport) {
        let pool = Pool::new(&PoolConfig {
            count: 4096,
            ..PoolConfig::default()
        })
        .unwrap();
        let port = open(&config);
        let (mut tx, mut rx) = (
            port.tx.into_iter().next().unwrap(),
            port.rx.into_iter().next().unwrap(),
        );
        let mut cache = pool.cache();
        let mut got = Vec::new();
        let mut now = Instant::ZERO;
        let mut sent = 0u32;
        let mut out = Burst::new();
        while (sent as usize) < n {
            let mut b = Burst::new();
            let k = cache.alloc_bulk(&mut b, 8.min(n - sent as usize));
            for p in b.iter_mut() {
                p.set_data(&sent.to_be_bytes()).unwrap();
                sent += 1;
            }
            assert_eq!(tx.tx_burst(now, &mut b), k);
            now += Duration::from_nanos(step_ns);
            tx.flush(now);
            rx.rx_burst(now, &mut out, 64);
            for p in out.drain() {
                got.push(u32::from_be_bytes(p.data().try_into().unwrap()));
            }
        }
        for _ in 0..100 {
            now += Duration::from_millis(1);
            tx.flush(now);
            rx.rx_burst(now, &mut out, 64);
            for p in out.drain() {
                got.push(u32::from_be_bytes(p.data().try_into().unwrap()));
            }
        }
        (got, port.stats.report())
    }

    #[test]
    fn ideal_wire_delivers_in_order() {
        let (got, r) = run(MemConfig::default(), 1000, 100);
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
        assert_eq!((r.tx_packets, r.rx_packets, r.dropped), (1000, 1000, 0));
    }

    #[test]
    fn impairments_reconcile_and_are_reproducible() {
        let config = MemConfig {
            loss: 0.05,
            duplicate: 0.03,
            reorder: 0.04,
            delay: Duration::from_micros(20),
            seed: 42,
            ..MemConfig::default()
        };
        let (got, r) = run(config.clone(), 3000, 100);
        let d = |k| r.detail[k];
        assert!(d("lost") > 0 && d("duplicated") > 0 && d("reordered") > 0);
        assert_eq!(d("in_flight"), 0);
        assert_eq!(r.tx_packets + d("duplicated"), r.rx_packets + d("lost"));
        assert_eq!(got.len() as u64, r.rx_packets);
        assert!(got.windows(2).any(|w| w[0] > w[1]), "nothing was reordered");
        let (again, _) = run(config, 3000, 100);
        assert_eq!(got, again);
    }

    #[test]
    fn capacity_tail_drops_beyond_the_queue() {
        // 1 Mpps device, offered 8 packets every 2 us (4 Mpps), queue 16.
        let config = MemConfig {
            capacity: Some(Capacity::Pps(1e6)),
            queue: 16,
            ..MemConfig::default()
        };
        let (got, r) = run(config, 4000, 2000);
        let dropped = r.detail["queue_dropped"];
        assert!(dropped > 2000, "{dropped}");
        assert_eq!(r.rx_packets + dropped, 4000);
        assert!(got.windows(2).all(|w| w[0] < w[1]));
    }
}
