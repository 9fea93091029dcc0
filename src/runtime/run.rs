//! Running a built pipeline: start the lcores, watch the clock and the stop
//! conditions, report live, drain, stop, and report.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::sync::Arc;

use crate::buf::{Pool, PoolStats, RingStats, RingStatsHandle};
use crate::port::{PortReport, PortStats};
use crate::time::Clock;

use super::build::Built;
use super::counter::CacheAligned;
use super::{Runtime, StageCounters, StageValues, StartError};

/// How to run.
pub struct RunOptions<'a> {
    /// Stop after this long; `None` runs until interrupted or every finite
    /// stage has finished.
    pub duration: Option<Duration>,
    /// Set (by a Ctrl-C handler) to stop.
    pub interrupt: &'a AtomicBool,
    /// Longest wait for in-flight packets to arrive once stopping.
    pub drain_timeout: Duration,
    /// How long every stage must have been idle before stopping (packets may
    /// be out of sight, in an external peer): [`DRAIN_QUIET`] by default.
    pub drain_quiet: Duration,
    /// Called about once a second with the counters so far.
    pub on_tick: Option<&'a mut dyn FnMut(&RunReport)>,
}

/// Why the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `--duration` elapsed.
    Duration,
    /// Ctrl-C.
    Interrupt,
    /// Every finite stage finished.
    Finished,
}

/// One stage's counters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StageReport {
    /// Its kind.
    pub kind: &'static str,
    /// Its lcore.
    pub lcore: usize,
    /// Packets taken in.
    pub packets_in: u64,
    /// Packets passed on.
    pub packets_out: u64,
    /// Bytes taken in.
    pub bytes_in: u64,
    /// Bytes passed on.
    pub bytes_out: u64,
    /// Packets dropped.
    pub dropped: u64,
    /// Polls that did work.
    pub busy_polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// What the stage reported beyond its counters (generators' and
    /// analyzers' per-stream results).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
    /// A replicated stage's replicas, in order (the counters above are their
    /// sums; `lcore` is the first replica's).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<StageReport>,
}

impl StageReport {
    fn add(&mut self, o: &StageReport) {
        self.packets_in += o.packets_in;
        self.packets_out += o.packets_out;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.dropped += o.dropped;
        self.busy_polls += o.busy_polls;
        self.idle_polls += o.idle_polls;
    }
}

/// Puts a stage's detail on its report, or on its replica's entry.
pub(crate) fn attach_detail(b: &Built, report: &mut RunReport, name: &str, d: serde_json::Value) {
    match b.replicas.get(name) {
        Some(r) => {
            if let Some(x) = report
                .stages
                .get_mut(&r.of)
                .and_then(|s| s.replicas.get_mut(r.index))
            {
                x.detail = Some(d);
            }
        }
        None => {
            if let Some(s) = report.stages.get_mut(name) {
                s.detail = Some(d);
            }
        }
    }
}

/// A run's result (and, while running, a live snapshot).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// The pipeline's name.
    pub pipeline: String,
    /// Seconds from start until stopping began (the measured interval).
    pub duration_s: f64,
    /// Ports by name.
    pub ports: BTreeMap<String, PortReport>,
    /// Stages by name.
    pub stages: BTreeMap<String, StageReport>,
    /// Rings by name.
    pub rings: BTreeMap<String, RingStats>,
    /// The buffer pool.
    pub pool: PoolStats,
    /// Why it stopped (absent in live snapshots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<StopReason>,
    /// Packets still in rings or wires when the drain timed out.
    pub left_in_flight: u64,
}

/// A run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The lcores could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// Stages reported failures when stopping; the report is still complete.
    #[error("{}", .failures.join("; "))]
    Stages {
        /// The report.
        report: Box<RunReport>,
        /// "stage: message" for each failure.
        failures: Vec<String>,
    },
}

/// The counters of a built pipeline now.
pub fn snapshot(b: &Built, elapsed: f64) -> RunReport {
    snapshot_of(
        &b.name,
        &b.ports,
        &b.rings,
        &b.stages,
        &b.replicas,
        &b.pool,
        elapsed,
    )
}

fn snapshot_of(
    name: &str,
    ports: &[(String, Arc<dyn PortStats>)],
    rings: &[(String, RingStatsHandle)],
    stages: &[StageEntry],
    replicas: &Replicas,
    pool: &Pool,
    elapsed: f64,
) -> RunReport {
    RunReport {
        pipeline: name.to_string(),
        duration_s: elapsed,
        ports: ports.iter().map(|(n, s)| (n.clone(), s.report())).collect(),
        stages: stage_reports(stages, replicas),
        rings: rings.iter().map(|(n, h)| (n.clone(), h.get())).collect(),
        pool: pool.stats(),
        stopped_by: None,
        left_in_flight: rings.iter().map(|(_, h)| h.in_flight()).sum::<u64>()
            + ports.iter().map(|(_, s)| s.in_flight()).sum::<u64>(),
    }
}

/// Instances of replicated stages, by instance name.
type Replicas = BTreeMap<String, super::build::Replica>;

type StageEntry = (
    String,
    &'static str,
    usize,
    Arc<CacheAligned<StageCounters>>,
);

/// A reader of a built pipeline's counters that any thread may keep and read
/// at any time, without locks (the counters are atomics with one writer each),
/// before, during and after the run: what a metrics endpoint scrapes.
#[derive(Clone)]
pub struct Probe {
    name: String,
    ports: Vec<(String, Arc<dyn PortStats>)>,
    rings: Vec<(String, RingStatsHandle)>,
    stages: Vec<StageEntry>,
    replicas: Replicas,
    pool: Pool,
    values: Vec<(String, Arc<StageValues>)>,
}

/// A stage's published values with its labels: (stage, kind, lcore, replica
/// index if replicated, values).
pub type StageValuesRef<'a> = (&'a str, &'static str, usize, Option<usize>, &'a StageValues);

impl Probe {
    /// A probe on a built pipeline's counters.
    pub fn of(b: &Built) -> Probe {
        Probe {
            name: b.name.clone(),
            ports: b.ports.clone(),
            rings: b.rings.clone(),
            stages: b.stages.clone(),
            replicas: b.replicas.clone(),
            pool: b.pool.clone(),
            values: b.values.clone(),
        }
    }

    /// The values stages publish beyond their counters; a replica is named by
    /// its stage, with its index.
    pub fn stage_values(&self) -> Vec<StageValuesRef<'_>> {
        self.values
            .iter()
            .map(|(n, v)| {
                let (kind, lcore) = self
                    .stages
                    .iter()
                    .find(|s| &s.0 == n)
                    .map_or(("", 0), |s| (s.1, s.2));
                match self.replicas.get(n) {
                    Some(r) => (r.of.as_str(), kind, lcore, Some(r.index), &**v),
                    None => (n.as_str(), kind, lcore, None, &**v),
                }
            })
            .collect()
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The counters now (`duration_s` is zero: a probe has no clock).
    pub fn snapshot(&self) -> RunReport {
        snapshot_of(
            &self.name,
            &self.ports,
            &self.rings,
            &self.stages,
            &self.replicas,
            &self.pool,
            0.0,
        )
    }
}

/// Each stage's counters; a replicated stage's are summed over its replicas
/// (in replica order), each replica kept beside the sum.
fn stage_reports(stages: &[StageEntry], replicas: &Replicas) -> BTreeMap<String, StageReport> {
    let mut out: BTreeMap<String, StageReport> = BTreeMap::new();
    for (n, kind, lcore, c) in stages {
        let r = StageReport {
            kind,
            lcore: *lcore,
            packets_in: c.packets_in.get(),
            packets_out: c.packets_out.get(),
            bytes_in: c.bytes_in.get(),
            bytes_out: c.bytes_out.get(),
            dropped: c.dropped.get(),
            busy_polls: c.busy_polls.get(),
            idle_polls: c.idle_polls.get(),
            detail: None,
            replicas: Vec::new(),
        };
        match replicas.get(n) {
            Some(rep) => {
                let total = out.entry(rep.of.clone()).or_insert_with(|| StageReport {
                    packets_in: 0,
                    packets_out: 0,
                    bytes_in: 0,
                    bytes_out: 0,
                    dropped: 0,
                    busy_polls: 0,
                    idle_polls: 0,
                    ..r.clone()
                });
                total.add(&r);
                total.replicas.push(r);
            }
            None => {
                out.insert(n.clone(), r);
            }
        }
    }
    out
}

fn in_flight(b: &Built) -> u64 {
    b.rings.iter().map(|(_, h)| h.in_flight()).sum::<u64>()
        + b.ports.iter().map(|(_, s)| s.in_flight()).sum::<u64>()
}

/// How often the controller looks at the lcores while a run goes on (stop
/// conditions, once-a-second stats).
const CONTROL_PERIOD: Duration = Duration::from_millis(10);

/// How long every stage must have been idle before a draining pipeline stops,
/// by default.
pub const DRAIN_QUIET: Duration = Duration::from_millis(20);

fn busy_polls(b: &Built) -> u64 {
    b.stages.iter().map(|(_, _, _, c)| c.busy_polls.get()).sum()
}

/// Each stage's idle polls so far.
fn idle_polls(b: &Built) -> Vec<u64> {
    b.stages
        .iter()
        .map(|(_, _, _, c)| c.idle_polls.get())
        .collect()
}

/// Whether every stage has been polled idle at least twice since `then`
/// (so at least once in a pass that began after `then`): a stage whose lcore
/// has not run since is starved, not quiet.
fn all_polled_since(b: &Built, then: &[u64]) -> bool {
    idle_polls(b)
        .iter()
        .zip(then)
        .all(|(now, then)| now.saturating_sub(*then) >= 2)
}

/// Runs a built pipeline to its end.
pub fn run(mut built: Built, mut opts: RunOptions<'_>) -> Result<RunReport, RunError> {
    let clock = Clock::new();
    let start = clock.now();
    let lcores = std::mem::take(&mut built.lcores);
    let rt = Runtime::start(lcores, clock)?;
    let mut next_tick = Duration::from_secs(1);
    let reason = loop {
        // The controller shares a core with an lcore (on a machine with no
        // core to spare, core 0 with replica 0): it wakes 100 times a second,
        // a few microseconds each, and otherwise leaves the core alone.
        std::thread::sleep(CONTROL_PERIOD);
        let elapsed = clock.now() - start;
        if opts.interrupt.load(Ordering::Relaxed) {
            break StopReason::Interrupt;
        }
        if opts.duration.is_some_and(|d| elapsed >= d) {
            break StopReason::Duration;
        }
        if rt.sources_finished() {
            break StopReason::Finished;
        }
        if elapsed >= next_tick {
            next_tick += Duration::from_secs(1);
            if let Some(f) = opts.on_tick.as_mut() {
                f(&snapshot(&built, elapsed.as_secs_f64()));
            }
        }
    };
    let active = (clock.now() - start).as_secs_f64();
    rt.begin_drain();
    let drain_start = clock.now();
    // Settled: nothing in any ring or wire we can see, and no stage has done
    // any work for DRAIN_QUIET (packets may be out of our sight, looping
    // through an external peer such as dpdk-testpmd), and every stage has
    // been polled since: on a loaded machine an lcore may not have run at all
    // for DRAIN_QUIET, and a sender that has not yet seen the drain has not
    // yet sent what it sends then (a SPEAD sender's end-of-stream heap).
    let mut quiet_since = clock.now();
    let mut last_busy = busy_polls(&built);
    let mut idle_at_quiet = idle_polls(&built);
    while clock.now() - drain_start < opts.drain_timeout {
        std::thread::sleep(Duration::from_micros(200));
        let busy = busy_polls(&built);
        if busy != last_busy || in_flight(&built) > 0 {
            last_busy = busy;
            quiet_since = clock.now();
            idle_at_quiet = idle_polls(&built);
            continue;
        }
        if clock.now() - quiet_since >= opts.drain_quiet && all_polled_since(&built, &idle_at_quiet)
        {
            break;
        }
    }
    let (failures, details) = rt.stop();
    let mut report = snapshot(&built, active);
    report.stopped_by = Some(reason);
    for (name, d) in details {
        attach_detail(&built, &mut report, &name, d);
    }
    if failures.is_empty() {
        Ok(report)
    } else {
        Err(RunError::Stages {
            report: Box::new(report),
            failures: failures
                .into_iter()
                .map(|(s, m)| format!("stage `{s}`: {m}"))
                .collect(),
        })
    }
}
