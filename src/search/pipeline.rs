//! The pipeline measurer: trials of a pipeline's generators and analyzers
//! through the trial API, on one runtime that stays up for the whole search.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::measurer::{MeasureError, Measurer, TrialCounts};
use crate::trial::{TrialOptions, TrialRunner};

/// Measures by running trials of a pipeline (`linerate search PIPELINE`).
pub struct PipelineMeasurer {
    runner: TrialRunner,
    interrupt: &'static AtomicBool,
}

impl PipelineMeasurer {
    /// Loads, builds and starts a pipeline with idle generators.
    pub fn open(
        path: &Path,
        drain: Duration,
        interrupt: &'static AtomicBool,
    ) -> anyhow::Result<PipelineMeasurer> {
        let plan = crate::pipeline::load(path)?;
        PipelineMeasurer::of_plan(&plan, drain, interrupt)
    }

    /// Builds and starts a loaded pipeline with idle generators.
    pub fn of_plan(
        plan: &crate::pipeline::Plan,
        drain: Duration,
        interrupt: &'static AtomicBool,
    ) -> anyhow::Result<PipelineMeasurer> {
        let runner = TrialRunner::start(
            plan,
            TrialOptions {
                drain,
                stats_interval: None,
            },
        )?;
        for w in runner.warnings() {
            eprintln!("warning: {w}");
        }
        Ok(PipelineMeasurer { runner, interrupt })
    }
}

impl PipelineMeasurer {
    /// One trial with everything the trial reports (its latency, per
    /// stream, as `linerate trial --json` writes it).
    pub fn trial(
        &mut self,
        rate_pps: f64,
        duration_s: f64,
    ) -> Result<crate::trial::TrialResult, MeasureError> {
        let duration =
            Duration::try_from_secs_f64(duration_s).map_err(|e| MeasureError::Failed {
                message: format!("invalid trial duration {duration_s}: {e}"),
                output: String::new(),
            })?;
        self.runner
            .trial(rate_pps, duration, self.interrupt, &mut |_, _| {})
            .map_err(|e| match e {
                crate::trial::TrialError::Interrupted => MeasureError::Interrupted,
                e => MeasureError::Failed {
                    message: e.to_string(),
                    output: String::new(),
                },
            })
    }
}

impl Measurer for PipelineMeasurer {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        let r = self.trial(rate_pps, duration_s)?;
        // `offered` is the intended count: unsent packets are offered and not received, so
        // they count as loss; they are reported apart.
        Ok(TrialCounts {
            offered: r.offered,
            received: r.received,
            unsent: Some(r.unsent),
            rx_dropped: Some(r.rx_dropped),
            tx_pps: Some(r.tx_pps),
        })
    }

    fn probe(&self) -> Option<crate::runtime::run::Probe> {
        Some(crate::runtime::run::Probe::of(self.runner.built()))
    }
}
