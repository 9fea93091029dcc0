//! The file schema: sections, their keys, and what each kind of port and stage
//! accepts. Parsing goes on after an error so every problem is reported.
//!
//! Each kind of port and stage is one file here: its keys (name, type,
//! default, meaning: see [`Key`]), how it reads them, how the plan describes
//! it, its checks against the pipeline it sits in, whether and how it splits
//! into replicas, and how it is built into a running port or stage (see
//! [`PortConfig`] and [`StageConfig`]). Its settings struct lives beside the
//! code it configures (a port's in `port/`, a stage's beside its stage). The
//! registry ([`port_kinds!`] and [`stage_kinds!`] below) lists the kinds and
//! declares their modules: a new kind is its own file plus one line there.
//!
//! A section's unknown keys are the keys present that its reader never asked
//! for; the "valid:" line and the "did you mean" come from its [`Key`] table.

// The kinds' modules are declared by the registry below.
mod common;
mod encap;
mod host;
mod neigh;
mod sections;
mod spead;

use std::path::Path;

use toml::de::{DeTable, DeValue};

use super::build::{BuildError, LinkCtx, PortCtx, StageCtx};
use super::diag::{suggest, Diagnostics, Sink};
use super::replica::Refusal;
pub use super::table::{Key, KindDoc};
use super::table::{Span, Table};
use super::Pipeline;
use crate::buf::PoolConfig;
use crate::port::{OpenPort, PortError};
use crate::runtime::Stage;
use crate::units::{si, Rate};
pub use sections::RingSpec;

pub use crate::runtime::basic::{ForwardConfig, SinkConfig, SourceConfig};
pub use crate::traffic::analyzer::AnalyzerSpec;
pub use crate::traffic::generator::GeneratorSpec;
pub use host::{HostClock, HostSpec};
pub use neigh::{NeighSpec, UdpBinding};
pub use reliable::reliable_endpoint;

/// The pool section, as written.
pub type PoolSpec = PoolConfig;

/// A kind of port: its documentation and its reader, which returns `None` after
/// reporting a problem that leaves nothing to check (its keys then go unchecked).
pub(crate) struct PortDef {
    pub(crate) doc: KindDoc,
    pub(crate) parse: fn(&mut Table<'_, '_>, &mut Sink<'_>) -> Option<PortKind>,
}

impl PortDef {
    /// A port kind named `name` ("mem"), `what` in messages ("a mem port"),
    /// with its one-line `doc`, its keys and its reader.
    pub(crate) const fn new(
        name: &'static str,
        what: &'static str,
        doc: &'static str,
        keys: &'static [Key],
        parse: fn(&mut Table<'_, '_>, &mut Sink<'_>) -> Option<PortKind>,
    ) -> PortDef {
        PortDef {
            doc: KindDoc {
                name,
                what,
                doc,
                keys,
                more_keys: &[],
            },
            parse,
        }
    }
}

/// What a stage reader returns: the kind, its rx and its tx.
pub(crate) type ParsedStage = (StageKind, Option<String>, Option<String>);

/// A kind of stage: its documentation, its reader, and the key whose span
/// stands for its input in the plan's messages.
pub(crate) struct StageDef {
    pub(crate) doc: KindDoc,
    pub(crate) rx_key: &'static str,
    pub(crate) parse: fn(&mut Table<'_, '_>, &mut Sink<'_>) -> ParsedStage,
}

impl StageDef {
    /// A stage kind named `name` ("source"), `what` in messages ("a source
    /// stage"), with its one-line `doc`, its keys and its reader; its input's
    /// key is `rx`.
    pub(crate) const fn new(
        name: &'static str,
        what: &'static str,
        doc: &'static str,
        keys: &'static [Key],
        parse: fn(&mut Table<'_, '_>, &mut Sink<'_>) -> ParsedStage,
    ) -> StageDef {
        StageDef {
            doc: KindDoc {
                name,
                what,
                doc,
                keys,
                more_keys: &[],
            },
            rx_key: "rx",
            parse,
        }
    }

    /// The same, with `key` standing for its input in the plan's messages.
    pub(crate) const fn rx_key(self, key: &'static str) -> StageDef {
        StageDef {
            rx_key: key,
            ..self
        }
    }

    /// The same, with the keys of a part read by a reader of its own.
    pub(crate) const fn more_keys(self, keys: &'static [Key]) -> StageDef {
        StageDef {
            doc: KindDoc {
                more_keys: keys,
                ..self.doc
            },
            ..self
        }
    }
}

/// What each port kind's settings do beyond parsing (implemented in the
/// kind's file).
pub(crate) trait PortConfig {
    /// The kind's name in files.
    fn name(&self) -> &'static str;
    /// One line for `linerate check`.
    fn describe(&self) -> String;
    /// Opens the port.
    fn open(&self, cx: &PortCtx<'_>) -> Result<OpenPort, PortError>;
    /// Queues in a direction ("rx" or "tx").
    fn queues(&self, _dir: &str) -> u16 {
        1
    }
    /// Whether the port can receive, and if not, why.
    fn rx_missing(&self) -> Option<&'static str> {
        None
    }
    /// Whether the port can transmit, and if not, why.
    fn tx_missing(&self) -> Option<&'static str> {
        None
    }
    /// The port's line rate in L1 bits/s, when known.
    fn line_rate_bps(&self) -> Option<f64> {
        None
    }
    /// Why the port cannot give each replica of a stage its own queue, if
    /// it cannot.
    fn cannot_split(&self) -> Option<&'static str> {
        None
    }
    /// The key that sets the port's queues in a direction, for messages.
    fn queues_key(&self, dir: &str) -> String {
        format!("{dir}_queues")
    }
    /// What its packets are, for a stage that passes them on unchanged;
    /// `None` for a port that carries whatever it is given.
    fn carries(&self) -> Option<&'static str> {
        Some("Ethernet frames")
    }
    /// Whether what is sent on it is received from it (an in-process wire):
    /// the planner follows such a port when it looks for cycles.
    fn is_wire(&self) -> bool {
        false
    }
    /// The bytes a frame may have in one of the port's own buffers, when the
    /// port brings its own (a dpdk port's mbufs).
    fn data_room(&self) -> Option<usize> {
        None
    }
    /// Whether opening the port needs DPDK's EAL. Only the EAL's start asks,
    /// and it is built with the `dpdk` feature alone.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    fn uses_eal(&self) -> bool {
        false
    }
}

/// What each stage kind's settings do beyond parsing (implemented in the
/// kind's file).
pub(crate) trait StageConfig {
    /// The kind's name in files.
    fn name(&self) -> &'static str;
    /// One line for `linerate check`.
    fn describe(&self) -> String;
    /// Runs for every stage before any is built: makes the links between
    /// stages that are not rings (a chunk sink's to its receiver).
    fn link(&self, _cx: &mut LinkCtx<'_>) -> Result<(), BuildError> {
        Ok(())
    }
    /// Builds the running stage.
    fn build(&self, cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError>;

    /// Checks the stage against the pipeline it sits in (its ports, the
    /// pool, other stages) once replicas are expanded and rx/tx resolved;
    /// may resolve settings that depend on them (a rate in % of line rate).
    fn check(&mut self, _cx: &mut CheckCtx<'_, '_>) {}
    /// Whether the stage can run as `n` replicas, and if not, why.
    fn replicate(&self, _n: usize) -> Result<(), Refusal> {
        Ok(())
    }
    /// What replica `k` of `n` changes in its copy of the settings (its share
    /// of a count or rate, its slice of flows or antennas).
    fn split(&mut self, _k: usize, _n: usize) {}
    /// Whether the stage's links run both ways on purpose (a reliable
    /// channel's data and ACKs): the cycle check passes over a link between
    /// two such stages.
    fn feeds_back(&self) -> bool {
        false
    }
    /// The stream id the stage stamps on what it sends, if any.
    fn stream(&self) -> Option<u16> {
        None
    }
    /// The stream ids the stage tracks (`0..n`), if it tracks streams.
    fn streams_tracked(&self) -> Option<usize> {
        None
    }
    /// What the stage offers a trial's rate, if a trial drives it.
    fn trial_load(&self) -> Option<TrialLoad> {
        None
    }
    /// Which end of stamped messages the stage is, if either.
    fn message_end(&self) -> Option<MessageEnd> {
        None
    }
    /// The stage whose output this one takes through a link of its own, not
    /// a ring (a chunk sink's `from`).
    fn takes_from(&self) -> Option<&str> {
        None
    }

    /// The next hop whose MAC address the builder resolves on the stage's
    /// `tx` port before any stage runs (a generator's `gateway`); the result
    /// reaches [`StageConfig::build`] as `StageCtx::next_hop`.
    fn gateway(&self) -> Option<std::net::IpAddr> {
        None
    }
}

// What a kind sees when it checks its stage against the pipeline it sits in
// (`CheckCtx`), and the answers kinds give the planner about themselves.

/// What a stage offers a trial: its weight in the trial's aggregate rate and
/// its average frame size (for turning a bit rate into packets/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialLoad {
    /// Its share of the trial's rate (shares are normalised over stages).
    pub share: f64,
    /// Its average frame, bytes (FCS included).
    pub avg_frame: f64,
}

/// Which end of a stamped message a stage is, for telling which latencies
/// compare two hosts' clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageEnd {
    /// It stamps the messages it sends.
    Sends,
    /// It delivers messages with their latency from the stamp.
    Receives,
}

/// The pipeline as one stage's check sees it: every stage and port, the pool
/// room, and where its errors go (they name the stage's section).
pub(crate) struct CheckCtx<'a, 's> {
    /// The stage being checked (its kind as it was before this check).
    pub(crate) stage: &'a StageSpec,
    /// Every stage, replicas expanded, in file order.
    pub(crate) stages: &'a [StageSpec],
    /// Every port.
    pub(crate) ports: &'a [PortSpec],
    /// Bytes of a pool buffer after its headroom.
    pub(crate) room: usize,
    pub(crate) sink: &'a mut Sink<'s>,
}

impl CheckCtx<'_, '_> {
    /// The stage's section, as messages name it.
    pub(crate) fn section(&self) -> String {
        format!("stage.{}", self.stage.name)
    }

    /// An error at the stage's section, about `key`.
    pub(crate) fn error(&mut self, key: Option<&str>, message: String, help: Option<String>) {
        let span = self.stage.span.clone();
        self.error_at(span, key, message, help);
    }

    /// An error at `span`, in the stage's section.
    pub(crate) fn error_at(
        &mut self,
        span: Span,
        key: Option<&str>,
        message: String,
        help: Option<String>,
    ) {
        let section = self.section();
        self.sink.error(span, &section, key, message, help);
    }

    /// The stages before this one, in file order.
    pub(crate) fn earlier(&self) -> &[StageSpec] {
        let i = self
            .stages
            .iter()
            .position(|s| s.name == self.stage.name)
            .unwrap_or(0);
        &self.stages[..i]
    }

    /// The stage named `name`, or the first replica of a replicated stage
    /// of that name.
    pub(crate) fn stage_named(&self, name: &str) -> Option<&StageSpec> {
        self.stages
            .iter()
            .find(|x| x.name == name || x.replica.as_ref().is_some_and(|r| r.of == name))
    }

    /// The port an end (`rx` or `tx`, `nic` or `nic:1`) names, if a port.
    pub(crate) fn port(&self, end: &Option<String>) -> Option<&PortSpec> {
        let name = end.as_deref()?;
        let base = name.split(':').next().unwrap_or(name);
        self.ports.iter().find(|x| x.name == base)
    }

    /// A rate in packets/s at `avg_frame`-byte frames, checked against the
    /// `tx` port's line rate; a replica gets its share of the stage's rate.
    pub(crate) fn resolve_rate(&mut self, rate: Rate, avg_frame: f64) -> Option<f64> {
        let line = self
            .port(&self.stage.tx)
            .and_then(|p| p.kind.line_rate_bps());
        let pps = match rate.to_pps(avg_frame, line) {
            Ok(pps) if pps > 0.0 && pps.is_finite() => pps,
            Ok(_) => {
                self.error(Some("rate"), "the rate must be above zero".into(), None);
                return None;
            }
            Err(e) => {
                self.error(Some("rate"), e.to_string(), None);
                return None;
            }
        };
        if let Some(line) = line {
            let max = line / ((avg_frame + 20.0) * 8.0);
            if pps > max * 1.000_001 {
                self.error(
                    Some("rate"),
                    format!(
                        "{}pps exceeds the port's line rate ({}pps at {avg_frame:.0}-byte frames)",
                        si(pps),
                        si(max)
                    ),
                    None,
                );
            }
        }
        Some(match &self.stage.replica {
            Some(r) => pps / r.count as f64,
            None => pps,
        })
    }

    /// A frame (FCS included) must fit a pool buffer after its headroom.
    pub(crate) fn frame_fits(&mut self, frame: usize) {
        let room = self.room;
        if frame - 4 > room {
            self.error(
                Some("frame"),
                format!(
                    "a {frame}-byte frame does not fit a pool buffer ({room} bytes after headroom)"
                ),
                Some("a larger `size` in [pool]".into()),
            );
        }
    }
}

/// Replica `k`'s share of a count of `total` split `n` ways: the first
/// `total % n` replicas take one more.
pub(crate) fn count_share(total: u64, k: usize, n: usize) -> u64 {
    total / n as u64 + u64::from((k as u64) < total % n as u64)
}

/// The port registry: `Variant(Config) = module, "doc";`, one line per kind, in
/// the order "valid:" lists them; it declares each kind's module. A `#[cfg]` hides the variant, not the kind:
/// its module still reads `kind = "..."` and says what the build lacks.
macro_rules! port_kinds {
    ($( $(#[cfg($cfg:meta)])? $variant:ident($config:ty) = $module:ident, $doc:literal; )*) => {
        /// The kinds of port.
        #[derive(Debug, Clone)]
        pub enum PortKind {
            $( #[doc = $doc] $(#[cfg($cfg)])? $variant($config), )*
        }

        impl PortKind {
            pub(crate) fn config(&self) -> &dyn PortConfig {
                match self {
                    $( $(#[cfg($cfg)])? PortKind::$variant(c) => c, )*
                }
            }
        }

        $( mod $module; )*

        const PORTS: &[&PortDef] = &[$( &$module::DEF, )*];
    };
}

/// The stage registry: `Variant(Spec) = module [DEF, ...], "doc";`, one line
/// per kind (a variant may have several names, like reliable_tx and
/// reliable_rx), in the order "valid:" lists them; it declares each kind's
/// module.
macro_rules! stage_kinds {
    ($( $variant:ident($spec:ty) = $module:ident [$($def:ident),+], $doc:literal; )*) => {
        /// The kinds of stage.
        #[derive(Debug, Clone)]
        pub enum StageKind {
            $( #[doc = $doc] $variant($spec), )*
        }

        impl StageKind {
            pub(crate) fn config(&self) -> &dyn StageConfig {
                match self {
                    $( StageKind::$variant(c) => c, )*
                }
            }

            pub(crate) fn config_mut(&mut self) -> &mut dyn StageConfig {
                match self {
                    $( StageKind::$variant(c) => c, )*
                }
            }
        }

        $( mod $module; )*

        const STAGES: &[&StageDef] = &[$( $( &$module::$def, )+ )*];
    };
}

port_kinds! {
    Mem(crate::port::mem::MemConfig) = mem, "In-process wire with impairments.";
    Udp(crate::port::udp::UdpConfig) = udp, "Kernel UDP socket.";
    Pcap(crate::port::pcap::PcapConfig) = pcap, "Capture file.";
    #[cfg(feature = "dpdk")]
    Dpdk(crate::port::dpdk::DpdkConfig) = dpdk, "A DPDK device.";
    #[cfg(feature = "ibverbs")]
    Ibverbs(crate::port::ibverbs::IbverbsConfig) = ibverbs, "ibverbs raw packet queues.";
}

stage_kinds! {
    Source(SourceConfig) = source [DEF],
        "Emits a fixed template packet, as fast as possible or at a rate.";
    Forward(ForwardConfig) = forward [DEF], "Moves packets from rx to tx.";
    Impair(crate::runtime::impair::ImpairSpec) = impair [DEF],
        "Moves packets from rx to tx through seeded impairments and jitter.";
    Sink(SinkConfig) = sink [DEF], "Counts and frees packets.";
    Generator(GeneratorSpec) = generator [DEF], "Stamped traffic for trials.";
    Analyzer(AnalyzerSpec) = analyzer [DEF], "Per-stream counts and latency of stamped traffic.";
    Reliable(crate::reliable::stage::ReliableSpec) = reliable [TX_DEF, RX_DEF],
        "One side of a reliable channel (`reliable_tx` or `reliable_rx`).";
    SpeadSend(crate::spead::stage::SpeadSendSpec) = spead_send [DEF],
        "Sends SPEAD heaps (the F-engine simulator's or generic ones).";
    SpeadRecv(crate::spead::stage::SpeadRecvSpec) = spead_recv [DEF],
        "Reassembles SPEAD heaps into chunks (katgpucbf's placement).";
    ChunkSink(crate::spead::stage::ChunkSinkSpec) = chunk_sink [DEF],
        "Consumes a `spead_recv` stage's chunks.";
    DropEvery(drop_every::DropEveryConfig) = drop_every [DEF], "Drops every n-th packet.";
}

/// Every kind of port, in registry order.
pub fn port_kinds() -> impl Iterator<Item = &'static KindDoc> {
    PORTS.iter().map(|d| &d.doc)
}

/// Every kind of stage, in registry order.
pub fn stage_kinds() -> impl Iterator<Item = &'static KindDoc> {
    STAGES.iter().map(|d| &d.doc)
}

/// The sections that are not ports or stages: `[pipeline]`, `[pool]`,
/// `[ring.NAME]`, `[eal]`, `[host.NAME]`.
pub fn sections() -> &'static [KindDoc] {
    sections::SECTIONS
}

/// A port as declared.
#[derive(Debug, Clone)]
pub struct PortSpec {
    /// Its name.
    pub name: String,
    /// Its kind and configuration.
    pub kind: PortKind,
    /// The host it is opened on (`host`; the only host when there is one).
    pub host: Option<String>,
    pub(crate) host_span: Span,
    /// The addresses it owns and answers ARP/NDP for (`ip = [...]`), on the
    /// kinds that declare the key.
    pub neigh: Option<NeighSpec>,
}

impl PortKind {
    /// The kind's name in files.
    pub fn name(&self) -> &'static str {
        self.config().name()
    }

    /// Queues in a direction ("rx" or "tx").
    pub(crate) fn queues(&self, dir: &str) -> u16 {
        self.config().queues(dir)
    }

    /// Whether the port can receive, and if not, why.
    pub(crate) fn rx_missing(&self) -> Option<&'static str> {
        self.config().rx_missing()
    }

    /// Whether the port can transmit, and if not, why.
    pub(crate) fn tx_missing(&self) -> Option<&'static str> {
        self.config().tx_missing()
    }

    /// The port's line rate in L1 bits/s, when known.
    pub fn line_rate_bps(&self) -> Option<f64> {
        self.config().line_rate_bps()
    }

    /// One line for `linerate check`.
    pub(crate) fn describe(&self) -> String {
        self.config().describe()
    }

    /// Opens the port.
    pub(crate) fn open(&self, cx: &PortCtx<'_>) -> Result<OpenPort, PortError> {
        self.config().open(cx)
    }
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
    /// The host it runs on (`host`; the only host when there is one).
    pub host: Option<String>,
    pub(crate) span: Span,
    pub(crate) lcores_span: Span,
    pub(crate) rx_span: Span,
    pub(crate) tx_span: Span,
}

impl StageKind {
    /// The kind's name in files.
    pub fn name(&self) -> &'static str {
        self.config().name()
    }

    /// One line for `linerate check`.
    pub(crate) fn describe(&self) -> String {
        self.config().describe()
    }
}

const TOP_KEYS: &[&str] = &["pipeline", "pool", "port", "ring", "stage", "eal", "host"];

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

/// The names of registered kinds, for "valid:" lines.
fn names<'a>(docs: impl Iterator<Item = &'a KindDoc>) -> Vec<&'static str> {
    docs.map(|d| d.name).collect()
}

fn parse_port(sink: &mut Sink<'_>, name: &str, span: Span, map: &DeTable<'_>) -> Option<PortSpec> {
    let mut t = Table::new(format!("port.{name}"), span, map);
    let valid = names(port_kinds());
    let (kind, kind_span) = t.required_string(sink, "kind", &valid.join(", "))?;
    let Some(def) = PORTS.iter().find(|d| d.doc.name == kind) else {
        common::unknown_kind(sink, kind_span, &t.path, "port", &kind, &valid);
        return None;
    };
    let host_span = t.span_of("host");
    // `host` is common to every kind (not in their key tables), so it is
    // read only when present.
    let host = if t.has("host") {
        t.string(sink, "host").map(|h| h.0)
    } else {
        None
    };
    let kind = (def.parse)(&mut t, sink)?;
    // A kind whose ports can own addresses declares `ip` among its keys.
    let neigh = def
        .doc
        .keys
        .iter()
        .any(|k| k.name == neigh::IP.name)
        .then(|| neigh::parse(&mut t, sink))
        .flatten();
    t.finish(sink, def.doc.what, def.doc.keys);
    Some(PortSpec {
        name: name.to_string(),
        kind,
        host,
        host_span,
        neigh,
    })
}

fn parse_stage(
    sink: &mut Sink<'_>,
    name: &str,
    span: Span,
    map: &DeTable<'_>,
    lcores: &[usize],
) -> Option<StageSpec> {
    let mut t = Table::new(format!("stage.{name}"), span.clone(), map);
    let valid = names(stage_kinds());
    let (kind, kind_span) = t.required_string(sink, "kind", &valid.join(", "))?;
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
    let Some(def) = STAGES.iter().find(|d| d.doc.name == kind) else {
        common::unknown_kind(sink, kind_span, &t.path, "stage", &kind, &valid);
        return None;
    };
    let rx_span = t.span_of(def.rx_key);
    let tx_span = t.span_of("tx");
    // `host` is common to every kind (not in their key tables), so it is
    // read only when present.
    let host = if t.has("host") {
        t.string(sink, "host").map(|h| h.0)
    } else {
        None
    };
    let (kind, rx, tx) = (def.parse)(&mut t, sink);
    let keys: Vec<Key> = def
        .doc
        .keys
        .iter()
        .chain(def.doc.more_keys)
        .copied()
        .collect();
    t.finish(sink, def.doc.what, &keys);
    Some(StageSpec {
        name: name.to_string(),
        lcore,
        rx,
        tx,
        kind,
        replicas,
        replica: None,
        host,
        span,
        lcores_span,
        rx_span,
        tx_span,
    })
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
                Some(
                    "[pipeline], [pool], [port.NAME], [ring.NAME], [stage.NAME], [host.NAME]"
                        .into(),
                ),
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
    let lcores = sections::parse_lcores(&mut sink, &mut t, pin, cores);
    t.finish(&mut sink, "[pipeline]", sections::PIPELINE_KEYS);
    let pool = section(&mut sink, root, "pool").map_or_else(PoolConfig::default, |(span, map)| {
        sections::parse_pool(&mut sink, span, map)
    });
    let eal = section(&mut sink, root, "eal").map_or_else(Vec::new, |(span, map)| {
        sections::parse_eal(&mut sink, span, map)
    });

    let ports: Vec<PortSpec> = named(&mut sink, root, "port")
        .into_iter()
        .filter_map(|(n, s, m)| parse_port(&mut sink, &n, s, m))
        .collect();
    let rings = named(&mut sink, root, "ring")
        .into_iter()
        .filter_map(|(n, s, m)| sections::parse_ring(&mut sink, n, s, m))
        .collect();
    let mut ports = ports;
    let mut stages: Vec<StageSpec> = named(&mut sink, root, "stage")
        .into_iter()
        .filter_map(|(n, s, m)| parse_stage(&mut sink, &n, s, m, &lcores))
        .collect();
    let hosts: Vec<HostSpec> = named(&mut sink, root, "host")
        .into_iter()
        .map(|(n, s, m)| host::parse_host(&mut sink, &n, s, m))
        .collect();
    host::bind(&mut sink, &hosts, &mut ports, &mut stages);
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
        hosts,
    })
}

#[cfg(test)]
mod test {
    use super::*;

    /// Every kind's keys are unique, documented, and list `kind` first.
    #[test]
    fn registry_keys_are_documented() {
        let mut names = Vec::new();
        for d in port_kinds().chain(stage_kinds()) {
            assert!(
                !names.contains(&d.name),
                "kind `{}` registered twice",
                d.name
            );
            names.push(d.name);
            assert_eq!(d.keys.first().map(|k| k.name), Some("kind"), "{}", d.name);
        }
        for d in port_kinds().chain(stage_kinds()).chain(sections()) {
            let mut seen = Vec::new();
            for k in d.keys.iter().chain(d.more_keys) {
                assert!(
                    !seen.contains(&k.name),
                    "{}: key `{}` twice",
                    d.name,
                    k.name
                );
                seen.push(k.name);
                assert!(!k.doc.is_empty() && !k.ty.is_empty() && !k.default.is_empty());
            }
        }
    }
}
