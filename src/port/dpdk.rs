//! The dpdk port: any EAL device (vdevs such as net_null, net_ring,
//! net_memif, net_pcap, net_af_packet, net_tap; NICs by PCI address) through
//! its poll-mode driver.
//!
//! Zero copy: a received mbuf becomes a [`Packet`] as it is, travels through
//! every stage, and leaves on a dpdk port as the same mbuf. A packet from
//! elsewhere (a pool packet from a generator, a capture, a UDP socket) is
//! copied once into an mbuf of this port's pool at the boundary, and counted
//! as `copied_in`. Each rx and tx queue is its own side (`nic`, `nic:1`, ...),
//! so RSS queues can feed several lcores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::buf::counter::{CacheAligned, Counter};
use crate::buf::{Burst, Packet, BURST_MAX};
use crate::sys::dpdk::{self as dpdk, Eal, EthPort, Mbuf, PktmbufPool};
use crate::sys::netdev;
use crate::sys::packet_socket::{self, PacketSocket};
use crate::time::Instant;

use super::{OpenPort, PortError, PortReport, PortStats, RxQueue, TxQueue};

/// How long opening a port waits for its link to come up.
pub const LINK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A dpdk port's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkConfig {
    /// Device name (`net_null0`) or PCI address (`0000:01:00.0`).
    pub device: String,
    /// Receive queues (more than one turns RSS on).
    pub rx_queues: u16,
    /// Transmit queues.
    pub tx_queues: u16,
    /// Descriptors per rx queue.
    pub rx_desc: u16,
    /// Descriptors per tx queue.
    pub tx_desc: u16,
    /// MTU to set.
    pub mtu: Option<u16>,
    /// Receive every frame.
    pub promiscuous: bool,
    /// Mbufs in the port's pool.
    pub mbufs: u32,
    /// Per-lcore mbuf cache.
    pub cache: u32,
    /// Line rate in L1 bits/s for rates in percent (default: the link speed).
    pub line_rate_bps: Option<u64>,
    /// How the port's mbufs lie in memory.
    pub mbuf_layout: MbufLayout,
    /// Bytes of frame each mbuf holds (its data room after the headroom):
    /// a frame is written into one mbuf, so this is the largest frame the
    /// port sends or receives (FCS excluded).
    pub mbuf_size: u16,
}

/// DPDK's default data room after the headroom (`RTE_MBUF_DEFAULT_DATAROOM`).
pub const DEFAULT_MBUF_SIZE: u16 = 2048;

/// The largest `mbuf_size`: the data room, headroom included, is a `u16`.
pub const MAX_MBUF_SIZE: u16 = 65535 - 128;

/// How a dpdk port's mbufs lie in memory (the `mbuf_layout` key).
///
/// DPDK's classic pool puts each 128-byte mbuf header in front of its
/// 2 KiB data room, so the headers a burst touches are 2.3 KiB apart: with
/// `--no-huge` (4 KiB pages) the 32 mbufs of a burst span about 19 pages,
/// each a TLB entry, on every pass over them (the driver's allocation and
/// reset, the length update, the free). A packed pool keeps the headers in a
/// dense array (192 bytes apart, 21 to a page) and the data rooms in a zone
/// of their own, so a burst's headers share 2 pages and a forwarder that
/// never reads the data touches no data page at all. Nothing may attach to a
/// packed mbuf (`rte_pktmbuf_clone`, GSO, IP fragmentation); linerate never
/// does, and neither do the drivers `auto` packs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MbufLayout {
    /// Packed under `--no-huge` for the devices known to take pinned
    /// external buffers ([`PACKED_DRIVERS`]), classic otherwise.
    #[default]
    Auto,
    /// Headers packed apart from their data rooms.
    Packed,
    /// DPDK's default: each header in front of its data room.
    Classic,
}

/// The drivers `mbuf_layout = "auto"` packs: software devices that reach an
/// mbuf's data only through its `buf_addr` (moving the pointer, or copying)
/// and never attach to it. Drivers that map the pool's own memory
/// (net_af_xdp's UMEM, net_memif's zero-copy regions) need the classic
/// layout, and NICs stay classic until each PMD is checked.
pub const PACKED_DRIVERS: &[&str] = &[
    "net_null",
    "net_ring",
    "net_pcap",
    "net_af_packet",
    "net_tap",
];

impl Default for DpdkConfig {
    fn default() -> Self {
        DpdkConfig {
            device: String::new(),
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            promiscuous: true,
            mbufs: 16383,
            cache: 256,
            line_rate_bps: None,
            mbuf_layout: MbufLayout::Auto,
            mbuf_size: DEFAULT_MBUF_SIZE,
        }
    }
}

#[derive(Default)]
struct QueueCounters {
    packets: Counter,
    bytes: Counter,
    dropped: Counter,
    copied_in: Counter,
}

struct Stats {
    port: Mutex<EthPort>,
    /// net_af_packet's sockets: the kernel counts their receive-ring drops,
    /// the PMD does not report them (see [`crate::sys::packet_socket`]).
    packet_sockets: Vec<PacketSocket>,
    /// Those drops so far (each kernel read resets the kernel's count). Any
    /// thread that reports adds to it, hence a locked add.
    socket_drops: AtomicU64,
    /// The kernel interface behind the device (net_af_xdp, net_af_packet,
    /// net_tap): its sysfs directory and its `rx_dropped` when the port
    /// opened. Frames the kernel dropped there were ours to receive (see
    /// [`crate::sys::netdev`]).
    kernel_if: Option<(std::path::PathBuf, u64)>,
    kind_rx: Vec<CacheAligned<QueueCounters>>,
    kind_tx: Vec<CacheAligned<QueueCounters>>,
    pool: Arc<PktmbufPool>,
    mac: Option<[u8; 6]>,
}

impl PortStats for Stats {
    fn mac(&self) -> Option<[u8; 6]> {
        self.mac
    }

    fn report(&self) -> PortReport {
        let sum = |v: &[CacheAligned<QueueCounters>], f: fn(&QueueCounters) -> &Counter| {
            v.iter().map(|q| f(q).get()).sum::<u64>()
        };
        let mut r = PortReport {
            kind: "dpdk",
            rx_packets: sum(&self.kind_rx, |q| &q.packets),
            rx_bytes: sum(&self.kind_rx, |q| &q.bytes),
            tx_packets: sum(&self.kind_tx, |q| &q.packets),
            tx_bytes: sum(&self.kind_tx, |q| &q.bytes),
            dropped: sum(&self.kind_rx, |q| &q.dropped) + sum(&self.kind_tx, |q| &q.dropped),
            ..PortReport::default()
        };
        r.detail
            .insert("copied_in", sum(&self.kind_tx, |q| &q.copied_in));
        r.detail
            .insert("mbufs_in_use", u64::from(self.pool.in_use()));
        r.detail
            .insert("mbufs_packed", u64::from(self.pool.is_packed()));
        if !self.packet_sockets.is_empty() {
            for s in &self.packet_sockets {
                // A failed read leaves the kernel's count for the next one.
                self.socket_drops
                    .fetch_add(s.take_drops().unwrap_or(0), Ordering::Relaxed);
            }
            r.detail.insert(
                "socket_rx_dropped",
                self.socket_drops.load(Ordering::Relaxed),
            );
        }
        if let Some((dir, base)) = &self.kernel_if {
            if let Ok(n) = netdev::counter(dir, "rx_dropped") {
                r.detail
                    .insert("kernel_rx_dropped", n.saturating_sub(*base));
            }
        }
        if let Ok(port) = self.port.lock() {
            if let Ok(s) = port.stats() {
                for (k, v) in [
                    ("eth_ipackets", s.ipackets),
                    ("eth_opackets", s.opackets),
                    ("eth_ibytes", s.ibytes),
                    ("eth_obytes", s.obytes),
                    ("eth_imissed", s.imissed),
                    ("eth_ierrors", s.ierrors),
                    ("eth_oerrors", s.oerrors),
                    ("eth_rx_nombuf", s.rx_nombuf),
                ] {
                    r.detail.insert(k, v);
                }
            }
            if let Ok(l) = port.link() {
                r.detail.insert("link_up", u64::from(l.up));
                r.detail.insert("link_speed_mbps", u64::from(l.speed_mbps));
            }
        }
        r
    }
}

/// The Ethernet header, which the MTU does not count.
const ETHER_HDR: u16 = 14;

/// The MTU jumbo mbufs ask for at most (the `mtu` key's largest value).
const JUMBO_MTU: u16 = 9216;

/// Opens a dpdk port on an initialised EAL.
pub fn open(name: &str, config: &DpdkConfig, eal: &'static Eal) -> Result<OpenPort, PortError> {
    let input = |e: dpdk::DpdkError| PortError::Input(format!("device `{}`: {e}", config.device));
    let mut port = EthPort::by_name(eal, &config.device).map_err(|e| {
        PortError::Input(format!(
            "device `{}`: {e}; the EAL knows: {}",
            config.device,
            dpdk::ethdev::port_names(eal).join(", ")
        ))
    })?;
    let info = port.info().ok();
    let pool_name: String = format!("lr_{name}").chars().take(24).collect();
    let mut pc = dpdk::PoolConfig::new(&pool_name, config.mbufs, dpdk::eal::socket_id());
    pc.cache = config.cache.min(config.mbufs * 2 / 3);
    pc.data_room = config.mbuf_size.saturating_add(dpdk::mempool::HEADROOM);
    pc.packed = match config.mbuf_layout {
        MbufLayout::Packed => true,
        MbufLayout::Classic => false,
        MbufLayout::Auto => {
            !dpdk::eal::has_hugepages()
                && info
                    .as_ref()
                    .is_some_and(|i| PACKED_DRIVERS.contains(&i.driver.as_str()))
        }
    };
    let pool = match PktmbufPool::create(eal, &pc) {
        // Auto falls back to the classic layout (the data zone is one
        // IOVA-contiguous block, which fragmented memory may not offer).
        Err(_) if pc.packed && config.mbuf_layout == MbufLayout::Auto => {
            pc.packed = false;
            PktmbufPool::create(eal, &pc)
        }
        r => r,
    };
    let pool = Arc::new(pool.map_err(input)?);
    let pcfg = dpdk::PortConfig {
        rx_queues: config.rx_queues,
        tx_queues: config.tx_queues,
        rx_desc: config.rx_desc,
        tx_desc: config.tx_desc,
        mtu: config.mtu,
        // Jumbo mbufs: raise the MTU to what they hold, where the driver
        // lets us (net_ring and net_null have no MTU and carry any frame).
        mtu_if_supported: (config.mtu.is_none() && config.mbuf_size > DEFAULT_MBUF_SIZE)
            .then(|| (config.mbuf_size - ETHER_HDR).min(JUMBO_MTU)),
        promiscuous: config.promiscuous,
        fast_free: false,
    };
    port.configure(&pcfg, &pool).map_err(input)?;
    port.start().map_err(input)?;
    // Wait for the link, as testpmd does at start: frames sent before a
    // peer (memif, a NIC's partner) is ready are lost.
    let mut warnings = Vec::new();
    let deadline = std::time::Instant::now() + LINK_WAIT;
    while !port.link().is_ok_and(|l| l.up) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    if !port.link().is_ok_and(|l| l.up) {
        warnings.push(format!(
            "device `{}`: the link is still down after {LINK_WAIT:?}",
            config.device
        ));
    }
    let mut rx = Vec::new();
    let mut tx = Vec::new();
    for q in 0..config.rx_queues {
        rx.push(port.rx_queue(q).map_err(input)?);
    }
    for q in 0..config.tx_queues {
        tx.push(port.tx_queue(q).map_err(input)?);
    }
    let mac = port.mac_addr().ok();
    let packet_sockets = info.as_ref().map_or_else(Vec::new, |i| {
        af_packet_sockets(i, &config.device, &mut warnings)
    });
    // A device on a kernel interface: its drops before we opened it are not ours.
    let kernel_if = info
        .as_ref()
        .filter(|i| i.if_index != 0)
        .and_then(|i| netdev::sysfs_dir(i.if_index))
        .and_then(|d| Some((netdev::counter(&d, "rx_dropped").ok()?, d)))
        .map(|(base, d)| (d, base));
    let stats = Arc::new(Stats {
        mac,
        packet_sockets,
        socket_drops: AtomicU64::new(0),
        kernel_if,
        port: Mutex::new(port),
        kind_rx: (0..config.rx_queues)
            .map(|_| CacheAligned::default())
            .collect(),
        kind_tx: (0..config.tx_queues)
            .map(|_| CacheAligned::default())
            .collect(),
        pool: pool.clone(),
    });
    let rx: Vec<Box<dyn RxQueue>> = rx
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            Box::new(DpdkRx {
                q,
                i,
                stats: stats.clone(),
                raw: [std::ptr::null_mut(); BURST_MAX],
            }) as Box<dyn RxQueue>
        })
        .collect();
    let tx: Vec<Box<dyn TxQueue>> = tx
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            Box::new(DpdkTx {
                q,
                i,
                pool: pool.clone(),
                stats: stats.clone(),
                out: dpdk::Burst::new(),
            }) as Box<dyn TxQueue>
        })
        .collect();
    Ok(OpenPort {
        rx,
        tx,
        stats,
        warnings,
    })
}

/// The kernel sockets of a net_af_packet device (none for other drivers), so
/// that frames the kernel dropped at our receive ring are counted as ours.
fn af_packet_sockets(
    info: &dpdk::ethdev::DevInfo,
    device: &str,
    warnings: &mut Vec<String>,
) -> Vec<PacketSocket> {
    if info.driver != "net_af_packet" || info.if_index == 0 {
        return Vec::new();
    }
    match packet_socket::sockets_on(info.if_index) {
        Ok(s) if !s.is_empty() => s,
        found => {
            warnings.push(format!(
                "device `{device}`: cannot find its AF_PACKET sockets ({}): frames the kernel \
                 drops at our receive ring will not be counted, and a trial will blame them on \
                 the device under test",
                found.map_or_else(|e| e.to_string(), |_| "none listed".into())
            ));
            Vec::new()
        }
    }
}

struct DpdkRx {
    q: dpdk::RxQueue,
    i: usize,
    stats: Arc<Stats>,
    raw: [*mut crate::sys::ffi::dpdk::rte_mbuf; BURST_MAX],
}

// SAFETY: the queue handle is used by the one lcore that owns this side (DPDK's
// rule: one thread per queue); `raw` only carries pointers within one call.
unsafe impl Send for DpdkRx {}

impl RxQueue for DpdkRx {
    #[inline]
    fn rx_burst(&mut self, _now: Instant, out: &mut Burst, max: usize) -> usize {
        let n = max.min(out.room()).min(BURST_MAX);
        let got = self.q.rx_burst_raw(&mut self.raw[..n]);
        let mut bytes = 0u64;
        // One `extend` writes each packet straight into the burst; pushing a
        // `Packet` built on the stack cost a store-forwarding stall per packet.
        out.vec_mut()
            .extend(self.raw[..got].iter().filter_map(|&m| {
                let m = std::ptr::NonNull::new(m)?;
                // SAFETY: rx_burst handed us ownership of `got` valid mbufs.
                let m = unsafe { Mbuf::from_raw(m) };
                bytes += u64::from(m.pkt_len());
                Some(Packet::from_mbuf(m))
            }));
        let c = &self.stats.kind_rx[self.i];
        c.packets.add(got as u64);
        c.bytes.add(bytes);
        got
    }

    fn mbuf_native(&self) -> bool {
        true
    }

    #[inline]
    fn rx_mbufs(&mut self, out: &mut dpdk::Burst, max: usize) -> Option<(usize, u64)> {
        let start = out.len();
        let got = self.q.rx_burst_upto(out, max);
        let bytes = dpdk::mbuf::sum_pkt_len(&out.as_slice()[start..]);
        let c = &self.stats.kind_rx[self.i];
        c.packets.add(got as u64);
        c.bytes.add(bytes);
        Some((got, bytes))
    }
}

struct DpdkTx {
    q: dpdk::TxQueue,
    i: usize,
    pool: Arc<PktmbufPool>,
    stats: Arc<Stats>,
    out: dpdk::Burst,
}

// SAFETY: as for DpdkRx: one lcore owns this tx queue.
unsafe impl Send for DpdkTx {}

impl TxQueue for DpdkTx {
    #[inline]
    fn alloc(&mut self, out: &mut Burst, n: usize) -> Option<usize> {
        let n = n.min(out.room());
        let got = self.pool.alloc_into(&mut self.out, n);
        // In place, as in rx_burst: no stack-built Packet per mbuf.
        out.vec_mut()
            .extend(self.out.drain().map(Packet::from_mbuf));
        Some(got)
    }

    #[inline]
    fn tx_burst(&mut self, _now: Instant, pkts: &mut Burst) -> usize {
        let c = &self.stats.kind_tx[self.i];
        let offered = pkts.len();
        let mut bytes = 0u64;
        let mut copied = 0u64;
        let mut no_mbuf = 0u64;
        for p in pkts.drain() {
            let m = match p.into_mbuf() {
                Ok(m) => m,
                Err(p) => match self.pool.alloc_copy(p.data()) {
                    Some(m) => {
                        copied += 1;
                        m
                    }
                    None => {
                        no_mbuf += 1;
                        continue;
                    }
                },
            };
            bytes += u64::from(m.data_len());
            // Cannot fail: at most BURST_MAX packets in a burst.
            let _ = self.out.push(m);
        }
        let sent = self.q.tx_burst(&mut self.out);
        let mut unsent_bytes = 0u64;
        for m in self.out.drain() {
            unsent_bytes += u64::from(m.data_len());
            let _ = pkts.push(Packet::from_mbuf(m));
        }
        c.packets.add(sent as u64);
        c.bytes.add(bytes - unsent_bytes);
        c.copied_in.add(copied);
        c.dropped.add(no_mbuf);
        offered - pkts.len()
    }

    fn mbuf_native(&self) -> bool {
        true
    }

    #[inline]
    fn mbuf_pool(&self) -> Option<&PktmbufPool> {
        Some(&self.pool)
    }

    #[inline]
    fn tx_mbufs(&mut self, burst: &mut dpdk::Burst, bytes: u64) -> Option<usize> {
        let sent = self.q.tx_burst(burst);
        let c = &self.stats.kind_tx[self.i];
        c.packets.add(sent as u64);
        // Mbufs the driver took are no longer ours to read: count what stayed.
        let left = if burst.is_empty() { 0 } else { burst.bytes() };
        c.bytes.add(bytes - left);
        Some(sent)
    }
}
