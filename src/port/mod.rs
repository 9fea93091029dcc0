//! Ports: where packets enter and leave a pipeline, all behind one burst
//! interface (spead2's lesson: the same receiver runs on any transport).
//!
//! A port opens into an optional receive side ([`RxQueue`]) and an optional
//! transmit side ([`TxQueue`]), each owned by one stage on one lcore, plus a
//! [`PortStats`] that any thread reads while the pipeline runs.

#[cfg(feature = "dpdk")]
#[allow(unsafe_code)]
pub mod dpdk;
pub mod encap;
#[cfg(feature = "ibverbs")]
pub mod ibverbs;
pub mod impair;
pub mod mem;
pub mod pcap;
#[allow(unsafe_code)]
pub mod udp;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::buf::counter::{CacheAligned, Counter};
use crate::buf::Burst;
use crate::time::Instant;

/// The receive side of a port.
pub trait RxQueue: Send {
    /// Appends up to `max` received packets (never more than `out.room()`) to
    /// `out`; returns how many.
    fn rx_burst(&mut self, now: Instant, out: &mut Burst, max: usize) -> usize;

    /// Whether this side will never produce another packet (a capture read to
    /// its end). Live ports are never finished.
    fn is_finished(&self) -> bool {
        false
    }

    /// Whether this side can finish at all (a capture replayed a set number of
    /// times); the pipeline stops by itself when every finite input finished.
    fn is_finite(&self) -> bool {
        false
    }

    /// Called once by a stage that looks at every frame itself (an analyzer)
    /// and hands those it does not recognise to [`RxQueue::offer`]: a side that
    /// would otherwise inspect each frame (a port answering ARP/NDP) skips that.
    fn set_inspected(&mut self) {}

    /// A frame the stage did not recognise as its traffic: the port may take it
    /// (an ARP request it answers, a non-IP frame it counts). Returns whether it
    /// did; the stage then leaves it out of its own counts.
    fn offer(&mut self, _now: Instant, _frame: &[u8]) -> bool {
        false
    }

    /// Whether [`RxQueue::rx_mbufs`] works: the side is a dpdk queue, so a
    /// stage forwarding to another dpdk queue can move raw mbufs (testpmd's
    /// io path) instead of wrapping each one in a [`crate::buf::Packet`].
    #[cfg(feature = "dpdk")]
    fn mbuf_native(&self) -> bool {
        false
    }

    /// Appends up to `max` received mbufs to `out` and returns (mbufs, bytes)
    /// received (dpdk queues only; others return `None`). Counted exactly like
    /// [`RxQueue::rx_burst`]. The bytes come back so the caller need not walk
    /// the mbufs a second time.
    #[cfg(feature = "dpdk")]
    fn rx_mbufs(
        &mut self,
        _out: &mut crate::sys::dpdk::Burst,
        _max: usize,
    ) -> Option<(usize, u64)> {
        None
    }
}

/// The transmit side of a port.
pub trait TxQueue: Send {
    /// Takes packets from the front of `pkts` for transmission; returns how many
    /// it took. Packets it did not take stay in `pkts` for the caller to retry or
    /// drop (and count).
    fn tx_burst(&mut self, now: Instant, pkts: &mut Burst) -> usize;

    /// Allocates up to `n` empty packets in this port's own buffers (a dpdk
    /// port's mbufs), so a stage that builds packets for this port writes them
    /// in place instead of having them copied at the port. `None`: the port has
    /// no buffers of its own; use a pool.
    fn alloc(&mut self, _out: &mut Burst, _n: usize) -> Option<usize> {
        None
    }

    /// Called when the owning stage has nothing to send, so the port can release
    /// what it holds back (buffered writes, a packet held for reordering).
    fn flush(&mut self, _now: Instant) {}

    /// Called once when the pipeline stops; reports a late failure (a capture
    /// file that could not be written completely).
    fn finish(&mut self) -> Result<(), PortError> {
        Ok(())
    }

    /// Whether [`TxQueue::tx_mbufs`] works (see [`RxQueue::mbuf_native`]).
    #[cfg(feature = "dpdk")]
    fn mbuf_native(&self) -> bool {
        false
    }

    /// This queue's mbuf pool, to build packets straight in its mbufs (dpdk
    /// queues only; others return `None`).
    #[cfg(feature = "dpdk")]
    fn mbuf_pool(&self) -> Option<&crate::sys::dpdk::PktmbufPool> {
        None
    }

    /// Sends mbufs from the front of `burst`, which hold `bytes` in all (dpdk
    /// queues only; others return `None`); those not taken stay in it.
    /// Counted like [`TxQueue::tx_burst`].
    #[cfg(feature = "dpdk")]
    fn tx_mbufs(&mut self, _burst: &mut crate::sys::dpdk::Burst, _bytes: u64) -> Option<usize> {
        None
    }
}

/// The counters every port has, by direction. Each side is written only by the
/// lcore that owns it.
#[derive(Debug, Default)]
pub struct PortCounters {
    /// Receive side.
    pub rx: CacheAligned<DirCounters>,
    /// Transmit side.
    pub tx: CacheAligned<DirCounters>,
}

/// Packets, bytes and drops in one direction.
#[derive(Debug, Default)]
pub struct DirCounters {
    /// Packets passed.
    pub packets: Counter,
    /// Bytes passed.
    pub bytes: Counter,
    /// Packets the port had to drop in this direction (no buffer, send refused,
    /// truncated datagram, ...).
    pub dropped: Counter,
}

/// What a port reports.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PortReport {
    /// The port kind.
    pub kind: &'static str,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets transmitted (taken by the port).
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets dropped by the port, all causes.
    pub dropped: u64,
    /// Kind-specific counters (the mem wire's impairments by cause, ...).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub detail: BTreeMap<&'static str, u64>,
    /// A port of several queues (mem queue pairs, udp sockets): each queue's
    /// own counters, which add up to the ones above.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<PortReport>,
}

impl PortReport {
    /// Adds another report's counters to this one (the queues of one port).
    pub fn add(&mut self, other: &PortReport) {
        self.rx_packets += other.rx_packets;
        self.rx_bytes += other.rx_bytes;
        self.tx_packets += other.tx_packets;
        self.tx_bytes += other.tx_bytes;
        self.dropped += other.dropped;
        for (k, v) in &other.detail {
            *self.detail.entry(k).or_insert(0) += v;
        }
    }
}

/// The counters of a port's queues, each written by its own lcore, added up
/// when read.
pub struct QueueStats {
    kind: &'static str,
    parts: Vec<Arc<dyn PortStats>>,
}

impl QueueStats {
    /// The sum of `parts`, reported as a port of `kind`.
    pub fn new(kind: &'static str, parts: Vec<Arc<dyn PortStats>>) -> QueueStats {
        QueueStats { kind, parts }
    }
}

impl PortStats for QueueStats {
    fn report(&self) -> PortReport {
        let mut total = PortReport {
            kind: self.kind,
            ..PortReport::default()
        };
        for r in self.parts.iter().map(|s| s.report()) {
            total.add(&r);
            total.queues.push(r);
        }
        total
    }

    fn in_flight(&self) -> u64 {
        self.parts.iter().map(|s| s.in_flight()).sum()
    }
}

/// No counters of its own (a placeholder while a port's queues are opened).
impl PortStats for () {
    fn report(&self) -> PortReport {
        PortReport::default()
    }
}

impl PortCounters {
    /// A report with the common counters filled in.
    pub fn report(&self, kind: &'static str) -> PortReport {
        PortReport {
            kind,
            rx_packets: self.rx.packets.get(),
            rx_bytes: self.rx.bytes.get(),
            tx_packets: self.tx.packets.get(),
            tx_bytes: self.tx.bytes.get(),
            dropped: self.rx.dropped.get() + self.tx.dropped.get(),
            detail: BTreeMap::new(),
            queues: Vec::new(),
        }
    }
}

/// Reads a port's counters from any thread.
pub trait PortStats: Send + Sync {
    /// Current counters.
    fn report(&self) -> PortReport;

    /// Packets inside the port on their way from its tx side to its rx side (a
    /// mem wire's queue); the runtime drains until this is zero.
    fn in_flight(&self) -> u64 {
        0
    }

    /// The device's own MAC address, when it has one (a dpdk port's).
    fn mac(&self) -> Option<[u8; 6]> {
        None
    }
}

/// An opened port.
pub struct OpenPort {
    /// The receive sides, one per queue (`name` is queue 0, `name:1` queue 1).
    pub rx: Vec<Box<dyn RxQueue>>,
    /// The transmit sides, one per queue.
    pub tx: Vec<Box<dyn TxQueue>>,
    /// Its counters.
    pub stats: Arc<dyn PortStats>,
    /// Things the user should know (a socket buffer the kernel capped, ...).
    pub warnings: Vec<String>,
}

/// A port could not be opened or failed.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The configuration or the environment is wrong: the user can fix it.
    #[error("{0}")]
    Input(String),
    /// Something failed while running.
    #[error("{0}")]
    Runtime(String),
}
