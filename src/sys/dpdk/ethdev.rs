//! Ethernet devices (`rte_ethdev`): any probed EAL device by name or PCI
//! address, its queues, link, statistics, and rx/tx bursts.
//!
//! Lifecycle: [`EthPort::by_name`] → [`EthPort::configure`] → [`EthPort::start`]
//! → take one [`RxQueue`]/[`TxQueue`] handle per queue (each polled by one
//! thread: the handles are `Send` but not `Sync`/`Clone`, which is exactly
//! DPDK's rule that a queue is used by one lcore at a time) → stop → close.

use std::collections::HashSet;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::os::raw::c_char;

use super::eal::Eal;
use super::error::{check, DpdkError};
use super::mbuf::Burst;
use super::mempool::PktmbufPool;
use crate::sys::ffi::dpdk as ffi;

/// How to configure a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Receive queues (more than one turns RSS on).
    pub rx_queues: u16,
    /// Transmit queues.
    pub tx_queues: u16,
    /// Descriptors per rx queue (adjusted to the device's limits).
    pub rx_desc: u16,
    /// Descriptors per tx queue (adjusted to the device's limits).
    pub tx_desc: u16,
    /// MTU to set, if any.
    pub mtu: Option<u16>,
    /// MTU to set when the device has the operation, capped at its frame
    /// limit; a device without it, or whose limit is the default, keeps its own.
    pub mtu_if_supported: Option<u16>,
    /// Receive every frame regardless of destination MAC.
    pub promiscuous: bool,
    /// Enable `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE` when the device has it
    /// (only valid when all tx mbufs come from one pool with refcnt 1).
    pub fast_free: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            mtu_if_supported: None,
            promiscuous: true,
            fast_free: false,
        }
    }
}

/// Link state (`rte_eth_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Link {
    /// Link up.
    pub up: bool,
    /// Speed in Mb/s (0 when unknown; `u32::MAX` means "unknown" in DPDK and
    /// is reported as 0 here).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
    /// Autonegotiated.
    pub autoneg: bool,
}

/// Basic counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Stats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets transmitted.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
    /// Rx packets dropped by the hardware (queue full).
    pub imissed: u64,
    /// Erroneous rx packets.
    pub ierrors: u64,
    /// Failed tx packets.
    pub oerrors: u64,
    /// Rx mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Static facts about a device (`rte_eth_dev_info`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DevInfo {
    /// The PMD's name, e.g. "net_null".
    pub driver: String,
    /// Maximum rx queues.
    pub max_rx_queues: u16,
    /// Maximum tx queues.
    pub max_tx_queues: u16,
    /// Minimum MTU.
    pub min_mtu: u16,
    /// Maximum MTU.
    pub max_mtu: u16,
    /// Longest frame the device receives (FCS included).
    pub max_rx_pktlen: u32,
    /// RSS hash types the device supports.
    pub flow_type_rss_offloads: u64,
    /// Tx offload capabilities.
    pub tx_offload_capa: u64,
    /// NUMA socket of the device (-1 when unknown).
    pub socket: i32,
    /// The kernel interface index behind the device (net_af_packet,
    /// net_af_xdp, net_tap; 0 when there is none).
    pub if_index: u32,
}

/// An ethdev port. Stopped and closed on drop.
#[derive(Debug)]
pub struct EthPort {
    id: u16,
    name: String,
    rx_queues: u16,
    tx_queues: u16,
    started: bool,
    taken_rx: HashSet<u16>,
    taken_tx: HashSet<u16>,
}

fn port_name(id: u16) -> Option<String> {
    let mut buf = [0 as c_char; ffi::LR_RTE_ETH_NAME_MAX_LEN as usize];
    // SAFETY: buf has RTE_ETH_NAME_MAX_LEN bytes as the function requires.
    let ret = unsafe { ffi::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
    // SAFETY: on success buf holds a NUL-terminated name.
    (ret == 0).then(|| {
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    })
}

/// Names of all probed ports, in port-id order.
pub fn port_names(_eal: &Eal) -> Vec<String> {
    (0..ffi::LR_RTE_MAX_ETHPORTS as u16)
        .filter(|&id| {
            // SAFETY: a plain validity query on any id.
            unsafe { ffi::rte_eth_dev_is_valid_port(id) == 1 }
        })
        .filter_map(port_name)
        .collect()
}

/// The device arguments after `NAME,` of the EAL's `--vdev=NAME[,ARGS]`
/// (`--vdev NAME[,ARGS]` too), or None when no vdev of that name was given.
fn vdev_args<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let spec = match a.strip_prefix("--vdev=") {
            Some(s) => s,
            None if a == "--vdev" => it.next()?.as_str(),
            None => continue,
        };
        let (dev, rest) = spec.split_once(',').unwrap_or((spec, ""));
        if dev == name {
            return Some(rest);
        }
    }
    None
}

/// Removes what is left of a closed virtual device and probes it again;
/// whether that gave it back.
fn reprobe(name: &str, devargs: &str) -> bool {
    let (Ok(bus), Ok(dev), Ok(args)) = (
        CString::new("vdev"),
        CString::new(name),
        CString::new(devargs),
    ) else {
        return false;
    };
    // SAFETY: valid C strings; removing a device that is not there fails
    // harmlessly, and probing runs on this (the control) thread.
    unsafe {
        ffi::rte_eal_hotplug_remove(bus.as_ptr(), dev.as_ptr());
        ffi::rte_eal_hotplug_add(bus.as_ptr(), dev.as_ptr(), args.as_ptr()) == 0
    }
}

impl EthPort {
    /// Finds a probed device by its ethdev name (`net_null0`, `net_ring0`)
    /// or PCI address (`0000:01:00.0`, also accepted as `01:00.0`).
    pub fn by_name(eal: &Eal, name: &str) -> Result<Self, DpdkError> {
        let mut candidates = vec![name.to_string()];
        if name.matches(':').count() == 1 && name.contains('.') {
            candidates.push(format!("0000:{name}"));
        }
        for cand in &candidates {
            let c = CString::new(cand.as_str()).map_err(|_| DpdkError::Nul {
                what: "port name",
                value: cand.clone(),
            })?;
            let mut id = 0u16;
            // SAFETY: c is a valid C string; id is a valid out-pointer.
            let ret = unsafe { ffi::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) };
            if ret == 0 {
                return Self::from_id(eal, id);
            }
        }
        // A virtual device's port is released when it closes; a process that
        // opens the pipeline again (a suite, one size after another) probes
        // the device again from its EAL argument.
        if let Some(devargs) = vdev_args(eal.args(), name) {
            if reprobe(name, devargs) {
                return Self::by_name_probed(eal, name);
            }
        }
        Err(DpdkError::NoSuchPort {
            name: name.to_string(),
            available: port_names(eal).join(", "),
        })
    }

    fn by_name_probed(eal: &Eal, name: &str) -> Result<Self, DpdkError> {
        let c = CString::new(name).map_err(|_| DpdkError::Nul {
            what: "port name",
            value: name.to_string(),
        })?;
        let mut id = 0u16;
        // SAFETY: c is a valid C string; id is a valid out-pointer.
        if unsafe { ffi::rte_eth_dev_get_port_by_name(c.as_ptr(), &mut id) } == 0 {
            return Self::from_id(eal, id);
        }
        Err(DpdkError::NoSuchPort {
            name: name.to_string(),
            available: port_names(eal).join(", "),
        })
    }

    /// Wraps a port id.
    pub fn from_id(eal: &Eal, id: u16) -> Result<Self, DpdkError> {
        // SAFETY: a plain validity query.
        if unsafe { ffi::rte_eth_dev_is_valid_port(id) } != 1 {
            return Err(DpdkError::NoSuchPort {
                name: format!("port id {id}"),
                available: port_names(eal).join(", "),
            });
        }
        Ok(EthPort {
            id,
            name: port_name(id).unwrap_or_else(|| format!("port{id}")),
            rx_queues: 0,
            tx_queues: 0,
            started: false,
            taken_rx: HashSet::new(),
            taken_tx: HashSet::new(),
        })
    }

    /// The port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The ethdev name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Device facts.
    pub fn info(&self) -> Result<DevInfo, DpdkError> {
        let mut info = ffi::rte_eth_dev_info::default();
        // SAFETY: valid port id; info is a valid out-struct.
        let ret = unsafe { ffi::rte_eth_dev_info_get(self.id, &mut info) };
        check(|| format!("rte_eth_dev_info_get({})", self.name), ret)?;
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name points at the PMD's static name string.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(DevInfo {
            driver,
            max_rx_queues: info.max_rx_queues,
            max_tx_queues: info.max_tx_queues,
            min_mtu: info.min_mtu,
            max_mtu: info.max_mtu,
            max_rx_pktlen: info.max_rx_pktlen,
            flow_type_rss_offloads: info.flow_type_rss_offloads,
            tx_offload_capa: info.tx_offload_capa,
            // SAFETY: plain query on a valid port.
            socket: unsafe { ffi::rte_eth_dev_socket_id(self.id) },
            if_index: info.if_index,
        })
    }

    /// The port's MAC address.
    pub fn mac_addr(&self) -> Result<[u8; 6], DpdkError> {
        let mut a = ffi::rte_ether_addr::default();
        // SAFETY: valid port id; a is a valid out-struct.
        let ret = unsafe { ffi::rte_eth_macaddr_get(self.id, &mut a) };
        check(|| format!("rte_eth_macaddr_get({})", self.name), ret)?;
        Ok(a.addr_bytes)
    }

    /// Configures queues (RSS when `rx_queues > 1`), descriptor counts, MTU
    /// and promiscuous mode; each rx queue takes mbufs from `pool`. The port
    /// must be stopped.
    pub fn configure(&mut self, cfg: &PortConfig, pool: &PktmbufPool) -> Result<(), DpdkError> {
        if self.started {
            return Err(DpdkError::Invalid(format!(
                "port {}: configure needs a stopped port",
                self.name
            )));
        }
        let info = self.info()?;
        if cfg.rx_queues == 0 || cfg.rx_queues > info.max_rx_queues {
            return Err(DpdkError::Invalid(format!(
                "port {} ({}): {} rx queues requested, the device has 1..={}",
                self.name, info.driver, cfg.rx_queues, info.max_rx_queues
            )));
        }
        if cfg.tx_queues == 0 || cfg.tx_queues > info.max_tx_queues {
            return Err(DpdkError::Invalid(format!(
                "port {} ({}): {} tx queues requested, the device has 1..={}",
                self.name, info.driver, cfg.tx_queues, info.max_tx_queues
            )));
        }
        let mut conf = ffi::rte_eth_conf::default();
        if cfg.rx_queues > 1 {
            let want =
                ffi::LR_ETH_RSS_IP as u64 | ffi::LR_ETH_RSS_UDP as u64 | ffi::LR_ETH_RSS_TCP as u64;
            conf.rxmode.mq_mode = ffi::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = want & info.flow_type_rss_offloads;
        }
        let fast_free = ffi::LR_ETH_TX_OFFLOAD_MBUF_FAST_FREE as u64;
        if cfg.fast_free && info.tx_offload_capa & fast_free != 0 {
            conf.txmode.offloads |= fast_free;
        }
        // SAFETY: valid stopped port; conf is a valid, zero-initialised
        // configuration DPDK copies.
        let ret =
            unsafe { ffi::rte_eth_dev_configure(self.id, cfg.rx_queues, cfg.tx_queues, &conf) };
        check(
            || {
                format!(
                    "rte_eth_dev_configure({}, {} rx, {} tx)",
                    self.name, cfg.rx_queues, cfg.tx_queues
                )
            },
            ret,
        )?;
        let (mut nrx, mut ntx) = (cfg.rx_desc, cfg.tx_desc);
        // SAFETY: valid port; both out-pointers valid.
        let ret = unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(self.id, &mut nrx, &mut ntx) };
        check(
            || format!("rte_eth_dev_adjust_nb_rx_tx_desc({})", self.name),
            ret,
        )?;
        let socket = if info.socket < 0 { 0 } else { info.socket } as u32;
        for q in 0..cfg.rx_queues {
            // SAFETY: configured port, q < rx_queues; null conf = defaults;
            // the pool outlives the queue (the caller keeps it until close,
            // and PktmbufPool::drop never frees a pool with mbufs out).
            let ret = unsafe {
                ffi::rte_eth_rx_queue_setup(
                    self.id,
                    q,
                    nrx,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            check(
                || {
                    format!(
                        "rte_eth_rx_queue_setup({}, queue {q}, {nrx} descriptors)",
                        self.name
                    )
                },
                ret,
            )?;
        }
        for q in 0..cfg.tx_queues {
            // SAFETY: configured port, q < tx_queues; null conf = defaults.
            let ret =
                unsafe { ffi::rte_eth_tx_queue_setup(self.id, q, ntx, socket, std::ptr::null()) };
            check(
                || {
                    format!(
                        "rte_eth_tx_queue_setup({}, queue {q}, {ntx} descriptors)",
                        self.name
                    )
                },
                ret,
            )?;
        }
        if let Some(mtu) = cfg.mtu {
            // SAFETY: valid configured port.
            let ret = unsafe { ffi::rte_eth_dev_set_mtu(self.id, mtu) };
            check(|| format!("rte_eth_dev_set_mtu({}, {mtu})", self.name), ret)?;
        }
        // Below the device's frame limit (its header and FCS aside) and only
        // above the default: net_af_packet reports 1518 bytes yet carries what
        // its kernel interface's MTU and `framesz` allow.
        let limit = info
            .max_rx_pktlen
            .saturating_sub(18)
            .min(u32::from(info.max_mtu));
        let best = cfg.mtu_if_supported.map(|m| u32::from(m).min(limit) as u16);
        if let Some(mtu) = best.filter(|&m| m > 1500) {
            // SAFETY: valid configured port.
            let ret = unsafe { ffi::rte_eth_dev_set_mtu(self.id, mtu) };
            // ENOTSUP: no MTU to set (net_ring, net_null carry any frame).
            if ret != -libc::ENOTSUP {
                check(|| format!("rte_eth_dev_set_mtu({}, {mtu})", self.name), ret)?;
            }
        }
        if cfg.promiscuous {
            // SAFETY: valid configured port.
            let ret = unsafe { ffi::rte_eth_promiscuous_enable(self.id) };
            // Virtual devices without the op report ENOTSUP: not an error for
            // a device that receives everything anyway.
            if ret < 0 && ret != -libc::ENOTSUP {
                check(|| format!("rte_eth_promiscuous_enable({})", self.name), ret)?;
            }
        }
        self.rx_queues = cfg.rx_queues;
        self.tx_queues = cfg.tx_queues;
        Ok(())
    }

    /// Starts the port.
    pub fn start(&mut self) -> Result<(), DpdkError> {
        // SAFETY: valid configured port.
        let ret = unsafe { ffi::rte_eth_dev_start(self.id) };
        check(|| format!("rte_eth_dev_start({})", self.name), ret)?;
        self.started = true;
        Ok(())
    }

    /// Stops the port (rx/tx on it then return 0).
    pub fn stop(&mut self) -> Result<(), DpdkError> {
        if !self.started {
            return Ok(());
        }
        // SAFETY: valid started port. Queue handles may still exist; after
        // stop DPDK points the fast-path ops at dummies that return 0.
        let ret = unsafe { ffi::rte_eth_dev_stop(self.id) };
        check(|| format!("rte_eth_dev_stop({})", self.name), ret)?;
        self.started = false;
        Ok(())
    }

    /// Whether [`EthPort::start`] succeeded and no stop followed.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// Takes the handle of rx queue `q` (once per queue).
    pub fn rx_queue(&mut self, q: u16) -> Result<RxQueue, DpdkError> {
        if q >= self.rx_queues || !self.taken_rx.insert(q) {
            return Err(DpdkError::Invalid(format!(
                "port {}: rx queue {q} does not exist ({} configured) or is already taken",
                self.name, self.rx_queues
            )));
        }
        Ok(RxQueue {
            port: self.id,
            queue: q,
            _not_sync: PhantomData,
        })
    }

    /// Takes the handle of tx queue `q` (once per queue).
    pub fn tx_queue(&mut self, q: u16) -> Result<TxQueue, DpdkError> {
        if q >= self.tx_queues || !self.taken_tx.insert(q) {
            return Err(DpdkError::Invalid(format!(
                "port {}: tx queue {q} does not exist ({} configured) or is already taken",
                self.name, self.tx_queues
            )));
        }
        Ok(TxQueue {
            port: self.id,
            queue: q,
            _not_sync: PhantomData,
        })
    }

    /// Link state, without waiting for autonegotiation.
    pub fn link(&self) -> Result<Link, DpdkError> {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid port; l is a valid out-struct.
        let ret = unsafe { ffi::rte_eth_link_get_nowait(self.id, &mut l) };
        check(|| format!("rte_eth_link_get_nowait({})", self.name), ret)?;
        Ok(Link {
            up: l.link_status() != 0,
            speed_mbps: if l.link_speed == u32::MAX {
                0
            } else {
                l.link_speed
            },
            full_duplex: l.link_duplex() != 0,
            autoneg: l.link_autoneg() != 0,
        })
    }

    /// Basic counters.
    pub fn stats(&self) -> Result<Stats, DpdkError> {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port; s is a valid out-struct.
        let ret = unsafe { ffi::rte_eth_stats_get(self.id, &mut s) };
        check(|| format!("rte_eth_stats_get({})", self.name), ret)?;
        Ok(Stats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Zeroes the basic counters.
    pub fn reset_stats(&self) -> Result<(), DpdkError> {
        // SAFETY: valid port.
        let ret = unsafe { ffi::rte_eth_stats_reset(self.id) };
        check(|| format!("rte_eth_stats_reset({})", self.name), ret).map(|_| ())
    }

    /// All extended counters, as (name, value).
    pub fn xstats(&self) -> Result<Vec<(String, u64)>, DpdkError> {
        // SAFETY: a null array with size 0 asks for the count.
        let n = unsafe { ffi::rte_eth_xstats_get_names(self.id, std::ptr::null_mut(), 0) };
        let n = check(|| format!("rte_eth_xstats_get_names({})", self.name), n)? as usize;
        let mut names = vec![ffi::rte_eth_xstat_name::default(); n];
        let mut vals = vec![ffi::rte_eth_xstat::default(); n];
        // SAFETY: both arrays have n entries, as passed.
        let got = unsafe { ffi::rte_eth_xstats_get_names(self.id, names.as_mut_ptr(), n as u32) };
        check(|| format!("rte_eth_xstats_get_names({})", self.name), got)?;
        // SAFETY: as above.
        let got2 = unsafe { ffi::rte_eth_xstats_get(self.id, vals.as_mut_ptr(), n as u32) };
        let got2 = check(|| format!("rte_eth_xstats_get({})", self.name), got2)? as usize;
        Ok(vals[..got2.min(n)]
            .iter()
            .filter_map(|v| {
                let name = names.get(v.id as usize)?;
                // SAFETY: DPDK NUL-terminates names within the fixed array.
                let s = unsafe { CStr::from_ptr(name.name.as_ptr()) };
                Some((s.to_string_lossy().into_owned(), v.value))
            })
            .collect())
    }

    /// One extended counter by name (e.g. "rx_good_packets"); `Ok(None)`
    /// if the device has no such counter.
    pub fn xstat(&self, name: &str) -> Result<Option<u64>, DpdkError> {
        let c = CString::new(name).map_err(|_| DpdkError::Nul {
            what: "xstat name",
            value: name.into(),
        })?;
        let mut id = 0u64;
        // SAFETY: valid C string and out-pointer.
        let ret = unsafe { ffi::rte_eth_xstats_get_id_by_name(self.id, c.as_ptr(), &mut id) };
        if ret < 0 {
            return Ok(None);
        }
        let mut v = 0u64;
        // SAFETY: one id in, one value out.
        let ret = unsafe { ffi::rte_eth_xstats_get_by_id(self.id, &id, &mut v, 1) };
        check(
            || format!("rte_eth_xstats_get_by_id({}, {name})", self.name),
            ret,
        )?;
        Ok(Some(v))
    }

    /// Stops and closes the port, releasing its queues' mbufs.
    pub fn close(mut self) -> Result<(), DpdkError> {
        self.close_inner()
    }

    fn close_inner(&mut self) -> Result<(), DpdkError> {
        self.stop()?;
        if self.rx_queues == 0 && self.tx_queues == 0 {
            return Ok(());
        }
        self.rx_queues = 0;
        self.tx_queues = 0;
        // SAFETY: a stopped port; closing releases its resources.
        let ret = unsafe { ffi::rte_eth_dev_close(self.id) };
        check(|| format!("rte_eth_dev_close({})", self.name), ret).map(|_| ())
    }
}

impl Drop for EthPort {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

/// One rx queue of a port: poll it from one thread at a time.
#[derive(Debug)]
pub struct RxQueue {
    port: u16,
    queue: u16,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// One tx queue of a port: use it from one thread at a time.
#[derive(Debug)]
pub struct TxQueue {
    port: u16,
    queue: u16,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl RxQueue {
    /// (port id, queue id).
    pub fn ids(&self) -> (u16, u16) {
        (self.port, self.queue)
    }

    /// Receives into the burst's spare capacity; returns how many arrived.
    #[inline]
    pub fn rx_burst(&mut self, burst: &mut Burst) -> usize {
        self.rx_burst_upto(burst, usize::MAX)
    }

    /// Receives at most `max` mbufs into the burst's spare capacity.
    #[inline]
    pub fn rx_burst_upto(&mut self, burst: &mut Burst, max: usize) -> usize {
        let spare = burst.spare_raw();
        let max = max.min(spare.len());
        let n = self.rx_burst_raw(&mut spare[..max]);
        // SAFETY: rx_burst wrote n owned mbufs into the first n spare slots.
        unsafe { burst.set_len(burst.len() + n) };
        n
    }

    /// Receives up to `bufs.len()` mbufs into `bufs`; the caller owns the
    /// first n returned (and must free or transmit them).
    #[inline]
    pub fn rx_burst_raw(&mut self, bufs: &mut [*mut ffi::rte_mbuf]) -> usize {
        let n = bufs.len().min(usize::from(u16::MAX)) as u16;
        // SAFETY: bufs is a writable array of n pointers; this handle is the
        // only user of (port, queue) (taken once, not Sync), an open port's
        // queue; a stopped or closed port has dummy ops that return 0.
        usize::from(unsafe { eth_rx_burst(self.port, self.queue, bufs.as_mut_ptr(), n) })
    }
}

impl TxQueue {
    /// (port id, queue id).
    pub fn ids(&self) -> (u16, u16) {
        (self.port, self.queue)
    }

    /// Sends from the front of the burst; the sent mbufs leave it (the
    /// driver frees them after transmission) and the rest move to the front.
    /// Returns how many were sent.
    #[inline]
    pub fn tx_burst(&mut self, burst: &mut Burst) -> usize {
        let raw = burst.as_raw();
        // SAFETY: raw holds owned valid mbufs; those accepted become the
        // driver's and are removed from the burst below without a free.
        let n = unsafe { self.tx_burst_raw(raw) };
        burst.consume_front(n);
        n
    }

    /// Sends up to `bufs.len()` mbufs; returns n, the number accepted
    /// (`bufs[..n]` now belong to the driver, `bufs[n..]` still to the caller).
    ///
    /// # Safety
    /// Every pointer must be a valid mbuf the caller owns.
    #[inline]
    pub unsafe fn tx_burst_raw(&mut self, bufs: &[*mut ffi::rte_mbuf]) -> usize {
        let n = bufs.len().min(usize::from(u16::MAX)) as u16;
        // SAFETY: the caller vouches for the mbufs; the driver only reads the
        // pointer array (the C prototype is non-const for historical reasons).
        usize::from(unsafe { eth_tx_burst(self.port, self.queue, bufs.as_ptr().cast_mut(), n) })
    }
}

// DPDK's `rte_eth_rx_burst` and `rte_eth_tx_burst` are static inlines; calling
// them through a C shim cost a second call and its argument shuffling per
// burst (about 2 instructions per forwarded packet, callgrind). These are the
// same two functions written out as this DPDK builds them (rte_config.h: Rx/Tx
// callbacks on; no RTE_ETHDEV_DEBUG_*, no fast-path tracing): look the queue
// up in `rte_eth_fp_ops` on every call, as the inlines do, since a port's stop
// or restart swaps its entry.

/// `rte_eth_rx_burst`.
///
/// # Safety
/// `port` is an open port's id and `queue` one of its configured rx queues,
/// used by this thread only; `pkts` has room for `n` pointers.
#[inline(always)]
unsafe fn eth_rx_burst(port: u16, queue: u16, pkts: *mut *mut ffi::rte_mbuf, n: u16) -> u16 {
    use std::sync::atomic::{AtomicPtr, Ordering};
    // SAFETY: the caller's contract; port ids are below RTE_MAX_ETHPORTS (the
    // index is checked anyway) and a configured queue indexes within the
    // RTE_MAX_QUEUES_PER_PORT entries of `data` and `clbk`. The callback slot is
    // read atomically, as the C inline does, because another thread may
    // install a callback.
    unsafe {
        let p = std::ptr::addr_of!(ffi::rte_eth_fp_ops[usize::from(port)]);
        let qd = *(*p).rxq.data.add(usize::from(queue));
        let Some(burst) = (*p).rx_pkt_burst else {
            return 0;
        };
        let mut nb = burst(qd, pkts, n);
        let cb = AtomicPtr::from_ptr((*p).rxq.clbk.add(usize::from(queue))).load(Ordering::Relaxed);
        if !cb.is_null() {
            nb = ffi::rte_eth_call_rx_callbacks(port, queue, pkts, nb, n, cb);
        }
        nb
    }
}

/// `rte_eth_tx_burst`.
///
/// # Safety
/// `port` is an open port's id and `queue` one of its configured tx queues,
/// used by this thread only; `pkts[..n]` are valid mbufs the caller owns.
#[inline(always)]
unsafe fn eth_tx_burst(port: u16, queue: u16, pkts: *mut *mut ffi::rte_mbuf, n: u16) -> u16 {
    use std::sync::atomic::{AtomicPtr, Ordering};
    // SAFETY: as in `eth_rx_burst`.
    unsafe {
        let p = std::ptr::addr_of!(ffi::rte_eth_fp_ops[usize::from(port)]);
        let qd = *(*p).txq.data.add(usize::from(queue));
        let mut n = n;
        let cb = AtomicPtr::from_ptr((*p).txq.clbk.add(usize::from(queue))).load(Ordering::Relaxed);
        if !cb.is_null() {
            n = ffi::rte_eth_call_tx_callbacks(port, queue, pkts, n, cb);
        }
        match (*p).tx_pkt_burst {
            Some(burst) => burst(qd, pkts, n),
            None => 0,
        }
    }
}

#[cfg(test)]
mod test {
    use super::vdev_args;

    #[test]
    fn a_vdev_is_found_by_name_in_either_spelling() {
        let args: Vec<String> = [
            "--no-huge",
            "--vdev=net_af_packet0,iface=a,framecnt=4096",
            "--vdev",
            "net_ring0",
            "--vdev=net_null10",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            vdev_args(&args, "net_af_packet0"),
            Some("iface=a,framecnt=4096")
        );
        assert_eq!(vdev_args(&args, "net_ring0"), Some(""));
        assert_eq!(vdev_args(&args, "net_null10"), Some(""));
        assert_eq!(vdev_args(&args, "net_null1"), None);
        assert_eq!(vdev_args(&args, "--no-huge"), None);
    }
}
