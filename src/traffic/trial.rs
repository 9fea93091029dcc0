//! Trials: run the generators at a rate for a duration, wait a drain interval,
//! read exact counts. The runtime stays up between trials, so a search runs
//! dozens of them back to back in one process.
//!
//! A trial, in order: the analyzers are moved to a new epoch and reset
//! (acknowledged before any packet of the trial is sent); the generators start
//! at their share of the aggregate rate; when every generator has published its
//! counts, the controller waits the drain interval for packets still on the
//! way, then asks each analyzer for its report. Packets stamped for an earlier
//! trial that arrive later are counted as `stale` and excluded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::latency::{self, Summary};
use crate::pipeline::Plan;
use crate::port::PortReport;
use crate::runtime::build::{build_with, BuildError, Built, Mode};
use crate::runtime::run::{snapshot, RunReport};
use crate::runtime::{Runtime, StartError};
use crate::time::Clock;

use super::analyzer::AnalyzerReport;

/// A trial's result: the keys of the contract, and more.
#[derive(Clone, serde::Serialize)]
pub struct TrialResult {
    /// Trial number within this runner (1, 2, ...).
    pub trial: u32,
    /// Aggregate rate asked for, packets/s.
    pub rate_pps: f64,
    /// Trial duration asked for, seconds.
    pub duration_s: f64,
    /// Packets the generators were to send: `floor(rate * duration)` each.
    pub offered: u64,
    /// Packets sent.
    pub sent: u64,
    /// Packets that could not be sent in time (counted as lost).
    pub unsent: u64,
    /// Distinct packets of this trial received.
    pub received: u64,
    /// `offered - received`: unsent and lost on the way.
    pub lost: u64,
    /// `lost / offered` (unsent counts as loss, as in MLRsearch).
    pub loss_ratio: f64,
    /// Where most of the loss happened, when there was loss (see
    /// [`LimitedBy`]); the loss itself is counted the same either way.
    pub limited_by: Option<LimitedBy>,
    /// Packets our own receiving ports dropped over the trial: missed by the
    /// device, no mbuf, dropped by the kernel at a full AF_PACKET socket ring
    /// or on the kernel interface a net_af_xdp/net_af_packet port receives
    /// from (`eth_imissed + eth_rx_nombuf + socket_rx_dropped +
    /// kernel_rx_dropped` of the ports). They are part of `lost`.
    pub rx_dropped: u64,
    /// Sent packets per second of the trial.
    pub tx_pps: f64,
    /// Received packets per second of the trial.
    pub rx_pps: f64,
    /// Duplicate packets received.
    pub duplicates: u64,
    /// Packets received out of order.
    pub reordered: u64,
    /// Packets of earlier trials that arrived during this one.
    pub stale: u64,
    /// Latency samples refused because a stamp was later than its receive
    /// time (a sender's clock ahead of ours).
    pub invalid_latency: u64,
    /// Latency over all streams.
    pub latency_ns: Summary,
    /// Gaps between consecutive transmitted bursts, over all generators: the
    /// rate's precision (a burst of 32 at 1 Mpps is due every 32 us).
    pub burst_gap_ns: Summary,
    /// Per stream, as received: a stream that arrived at several analyzers
    /// (replicas) is one entry, its counts summed and histograms merged.
    pub streams: Vec<StreamResult>,
    /// Per generator (each replica of a replicated one): what it offered,
    /// sent and could not send. These add up to the totals above.
    pub generators: BTreeMap<String, GeneratorShare>,
    /// Per analyzer (each replica of a replicated one): what it received.
    /// These add up to the totals above.
    pub analyzers: BTreeMap<String, AnalyzerShare>,
    /// Port counters over the trial (deltas).
    pub ports: BTreeMap<String, PortReport>,
    /// The pooled latency histogram (not serialized here; see stats files).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

impl std::fmt::Debug for TrialResult {
    /// The JSON form: the histogram's 60,000 buckets are left out.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_string(self) {
            Ok(s) => f.write_str(&s),
            Err(_) => f.write_str("TrialResult"),
        }
    }
}

/// Where most of a lossy trial's loss happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitedBy {
    /// The generator: packets unsent (or sent more than `max_lag` late, which
    /// counts as unsent) make up most of the loss. The device was not measured
    /// at this rate; the tool was.
    Generator,
    /// Our own receive side: drops counted by the receiving ports (missed by
    /// the device, no mbuf, the kernel's drops at net_af_packet's socket ring
    /// or at the interface net_af_xdp receives from)
    /// make up most of the loss. The device was not measured at this rate;
    /// our analyzer was.
    Receiver,
    /// Lost after leaving and not by our receiving ports: the device under
    /// test (or a receive path whose drops no counter shows).
    Dut,
}

impl LimitedBy {
    /// Classifies a trial's loss: `unsent` of the `lost` packets never left,
    /// `rx_dropped` were dropped by our receiving ports. The larger share wins
    /// when it is more than half; otherwise the device is to blame.
    pub fn of(lost: u64, unsent: u64, rx_dropped: u64) -> Option<LimitedBy> {
        if lost == 0 {
            None
        } else if unsent.saturating_mul(2) > lost {
            Some(LimitedBy::Generator)
        } else if rx_dropped.saturating_mul(2) > lost {
            Some(LimitedBy::Receiver)
        } else {
            Some(LimitedBy::Dut)
        }
    }

    /// What to change so the device, not the tool, is measured.
    pub fn advice(self) -> &'static str {
        match self {
            LimitedBy::Generator => {
                "the generator did not keep up (unsent/late packets are most of the loss): \
                 give it more lcores (another generator stage with `share`), a faster port \
                 kind (net_af_xdp instead of net_af_packet, a NIC), or a larger `max_lag` \
                 if it was only late"
            }
            LimitedBy::Receiver => {
                "our receiving port dropped most of the lost packets (missed, no mbuf, or \
                 the kernel dropped them on our side: net_af_packet's socket ring full, \
                 `socket_rx_dropped`; net_af_xdp's ring full, `kernel_rx_dropped`): give \
                 its analyzer an lcore (a core) of its own, a larger receive ring \
                 (net_af_packet's `framecnt=` vdev argument, the port's `rx_desc`) or \
                 more mbufs"
            }
            LimitedBy::Dut => {
                "the packets were lost after they left, and not by our receiving ports: \
                 in the device under test; its own counters confirm it"
            }
        }
    }
}

/// One stream's part of a trial.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StreamResult {
    /// Stream id.
    pub stream: u16,
    /// Received (distinct).
    pub received: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Reordered.
    pub reordered: u64,
    /// Latency.
    pub latency_ns: Summary,
    /// The stream's latency histogram (for plots; not serialized).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

/// A stream's counts over the analyzers it arrived at: received,
/// duplicates, reordered, and the histograms to merge.
type StreamSum<'a> = (u64, u64, u64, Vec<&'a Histogram<u64>>);

/// One generator's (or generator replica's) part of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GeneratorShare {
    /// Packets it was to send.
    pub offered: u64,
    /// Packets sent.
    pub sent: u64,
    /// Packets not sent in time.
    pub unsent: u64,
}

/// One analyzer's (or analyzer replica's) part of a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AnalyzerShare {
    /// Distinct packets of this trial received.
    pub received: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Packets out of order (within what this analyzer saw).
    pub reordered: u64,
    /// Packets of earlier trials.
    pub stale: u64,
}

/// A trial could not run.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The pipeline cannot run trials (no generator or analyzer).
    #[error("{0}")]
    Input(String),
    /// The pipeline could not be built.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The lcores could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A stage stopped answering.
    #[error("{0}")]
    Stalled(String),
    /// Interrupted by the user.
    #[error("interrupted")]
    Interrupted,
}

/// Settings of a trial runner.
#[derive(Debug, Clone, Copy)]
pub struct TrialOptions {
    /// Wait after the generators stop, for packets still on their way.
    pub drain: Duration,
    /// How often to hand the latency so far to the progress callback.
    pub stats_interval: Option<Duration>,
}

impl Default for TrialOptions {
    fn default() -> Self {
        TrialOptions {
            drain: Duration::from_millis(200),
            stats_interval: None,
        }
    }
}

/// A running pipeline that runs trials on request.
pub struct TrialRunner {
    rt: Option<Runtime>,
    built: Built,
    options: TrialOptions,
    epoch: u32,
    clock: Clock,
}

/// Port details that are levels, not counts: a trial reports them as they are.
const GAUGES: &[&str] = &["in_flight", "mbufs_in_use", "link_up", "link_speed_mbps"];

fn ports_delta(
    after: &BTreeMap<String, PortReport>,
    before: &BTreeMap<String, PortReport>,
) -> BTreeMap<String, PortReport> {
    after
        .iter()
        .map(|(name, a)| {
            let b = before.get(name).cloned().unwrap_or_default();
            (name.clone(), port_delta(a, &b))
        })
        .collect()
}

/// `a - b`, counter by counter, queue by queue.
fn port_delta(a: &PortReport, b: &PortReport) -> PortReport {
    let mut d = a.clone();
    d.rx_packets -= b.rx_packets;
    d.rx_bytes -= b.rx_bytes;
    d.tx_packets -= b.tx_packets;
    d.tx_bytes -= b.tx_bytes;
    d.dropped -= b.dropped;
    for (k, v) in d.detail.iter_mut() {
        // Gauges stay as they are now; counters become deltas (never
        // below zero: a device may reset its counters).
        if !GAUGES.contains(k) {
            *v = v.saturating_sub(b.detail.get(k).copied().unwrap_or(0));
        }
    }
    let none = PortReport::default();
    d.queues = a
        .queues
        .iter()
        .enumerate()
        .map(|(i, q)| port_delta(q, b.queues.get(i).unwrap_or(&none)))
        .collect();
    d
}

impl TrialRunner {
    /// Builds the pipeline with idle generators and starts its lcores.
    pub fn start(plan: &Plan, options: TrialOptions) -> Result<TrialRunner, TrialError> {
        let mut built = build_with(plan, Mode::Trials)?;
        if built.generators.is_empty() || built.analyzers.is_empty() {
            return Err(TrialError::Input(format!(
                "{}: trials need at least one `generator` stage and one `analyzer` stage",
                plan.pipeline.file.display()
            )));
        }
        let clock = Clock::new();
        let lcores = std::mem::take(&mut built.lcores);
        let rt = Runtime::start(lcores, clock)?;
        Ok(TrialRunner {
            rt: Some(rt),
            built,
            options,
            epoch: 0,
            clock,
        })
    }

    /// The built pipeline: its counters and controls.
    pub fn built(&self) -> &Built {
        &self.built
    }

    /// Warnings from building the pipeline.
    pub fn warnings(&self) -> &[String] {
        &self.built.warnings
    }

    fn wait(
        &self,
        what: &str,
        limit: Duration,
        interrupt: &AtomicBool,
        mut done: impl FnMut() -> bool,
    ) -> Result<(), TrialError> {
        let start = self.clock.now();
        while !done() {
            if interrupt.load(Ordering::Relaxed) {
                return Err(TrialError::Interrupted);
            }
            if self.clock.now() - start > limit {
                return Err(TrialError::Stalled(format!(
                    "{what} did not happen within {limit:?}: an lcore is stuck or starved"
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// Runs one trial at an aggregate `rate_pps` for `duration`. `progress` is
    /// called about every 100 ms with the elapsed fraction of the trial, and
    /// every `stats_interval` with the latency histogram so far.
    pub fn trial(
        &mut self,
        rate_pps: f64,
        duration: Duration,
        interrupt: &AtomicBool,
        progress: &mut dyn FnMut(f64, Option<&Histogram<u64>>),
    ) -> Result<TrialResult, TrialError> {
        self.epoch += 1;
        let epoch = self.epoch;
        for (_, a) in &self.built.analyzers {
            a.epoch.store(epoch, Ordering::Release);
        }
        let b = &self.built;
        self.wait("analyzer reset", Duration::from_secs(5), interrupt, || {
            b.analyzers
                .iter()
                .all(|(_, a)| a.ack_epoch.load(Ordering::Acquire) == epoch)
        })?;
        let before = snapshot(&self.built, 0.0).ports;
        let total_share: f64 = self.built.generators.iter().map(|g| g.2).sum();
        for (_, g, share) in &self.built.generators {
            g.start(
                epoch,
                Some(rate_pps * share / total_share),
                Some(duration),
                None,
            );
        }
        let start = self.clock.now();
        let limit = duration + Duration::from_secs(5);
        let b = &self.built;
        let mut last = start;
        let mut last_stats = start;
        self.wait("the end of the trial", limit, interrupt, || {
            let now = self.clock.now();
            if now - last >= Duration::from_millis(100) {
                last = now;
                let fraction =
                    ((now - start).as_secs_f64() / duration.as_secs_f64().max(1e-9)).min(1.0);
                let hist = match self.options.stats_interval {
                    Some(i) if now - last_stats >= i => {
                        last_stats = now;
                        self.collect(interrupt).ok().map(|r| {
                            latency::merge(
                                r.iter()
                                    .flat_map(|a| a.streams.iter().map(|s| &s.histogram)),
                            )
                        })
                    }
                    _ => None,
                };
                progress(fraction, hist.as_ref());
            }
            b.generators.iter().all(|(_, g, _)| g.is_done(epoch))
        })?;
        std::thread::sleep(self.options.drain);
        let reports = self.collect(interrupt)?;
        let after = snapshot(&self.built, 0.0).ports;
        let mut offered = 0;
        let mut sent = 0;
        let mut unsent = 0;
        let mut gaps = Vec::new();
        let mut generators = BTreeMap::new();
        for (name, g, _) in &self.built.generators {
            gaps.extend(g.gaps.pop());
            let share = GeneratorShare {
                offered: g.offered.load(Ordering::Relaxed),
                sent: g.sent.load(Ordering::Relaxed),
                unsent: g.unsent.load(Ordering::Relaxed),
            };
            offered += share.offered;
            sent += share.sent;
            unsent += share.unsent;
            generators.insert(name.clone(), share);
        }
        let hist = latency::merge(
            reports
                .iter()
                .flat_map(|a| a.streams.iter().map(|s| &s.histogram)),
        );
        let (mut received, mut duplicates, mut reordered, mut stale, mut invalid_latency) =
            (0, 0, 0, 0, 0);
        let mut analyzers = BTreeMap::new();
        // A stream may arrive at several analyzers (replicas on RSS queues):
        // its counts add up, its histograms merge.
        let mut by_stream: BTreeMap<u16, StreamSum<'_>> = BTreeMap::new();
        for ((name, _), r) in self.built.analyzers.iter().zip(&reports) {
            stale += r.stale;
            invalid_latency += r.invalid_latency;
            let mut share = AnalyzerShare {
                received: 0,
                duplicates: 0,
                reordered: 0,
                stale: r.stale,
            };
            for s in &r.streams {
                share.received += s.unique;
                share.duplicates += s.duplicates;
                share.reordered += s.reordered;
                let e = by_stream.entry(s.stream).or_default();
                e.0 += s.unique;
                e.1 += s.duplicates;
                e.2 += s.reordered;
                e.3.push(&s.histogram);
            }
            received += share.received;
            duplicates += share.duplicates;
            reordered += share.reordered;
            analyzers.insert(name.clone(), share);
        }
        let streams = by_stream
            .into_iter()
            .map(|(stream, (received, duplicates, reordered, h))| {
                let histogram = latency::merge(h);
                StreamResult {
                    stream,
                    received,
                    duplicates,
                    reordered,
                    latency_ns: Summary::of(&histogram),
                    histogram,
                }
            })
            .collect();
        let secs = duration.as_secs_f64();
        let lost = offered.saturating_sub(received);
        let ports = ports_delta(&after, &before);
        let rx_dropped: u64 = ports
            .values()
            .map(|p| {
                [
                    "eth_imissed",
                    "eth_rx_nombuf",
                    "socket_rx_dropped",
                    "kernel_rx_dropped",
                ]
                .iter()
                .map(|k| p.detail.get(k).copied().unwrap_or(0))
                .sum::<u64>()
            })
            .sum();
        Ok(TrialResult {
            trial: epoch,
            rate_pps,
            duration_s: secs,
            offered,
            sent,
            unsent,
            received,
            lost,
            loss_ratio: if offered == 0 {
                0.0
            } else {
                lost as f64 / offered as f64
            },
            limited_by: LimitedBy::of(lost, unsent, rx_dropped),
            rx_dropped,
            tx_pps: sent as f64 / secs,
            rx_pps: received as f64 / secs,
            duplicates,
            reordered,
            stale,
            invalid_latency,
            latency_ns: Summary::of(&hist),
            burst_gap_ns: Summary::of(&latency::merge(gaps.iter())),
            streams,
            generators,
            analyzers,
            ports,
            histogram: hist,
        })
    }

    /// Each analyzer's current report (mid-trial too: histograms are cumulative).
    pub fn collect(&self, interrupt: &AtomicBool) -> Result<Vec<AnalyzerReport>, TrialError> {
        let mut out = Vec::new();
        for (name, a) in &self.built.analyzers {
            while a.reports.pop().is_some() {}
            a.request.fetch_add(1, Ordering::Release);
            let mut got = None;
            self.wait(
                &format!("a report from analyzer `{name}`"),
                Duration::from_secs(5),
                interrupt,
                || {
                    got = a.reports.pop();
                    got.is_some()
                },
            )?;
            out.extend(got);
        }
        Ok(out)
    }

    /// Stops the lcores and returns the pipeline's counters over all trials.
    pub fn finish(mut self) -> RunReport {
        let mut report = snapshot(&self.built, 0.0);
        if let Some(rt) = self.rt.take() {
            rt.begin_drain();
            std::thread::sleep(Duration::from_millis(10));
            let (_, details) = rt.stop();
            report = snapshot(&self.built, 0.0);
            for (name, d) in details {
                crate::runtime::run::attach_detail(&self.built, &mut report, &name, d);
            }
        }
        report
    }
}

impl Drop for TrialRunner {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            let _ = rt.stop();
        }
    }
}
