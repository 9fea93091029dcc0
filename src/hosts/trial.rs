//! Trials across hosts: every rank builds its own host's part of the
//! pipeline; rank 0 decides each trial's rate and duration and the others
//! follow.
//!
//! One trial, in steps (each a deadline-bound exchange with rank 0, see
//! [`super::mpi`]): rank 0 broadcasts the trial (rate, duration, epoch);
//! every rank arms its analyzers and reports; once all have (the barrier),
//! every rank starts its generators; every rank reports when its generators
//! are done; after the drain every rank sends its part (counts, histograms in
//! V2 format) and rank 0 adds them up exactly ([`crate::trial::assemble`]).
//! Each report carries a status word, so a rank that fails says so, names
//! itself on stderr and every rank ends with the same exit status; a rank
//! that dies or hangs is named by rank 0's timeout instead.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::mpi::{InitError, Ranks};
use crate::pipeline::{HostClock, Plan};
use crate::trial::{
    assemble, ClockNote, HostSection, TrialError, TrialOptions, TrialResult, TrialRunner,
};

/// Rank 0's command: run a trial.
const TRIAL: u64 = 1;
/// Rank 0's command: the run is over.
const STOP: u64 = 2;

/// Why a run across hosts ended early. Every rank returns the same status.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// Bad input (exit 2): the file does not fit the ranks, or a part cannot
    /// be built as written.
    #[error("{0}")]
    Input(String),
    /// A failure at run time (exit 1).
    #[error("{0}")]
    Runtime(String),
    /// A rank failed and printed why (naming its host); exit with this status.
    #[error("host {0} failed (see its message above)")]
    Peer(String, u8),
    /// Interrupted by a signal: the exit status, 128 + the signal's number.
    /// A rank that was not signalled itself takes the signalled rank's, so
    /// every rank (and mpirun, which passes on the first non-zero status)
    /// ends with the same one.
    #[error("interrupted")]
    Interrupted(u8),
}

impl HostsError {
    /// The exit status.
    pub fn code(&self) -> u8 {
        match self {
            HostsError::Input(_) => 2,
            HostsError::Runtime(_) => 1,
            HostsError::Peer(_, c) => *c,
            HostsError::Interrupted(status) => *status,
        }
    }
}

/// Status words: what a rank reports at each step.
fn status_of(e: &TrialError) -> u64 {
    match e {
        TrialError::Input(_) | TrialError::Build(crate::runtime::build::BuildError::Input(_)) => 2,
        // 128 + the signal this rank received (SIGINT when it only saw the
        // flag set), so the others end with the same status.
        TrialError::Interrupted => u64::from(crate::sys::signals::exit_status().unwrap_or(130)),
        _ => 1,
    }
}

/// A measured clock offset of one host against rank 0's (CLOCK_TAI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// The host's clock minus rank 0's, estimated, in ns.
    pub offset_ns: i64,
    /// The estimate is within this of the truth, in ns (half the round trip).
    pub bound_ns: u64,
}

/// This rank's side of a run across hosts.
pub struct Cluster {
    ranks: Ranks,
    runner: TrialRunner,
    timeout: Duration,
    total_share: f64,
    stream_hosts: BTreeMap<u16, Option<String>>,
    clocks: BTreeMap<String, HostClock>,
    offsets: BTreeMap<String, Offset>,
    epoch: u32,
    stopped: bool,
    /// A step ended because a rank was interrupted (a signal).
    interrupted: bool,
    interrupt: &'static AtomicBool,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("ranks", &self.ranks)
            .finish()
    }
}

impl Cluster {
    /// Joins the MPI job: binds the file's hosts to ranks, enters this
    /// rank's namespace, builds and starts this host's part, and waits until
    /// every rank has (or one failed). With `clock = "tai"` on every host,
    /// stamps are CLOCK_TAI and the offsets between hosts are measured.
    pub fn open(
        plan: &Plan,
        options: TrialOptions,
        timeout: Duration,
        interrupt: &'static AtomicBool,
    ) -> Result<Cluster, HostsError> {
        let whole = &plan.pipeline;
        if !whole.stages.iter().any(|s| s.kind.name() == "generator")
            || !whole.stages.iter().any(|s| s.kind.name() == "analyzer")
        {
            return Err(HostsError::Input(format!(
                "{}: trials need at least one `generator` stage and one `analyzer` stage",
                whole.file.display()
            )));
        }
        let ranks = join(plan, timeout)?;
        let me = ranks.host().name.clone();
        let clocks: BTreeMap<String, HostClock> = whole
            .hosts
            .iter()
            .map(|h| (h.name.clone(), h.clock))
            .collect();
        let tai = !clocks.is_empty() && clocks.values().all(|c| *c == HostClock::Tai);
        if tai {
            crate::time::use_tai_stamps();
        }
        let built = TrialRunner::start_part(&plan.part(&me), options);
        let status = match &built {
            Ok(_) => 0,
            Err(e) => {
                ranks.say(&format!("{e}"));
                status_of(e)
            }
        };
        agree(&ranks, "start", timeout, status)?;
        let Ok(runner) = built else {
            unreachable!("a failed start was reported by the status exchange")
        };
        for w in runner.warnings() {
            ranks.say(&format!("warning: {w}"));
        }
        let mut c = Cluster {
            total_share: plan.generator_shares(),
            stream_hosts: plan.stream_hosts(),
            clocks,
            offsets: BTreeMap::new(),
            ranks,
            runner,
            timeout,
            epoch: 0,
            stopped: false,
            interrupted: false,
            interrupt,
        };
        if tai {
            c.offsets = c.measure_offsets(5);
        }
        Ok(c)
    }

    /// Whether this rank drives the run (rank 0).
    pub fn is_driver(&self) -> bool {
        self.ranks.is_driver()
    }

    /// The MPI glue (for its host names).
    pub fn ranks(&self) -> &Ranks {
        &self.ranks
    }

    /// Measured offsets of every host's CLOCK_TAI against rank 0's (rank 0
    /// only; empty unless every host has `clock = "tai"`).
    pub fn offsets(&self) -> &BTreeMap<String, Offset> {
        &self.offsets
    }

    /// Rank 0: runs one trial on every host and returns the whole result.
    pub fn trial(&mut self, rate_pps: f64, duration: Duration) -> Result<TrialResult, HostsError> {
        let mut cmd = [
            TRIAL,
            rate_pps.to_bits(),
            crate::time::duration_nanos(duration),
            u64::from(self.epoch + 1),
        ];
        self.ranks.broadcast("next trial", self.timeout, &mut cmd);
        self.run_trial(rate_pps, duration)
            .map(|r| r.expect("rank 0 assembles the result"))
    }

    /// Ranks other than 0: run the trials rank 0 asks for until it says
    /// stop. Rank 0 may take a while between trials (a search deciding, a
    /// report written), so the wait for its next command is generous.
    pub fn follow(&mut self) -> Result<(), HostsError> {
        loop {
            let mut cmd = [0u64; 4];
            self.ranks
                .broadcast("next trial", 3 * self.timeout, &mut cmd);
            match cmd[0] {
                TRIAL => {
                    let rate = f64::from_bits(cmd[1]);
                    let duration = Duration::from_nanos(cmd[2]);
                    if let Err(e) = self.run_trial(rate, duration) {
                        if self.interrupted {
                            // Leaving now (exit status non-zero) would make
                            // mpirun end rank 0 before it has written the
                            // finished trials: wait until it has.
                            self.ranks.barrier("report written", 2 * self.timeout);
                        }
                        return Err(e);
                    }
                }
                _ => {
                    self.stopped = true;
                    return Ok(());
                }
            }
        }
    }

    /// Rank 0: tells every rank the run is over (also done on drop).
    pub fn stop(&mut self) {
        if self.is_driver() && !self.stopped {
            self.stopped = true;
            let mut cmd = [STOP, 0, 0, 0];
            self.ranks.broadcast("stop", self.timeout, &mut cmd);
        }
    }

    fn run_trial(
        &mut self,
        rate_pps: f64,
        duration: Duration,
    ) -> Result<Option<TrialResult>, HostsError> {
        self.epoch += 1;
        let epoch = self.epoch;
        let t = self.timeout;
        if !self.offsets.is_empty() || self.clocks.values().all(|c| *c == HostClock::Tai) {
            // The TAI-monotonic difference moves when the clock is stepped.
            crate::time::use_tai_stamps();
        }
        let armed = self.runner.arm(epoch, self.interrupt);
        self.step(&format!("trial {epoch} armed"), t, &armed)?;
        let released = crate::time::monotonic_now().as_nanos();
        // Every analyzer on every host is reset: start sending.
        self.runner
            .launch(epoch, rate_pps, self.total_share, duration);
        // The traffic takes the trial's duration: heartbeats name a rank
        // that hangs in it within the timeout, not after the trial. They
        // run on this control thread; the lcores never see them.
        self.ranks.watch(&format!("trial {epoch}"), t);
        let ranks = &self.ranks;
        let sent = self
            .runner
            .wait_generators(epoch, duration, self.interrupt, &mut |_, _| ranks.beat());
        // A host without generators gets here at once: wait for the others'
        // whole trial.
        let r = self.step(&format!("trial {epoch} sent"), t + duration, &sent);
        self.ranks.unwatch();
        r?;
        std::thread::sleep(self.runner.drain());
        let part = self.runner.part(self.interrupt).map(|mut p| {
            p.start_ns = self
                .runner
                .first_packet_ns()
                .map(|f| f.saturating_sub(released));
            p
        });
        // The reduce starts when this rank has its own part.
        let collected = crate::time::monotonic_now();
        let outcome = part.as_ref().map(|_| ()).map_err(|e| match e {
            TrialError::Interrupted => TrialError::Interrupted,
            e => TrialError::Stalled(e.to_string()),
        });
        self.step(&format!("trial {epoch} collected"), t, &outcome)?;
        let bytes = part.map(|p| super::wire::encode(&p)).unwrap_or_default();
        let Some(rows) = self
            .ranks
            .gather_bytes(&format!("trial {epoch} results"), t, &bytes)
        else {
            return Ok(None);
        };
        let mut parts = Vec::new();
        let mut damaged = None;
        for (host, row) in self.ranks.hosts().iter().zip(&rows) {
            match super::wire::decode(row) {
                Ok(p) => parts.push(p),
                Err(e) => {
                    damaged = Some(format!("host {}: {e}", host.label()));
                    break;
                }
            }
        }
        if let Some(e) = damaged {
            self.stop();
            return Err(HostsError::Runtime(e));
        }
        let (no_latency, note) = self.clock_rule(&parts);
        let mut r = assemble(epoch, rate_pps, duration, &parts, &no_latency);
        r.hosts = self
            .ranks
            .hosts()
            .iter()
            .zip(&parts)
            .map(|(h, p)| (h.name.clone(), HostSection::of(h.rank, p, duration)))
            .collect();
        r.clock = Some(note);
        r.timing = Some(crate::trial::HostsTiming {
            start_ns: parts.iter().filter_map(|p| p.start_ns).max(),
            reduce_ns: crate::time::duration_nanos(crate::time::monotonic_now() - collected),
        });
        Ok(Some(r))
    }

    /// The clock rule: a stream stamped on one host and received on another
    /// has a one-way latency only when every host stamps on CLOCK_TAI; its
    /// samples are left out otherwise, and the note says why.
    fn clock_rule(&self, parts: &[crate::trial::TrialPart]) -> (BTreeSet<(usize, u16)>, ClockNote) {
        let tai = !self.clocks.is_empty() && self.clocks.values().all(|c| *c == HostClock::Tai);
        let mut no = BTreeSet::new();
        let mut why = Vec::new();
        for (i, (host, part)) in self.ranks.hosts().iter().zip(parts).enumerate() {
            for (name, a) in &part.analyzers {
                for s in &a.streams {
                    let Some(Some(from)) = self.stream_hosts.get(&s.stream) else {
                        continue;
                    };
                    if *from != host.name && !tai {
                        no.insert((i, s.stream));
                        why.push(format!(
                            "stream {} is sent on host {from} and received on host {} ({name})",
                            s.stream, host.name
                        ));
                    }
                }
            }
        }
        let monotonic: Vec<&str> = self
            .clocks
            .iter()
            .filter(|(_, c)| **c != HostClock::Tai)
            .map(|(n, _)| n.as_str())
            .collect();
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(
                "no latency for what crosses hosts: {}; a stamp from one host's clock is not \
                 comparable with another's unless both are synchronised (clock = \"monotonic\" \
                 on {}). Loss and throughput are exact. Set clock = \"tai\" on every host \
                 (CLOCK_TAI, disciplined by PTP's phc2sys) for one-way latency",
                why.join("; "),
                monotonic.join(", ")
            )
        };
        let note = ClockNote {
            clock: if tai { "tai" } else { "monotonic" }.into(),
            latency: no.is_empty(),
            why,
            offset_bound_ns: tai.then(|| {
                self.offsets
                    .values()
                    .map(|o| o.offset_ns.unsigned_abs() + o.bound_ns)
                    .max()
                    .unwrap_or(0)
            }),
        };
        (no, note)
    }

    /// Reports this rank's step outcome and learns everyone's: an error here
    /// (printed, naming the host) or on any rank ends every rank alike.
    fn step(
        &mut self,
        step: &str,
        timeout: Duration,
        outcome: &Result<(), TrialError>,
    ) -> Result<(), HostsError> {
        let status = match outcome {
            Ok(()) => 0,
            Err(e) => {
                if !matches!(e, TrialError::Interrupted) {
                    self.ranks.say(&e.to_string());
                }
                status_of(e)
            }
        };
        let r = agree(&self.ranks, step, timeout, status);
        if let Err(e) = &r {
            // Every rank saw the failure: none waits for a stop command.
            self.stopped = true;
            self.interrupted = matches!(e, HostsError::Interrupted(_));
        }
        r
    }

    fn measure_offsets(&self, rounds: usize) -> BTreeMap<String, Offset> {
        measure_offsets(&self.ranks, self.timeout, rounds)
    }

    /// Ends the run: tells the other ranks to stop, or, when a signal
    /// ended it, releases them (they wait until rank 0 has written its
    /// report, see [`Cluster::follow`]). Call it after writing the report.
    pub fn finish(mut self) {
        self.stop();
        if self.interrupted && self.is_driver() {
            self.interrupted = false;
            self.ranks.barrier("report written", self.timeout);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if self.interrupted && self.is_driver() {
            self.ranks.barrier("report written", self.timeout);
        }
    }
}

/// Joins the MPI job for `plan`: binds its hosts to ranks (by `rank`, or by
/// `hostname` to where mpirun placed the ranks; `timeout` bounds that step), enters this
/// rank's namespace (after MPI init) and announces the rank on stderr.
pub fn join(plan: &Plan, timeout: Duration) -> Result<Ranks, HostsError> {
    let whole = &plan.pipeline;
    let ranks = Ranks::init_with(timeout, |machines| super::bind_file(whole, machines)).map_err(
        |e| match e {
            InitError::Hosts(m) => HostsError::Input(m),
            e => HostsError::Runtime(e.to_string()),
        },
    )?;
    let spec = whole.hosts.iter().find(|h| h.name == ranks.host().name);
    ranks.enter_netns(spec.and_then(|h| h.netns.as_deref()));
    ranks.announce();
    Ok(ranks)
}

/// Cristian's probe, `rounds` times: rank 0 notes its clock just before
/// it releases the ranks from a barrier (`t0`) and again when every
/// rank's reading has arrived (`t1`); a rank's reading was taken in
/// between, so its offset is `reading - (t0 + t1) / 2` within
/// `(t1 - t0) / 2`. The round with the smallest bound wins.
pub fn measure_offsets(
    ranks: &Ranks,
    timeout: Duration,
    rounds: usize,
) -> BTreeMap<String, Offset> {
    let mut best: BTreeMap<String, Offset> = BTreeMap::new();
    for round in 0..rounds {
        let mut t0 = 0u64;
        ranks.exchange(&format!("clock probe {round}"), timeout, &[], 0, |_| {
            t0 = crate::time::tai_now().as_nanos();
            Vec::new()
        });
        let mine = [crate::time::tai_now().as_nanos()];
        let mut t1 = 0u64;
        let (_, all) = ranks.exchange(&format!("clock reading {round}"), timeout, &mine, 0, |_| {
            t1 = crate::time::tai_now().as_nanos();
            Vec::new()
        });
        let Some(all) = all else { continue };
        let mid = t0 / 2 + t1 / 2;
        let bound = t1.saturating_sub(t0).div_ceil(2);
        for (h, row) in ranks.hosts().iter().zip(&all).skip(1) {
            let o = Offset {
                offset_ns: row[0] as i64 - mid as i64,
                bound_ns: bound,
            };
            let e = best.entry(h.name.clone()).or_insert(o);
            if o.bound_ns < e.bound_ns {
                *e = o;
            }
        }
    }
    best
}

/// Exchanges status words (0 ok, 1 run-time failure, 2 bad input, 128 + N
/// interrupted by signal N): everyone learns the worst one, and which host had it.
pub fn agree(ranks: &Ranks, step: &str, timeout: Duration, status: u64) -> Result<(), HostsError> {
    let (worst, _) = ranks.exchange(step, timeout, &[status], 2, |all| {
        let (rank, s) = all
            .iter()
            .enumerate()
            .map(|(r, row)| (r as u64, row[0]))
            .max_by_key(|(_, s)| *s)
            .unwrap_or((0, 0));
        vec![s, rank]
    });
    match worst[0] {
        0 => Ok(()),
        s @ 129..=255 => Err(HostsError::Interrupted(s as u8)),
        s => {
            let host = ranks
                .hosts()
                .get(worst[1] as usize)
                .map_or("?".into(), |h| h.label());
            Err(HostsError::Peer(host, s.min(255) as u8))
        }
    }
}

/// The search's measurer across hosts (rank 0): each trial runs on every
/// host through the [`Cluster`]. It keeps each finished trial's per-host
/// breakdown for the report.
pub struct HostsMeasurer(pub Cluster, pub Vec<serde_json::Value>);

impl crate::search::measurer::Measurer for HostsMeasurer {
    fn measure(
        &mut self,
        rate_pps: f64,
        duration_s: f64,
    ) -> Result<crate::search::measurer::TrialCounts, crate::search::measurer::MeasureError> {
        use crate::search::measurer::{MeasureError, TrialCounts};
        let duration =
            Duration::try_from_secs_f64(duration_s).map_err(|e| MeasureError::Failed {
                message: format!("invalid trial duration {duration_s}: {e}"),
                output: String::new(),
            })?;
        match self.0.trial(rate_pps, duration) {
            Ok(r) => {
                self.1
                    .push(serde_json::to_value(&r.hosts).unwrap_or_default());
                Ok(TrialCounts {
                    offered: r.offered,
                    received: r.received,
                    unsent: Some(r.unsent),
                    rx_dropped: Some(r.rx_dropped),
                    tx_pps: Some(r.tx_pps),
                })
            }
            Err(HostsError::Interrupted(_)) => Err(MeasureError::Interrupted),
            Err(e) => Err(MeasureError::Failed {
                message: e.to_string(),
                output: String::new(),
            }),
        }
    }

    fn hosts_of_trials(&self) -> Vec<serde_json::Value> {
        self.1.clone()
    }
}
