//! Builds what a plan describes: the pool, the ports, the rings and the
//! stages, grouped by lcore, with a handle on every counter.
//!
//! This driver names no kind of port or stage: each kind opens or builds
//! itself from its file in `pipeline/schema/`, through [`PortCtx`],
//! [`LinkCtx`] and [`StageCtx`].

use std::any::Any;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::buf::{ring, Packet, Pool, PoolError, RingStatsHandle};
use crate::neigh::bind as neigh_bind;
use crate::pipeline::{Pipeline, Plan, StageSpec};
use crate::port::{PortError, PortStats, RxQueue, TxQueue};

use super::basic::{Input, Output};
use super::{LcoreSpec, StageCounters, StageSlot, StageValues, ValueDef};
use crate::buf::counter::CacheAligned;
use crate::traffic::analyzer::AnaControl;
use crate::traffic::generator::GenControl;

/// Everything a run needs, built and not yet started.
pub struct Built {
    /// The pipeline's name.
    pub name: String,
    /// Lcores with their stages.
    pub lcores: Vec<LcoreSpec>,
    /// Port counters by name.
    pub ports: Vec<(String, Arc<dyn PortStats>)>,
    /// Ring counters by name.
    pub rings: Vec<(String, RingStatsHandle)>,
    /// Stage counters: (name, kind, lcore, counters).
    pub stages: Vec<(
        String,
        &'static str,
        usize,
        Arc<CacheAligned<StageCounters>>,
    )>,
    /// The buffer pool.
    pub pool: Pool,
    /// Things the user should know.
    pub warnings: Vec<String>,
    /// Generators: (name, control, share of a trial's rate).
    pub generators: Vec<(String, Arc<GenControl>, f64)>,
    /// Analyzers: (name, control).
    pub analyzers: Vec<(String, Arc<AnaControl>)>,
    /// Instances of replicated stages, by instance name.
    pub replicas: BTreeMap<String, crate::pipeline::replica::Replica>,
    /// The values stages publish beyond their counters, by stage (instance) name.
    pub values: Vec<(String, Arc<StageValues>)>,
}

/// How generators start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// At once, at their configured rate (`linerate run`).
    FreeRun,
    /// Idle until a trial starts them (`linerate trial`, `linerate search`).
    Trials,
}

/// A plan could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The user's configuration or environment is at fault (exit status 2).
    #[error("{0}")]
    Input(String),
    /// Something else failed (exit status 1).
    #[error("{0}")]
    Runtime(String),
}

impl From<PoolError> for BuildError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Map(..) => BuildError::Runtime(e.to_string()),
            _ => BuildError::Input(e.to_string()),
        }
    }
}

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
    /// Generators, for trials: (name, control, share).
    pub generators: &'a mut Vec<(String, Arc<GenControl>, f64)>,
    /// Analyzers, for trials: (name, control).
    pub analyzers: &'a mut Vec<(String, Arc<AnaControl>)>,
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

/// Builds a plan, with generators started or idle.
pub fn build_with(plan: &Plan, mode: Mode) -> Result<Built, BuildError> {
    let p = &plan.pipeline;
    let pool = Pool::new(&p.pool).map_err(|e| match BuildError::from(e) {
        BuildError::Input(m) => BuildError::Input(format!("{}: [pool]: {m}", p.file.display())),
        other => other,
    })?;
    let mut warnings = Vec::new();
    #[cfg(feature = "dpdk")]
    let eal = init_eal(plan)?;
    let mut rx_sides: BTreeMap<String, Box<dyn RxQueue>> = BTreeMap::new();
    let mut tx_sides: BTreeMap<String, Box<dyn TxQueue>> = BTreeMap::new();
    let mut ports = Vec::new();
    let mut neigh_ports = BTreeMap::new();
    for spec in &p.ports {
        let cx = PortCtx {
            name: &spec.name,
            pool: &pool,
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
                let (o, shared) = neigh_bind::wrap(
                    opened,
                    crate::neigh::Config {
                        mac: mac.unwrap_or(DEFAULT_PORT_MAC),
                        addrs: n.addrs.clone(),
                    },
                    pool.clone(),
                );
                let o = match n.udp {
                    Some(udp) => carry_datagrams(o, &shared, udp).map_err(|e| {
                        BuildError::Runtime(format!(
                            "{}: [port.{}]: {e} (`resolve_timeout` = \"{:?}\" is how long the peer is waited for)",
                            p.file.display(),
                            spec.name,
                            udp.resolve_timeout
                        ))
                    })?,
                    None => o,
                };
                neigh_ports.insert(spec.name.clone(), shared);
                o
            }
            None => opened,
        };
        warnings.extend(
            opened
                .warnings
                .into_iter()
                .map(|w| format!("port `{}`: {w}", spec.name)),
        );
        for (q, rx) in opened.rx.into_iter().enumerate() {
            rx_sides.insert(side_name(&spec.name, q), rx);
        }
        for (q, tx) in opened.tx.into_iter().enumerate() {
            tx_sides.insert(side_name(&spec.name, q), tx);
        }
        ports.push((spec.name.clone(), opened.stats));
    }
    let resolved = resolve_gateways(plan, &neigh_ports, &mut rx_sides, &mut tx_sides)?;
    let now = crate::time::monotonic_now();
    for name in neigh_ports.keys() {
        // The announcements (gratuitous ARP, unsolicited NA) go out now.
        if let Some(tx) = tx_sides.get_mut(name) {
            tx.flush(now);
        }
    }
    let mut producers = BTreeMap::new();
    let mut consumers = BTreeMap::new();
    let mut rings = Vec::new();
    for r in &plan.rings {
        let (prod, cons) = ring::<Packet>(r.size);
        rings.push((r.name.clone(), prod.stats_handle()));
        producers.insert(r.name.clone(), prod);
        consumers.insert(r.name.clone(), cons);
    }
    let missing = not_built;
    let mut input = |name: &str| -> Result<Input, BuildError> {
        let name = name.strip_suffix(":0").unwrap_or(name);
        if let Some(rx) = rx_sides.remove(name) {
            return Ok(Input::Port(rx));
        }
        consumers
            .remove(name)
            .map(Input::Ring)
            .ok_or_else(|| missing("input", name))
    };
    let mut output = |name: &str| -> Result<Output, BuildError> {
        let name = name.strip_suffix(":0").unwrap_or(name);
        if let Some(tx) = tx_sides.remove(name) {
            return Ok(Output::Port(tx));
        }
        producers
            .remove(name)
            .map(Output::Ring)
            .ok_or_else(|| missing("output", name))
    };
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
    let mut slots: BTreeMap<String, StageSlot> = BTreeMap::new();
    let mut stages = Vec::new();
    let mut generators = Vec::new();
    let mut analyzers = Vec::new();
    let mut replicas = BTreeMap::new();
    let mut values = Vec::new();
    for s in &p.stages {
        if let Some(r) = &s.replica {
            replicas.insert(s.name.clone(), r.clone());
        }
        let counters = Arc::new(CacheAligned::<StageCounters>::default());
        let rx = s.rx.as_deref().map(&mut input).transpose()?;
        let tx = s.tx.as_deref().map(&mut output).transpose()?;
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
            pool: &pool,
            counters: counters.clone(),
            mode,
            links: &mut links,
            generators: &mut generators,
            analyzers: &mut analyzers,
            next_hop: resolved.get(&s.name).copied(),
            values: &mut values,
        })?;
        stages.push((s.name.clone(), s.kind.name(), s.lcore, counters.clone()));
        slots.insert(
            s.name.clone(),
            StageSlot {
                name: s.name.clone(),
                stage,
                counters,
            },
        );
    }
    // Transmit queue 0 of a port with addresses that no stage took: its
    // receive side answers through it.
    for (name, shared) in &neigh_ports {
        if let Some(tx) = tx_sides.remove(name) {
            shared.adopt_tx(tx);
        }
    }
    #[cfg(feature = "dpdk")]
    let on_start = lcore_hook(eal, p.pin);
    #[cfg(not(feature = "dpdk"))]
    let on_start = None;
    let lcores = plan
        .lcores
        .iter()
        .map(|l| LcoreSpec {
            core: l.core,
            pin: p.pin,
            stages: l.stages.iter().filter_map(|n| slots.remove(n)).collect(),
            on_start: on_start.clone(),
        })
        .collect();
    Ok(Built {
        name: p.name.clone(),
        lcores,
        ports,
        rings,
        stages,
        pool,
        warnings,
        generators,
        analyzers,
        replicas,
        values,
    })
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
    udp: crate::pipeline::UdpBinding,
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
    if !p.ports.iter().any(|x| x.kind.name() == "dpdk") {
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
    let cores = crate::pipeline::available_cores();
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
fn lcore_hook(eal: Option<&'static crate::sys::dpdk::Eal>, pin: bool) -> Option<super::LcoreHook> {
    let eal = eal?;
    let cores = crate::pipeline::available_cores();
    Some(Arc::new(move || {
        if !pin {
            crate::sys::dpdk::eal::set_affinity(&cores);
        }
        crate::sys::dpdk::eal::register_thread(eal)
            .map(|r| Box::new(r) as Box<dyn std::any::Any>)
            .map_err(|e| e.to_string())
    }))
}
