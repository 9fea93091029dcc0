//! The `impair` stage: linerate as a lossy, jittery link between any two
//! ports (udp, dpdk, mem) or rings, in real time. It is the netem a lab
//! without netem lacks: put it on the path to a device under test, or between
//! two linerate processes.
//!
//! Each packet received goes through the mem wire's impairment engine
//! ([`crate::port::impair`]: seeded loss, a device model, duplication,
//! reordering, delay, jitter), then waits in a delay line until it is due and
//! leaves on the output. The delay line holds at most `limit` packets (they
//! hold pool buffers); a packet that finds it full is dropped as `overflow`.
//! What the stage does not pass on is counted by cause, and the counts
//! reconcile exactly, as the mem wire's do:
//! `received + duplicated = sent + lost + queue_dropped + overflow + refused
//! + in_flight`, where `refused` is what the output port did not take and
//! `in_flight` what was still held when the run stopped.
//!
//! Two fast paths keep the stage near the plain forward stage when it has
//! little to do: with no impairment configured a received burst goes
//! straight to the output (counted in and out, nothing else), and with no
//! delay, jitter or device model (loss, duplication, reordering only) what
//! the engine passes goes straight out too while nothing waits in the delay
//! line. Timestamping and queueing every packet cost 44 % of forward's rate.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use crate::buf::{Burst, Packet, BURST_MAX};
use crate::port::impair::{ImpairCounters, Impairer, Impairments};
use crate::time::Instant;

use super::basic::{Input, Output};
use super::counter::{CacheAligned, Counter};
use super::{Context, Poll, Stage, StageCounters};

/// Packets the delay line holds by default.
pub const DEFAULT_LIMIT: usize = 8192;

/// An impair stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImpairSpec {
    /// What to do to the packets.
    pub impairments: Impairments,
    /// Packets the delay line may hold.
    pub limit: usize,
    /// Packets per burst.
    pub burst: usize,
}

/// A packet waiting in an unordered delay line: due first, then first come.
struct Due {
    due: Instant,
    seq: u64,
    pkt: Packet,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    /// Reversed: the standard heap is a max-heap, the line wants the earliest.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// Packets waiting until they are due. Ordered configurations emit due times
/// that never go back, so a queue suffices; unordered jitter needs a heap.
enum DelayLine {
    Fifo(VecDeque<(Packet, Instant)>),
    Heap(BinaryHeap<Due>, u64),
}

impl DelayLine {
    fn new(ordered: bool, limit: usize) -> Self {
        if ordered {
            DelayLine::Fifo(VecDeque::with_capacity(limit))
        } else {
            DelayLine::Heap(BinaryHeap::with_capacity(limit), 0)
        }
    }

    fn len(&self) -> usize {
        match self {
            DelayLine::Fifo(q) => q.len(),
            DelayLine::Heap(h, _) => h.len(),
        }
    }

    #[inline]
    fn push(&mut self, pkt: Packet, due: Instant) {
        match self {
            DelayLine::Fifo(q) => q.push_back((pkt, due)),
            DelayLine::Heap(h, seq) => {
                *seq += 1;
                h.push(Due {
                    due,
                    seq: *seq,
                    pkt,
                });
            }
        }
    }

    /// The next packet if it is due by `now`.
    #[inline]
    fn pop_due(&mut self, now: Instant) -> Option<Packet> {
        match self {
            DelayLine::Fifo(q) => match q.front() {
                Some((_, due)) if *due <= now => q.pop_front().map(|x| x.0),
                _ => None,
            },
            DelayLine::Heap(h, _) => match h.peek() {
                Some(d) if d.due <= now => h.pop().map(|d| d.pkt),
                _ => None,
            },
        }
    }

    fn clear(&mut self) {
        match self {
            DelayLine::Fifo(q) => q.clear(),
            DelayLine::Heap(h, _) => h.clear(),
        }
    }
}

/// Counts of the stage beyond the engine's.
#[derive(Debug, Default)]
struct Own {
    overflow: Counter,
    refused: Counter,
    in_flight_at_stop: Counter,
}

/// The impair stage.
pub struct Impair {
    input: Input,
    out: Output,
    engine: Impairer,
    line: DelayLine,
    limit: usize,
    burst_size: usize,
    rx: Burst,
    tx: Burst,
    staged: Vec<(Packet, Instant)>,
    imp: Arc<CacheAligned<ImpairCounters>>,
    own: Own,
    counters: Arc<CacheAligned<StageCounters>>,
    /// No impairment at all: bursts pass straight through.
    passthrough: bool,
    /// Every packet is due at once (no delay, jitter or device model).
    untimed: bool,
}

impl Impair {
    /// An impair stage from `input` to `out`.
    pub fn new(
        spec: &ImpairSpec,
        input: Input,
        out: Output,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Self {
        Impair {
            input,
            out,
            engine: Impairer::new(&spec.impairments),
            line: DelayLine::new(spec.impairments.ordered(), spec.limit),
            limit: spec.limit,
            burst_size: spec.burst,
            rx: Burst::new(),
            tx: Burst::new(),
            staged: Vec::with_capacity(BURST_MAX * 2 + 1),
            imp: Arc::new(CacheAligned::default()),
            own: Own::default(),
            counters,
            passthrough: spec.impairments.loss == 0.0
                && spec.impairments.duplicate == 0.0
                && spec.impairments.reorder == 0.0
                && !spec.impairments.timed(),
            untimed: !spec.impairments.timed(),
        }
    }

    /// Sends `self.tx` and counts the outcome; returns the packets sent.
    #[inline]
    fn send_tx(&mut self, now: Instant) -> usize {
        let n = self.tx.len();
        let bytes = self.tx.bytes();
        let (sent, refused) = self.out.send_or_drop(now, &mut self.tx);
        let c = &self.counters;
        c.packets_out.add(sent as u64);
        c.bytes_out.add(if refused == 0 {
            bytes
        } else {
            bytes * sent as u64 / n as u64
        });
        if refused > 0 {
            self.own.refused.add(refused as u64);
            c.dropped.add(refused as u64);
        }
        sent
    }

    /// The untimed fast path: sends what the engine emitted at once, in
    /// bursts, when nothing waits in the delay line before it.
    #[inline]
    fn send_staged(&mut self, now: Instant) -> usize {
        // Taken out and put back: no allocation, and `send_tx` may borrow self.
        let mut staged = core::mem::take(&mut self.staged);
        let mut sent = 0;
        for (p, _) in staged.drain(..) {
            // Cannot fail: a full burst is sent at once.
            let _ = self.tx.push(p);
            if self.tx.len() >= self.burst_size {
                sent += self.send_tx(now);
            }
        }
        if !self.tx.is_empty() {
            sent += self.send_tx(now);
        }
        self.staged = staged;
        sent
    }

    /// Packets held now: in the delay line or held back for reordering.
    fn in_flight(&self) -> u64 {
        self.line.len() as u64 + self.engine.held()
    }

    /// Moves what the engine emitted into the delay line.
    #[inline]
    fn enqueue(&mut self) {
        for (pkt, due) in self.staged.drain(..) {
            if self.line.len() >= self.limit {
                self.own.overflow.add(1);
                drop(pkt);
            } else {
                self.line.push(pkt, due);
            }
        }
    }

    /// Sends what is due; returns the packets sent.
    #[inline]
    fn release(&mut self, now: Instant) -> usize {
        let mut sent_total = 0;
        loop {
            while self.tx.len() < self.burst_size {
                match self.line.pop_due(now) {
                    Some(p) => {
                        // Cannot fail: the burst has room.
                        let _ = self.tx.push(p);
                    }
                    None => break,
                }
            }
            if self.tx.is_empty() {
                return sent_total;
            }
            let n = self.tx.len();
            sent_total += self.send_tx(now);
            if n < self.burst_size {
                return sent_total;
            }
        }
    }
}

impl Stage for Impair {
    fn poll(&mut self, cx: &Context) -> Poll {
        let now = cx.now;
        let n = self.input.recv(now, &mut self.rx, self.burst_size);
        if self.passthrough {
            if n == 0 {
                self.out.flush(now);
                return if self.input.is_finished() {
                    Poll::Finished
                } else {
                    Poll::Idle
                };
            }
            self.counters.packets_in.add(n as u64);
            self.counters.bytes_in.add(self.rx.bytes());
            core::mem::swap(&mut self.rx, &mut self.tx);
            self.send_tx(now);
            return Poll::Busy;
        }
        let direct = self.untimed && self.line.len() == 0;
        if n > 0 {
            self.counters.packets_in.add(n as u64);
            self.counters.bytes_in.add(self.rx.bytes());
            let (lost, qd) = (self.imp.lost.get(), self.imp.queue_dropped.get());
            self.engine
                .apply(now, &mut self.rx, &mut self.staged, &self.imp);
            self.counters
                .dropped
                .add(self.imp.lost.get() - lost + self.imp.queue_dropped.get() - qd);
            if direct {
                self.send_staged(now);
            } else {
                let overflow = self.own.overflow.get();
                self.enqueue();
                self.counters
                    .dropped
                    .add(self.own.overflow.get() - overflow);
            }
        }
        if self.engine.flush(now, &mut self.staged) {
            let overflow = self.own.overflow.get();
            self.enqueue();
            self.counters
                .dropped
                .add(self.own.overflow.get() - overflow);
        }
        let sent = self.release(now);
        if n > 0 || sent > 0 {
            return Poll::Busy;
        }
        self.out.flush(now);
        let holding = self.in_flight() > 0;
        if holding && cx.draining {
            // Packets still due: keep the drain waiting for them.
            return Poll::Busy;
        }
        if !holding && self.input.is_finished() {
            Poll::Finished
        } else {
            Poll::Idle
        }
    }

    fn is_finite(&self) -> bool {
        self.input.is_finite()
    }

    fn finish(&mut self) -> Result<(), String> {
        let left = self.line.len() as u64 + self.engine.discard_held();
        self.line.clear();
        self.own.in_flight_at_stop.add(left);
        self.counters.dropped.add(left);
        self.out.finish()
    }

    fn detail(&self) -> Option<serde_json::Value> {
        let mut m = serde_json::Map::new();
        for (k, v) in self.imp.pairs() {
            m.insert(k.into(), v.into());
        }
        m.insert("overflow".into(), self.own.overflow.get().into());
        m.insert("refused".into(), self.own.refused.get().into());
        m.insert(
            "in_flight".into(),
            (self.own.in_flight_at_stop.get() + self.in_flight()).into(),
        );
        Some(serde_json::Value::Object(m))
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::{Pool, PoolConfig};
    use crate::port::impair::{Distribution, Jitter};
    use crate::port::mem;
    use std::time::Duration;

    /// Runs `n` numbered packets through an impair stage between two ideal
    /// mem wires in virtual time (8 every `step`); returns the ids out, in
    /// order, the times they left, and the stage's detail.
    fn run(spec: ImpairSpec, n: u32, step: Duration) -> (Vec<(u32, Instant)>, serde_json::Value) {
        let pool = Pool::new(&PoolConfig {
            count: 16384,
            ..PoolConfig::default()
        })
        .unwrap();
        let wide = mem::MemConfig {
            ring: 1 << 15,
            ..Default::default()
        };
        let (a, b) = (mem::open(&wide), mem::open(&wide));
        let mut a_tx = a.tx.into_iter().next().unwrap();
        let mut b_rx = b.rx.into_iter().next().unwrap();
        let counters: Arc<CacheAligned<StageCounters>> = Arc::new(CacheAligned::default());
        let mut stage = Impair::new(
            &spec,
            Input::Port(a.rx.into_iter().next().unwrap()),
            Output::Port(b.tx.into_iter().next().unwrap()),
            counters.clone(),
        );
        let mut cache = pool.cache();
        let (mut now, mut sent, mut out, mut got) = (Instant::ZERO, 0u32, Burst::new(), vec![]);
        let mut poll = |now: Instant, draining: bool, got: &mut Vec<(u32, Instant)>| {
            let p = stage.poll(&Context { now, draining });
            b_rx.rx_burst(now, &mut out, 256);
            for pkt in out.drain() {
                got.push((u32::from_be_bytes(pkt.data().try_into().unwrap()), now));
            }
            p
        };
        while sent < n {
            let mut b = Burst::new();
            cache.alloc_bulk(&mut b, 8.min(n - sent) as usize);
            for p in b.iter_mut() {
                p.set_data(&sent.to_be_bytes()).unwrap();
                sent += 1;
            }
            a_tx.tx_burst(now, &mut b);
            poll(now, false, &mut got);
            now += step;
        }
        let mut spins = 0;
        while poll(now, true, &mut got) == Poll::Busy {
            now += Duration::from_micros(10);
            spins += 1;
            assert!(spins < 1_000_000, "the drain never ends");
        }
        while b_rx.rx_burst(now, &mut out, 64) > 0 {
            for pkt in out.drain() {
                got.push((u32::from_be_bytes(pkt.data().try_into().unwrap()), now));
            }
        }
        stage.finish().unwrap();
        let detail = stage.detail().unwrap();
        let c = &counters;
        let d = |k: &str| detail[k].as_u64().unwrap();
        // The reconciliation the module doc promises.
        assert_eq!(c.packets_in.get(), u64::from(n));
        assert_eq!(
            c.packets_in.get() + d("duplicated"),
            c.packets_out.get()
                + d("lost")
                + d("queue_dropped")
                + d("overflow")
                + d("refused")
                + d("in_flight")
        );
        assert_eq!(c.packets_out.get(), got.len() as u64);
        (got, detail)
    }

    fn spec(impairments: Impairments) -> ImpairSpec {
        ImpairSpec {
            impairments,
            limit: DEFAULT_LIMIT,
            burst: 32,
        }
    }

    #[test]
    fn without_impairments_it_forwards_everything_in_order() {
        let (got, d) = run(spec(Impairments::default()), 5000, Duration::from_micros(1));
        assert_eq!(d["lost"], 0);
        let ids: Vec<u32> = got.iter().map(|x| x.0).collect();
        assert_eq!(ids, (0..5000).collect::<Vec<_>>());
    }

    #[test]
    fn every_impairment_is_counted_and_reconciles() {
        let (got, d) = run(
            spec(Impairments {
                loss: 0.05,
                duplicate: 0.03,
                reorder: 0.04,
                delay: Duration::from_micros(200),
                seed: 7,
                ..Impairments::default()
            }),
            10_000,
            Duration::from_micros(1),
        );
        for k in ["lost", "duplicated", "reordered", "delayed"] {
            assert!(d[k].as_u64().unwrap() > 0, "{k}: {d}");
        }
        assert!(got.windows(2).any(|w| w[0].0 > w[1].0), "nothing reordered");
        assert_eq!(d["in_flight"], 0);
    }

    #[test]
    fn zero_delay_impairments_take_the_direct_path_and_reconcile() {
        // Loss, duplication and reordering without delay: nothing waits in
        // the delay line except the packets held for reordering.
        let imp = Impairments {
            loss: 0.05,
            duplicate: 0.03,
            reorder: 0.04,
            seed: 9,
            ..Impairments::default()
        };
        assert!(!imp.timed());
        let (got, d) = run(spec(imp), 10_000, Duration::from_micros(1));
        for k in ["lost", "duplicated", "reordered"] {
            assert!(d[k].as_u64().unwrap() > 0, "{k}: {d}");
        }
        assert_eq!(d["delayed"], 0);
        assert!(got.windows(2).any(|w| w[0].0 > w[1].0), "nothing reordered");
        // Every id not lost arrives: duplicates and reordering lose nothing.
        let mut ids: Vec<u32> = got.iter().map(|x| x.0).collect();
        ids.dedup();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len() as u64, 10_000 - d["lost"].as_u64().unwrap());
        assert_eq!(d["in_flight"], 0);
    }

    #[test]
    fn jitter_delays_in_real_order_or_not_as_asked() {
        let jitter = |keep_order| Impairments {
            delay: Duration::from_micros(100),
            jitter: Some(Jitter {
                distribution: Distribution::Uniform {
                    min: Duration::ZERO,
                    max: Duration::from_micros(400),
                },
                keep_order,
            }),
            ..Impairments::default()
        };
        let step = Duration::from_micros(8);
        let (kept, d) = run(spec(jitter(true)), 4000, step);
        assert_eq!(d["jittered"], 4000);
        let ids: Vec<u32> = kept.iter().map(|x| x.0).collect();
        assert_eq!(ids, (0..4000).collect::<Vec<_>>(), "order kept");
        let (free, _) = run(spec(jitter(false)), 4000, step);
        assert_eq!(free.len(), 4000);
        assert!(free.windows(2).filter(|w| w[0].0 > w[1].0).count() > 100);
        // Each packet left at least `delay` after it was sent (8 per step).
        for (id, t) in &free {
            let sent = Instant::ZERO + step * (id / 8);
            assert!(*t >= sent + Duration::from_micros(100), "{id}");
        }
    }

    #[test]
    fn a_full_delay_line_overflows_and_reconciles() {
        let mut s = spec(Impairments {
            delay: Duration::from_millis(5),
            ..Impairments::default()
        });
        s.limit = 100;
        let (got, d) = run(s, 2000, Duration::from_micros(1));
        assert!(d["overflow"].as_u64().unwrap() > 1000, "{d}");
        assert_eq!(got.len() as u64 + d["overflow"].as_u64().unwrap(), 2000);
    }
}
