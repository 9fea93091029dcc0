//! Pipelines as plain values: parse a TOML file, validate it completely, plan
//! it (Snabb's configuration model). The runtime builds what the plan says.
//!
//! ```toml
//! [pipeline]
//! name = "quickstart"
//! lcores = "0-1"          # DPDK-style core list
//!
//! [port.wire]
//! kind = "mem"
//! capacity = "2 Mpps"
//!
//! [stage.src]
//! kind = "source"
//! lcore = 1
//! tx = "wire"
//! rate = "1 Mpps"
//!
//! [stage.rx]
//! kind = "sink"
//! lcore = 0
//! rx = "wire"
//! ```
//!
//! A stage's `rx` and `tx` name a port or a `[ring.NAME]` (a bounded SPSC link
//! between two stages, possibly on two lcores).

pub mod build;
mod diag;
mod host_part;
mod plan;
pub mod reference;
pub mod replica;
mod schema;
mod table;

use std::path::{Path, PathBuf};

pub use diag::{Diagnostic, Diagnostics};
pub use plan::{Plan, PlannedLcore, PortUse, RingUse};
pub use schema::{
    port_kinds, reliable_endpoint, sections, stage_kinds, AnalyzerSpec, ForwardConfig,
    GeneratorSpec, HostClock, HostSpec, Key, KindDoc, MessageEnd, NeighSpec, PoolSpec, PortKind,
    PortSpec, RingSpec, SinkConfig, SourceConfig, StageKind, StageSpec, TrialLoad, UdpBinding,
};

use crate::buf::PoolConfig;

/// A parsed and validated pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// Its name (`[pipeline] name`, or the file's stem).
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// The cores the pipeline may use.
    pub lcores: Vec<usize>,
    /// Whether lcores are pinned to their cores.
    pub pin: bool,
    /// The packet buffer pool.
    pub pool: PoolConfig,
    /// EAL arguments (`[eal] args`), for pipelines with dpdk ports.
    pub eal: Vec<String>,
    /// Ports, in file order.
    pub ports: Vec<PortSpec>,
    /// Rings, in file order.
    pub rings: Vec<RingSpec>,
    /// Stages, in file order (which is their polling order on an lcore).
    pub stages: Vec<StageSpec>,
    /// Hosts of a multi-host run (`[host.NAME]`), in file order; empty for one host.
    pub hosts: Vec<HostSpec>,
}

/// A pipeline file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read pipeline file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    /// The file has problems, all listed.
    #[error("{0}")]
    Invalid(Diagnostics),
}

/// Reads, parses and validates a pipeline file, then plans it.
pub fn load(path: &Path) -> Result<Plan, LoadError> {
    let src = std::fs::read_to_string(path).map_err(|e| LoadError::Read(path.to_path_buf(), e))?;
    load_str(path, &src)
}

/// As [`load`], from text (`path` is used in messages).
pub fn load_str(path: &Path, src: &str) -> Result<Plan, LoadError> {
    let cores = available_cores();
    let pipeline = schema::parse(path, src, &cores).map_err(LoadError::Invalid)?;
    plan::plan(pipeline, src, &cores).map_err(LoadError::Invalid)
}

/// As [`load`], every generator sending `sizes` instead of the frame sizes
/// its file gives (`linerate suite`'s frame sizes): the plan checks them as
/// it checks the file's (pool buffers, a dpdk port's mbufs), and IPv6
/// frames must hold their headers and the stamp. The message names the
/// generator, the port or the size.
pub fn load_with_frames(
    path: &Path,
    sizes: &crate::traffic::template::Sizes,
) -> Result<Plan, String> {
    use crate::traffic::template::{Sizes, MIN_FRAME_V6};
    let src = std::fs::read_to_string(path)
        .map_err(|e| LoadError::Read(path.to_path_buf(), e).to_string())?;
    let cores = available_cores();
    let mut pipeline =
        schema::parse(path, &src, &cores).map_err(|d| LoadError::Invalid(d).to_string())?;
    for stage in &mut pipeline.stages {
        let StageKind::Generator(g) = &mut stage.kind else {
            continue;
        };
        let mut mine = sizes.clone();
        if g.frames.is_v6() {
            if let Sizes::Imix(v) = &mut mine {
                for s in v.iter_mut().filter(|s| s.0 < MIN_FRAME_V6) {
                    s.0 = MIN_FRAME_V6;
                }
            } else if mine.max() < MIN_FRAME_V6 {
                return Err(format!(
                    "generator {}: a {}-byte frame cannot carry IPv6/UDP and the stamp (IPv6 frames need at least {MIN_FRAME_V6} bytes)",
                    stage.name,
                    mine.max()
                ));
            }
        }
        g.frames.sizes = mine;
    }
    plan::plan(pipeline, &src, &cores).map_err(|d| LoadError::Invalid(d).to_string())
}

/// The line rate (L1 bits/s) of the port the plan's first generator sends
/// on, when the port knows it (`line_rate`).
pub fn generator_line_rate(plan: &Plan) -> Option<f64> {
    let p = &plan.pipeline;
    let tx = p
        .stages
        .iter()
        .find(|s| matches!(s.kind, StageKind::Generator(_)))?
        .tx
        .as_deref()?;
    let base = tx.split(':').next().unwrap_or(tx);
    p.ports
        .iter()
        .find(|x| x.name == base)?
        .kind
        .line_rate_bps()
}

/// The cores this process may run on.
pub fn available_cores() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids
}
