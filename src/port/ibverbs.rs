//! The ibverbs port (feature `ibverbs`): rdma-core raw packet queues, as
//! spead2's `udp_ibv` transport drives them.
//!
//! - **Receive**: an `IBV_QPT_RAW_PACKET` queue pair fed only the frames a flow
//!   steering rule selects (destination MAC, and optionally destination IPv4
//!   address and UDP port). Its receive buffers are `buffers` slots of
//!   `buffer_size` bytes carved from one registered memory region, all posted
//!   at start and re-posted in batches (one chained `ibv_post_recv`) as their
//!   completions are consumed. Completions are polled a burst at a time; each
//!   received frame is copied once into a pool [`crate::buf::Packet`] at the
//!   port boundary, and its slot goes back to the NIC.
//! - **Transmit**: a second raw packet queue pair (one per direction, as
//!   spead2 uses one per reader and per sender, so each side is owned by one
//!   lcore without a lock). Frames are copied into send slots of a registered
//!   region and posted a burst at a time as one chained `ibv_post_send`;
//!   frames up to `inline` bytes are sent inline. Only the last send of a
//!   burst (and every `tx_depth / 4`-th) asks for a completion: send queues
//!   complete in order, so one completion retires every send before it.
//!
//! The slot bookkeeping ([`RecvSlots`], [`SendRing`]) and the burst logic are
//! written against two small traits ([`RecvQueue`], [`SendQueue`]) that the
//! hardware queue pairs implement, so everything above the verbs calls is
//! tested without an RDMA device (a software loopback model in the tests).
//! With no device, [`open`] fails with an error that says what is missing: no
//! RDMA device at all, kernel devices that no libibverbs provider drives, or
//! a device name that does not exist (with the names that do).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::buf::counter::{CacheAligned, Counter};
use crate::buf::{Burst, Pool, PoolCache, BURST_MAX};
use crate::sys::ibverbs::{
    self as verbs, FlowMatch, IbvError, MemoryRegion, QpConfig, RawQp, RecvSlot, SendBatch,
    SendSlot,
};
use crate::time::Instant;

use super::{OpenPort, PortCounters, PortError, PortReport, PortStats, RxQueue, TxQueue};

/// The ibverbs completion status of success (`IBV_WC_SUCCESS`).
pub const STATUS_OK: u32 = 0;

/// An ibverbs port's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbverbsConfig {
    /// RDMA device name (`mlx5_0`); `None` is the first device.
    pub device: Option<String>,
    /// Physical port of the device (1-based).
    pub ib_port: u8,
    /// Destination MAC the flow rule matches; without it the port does not
    /// receive.
    pub dst_mac: Option<[u8; 6]>,
    /// Destination IPv4 address the flow rule also matches.
    pub dst_ip: Option<Ipv4Addr>,
    /// Destination UDP port the flow rule also matches.
    pub dst_port: Option<u16>,
    /// Receive queue depth (work requests the NIC can hold).
    pub rx_depth: u32,
    /// Send queue depth (and send slots).
    pub tx_depth: u32,
    /// Receive buffers (slots of the receive region), at most `rx_depth`.
    pub buffers: u32,
    /// Bytes per receive and send slot: the largest frame (without FCS).
    pub buffer_size: u32,
    /// Frames up to this many bytes are sent inline.
    pub inline: u32,
    /// Line rate in L1 bits/s for rates in percent.
    pub line_rate_bps: Option<u64>,
}

impl Default for IbverbsConfig {
    fn default() -> Self {
        IbverbsConfig {
            device: None,
            ib_port: 1,
            dst_mac: None,
            dst_ip: None,
            dst_port: None,
            rx_depth: 4096,
            tx_depth: 1024,
            buffers: 4096,
            buffer_size: 2048,
            inline: 60,
            line_rate_bps: None,
        }
    }
}

/// Limits of the numeric keys, shared with the pipeline schema.
pub mod limits {
    /// Queue depths.
    pub const DEPTH: std::ops::RangeInclusive<u32> = 16..=32768;
    /// Slot sizes: a minimum frame to a jumbo frame with room to spare.
    pub const BUFFER_SIZE: std::ops::RangeInclusive<u32> = 64..=16384;
    /// Inline threshold (mlx5 supports a few hundred bytes inline).
    pub const INLINE: std::ops::RangeInclusive<u32> = 0..=512;
}

impl IbverbsConfig {
    /// The flow steering rule of the receive side, if it receives.
    pub fn flow(&self) -> Option<FlowMatch> {
        self.dst_mac.map(|dst_mac| FlowMatch {
            dst_mac,
            dst_ip: self.dst_ip,
            dst_port: self.dst_port,
        })
    }

    /// Every inconsistency, as (key, what is wrong); empty when valid.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if self.ib_port == 0 {
            p.push(("ib_port", "physical ports are numbered from 1".into()));
        }
        for (key, v) in [("rx_depth", self.rx_depth), ("tx_depth", self.tx_depth)] {
            if !limits::DEPTH.contains(&v) {
                p.push((
                    key,
                    format!(
                        "{v} is outside {}..={}",
                        limits::DEPTH.start(),
                        limits::DEPTH.end()
                    ),
                ));
            }
        }
        if self.buffers == 0 || self.buffers > self.rx_depth {
            p.push((
                "buffers",
                format!(
                    "{} receive buffers do not fit a receive queue of {} (every buffer is posted at once): use 1..={}",
                    self.buffers, self.rx_depth, self.rx_depth
                ),
            ));
        }
        if !limits::BUFFER_SIZE.contains(&self.buffer_size) {
            p.push((
                "buffer_size",
                format!(
                    "{} bytes is outside {}..={}",
                    self.buffer_size,
                    limits::BUFFER_SIZE.start(),
                    limits::BUFFER_SIZE.end()
                ),
            ));
        }
        if !limits::INLINE.contains(&self.inline) || self.inline > self.buffer_size {
            p.push((
                "inline",
                format!(
                    "an inline threshold of {} bytes must be at most {} and at most `buffer_size` ({})",
                    self.inline,
                    limits::INLINE.end(),
                    self.buffer_size
                ),
            ));
        }
        if self.dst_mac.is_none() {
            for (key, set) in [
                ("dst_ip", self.dst_ip.is_some()),
                ("dst_port", self.dst_port.is_some()),
            ] {
                if set {
                    p.push((
                        key,
                        format!("`{key}` narrows the receive flow rule, which needs `dst_mac`"),
                    ));
                }
            }
        }
        p
    }
}

/// What the flow rule of `m` lets through to the receive queue: the frame's
/// destination MAC, and when set its IPv4 destination and UDP destination
/// port (an IP or UDP spec also requires an IPv4 / UDP frame). This is the
/// NIC's matching, written out so the rule can be checked without one.
pub fn flow_selects(m: &FlowMatch, frame: &[u8]) -> bool {
    if frame.len() < 14 || frame[0..6] != m.dst_mac {
        return false;
    }
    if m.dst_ip.is_none() && m.dst_port.is_none() {
        return true;
    }
    if frame[12..14] != [0x08, 0x00] || frame.len() < 34 || frame[14] >> 4 != 4 {
        return false;
    }
    if m.dst_ip.is_some_and(|ip| frame[30..34] != ip.octets()) {
        return false;
    }
    let Some(port) = m.dst_port else {
        return true;
    };
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let udp = 14 + ihl;
    frame[23] == 17 && frame.len() >= udp + 4 && frame[udp + 2..udp + 4] == port.to_be_bytes()
}

/// One work completion, as the port sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// Bytes received (receive completions).
    pub len: u32,
    /// `ibv_wc_status`; [`STATUS_OK`] is success.
    pub status: u32,
}

/// The receive half of a raw packet queue pair: its region and verbs.
pub trait RecvQueue: Send {
    /// Posts receive slots (one chained post).
    fn post(&mut self, slots: &[RecvSlot]) -> Result<(), IbvError>;
    /// Polls up to `out.len()` receive completions.
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError>;
    /// The registered receive region (read only slots that completed).
    fn mem(&self) -> &[u8];
}

/// The send half of a raw packet queue pair: its region and verbs.
pub trait SendQueue: Send {
    /// The registered send region (write only slots not in flight).
    fn mem_mut(&mut self) -> &mut [u8];
    /// Posts sends (one chained post).
    fn post(&mut self, sends: &[SendSlot]) -> Result<(), IbvError>;
    /// Polls up to `out.len()` send completions.
    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError>;
}

/// A completion or slot that does not add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The work request id names no slot.
    #[error("completion for unknown work request {0}")]
    Unknown(u64),
    /// The slot was not posted (a second completion for it).
    #[error("completion for work request {0}, which is not outstanding")]
    NotOutstanding(u64),
}

/// Receive slot accounting: which of the region's slots the NIC holds
/// (posted) and which wait to be posted again. `posted + waiting = count`
/// always holds.
#[derive(Debug)]
pub struct RecvSlots {
    slot_len: u32,
    posted: Vec<bool>,
    waiting: Vec<u32>,
    n_posted: usize,
    batch: Vec<RecvSlot>,
}

impl RecvSlots {
    /// `count` slots of `slot_len` bytes, none posted yet.
    pub fn new(count: u32, slot_len: u32) -> RecvSlots {
        RecvSlots {
            slot_len,
            posted: vec![false; count as usize],
            waiting: (0..count).rev().collect(),
            n_posted: 0,
            batch: Vec::with_capacity(count as usize),
        }
    }

    /// Slots in all.
    pub fn count(&self) -> usize {
        self.posted.len()
    }

    /// Slots the NIC holds.
    pub fn posted(&self) -> usize {
        self.n_posted
    }

    /// Slots waiting to be posted.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn slot(&self, i: u32) -> RecvSlot {
        RecvSlot {
            wr_id: u64::from(i),
            offset: i as usize * self.slot_len as usize,
            len: self.slot_len,
        }
    }

    /// The NIC completed `wr_id`: the slot's bytes may be read, then it waits
    /// to be posted again.
    pub fn complete(&mut self, wr_id: u64) -> Result<RecvSlot, SlotError> {
        let i = usize::try_from(wr_id)
            .ok()
            .filter(|&i| i < self.posted.len())
            .ok_or(SlotError::Unknown(wr_id))?;
        if !self.posted[i] {
            return Err(SlotError::NotOutstanding(wr_id));
        }
        self.posted[i] = false;
        self.n_posted -= 1;
        self.waiting.push(i as u32);
        Ok(self.slot(i as u32))
    }

    /// Whether to re-post now: enough slots wait for one batch to be worth
    /// a post, or the NIC holds less than half of them.
    pub fn should_post(&self, min_batch: usize) -> bool {
        !self.waiting.is_empty()
            && (self.waiting.len() >= min_batch || self.n_posted < self.count() / 2)
    }

    /// Marks every waiting slot posted and returns them, for one post.
    pub fn take_batch(&mut self) -> &[RecvSlot] {
        self.batch.clear();
        while let Some(i) = self.waiting.pop() {
            self.posted[i as usize] = true;
            self.n_posted += 1;
            let s = self.slot(i);
            self.batch.push(s);
        }
        &self.batch
    }

    /// The post of the last batch failed: its slots wait again.
    pub fn unpost(&mut self) {
        for s in self.batch.drain(..) {
            self.posted[s.wr_id as usize] = false;
            self.n_posted -= 1;
            self.waiting.push(s.wr_id as u32);
        }
    }
}

/// Send slot accounting: a ring of `depth` slots used in order; send `k`
/// (its work request id) uses slot `k % depth`. A completion for `k` retires
/// every send up to `k` (send queues complete in order), so only some sends
/// are signaled: the last of each burst and every `signal_every`-th.
#[derive(Debug, Clone)]
pub struct SendRing {
    depth: u64,
    slot_len: u32,
    head: u64,
    tail: u64,
    signal_every: u32,
    run: u32,
}

impl SendRing {
    /// A ring of `depth` slots of `slot_len` bytes.
    pub fn new(depth: u32, slot_len: u32) -> SendRing {
        SendRing {
            depth: u64::from(depth.max(1)),
            slot_len,
            head: 0,
            tail: 0,
            signal_every: (depth / 4).max(1),
            run: 0,
        }
    }

    /// Sends in flight (posted, not yet retired by a completion).
    pub fn outstanding(&self) -> u64 {
        self.head - self.tail
    }

    /// Slots free for new sends.
    pub fn free(&self) -> usize {
        (self.depth - self.outstanding()) as usize
    }

    /// Takes the next slot for a frame of `len` bytes; the caller checked
    /// [`SendRing::free`].
    pub fn push(&mut self, len: u32) -> SendSlot {
        let wr_id = self.head;
        self.head += 1;
        self.run += 1;
        let signaled = self.run >= self.signal_every;
        if signaled {
            self.run = 0;
        }
        SendSlot {
            wr_id,
            offset: (wr_id % self.depth) as usize * self.slot_len as usize,
            len,
            signaled,
        }
    }

    /// Ends a burst: its last send is signaled, so no send waits unretired.
    pub fn close_burst(&mut self, sends: &mut [SendSlot]) {
        if let Some(last) = sends.last_mut() {
            last.signaled = true;
            self.run = 0;
        }
    }

    /// The post of the last `n` pushed sends failed: give their slots back.
    pub fn rollback(&mut self, n: usize) {
        self.head -= (n as u64).min(self.outstanding());
        self.run = 0;
    }

    /// A signaled send completed: it and every send before it are retired;
    /// returns how many that freed.
    pub fn complete(&mut self, wr_id: u64) -> Result<u64, SlotError> {
        if wr_id < self.tail || wr_id >= self.head {
            return Err(SlotError::NotOutstanding(wr_id));
        }
        let freed = wr_id + 1 - self.tail;
        self.tail = wr_id + 1;
        Ok(freed)
    }
}

#[derive(Default)]
struct RxDetail {
    completion_errors: Counter,
    too_big: Counter,
    bogus: Counter,
    post_errors: Counter,
    poll_errors: Counter,
    posted: AtomicU64,
}

#[derive(Default)]
struct TxDetail {
    completion_errors: Counter,
    too_big: Counter,
    bogus: Counter,
    post_errors: Counter,
    poll_errors: Counter,
    inline: Counter,
    signaled: Counter,
    outstanding: AtomicU64,
}

struct Stats {
    common: PortCounters,
    rx: CacheAligned<RxDetail>,
    tx: CacheAligned<TxDetail>,
}

impl PortStats for Stats {
    fn report(&self) -> PortReport {
        let mut r = self.common.report("ibverbs");
        let (rx, tx) = (&self.rx, &self.tx);
        for (k, v) in [
            ("rx_completion_errors", rx.completion_errors.get()),
            ("rx_too_big", rx.too_big.get()),
            ("rx_bogus_completions", rx.bogus.get()),
            ("rx_post_errors", rx.post_errors.get()),
            ("rx_poll_errors", rx.poll_errors.get()),
            ("rx_posted", rx.posted.load(Ordering::Relaxed)),
            ("tx_completion_errors", tx.completion_errors.get()),
            ("tx_too_big", tx.too_big.get()),
            ("tx_bogus_completions", tx.bogus.get()),
            ("tx_post_errors", tx.post_errors.get()),
            ("tx_poll_errors", tx.poll_errors.get()),
            ("tx_inline", tx.inline.get()),
            ("tx_signaled", tx.signaled.get()),
            ("tx_outstanding", tx.outstanding.load(Ordering::Relaxed)),
        ] {
            r.detail.insert(k, v);
        }
        r
    }
}

/// The receive side of an ibverbs port over any [`RecvQueue`].
pub struct IbvRx<Q: RecvQueue> {
    q: Q,
    slots: RecvSlots,
    min_batch: usize,
    cache: PoolCache,
    spare: Burst,
    comps: [Completion; BURST_MAX],
    stats: Arc<Stats>,
}

impl<Q: RecvQueue> IbvRx<Q> {
    fn new(
        mut q: Q,
        buffers: u32,
        slot_len: u32,
        pool: &Pool,
        stats: Arc<Stats>,
    ) -> Result<Self, IbvError> {
        let mut slots = RecvSlots::new(buffers, slot_len);
        q.post(slots.take_batch())?;
        stats
            .rx
            .posted
            .store(slots.posted() as u64, Ordering::Relaxed);
        Ok(IbvRx {
            q,
            min_batch: (buffers as usize / 8).clamp(1, BURST_MAX),
            slots,
            cache: pool.cache(),
            spare: Burst::new(),
            comps: [Completion::default(); BURST_MAX],
            stats,
        })
    }

    fn repost(&mut self) {
        if !self.slots.should_post(self.min_batch) {
            return;
        }
        let batch = self.slots.take_batch();
        if self.q.post(batch).is_err() {
            self.slots.unpost();
            self.stats.rx.post_errors.add(1);
        }
        self.stats
            .rx
            .posted
            .store(self.slots.posted() as u64, Ordering::Relaxed);
    }
}

impl<Q: RecvQueue> RxQueue for IbvRx<Q> {
    fn rx_burst(&mut self, _now: Instant, out: &mut Burst, max: usize) -> usize {
        let want = max.min(out.room()).min(BURST_MAX);
        if self.spare.len() < want {
            let need = want - self.spare.len();
            self.cache.alloc_bulk(&mut self.spare, need);
        }
        // Poll no more completions than there are packets to copy them into.
        let n = want.min(self.spare.len());
        if n == 0 {
            return 0;
        }
        let got = match self.q.poll(&mut self.comps[..n]) {
            Ok(g) => g.min(n),
            Err(_) => {
                self.stats.rx.poll_errors.add(1);
                0
            }
        };
        let d = &self.stats.rx;
        let mut filled = 0;
        let mut bytes = 0u64;
        // The next spare packet to copy into; it advances only once filled.
        let mut spare = self.spare.iter_mut();
        let mut next = spare.next();
        for c in &self.comps[..got] {
            let slot = match self.slots.complete(c.wr_id) {
                Ok(s) => s,
                Err(_) => {
                    d.bogus.add(1);
                    continue;
                }
            };
            if c.status != STATUS_OK || c.len > slot.len {
                d.completion_errors.add(1);
                continue;
            }
            let len = c.len as usize;
            let Some(data) = self.q.mem().get(slot.offset..slot.offset + len) else {
                d.completion_errors.add(1);
                continue;
            };
            let Some(pkt) = next.as_deref_mut() else {
                // Cannot happen (no more completions are polled than there
                // are spare packets); the slot is re-posted, the frame counted
                // as dropped, and every later completion still retired.
                continue;
            };
            let room = pkt.spare_capacity();
            if room.len() < len {
                d.too_big.add(1);
                continue;
            }
            room[..len].copy_from_slice(data);
            if pkt.set_len(len).is_err() {
                d.too_big.add(1);
                continue;
            }
            bytes += len as u64;
            filled += 1;
            next = spare.next();
        }
        for pkt in self.spare.drain_front(filled) {
            // Cannot fail: at most `out.room()` packets were filled.
            let _ = out.push(pkt);
        }
        let c = &self.stats.common.rx;
        c.packets.add(filled as u64);
        c.bytes.add(bytes);
        c.dropped.add((got - filled) as u64);
        self.repost();
        filled
    }
}

/// The transmit side of an ibverbs port over any [`SendQueue`].
pub struct IbvTx<Q: SendQueue> {
    q: Q,
    ring: SendRing,
    slot_len: u32,
    inline: u32,
    sends: Vec<SendSlot>,
    comps: [Completion; BURST_MAX],
    stats: Arc<Stats>,
}

impl<Q: SendQueue> IbvTx<Q> {
    fn new(q: Q, depth: u32, slot_len: u32, inline: u32, stats: Arc<Stats>) -> Self {
        IbvTx {
            q,
            ring: SendRing::new(depth, slot_len),
            slot_len,
            inline,
            sends: Vec::with_capacity(BURST_MAX),
            comps: [Completion::default(); BURST_MAX],
            stats,
        }
    }

    /// Retires completed sends.
    fn reap(&mut self) {
        let d = &self.stats.tx;
        loop {
            let got = match self.q.poll(&mut self.comps) {
                Ok(g) => g.min(BURST_MAX),
                Err(_) => {
                    d.poll_errors.add(1);
                    0
                }
            };
            for c in &self.comps[..got] {
                if c.status != STATUS_OK {
                    d.completion_errors.add(1);
                }
                if self.ring.complete(c.wr_id).is_err() {
                    d.bogus.add(1);
                }
            }
            if got < BURST_MAX {
                break;
            }
        }
        d.outstanding
            .store(self.ring.outstanding(), Ordering::Relaxed);
    }
}

impl<Q: SendQueue> TxQueue for IbvTx<Q> {
    fn tx_burst(&mut self, _now: Instant, pkts: &mut Burst) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        self.reap();
        let n = pkts.len().min(self.ring.free());
        if n == 0 {
            return 0;
        }
        let d = &self.stats.tx;
        self.sends.clear();
        let mut bytes = 0u64;
        let mut inline = 0u64;
        for p in pkts.iter().take(n) {
            let data = p.data();
            let len = data.len();
            if len > self.slot_len as usize {
                d.too_big.add(1);
                continue;
            }
            let s = self.ring.push(len as u32);
            let Some(dst) = self.q.mem_mut().get_mut(s.offset..s.offset + len) else {
                // Cannot happen: the region holds `depth` slots of `slot_len`.
                self.ring.rollback(1);
                d.too_big.add(1);
                continue;
            };
            dst.copy_from_slice(data);
            bytes += len as u64;
            inline += u64::from(verbs::sends_inline(len as u32, self.inline));
            self.sends.push(s);
        }
        self.ring.close_burst(&mut self.sends);
        let c = &self.stats.common.tx;
        let posted = self.sends.len();
        match self.q.post(&self.sends) {
            Ok(()) => {
                c.packets.add(posted as u64);
                c.bytes.add(bytes);
                c.dropped.add((n - posted) as u64);
                d.inline.add(inline);
                d.signaled
                    .add(self.sends.iter().filter(|s| s.signaled).count() as u64);
            }
            Err(_) => {
                // A failed post means the queue pair is broken (error state):
                // the burst is dropped and counted rather than retried forever.
                self.ring.rollback(posted);
                d.post_errors.add(1);
                c.dropped.add(n as u64);
            }
        }
        d.outstanding
            .store(self.ring.outstanding(), Ordering::Relaxed);
        pkts.drain_front(n);
        n
    }

    fn flush(&mut self, _now: Instant) {
        self.reap();
    }
}

fn new_stats() -> Arc<Stats> {
    Arc::new(Stats {
        common: PortCounters::default(),
        rx: CacheAligned::default(),
        tx: CacheAligned::default(),
    })
}

/// Builds an ibverbs port from its two sides (either may be absent).
fn assemble<R, S>(
    config: &IbverbsConfig,
    stats: Arc<Stats>,
    rx: Option<IbvRx<R>>,
    tx: Option<S>,
    pool: &Pool,
) -> OpenPort
where
    R: RecvQueue + 'static,
    S: SendQueue + 'static,
{
    let mut warnings = Vec::new();
    if pool.data_room() < config.buffer_size as usize {
        warnings.push(format!(
            "pool buffers hold {} bytes, less than `buffer_size` ({}): larger frames are dropped as rx_too_big",
            pool.data_room(),
            config.buffer_size
        ));
    }
    let rx: Vec<Box<dyn RxQueue>> = match rx {
        Some(side) => vec![Box::new(side)],
        None => Vec::new(),
    };
    let tx: Vec<Box<dyn TxQueue>> = match tx {
        Some(q) => vec![Box::new(IbvTx::new(
            q,
            config.tx_depth,
            config.buffer_size,
            config.inline,
            stats.clone(),
        ))],
        None => Vec::new(),
    };
    OpenPort {
        rx,
        tx,
        stats,
        warnings,
    }
}

/// The receive half of a hardware raw packet queue pair.
struct HwRecv {
    // Field order is drop order: the QP (and its flow rule) before the region.
    qp: RawQp,
    mr: MemoryRegion,
    wc: Vec<crate::sys::ffi::ibverbs::ibv_wc>,
}

impl RecvQueue for HwRecv {
    fn post(&mut self, slots: &[RecvSlot]) -> Result<(), IbvError> {
        self.qp.post_recv_batch(&self.mr, slots)
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError> {
        let n = out.len().min(self.wc.len());
        let got = self.qp.poll_recv(&mut self.wc[..n])?;
        for (o, w) in out.iter_mut().zip(&self.wc[..got]) {
            *o = Completion {
                wr_id: w.wr_id,
                len: w.byte_len,
                status: w.status,
            };
        }
        Ok(got)
    }

    fn mem(&self) -> &[u8] {
        self.mr.as_slice()
    }
}

/// The send half of a hardware raw packet queue pair.
struct HwSend {
    qp: RawQp,
    mr: MemoryRegion,
    batch: SendBatch,
    wc: Vec<crate::sys::ffi::ibverbs::ibv_wc>,
}

impl SendQueue for HwSend {
    fn mem_mut(&mut self) -> &mut [u8] {
        self.mr.as_mut_slice()
    }

    fn post(&mut self, sends: &[SendSlot]) -> Result<(), IbvError> {
        self.qp.post_send_batch(&self.mr, &mut self.batch, sends)
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError> {
        let n = out.len().min(self.wc.len());
        let got = self.qp.poll_send(&mut self.wc[..n])?;
        for (o, w) in out.iter_mut().zip(&self.wc[..got]) {
            *o = Completion {
                wr_id: w.wr_id,
                len: w.byte_len,
                status: w.status,
            };
        }
        Ok(got)
    }
}

/// What this machine has for RDMA, for the error when no device is usable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environment {
    /// RDMA devices the kernel has (`/sys/class/infiniband`).
    pub kernel_devices: Vec<String>,
    /// libibverbs providers installed (`/etc/libibverbs.d/*.driver`).
    pub providers: Vec<String>,
}

impl Environment {
    /// Reads sysfs and the libibverbs provider configuration.
    pub fn probe() -> Environment {
        let names = |dir: &str, suffix: &str| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .filter_map(|e| {
                            let n = e.file_name().to_string_lossy().into_owned();
                            n.strip_suffix(suffix).map(str::to_string)
                        })
                        .collect()
                })
                .unwrap_or_default();
            v.sort();
            v
        };
        Environment {
            kernel_devices: names("/sys/class/infiniband", ""),
            providers: names("/etc/libibverbs.d", ".driver"),
        }
    }
}

/// The error a user sees when the device cannot be opened: what is missing
/// and what to do.
pub fn explain(err: &IbvError, env: &Environment) -> String {
    let providers = if env.providers.is_empty() {
        "no libibverbs provider is installed either (/etc/libibverbs.d is empty or absent; \
         install one with `apt-get install ibverbs-providers`)"
            .to_string()
    } else {
        format!(
            "libibverbs providers installed: {}",
            env.providers.join(", ")
        )
    };
    match err {
        IbvError::NoDevice if env.kernel_devices.is_empty() => format!(
            "no RDMA device: libibverbs lists none and /sys/class/infiniband has none (no \
             RDMA-capable NIC, or its kernel driver, such as mlx5_ib, is not loaded); the ibverbs \
             port needs one (e.g. NVIDIA/Mellanox ConnectX); {providers}. Use a dpdk or udp port on \
             machines without one"
        ),
        IbvError::NoDevice => format!(
            "the kernel has RDMA device(s) {} but libibverbs found none of them: no libibverbs \
             provider drives them ({providers}); install the provider for this NIC \
             (`apt-get install ibverbs-providers`) and check with `ibv_devices`",
            env.kernel_devices.join(", ")
        ),
        IbvError::NoSuchDevice { name, available } => format!(
            "no RDMA device named `{name}`; the devices present are: {available} (set `device` \
             to one of them, or leave it out for the first)"
        ),
        other => other.to_string(),
    }
}

/// Opens an ibverbs port: the device, a protection domain, and a raw packet
/// queue pair per direction (the receive one with its flow rule and every
/// receive buffer posted). Every failure is a runtime error (exit status 1)
/// naming what is missing.
pub fn open(config: &IbverbsConfig, pool: &Pool) -> Result<OpenPort, PortError> {
    if let Some((key, msg)) = config.problems().into_iter().next() {
        return Err(PortError::Input(format!("`{key}`: {msg}")));
    }
    let ctx = verbs::open(config.device.as_deref())
        .map_err(|e| PortError::Runtime(explain(&e, &Environment::probe())))?;
    let on = |e: IbvError| PortError::Runtime(format!("device `{}`: {e}", ctx.name()));
    let pd = ctx.alloc_pd().map_err(on)?;
    let wc = || vec![crate::sys::ffi::ibverbs::ibv_wc::default(); BURST_MAX];
    let stats = new_stats();
    let rx = match config.flow() {
        None => None,
        Some(flow) => {
            let qp = RawQp::new(
                &pd,
                QpConfig {
                    port: config.ib_port,
                    send_depth: 1,
                    recv_depth: config.rx_depth,
                    max_inline: 0,
                },
            )
            .map_err(on)?;
            let mr = MemoryRegion::new(&pd, config.buffers as usize * config.buffer_size as usize)
                .map_err(on)?;
            // Every receive buffer is posted before the rule steers frames
            // to the queue (spead2 posts before RTR for the same reason).
            let mut side = IbvRx::new(
                HwRecv { qp, mr, wc: wc() },
                config.buffers,
                config.buffer_size,
                pool,
                stats.clone(),
            )
            .map_err(on)?;
            side.q.qp.add_flow(&flow).map_err(on)?;
            Some(side)
        }
    };
    let qp = RawQp::new(
        &pd,
        QpConfig {
            port: config.ib_port,
            send_depth: config.tx_depth,
            recv_depth: 1,
            max_inline: config.inline,
        },
    )
    .map_err(on)?;
    let mr = MemoryRegion::new(&pd, config.tx_depth as usize * config.buffer_size as usize)
        .map_err(on)?;
    let tx = HwSend {
        qp,
        mr,
        batch: SendBatch::with_capacity(BURST_MAX),
        wc: wc(),
    };
    Ok(assemble(config, stats, rx, Some(tx), pool))
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::{Packet, PoolConfig};
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
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&mac);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = 17;
        f[30..34].copy_from_slice(&ip);
        f[36..38].copy_from_slice(&port.to_be_bytes());
        f[42..46].copy_from_slice(&i.to_be_bytes());
        for (k, b) in f[46..].iter_mut().enumerate() {
            *b = (i as usize + k) as u8;
        }
        f
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
        let mut v6 = frame(MAC, ip, 7148, 0, 64);
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert!(!flow_selects(&m, &v6), "an IPv4 spec needs IPv4");
        let mut tcp = frame(MAC, ip, 7148, 0, 64);
        tcp[23] = 6;
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
                if f[37] != 9 {
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
        let seqs: Vec<u8> = out.iter().map(|p| p.data()[45]).collect();
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
}
