//! The runtime: lcores (pinned threads) polling their stages run-to-completion,
//! with start, drain and stop under one controller.
//!
//! Each lcore runs the loop in `lcore_loop`: read the clock once, poll every
//! stage once, repeat until told to stop. Stopping is two-phase: on `--duration`,
//! Ctrl-C or when every finite stage has finished, the controller asks stages to
//! drain (sources stop producing, everything else keeps moving packets); once
//! nothing is in flight in any ring or port and no stage has done any work for
//! a quiet period (packets may be out of sight, in an external peer), it stops
//! them, and each stage's `finish` runs on its own lcore.

pub mod basic;
pub mod build;
/// The counters, which live below the ports (re-exported where stages have always found them).
pub use crate::buf::counter;
pub mod impair;
pub mod run;

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::time::{Clock, Instant};
use counter::{CacheAligned, Counter};

/// What one poll of a stage amounted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    /// It moved packets.
    Busy,
    /// It found nothing to do.
    Idle,
    /// It will never have anything to do again (a source that sent its count,
    /// a capture read to its end).
    Finished,
}

/// What a stage sees of the world during one poll.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// The time, read once per pass over the lcore's stages. On an lcore whose
    /// stages all say they need no clock ([`Stage::needs_clock`]), it is the
    /// time the lcore started and never moves.
    pub now: Instant,
    /// The pipeline is stopping: sources must not start anything new.
    pub draining: bool,
}

/// A stage: a unit of work polled by an lcore. Stages own their ports' queues
/// and ring ends and count what they do in their [`StageCounters`].
pub trait Stage: Send {
    /// Does at most one burst of work.
    fn poll(&mut self, cx: &Context) -> Poll;

    /// Whether this stage reads [`Context::now`]. When no stage on an lcore
    /// does, the lcore skips the clock read of every pass (a forwarder of raw
    /// mbufs at tens of Mpps reads it once per two bursts otherwise).
    fn needs_clock(&self) -> bool {
        true
    }

    /// Whether this stage can finish by itself (then the pipeline stops when all
    /// such stages have). A stage that polls forever is not finite.
    fn is_finite(&self) -> bool {
        false
    }

    /// Runs once on the stage's lcore after the last poll (flush files, return
    /// buffers). An error is a runtime failure of the pipeline.
    fn finish(&mut self) -> Result<(), String> {
        Ok(())
    }

    /// A final report of what the stage saw beyond its counters (an analyzer's
    /// per-stream latency), taken on its lcore after `finish`.
    fn detail(&self) -> Option<serde_json::Value> {
        None
    }
}

/// Per-stage counters, written by the stage's lcore, read by anyone.
#[derive(Debug, Default)]
pub struct StageCounters {
    /// Packets taken in.
    pub packets_in: Counter,
    /// Bytes taken in.
    pub bytes_in: Counter,
    /// Packets passed on.
    pub packets_out: Counter,
    /// Bytes passed on.
    pub bytes_out: Counter,
    /// Packets dropped by this stage (its output refused them, no buffer, ...).
    pub dropped: Counter,
    /// Polls that moved packets.
    pub busy_polls: Counter,
    /// Polls that found nothing.
    pub idle_polls: Counter,
}

/// Whether a value a stage publishes only rises (a count) or moves both ways
/// (a level, a fraction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A count: an integer that only rises.
    Counter,
    /// A level: any number.
    Gauge,
}

/// One value a stage publishes beyond its [`StageCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueDef {
    /// Its Prometheus family name: `linerate_` first, the unit in the name,
    /// no `_total` (the encoder adds it to counters).
    pub name: &'static str,
    /// What it means, one line.
    pub help: &'static str,
    /// Count or level.
    pub kind: ValueKind,
}

/// Named values a stage publishes for live readers (the metrics endpoint)
/// beyond its packet counters: its own lcore writes them with relaxed stores,
/// at most once per burst, and any thread reads them without a lock. A stage
/// gets one from `StageCtx::publish` in the pipeline builder.
#[derive(Debug)]
pub struct StageValues {
    defs: Vec<ValueDef>,
    values: Box<[AtomicU64]>,
}

impl StageValues {
    /// Values for `defs`, all zero.
    pub fn new(defs: Vec<ValueDef>) -> StageValues {
        let values = defs.iter().map(|_| AtomicU64::new(0)).collect();
        StageValues { defs, values }
    }

    /// Sets count `i` (only the stage's lcore writes; an index past the end is
    /// ignored).
    #[inline]
    pub fn set(&self, i: usize, v: u64) {
        if let Some(a) = self.values.get(i) {
            a.store(v, Ordering::Relaxed);
        }
    }

    /// Sets level `i`.
    #[inline]
    pub fn set_f64(&self, i: usize, v: f64) {
        self.set(i, v.to_bits());
    }

    /// The definitions, in order.
    pub fn defs(&self) -> &[ValueDef] {
        &self.defs
    }

    /// Every value now, as a number.
    pub fn read(&self) -> impl Iterator<Item = (&ValueDef, f64)> + '_ {
        self.defs.iter().zip(self.values.iter()).map(|(d, a)| {
            let raw = a.load(Ordering::Relaxed);
            let v = match d.kind {
                ValueKind::Counter => raw as f64,
                ValueKind::Gauge => f64::from_bits(raw),
            };
            (d, v)
        })
    }
}

/// A stage placed on an lcore.
pub struct StageSlot {
    /// The stage's name in the pipeline.
    pub name: String,
    /// The stage.
    pub stage: Box<dyn Stage>,
    /// Its counters (the stage holds a clone and counts its packets; the loop
    /// counts polls).
    pub counters: Arc<CacheAligned<StageCounters>>,
}

/// Runs first on an lcore's thread (after pinning); what it returns is kept
/// alive until the thread ends (an EAL thread registration, for instance).
pub type LcoreHook = Arc<dyn Fn() -> Result<Box<dyn std::any::Any>, String> + Send + Sync>;

/// One lcore: a core id and the stages it polls in order.
pub struct LcoreSpec {
    /// The core to pin the thread to.
    pub core: usize,
    /// Whether to pin (false: run as an ordinary thread).
    pub pin: bool,
    /// The stages, polled in this order.
    pub stages: Vec<StageSlot>,
    /// Set-up on the thread before the loop.
    pub on_start: Option<LcoreHook>,
}

const RUNNING: u8 = 0;
const DRAINING: u8 = 1;
const STOPPED: u8 = 2;

/// Shared between the controller and the lcores.
struct Control {
    state: AtomicU8,
    /// Finite stages that have finished.
    finished: AtomicUsize,
}

/// The loop each lcore runs. Everything that can happen once happened before.
fn lcore_loop(
    control: &Control,
    clock: Clock,
    stages: &mut [StageSlot],
    done: &mut [bool],
    pinned: bool,
) {
    let timed = stages.iter().any(|s| s.stage.needs_clock());
    let mut now = clock.now();
    loop {
        let state = control.state.load(Ordering::Acquire);
        if state == STOPPED {
            break;
        }
        if timed {
            now = clock.now();
        }
        let cx = Context {
            now,
            draining: state == DRAINING,
        };
        let mut busy = false;
        for (slot, done) in stages.iter_mut().zip(done.iter_mut()) {
            match slot.stage.poll(&cx) {
                Poll::Busy => {
                    busy = true;
                    slot.counters.busy_polls.add(1);
                }
                Poll::Idle => slot.counters.idle_polls.add(1),
                Poll::Finished => {
                    slot.counters.idle_polls.add(1);
                    if !*done {
                        *done = true;
                        control.finished.fetch_add(1, Ordering::Release);
                    }
                }
            }
        }
        // Unpinned lcores share cores with each other: give the core away after
        // an idle pass instead of spinning against a thread that has work.
        if !pinned && !busy {
            std::thread::yield_now();
        }
    }
}

/// What an lcore thread returns: each stage's `finish` result and detail.
type LcoreResult = Vec<(String, Result<(), String>, Option<serde_json::Value>)>;

/// What stopping returns: failures as (stage, message), details by stage.
pub type StopResult = (Vec<(String, String)>, Vec<(String, serde_json::Value)>);

/// Running lcores.
pub struct Runtime {
    control: Arc<Control>,
    threads: Vec<JoinHandle<LcoreResult>>,
    finite: usize,
}

/// The runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Pinning to a core failed.
    #[error("cannot pin lcore {0} to its core: the core is not available to this process (check `taskset -p $$` and cgroup cpusets), or set `pin = false` in [pipeline]")]
    Pin(usize),
    /// A thread could not be spawned.
    #[error("cannot start lcore {0}: {1}")]
    Spawn(usize, String),
    /// The lcore's set-up failed (registering with the EAL, ...).
    #[error("cannot set up lcore {0}: {1}")]
    Hook(usize, String),
}

impl Runtime {
    /// Starts one thread per lcore.
    pub fn start(lcores: Vec<LcoreSpec>, clock: Clock) -> Result<Runtime, StartError> {
        let control = Arc::new(Control {
            state: AtomicU8::new(RUNNING),
            finished: AtomicUsize::new(0),
        });
        let finite = lcores
            .iter()
            .flat_map(|l| &l.stages)
            .filter(|s| s.stage.is_finite())
            .count();
        let mut threads = Vec::new();
        for mut lcore in lcores {
            let control2 = control.clone();
            let (pin_tx, pin_rx) = std::sync::mpsc::channel();
            let core = lcore.core;
            let handle = std::thread::Builder::new()
                .name(format!("lcore-{core}"))
                .spawn(move || {
                    let pinned = !lcore.pin
                        || core_affinity::set_for_current(core_affinity::CoreId { id: core });
                    if !pinned {
                        let _ = pin_tx.send(Err(StartError::Pin(core)));
                        return Vec::new();
                    }
                    let guard = match lcore.on_start.as_ref().map(|hook| hook()) {
                        Some(Err(e)) => {
                            let _ = pin_tx.send(Err(StartError::Hook(core, e)));
                            return Vec::new();
                        }
                        Some(Ok(g)) => Some(g),
                        None => None,
                    };
                    let _ = pin_tx.send(Ok(()));
                    let mut done = vec![false; lcore.stages.len()];
                    lcore_loop(&control2, clock, &mut lcore.stages, &mut done, lcore.pin);
                    let results = lcore
                        .stages
                        .iter_mut()
                        .map(|s| {
                            let r = s.stage.finish();
                            (s.name.clone(), r, s.stage.detail())
                        })
                        .collect();
                    // The stages are finished: now the thread may leave the EAL.
                    drop(guard);
                    results
                })
                .map_err(|e| StartError::Spawn(core, e.to_string()))?;
            let started = pin_rx
                .recv()
                .unwrap_or(Err(StartError::Spawn(core, "the thread died".into())));
            threads.push(handle);
            if let Err(e) = started {
                let rt = Runtime {
                    control,
                    threads,
                    finite,
                };
                let _ = rt.stop();
                return Err(e);
            }
        }
        Ok(Runtime {
            control,
            threads,
            finite,
        })
    }

    /// Whether the pipeline has finite stages and all of them have finished.
    pub fn sources_finished(&self) -> bool {
        self.finite > 0 && self.control.finished.load(Ordering::Acquire) >= self.finite
    }

    /// Asks stages to drain.
    pub fn begin_drain(&self) {
        let _ = self.control.state.compare_exchange(
            RUNNING,
            DRAINING,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Stops every lcore, runs each stage's `finish` on it, and returns the
    /// failures as (stage, message) and the stages' details.
    pub fn stop(self) -> StopResult {
        self.control.state.store(STOPPED, Ordering::Release);
        let mut failures = Vec::new();
        let mut details = Vec::new();
        for t in self.threads {
            match t.join() {
                Ok(results) => {
                    for (name, r, d) in results {
                        if let Err(e) = r {
                            failures.push((name.clone(), e));
                        }
                        if let Some(d) = d {
                            details.push((name, d));
                        }
                    }
                }
                Err(_) => failures.push(("lcore".into(), "an lcore thread panicked".into())),
            }
        }
        (failures, details)
    }
}
