//! `linerate suite`: the benchmark a lab hands in, RFC 2544's and FD.io
//! CSIT's method across frame sizes. For each frame size: the NDR/PDR
//! search (throughput), latency at loads relative to them, back-to-back
//! frames (RFC 2544 26.4 as RFC 9004 corrects it) and the frame-loss rate
//! curve (RFC 2544 26.3).
//!
//! This module plans and runs the parts against a [`SuiteDut`] (one per
//! frame size: a simulated device or a pipeline's trials), holds the report
//! types and renders them (CSV, table, HTML); the command line lives in
//! `cli::suite`.
//!
//! ```
//! use linerate::suite::{parse_frames, FrameSize, SizedSim};
//!
//! let frames = parse_frames("64,1518,imix").unwrap();
//! assert_eq!(frames[2], FrameSize::Imix);
//! // A device of 12 Mpps behind 10 Gb/s: at 1518 bytes the wire is the limit.
//! let sim: SizedSim = "ndr=12e6,pdr=12.2e6,bps=10e9".parse().unwrap();
//! let at_1518 = sim.at(1518.0);
//! assert!((at_1518.ndr - 10e9 / (8.0 * 1538.0)).abs() < 1e-6);
//! assert_eq!(sim.at(64.0).ndr, 12e6);
//! ```
#![forbid(unsafe_code)]

pub mod html;
pub mod parts;
pub mod render;
pub mod sim;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::search::measurer::{MeasureError, Measurer, TrialCounts};
use crate::search::Report;
use crate::traffic::template::{Sizes, MAX_FRAME, MIN_FRAME};

pub use parts::{run_size, Observer, SizePlan, SuiteConfig};
pub use sim::{SimSizeDut, SizedSim};

/// RFC 2544's frame sizes for Ethernet (section 9.1).
pub const RFC2544_SIZES: [usize; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// Bytes each frame takes on the wire beyond its own (preamble, start
/// delimiter and inter-frame gap): L1 = L2 + 20.
pub const L1_OVERHEAD: f64 = 20.0;

/// One frame size of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameSize {
    /// Every frame this many bytes (FCS included).
    Fixed(usize),
    /// The generator's IMIX (7:4:1 of 64, 570 and 1518 bytes).
    Imix,
}

impl FrameSize {
    /// The name in reports and `--frames`: the bytes, or `imix`.
    pub fn label(&self) -> String {
        match self {
            FrameSize::Fixed(n) => n.to_string(),
            FrameSize::Imix => "imix".into(),
        }
    }

    /// The generator's sizes for it.
    pub fn sizes(&self) -> Sizes {
        match self {
            FrameSize::Fixed(n) => Sizes::Fixed(*n),
            FrameSize::Imix => Sizes::default_imix(),
        }
    }

    /// The average frame, bytes (FCS included).
    pub fn average(&self) -> f64 {
        self.sizes().average()
    }
}

/// Parses `--frames`: sizes in bytes (64..=9018) and `imix`, comma
/// separated; the default is RFC 2544's seven sizes and IMIX.
pub fn parse_frames(s: &str) -> Result<Vec<FrameSize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("--frames {s:?}: an empty frame size"));
        }
        let f = if part.eq_ignore_ascii_case("imix") {
            FrameSize::Imix
        } else {
            let n: usize = part.parse().map_err(|_| {
                format!(
                    "--frames: {part:?} is not a frame size (bytes from {MIN_FRAME} to {MAX_FRAME}, or imix)"
                )
            })?;
            if !(MIN_FRAME..=MAX_FRAME).contains(&n) {
                return Err(format!(
                    "--frames: a {n}-byte frame is outside {MIN_FRAME}..={MAX_FRAME} bytes"
                ));
            }
            FrameSize::Fixed(n)
        };
        if out.contains(&f) {
            return Err(format!("--frames: {} is given twice", f.label()));
        }
        out.push(f);
    }
    Ok(out)
}

/// The default `--frames`.
pub fn default_frames() -> Vec<FrameSize> {
    RFC2544_SIZES
        .iter()
        .map(|&n| FrameSize::Fixed(n))
        .chain([FrameSize::Imix])
        .collect()
}

/// The packet rate of `bps` L1 bits/s at frames of `frame` bytes.
pub fn pps_at(bps: f64, frame: f64) -> f64 {
    bps / (8.0 * (frame + L1_OVERHEAD))
}

/// A part of the suite (`--only`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The NDR/PDR search.
    Throughput,
    /// Latency at loads relative to the NDR and PDR.
    Latency,
    /// Back-to-back frames.
    B2b,
    /// The frame-loss rate curve.
    Loss,
}

impl Part {
    /// Every part, in the order they run.
    pub const ALL: [Part; 4] = [Part::Throughput, Part::Latency, Part::B2b, Part::Loss];

    /// The name in `--only` and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Part::Throughput => "throughput",
            Part::Latency => "latency",
            Part::B2b => "b2b",
            Part::Loss => "loss",
        }
    }
}

/// Parses `--only`: part names, comma separated.
pub fn parse_only(s: &str) -> Result<Vec<Part>, String> {
    let mut out = Vec::new();
    for p in s.split(',').map(str::trim) {
        let part = Part::ALL
            .into_iter()
            .find(|x| x.name() == p)
            .ok_or_else(|| {
                format!("--only: {p:?} is not a part (valid: throughput, latency, b2b, loss)")
            })?;
        if !out.contains(&part) {
            out.push(part);
        }
    }
    out.sort();
    Ok(out)
}

/// A load of a latency trial, relative to the size's NDR or PDR.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// A probe at 1 % of the NDR: latency with no load to speak of.
    Idle,
    /// This fraction of the NDR (lower bound).
    Ndr(f64),
    /// This fraction of the PDR (lower bound).
    Pdr(f64),
}

impl Load {
    /// The name in reports: `idle`, `NDR`, `10% PDR`.
    pub fn label(&self) -> String {
        let pct = |f: f64, g: &str| {
            if (f - 1.0).abs() < 1e-12 {
                g.to_string()
            } else {
                format!("{}% {g}", f * 100.0)
            }
        };
        match *self {
            Load::Idle => "idle".into(),
            Load::Ndr(f) => pct(f, "NDR"),
            Load::Pdr(f) => pct(f, "PDR"),
        }
    }

    /// Its rate given the NDR and PDR (packets/s).
    pub fn rate(&self, ndr: f64, pdr: f64) -> f64 {
        match *self {
            Load::Idle => 0.01 * ndr,
            Load::Ndr(f) => f * ndr,
            Load::Pdr(f) => f * pdr,
        }
    }
}

/// Parses `--latency-loads`: `idle`, `ndr`, `pdr`, `N%ndr`, `N%pdr`, comma
/// separated.
pub fn parse_loads(s: &str) -> Result<Vec<Load>, String> {
    s.split(',')
        .map(str::trim)
        .map(|p| {
            let l = p.to_ascii_lowercase().replace(' ', "");
            let bad = || {
                format!("--latency-loads: {p:?} is not a load (idle, ndr, pdr, or N%ndr / N%pdr with N in (0, 100])")
            };
            if l == "idle" {
                return Ok(Load::Idle);
            }
            let (frac, goal) = match l.split_once('%') {
                Some((n, g)) => (n.parse::<f64>().map_err(|_| bad())? / 100.0, g.to_string()),
                None => (1.0, l.clone()),
            };
            if !(frac > 0.0 && frac <= 1.0) {
                return Err(bad());
            }
            match goal.as_str() {
                "ndr" => Ok(Load::Ndr(frac)),
                "pdr" => Ok(Load::Pdr(frac)),
                _ => Err(bad()),
            }
        })
        .collect()
}

/// The default latency loads: no load, 10, 50 and 90 % of the PDR (CSIT)
/// and the NDR (RFC 2544 26.2).
pub fn default_loads() -> Vec<Load> {
    vec![
        Load::Idle,
        Load::Pdr(0.1),
        Load::Pdr(0.5),
        Load::Pdr(0.9),
        Load::Ndr(1.0),
    ]
}

/// One frame size's device under test: trials at a rate for a duration,
/// and trials with their latency where the device measures it.
pub trait SuiteDut {
    /// The measurer the search and the counting parts use.
    fn measurer(&mut self) -> &mut dyn Measurer;
    /// One trial with its latency: the counts, and the trial's JSON
    /// (`linerate trial --json`) to take the latency from.
    fn latency_trial(
        &mut self,
        rate_pps: f64,
        duration_s: f64,
    ) -> Result<(TrialCounts, serde_json::Value), MeasureError>;
    /// Why this device has no latency to measure, if it has none.
    fn no_latency(&self) -> Option<String> {
        None
    }
}

/// The machine the suite ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `lscpu`'s model name.
    pub cpu: String,
    /// Online CPUs.
    pub cores: usize,
    /// The pipeline's ports: name, kind and line rate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<serde_json::Value>,
    /// DPDK's version where the pipeline uses DPDK ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pmd: Option<String>,
}

/// Everything a suite produced: the JSON report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteReport {
    /// The report format: 1.
    pub suite: u32,
    /// The command line.
    pub command: Vec<String>,
    /// The machine.
    pub machine: Machine,
    /// linerate's version.
    pub version: String,
    /// What was measured, as a search report's `source` says it; a suite
    /// resumes only a report of the same.
    pub source: String,
    /// The line rate (L1 bits/s) the percentages are of, when known.
    #[serde(default)]
    pub line_rate_bps: Option<f64>,
    /// One entry per frame size, in `--frames` order.
    pub sizes: Vec<SizeReport>,
    /// A signal stopped the suite: the parts are those finished.
    pub interrupted: bool,
    /// The signal, when interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The report this suite continued (`--resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<std::path::PathBuf>,
}

/// One frame size's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeReport {
    /// The frame size: bytes, or `imix`.
    pub frame: String,
    /// The average frame, bytes (FCS included).
    pub frame_bytes: f64,
    /// The highest rate offered at this size (packets/s): the line rate's
    /// packet rate, or `--max-rate`.
    pub max_rate_pps: f64,
    /// The NDR/PDR search, as `linerate search --json` writes it.
    #[serde(default)]
    pub throughput: Option<Report>,
    /// Latency at each load.
    #[serde(default)]
    pub latency: Vec<LatencyPoint>,
    /// Back-to-back frames.
    #[serde(default)]
    pub back_to_back: Option<BackToBack>,
    /// The frame-loss rate curve, from the maximum rate down.
    #[serde(default)]
    pub loss_curve: Vec<LossStep>,
    /// Parts not run, each with the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, String>,
    /// The parts finished (a resumed suite skips them).
    #[serde(default)]
    pub done: Vec<Part>,
}

impl SizeReport {
    /// An empty entry for a size.
    pub fn new(frame: &FrameSize, max_rate_pps: f64) -> SizeReport {
        SizeReport {
            frame: frame.label(),
            frame_bytes: frame.average(),
            max_rate_pps,
            throughput: None,
            latency: Vec::new(),
            back_to_back: None,
            loss_curve: Vec::new(),
            skipped: BTreeMap::new(),
            done: Vec::new(),
        }
    }

    /// The lower bound of goal `i` (0: NDR, last: PDR), packets/s.
    pub fn goal_lower(&self, last: bool) -> Option<f64> {
        let goals = &self.throughput.as_ref()?.outcome.goals;
        let g = if last { goals.last()? } else { goals.first()? };
        g.lower_pps
    }

    /// The NDR's lower bound, packets/s.
    pub fn ndr(&self) -> Option<f64> {
        self.goal_lower(false)
    }

    /// The PDR's lower bound, packets/s.
    pub fn pdr(&self) -> Option<f64> {
        self.goal_lower(true)
    }
}

/// A latency trial at one load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyPoint {
    /// The load: `idle`, `10% PDR`, `NDR`...
    pub load: String,
    /// Its rate, packets/s.
    pub rate_pps: f64,
    /// The trial's duration, s.
    pub duration_s: f64,
    /// Packets offered.
    pub offered: u64,
    /// Packets received.
    pub received: u64,
    /// Loss ratio.
    pub loss_ratio: f64,
    /// The trial's latency over every stream, as the trial's JSON has it.
    pub latency_ns: serde_json::Value,
    /// The trial's streams, as the trial's JSON has them (each with its
    /// latency).
    pub streams: serde_json::Value,
}

/// Back-to-back frames at one rate (RFC 9004).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackToBack {
    /// The rate of the bursts (the size's maximum), packets/s.
    pub rate_pps: f64,
    /// The longest burst tried, frames.
    pub max_burst: u64,
    /// Each repetition's longest burst with no loss, frames.
    pub trials: Vec<u64>,
    /// Every burst sent: (frames, frames lost), in order.
    pub bursts: Vec<(u64, u64)>,
    /// The average longest burst, frames.
    pub average_frames: f64,
    /// The shortest of the longest bursts, frames.
    pub min_frames: u64,
    /// Some repetition passed the longest burst tried: the device's buffer
    /// is at least that.
    pub at_max: bool,
    /// RFC 9004 5.4's implied buffer time: average frames / rate, s.
    pub implied_buffer_s: f64,
    /// RFC 9004 5.4's corrected buffer time, with the measured throughput
    /// (the NDR) draining the buffer during the burst, s.
    pub corrected_buffer_s: Option<f64>,
}

/// One step of the frame-loss rate curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossStep {
    /// Percent of the maximum rate.
    pub percent: f64,
    /// The rate, packets/s.
    pub rate_pps: f64,
    /// The trial's duration, s.
    pub duration_s: f64,
    /// Packets offered.
    pub offered: u64,
    /// Packets received.
    pub received: u64,
    /// Loss ratio (RFC 2544: (input - output) * 100 / input, here as a
    /// ratio).
    pub loss_ratio: f64,
}

impl SuiteReport {
    /// The parts left out, each reason said once with where it applied:
    /// `(part, reason, "every size" | "64 B, IMIX")`.
    pub fn skipped_notes(&self) -> Vec<(String, String, String)> {
        let mut notes: Vec<(&str, &str, Vec<&str>)> = Vec::new();
        for s in &self.sizes {
            for (part, why) in &s.skipped {
                match notes.iter_mut().find(|x| x.0 == part && x.1 == why) {
                    Some(x) => x.2.push(&s.frame),
                    None => notes.push((part, why, vec![&s.frame])),
                }
            }
        }
        let every = |n: usize| n == self.sizes.len() && n > 1;
        notes
            .into_iter()
            .map(|(part, why, frames)| {
                let at = if every(frames.len()) {
                    "every size".to_string()
                } else {
                    let label = |f: &&str| match f.parse::<u32>() {
                        Ok(_) => format!("{f} B"),
                        Err(_) => f.to_uppercase(),
                    };
                    frames.iter().map(label).collect::<Vec<_>>().join(", ")
                };
                (part.to_string(), why.to_string(), at)
            })
            .collect()
    }

    /// A report that `--resume` may continue from: same source, and the
    /// earlier entry of each size this run measures.
    pub fn check_resumable(&self, source: &str) -> Result<(), String> {
        if self.suite != 1 {
            return Err(format!(
                "suite format {} (this linerate reads 1)",
                self.suite
            ));
        }
        if self.source != source {
            return Err(format!(
                "it measured {:?}, this suite measures {source:?}",
                self.source
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn frames_only_and_loads_parse() {
        assert_eq!(default_frames().len(), 8);
        assert_eq!(
            parse_frames(" 64, 9018 ,IMIX").unwrap(),
            [
                FrameSize::Fixed(64),
                FrameSize::Fixed(9018),
                FrameSize::Imix
            ]
        );
        for bad in ["", "64,", "63", "9019", "big", "64,64", "imix,imix"] {
            assert!(parse_frames(bad).is_err(), "{bad}");
        }
        assert!((FrameSize::Imix.average() - 4246.0 / 12.0).abs() < 1e-9);
        assert_eq!(
            parse_only("loss,throughput,loss").unwrap(),
            [Part::Throughput, Part::Loss]
        );
        assert!(parse_only("latency,speed").is_err());
        let l = parse_loads("idle, 10%PDR,ndr,90%ndr,pdr").unwrap();
        assert_eq!(
            l,
            [
                Load::Idle,
                Load::Pdr(0.1),
                Load::Ndr(1.0),
                Load::Ndr(0.9),
                Load::Pdr(1.0)
            ]
        );
        let labels: Vec<String> = l.iter().map(Load::label).collect();
        assert_eq!(labels, ["idle", "10% PDR", "NDR", "90% NDR", "PDR"]);
        assert_eq!(Load::Idle.rate(2e6, 3e6), 2e4);
        assert_eq!(Load::Pdr(0.5).rate(2e6, 3e6), 1.5e6);
        for bad in ["", "0%ndr", "101%pdr", "50%mrr", "fast"] {
            assert!(parse_loads(bad).is_err(), "{bad}");
        }
        // 10 Gb/s of 64-byte frames: 14.88 Mpps.
        assert!((pps_at(10e9, 64.0) - 14_880_952.38).abs() < 0.01);
    }
}
