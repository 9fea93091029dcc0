//! What a build produces and how it fails: the lcores with their stages, a
//! handle on every counter, and the controls stages hand to whoever drives
//! the run. The builder that walks a plan is `pipeline::build`, above the
//! runtime; this module names no plan and no kind of port or stage.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::buf::{Pool, PoolError, RingStatsHandle};
use crate::port::PortStats;

use super::{LcoreSpec, StageCounters, StageValues};
use crate::buf::counter::CacheAligned;

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
    /// What stages handed over for the driver of the run (a trial's
    /// generators and analyzers), by type.
    pub controls: Controls,
    /// Instances of replicated stages, by instance name.
    pub replicas: BTreeMap<String, Replica>,
    /// The values stages publish beyond their counters, by stage (instance) name.
    pub values: Vec<(String, Arc<StageValues>)>,
}

/// What an instance of a replicated stage knows of its stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    /// The logical stage's name.
    pub of: String,
    /// This replica's index, `0..count`.
    pub index: usize,
    /// How many replicas the stage has.
    pub count: usize,
}

/// Handles that stages hand to the driver of a run, keyed by their type:
/// the runtime carries them without knowing what they are, and the driver
/// (a trial) asks for the type it knows.
#[derive(Default, Clone)]
pub struct Controls {
    items: Vec<(String, Arc<dyn Any + Send + Sync>)>,
}

impl Controls {
    /// Adds stage `stage`'s handle.
    pub fn put<T: Any + Send + Sync>(&mut self, stage: &str, handle: Arc<T>) {
        self.items.push((stage.to_string(), handle));
    }

    /// Every handle of type `T`, with its stage's name, in build order.
    pub fn all<T: Any + Send + Sync>(&self) -> impl Iterator<Item = (&str, Arc<T>)> + '_ {
        self.items
            .iter()
            .filter_map(|(n, h)| h.clone().downcast::<T>().ok().map(|h| (n.as_str(), h)))
    }
}

/// How stages that a driver controls start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// At once, as configured (`linerate run`).
    FreeRun,
    /// Idle until the driver starts them (`linerate trial`, `linerate search`).
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

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn controls_are_found_by_type() {
        let mut c = Controls::default();
        c.put("a", Arc::new(1u32));
        c.put("b", Arc::new("x"));
        c.put("c", Arc::new(2u32));
        let ints: Vec<(&str, u32)> = c.all::<u32>().map(|(n, v)| (n, *v)).collect();
        assert_eq!(ints, vec![("a", 1), ("c", 2)]);
        assert_eq!(c.all::<u64>().count(), 0);
    }
}
