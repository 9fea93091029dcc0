//! What a kind sees when it checks its stage against the pipeline it sits
//! in ([`CheckCtx`]), and the answers kinds give the planner about
//! themselves beyond their keys. The planner calls each kind and knows none.

use std::ops::Range;

use super::diag::Sink;
use super::schema::{PortSpec, StageSpec};
use crate::units::{si, Rate};

/// Why a stage cannot be replicated over `n` lcores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The kind never splits: "a KIND stage cannot be replicated: {why}".
    Kind(&'static str),
    /// This stage cannot split `n` ways: its own message and help.
    Says {
        /// What is wrong.
        message: String,
        /// What would be valid.
        help: String,
    },
}

/// What a stage offers a trial: its weight in the trial's aggregate rate and
/// its average frame size (for turning a bit rate into packets/s).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialLoad {
    /// Its share of the trial's rate (shares are normalised over stages).
    pub share: f64,
    /// Its average frame, bytes (FCS included).
    pub avg_frame: f64,
}

/// Which end of a stamped message a stage is, for telling which latencies
/// compare two hosts' clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageEnd {
    /// It stamps the messages it sends.
    Sends,
    /// It delivers messages with their latency from the stamp.
    Receives,
}

/// The pipeline as one stage's check sees it: every stage and port, the pool
/// room, and where its errors go (they name the stage's section).
pub(crate) struct CheckCtx<'a, 's> {
    /// The stage being checked (its kind as it was before this check).
    pub(crate) stage: &'a StageSpec,
    /// Every stage, replicas expanded, in file order.
    pub(crate) stages: &'a [StageSpec],
    /// Every port.
    pub(crate) ports: &'a [PortSpec],
    /// Bytes of a pool buffer after its headroom.
    pub(crate) room: usize,
    pub(crate) sink: &'a mut Sink<'s>,
}

impl CheckCtx<'_, '_> {
    /// The stage's section, as messages name it.
    pub(crate) fn section(&self) -> String {
        format!("stage.{}", self.stage.name)
    }

    /// An error at the stage's section, about `key`.
    pub(crate) fn error(&mut self, key: Option<&str>, message: String, help: Option<String>) {
        let span = self.stage.span.clone();
        self.error_at(span, key, message, help);
    }

    /// An error at `span`, in the stage's section.
    pub(crate) fn error_at(
        &mut self,
        span: Range<usize>,
        key: Option<&str>,
        message: String,
        help: Option<String>,
    ) {
        let section = self.section();
        self.sink.error(span, &section, key, message, help);
    }

    /// The stages before this one, in file order.
    pub(crate) fn earlier(&self) -> &[StageSpec] {
        let i = self
            .stages
            .iter()
            .position(|s| s.name == self.stage.name)
            .unwrap_or(0);
        &self.stages[..i]
    }

    /// The stage named `name`, or the first replica of a replicated stage
    /// of that name.
    pub(crate) fn stage_named(&self, name: &str) -> Option<&StageSpec> {
        self.stages
            .iter()
            .find(|x| x.name == name || x.replica.as_ref().is_some_and(|r| r.of == name))
    }

    /// The port an end (`rx` or `tx`, `nic` or `nic:1`) names, if a port.
    pub(crate) fn port(&self, end: &Option<String>) -> Option<&PortSpec> {
        let name = end.as_deref()?;
        let base = name.split(':').next().unwrap_or(name);
        self.ports.iter().find(|x| x.name == base)
    }

    /// A rate in packets/s at `avg_frame`-byte frames, checked against the
    /// `tx` port's line rate; a replica gets its share of the stage's rate.
    pub(crate) fn resolve_rate(&mut self, rate: Rate, avg_frame: f64) -> Option<f64> {
        let line = self
            .port(&self.stage.tx)
            .and_then(|p| p.kind.line_rate_bps());
        let pps = match rate.to_pps(avg_frame, line) {
            Ok(pps) if pps > 0.0 && pps.is_finite() => pps,
            Ok(_) => {
                self.error(Some("rate"), "the rate must be above zero".into(), None);
                return None;
            }
            Err(e) => {
                self.error(Some("rate"), e.to_string(), None);
                return None;
            }
        };
        if let Some(line) = line {
            let max = line / ((avg_frame + 20.0) * 8.0);
            if pps > max * 1.000_001 {
                self.error(
                    Some("rate"),
                    format!(
                        "{}pps exceeds the port's line rate ({}pps at {avg_frame:.0}-byte frames)",
                        si(pps),
                        si(max)
                    ),
                    None,
                );
            }
        }
        Some(match &self.stage.replica {
            Some(r) => pps / r.count as f64,
            None => pps,
        })
    }

    /// A frame (FCS included) must fit a pool buffer after its headroom.
    pub(crate) fn frame_fits(&mut self, frame: usize) {
        let room = self.room;
        if frame - 4 > room {
            self.error(
                Some("frame"),
                format!(
                    "a {frame}-byte frame does not fit a pool buffer ({room} bytes after headroom)"
                ),
                Some("a larger `size` in [pool]".into()),
            );
        }
    }
}

/// Replica `k`'s share of a count of `total` split `n` ways: the first
/// `total % n` replicas take one more.
pub(crate) fn count_share(total: u64, k: usize, n: usize) -> u64 {
    total / n as u64 + u64::from((k as u64) < total % n as u64)
}
