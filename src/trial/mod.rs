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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::latency::variation::{
    merged_jitter, PdvSummary, SignedHistogram, SignedSummary, Variation,
};
use crate::latency::{self, Summary};
use crate::pipeline::build::{build_with, BuildError, Built, Mode};
use crate::pipeline::Plan;
use crate::port::PortReport;
use crate::runtime::run::{snapshot, RunReport};
use crate::runtime::{Runtime, StartError};
use crate::time::Clock;
use crate::traffic::analyzer::AnaControl;
use crate::traffic::generator::{GenControl, TrialGenerator};

use crate::traffic::analyzer::{AnalyzerReport, EncapReport};

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
    /// The rate the packets actually went out at, over the time they went
    /// out in, never over `duration_s`: the packets sent after each
    /// generator's first burst over `tx_span_s` (the first burst's packets
    /// went out at the span's start, the others within it). A generator that
    /// kept its rate shows `rate_pps`; one that stalled, sent late past the
    /// end (within `max_lag`) or stopped early shows what it achieved. The
    /// trial's load, which the search judges, is the offered `rate_pps`.
    /// When every generator sent everything in one burst there is no span to
    /// measure: `sent / duration_s` then.
    pub tx_pps: f64,
    /// The send span in seconds: the longest generator's time from its first
    /// burst to its last (generators run side by side). 0 when at most one
    /// burst went out.
    pub tx_span_s: f64,
    /// The rate the packets arrived at, counted the same way: the packets
    /// received after each analyzer's first receive burst over `rx_span_s`,
    /// drain included, never over `duration_s` (`received / duration_s` when
    /// everything arrived in one burst).
    pub rx_pps: f64,
    /// The receive span in seconds: the longest analyzer's time from its
    /// first to its last receive burst holding packets of this trial
    /// (clocked once per burst, not per packet). 0 when at most one did.
    pub rx_span_s: f64,
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
    /// The analyzers' counts per VLAN id, QinQ pair, outer MPLS label or
    /// VNI (they sum to `received` when every id fits the table), and the
    /// stamped packets that arrived in an encapsulation not expected.
    pub encap: EncapReport,
    /// Per generator (each replica of a replicated one): what it offered,
    /// sent and could not send. These add up to the totals above.
    pub generators: BTreeMap<String, GeneratorShare>,
    /// Per analyzer (each replica of a replicated one): what it received.
    /// These add up to the totals above.
    pub analyzers: BTreeMap<String, AnalyzerShare>,
    /// Port counters over the trial (deltas).
    pub ports: BTreeMap<String, PortReport>,
    /// Across hosts: each host's part (its generators, analyzers, ports and
    /// their totals), by host name. Empty for one process.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, HostSection>,
    /// Across hosts: whether the latency is one-way latency, and why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockNote>,
    /// Across hosts: what coordinating the ranks cost this trial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timing: Option<HostsTiming>,
    /// The pooled latency histogram (not serialized here; see stats files).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
}

/// One host's part of a trial across hosts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostSection {
    /// The MPI rank that played it.
    pub rank: usize,
    /// Its generators' offered packets.
    pub offered: u64,
    /// Its generators' sent packets.
    pub sent: u64,
    /// Its generators' unsent packets.
    pub unsent: u64,
    /// Its analyzers' distinct received packets.
    pub received: u64,
    /// Its analyzers' duplicates.
    pub duplicates: u64,
    /// Its analyzers' reordered packets.
    pub reordered: u64,
    /// Per generator.
    pub generators: BTreeMap<String, GeneratorShare>,
    /// Per analyzer.
    pub analyzers: BTreeMap<String, AnalyzerShare>,
    /// Its ports' counters over the trial (the drops of each cause are in
    /// their details).
    pub ports: BTreeMap<String, PortReport>,
    /// From the barrier that started the trial to its first packet, in ns
    /// (hosts with generators).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
}

impl HostSection {
    /// The section of `part`, played by `rank`, of a trial of `duration`.
    pub fn of(rank: usize, part: &TrialPart, duration: Duration) -> HostSection {
        let r = assemble(
            0,
            0.0,
            duration,
            std::slice::from_ref(part),
            &BTreeSet::new(),
        );
        HostSection {
            rank,
            offered: r.offered,
            sent: r.sent,
            unsent: r.unsent,
            received: r.received,
            duplicates: r.duplicates,
            reordered: r.reordered,
            generators: r.generators,
            analyzers: r.analyzers,
            ports: r.ports,
            start_ns: part.start_ns,
        }
    }
}

/// Across hosts: the cost of coordinating a trial's ranks.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct HostsTiming {
    /// The slowest host's time from the barrier that starts the trial to
    /// its first packet, in ns.
    pub start_ns: Option<u64>,
    /// Rank 0's time from having its own part (its analyzers' reports) to
    /// the assembled result: every rank's status, then their parts encoded,
    /// gathered, decoded and added up.
    pub reduce_ns: u64,
}

/// Across hosts: what the latency of a trial means.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClockNote {
    /// `tai` when every host stamps with CLOCK_TAI, else `monotonic`.
    pub clock: String,
    /// Whether every stream's latency is in the result.
    pub latency: bool,
    /// Which streams have no latency and why; empty when all have.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub why: String,
    /// With `tai`: the largest measured bound on the offset between a
    /// host's clock and rank 0's, in ns (one-way latencies are exact to
    /// within it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_bound_ns: Option<u64>,
}

impl TrialResult {
    /// How far the achieved send rate (`tx_pps`) fell short of the offered
    /// `rate_pps`, as a fraction of it, when by more than
    /// [`TX_SHORT_TOLERANCE`]: the generators did not keep the rate. Only
    /// reported; the search judges the trial at the offered rate.
    pub fn tx_shortfall(&self) -> Option<f64> {
        if self.rate_pps <= 0.0 {
            return None;
        }
        let short = 1.0 - self.tx_pps / self.rate_pps;
        (short > TX_SHORT_TOLERANCE).then_some(short)
    }
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
    /// PDV (RFC 5481): latency percentiles minus the stream's smallest
    /// latency, from the merged histogram (exact across analyzers).
    pub pdv_ns: PdvSummary,
    /// IPDV (RFC 3393), signed: differences of consecutive packets' delays,
    /// from the merged IPDV histograms (exact across analyzers).
    pub ipdv_ns: SignedSummary,
    /// RFC 3550 inter-arrival jitter, ns; a stream received by several
    /// analyzers has the mean of theirs weighted by their samples.
    pub jitter_ns: f64,
    /// Packets in an encapsulation the analyzers did not expect (not in
    /// `received`).
    pub unexpected_encap: u64,
    /// The stream's latency histogram (for plots; not serialized).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
    /// The stream's merged IPDV histograms (for plots; not serialized).
    #[serde(skip)]
    pub ipdv: SignedHistogram,
}

impl StreamResult {
    /// Stream `stream` over the analyzers it arrived at: counts added,
    /// histograms merged, jitter weighted.
    fn of(stream: u16, (received, duplicates, reordered, h, v): StreamSum<'_>) -> StreamResult {
        let histogram = latency::merge(h);
        let mut ipdv = SignedHistogram::default();
        for part in &v {
            ipdv.add(&part.ipdv);
        }
        StreamResult {
            stream,
            received,
            duplicates,
            reordered,
            latency_ns: Summary::of(&histogram),
            pdv_ns: PdvSummary::of(&histogram),
            ipdv_ns: SignedSummary::of(&ipdv),
            jitter_ns: merged_jitter(v.iter().copied()),
            unexpected_encap: 0,
            histogram,
            ipdv,
        }
    }
}

/// A stream's counts over the analyzers it arrived at: received,
/// duplicates, reordered, the histograms to merge and the delay variations.
type StreamSum<'a> = (u64, u64, u64, Vec<&'a Histogram<u64>>, Vec<&'a Variation>);

/// One generator's (or generator replica's) part of a trial.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GeneratorShare {
    /// Packets it was to send.
    pub offered: u64,
    /// Packets sent.
    pub sent: u64,
    /// Packets not sent in time.
    pub unsent: u64,
    /// Its send span: from its first burst to its last, in seconds (see
    /// [`TrialResult::tx_span_s`]).
    pub tx_span_s: f64,
    /// The rate it actually sent at (see [`TrialResult::tx_pps`]); set by
    /// [`assemble`].
    pub tx_pps: f64,
    /// Packets it sent in its first burst (not serialized: the rate counts
    /// the packets after it).
    #[serde(skip)]
    pub tx_first_burst: u64,
}

impl GeneratorShare {
    /// The share of a generator that sent `sent` of `offered` packets,
    /// `tx_first_burst` of them in its first burst and the rest over the
    /// `tx_span_ns` to its last; [`assemble`] works out its rate.
    pub fn new(
        offered: u64,
        sent: u64,
        unsent: u64,
        tx_span_ns: u64,
        tx_first_burst: u64,
    ) -> GeneratorShare {
        GeneratorShare {
            offered,
            sent,
            unsent,
            tx_span_s: tx_span_ns as f64 / 1e9,
            tx_pps: 0.0,
            tx_first_burst,
        }
    }

    /// The span in ns, as measured (for the wire between hosts).
    pub fn tx_span_ns(&self) -> u64 {
        (self.tx_span_s * 1e9).round() as u64
    }
}

/// The rate of `count` packets of which `first` came in a first burst at
/// the start of a span of `span_s` to the last burst: the packets after the
/// first burst over the span (exact for evenly paced packets, however few).
/// Without a span (at most one burst) the rate cannot be measured: `count`
/// over the trial's `duration_s` then. 0 for no packets.
fn rate_over(count: u64, first: u64, span_s: f64, duration_s: f64) -> f64 {
    if count == 0 {
        0.0
    } else if span_s > 0.0 {
        count.saturating_sub(first) as f64 / span_s
    } else if duration_s > 0.0 {
        count as f64 / duration_s
    } else {
        0.0
    }
}

/// How far below the offered rate the achieved send rate may fall before
/// the output says the generators did not keep the rate (1 %).
pub const TX_SHORT_TOLERANCE: f64 = 0.01;

/// One analyzer's (or analyzer replica's) part of a trial.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct AnalyzerShare {
    /// Distinct packets of this trial received.
    pub received: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Packets out of order (within what this analyzer saw).
    pub reordered: u64,
    /// Packets of earlier trials.
    pub stale: u64,
    /// From its first to its last receive burst with packets of this trial,
    /// in seconds (see [`TrialResult::rx_span_s`]).
    pub rx_span_s: f64,
    /// The rate they arrived at (see [`TrialResult::rx_pps`]).
    pub rx_pps: f64,
    /// Packets of this trial in its first receive burst (not serialized:
    /// the arrival rate counts the packets after it).
    #[serde(skip)]
    pub rx_first_burst: u64,
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
    /// The generators the build handed over: (name, control, share).
    generators: Vec<(String, Arc<GenControl>, f64)>,
    /// The analyzers the build handed over: (name, control).
    analyzers: Vec<(String, Arc<AnaControl>)>,
    options: TrialOptions,
    epoch: u32,
    clock: Clock,
    /// Port counters when the current trial was armed.
    before: BTreeMap<String, PortReport>,
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
        TrialRunner::start_with(plan, options, true)
    }

    /// As [`TrialRunner::start`], for one host's part of a run across hosts:
    /// the part may have no generator or no analyzer (a DUT host has
    /// neither); the whole file is checked for both before.
    pub fn start_part(plan: &Plan, options: TrialOptions) -> Result<TrialRunner, TrialError> {
        TrialRunner::start_with(plan, options, false)
    }

    fn start_with(
        plan: &Plan,
        options: TrialOptions,
        whole: bool,
    ) -> Result<TrialRunner, TrialError> {
        let mut built = build_with(plan, Mode::Trials)?;
        let generators: Vec<(String, Arc<GenControl>, f64)> = built
            .controls
            .all::<TrialGenerator>()
            .map(|(n, g)| (n.to_string(), g.control.clone(), g.share))
            .collect();
        let analyzers: Vec<(String, Arc<AnaControl>)> = built
            .controls
            .all::<AnaControl>()
            .map(|(n, a)| (n.to_string(), a))
            .collect();
        if whole && (generators.is_empty() || analyzers.is_empty()) {
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
            generators,
            analyzers,
            options,
            epoch: 0,
            clock,
            before: BTreeMap::new(),
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
        let epoch = self.epoch + 1;
        self.arm(epoch, interrupt)?;
        let share = self.share();
        self.launch(epoch, rate_pps, share, duration);
        self.wait_generators(epoch, duration, interrupt, progress)?;
        std::thread::sleep(self.options.drain);
        let part = self.part(interrupt)?;
        Ok(assemble(
            epoch,
            rate_pps,
            duration,
            &[part],
            &BTreeSet::new(),
        ))
    }

    /// The sum of this runner's generators' shares of a trial's rate.
    pub fn share(&self) -> f64 {
        self.generators.iter().map(|g| g.2).sum()
    }

    /// When this runner's earliest generator sent the last trial's first
    /// packet (ns, monotonic); None without generators.
    pub fn first_packet_ns(&self) -> Option<u64> {
        self.generators
            .iter()
            .map(|(_, g, _)| g.first_ns.load(Ordering::Relaxed))
            .min()
    }

    /// The drain interval of the options.
    pub fn drain(&self) -> Duration {
        self.options.drain
    }

    /// First step of a trial: moves the analyzers to trial `epoch` (reset,
    /// acknowledged) and notes the port counters the trial's deltas start
    /// from. Across hosts every rank arms before any generator starts.
    pub fn arm(&mut self, epoch: u32, interrupt: &AtomicBool) -> Result<(), TrialError> {
        self.epoch = epoch;
        for (_, a) in &self.analyzers {
            a.epoch.store(epoch, Ordering::Release);
        }
        let analyzers = &self.analyzers;
        self.wait("analyzer reset", Duration::from_secs(5), interrupt, || {
            analyzers
                .iter()
                .all(|(_, a)| a.ack_epoch.load(Ordering::Acquire) == epoch)
        })?;
        self.before = snapshot(&self.built, 0.0).ports;
        Ok(())
    }

    /// Starts this runner's generators on trial `epoch`: each gets its share
    /// of `rate_pps`, out of `total_share` (the shares of every generator of
    /// the run, on every host).
    pub fn launch(&self, epoch: u32, rate_pps: f64, total_share: f64, duration: Duration) {
        for (_, g, share) in &self.generators {
            g.start(
                epoch,
                Some(rate_pps * share / total_share),
                Some(duration),
                None,
            );
        }
    }

    /// Waits until this runner's generators have finished trial `epoch`
    /// (at most `duration`, their largest `max_lag` and 5 s), calling
    /// `progress` on the way.
    pub fn wait_generators(
        &self,
        epoch: u32,
        duration: Duration,
        interrupt: &AtomicBool,
        progress: &mut dyn FnMut(f64, Option<&Histogram<u64>>),
    ) -> Result<(), TrialError> {
        let start = self.clock.now();
        let generators = &self.generators;
        // A generator late by up to its `max_lag` still sends after the end.
        let lag = generators
            .iter()
            .map(|(_, g, _)| g.max_lag_ns.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0);
        let limit = duration + Duration::from_nanos(lag) + Duration::from_secs(5);
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
            generators.iter().all(|(_, g, _)| g.is_done(epoch))
        })
    }

    /// This runner's part of the trial so far: its generators' counts, its
    /// analyzers' reports and its ports' deltas since [`TrialRunner::arm`].
    /// Call it after the drain.
    pub fn part(&self, interrupt: &AtomicBool) -> Result<TrialPart, TrialError> {
        let reports = self.collect(interrupt)?;
        let after = snapshot(&self.built, 0.0).ports;
        let mut part = TrialPart {
            ports: ports_delta(&after, &self.before),
            ..TrialPart::default()
        };
        for (name, g, _) in &self.generators {
            part.gaps.extend(g.gaps.pop());
            part.generators.insert(
                name.clone(),
                GeneratorShare::new(
                    g.offered.load(Ordering::Relaxed),
                    g.sent.load(Ordering::Relaxed),
                    g.unsent.load(Ordering::Relaxed),
                    g.tx_span_ns(),
                    g.first_burst.load(Ordering::Relaxed),
                ),
            );
        }
        part.analyzers = self
            .analyzers
            .iter()
            .map(|(name, _)| name.clone())
            .zip(reports)
            .collect();
        Ok(part)
    }

    /// Each analyzer's current report (mid-trial too: histograms are cumulative).
    pub fn collect(&self, interrupt: &AtomicBool) -> Result<Vec<AnalyzerReport>, TrialError> {
        let mut out = Vec::new();
        for (name, a) in &self.analyzers {
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

/// One process's part of a trial (one host's, across hosts): what its
/// generators sent, what its analyzers received and its ports' deltas.
/// [`assemble`] adds parts up exactly.
#[derive(Debug, Clone, Default)]
pub struct TrialPart {
    /// Per generator.
    pub generators: BTreeMap<String, GeneratorShare>,
    /// The generators' burst-gap histograms.
    pub gaps: Vec<Histogram<u64>>,
    /// Per analyzer, its report.
    pub analyzers: Vec<(String, AnalyzerReport)>,
    /// Port counters over the trial (deltas).
    pub ports: BTreeMap<String, PortReport>,
    /// Across hosts: from the barrier that started the trial to this part's
    /// first packet, in ns (None without generators).
    pub start_ns: Option<u64>,
}

/// The trial result of `parts` (one per host, or one for a single process):
/// counts are sums (saturating: parts may come from another rank), a stream
/// seen by several analyzers is one entry, and histograms are merged, never
/// averaged. The latency samples of the streams in `no_latency` (part index,
/// stream id) are left out: their stamps were written on a clock the
/// receiving host cannot compare with its own.
pub fn assemble(
    epoch: u32,
    rate_pps: f64,
    duration: Duration,
    parts: &[TrialPart],
    no_latency: &BTreeSet<(usize, u16)>,
) -> TrialResult {
    let empty = latency::merge(std::iter::empty());
    let (mut offered, mut sent, mut unsent) = (0u64, 0u64, 0u64);
    // The generators run side by side (across hosts too, on clocks that
    // cannot be compared): the longest one's span is the trial's.
    let (mut tx_span_s, mut tx_first_bursts) = (0f64, 0u64);
    let secs = duration.as_secs_f64();
    let mut generators = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for p in parts {
        for (name, g) in &p.generators {
            offered = offered.saturating_add(g.offered);
            sent = sent.saturating_add(g.sent);
            unsent = unsent.saturating_add(g.unsent);
            tx_span_s = tx_span_s.max(g.tx_span_s);
            tx_first_bursts = tx_first_bursts.saturating_add(g.tx_first_burst);
            let mut g = *g;
            g.tx_pps = rate_over(g.sent, g.tx_first_burst, g.tx_span_s, secs);
            generators.insert(name.clone(), g);
        }
        ports.extend(p.ports.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let (mut received, mut duplicates, mut reordered, mut stale, mut invalid_latency) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut rx_span_s, mut rx_first_bursts) = (0f64, 0u64);
    let mut analyzers = BTreeMap::new();
    // A stream may arrive at several analyzers (replicas on RSS queues):
    // its counts add up, its histograms merge.
    let mut by_stream: BTreeMap<u16, StreamSum<'_>> = BTreeMap::new();
    let mut encap = EncapReport::default();
    let mut unexpected: BTreeMap<u16, u64> = BTreeMap::new();
    for (i, p) in parts.iter().enumerate() {
        for (name, r) in &p.analyzers {
            encap.add(&r.encap);
            for s in &r.streams {
                let u = unexpected.entry(s.stream).or_default();
                *u = u.saturating_add(s.unexpected_encap);
            }
            stale = stale.saturating_add(r.stale);
            invalid_latency = invalid_latency.saturating_add(r.invalid_latency);
            let rx_span = r.rx_span_ns as f64 / 1e9;
            let mut share = AnalyzerShare {
                received: 0,
                duplicates: 0,
                reordered: 0,
                stale: r.stale,
                rx_span_s: rx_span,
                rx_pps: 0.0,
                rx_first_burst: r.rx_first_burst,
            };
            for s in &r.streams {
                share.received = share.received.saturating_add(s.unique);
                share.duplicates = share.duplicates.saturating_add(s.duplicates);
                share.reordered = share.reordered.saturating_add(s.reordered);
                let e = by_stream.entry(s.stream).or_default();
                e.0 = e.0.saturating_add(s.unique);
                e.1 = e.1.saturating_add(s.duplicates);
                e.2 = e.2.saturating_add(s.reordered);
                e.3.push(if no_latency.contains(&(i, s.stream)) {
                    &empty
                } else {
                    &s.histogram
                });
                // Differences of delays need no common clock: kept always.
                e.4.push(&s.variation);
            }
            received = received.saturating_add(share.received);
            duplicates = duplicates.saturating_add(share.duplicates);
            reordered = reordered.saturating_add(share.reordered);
            share.rx_pps = rate_over(share.received, r.rx_first_burst, rx_span, secs);
            rx_span_s = rx_span_s.max(rx_span);
            rx_first_bursts = rx_first_bursts.saturating_add(r.rx_first_burst);
            analyzers.insert(name.clone(), share);
        }
    }
    let hist = latency::merge(by_stream.values().flat_map(|e| e.3.iter().copied()));
    let streams = by_stream
        .into_iter()
        .map(|(stream, sum)| {
            let mut r = StreamResult::of(stream, sum);
            r.unexpected_encap = unexpected.get(&stream).copied().unwrap_or(0);
            r
        })
        .collect();
    let lost = offered.saturating_sub(received);
    let rx_dropped: u64 = ports
        .values()
        .map(|p: &PortReport| {
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
    TrialResult {
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
        tx_pps: rate_over(sent, tx_first_bursts, tx_span_s, secs),
        tx_span_s,
        rx_pps: rate_over(received, rx_first_bursts, rx_span_s, secs),
        rx_span_s,
        duplicates,
        reordered,
        stale,
        invalid_latency,
        latency_ns: Summary::of(&hist),
        burst_gap_ns: Summary::of(&latency::merge(parts.iter().flat_map(|p| p.gaps.iter()))),
        streams,
        encap,
        generators,
        analyzers,
        ports,
        hosts: BTreeMap::new(),
        clock: None,
        timing: None,
        histogram: hist,
    }
}

#[cfg(test)]
mod test;
