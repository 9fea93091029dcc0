//! Builds what a plan describes: the pool, the ports, the rings and the
//! stages, grouped by lcore, with a handle on every counter.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::buf::{ring, Packet, Pool, PoolError, RingStatsHandle};
use crate::pipeline::{Plan, PortKind, StageKind};
use crate::port::{self, PortError, PortStats, RxQueue, TxQueue};

use super::basic::{udp_template, Forward, Input, Output, Sink, Source, SourcePacing};
use super::counter::CacheAligned;
use super::{LcoreSpec, Stage, StageCounters, StageSlot};
use crate::traffic::analyzer::{AnaControl, Analyzer};
use crate::traffic::generator::{GenConfig, GenControl, Generator};

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
    for spec in &p.ports {
        let opened = match &spec.kind {
            PortKind::Mem(c) => Ok(port::mem::open(c)),
            PortKind::Udp(c) => port::udp::open(c, &pool),
            PortKind::Pcap(c) => port::pcap::open(c, &pool),
            #[cfg(feature = "ibverbs")]
            PortKind::Ibverbs(c) => port::ibverbs::open(c, &pool),
            #[cfg(feature = "dpdk")]
            PortKind::Dpdk(c) => match eal {
                Some(eal) => port::dpdk::open(&spec.name, c, eal),
                None => Err(PortError::Runtime(
                    "internal: the EAL was not initialised".into(),
                )),
            },
        }
        .map_err(|e| {
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
    let mut producers = BTreeMap::new();
    let mut consumers = BTreeMap::new();
    let mut rings = Vec::new();
    for r in &plan.rings {
        let (prod, cons) = ring::<Packet>(r.size);
        rings.push((r.name.clone(), prod.stats_handle()));
        producers.insert(r.name.clone(), prod);
        consumers.insert(r.name.clone(), cons);
    }
    let missing = |what: &str, name: &str| {
        BuildError::Runtime(format!(
            "internal: the plan's {what} `{name}` was not built"
        ))
    };
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
    // Chunk links: each chunk sink and the spead_recv stage it names.
    let mut recv_ends = BTreeMap::new();
    let mut sink_ends = BTreeMap::new();
    for s in &p.stages {
        if let StageKind::ChunkSink(c) = &s.kind {
            let recv = p.stages.iter().find_map(|x| match &x.kind {
                StageKind::SpeadRecv(r) if x.name == c.from => Some(r),
                _ => None,
            });
            let recv = recv.ok_or_else(|| missing("spead_recv stage", &c.from))?;
            let (re, se, [chunks, free]) = crate::spead::stage::chunk_link(recv.n_chunks);
            rings.push((format!("{}.chunks", c.from), chunks));
            rings.push((format!("{}.free_chunks", c.from), free));
            recv_ends.insert(c.from.clone(), re);
            sink_ends.insert(s.name.clone(), (se, recv.clone()));
        }
    }
    let mut slots: BTreeMap<String, StageSlot> = BTreeMap::new();
    let mut stages = Vec::new();
    let mut generators = Vec::new();
    let mut analyzers = Vec::new();
    let mut replicas = BTreeMap::new();
    for s in &p.stages {
        if let Some(r) = &s.replica {
            replicas.insert(s.name.clone(), r.clone());
        }
        let counters = Arc::new(CacheAligned::<StageCounters>::default());
        let rx = s.rx.as_deref().map(&mut input).transpose()?;
        let tx = s.tx.as_deref().map(&mut output).transpose()?;
        let stage: Box<dyn Stage> = match (&s.kind, rx, tx) {
            (StageKind::Source(c), None, Some(out)) => Box::new(Source::new(
                out,
                pool.cache(),
                udp_template(c.frame),
                SourcePacing {
                    rate_pps: c.rate_pps,
                    count: c.count,
                    burst: c.burst,
                    max_lag: c.max_lag,
                },
                counters.clone(),
            )),
            (StageKind::Forward(c), Some(i), Some(out)) => {
                Box::new(Forward::new(i, out, c.burst, counters.clone()))
            }
            (StageKind::Reliable(r), Some(i), Some(out)) => {
                Box::new(crate::reliable::stage::ReliableStage::new(
                    r.clone(),
                    i,
                    out,
                    pool.cache(),
                    pool.cache(),
                    counters.clone(),
                ))
            }
            (StageKind::SpeadSend(c), None, Some(out)) => Box::new(
                crate::spead::stage::SpeadSend::new(c.clone(), out, pool.cache(), counters.clone())
                    .map_err(|e| {
                        BuildError::Input(format!("{}: [stage.{}]: {e}", p.file.display(), s.name))
                    })?,
            ),
            (StageKind::SpeadRecv(c), Some(i), None) => {
                Box::new(crate::spead::stage::SpeadRecv::new(
                    c.clone(),
                    i,
                    recv_ends.remove(&s.name),
                    pool.cache(),
                    counters.clone(),
                ))
            }
            (StageKind::ChunkSink(c), None, None) => {
                let (end, recv) = sink_ends
                    .remove(&s.name)
                    .ok_or_else(|| missing("chunk link of", &s.name))?;
                Box::new(
                    crate::spead::stage::ChunkSink::new(c.clone(), &recv, end, counters.clone())
                        .map_err(|e| {
                            BuildError::Input(format!(
                                "{}: [stage.{}]: {e}",
                                p.file.display(),
                                s.name
                            ))
                        })?,
                )
            }
            (StageKind::Sink(c), Some(i), None) => {
                Box::new(Sink::new(i, pool.cache(), c.burst, counters.clone()))
            }
            (StageKind::Generator(g), None, Some(out)) => {
                let control = Arc::new(GenControl::default());
                if mode == Mode::FreeRun {
                    control.start(1, g.rate_pps, None, g.count);
                }
                generators.push((s.name.clone(), control.clone(), g.share));
                let config = GenConfig {
                    frames: g.frames.clone(),
                    stream: g.stream,
                    burst: g.burst,
                    max_lag: g.max_lag,
                };
                let finite = mode == Mode::FreeRun && g.count.is_some();
                Box::new(Generator::new(
                    out,
                    pool.cache(),
                    config,
                    control,
                    counters.clone(),
                    finite,
                ))
            }
            (StageKind::Analyzer(a), Some(i), None) => {
                let control = Arc::new(AnaControl::default());
                if mode == Mode::FreeRun {
                    control.epoch.store(1, std::sync::atomic::Ordering::Relaxed);
                }
                analyzers.push((s.name.clone(), control.clone()));
                Box::new(Analyzer::new(
                    i,
                    pool.cache(),
                    a.latency,
                    a.streams,
                    a.burst,
                    control,
                    counters.clone(),
                ))
            }
            _ => {
                return Err(BuildError::Runtime(format!(
                    "internal: stage `{}` was planned without its rx/tx",
                    s.name
                )))
            }
        };
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
    })
}

/// Initialises the EAL when the pipeline has dpdk ports: the `[eal]` arguments
/// as given, plus a `--file-prefix` unique to this process unless one is set
/// (so two linerate processes never collide on shared runtime files). The
/// main thread's affinity is restored afterwards (the EAL pins it to its
/// first lcore, and threads spawned from it would inherit that).
#[cfg(feature = "dpdk")]
fn init_eal(plan: &Plan) -> Result<Option<&'static crate::sys::dpdk::Eal>, BuildError> {
    let p = &plan.pipeline;
    if !p.ports.iter().any(|x| matches!(x.kind, PortKind::Dpdk(_))) {
        return Ok(None);
    }
    let mut args = p.eal.clone();
    if !args.iter().any(|a| a.starts_with("--file-prefix")) {
        args.push(format!("--file-prefix=linerate-{}", std::process::id()));
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
