//! The file schema: sections, their keys, and what each kind of port and stage
//! accepts. Parsing goes on after an error so every problem is reported.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use toml::de::{DeTable, DeValue};

use super::diag::{suggest, Diagnostics, Sink};
use super::table::{as_int, Span, Table};
use super::Pipeline;
use crate::buf::copy::CopyMode;
use crate::buf::{HugepageMode, PoolConfig, BURST_MAX};
use crate::port::mem::{Capacity, MemConfig};
use crate::port::pcap::{Pace, PcapConfig};
use crate::port::udp::UdpConfig;
use crate::reliable::stage::{ReliableSpec, Role};
use crate::spead::fsim::FsimConfig;
use crate::spead::stage::{
    ChunkSinkMode, ChunkSinkSpec, Encap, SendSource, SpeadRecvSpec, SpeadSendSpec,
};
use crate::spead::wire::Flavour;
use crate::traffic::analyzer::LatencyMode;
use crate::traffic::template::{
    AddrRange, FlowOrder, FrameSpec, PortRange, Sizes, DEFAULT_DST_V6, DEFAULT_SRC_V6, MAX_FRAME,
    MIN_FRAME, MIN_FRAME_V6,
};
use crate::units::{parse_core_list, Rate};

/// The pool section, as written.
pub type PoolSpec = PoolConfig;

/// A port as declared.
#[derive(Debug, Clone)]
pub struct PortSpec {
    /// Its name.
    pub name: String,
    /// Its kind and configuration.
    pub kind: PortKind,
}

/// The kinds of port.
#[derive(Debug, Clone)]
pub enum PortKind {
    /// In-process wire with impairments.
    Mem(MemConfig),
    /// Kernel UDP socket.
    Udp(UdpConfig),
    /// Capture file.
    Pcap(PcapConfig),
    /// A DPDK device.
    #[cfg(feature = "dpdk")]
    Dpdk(crate::port::dpdk::DpdkConfig),
    /// ibverbs raw packet queues.
    #[cfg(feature = "ibverbs")]
    Ibverbs(crate::port::ibverbs::IbverbsConfig),
}

impl PortKind {
    /// The kind's name in files.
    pub fn name(&self) -> &'static str {
        match self {
            PortKind::Mem(_) => "mem",
            PortKind::Udp(_) => "udp",
            PortKind::Pcap(_) => "pcap",
            #[cfg(feature = "dpdk")]
            PortKind::Dpdk(_) => "dpdk",
            #[cfg(feature = "ibverbs")]
            PortKind::Ibverbs(_) => "ibverbs",
        }
    }

    /// Queues in a direction ("rx" or "tx").
    pub(crate) fn queues(&self, dir: &str) -> u16 {
        match (self, dir) {
            #[cfg(feature = "dpdk")]
            (PortKind::Dpdk(c), "rx") => c.rx_queues,
            #[cfg(feature = "dpdk")]
            (PortKind::Dpdk(c), _) => c.tx_queues,
            (PortKind::Mem(c), _) => c.queues,
            (PortKind::Udp(c), _) => c.queues,
            _ => 1,
        }
    }

    /// Whether the port can receive, and if not, why.
    pub(crate) fn rx_missing(&self) -> Option<&'static str> {
        match self {
            PortKind::Pcap(c) if c.read.is_none() => {
                Some("a pcap port receives only with `read = \"FILE\"`")
            }
            #[cfg(feature = "ibverbs")]
            PortKind::Ibverbs(c) if c.dst_mac.is_none() => {
                Some("an ibverbs port receives only with `dst_mac` (its flow steering rule)")
            }
            _ => None,
        }
    }

    /// Whether the port can transmit, and if not, why.
    pub(crate) fn tx_missing(&self) -> Option<&'static str> {
        match self {
            PortKind::Pcap(c) if c.write.is_none() => {
                Some("a pcap port transmits only with `write = \"FILE\"`")
            }
            PortKind::Udp(c) if c.connect.is_none() => {
                Some("a udp port transmits only with `connect = \"HOST:PORT\"`")
            }
            _ => None,
        }
    }

    /// The port's line rate in L1 bits/s, when known.
    pub fn line_rate_bps(&self) -> Option<f64> {
        match self {
            PortKind::Mem(c) => c.line_rate_bps,
            #[cfg(feature = "dpdk")]
            PortKind::Dpdk(c) => c.line_rate_bps.map(|b| b as f64),
            #[cfg(feature = "ibverbs")]
            PortKind::Ibverbs(c) => c.line_rate_bps.map(|b| b as f64),
            _ => None,
        }
    }
}

/// A ring as declared.
#[derive(Debug, Clone)]
pub struct RingSpec {
    /// Its name.
    pub name: String,
    /// Slots (a power of two).
    pub size: usize,
    pub(crate) span: Span,
}

/// A stage as declared.
#[derive(Debug, Clone)]
pub struct StageSpec {
    /// Its name.
    pub name: String,
    /// The core of the lcore that polls it.
    pub lcore: usize,
    /// The port or ring it receives from.
    pub rx: Option<String>,
    /// The port or ring it transmits to.
    pub tx: Option<String>,
    /// Its kind and configuration.
    pub kind: StageKind,
    /// `lcores = "1-4"`: the cores of its replicas (empty: one lcore, `lcore`).
    /// The plan expands a replicated stage into one instance per core.
    pub replicas: Vec<usize>,
    /// Set on an instance of a replicated stage.
    pub replica: Option<super::replica::Replica>,
    pub(crate) span: Span,
    pub(crate) lcores_span: Span,
    pub(crate) rx_span: Span,
    pub(crate) tx_span: Span,
}

/// The kinds of stage.
#[derive(Debug, Clone)]
pub enum StageKind {
    /// Emits a fixed template packet, as fast as possible or at a rate.
    Source(SourceConfig),
    /// Stamped traffic for trials.
    Generator(GeneratorSpec),
    /// Per-stream counts and latency of stamped traffic.
    Analyzer(AnalyzerSpec),
    /// One side of a reliable channel (`reliable_tx` or `reliable_rx`).
    Reliable(ReliableSpec),
    /// Sends SPEAD heaps (the F-engine simulator's or generic ones).
    SpeadSend(SpeadSendSpec),
    /// Reassembles SPEAD heaps into chunks (katgpucbf's placement).
    SpeadRecv(SpeadRecvSpec),
    /// Consumes a `spead_recv` stage's chunks.
    ChunkSink(ChunkSinkSpec),
    /// Moves packets from rx to tx.
    Forward(SinkConfig),
    /// Counts and frees packets.
    Sink(SinkConfig),
}

impl StageKind {
    /// The kind's name in files.
    pub fn name(&self) -> &'static str {
        match self {
            StageKind::Source(_) => "source",
            StageKind::Generator(_) => "generator",
            StageKind::Analyzer(_) => "analyzer",
            StageKind::Reliable(r) if r.role == Role::Tx => "reliable_tx",
            StageKind::Reliable(_) => "reliable_rx",
            StageKind::SpeadSend(_) => "spead_send",
            StageKind::SpeadRecv(_) => "spead_recv",
            StageKind::ChunkSink(_) => "chunk_sink",
            StageKind::Forward(_) => "forward",
            StageKind::Sink(_) => "sink",
        }
    }
}

/// A source stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceConfig {
    /// The rate as written; `None` is as fast as possible.
    pub rate: Option<Rate>,
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

/// A generator stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GeneratorSpec {
    /// Frames, flows and sizes.
    pub frames: FrameSpec,
    /// Stream id (0..=255) written in every stamp.
    pub stream: u16,
    /// The free-running rate as written (`linerate run`); trials set their own.
    pub rate: Option<Rate>,
    /// That rate in packets/s, resolved by the plan.
    pub rate_pps: Option<f64>,
    /// Packets to send when free-running; `None` is until stopped.
    pub count: Option<u64>,
    /// Packets per burst.
    pub burst: usize,
    /// This generator's share of a trial's aggregate rate (weights are
    /// normalised over all generators).
    pub share: f64,
    /// How late a packet may go out before it is counted as unsent.
    pub max_lag: std::time::Duration,
}

/// An analyzer stage's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyzerSpec {
    /// Which packets give latency samples.
    pub latency: LatencyMode,
    /// Streams tracked: ids 0..streams.
    pub streams: usize,
    /// Packets per burst.
    pub burst: usize,
}

/// Settings of stages that only move or count packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkConfig {
    /// Packets per burst.
    pub burst: usize,
}

const TOP_KEYS: &[&str] = &["pipeline", "pool", "port", "ring", "stage", "eal"];
const PORT_KINDS: &[&str] = &["mem", "udp", "pcap", "dpdk", "ibverbs"];
const STAGE_KINDS: &[&str] = &[
    "source",
    "forward",
    "sink",
    "generator",
    "analyzer",
    "reliable_tx",
    "reliable_rx",
    "spead_send",
    "spead_recv",
    "chunk_sink",
];
/// The F-engine geometry keys shared by `spead_send` and `spead_recv`.
const FSIM_KEYS: &[&str] = &[
    "n_ants",
    "n_channels_total",
    "n_channels_per_stream",
    "n_samples_per_channel",
    "n_pols",
    "packet_payload",
];
const SPEAD_SEND_KEYS: &[&str] = &[
    "kind",
    "lcore",
    "tx",
    "source",
    "flavour",
    "rate",
    "timestamps",
    "heaps",
    "heap_size",
    "packet_size",
    "end_of_stream",
    "encap",
    "burst",
    "n_ants",
    "n_channels_total",
    "n_channels_per_stream",
    "n_samples_per_channel",
    "n_pols",
    "packet_payload",
];
const SPEAD_RECV_KEYS: &[&str] = &[
    "kind",
    "lcore",
    "rx",
    "flavour",
    "heaps_per_fengine_per_chunk",
    "max_chunks",
    "n_chunks",
    "max_heaps",
    "copy",
    "idle_timeout",
    "encap",
    "burst",
    "n_ants",
    "n_channels_total",
    "n_channels_per_stream",
    "n_samples_per_channel",
    "n_pols",
    "packet_payload",
];
const CHUNK_SINK_KEYS: &[&str] = &["kind", "lcore", "from", "mode", "dir", "keep_wrong"];
const GENERATOR_KEYS: &[&str] = &[
    "kind", "lcore", "tx", "rate", "frame", "imix", "src_mac", "dst_mac", "src_ip", "dst_ip",
    "src_port", "dst_port", "flows", "seed", "stream", "count", "burst", "share", "max_lag", "ip",
];

fn section<'t, 'i>(
    sink: &mut Sink<'_>,
    root: &'t DeTable<'i>,
    key: &str,
) -> Option<(Span, &'t DeTable<'i>)> {
    let v = root.get(key)?;
    match v.get_ref() {
        DeValue::Table(t) => Some((v.span(), t)),
        _ => {
            sink.error(
                v.span(),
                "",
                Some(key),
                format!("`{key}` must be a table, like [{key}]"),
                None,
            );
            None
        }
    }
}

/// Named sub-tables of a section: `[port.NAME]`.
fn named<'t, 'i>(
    sink: &mut Sink<'_>,
    root: &'t DeTable<'i>,
    key: &str,
) -> Vec<(String, Span, &'t DeTable<'i>)> {
    let Some((_, t)) = section(sink, root, key) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (name, v) in t.iter() {
        match v.get_ref() {
            DeValue::Table(inner) => out.push((name.get_ref().to_string(), v.span(), inner)),
            _ => sink.error(
                v.span(),
                key,
                Some(name.get_ref()),
                format!("expected a table [{key}.{}]", name.get_ref()),
                None,
            ),
        }
    }
    out
}

fn burst(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> usize {
    t.int(sink, "burst", 1..BURST_MAX as i64 + 1)
        .map_or(32, |(b, _)| b as usize)
}

fn socket_addr(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str) -> Option<SocketAddr> {
    let (s, span) = t.string(sink, key)?;
    match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            sink.error(
                span,
                &t.path,
                Some(key),
                format!("`{s}` is not a socket address"),
                Some("an IP address and port, like \"127.0.0.1:9000\" or \"[::1]:9000\"".into()),
            );
            None
        }
    }
}

fn ipv4(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str) -> Option<Ipv4Addr> {
    let (s, span) = t.string(sink, key)?;
    s.parse()
        .map_err(|_| {
            sink.error(
                span,
                &t.path,
                Some(key),
                format!("`{s}` is not an IPv4 address"),
                None,
            )
        })
        .ok()
}

fn parse_port(sink: &mut Sink<'_>, name: &str, span: Span, map: &DeTable<'_>) -> Option<PortSpec> {
    let mut t = Table::new(format!("port.{name}"), span.clone(), map);
    let (kind, kind_span) = t.required_string(sink, "kind", &PORT_KINDS.join(", "))?;
    let kind = match kind.as_str() {
        "mem" => {
            let mut c = MemConfig {
                line_rate_bps: t.line_rate_bps(sink, "line_rate", "\"10 Gbps\""),
                ..MemConfig::default()
            };
            if let Some((r, s)) = t.rate(sink, "capacity") {
                c.capacity = match r {
                    Rate::Pps(p) => Some(Capacity::Pps(p)),
                    Rate::L2Bps(b) => Some(Capacity::L2Bps(b)),
                    Rate::L1Bps(b) => Some(Capacity::L1Bps(b)),
                    Rate::Percent(p) => match c.line_rate_bps {
                        Some(l) => Some(Capacity::L1Bps(l * p / 100.0)),
                        None => {
                            sink.error(
                                s,
                                &t.path,
                                Some("capacity"),
                                "a capacity in percent needs `line_rate` on this port",
                                None,
                            );
                            None
                        }
                    },
                };
                if matches!(r, Rate::Pps(x) | Rate::L2Bps(x) | Rate::L1Bps(x) if x <= 0.0) {
                    sink.error(
                        t.span_of("capacity"),
                        &t.path,
                        Some("capacity"),
                        "a capacity must be above zero",
                        None,
                    );
                }
            }
            if let Some((q, _)) = t.int(sink, "queue", 1..1 << 24) {
                c.queue = q as u32;
            }
            c.loss = t.float(sink, "loss", 0.0, 1.0).unwrap_or(0.0);
            c.duplicate = t.float(sink, "duplicate", 0.0, 1.0).unwrap_or(0.0);
            c.reorder = t.float(sink, "reorder", 0.0, 1.0).unwrap_or(0.0);
            c.delay = t.duration(sink, "delay").unwrap_or_default();
            if let Some((s, _)) = t.int(sink, "seed", 0..i64::MAX) {
                c.seed = s as u64;
            }
            if let Some(r) = ring_size(&mut t, sink, "ring") {
                c.ring = r;
            }
            if let Some((q, _)) = t.int(sink, "queues", 1..257) {
                c.queues = q as u16;
            }
            t.finish(
                sink,
                "a mem port",
                &[
                    "kind",
                    "queues",
                    "capacity",
                    "queue",
                    "loss",
                    "duplicate",
                    "reorder",
                    "delay",
                    "seed",
                    "ring",
                    "line_rate",
                ],
            );
            PortKind::Mem(c)
        }
        "udp" => {
            let c = UdpConfig {
                bind: socket_addr(&mut t, sink, "bind"),
                connect: socket_addr(&mut t, sink, "connect"),
                multicast: ipv4(&mut t, sink, "multicast"),
                interface: ipv4(&mut t, sink, "interface").unwrap_or(Ipv4Addr::UNSPECIFIED),
                rcvbuf: t.size(sink, "rcvbuf").map(|(s, _)| s as usize),
                sndbuf: t.size(sink, "sndbuf").map(|(s, _)| s as usize),
                queues: t.int(sink, "queues", 1..257).map_or(1, |(q, _)| q as u16),
            };
            if c.bind.is_none() && c.connect.is_none() {
                sink.error(
                    span.clone(),
                    &t.path,
                    None,
                    "a udp port needs `bind` (to receive) or `connect` (to send), or both",
                    None,
                );
            }
            t.finish(
                sink,
                "a udp port",
                &[
                    "kind",
                    "bind",
                    "connect",
                    "multicast",
                    "interface",
                    "rcvbuf",
                    "sndbuf",
                    "queues",
                ],
            );
            PortKind::Udp(c)
        }
        "pcap" => {
            let mut c = PcapConfig {
                read: t.string(sink, "read").map(|(s, _)| PathBuf::from(s)),
                write: t.string(sink, "write").map(|(s, _)| PathBuf::from(s)),
                repeat: t
                    .int(sink, "repeat", 0..u32::MAX as i64)
                    .map_or(1, |(r, _)| r as u32),
                ..PcapConfig::default()
            };
            if let Some(p) = t.choice(
                sink,
                "pace",
                "pace",
                &[("fast", Pace::Fast), ("recorded", Pace::Recorded)],
                "\"fast\" or \"recorded\"",
            ) {
                c.pace = p;
            }
            if c.read.is_none() && c.write.is_none() {
                sink.error(span.clone(), &t.path, None, "a pcap port needs `read` (a capture to replay) or `write` (a capture to record), or both", None);
            }
            t.finish(
                sink,
                "a pcap port",
                &["kind", "read", "write", "pace", "repeat"],
            );
            PortKind::Pcap(c)
        }
        #[cfg(feature = "dpdk")]
        "dpdk" => {
            let d = crate::port::dpdk::DpdkConfig::default();
            let q = |t: &mut Table<'_, '_>, sink: &mut Sink<'_>, k: &str, dflt: u16, hi: i64| {
                t.int(sink, k, 1..hi + 1).map_or(dflt, |(v, _)| v as u16)
            };
            let (device, _) = t.required_string(
                sink,
                "device",
                "a DPDK device name like \"net_null0\" or a PCI address like \"0000:01:00.0\"",
            )?;
            let c = crate::port::dpdk::DpdkConfig {
                device,
                rx_queues: q(&mut t, sink, "rx_queues", d.rx_queues, 64),
                tx_queues: q(&mut t, sink, "tx_queues", d.tx_queues, 64),
                rx_desc: q(&mut t, sink, "rx_desc", d.rx_desc, 32768),
                tx_desc: q(&mut t, sink, "tx_desc", d.tx_desc, 32768),
                mtu: t.int(sink, "mtu", 68..9217).map(|(m, _)| m as u16),
                promiscuous: t.boolean(sink, "promiscuous").unwrap_or(d.promiscuous),
                mbufs: t
                    .int(sink, "mbufs", 255..(1 << 24))
                    .map_or(d.mbufs, |(m, _)| m as u32),
                cache: t
                    .int(sink, "cache", 0..513)
                    .map_or(d.cache, |(m, _)| m as u32),
                line_rate_bps: t
                    .line_rate_bps(sink, "line_rate", "\"10 Gbps\"")
                    .map(|b| b as u64),
            };
            t.finish(
                sink,
                "a dpdk port",
                &[
                    "kind",
                    "device",
                    "rx_queues",
                    "tx_queues",
                    "rx_desc",
                    "tx_desc",
                    "mtu",
                    "promiscuous",
                    "mbufs",
                    "cache",
                    "line_rate",
                ],
            );
            PortKind::Dpdk(c)
        }
        #[cfg(not(feature = "dpdk"))]
        "dpdk" => {
            sink.error(
                kind_span,
                &t.path,
                Some("kind"),
                "port kind `dpdk` is not available in this build: it needs the `dpdk` cargo feature and its system packages (build with `cargo build --release --features dpdk`; scripts/test installs the packages)",
                None,
            );
            return None;
        }
        #[cfg(feature = "ibverbs")]
        "ibverbs" => PortKind::Ibverbs(parse_ibverbs(t, sink)),
        #[cfg(not(feature = "ibverbs"))]
        "ibverbs" => {
            sink.error(
                kind_span,
                &t.path,
                Some("kind"),
                format!("port kind `{kind}` is not available in this build: it needs the `{kind}` cargo feature and its system packages (build with `cargo build --release --features {kind}`; scripts/test installs the packages)"),
                None,
            );
            return None;
        }
        other => {
            unknown_kind(sink, kind_span, &t.path, "port", other, PORT_KINDS);
            return None;
        }
    };
    Some(PortSpec {
        name: name.to_string(),
        kind,
    })
}

/// The keys of an ibverbs port.
#[cfg(feature = "ibverbs")]
const IBVERBS_KEYS: &[&str] = &[
    "kind",
    "device",
    "ib_port",
    "dst_mac",
    "dst_ip",
    "dst_port",
    "rx_depth",
    "tx_depth",
    "buffers",
    "buffer_size",
    "inline",
    "line_rate",
];

#[cfg(feature = "ibverbs")]
fn parse_ibverbs(
    mut table: Table<'_, '_>,
    sink: &mut Sink<'_>,
) -> crate::port::ibverbs::IbverbsConfig {
    use crate::port::ibverbs::{limits, IbverbsConfig};
    let t = &mut table;
    let d = IbverbsConfig::default();
    let int = |t: &mut Table<'_, '_>,
               sink: &mut Sink<'_>,
               k: &str,
               r: &std::ops::RangeInclusive<u32>,
               dflt: u32| {
        t.int(sink, k, i64::from(*r.start())..i64::from(*r.end()) + 1)
            .map_or(dflt, |(v, _)| v as u32)
    };
    let rx_depth = int(t, sink, "rx_depth", &limits::DEPTH, d.rx_depth);
    let mut c = IbverbsConfig {
        device: t.string(sink, "device").map(|x| x.0),
        ib_port: t
            .int(sink, "ib_port", 1..256)
            .map_or(d.ib_port, |(p, _)| p as u8),
        dst_mac: t.has("dst_mac").then(|| mac(t, sink, "dst_mac", [0; 6])),
        dst_ip: ipv4(t, sink, "dst_ip"),
        dst_port: t.int(sink, "dst_port", 1..65536).map(|(p, _)| p as u16),
        rx_depth,
        tx_depth: int(t, sink, "tx_depth", &limits::DEPTH, d.tx_depth),
        // Every buffer is posted at once: by default as many as the queue takes.
        buffers: int(t, sink, "buffers", &(1..=*limits::DEPTH.end()), rx_depth),
        buffer_size: d.buffer_size,
        inline: int(t, sink, "inline", &limits::INLINE, d.inline),
        line_rate_bps: t
            .line_rate_bps(sink, "line_rate", "\"100 Gbps\"")
            .map(|b| b as u64),
    };
    if let Some((b, span)) = t.size(sink, "buffer_size") {
        if u32::try_from(b).is_ok_and(|b| limits::BUFFER_SIZE.contains(&b)) {
            c.buffer_size = b as u32;
        } else {
            sink.error(
                span,
                &t.path,
                Some("buffer_size"),
                format!("{b} bytes is out of range"),
                Some(format!(
                    "from {} to {} bytes per slot: the largest frame, without FCS",
                    limits::BUFFER_SIZE.start(),
                    limits::BUFFER_SIZE.end()
                )),
            );
        }
    }
    // Cross-key problems, each at the key it names (only for keys that
    // parsed: a key already reported keeps its default here).
    for (key, msg) in c.problems() {
        if t.has(key) {
            sink.error(t.span_of(key), &t.path, Some(key), msg, None);
        } else {
            sink.error(
                t.span.clone(),
                &t.path,
                None,
                format!("`{key}`: {msg}"),
                None,
            );
        }
    }
    table.finish(sink, "an ibverbs port", IBVERBS_KEYS);
    c
}

/// Reports an unknown `kind`, suggesting the closest valid one.
fn unknown_kind(
    sink: &mut Sink<'_>,
    span: Span,
    section: &str,
    what: &str,
    kind: &str,
    valid: &[&str],
) {
    let hint = suggest(kind, valid)
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    sink.error(
        span,
        section,
        Some("kind"),
        format!("unknown {what} kind `{kind}`{hint}"),
        Some(valid.join(", ")),
    );
}

fn ring_size(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str) -> Option<usize> {
    let (n, span) = t.int(sink, key, 2..(1 << 24) + 1)?;
    if !(n as u64).is_power_of_two() {
        let n = n as u64;
        sink.error(
            span,
            &t.path,
            Some(key),
            format!("{n} is not a power of two"),
            Some(format!(
                "a power of two from 2 to 16777216, such as {} or {}",
                n.next_power_of_two() / 2,
                n.next_power_of_two()
            )),
        );
        return None;
    }
    Some(n as usize)
}

fn parse_stage(
    sink: &mut Sink<'_>,
    name: &str,
    span: Span,
    map: &DeTable<'_>,
    lcores: &[usize],
) -> Option<StageSpec> {
    let mut t = Table::new(format!("stage.{name}"), span.clone(), map);
    let (kind, kind_span) = t.required_string(sink, "kind", &STAGE_KINDS.join(", "))?;
    let lcore = match t.int(sink, "lcore", 0..4096) {
        Some((l, s)) => {
            let l = l as usize;
            if !lcores.contains(&l) {
                sink.error(
                    s,
                    &t.path,
                    Some("lcore"),
                    format!("lcore {l} is not among the pipeline's lcores"),
                    Some(format!("one of {:?} (from `lcores` in [pipeline])", lcores)),
                );
            }
            l
        }
        None => lcores.first().copied().unwrap_or(0),
    };
    let lcores_span = t.span_of("lcores");
    let replicas = super::replica::parse_stage_lcores(sink, &mut t, lcores);
    // A chunk sink has no rx: the span of its `from` (resolved by the plan)
    // stands in the rx span.
    let rx_span = if kind == "chunk_sink" {
        t.span_of("from")
    } else {
        t.span_of("rx")
    };
    let tx_span = t.span_of("tx");
    let help_rx = "the name of a port or ring to receive from";
    let help_tx = "the name of a port or ring to transmit to";
    let (kind, rx, tx) = match kind.as_str() {
        "source" => {
            let tx = t.required_string(sink, "tx", help_tx).map(|x| x.0);
            let frame = match t.int(sink, "frame", 64..9019) {
                Some((f, _)) => f as usize,
                None => 64,
            };
            let c = SourceConfig {
                rate: t.rate(sink, "rate").map(|x| x.0),
                rate_pps: None,
                frame,
                count: t.int(sink, "count", 1..i64::MAX).map(|(c, _)| c as u64),
                burst: burst(&mut t, sink),
                max_lag: t
                    .duration(sink, "max_lag")
                    .unwrap_or(crate::traffic::generator::DEFAULT_MAX_LAG),
            };
            t.finish(
                sink,
                "a source stage",
                &[
                    "kind", "lcore", "tx", "rate", "frame", "count", "burst", "max_lag",
                ],
            );
            (StageKind::Source(c), None, tx)
        }
        "forward" => {
            let rx = t.required_string(sink, "rx", help_rx).map(|x| x.0);
            let tx = t.required_string(sink, "tx", help_tx).map(|x| x.0);
            let c = SinkConfig {
                burst: burst(&mut t, sink),
            };
            t.finish(
                sink,
                "a forward stage",
                &["kind", "lcore", "rx", "tx", "burst"],
            );
            (StageKind::Forward(c), rx, tx)
        }
        "generator" => {
            let tx = t.required_string(sink, "tx", help_tx).map(|x| x.0);
            let g = parse_generator(&mut t, sink);
            t.finish(sink, "a generator stage", GENERATOR_KEYS);
            (StageKind::Generator(g), None, tx)
        }
        "analyzer" => {
            let rx = t.required_string(sink, "rx", help_rx).map(|x| x.0);
            let latency = t
                .choice(
                    sink,
                    "latency",
                    "latency mode",
                    &[
                        ("packet", LatencyMode::Packet),
                        ("batch", LatencyMode::Batch),
                        ("off", LatencyMode::Off),
                    ],
                    "\"packet\", \"batch\" or \"off\"",
                )
                .unwrap_or(LatencyMode::Packet);
            let streams = t
                .int(sink, "streams", 1..257)
                .map_or(16, |(n, _)| n as usize);
            let c = AnalyzerSpec {
                latency,
                streams,
                burst: burst(&mut t, sink),
            };
            t.finish(
                sink,
                "an analyzer stage",
                &["kind", "lcore", "rx", "latency", "streams", "burst"],
            );
            (StageKind::Analyzer(c), rx, None)
        }
        "reliable_tx" | "reliable_rx" => {
            let rx = t.required_string(sink, "rx", help_rx).map(|x| x.0);
            let tx = t.required_string(sink, "tx", help_tx).map(|x| x.0);
            let role = if kind == "reliable_tx" {
                Role::Tx
            } else {
                Role::Rx
            };
            let messages = t.int(sink, "messages", 1..i64::MAX).map(|(m, _)| m as u64);
            let size = t.size(sink, "size").map_or(8192, |(s, _)| s as usize);
            let burst = burst(&mut t, sink);
            const OWN: &[&str] = &["kind", "lcore", "rx", "tx", "messages", "size", "burst"];
            let mut endpoint_keys = toml::Table::new();
            for (k, v) in map.iter() {
                if !OWN.contains(&k.get_ref().as_ref()) {
                    t.mark_used(k.get_ref());
                    endpoint_keys.insert(k.get_ref().to_string(), to_value(v.get_ref()));
                }
            }
            let config = match crate::reliable::keys::config_from_table(&endpoint_keys, &[]) {
                Ok(c) => c,
                Err(e) => {
                    let key = match &e {
                        crate::reliable::keys::KeyError::Unknown { key }
                        | crate::reliable::keys::KeyError::Value { key, .. } => key.clone(),
                    };
                    let span = map.get(key.as_str()).map_or(span.clone(), |v| v.span());
                    sink.error(span, &t.path, Some(&key), e.to_string(), None);
                    crate::reliable::endpoint::Config::default()
                }
            };
            if size < 8 || size > config.max_message as usize {
                sink.error(
                    t.span_of("size"),
                    &t.path,
                    Some("size"),
                    format!(
                        "a message of {size} bytes is outside 8..={}",
                        config.max_message
                    ),
                    Some("message sizes from 8 bytes to `max_message`".into()),
                );
            }
            t.finish(sink, "a reliable stage", OWN);
            (
                StageKind::Reliable(ReliableSpec {
                    role,
                    messages,
                    size,
                    config,
                    burst,
                }),
                rx,
                tx,
            )
        }
        "spead_send" => {
            let tx = t.required_string(sink, "tx", help_tx).map(|x| x.0);
            let c = parse_spead_send(&mut t, sink);
            t.finish(sink, "a spead_send stage", SPEAD_SEND_KEYS);
            (StageKind::SpeadSend(c), None, tx)
        }
        "spead_recv" => {
            let rx = t.required_string(sink, "rx", help_rx).map(|x| x.0);
            let c = parse_spead_recv(&mut t, sink);
            t.finish(sink, "a spead_recv stage", SPEAD_RECV_KEYS);
            (StageKind::SpeadRecv(c), rx, None)
        }
        "chunk_sink" => {
            let c = parse_chunk_sink(&mut t, sink);
            t.finish(sink, "a chunk_sink stage", CHUNK_SINK_KEYS);
            (StageKind::ChunkSink(c), None, None)
        }
        "sink" => {
            let rx = t.required_string(sink, "rx", help_rx).map(|x| x.0);
            let c = SinkConfig {
                burst: burst(&mut t, sink),
            };
            t.finish(sink, "a sink stage", &["kind", "lcore", "rx", "burst"]);
            (StageKind::Sink(c), rx, None)
        }
        other => {
            unknown_kind(sink, kind_span, &t.path, "stage", other, STAGE_KINDS);
            return None;
        }
    };
    Some(StageSpec {
        name: name.to_string(),
        lcore,
        rx,
        tx,
        kind,
        replicas,
        replica: None,
        span,
        lcores_span,
        rx_span,
        tx_span,
    })
}

fn flavour(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Flavour {
    match t.string(sink, "flavour") {
        None => Flavour::SPEAD_64_48,
        Some((f, span)) => match f.as_str() {
            "64-48" => Flavour::SPEAD_64_48,
            "64-40" => Flavour::SPEAD_64_40,
            _ => {
                let bits = f
                    .strip_prefix("64-")
                    .and_then(|b| b.parse::<u32>().ok())
                    .and_then(|b| Flavour::new(b).ok());
                bits.unwrap_or_else(|| {
                    sink.error(
                        span,
                        &t.path,
                        Some("flavour"),
                        format!("`{f}` is not a SPEAD flavour"),
                        Some("\"64-48\" (MeerKAT), \"64-40\" (spead2's default), or \"64-N\" with N a multiple of 8 from 8 to 56".into()),
                    );
                    Flavour::SPEAD_64_48
                })
            }
        },
    }
}

fn encap(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Encap {
    t.choice(
        sink,
        "encap",
        "encapsulation",
        &[("none", Encap::None), ("udp", Encap::Udp)],
        "\"none\" (the packet is the SPEAD packet: mem and udp ports) or \"udp\" (Ethernet/IPv4/UDP headers in front: dpdk ports)",
    )
    .unwrap_or(Encap::None)
}

/// The F-engine geometry keys (katgpucbf's defaults), checked together.
fn fsim_geometry(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, flavour: Flavour) -> FsimConfig {
    let d = FsimConfig::default();
    let mut get =
        |k: &str, dflt: usize, hi: i64| t.int(sink, k, 1..hi).map_or(dflt, |(v, _)| v as usize);
    let c = FsimConfig {
        n_ants: get("n_ants", d.n_ants, 1 << 16),
        n_channels_total: get("n_channels_total", d.n_channels_total, 1 << 24),
        n_channels_per_stream: get("n_channels_per_stream", d.n_channels_per_stream, 1 << 24),
        n_samples_per_channel: get("n_samples_per_channel", d.n_samples_per_channel, 1 << 24),
        n_pols: get("n_pols", d.n_pols, 5),
        packet_payload: get("packet_payload", d.packet_payload, 9001),
        flavour,
        ..d
    };
    if let Err(e) = c.validate() {
        let key = FSIM_KEYS
            .iter()
            .copied()
            .find(|k| t.has(k))
            .unwrap_or("n_channels_per_stream");
        sink.error(
            t.span_of(key),
            &t.path,
            Some(key),
            format!("the F-engine geometry is invalid: {e}"),
            None,
        );
    } else if c.heap_bytes() > 1 << 30 {
        sink.error(
            t.span.clone(),
            &t.path,
            None,
            format!(
                "heaps of {} bytes are too large (at most 1 GiB)",
                c.heap_bytes()
            ),
            Some("fewer channels or samples per heap".into()),
        );
    }
    c
}

fn parse_spead_send(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> SpeadSendSpec {
    let flavour = flavour(t, sink);
    let source = t.string(sink, "source");
    let fsim = match &source {
        None => true,
        Some((s, _)) if s == "fsim" => true,
        Some((s, _)) if s == "heaps" => false,
        Some((s, span)) => {
            sink.error(
                span.clone(),
                &t.path,
                Some("source"),
                format!("unknown source `{s}`"),
                Some("\"fsim\" (the F-engine simulator) or \"heaps\" (generic heaps)".into()),
            );
            true
        }
    };
    let (source, count, wrong) = if fsim {
        let g = fsim_geometry(t, sink, flavour);
        let count = t
            .int(sink, "timestamps", 1..i64::MAX)
            .map(|(c, _)| c as u64);
        (
            SendSource::Fsim(g),
            count,
            ["heaps", "heap_size", "packet_size"].as_slice(),
        )
    } else {
        let heap_size = t.size(sink, "heap_size").map_or(65536, |(s, _)| s as usize);
        let packet_size = t
            .int(sink, "packet_size", 64..65508)
            .map_or(1472, |(s, _)| s as usize);
        if heap_size as u64 > flavour.max_value() || heap_size > 1 << 30 {
            sink.error(
                t.span_of("heap_size"),
                &t.path,
                Some("heap_size"),
                format!("heaps of {heap_size} bytes are too large"),
                Some("at most 1 GiB (and what the flavour's heap addresses reach)".into()),
            );
        }
        let count = t.int(sink, "heaps", 1..i64::MAX).map(|(c, _)| c as u64);
        (
            SendSource::Heaps {
                heap_size,
                packet_size,
            },
            count,
            [
                "timestamps",
                "n_ants",
                "n_channels_total",
                "n_channels_per_stream",
                "n_samples_per_channel",
                "n_pols",
                "packet_payload",
            ]
            .as_slice(),
        )
    };
    for k in wrong {
        if t.has(k) {
            t.mark_used(k);
            let (this, other) = if fsim {
                ("source = \"fsim\"", "source = \"heaps\"")
            } else {
                ("source = \"heaps\"", "source = \"fsim\"")
            };
            sink.error(
                t.span_of(k),
                &t.path,
                Some(k),
                format!("`{k}` is not a key of {this}"),
                Some(format!("`{k}` belongs with {other}; the simulator counts `timestamps` (n_ants heaps each), generic heaps count `heaps`")),
            );
        }
    }
    let rate_bps = match t.rate(sink, "rate") {
        None => None,
        Some((Rate::L1Bps(b) | Rate::L2Bps(b), span)) => {
            if b <= 0.0 {
                sink.error(
                    span,
                    &t.path,
                    Some("rate"),
                    "the rate must be above zero",
                    None,
                );
            }
            Some(b)
        }
        Some((Rate::Pps(p), span)) => {
            if p <= 0.0 {
                sink.error(
                    span,
                    &t.path,
                    Some("rate"),
                    "the rate must be above zero",
                    None,
                );
            }
            let max = match &source {
                SendSource::Fsim(c) => c.max_packet(),
                SendSource::Heaps { packet_size, .. } => *packet_size,
            };
            Some(p * max as f64 * 8.0)
        }
        Some((Rate::Percent(_), span)) => {
            sink.error(span, &t.path, Some("rate"), "a SPEAD sender's rate is in bits/s of SPEAD packets (or packets/s), not a percentage", Some("\"10 Gbps\" or \"100 kpps\"".into()));
            None
        }
    };
    SpeadSendSpec {
        source,
        flavour,
        count,
        rate_bps,
        end_of_stream: t.boolean(sink, "end_of_stream").unwrap_or(true),
        encap: encap(t, sink),
        burst: burst(t, sink),
    }
}

fn parse_spead_recv(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> SpeadRecvSpec {
    let flavour = flavour(t, sink);
    let fsim = fsim_geometry(t, sink, flavour);
    let hpf = t
        .int(sink, "heaps_per_fengine_per_chunk", 1..1 << 20)
        .map_or(32, |(v, _)| v as u64);
    let max_chunks = t
        .int(sink, "max_chunks", 1..1025)
        .map_or(4, |(v, _)| v as usize);
    let n_chunks = match t.int(sink, "n_chunks", 1..4097) {
        Some((n, span)) if (n as usize) < max_chunks => {
            sink.error(
                span,
                &t.path,
                Some("n_chunks"),
                format!("{n} chunks cannot fill a window of max_chunks = {max_chunks}: the receiver would wait for ever"),
                Some(format!("n_chunks of at least {max_chunks} (more lets the sink hold chunks while the window fills)")),
            );
            max_chunks
        }
        Some((n, _)) => n as usize,
        None => (2 * max_chunks).max(8),
    };
    let max_heaps = t
        .int(sink, "max_heaps", 1..1 << 20)
        .map_or((fsim.n_ants * 2).max(4), |(v, _)| v as usize);
    let chunk_bytes = fsim.heap_bytes() as u64 * fsim.n_ants as u64 * hpf;
    if chunk_bytes * n_chunks as u64 > 64 << 30 {
        sink.error(
            t.span.clone(),
            &t.path,
            None,
            format!("{n_chunks} chunks of {chunk_bytes} bytes exceed 64 GiB"),
            Some("fewer `n_chunks` or a smaller `heaps_per_fengine_per_chunk`".into()),
        );
    }
    SpeadRecvSpec {
        fsim,
        heaps_per_fengine_per_chunk: hpf,
        max_chunks,
        n_chunks,
        max_heaps,
        encap: encap(t, sink),
        idle_timeout: t.duration(sink, "idle_timeout"),
        burst: burst(t, sink),
        copy: t
            .choice(
                sink,
                "copy",
                "copy mode",
                &[("stream", CopyMode::Stream), ("plain", CopyMode::Plain)],
                "\"stream\" (non-temporal stores) or \"plain\"",
            )
            .unwrap_or(CopyMode::Stream),
    }
}

fn parse_chunk_sink(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ChunkSinkSpec {
    let from = t
        .required_string(
            sink,
            "from",
            "the name of the spead_recv stage whose chunks this sink consumes",
        )
        .map_or(String::new(), |x| x.0);
    let dir = t.string(sink, "dir");
    let mode = match t.string(sink, "mode") {
        None => ChunkSinkMode::Discard,
        Some((m, span)) => {
            match m.as_str() {
                "discard" => ChunkSinkMode::Discard,
                "check" => ChunkSinkMode::Check,
                "write" => {
                    match &dir {
                        Some((d, _)) => ChunkSinkMode::Write(PathBuf::from(d)),
                        None => {
                            sink.error(span, &t.path, Some("mode"), "mode = \"write\" needs `dir`", Some("dir = \"chunks/\", where chunk_<id>.raw and chunk_<id>.json go".into()));
                            ChunkSinkMode::Discard
                        }
                    }
                }
                _ => {
                    sink.error(
                        span,
                        &t.path,
                        Some("mode"),
                        format!("unknown chunk sink mode `{m}`"),
                        Some("\"discard\", \"check\" or \"write\"".into()),
                    );
                    ChunkSinkMode::Discard
                }
            }
        }
    };
    if let (Some((_, span)), false) = (&dir, matches!(mode, ChunkSinkMode::Write(_))) {
        sink.error(
            span.clone(),
            &t.path,
            Some("dir"),
            "`dir` is for mode = \"write\"",
            None,
        );
    }
    ChunkSinkSpec {
        from,
        mode,
        keep_wrong: t
            .int(sink, "keep_wrong", 0..1 << 20)
            .map_or(16, |(k, _)| k as usize),
    }
}

/// A spanned TOML value as a plain one (for readers written against `toml::Value`).
fn to_value(v: &DeValue<'_>) -> toml::Value {
    match v {
        DeValue::String(s) => toml::Value::String(s.to_string()),
        DeValue::Integer(_) => {
            as_int(v).map_or(toml::Value::String(String::new()), toml::Value::Integer)
        }
        DeValue::Float(f) => f.as_str().replace('_', "").parse().map_or(
            toml::Value::String(f.as_str().to_string()),
            toml::Value::Float,
        ),
        DeValue::Boolean(b) => toml::Value::Boolean(*b),
        DeValue::Datetime(d) => toml::Value::String(d.to_string()),
        DeValue::Array(a) => toml::Value::Array(a.iter().map(|x| to_value(x.get_ref())).collect()),
        DeValue::Table(t) => toml::Value::Table(
            t.iter()
                .map(|(k, x)| (k.get_ref().to_string(), to_value(x.get_ref())))
                .collect(),
        ),
    }
}

fn mac(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str, default: [u8; 6]) -> [u8; 6] {
    let Some((s, span)) = t.string(sink, key) else {
        return default;
    };
    let parts: Vec<Option<u8>> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect();
    if parts.len() == 6 && parts.iter().all(Option::is_some) {
        let mut m = [0u8; 6];
        for (d, p) in m.iter_mut().zip(parts) {
            *d = p.unwrap_or(0);
        }
        return m;
    }
    sink.error(
        span,
        &t.path,
        Some(key),
        format!("`{s}` is not a MAC address"),
        Some("six hex bytes like \"02:00:00:00:00:01\"".into()),
    );
    default
}

fn range<T>(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
    parse: fn(&str) -> Result<T, String>,
    default: T,
) -> T {
    let text = match t.raw(key) {
        Some(DeValue::Integer(_)) => t.int(sink, key, 0..65536).map(|(i, _)| i.to_string()),
        _ => t.string(sink, key).map(|x| x.0),
    };
    let Some(text) = text else { return default };
    match parse(&text) {
        Ok(v) => v,
        Err(e) => {
            sink.error(t.span_of(key), &t.path, Some(key), e, None);
            default
        }
    }
}

fn parse_generator(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> GeneratorSpec {
    let d = FrameSpec::default();
    let frame_span = t.span_of("frame");
    let sizes = match t.raw("frame") {
        Some(DeValue::String(s)) if s == "imix" => {
            t.mark_used("frame");
            match t.string(sink, "imix") {
                None => Sizes::default_imix(),
                Some((text, span)) => match parse_imix(&text) {
                    Ok(v) => Sizes::Imix(v),
                    Err(e) => {
                        sink.error(
                            span,
                            &t.path,
                            Some("imix"),
                            e,
                            Some("size:weight pairs like \"64:7,570:4,1518:1\"".into()),
                        );
                        Sizes::default_imix()
                    }
                },
            }
        }
        Some(DeValue::String(s)) => {
            t.mark_used("frame");
            sink.error(
                frame_span,
                &t.path,
                Some("frame"),
                format!("`{s}` is not a frame size"),
                Some(format!(
                    "a size in bytes from {MIN_FRAME} to {MAX_FRAME}, or \"imix\""
                )),
            );
            Sizes::Fixed(64)
        }
        _ => Sizes::Fixed(
            t.int(sink, "frame", MIN_FRAME as i64..MAX_FRAME as i64 + 1)
                .map_or(64, |(f, _)| f as usize),
        ),
    };
    if !matches!(sizes, Sizes::Imix(_)) && t.has("imix") {
        sink.error(
            t.span_of("imix"),
            &t.path,
            Some("imix"),
            "`imix` needs `frame = \"imix\"`",
            None,
        );
        t.mark_used("imix");
    }
    let order = t
        .choice(
            sink,
            "flows",
            "flow order",
            &[
                ("round-robin", FlowOrder::RoundRobin),
                ("random", FlowOrder::Random),
            ],
            "\"round-robin\" or \"random\"",
        )
        .unwrap_or(FlowOrder::RoundRobin);
    let (src_ip, dst_ip, sizes) = address_family(t, sink, sizes);
    let frames = FrameSpec {
        src_mac: mac(t, sink, "src_mac", d.src_mac),
        dst_mac: mac(t, sink, "dst_mac", d.dst_mac),
        src_ip,
        dst_ip,
        src_port: range(t, sink, "src_port", PortRange::parse, d.src_port),
        dst_port: range(t, sink, "dst_port", PortRange::parse, d.dst_port),
        order,
        sizes,
        seed: t
            .int(sink, "seed", 0..i64::MAX)
            .map_or(1, |(s, _)| s as u64),
    };
    GeneratorSpec {
        frames,
        stream: t.int(sink, "stream", 0..256).map_or(0, |(s, _)| s as u16),
        rate: t.rate(sink, "rate").map(|x| x.0),
        rate_pps: None,
        count: t.int(sink, "count", 1..i64::MAX).map(|(c, _)| c as u64),
        burst: burst(t, sink),
        share: t.float(sink, "share", 1e-9, 1e9).unwrap_or(1.0),
        max_lag: t
            .duration(sink, "max_lag")
            .unwrap_or(crate::traffic::generator::DEFAULT_MAX_LAG),
    }
}

/// The generator's addresses and the family of its frames: `ip = "v4"` or
/// `"v6"` when given, else the family of the addresses given (IPv4 by
/// default). Addresses of the other family are errors at their key; IPv6
/// frames need [`MIN_FRAME_V6`] bytes for the stamp, and take that size (or
/// the IMIX 84:7,570:4,1518:1) by default.
fn address_family(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    sizes: Sizes,
) -> (AddrRange, AddrRange, Sizes) {
    let d = FrameSpec::default();
    let ip = t.choice(
        sink,
        "ip",
        "address family",
        &[
            ("v4", false),
            ("4", false),
            ("ipv4", false),
            ("v6", true),
            ("6", true),
            ("ipv6", true),
        ],
        "\"v4\" or \"v6\"",
    );
    let src = t
        .has("src_ip")
        .then(|| range(t, sink, "src_ip", AddrRange::parse, d.src_ip));
    let dst = t
        .has("dst_ip")
        .then(|| range(t, sink, "dst_ip", AddrRange::parse, d.dst_ip));
    let v6 = ip.unwrap_or_else(|| [src, dst].iter().flatten().any(AddrRange::is_v6));
    let family = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
    for (key, r) in [("src_ip", src), ("dst_ip", dst)] {
        if let Some(r) = r.filter(|r| r.is_v6() != v6) {
            let why = if ip.is_some() {
                format!("`ip = \"{}\"`", if v6 { "v6" } else { "v4" })
            } else {
                "the other address".into()
            };
            sink.error(
                t.span_of(key),
                &t.path,
                Some(key),
                format!(
                    "`{key}` is {} but the frames are {} ({why}): a frame has one address family",
                    family(r.is_v6()),
                    family(v6)
                ),
                None,
            );
        }
    }
    let (dsrc, ddst) = if v6 {
        (AddrRange::v6(DEFAULT_SRC_V6), AddrRange::v6(DEFAULT_DST_V6))
    } else {
        (d.src_ip, d.dst_ip)
    };
    let mut sizes = sizes;
    if v6 {
        let too_small = |s: usize| s < MIN_FRAME_V6;
        let hint = Some(format!(
            "IPv6 frames from {MIN_FRAME_V6} to {MAX_FRAME} bytes (FCS included): {MIN_FRAME_V6} holds the 62 bytes of Ethernet/IPv6/UDP headers, the 18-byte stamp and the FCS"
        ));
        match &sizes {
            Sizes::Fixed(_) if !t.has("frame") => sizes = Sizes::Fixed(MIN_FRAME_V6),
            Sizes::Fixed(f) if too_small(*f) => sink.error(
                t.span_of("frame"),
                &t.path,
                Some("frame"),
                format!("a {f}-byte frame cannot carry IPv6/UDP and the stamp"),
                hint,
            ),
            Sizes::Imix(_) if !t.has("imix") => {
                sizes = Sizes::Imix(vec![(MIN_FRAME_V6, 7), (570, 4), (1518, 1)])
            }
            Sizes::Imix(v) => {
                if let Some((f, _)) = v.iter().find(|x| too_small(x.0)) {
                    sink.error(
                        t.span_of("imix"),
                        &t.path,
                        Some("imix"),
                        format!("a {f}-byte frame cannot carry IPv6/UDP and the stamp"),
                        hint,
                    );
                }
            }
            Sizes::Fixed(_) => {}
        }
    }
    (src.unwrap_or(dsrc), dst.unwrap_or(ddst), sizes)
}

/// Parses `"64:7,570:4,1518:1"`.
pub(crate) fn parse_imix(text: &str) -> Result<Vec<(usize, u32)>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (size, weight) = part
            .split_once(':')
            .ok_or_else(|| format!("`{part}` is not size:weight"))?;
        let size: usize = size
            .trim()
            .parse()
            .map_err(|_| format!("`{size}` is not a frame size"))?;
        let weight: u32 = weight
            .trim()
            .parse()
            .map_err(|_| format!("`{weight}` is not a whole weight"))?;
        if !(MIN_FRAME..=MAX_FRAME).contains(&size) {
            return Err(format!(
                "frame size {size} is outside {MIN_FRAME}..={MAX_FRAME}"
            ));
        }
        if weight > 1000 {
            return Err(format!("weight {weight} is above 1000"));
        }
        out.push((size, weight));
    }
    if out.iter().map(|x| x.1).sum::<u32>() == 0 {
        return Err("the IMIX weights sum to 0".into());
    }
    Ok(out.into_iter().filter(|x| x.1 > 0).collect())
}

fn parse_lcores(
    sink: &mut Sink<'_>,
    t: &mut Table<'_, '_>,
    pin: bool,
    cores: &[usize],
) -> Vec<usize> {
    let span = t.span_of("lcores");
    let bad = |sink: &mut Sink<'_>, msg: String| {
        sink.error(
            span.clone(),
            "pipeline",
            Some("lcores"),
            msg,
            Some("a core list like \"0-1,3\", a core id, or an array of core ids".into()),
        );
        vec![0]
    };
    t.mark_used("lcores");
    let list = match t.raw("lcores") {
        Some(DeValue::String(s)) => match parse_core_list(s) {
            Ok(l) => l,
            Err(e) => return bad(sink, e.to_string()),
        },
        Some(DeValue::Integer(_)) => match t.raw("lcores").and_then(as_int) {
            Some(i @ 0..=4095) => vec![i as usize],
            _ => return bad(sink, "a core id must be from 0 to 4095".into()),
        },
        Some(DeValue::Array(a)) => {
            let ids: Option<Vec<usize>> = a
                .iter()
                .map(|v| {
                    as_int(v.get_ref())
                        .filter(|i| (0..4096).contains(i))
                        .map(|i| i as usize)
                })
                .collect();
            match ids {
                Some(mut l) if !l.is_empty() => {
                    l.sort_unstable();
                    l.dedup();
                    l
                }
                _ => {
                    return bad(
                        sink,
                        "every element must be a core id from 0 to 4095".into(),
                    )
                }
            }
        }
        Some(_) => return bad(sink, "expected a core list".into()),
        None => vec![cores.first().copied().unwrap_or(0)],
    };
    if pin {
        let missing: Vec<usize> = list
            .iter()
            .copied()
            .filter(|c| !cores.contains(c))
            .collect();
        if !missing.is_empty() {
            sink.error(
                span,
                &t.path,
                Some("lcores"),
                format!(
                    "lcore(s) {missing:?} are not on this machine, which has {} core(s) available to this process: {cores:?}",
                    cores.len()
                ),
                Some(format!(
                    "cores from {cores:?}; or set `pin = false` to run the lcores as unpinned threads (they then share the cores)"
                )),
            );
        }
    }
    list
}

/// Parses a whole file into a [`Pipeline`], or every problem found.
pub(crate) fn parse(path: &Path, src: &str, cores: &[usize]) -> Result<Pipeline, Diagnostics> {
    let mut sink = Sink::new(path, src);
    let root = match DeTable::parse(src) {
        Ok(r) => r,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let msg = e.message().to_string();
            sink.error(
                span,
                "",
                None,
                format!("this is not valid TOML: {msg}"),
                None,
            );
            return Err(Diagnostics(sink.diags));
        }
    };
    let root = root.get_ref();
    for (key, _) in root.iter() {
        if !TOP_KEYS.contains(&key.get_ref().as_ref()) {
            let hint = suggest(key.get_ref(), TOP_KEYS)
                .map(|s| format!(" (did you mean `{s}`?)"))
                .unwrap_or_default();
            sink.error(
                key.span(),
                "",
                Some(key.get_ref()),
                format!("unknown section{hint}"),
                Some("[pipeline], [pool], [port.NAME], [ring.NAME], [stage.NAME]".into()),
            );
        }
    }
    let stem = path
        .file_stem()
        .map_or("pipeline".into(), |s| s.to_string_lossy().into_owned());
    let empty = DeTable::default();
    let (pspan, ptable) = section(&mut sink, root, "pipeline").unwrap_or((0..0, &empty));
    let mut t = Table::new("pipeline", pspan, ptable);
    let name = t.string(&mut sink, "name").map_or(stem, |x| x.0);
    let pin = t.boolean(&mut sink, "pin").unwrap_or(true);
    let lcores = parse_lcores(&mut sink, &mut t, pin, cores);
    t.finish(&mut sink, "[pipeline]", &["name", "lcores", "pin"]);

    let mut pool = PoolConfig::default();
    if let Some((span, map)) = section(&mut sink, root, "pool") {
        let mut t = Table::new("pool", span, map);
        if let Some((n, _)) = t.int(&mut sink, "buffers", 64..1 << 26) {
            pool.count = n as u32;
        }
        if let Some((s, span)) = t.size(&mut sink, "size") {
            if !(256..=65536 + 128).contains(&s) {
                sink.error(
                    span,
                    "pool",
                    Some("size"),
                    format!("{s} bytes is out of range"),
                    Some("from 256 to 65664 bytes per buffer, headroom included".into()),
                );
            }
            pool.buf_size = s as u32;
        }
        if let Some((h, _)) = t.int(&mut sink, "headroom", 0..1025) {
            pool.headroom = h as u16;
        }
        let span = t.span_of("hugepages");
        if t.has("hugepages") {
            pool.hugepages = match map.get("hugepages").map(|v| v.get_ref()) {
                Some(DeValue::Boolean(true)) => HugepageMode::Required,
                Some(DeValue::Boolean(false)) => HugepageMode::Off,
                Some(DeValue::String(s)) if s == "auto" => HugepageMode::Auto,
                _ => {
                    sink.error(
                        span,
                        "pool",
                        Some("hugepages"),
                        "expected true, false or \"auto\"",
                        None,
                    );
                    HugepageMode::Off
                }
            };
            t.mark_used("hugepages");
        }
        t.finish(
            &mut sink,
            "[pool]",
            &["buffers", "size", "headroom", "hugepages"],
        );
    }

    let mut eal = Vec::new();
    if let Some((span, map)) = section(&mut sink, root, "eal") {
        let mut t = Table::new("eal", span.clone(), map);
        if !cfg!(feature = "dpdk") {
            sink.error(span, "eal", None, "[eal] is for dpdk ports, which this build does not have (build with `--features dpdk`)", None);
        }
        t.mark_used("args");
        match t.raw("args") {
            Some(DeValue::Array(a)) if a.iter().all(|v| matches!(v.get_ref(), DeValue::String(_))) => {
                eal = a.iter().filter_map(|v| match v.get_ref() { DeValue::String(s) => Some(s.to_string()), _ => None }).collect();
            }
            Some(_) => sink.error(t.span_of("args"), "eal", Some("args"), "expected an array of strings", Some("EAL arguments as strings, like [\"--no-huge\", \"-m\", \"512\", \"--vdev=net_null0\"]".into())),
            None => {}
        }
        t.finish(&mut sink, "[eal]", &["args"]);
    }
    let ports: Vec<PortSpec> = named(&mut sink, root, "port")
        .into_iter()
        .filter_map(|(n, s, m)| parse_port(&mut sink, &n, s, m))
        .collect();
    let mut rings = Vec::new();
    for (name, span, map) in named(&mut sink, root, "ring") {
        let mut t = Table::new(format!("ring.{name}"), span.clone(), map);
        let size = if t.has("size") {
            ring_size(&mut t, &mut sink, "size")
        } else {
            Some(1024)
        };
        t.finish(&mut sink, "a ring", &["size"]);
        if let Some(size) = size {
            rings.push(RingSpec { name, size, span });
        }
    }
    let stages: Vec<StageSpec> = named(&mut sink, root, "stage")
        .into_iter()
        .filter_map(|(n, s, m)| parse_stage(&mut sink, &n, s, m, &lcores))
        .collect();
    if stages.is_empty() && sink.diags.is_empty() {
        sink.error(
            0..0,
            "",
            None,
            "the pipeline has no stage",
            Some("at least one [stage.NAME] with a `kind`".into()),
        );
    }
    if !sink.diags.is_empty() {
        return Err(Diagnostics(sink.diags));
    }
    Ok(Pipeline {
        name,
        file: path.to_path_buf(),
        lcores,
        pin,
        pool,
        eal,
        ports,
        rings,
        stages,
    })
}
