//! What every searcher speaks: goals, the configuration, trial requests and
//! records, results, and the `Searcher` trait.

use serde::{Deserialize, Serialize};

use super::measurer::TrialCounts;

/// One loss-ratio goal: find the highest rate whose trials stay within `loss_ratio`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// A short name for reports ("NDR", "PDR", ...).
    pub name: String,
    /// The loss ratio a trial may have and still count as good (0 for NDR).
    pub loss_ratio: f64,
    /// The final relative width `1 - lower/upper` the bounds must reach.
    pub width: f64,
    /// Draft mode: the share of the duration sum that may come from bad trials (0 = none).
    pub exceed_ratio: f64,
    /// Draft mode: the trial duration sum (s) needed to classify a load; `None` means one
    /// trial at the final duration (the seed's conservative behaviour).
    pub duration_sum: Option<f64>,
}

impl Goal {
    /// A conservative goal (single final trial decides, like the seed).
    pub fn new(name: impl Into<String>, loss_ratio: f64, width: f64) -> Goal {
        Goal {
            name: name.into(),
            loss_ratio,
            width,
            exceed_ratio: 0.0,
            duration_sum: None,
        }
    }

    /// Whether this goal uses the draft's exceed-ratio / duration-sum classification.
    pub fn is_draft_mode(&self) -> bool {
        self.exceed_ratio > 0.0 || self.duration_sum.is_some()
    }
}

/// Search parameters (CSIT defaults via [`SearchConfig::csit`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchConfig {
    /// Minimum transmit rate (packets/s).
    pub min_rate: f64,
    /// Maximum transmit rate (packets/s).
    pub max_rate: f64,
    /// Final trial duration (s).
    pub final_duration: f64,
    /// Initial trial duration (s).
    pub initial_duration: f64,
    /// Number of intermediate phases.
    pub phases: u32,
    /// The goals, searched at once.
    pub goals: Vec<Goal>,
    /// Stop (with `timed_out`) before a trial would take the accounted time past this (s).
    pub time_budget: Option<f64>,
    /// Time added per trial to the accounted time (setup, warm-up), seconds.
    pub trial_overhead: f64,
    /// Seed-exact mode: re-measure upper bounds at each phase's duration, and move external
    /// search steps by two interval widths with no forwarding-rate hint. Off by default: a
    /// trial that already loses too much at a shorter duration is accepted as an upper bound
    /// (as MLRsearch and the draft do), external steps double the interval, and a trial that
    /// lost far more than the goal allows sends the lower bound straight to its forwarding
    /// rate.
    pub seed_exact: bool,
}

impl SearchConfig {
    /// CSIT's defaults: 2 x 10 kpps .. 2 x 14.88 Mpps, final 30 s, initial 1 s, width 0.5 %,
    /// NDR and PDR (PLR 0.5 %), 2 intermediate phases.
    pub fn csit() -> SearchConfig {
        SearchConfig {
            min_rate: 2.0 * 10e3,
            max_rate: 2.0 * 14.88e6,
            final_duration: 30.0,
            initial_duration: 1.0,
            phases: 2,
            goals: vec![Goal::new("NDR", 0.0, 0.005), Goal::new("PDR", 0.005, 0.005)],
            time_budget: None,
            trial_overhead: 0.0,
            seed_exact: false,
        }
    }

    /// Checks the parameters; every error is bad input (exit status 2).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |s: String| Err(ConfigError(s));
        if !(self.min_rate > 0.0 && self.min_rate.is_finite()) {
            return bad(format!("min rate {} must be positive", self.min_rate));
        }
        if !(self.max_rate.is_finite() && self.min_rate < self.max_rate) {
            return bad(format!(
                "min rate {} must be below max rate {}",
                self.min_rate, self.max_rate
            ));
        }
        if !(self.initial_duration > 0.0 && self.initial_duration.is_finite()) {
            return bad("initial duration must be positive".into());
        }
        if !(self.final_duration >= self.initial_duration && self.final_duration.is_finite()) {
            return bad("final duration must be at least the initial duration".into());
        }
        if self.phases > 16 {
            return bad("at most 16 intermediate phases".into());
        }
        if self.goals.is_empty() {
            return bad("at least one goal is needed".into());
        }
        for g in &self.goals {
            if !(0.0..1.0).contains(&g.loss_ratio) {
                return bad(format!(
                    "goal {}: loss ratio {} must be in [0, 1)",
                    g.name, g.loss_ratio
                ));
            }
            if !(g.width > 0.0 && g.width < 1.0) {
                return bad(format!(
                    "goal {}: width {} must be in (0, 1)",
                    g.name, g.width
                ));
            }
            if !(0.0..1.0).contains(&g.exceed_ratio) {
                return bad(format!(
                    "goal {}: exceed ratio {} must be in [0, 1)",
                    g.name, g.exceed_ratio
                ));
            }
            if let Some(s) = g.duration_sum {
                if !(s >= self.final_duration && s.is_finite()) {
                    return bad(format!(
                        "goal {}: duration sum {s} must be at least the final duration",
                        g.name
                    ));
                }
            }
        }
        if !(self.trial_overhead >= 0.0 && self.trial_overhead.is_finite()) {
            return bad("trial overhead must not be negative".into());
        }
        if let Some(b) = self.time_budget {
            if b.is_nan() || b <= 0.0 {
                return bad("time budget must be positive".into());
            }
        }
        Ok(())
    }
}

/// Invalid search parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid search parameters: {0}")]
pub struct ConfigError(pub String);

/// The phase a trial belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Maximum rate, MRR, MRR2.
    Initial,
    /// Intermediate phase `n` (1-based).
    Intermediate(u32),
    /// The final phase.
    Final,
    /// Plain binary search for goal `n` (0-based).
    Binary(u32),
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::Initial => write!(f, "initial"),
            Phase::Intermediate(n) => write!(f, "intermediate {n}"),
            Phase::Final => write!(f, "final"),
            Phase::Binary(n) => write!(f, "binary goal {n}"),
        }
    }
}

/// A trial the searcher wants measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialRequest {
    /// Phase of the trial.
    pub phase: Phase,
    /// Transmit rate (packets/s).
    pub rate_pps: f64,
    /// Trial duration (s).
    pub duration_s: f64,
}

/// A measured trial, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// Phase of the trial.
    pub phase: Phase,
    /// Transmit rate (packets/s).
    pub rate_pps: f64,
    /// Trial duration (s).
    pub duration_s: f64,
    /// Packets offered, as the measurer reports them (sent, or intended: see `unsent`).
    pub offered: u64,
    /// Packets received.
    pub received: u64,
    /// Loss ratio; packets that should have been sent but were not count as lost.
    pub loss_ratio: f64,
    /// Packets intended (`floor(rate * duration)`) but never sent, when the measurer knows
    /// (its unsent count plus any shortfall of its offered count); None: unknown. They are
    /// part of the loss ratio; `offered - received - unsent` were lost on the way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<u64>,
    /// Of the lost packets, those our own receiving side dropped, when the measurer
    /// knows (see [`super::TrialCounts::rx_dropped`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_dropped: Option<u64>,
    /// Where most of the loss happened, when the measurer reports unsent packets and
    /// there was loss: `generator` when unsent packets are most of it, `receiver` when
    /// our receiving side's drops are, else `dut`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<crate::trial::LimitedBy>,
    /// The rate the generators actually sent at, when the measurer knows it
    /// (see [`super::TrialCounts::tx_pps`]). Reported only: the search judges
    /// the trial at `rate_pps`, the load it offered (MLRsearch's semantics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_pps: Option<f64>,
    /// Accounted search time at the end of this trial (s).
    pub end_s: f64,
    /// The trial came from an earlier, interrupted run (`search --resume`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
}

impl TrialRecord {
    /// Builds a record; the intended count is `floor(rate * duration)`, and unsent packets
    /// (intended minus offered) count as loss.
    pub fn new(req: &TrialRequest, counts: TrialCounts, end_s: f64) -> TrialRecord {
        let intended = (req.rate_pps * req.duration_s).floor().max(0.0) as u64;
        let base = intended.max(counts.offered);
        let lost = base.saturating_sub(counts.received);
        let loss_ratio = if base == 0 {
            0.0
        } else {
            lost as f64 / base as f64
        };
        let unsent = counts
            .unsent
            .map(|u| u + intended.saturating_sub(counts.offered));
        TrialRecord {
            limited_by: unsent
                .and_then(|u| crate::trial::LimitedBy::of(lost, u, counts.rx_dropped.unwrap_or(0))),
            rx_dropped: counts.rx_dropped,
            tx_pps: counts.tx_pps,
            phase: req.phase,
            rate_pps: req.rate_pps,
            duration_s: req.duration_s,
            offered: counts.offered,
            received: counts.received,
            loss_ratio,
            unsent,
            end_s,
            resumed: false,
        }
    }
}

/// The result for one goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalResult {
    /// The goal.
    pub goal: Goal,
    /// Highest rate known to meet the goal (None: even the minimum rate fails).
    pub lower_pps: Option<f64>,
    /// Lowest rate known to fail the goal (None: even the maximum rate meets it).
    pub upper_pps: Option<f64>,
    /// Relative width `1 - lower/upper` reached (when both bounds exist).
    pub width: Option<f64>,
    /// Trials measured at the lower bound rate (the evidence behind `lower_pps`).
    pub trial_count: usize,
    /// Sum of the durations of those trials (s).
    pub trial_duration_sum_s: f64,
    /// Irregular outcome: no loss (within the goal) even at the maximum rate, so
    /// `lower_pps` is only a lower bound of the real capacity.
    pub max_rate_is_lower_bound: bool,
    /// Irregular outcome, a clear failure: the minimum rate already fails the goal.
    pub min_rate_fails: bool,
    /// The search stopped (time budget) before this goal's bounds were confirmed.
    pub incomplete: bool,
}

/// The result of a search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Per goal, in the configured order.
    pub goals: Vec<GoalResult>,
    /// The time budget ran out.
    pub timed_out: bool,
    /// Number of trials.
    pub trial_count: usize,
    /// Sum of trial durations (s), overheads excluded.
    pub trial_duration_sum_s: f64,
}

/// A sans-IO searcher: it proposes trials and takes back their counts.
///
/// Call [`Searcher::next_trial`]; measure the returned request; pass the counts to
/// [`Searcher::record`]; repeat until `next_trial` returns `None`, then read
/// [`Searcher::outcome`]. Calling `next_trial` twice without `record` returns the same trial.
pub trait Searcher {
    /// The next trial to measure, or `None` when the search is over.
    fn next_trial(&mut self) -> Option<TrialRequest>;
    /// Takes the counts of the trial last returned by `next_trial`.
    fn record(&mut self, counts: TrialCounts);
    /// Every trial so far.
    fn trials(&self) -> &[TrialRecord];
    /// The current (or, once `next_trial` returned `None`, final) result.
    fn outcome(&self) -> Outcome;
    /// Phase boundaries so far: (accounted time in s, phase that starts there).
    fn phase_starts(&self) -> Vec<(f64, Phase)>;
    /// The parameters.
    fn config(&self) -> &SearchConfig;
    /// `"mdr"` or `"binary"`.
    fn algorithm(&self) -> &'static str;
}
