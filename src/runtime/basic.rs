//! The basic stages (Snabb's `basic_apps`): source, forward, sink, and the
//! [`Input`]/[`Output`] ends that let any stage read or write a port or a ring.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use crate::buf::{Burst, Consumer, Packet, PoolCache, Producer};
use crate::net::stack::{UdpV4, UDP_V4_HEADERS};
use crate::port::{RxQueue, TxQueue};
use crate::time::Instant;

use super::{Context, Poll, Stage, StageCounters};
use crate::buf::counter::CacheAligned;

/// Where a stage receives from.
pub enum Input {
    /// A port's receive side.
    Port(Box<dyn RxQueue>),
    /// A ring's consumer end.
    Ring(Consumer<Packet>),
}

impl Input {
    /// Receives up to `max` packets (and at most the burst's room) into `out`.
    #[inline]
    pub fn recv(&mut self, now: Instant, out: &mut Burst, max: usize) -> usize {
        match self {
            Input::Port(p) => p.rx_burst(now, out, max),
            Input::Ring(c) => c.pop_bulk_into(max.min(out.room()), out.vec_mut()),
        }
    }

    /// The stage inspects every frame itself (see [`RxQueue::set_inspected`]).
    pub fn set_inspected(&mut self) {
        if let Input::Port(p) = self {
            p.set_inspected();
        }
    }

    /// Offers a frame the stage did not recognise to the port (see
    /// [`RxQueue::offer`]); whether the port took it.
    #[inline]
    pub fn offer(&mut self, now: Instant, frame: &[u8]) -> bool {
        match self {
            Input::Port(p) => p.offer(now, frame),
            Input::Ring(_) => false,
        }
    }

    /// Whether [`Input::recv_mbufs`] works (a dpdk queue).
    #[cfg(feature = "dpdk")]
    pub fn mbuf_native(&self) -> bool {
        matches!(self, Input::Port(p) if p.mbuf_native())
    }

    /// Receives raw mbufs (see [`RxQueue::rx_mbufs`]): (mbufs, bytes), zeros
    /// for other inputs.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub fn recv_mbufs(&mut self, out: &mut crate::sys::dpdk::Burst, max: usize) -> (usize, u64) {
        match self {
            Input::Port(p) => p.rx_mbufs(out, max).unwrap_or((0, 0)),
            Input::Ring(_) => (0, 0),
        }
    }

    /// Whether no packet will ever come again.
    pub fn is_finished(&self) -> bool {
        match self {
            Input::Port(p) => p.is_finished(),
            Input::Ring(_) => false,
        }
    }

    /// Whether the input can end by itself.
    pub fn is_finite(&self) -> bool {
        matches!(self, Input::Port(p) if p.is_finite())
    }
}

/// Where a stage transmits to.
pub enum Output {
    /// A port's transmit side.
    Port(Box<dyn TxQueue>),
    /// A ring's producer end.
    Ring(Producer<Packet>),
}

impl Output {
    /// Sends the burst; packets not taken stay in it.
    #[inline]
    pub fn send(&mut self, now: Instant, burst: &mut Burst) -> usize {
        match self {
            Output::Port(p) => p.tx_burst(now, burst),
            Output::Ring(r) => r.push_bulk(burst.vec_mut()),
        }
    }

    /// Sends the burst and drops (counting) whatever was not taken; returns
    /// (sent, dropped).
    #[inline]
    pub fn send_or_drop(&mut self, now: Instant, burst: &mut Burst) -> (usize, usize) {
        let sent = self.send(now, burst);
        let dropped = burst.len();
        if dropped > 0 {
            if let Output::Ring(r) = self {
                r.count_dropped(dropped as u64);
            }
            burst.clear();
        }
        (sent, dropped)
    }

    /// Allocates packets in the output port's own buffers, when it has them
    /// (see [`TxQueue::alloc`]).
    #[inline]
    pub fn alloc(&mut self, out: &mut Burst, n: usize) -> Option<usize> {
        match self {
            Output::Port(p) => p.alloc(out, n),
            Output::Ring(_) => None,
        }
    }

    /// Whether the raw mbuf methods work (a dpdk queue).
    #[cfg(feature = "dpdk")]
    pub fn mbuf_native(&self) -> bool {
        matches!(self, Output::Port(p) if p.mbuf_native())
    }

    /// The port's mbuf pool (see [`TxQueue::mbuf_pool`]); `None` for a
    /// ring or a port without mbufs.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub fn mbuf_pool(&self) -> Option<&crate::sys::dpdk::PktmbufPool> {
        match self {
            Output::Port(p) => p.mbuf_pool(),
            Output::Ring(_) => None,
        }
    }

    /// Sends raw mbufs, which hold `total` bytes (the caller knows them: it
    /// built or received the burst), and frees (counting) what the port did
    /// not take; returns (sent, dropped, bytes sent). Only for a dpdk output.
    #[cfg(feature = "dpdk")]
    #[inline]
    pub fn send_mbufs_or_drop(
        &mut self,
        mb: &mut crate::sys::dpdk::Burst,
        total: u64,
    ) -> (usize, usize, u64) {
        let sent = match self {
            Output::Port(p) => p.tx_mbufs(mb, total).unwrap_or(0),
            Output::Ring(_) => 0,
        };
        let dropped = mb.len();
        let mut sent_bytes = total;
        if dropped > 0 {
            sent_bytes -= mb.bytes();
            mb.clear();
        }
        (sent, dropped, sent_bytes)
    }

    /// Lets the port release what it holds back.
    #[inline]
    pub fn flush(&mut self, now: Instant) {
        if let Output::Port(p) = self {
            p.flush(now);
        }
    }

    /// Final flush at stop.
    pub fn finish(&mut self) -> Result<(), String> {
        match self {
            Output::Port(p) => p.finish().map_err(|e| e.to_string()),
            Output::Ring(_) => Ok(()),
        }
    }
}

/// A minimal valid Ethernet/IPv4/UDP frame of `frame` bytes (FCS included, so
/// the packet holds `frame - 4`): 02:00:00:00:00:01 -> 02:00:00:00:00:02,
/// 10.0.0.1:1024 -> 10.0.0.2:1024, IPv4 header checksum set, UDP checksum 0.
pub fn udp_template(frame: usize) -> Vec<u8> {
    let len = frame.saturating_sub(4).max(UDP_V4_HEADERS);
    let mut f = vec![0u8; len];
    UdpV4 {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
        src: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1024),
        dst: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 1024),
        ttl: 64,
        payload_len: len - UDP_V4_HEADERS,
    }
    .emit(&mut f);
    f
}

/// Emits a fixed template packet, as fast as possible or paced at a rate, for
/// ever or for a count. A paced source that falls more than `max_lag` behind
/// (its lcore lost the core) skips what is older, counting it as `late`,
/// rather than catching up in a flood the device under test would not
/// otherwise see.
pub struct Source {
    out: Output,
    cache: PoolCache,
    template: Vec<u8>,
    pacing: SourcePacing,
    /// Packets attempted so far (sent, refused, without a buffer or late).
    attempted: u64,
    /// Packets skipped for being more than `max_lag` late.
    late: u64,
    start: Option<Instant>,
    burst: Burst,
    counters: Arc<CacheAligned<StageCounters>>,
}

/// When and how much a [`Source`] sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SourcePacing {
    /// Packets per second; `None` is as fast as possible.
    pub rate_pps: Option<f64>,
    /// Packets to send before finishing; `None` is forever.
    pub count: Option<u64>,
    /// Packets per burst.
    pub burst: usize,
    /// How late a paced packet may still go out.
    pub max_lag: std::time::Duration,
}

impl Source {
    /// A source sending `template` copies to `out`.
    pub fn new(
        out: Output,
        cache: PoolCache,
        template: Vec<u8>,
        pacing: SourcePacing,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Self {
        Source {
            out,
            cache,
            template,
            pacing,
            attempted: 0,
            late: 0,
            start: None,
            burst: Burst::new(),
            counters,
        }
    }

    fn budget(&mut self, now: Instant) -> u64 {
        let mut budget = self.pacing.burst as u64;
        if let Some(rate) = self.pacing.rate_pps {
            let start = *self.start.get_or_insert(now);
            let due = (rate * (now - start).as_secs_f64()) as u64;
            let mut behind = due.saturating_sub(self.attempted);
            // As the generator: at most `max_lag` (and two bursts) of backlog.
            let allowed = ((rate * self.pacing.max_lag.as_secs_f64()) as u64)
                .max(2 * self.pacing.burst as u64);
            if behind > allowed {
                let left = self.pacing.count.map_or(u64::MAX, |c| c - self.attempted);
                let skip = (behind - allowed).min(left);
                self.attempted += skip;
                self.late += skip;
                behind -= skip;
            }
            budget = budget.min(behind);
        }
        if let Some(count) = self.pacing.count {
            budget = budget.min(count - self.attempted);
        }
        budget
    }
}

impl Stage for Source {
    fn poll(&mut self, cx: &Context) -> Poll {
        if self.pacing.count.is_some_and(|c| self.attempted >= c) {
            self.out.flush(cx.now);
            return Poll::Finished;
        }
        if cx.draining {
            self.out.flush(cx.now);
            return Poll::Idle;
        }
        let budget = self.budget(cx.now) as usize;
        if budget == 0 {
            self.out.flush(cx.now);
            return Poll::Idle;
        }
        let got = self.cache.alloc_bulk(&mut self.burst, budget);
        for pkt in self.burst.iter_mut() {
            // Cannot fail: the plan checked the frame fits a buffer.
            let _ = pkt.set_data(&self.template);
        }
        let bytes = got as u64 * self.template.len() as u64;
        let (sent, dropped) = self.out.send_or_drop(cx.now, &mut self.burst);
        self.attempted += budget as u64;
        let c = &self.counters;
        c.packets_out.add(sent as u64);
        c.bytes_out.add(bytes * sent as u64 / got.max(1) as u64);
        c.dropped.add((dropped + budget - got) as u64);
        Poll::Busy
    }

    fn is_finite(&self) -> bool {
        self.pacing.count.is_some()
    }

    fn finish(&mut self) -> Result<(), String> {
        self.out.finish()
    }

    fn detail(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "late": self.late }))
    }
}

/// Moves packets from its input to its output; drops (counted) what the
/// output refuses.
pub struct Forward {
    input: Input,
    out: Output,
    burst_size: usize,
    burst: Burst,
    /// Raw mbufs when both ends are dpdk queues: testpmd's io path, with no
    /// per-packet wrapping into a `Packet`.
    #[cfg(feature = "dpdk")]
    mbufs: Option<Box<crate::sys::dpdk::Burst>>,
    counters: Arc<CacheAligned<StageCounters>>,
}

impl Forward {
    /// A forwarder from `input` to `out`.
    pub fn new(
        input: Input,
        out: Output,
        burst_size: usize,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Self {
        #[cfg(feature = "dpdk")]
        let mbufs = (input.mbuf_native() && out.mbuf_native()).then(Box::default);
        Forward {
            input,
            out,
            burst_size,
            burst: Burst::new(),
            #[cfg(feature = "dpdk")]
            mbufs,
            counters,
        }
    }

    /// The raw-mbuf path: `None` when the ends are not both dpdk queues.
    #[cfg(feature = "dpdk")]
    #[inline]
    fn poll_mbufs(&mut self) -> Option<(usize, usize, usize, u64, u64)> {
        let mb = self.mbufs.as_deref_mut()?;
        let (n, bytes) = self.input.recv_mbufs(mb, self.burst_size);
        if n == 0 {
            return Some((0, 0, 0, 0, 0));
        }
        let (sent, dropped, bytes_out) = self.out.send_mbufs_or_drop(mb, bytes);
        Some((n, sent, dropped, bytes, bytes_out))
    }

    #[cfg(not(feature = "dpdk"))]
    #[inline]
    fn poll_mbufs(&mut self) -> Option<(usize, usize, usize, u64, u64)> {
        None
    }
}

impl Stage for Forward {
    fn poll(&mut self, cx: &Context) -> Poll {
        let (n, sent, dropped, bytes, bytes_out) = match self.poll_mbufs() {
            Some(r) => r,
            None => {
                let n = self.input.recv(cx.now, &mut self.burst, self.burst_size);
                if n == 0 {
                    (0, 0, 0, 0, 0)
                } else {
                    let bytes = self.burst.bytes();
                    let (sent, dropped) = self.out.send_or_drop(cx.now, &mut self.burst);
                    let bytes_out = if dropped == 0 {
                        bytes
                    } else {
                        bytes * sent as u64 / n as u64
                    };
                    (n, sent, dropped, bytes, bytes_out)
                }
            }
        };
        if n == 0 {
            self.out.flush(cx.now);
            return if self.input.is_finished() {
                Poll::Finished
            } else {
                Poll::Idle
            };
        }
        let c = &self.counters;
        c.packets_in.add(n as u64);
        c.bytes_in.add(bytes);
        c.packets_out.add(sent as u64);
        c.bytes_out.add(bytes_out);
        c.dropped.add(dropped as u64);
        Poll::Busy
    }

    fn needs_clock(&self) -> bool {
        // The raw-mbuf path hands no time to its dpdk queues.
        #[cfg(feature = "dpdk")]
        if self.mbufs.is_some() {
            return false;
        }
        true
    }

    fn is_finite(&self) -> bool {
        self.input.is_finite()
    }

    fn finish(&mut self) -> Result<(), String> {
        self.out.finish()
    }
}

/// Counts and frees packets, returning buffers to its lcore's cache in bulk.
pub struct Sink {
    input: Input,
    cache: PoolCache,
    burst_size: usize,
    burst: Burst,
    counters: Arc<CacheAligned<StageCounters>>,
}

impl Sink {
    /// A sink draining `input`.
    pub fn new(
        input: Input,
        cache: PoolCache,
        burst_size: usize,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Self {
        Sink {
            input,
            cache,
            burst_size,
            burst: Burst::new(),
            counters,
        }
    }
}

impl Stage for Sink {
    fn poll(&mut self, cx: &Context) -> Poll {
        let n = self.input.recv(cx.now, &mut self.burst, self.burst_size);
        if n == 0 {
            return if self.input.is_finished() {
                Poll::Finished
            } else {
                Poll::Idle
            };
        }
        self.counters.packets_in.add(n as u64);
        self.counters.bytes_in.add(self.burst.bytes());
        self.cache.free_bulk(&mut self.burst);
        Poll::Busy
    }

    fn is_finite(&self) -> bool {
        self.input.is_finite()
    }
}

/// A source stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// The rate as written; `None` is as fast as possible.
    pub rate: Option<crate::units::Rate>,
    /// The rate in packets/s, resolved by the plan against the tx port.
    pub rate_pps: Option<f64>,
    /// Frame size in bytes, FCS included (the packet holds 4 bytes fewer).
    pub frame: usize,
    /// Packets to send before finishing; `None` is forever.
    pub count: Option<u64>,
    /// Packets per burst.
    pub burst: usize,
    /// How late a paced packet may go out; later ones are skipped (counted as
    /// `late`), so a source that lost its core does not catch up in a flood.
    pub max_lag: std::time::Duration,
}

/// A forward stage's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardConfig {
    /// Packets per burst.
    pub burst: usize,
}

/// A sink stage's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkConfig {
    /// Packets per burst.
    pub burst: usize,
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn template_is_a_valid_udp_frame() {
        use crate::net::{ipv4, udp_payload};
        let f = udp_template(64);
        assert_eq!(f.len(), 60);
        let v = udp_payload(&f).unwrap();
        let ip = ipv4::Packet::new_checked(v.ip()).unwrap();
        assert!(ip.verify_checksum(), "checksum over a valid header is zero");
        assert_eq!(ip.total_len(), 46);
        assert_eq!(v.udp().len(), 26);
    }

    #[test]
    fn a_paced_source_skips_what_is_more_than_max_lag_late() {
        use crate::buf::{Pool, PoolConfig};
        use crate::port::mem;
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let port = mem::open(&mem::MemConfig {
            ring: 1 << 16,
            ..Default::default()
        });
        let counters: Arc<CacheAligned<StageCounters>> = Arc::new(CacheAligned::default());
        let mut s = Source::new(
            Output::Port(port.tx.into_iter().next().unwrap()),
            pool.cache(),
            udp_template(64),
            SourcePacing {
                rate_pps: Some(1e6),
                count: Some(10_000),
                burst: 32,
                max_lag: std::time::Duration::from_micros(100),
            },
            counters.clone(),
        );
        let mut poll = |us: u64| {
            s.poll(&Context {
                now: Instant::from_micros(us),
                draining: false,
            })
        };
        // On time for 1 ms: every packet due goes out.
        for us in 0..=1000 {
            poll(us);
        }
        let before = counters.packets_out.get();
        assert!((990..=1000).contains(&before), "{before}");
        // The lcore loses its core for 2 ms: about 2000 packets fall due at
        // once, and at most 100 us of them (plus a burst) may still go out.
        let mut after_stall = 0;
        while after_stall < 20 && poll(3000) == Poll::Busy {
            after_stall += 1;
        }
        let burst_after_stall = counters.packets_out.get() - before;
        assert!(
            (100..=132).contains(&burst_after_stall),
            "{burst_after_stall}"
        );
        let mut us = 3001;
        while poll(us) != Poll::Finished {
            us += 1;
            assert!(us < 20_000, "the source never finished");
        }
        let late = s.detail().unwrap()["late"].as_u64().unwrap();
        assert!((1850..=2000).contains(&late), "late {late}");
        let dropped = counters.dropped.get();
        assert_eq!(counters.packets_out.get() + dropped + late, 10_000);
    }
}
