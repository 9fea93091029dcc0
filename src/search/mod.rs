//! NDR/PDR search: the sans-IO MDR core (FD.io CSIT's Multiple Drop Rate search, generalised
//! to any number of loss-ratio goals), a plain binary search for comparison, the measurers
//! (simulated device, external command; the pipeline trial measurer plugs into the same
//! [`Measurer`] trait), the JSON report and the plot.
//!
//! ```
//! use linerate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};
//!
//! let model: SimModel = "ndr=12e6,pdr=12.24e6,plr=0.005".parse().unwrap();
//! let mut search = MdrSearch::new(SearchConfig::csit()).unwrap();
//! let report = drive(&mut search, &mut SimDut::new(model), &mut |_, _| {}).unwrap();
//! let ndr = &report.outcome.goals[0];
//! assert!(ndr.lower_pps.unwrap() <= 12e6 && 12e6 <= ndr.upper_pps.unwrap());
//! ```
#![forbid(unsafe_code)]

pub mod binary;

pub mod grid;
pub mod mdr;
pub mod measurer;

pub mod sim;
pub mod types;

pub use binary::BinarySearch;
pub use grid::Grid;
pub use mdr::{Interval, MdrSearch};
pub use measurer::{CommandMeasurer, MeasureError, Measurer, TrialCounts};
pub use sim::{SimDut, SimModel};
pub use types::{
    ConfigError, Goal, GoalResult, Outcome, Phase, SearchConfig, Searcher, TrialRecord,
    TrialRequest,
};

use serde::{Deserialize, Serialize};

/// Everything a search produced: the JSON report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// `"mdr"` or `"binary"`.
    pub algorithm: String,
    /// The parameters.
    pub config: SearchConfig,
    /// Every trial, in order.
    pub trials: Vec<TrialRecord>,
    /// Where each phase starts (accounted seconds).
    pub phases: Vec<PhaseStart>,
    /// The per-goal result.
    pub outcome: Outcome,
}

/// The start of a phase in a report.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PhaseStart {
    /// Accounted search time (s) when the phase's first trial started.
    pub start_s: f64,
    /// The phase.
    pub phase: Phase,
}

/// A measurer failure during a search, with the trials measured before it.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct DriveError {
    /// The measurer's error (with its output).
    pub error: MeasureError,
    /// The trials completed before the failure.
    pub trials: Vec<TrialRecord>,
}

/// Runs a searcher against a measurer until it ends; `progress` sees each trial and the
/// outcome so far. The loop is the only place where trials take real (or simulated) time.
pub fn drive(
    searcher: &mut dyn Searcher,
    measurer: &mut dyn Measurer,
    progress: &mut dyn FnMut(&TrialRecord, &Outcome),
) -> Result<Report, DriveError> {
    drive_with(searcher, measurer, progress, &mut |_| {})
}

/// As [`drive`], with `before` called with each trial request before it is measured.
pub fn drive_with(
    searcher: &mut dyn Searcher,
    measurer: &mut dyn Measurer,
    progress: &mut dyn FnMut(&TrialRecord, &Outcome),
    before: &mut dyn FnMut(&TrialRequest),
) -> Result<Report, DriveError> {
    while let Some(req) = searcher.next_trial() {
        before(&req);
        let counts = measurer
            .measure(req.rate_pps, req.duration_s)
            .map_err(|error| DriveError {
                error,
                trials: searcher.trials().to_vec(),
            })?;
        searcher.record(counts);
        if let Some(last) = searcher.trials().last() {
            progress(last, &searcher.outcome());
        }
    }
    Ok(report_of(searcher))
}

/// Builds the report of a finished (or stopped) searcher.
pub fn report_of(searcher: &dyn Searcher) -> Report {
    Report {
        algorithm: searcher.algorithm().to_string(),
        config: searcher.config().clone(),
        trials: searcher.trials().to_vec(),
        phases: searcher
            .phase_starts()
            .into_iter()
            .map(|(start_s, phase)| PhaseStart { start_s, phase })
            .collect(),
        outcome: searcher.outcome(),
    }
}
