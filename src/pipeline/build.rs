//! Builds what a plan describes: the pool, the ports, the rings and the
//! stages, grouped by lcore, with a handle on every counter.
//!
//! This driver names no kind of port or stage: each kind opens or builds
//! itself from its file in `pipeline/schema/`, through [`PortCtx`],
//! [`LinkCtx`] and [`StageCtx`]. What it produces ([`Built`]) is the
//! runtime's, which knows no plan.

use std::any::Any;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::{Pipeline, Plan, StageSpec};
use crate::buf::counter::CacheAligned;
use crate::buf::{ring, Consumer, Packet, Pool, Producer, RingStatsHandle};
use crate::neigh::bind as neigh_bind;
use crate::port::{PortError, PortStats, RxQueue, TxQueue};
use crate::runtime::basic::{Input, Output};
pub use crate::runtime::build::{BuildError, Built, Controls, Mode};
use crate::runtime::{LcoreSpec, StageCounters, StageSlot, StageValues, ValueDef};

/// The message of an internal inconsistency: the plan promised something the
/// build did not make.
fn not_built(what: &str, name: &str) -> BuildError {
    BuildError::Runtime(format!(
        "internal: the plan's {what} `{name}` was not built"
    ))
}

/// What a port kind needs to open its port.
pub struct PortCtx<'a> {
    /// The port's name.
    pub name: &'a str,
    /// The pipeline's buffer pool.
    pub pool: &'a Pool,
    /// The EAL, when the pipeline has dpdk ports.
    #[cfg(feature = "dpdk")]
    pub eal: Option<&'static crate::sys::dpdk::Eal>,
}

/// Ends of links between stages that are not rings, by the name of the stage
/// that takes them.
type Links = BTreeMap<String, Box<dyn Any>>;

/// What a stage kind's `link` sees: every stage, and where to put the ends
/// of the links it makes (and their counters).
pub struct LinkCtx<'a> {
    /// The stage being linked.
    pub spec: &'a StageSpec,
    /// The whole pipeline.
    pub pipeline: &'a Pipeline,
    links: &'a mut Links,
    /// Ring counters by name; a link's rings go here.
    pub rings: &'a mut Vec<(String, RingStatsHandle)>,
}

impl LinkCtx<'_> {
    /// Leaves `end` for the stage named `stage` to take when it is built.
    pub fn put_link<T: Any>(&mut self, stage: &str, end: T) {
        self.links.insert(stage.to_string(), Box::new(end));
    }

    /// The error for something the plan names that is not there.
    pub fn missing(&self, what: &str, name: &str) -> BuildError {
        not_built(what, name)
    }
}

/// What a stage kind's `build` gets: its spec, its input and output (as the
/// plan resolved them), the pool, its counters, and what the run reads back.
pub struct StageCtx<'a> {
    /// The stage as declared.
    pub spec: &'a StageSpec,
    file: &'a Path,
    rx: Option<Input>,
    tx: Option<Output>,
    /// The pipeline's buffer pool.
    pub pool: &'a Pool,
    /// The stage's counters.
    pub counters: Arc<CacheAligned<StageCounters>>,
    /// How generators start.
    pub mode: Mode,
    links: &'a mut Links,
    /// Where the stage leaves handles for the driver of the run (a
    /// generator's and an analyzer's trial controls).
    pub controls: &'a mut Controls,
    /// The port the stage transmits to, as `linerate check` describes it
    /// (`port `u` (udp, bind ..., connect ...)`), for errors that name the peer.
    pub tx_port: Option<String>,
    /// The resolved MAC address of the stage's gateway and its port's own
    /// (a generator's `gateway`, resolved before any stage runs).
    pub next_hop: Option<Resolved>,
    values: &'a mut Vec<(String, Arc<StageValues>)>,
}

impl StageCtx<'_> {
    fn unplanned(&self) -> BuildError {
        BuildError::Runtime(format!(
            "internal: stage `{}` was planned without its rx/tx",
            self.spec.name
        ))
    }

    /// The stage's input (its `rx`).
    pub fn input(&mut self) -> Result<Input, BuildError> {
        self.rx.take().ok_or_else(|| self.unplanned())
    }

    /// The stage's output (its `tx`).
    pub fn output(&mut self) -> Result<Output, BuildError> {
        self.tx.take().ok_or_else(|| self.unplanned())
    }

    /// The link end another stage's `link` left for this one.
    pub fn take_link<T: Any>(&mut self) -> Option<T> {
        let end = self.links.remove(&self.spec.name)?;
        end.downcast().ok().map(|b| *b)
    }

    /// A problem with the stage's settings that only building found
    /// (exit status 2), named by file and section.
    pub fn input_error(&self, e: impl std::fmt::Display) -> BuildError {
        BuildError::Input(format!(
            "{}: [stage.{}]: {e}",
            self.file.display(),
            self.spec.name
        ))
    }

    /// The error for something the plan names that is not there.
    pub fn missing(&self, what: &str, name: &str) -> BuildError {
        not_built(what, name)
    }

    /// Values the stage will publish beyond its counters, served live by
    /// `--metrics` (the stage keeps the handle and sets them from its lcore).
    pub fn publish(&mut self, defs: Vec<ValueDef>) -> Arc<StageValues> {
        let v = Arc::new(StageValues::new(defs));
        self.values.push((self.spec.name.clone(), v.clone()));
        v
    }
}

/// The name a stage uses for queue `q` of a port: `nic`, `nic:1`, ...
fn side_name(port: &str, q: usize) -> String {
    if q == 0 {
        port.to_string()
    } else {
        format!("{port}:{q}")
    }
}

/// Builds a plan for `linerate run`.
pub fn build(plan: &Plan) -> Result<Built, BuildError> {
    build_with(plan, Mode::FreeRun)
}

/// The ports, opened: their queues by side name (`nic`, `nic:1`), their
/// counters, and the shared state of those that own addresses.
struct Opened {
    rx: BTreeMap<String, Box<dyn RxQueue>>,
    tx: BTreeMap<String, Box<dyn TxQueue>>,
    stats: Vec<(String, Arc<dyn PortStats>)>,
    neigh: NeighPorts,
    warnings: Vec<String>,
}

/// Builds a plan, with the stages a driver controls started or idle.
pub fn build_with(plan: &Plan, mode: Mode) -> Result<Built, BuildError> {
    let p = &plan.pipeline;
    let pool = Pool::new(&p.pool).map_err(|e| match BuildError::from(e) {
        BuildError::Input(m) => BuildError::Input(format!("{}: [pool]: {m}", p.file.display())),
        other => other,
    })?;
    #[cfg(feature = "dpdk")]
    let eal = init_eal(plan)?;
    let mut opened = open_ports(
        p,
        &pool,
        #[cfg(feature = "dpdk")]
        eal,
    )?;
    let resolved = resolve_gateways(plan, &opened.neigh, &mut opened.rx, &mut opened.tx)?;
    let now = crate::time::monotonic_now();
    for name in opened.neigh.keys() {
        // The announcements (gratuitous ARP, unsolicited NA) go out now.
        if let Some(tx) = opened.tx.get_mut(name) {
            tx.flush(now);
        }
    }
    let mut ends = Ends {
        producers: BTreeMap::new(),
        consumers: BTreeMap::new(),
        rx: std::mem::take(&mut opened.rx),
        tx: std::mem::take(&mut opened.tx),
    };
    let mut rings = Vec::new();
    for r in &plan.rings {
        let (prod, cons) = ring::<Packet>(r.size);
        rings.push((r.name.clone(), prod.stats_handle()));
        ends.producers.insert(r.name.clone(), prod);
        ends.consumers.insert(r.name.clone(), cons);
    }
    // Links between stages that are not rings (a chunk sink's), made before
    // any stage is built so each end can be taken by its stage.
    let mut links = Links::new();
    for s in &p.stages {
        s.kind.config().link(&mut LinkCtx {
            spec: s,
            pipeline: p,
            links: &mut links,
            rings: &mut rings,
        })?;
    }
    let mut out = Built {
        name: p.name.clone(),
        lcores: Vec::new(),
        ports: opened.stats,
        rings,
        stages: Vec::new(),
        pool: pool.clone(),
        warnings: opened.warnings,
        controls: Controls::default(),
        replicas: BTreeMap::new(),
        values: Vec::new(),
    };
    let mut slots = build_stages(plan, mode, &mut ends, &mut links, &resolved, &mut out)?;
    // Transmit queue 0 of a port with addresses that no stage took: its
    // receive side answers through it.
    for (name, shared) in &opened.neigh {
        if let Some(tx) = ends.tx.remove(name) {
            shared.adopt_tx(tx);
        }
    }
    #[cfg(feature = "dpdk")]
    let on_start = lcore_hook(eal, p.pin);
    #[cfg(not(feature = "dpdk"))]
    let on_start = None;
    out.lcores = plan
        .lcores
        .iter()
        .map(|l| LcoreSpec {
            core: l.core,
            pin: p.pin,
            stages: l.stages.iter().filter_map(|n| slots.remove(n)).collect(),
            on_start: on_start.clone(),
        })
        .collect();
    Ok(out)
}

/// Opens every port of the pipeline; a port that owns addresses answers
/// ARP/NDP and, with `udp_connect`, carries UDP datagrams.
fn open_ports(
    p: &Pipeline,
    pool: &Pool,
    #[cfg(feature = "dpdk")] eal: Option<&'static crate::sys::dpdk::Eal>,
) -> Result<Opened, BuildError> {
    let mut o = Opened {
        rx: BTreeMap::new(),
        tx: BTreeMap::new(),
        stats: Vec::new(),
        neigh: BTreeMap::new(),
        warnings: Vec::new(),
    };
    for spec in &p.ports {
        let cx = PortCtx {
            name: &spec.name,
            pool,
            #[cfg(feature = "dpdk")]
            eal,
        };
        let opened = spec.kind.open(&cx).map_err(|e| {
            let file = p.file.display();
            match e {
                PortError::Input(m) => {
                    BuildError::Input(format!("{file}: [port.{}]: {m}", spec.name))
                }
                PortError::Runtime(m) => {
                    BuildError::Runtime(format!("{file}: [port.{}]: {m}", spec.name))
                }
            }
        })?;
        let opened = match &spec.neigh {
            Some(n) => {
                let mac = n.mac.or_else(|| opened.stats.mac());
                let (port, shared) = neigh_bind::wrap(
                    opened,
                    crate::neigh::Config {
                        mac: mac.unwrap_or(DEFAULT_PORT_MAC),
                        addrs: n.addrs.clone(),
                    },
                    pool.clone(),
                );
                let port = match n.udp {
                    Some(udp) => carry_datagrams(port, &shared, udp).map_err(|e| {
                        BuildError::Runtime(format!(
                            "{}: [port.{}]: {e} (`resolve_timeout` = \"{:?}\" is how long the peer is waited for)",
                            p.file.display(),
                            spec.name,
                            udp.resolve_timeout
                        ))
                    })?,
                    None => port,
                };
                o.neigh.insert(spec.name.clone(), shared);
                port
            }
            None => opened,
        };
        o.warnings.extend(
            opened
                .warnings
                .into_iter()
                .map(|w| format!("port `{}`: {w}", spec.name)),
        );
        for (q, rx) in opened.rx.into_iter().enumerate() {
            o.rx.insert(side_name(&spec.name, q), rx);
        }
        for (q, tx) in opened.tx.into_iter().enumerate() {
            o.tx.insert(side_name(&spec.name, q), tx);
        }
        o.stats.push((spec.name.clone(), opened.stats));
    }
    Ok(o)
}

/// The ends stages take: port queues by side name and ring ends by ring name.
struct Ends {
    rx: BTreeMap<String, Box<dyn RxQueue>>,
    tx: BTreeMap<String, Box<dyn TxQueue>>,
    producers: BTreeMap<String, Producer<Packet>>,
    consumers: BTreeMap<String, Consumer<Packet>>,
}

impl Ends {
    fn input(&mut self, name: &str) -> Result<Input, BuildError> {
        let name = name.strip_suffix(":0").unwrap_or(name);
        if let Some(rx) = self.rx.remove(name) {
            return Ok(Input::Port(rx));
        }
        self.consumers
            .remove(name)
            .map(Input::Ring)
            .ok_or_else(|| not_built("input", name))
    }

    fn output(&mut self, name: &str) -> Result<Output, BuildError> {
        let name = name.strip_suffix(":0").unwrap_or(name);
        if let Some(tx) = self.tx.remove(name) {
            return Ok(Output::Port(tx));
        }
        self.producers
            .remove(name)
            .map(Output::Ring)
            .ok_or_else(|| not_built("output", name))
    }
}

/// Builds every stage with its ends, counters and links; records in `out`
/// what the run reads back. Returns the stages by name.
fn build_stages(
    plan: &Plan,
    mode: Mode,
    ends: &mut Ends,
    links: &mut Links,
    resolved: &BTreeMap<String, Resolved>,
    out: &mut Built,
) -> Result<BTreeMap<String, StageSlot>, BuildError> {
    let p = &plan.pipeline;
    let mut slots = BTreeMap::new();
    for s in &p.stages {
        if let Some(r) = &s.replica {
            out.replicas.insert(s.name.clone(), r.clone());
        }
        let counters = Arc::new(CacheAligned::<StageCounters>::default());
        let rx = s.rx.as_deref().map(|n| ends.input(n)).transpose()?;
        let tx = s.tx.as_deref().map(|n| ends.output(n)).transpose()?;
        let tx_port = s.tx.as_deref().and_then(|t| {
            p.ports
                .iter()
                .find(|q| q.name == t)
                .map(|q| format!("port `{}` ({})", q.name, q.kind.describe()))
        });
        let stage = s.kind.config().build(StageCtx {
            tx_port,
            spec: s,
            file: &p.file,
            rx,
            tx,
            pool: &out.pool,
            counters: counters.clone(),
            mode,
            links,
            controls: &mut out.controls,
            next_hop: resolved.get(&s.name).copied(),
            values: &mut out.values,
        })?;
        out.stages
            .push((s.name.clone(), s.kind.name(), s.lcore, counters.clone()));
        slots.insert(
            s.name.clone(),
            StageSlot {
                name: s.name.clone(),
                stage,
                counters,
            },
        );
    }
    Ok(slots)
}

/// The MAC address a port with addresses answers with when it names none and
/// its device has none of its own (a mem wire): the generator's default
/// `dst_mac`.
pub const DEFAULT_PORT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

type NeighPorts = BTreeMap<String, Arc<neigh_bind::NeighPort>>;

/// Makes a frame port that owns addresses carry UDP datagrams between
/// `udp.bind` and `udp.connect` ([`crate::port::encap`]): first resolves the
/// peer's MAC address through the port's queue 0 (answering the peer's own
/// requests meanwhile) for `udp.resolve_timeout` in all.
pub fn carry_datagrams(
    mut port: crate::port::OpenPort,
    shared: &neigh_bind::NeighPort,
    udp: super::UdpBinding,
) -> Result<crate::port::OpenPort, String> {
    let (Some(rx), Some(tx)) = (port.rx.first_mut(), port.tx.first_mut()) else {
        return Err("`udp_connect` needs the port to receive and transmit on its queue 0".into());
    };
    let peer_mac = neigh_bind::resolve(
        shared,
        rx.as_mut(),
        tx.as_mut(),
        std::net::IpAddr::V4(*udp.connect.ip()),
        std::net::IpAddr::V4(*udp.bind.ip()),
        neigh_bind::Lookup::Peer(udp.resolve_timeout),
    )?;
    Ok(crate::port::encap::wrap(
        port,
        crate::port::encap::Ends {
            mac: shared.config().mac,
            local: udp.bind,
            peer_mac,
            peer: udp.connect,
        },
    ))
}

/// A generator's resolved gateway MAC and its port's own MAC.
pub type Resolved = ([u8; 6], [u8; 6]);

/// Resolves every generator's `gateway` on its port, before any stage runs;
/// returns, by generator, the gateway's MAC and the port's own.
fn resolve_gateways(
    plan: &Plan,
    neigh_ports: &NeighPorts,
    rx_sides: &mut BTreeMap<String, Box<dyn RxQueue>>,
    tx_sides: &mut BTreeMap<String, Box<dyn TxQueue>>,
) -> Result<BTreeMap<String, Resolved>, BuildError> {
    let p = &plan.pipeline;
    let file = p.file.display();
    let mut out = BTreeMap::new();
    for s in &p.stages {
        let (Some(gw), Some(tx)) = (s.kind.config().gateway(), &s.tx) else {
            continue;
        };
        let tx = tx.strip_suffix(":0").unwrap_or(tx);
        let port = tx.split(':').next().unwrap_or(tx);
        let input = |m: String| BuildError::Input(format!("{file}: [stage.{}]: {m}", s.name));
        let Some(shared) = neigh_ports.get(port) else {
            return Err(input(format!(
                "`gateway` needs an address on port `{port}` to ask from: add `ip = [\"ADDRESS/PREFIX\"]` to [port.{port}] (the generator's `src_ip`, on the gateway's subnet)"
            )));
        };
        let config = shared.config();
        let source = config
            .addrs
            .iter()
            .find(|a| a.ip != gw && a.contains(gw))
            .or_else(|| {
                config
                    .addrs
                    .iter()
                    .find(|a| a.ip != gw && a.ip.is_ipv4() == gw.is_ipv4())
            })
            .map(|a| a.ip)
            .ok_or_else(|| {
                input(format!(
                    "port `{port}` has no {} address to ask for gateway {gw} from",
                    if gw.is_ipv4() { "IPv4" } else { "IPv6" }
                ))
            })?;
        let (Some(mut rxq), Some(mut txq)) = (rx_sides.remove(port), tx_sides.remove(tx)) else {
            return Err(input(format!(
                "`gateway` needs port `{port}` to receive and transmit on its queue 0"
            )));
        };
        let r = neigh_bind::resolve(
            shared,
            rxq.as_mut(),
            txq.as_mut(),
            gw,
            source,
            neigh_bind::Lookup::Gateway,
        );
        rx_sides.insert(port.to_string(), rxq);
        tx_sides.insert(tx.to_string(), txq);
        let mac = r.map_err(|e| {
            BuildError::Runtime(format!("{file}: [stage.{}]: port `{port}`: {e}", s.name))
        })?;
        out.insert(s.name.clone(), (mac, config.mac));
    }
    Ok(out)
}

/// Initialises the EAL when the pipeline has dpdk ports: the `[eal]` arguments
/// as given, plus a `--file-prefix` unique to this process unless one is set
/// (so two linerate processes never collide on shared runtime files). The
/// main thread's affinity is restored afterwards (the EAL pins it to its
/// first lcore, and threads spawned from it would inherit that).
#[cfg(feature = "dpdk")]
fn init_eal(plan: &Plan) -> Result<Option<&'static crate::sys::dpdk::Eal>, BuildError> {
    let p = &plan.pipeline;
    if !p.ports.iter().any(|x| x.kind.config().uses_eal()) {
        return Ok(None);
    }
    let mut args = p.eal.clone();
    if !args.iter().any(|a| a.starts_with("--file-prefix")) {
        args.push(format!("--file-prefix=linerate-{}", std::process::id()));
    }
    // Hugepage files unlinked as soon as they are mapped: however the process
    // ends (a second Ctrl-C or SIGTERM exits at once), none is left behind.
    // DPDK refuses the option beside --no-huge and --in-memory (which make no
    // files) and for secondary processes (which share the primary's).
    let conflicts = ["--no-huge", "--in-memory", "--huge-unlink", "--proc-type"];
    if !args
        .iter()
        .any(|a| conflicts.iter().any(|c| a.starts_with(c)))
    {
        args.push("--huge-unlink".into());
    }
    let cores = super::available_cores();
    let eal = crate::sys::dpdk::init(&args).map_err(|e| {
        BuildError::Input(format!(
            "{}: [eal]: the EAL did not start: {e}",
            p.file.display()
        ))
    })?;
    crate::sys::dpdk::eal::set_affinity(&cores);
    Ok(Some(eal))
}

/// What each lcore thread does first when DPDK is in use: register with the
/// EAL (so mempool per-lcore caches work on our threads) and, for unpinned
/// lcores, take back every core the process may use.
#[cfg(feature = "dpdk")]
fn lcore_hook(
    eal: Option<&'static crate::sys::dpdk::Eal>,
    pin: bool,
) -> Option<crate::runtime::LcoreHook> {
    let eal = eal?;
    let cores = super::available_cores();
    Some(Arc::new(move || {
        if !pin {
            crate::sys::dpdk::eal::set_affinity(&cores);
        }
        crate::sys::dpdk::eal::register_thread(eal)
            .map(|r| Box::new(r) as Box<dyn std::any::Any>)
            .map_err(|e| e.to_string())
    }))
}
