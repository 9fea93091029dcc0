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
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::buf::counter::CacheAligned;
use crate::buf::{Pool, BURST_MAX};
use crate::sys::ibverbs::{
    self as verbs, FlowMatch, IbvError, MemoryRegion, QpConfig, RawQp, RecvSlot, SendBatch,
    SendSlot,
};

use super::{OpenPort, PortCounters, PortError, PortReport, PortStats, RxQueue, TxQueue};

mod rx;
#[cfg(test)]
mod test;
mod tx;

use rx::{HwRecv, RxDetail};
pub use rx::{IbvRx, RecvSlots};
use tx::{HwSend, TxDetail};
pub use tx::{IbvTx, SendRing};

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
    use crate::net::{ethernet, ipv4, udp};
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return false;
    };
    if eth.dst_addr() != m.dst_mac {
        return false;
    }
    if m.dst_ip.is_none() && m.dst_port.is_none() {
        return true;
    }
    // The NIC matches header fields, not lengths: the IP and UDP views are
    // checked only for holding their headers.
    let Ok(ip) = ipv4::Packet::new_checked(eth.payload()) else {
        return false;
    };
    if eth.ethertype() != ethernet::ethertype::IPV4 || ip.version() != 4 {
        return false;
    }
    if m.dst_ip.is_some_and(|a| ip.dst_addr() != a) {
        return false;
    }
    let Some(port) = m.dst_port else {
        return true;
    };
    let after = eth.payload().get(ip.header_len()..).unwrap_or(&[]);
    ip.protocol() == ipv4::protocol::UDP
        && udp::Packet::new_checked(after).is_ok_and(|u| u.dst_port() == port)
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
