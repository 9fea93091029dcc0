//! `linerate suite`: RFC 2544's and FD.io CSIT's benchmark across frame
//! sizes, on a pipeline or a simulated device: per size the NDR/PDR search,
//! latency at loads, back-to-back frames and the frame-loss curve; a table
//! on stdout, and JSON, CSV, HTML and a plot on request.

use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::metrics_args::start_metrics;
use super::output::{create_parent, write_file, write_json};
use super::search::{config_of, SearchArgs};
use super::Failure;
use crate::search::measurer::{MeasureError, Measurer, TrialCounts};
use crate::search::pipeline::PipelineMeasurer;
use crate::search::resume::digest;
use crate::search::searcher::{Outcome, TrialRecord, TrialRequest};
use crate::suite::{
    default_frames, default_loads, parse_frames, parse_loads, parse_only, pps_at, run_size,
    FrameSize, Machine, Observer, Part, SimSizeDut, SizePlan, SizeReport, SizedSim, SuiteConfig,
    SuiteDut, SuiteReport,
};
use crate::units::Rate;

/// Arguments of `linerate suite` (every `search` argument, and the suite's).
#[derive(Debug, Clone, clap::Args)]
pub struct SuiteArgs {
    /// The search's arguments (its `--frame-size` is replaced by `--frames`;
    /// `--sim` takes `bps=` besides, the device's bit-rate limit).
    #[command(flatten)]
    pub search: SearchArgs,
    /// Frame sizes in bytes, and `imix`, comma separated (default: RFC
    /// 2544's 64,128,256,512,1024,1280,1518 and imix).
    #[arg(long, value_name = "SIZES")]
    pub frames: Option<String>,
    /// Only these parts, comma separated: throughput, latency, b2b, loss.
    #[arg(long, value_name = "PARTS")]
    pub only: Option<String>,
    /// Short trials: a 1 s final duration, one intermediate phase, 1 s
    /// latency and loss trials, at most 3 back-to-back repetitions.
    #[arg(long)]
    pub quick: bool,
    /// The latency trials' loads, comma separated: idle (1 % of the NDR),
    /// ndr, pdr, N%ndr, N%pdr.
    #[arg(
        long,
        value_name = "LOADS",
        default_value = "idle,10%pdr,50%pdr,90%pdr,ndr"
    )]
    pub latency_loads: String,
    /// Back-to-back repetitions (RFC 9004: 50).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub b2b_trials: u32,
    /// The line rate ("10 Gbps", L1) that the percentages, the maximum rate
    /// of each size and the back-to-back bursts are of; default: the
    /// generator port's `line_rate`, or the simulated device's `bps`. With
    /// a line rate, the default --max-rate is that rate at each size.
    #[arg(long, value_name = "RATE")]
    pub line_rate: Option<String>,
    /// Write one row per frame size here as CSV.
    #[arg(long, value_name = "PATH")]
    pub csv: Option<PathBuf>,
}

/// The default `--max-rate`, which a known line rate replaces.
const DEFAULT_MAX_RATE: &str = "29.76 Mpps";

/// What is measured: a simulated device, or a pipeline loaded once per
/// frame size.
enum Source {
    Sim(SizedSim),
    Pipeline(Vec<crate::pipeline::Plan>),
}

/// Everything checked before the first trial.
struct Setup {
    frames: Vec<FrameSize>,
    plans: Vec<SizePlan>,
    cfg: SuiteConfig,
    source: Source,
    source_text: String,
    line_rate: Option<f64>,
    machine: Machine,
}

fn input<E: std::fmt::Display>(e: E) -> Failure {
    Failure::Input(e.to_string())
}

/// Runs `linerate suite`: 0, 1 for a failed trial or a size whose search
/// failed, 2 for bad input (before any trial), 128 + N after signal N.
pub fn run(args: &SuiteArgs) -> Result<(), Failure> {
    let setup = setup(args)?;
    let earlier = resumed(args, &setup)?;
    let (live, server) = start_metrics(&args.search.metrics, "suite")?;
    let mut report = SuiteReport {
        suite: 1,
        command: std::env::args().collect(),
        machine: setup.machine.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        source: setup.source_text.clone(),
        line_rate_bps: setup.line_rate,
        sizes: setup
            .plans
            .iter()
            .map(|p| {
                earlier
                    .as_ref()
                    .and_then(|e| e.sizes.iter().find(|s| s.frame == p.frame.label()))
                    .cloned()
                    .unwrap_or_else(|| SizeReport::new(&p.frame, p.search.max_rate))
            })
            .collect(),
        interrupted: false,
        signal: None,
        resumed_from: args.search.resume.clone(),
    };
    let mut progress = Progress::new(args.search.quiet, &live);
    let mut failure = None;
    for (i, plan) in setup.plans.iter().enumerate() {
        let entry = &mut report.sizes[i];
        if setup.cfg.parts.iter().all(|p| entry.done.contains(p)) {
            continue;
        }
        let mut dut = open_dut(args, &setup, i).map_err(Failure::Runtime)?;
        let r = run_size(plan, &setup.cfg, dut.as_mut(), entry, &mut progress);
        drop(dut);
        match r {
            Ok(()) => {}
            Err(MeasureError::Interrupted) => {
                report.interrupted = true;
                report.signal = crate::sys::signals::name().map(str::to_string);
                break;
            }
            Err(e) => {
                failure = Some(format!("frame {}: {e}", setup.frames[i].label()));
                break;
            }
        }
        // A report of every finished size, should the next one not finish.
        if let Some(path) = &args.search.json {
            write_json(path, &report)?;
        }
    }
    progress.finish();
    print!("{}", crate::suite::render::table(&report));
    let failed_sizes = print_notes(&report);
    write_outputs(args, &report)?;
    args.search.metrics.stop(server);
    if report.interrupted {
        return Err(Failure::Silent(
            crate::sys::signals::exit_status().unwrap_or(130),
        ));
    }
    if let Some(f) = failure {
        return Err(Failure::Runtime(f));
    }
    if failed_sizes {
        return Err(Failure::Silent(1));
    }
    Ok(())
}

/// Skipped parts and failed searches, on stdout under the table; whether a
/// search failed.
fn print_notes(report: &SuiteReport) -> bool {
    let mut failed = false;
    for (part, why, at) in report.skipped_notes() {
        println!("{part} skipped at {at}: {why}");
    }
    for s in &report.sizes {
        if let Some(t) = &s.throughput {
            for g in &t.outcome.goals {
                if g.min_rate_fails {
                    failed = true;
                    println!(
                        "{} bytes: {} FAILED: the minimum rate already fails it",
                        s.frame, g.goal.name
                    );
                }
            }
            if t.outcome.timed_out {
                failed = true;
                println!("{} bytes: the search ran out of its time budget", s.frame);
            }
        }
    }
    failed
}

/// Checks every argument, and every frame size against the pipeline.
fn setup(args: &SuiteArgs) -> Result<Setup, Failure> {
    let s = &args.search;
    match (&s.pipeline, &s.sim, &s.measure_cmd) {
        (_, _, Some(_)) => {
            return Err(input(
                "suite measures a PIPELINE or --sim MODEL (an external command cannot take the frame size)",
            ))
        }
        (Some(_), None, None) | (None, Some(_), None) => {}
        _ => return Err(input("give exactly one of PIPELINE or --sim MODEL")),
    }
    if s.frame_size != 64.0 {
        return Err(input(
            "suite sets the frame size itself: give the sizes with --frames, not --frame-size",
        ));
    }
    let frames = match &args.frames {
        Some(f) => parse_frames(f).map_err(input)?,
        None => default_frames(),
    };
    let parts = match &args.only {
        Some(o) => parse_only(o).map_err(input)?,
        None => Part::ALL.to_vec(),
    };
    let loads = if args.latency_loads.trim().is_empty() {
        default_loads()
    } else {
        parse_loads(&args.latency_loads).map_err(input)?
    };
    if args.b2b_trials == 0 {
        return Err(input("--b2b-trials must be at least 1"));
    }
    let mut search = s.clone();
    if args.quick {
        search.final_duration = "1".into();
        search.initial_duration = "0.2".into();
        search.phases = search.phases.min(1);
    }
    let (source, source_text, port_line) = match (&s.sim, &s.pipeline) {
        (Some(m), _) => {
            let sim: SizedSim = m.parse().map_err(input)?;
            (Source::Sim(sim), sim.source(), sim.bps)
        }
        (None, Some(path)) => {
            let mut plans = Vec::new();
            for f in &frames {
                let plan = crate::pipeline::load_with_frames(path, &f.sizes())
                    .map_err(|e| input(format!("frame size {}: {e}", f.label())))?;
                plans.push(plan);
            }
            let line = plans.first().and_then(crate::pipeline::generator_line_rate);
            let bytes =
                std::fs::read(path).map_err(|e| input(format!("{}: {e}", path.display())))?;
            let text = format!("pipeline (digest {})", digest(&bytes));
            (Source::Pipeline(plans), text, line)
        }
        _ => unreachable!("checked above"),
    };
    let line_rate = match &args.line_rate {
        Some(r) => Some(parse_line_rate(r)?),
        None => port_line,
    };
    if line_rate.is_none() && !s.quiet {
        eprintln!(
            "note: no line rate known (--line-rate, the port's `line_rate`, the model's `bps`): every size's maximum is --max-rate {}, and no percentage of a line rate is reported",
            s.max_rate
        );
    }
    let mut plans = Vec::new();
    for f in &frames {
        search.frame_size = f.average();
        let mut cfg = config_of(&search).map_err(|e| input(format!("frame {}: {e}", f.label())))?;
        if let Some(line) = line_rate {
            let pps = pps_at(line, f.average());
            cfg.max_rate = if s.max_rate == DEFAULT_MAX_RATE {
                pps
            } else {
                cfg.max_rate.min(pps)
            };
        }
        // The minimum stays well below each size's maximum.
        cfg.min_rate = cfg.min_rate.min(cfg.max_rate / 10.0);
        cfg.validate()
            .map_err(|e| input(format!("frame {}: {e}", f.label())))?;
        plans.push(SizePlan {
            frame: *f,
            search: cfg,
        });
    }
    let trial_s = plans.first().map_or(1.0, |p| p.search.final_duration);
    let cfg = SuiteConfig {
        parts,
        binary: s.binary,
        loads,
        trial_s,
        b2b_trials: if args.quick {
            args.b2b_trials.min(3)
        } else {
            args.b2b_trials
        },
        b2b_max_s: if args.quick { 0.5 } else { 2.0 },
    };
    let machine = machine(&source);
    Ok(Setup {
        frames,
        plans,
        cfg,
        source,
        source_text,
        line_rate,
        machine,
    })
}

fn parse_line_rate(s: &str) -> Result<f64, Failure> {
    let bad = || input(format!("--line-rate {s:?}: give bits/s, e.g. \"10 Gbps\""));
    match s.parse::<Rate>().map_err(|_| bad())? {
        Rate::L1Bps(b) | Rate::L2Bps(b) if b > 0.0 && b.is_finite() => Ok(b),
        _ => Err(bad()),
    }
}

/// With `--resume REPORT`: the report, once it is known to be a suite of
/// the same device.
fn resumed(args: &SuiteArgs, setup: &Setup) -> Result<Option<SuiteReport>, Failure> {
    let Some(path) = &args.search.resume else {
        return Ok(None);
    };
    let earlier: SuiteReport = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|e| {
            input(format!(
                "--resume {}: not a suite report: {e}",
                path.display()
            ))
        })?;
    earlier.check_resumable(&setup.source_text).map_err(|why| {
        input(format!(
            "--resume {}: the report is of another device: {why}",
            path.display()
        ))
    })?;
    // A size's search continues only under the same parameters.
    for plan in &setup.plans {
        let label = plan.frame.label();
        let same = earlier
            .sizes
            .iter()
            .filter(|s| s.frame == label)
            .filter_map(|s| s.throughput.as_ref())
            .all(|t| t.config == plan.search);
        if !same {
            return Err(input(format!(
                "--resume {}: the report's search at {label} bytes has other parameters (goals, durations, rates)",
                path.display()
            )));
        }
    }
    Ok(Some(earlier))
}

/// `lscpu`'s model name, the CPUs, and the pipeline's ports.
fn machine(source: &Source) -> Machine {
    let cpu = std::process::Command::new("lscpu")
        .env("LC_ALL", "C")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("Model name:").map(|v| v.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ports = match source {
        Source::Pipeline(plans) => plans
            .first()
            .map(|p| {
                p.pipeline
                    .ports
                    .iter()
                    .map(|x| {
                        serde_json::json!({
                            "name": x.name,
                            "kind": x.kind.name(),
                            "line_rate_bps": x.kind.line_rate_bps(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default(),
        Source::Sim(_) => Vec::new(),
    };
    Machine {
        cpu,
        cores,
        ports,
        pmd: None,
    }
}

/// A pipeline's trials as a suite's device.
struct PipeDut(PipelineMeasurer);

impl SuiteDut for PipeDut {
    fn measurer(&mut self) -> &mut dyn Measurer {
        &mut self.0
    }

    fn latency_trial(
        &mut self,
        rate_pps: f64,
        duration_s: f64,
    ) -> Result<(TrialCounts, serde_json::Value), MeasureError> {
        let r = self.0.trial(rate_pps, duration_s)?;
        let counts = TrialCounts {
            offered: r.offered,
            received: r.received,
            unsent: Some(r.unsent),
            rx_dropped: Some(r.rx_dropped),
            tx_pps: Some(r.tx_pps),
        };
        let json = serde_json::to_value(&r).unwrap_or_default();
        Ok((counts, json))
    }
}

/// The device at size `i`.
fn open_dut(args: &SuiteArgs, setup: &Setup, i: usize) -> Result<Box<dyn SuiteDut>, String> {
    let flag = crate::sys::signals::interrupt_flag();
    match &setup.source {
        Source::Sim(sim) => Ok(Box::new(SimSizeDut::new(
            sim,
            setup.frames[i].average(),
            flag,
            args.search.sim_time_scale,
        ))),
        Source::Pipeline(plans) => {
            let m = PipelineMeasurer::of_plan(&plans[i], Duration::from_millis(200), flag)
                .map_err(|e| format!("frame {}: {e:#}", setup.frames[i].label()))?;
            Ok(Box::new(PipeDut(m)))
        }
    }
}

/// `--json`, `--csv`, `--html` and `--plot`, each where asked.
fn write_outputs(args: &SuiteArgs, report: &SuiteReport) -> Result<(), Failure> {
    if let Some(path) = &args.search.json {
        write_json(path, report)?;
    }
    if let Some(path) = &args.csv {
        write_file(path, &crate::suite::render::csv(report))?;
    }
    if let Some(path) = &args.search.html {
        let html = crate::suite::html::render(report)
            .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
        write_file(path, &html)?;
    }
    if let Some(path) = &args.search.plot {
        create_parent(path)?;
        for ext in ["svg", "png"] {
            crate::suite::html::plot(report, &path.with_extension(ext))
                .map_err(|e| Failure::Runtime(e.to_string()))?;
        }
    }
    Ok(())
}

/// A progress bar per part on a terminal, plain lines otherwise (none with
/// `--quiet`), and the `--metrics` progress.
struct Progress<'a> {
    bar: ProgressBar,
    quiet: bool,
    live: &'a crate::metrics::Live,
    what: String,
}

impl<'a> Progress<'a> {
    fn new(quiet: bool, live: &'a crate::metrics::Live) -> Self {
        Progress {
            bar: ProgressBar::hidden(),
            quiet,
            live,
            what: String::new(),
        }
    }

    fn line(&self, text: String) {
        if self.bar.is_hidden() {
            if !self.quiet {
                eprintln!("{text}");
            }
        } else {
            self.bar.println(text);
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
        self.live.progress(|p| p.current = None);
    }
}

impl Observer for Progress<'_> {
    fn part_starts(&mut self, frame: &str, part: Part, trials: u64) {
        self.what = format!("{frame} B {}", part.name());
        self.bar = if self.quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(trials.max(1));
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {prefix:>18} [{bar:30}] {pos}/~{len} {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(self.what.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        };
        self.line(format!("{}: starts", self.what));
    }

    fn search_request(&mut self, req: &TrialRequest) {
        self.live.progress(|p| {
            p.trial_started(req.rate_pps, req.duration_s);
            p.search.get_or_insert_with(Default::default).phase = req.phase.to_string();
        });
        self.bar.set_message(format!(
            "{}: {:.6} Mpps for {:.3} s",
            req.phase,
            req.rate_pps / 1e6,
            req.duration_s
        ));
    }

    fn search_trial(&mut self, t: &TrialRecord, outcome: &Outcome) {
        let bounds = super::search::publish_trial(self.live, t, outcome);
        if self.bar.position() + 1 >= self.bar.length().unwrap_or(0) {
            self.bar.inc_length(4);
        }
        self.bar.inc(1);
        self.line(format!(
            "{}: {:<15} {:>12.6} Mpps {:>8.3} s  loss {:.6}  {}",
            self.what,
            t.phase.to_string(),
            t.rate_pps / 1e6,
            t.duration_s,
            t.loss_ratio,
            bounds
        ));
    }

    fn trial_done(&mut self, what: &str, rate_pps: f64, duration_s: f64, c: &TrialCounts) {
        self.live
            .progress(|p| p.trial_done(c.offered, c.unsent.unwrap_or(0), c.received));
        if self.bar.position() + 1 >= self.bar.length().unwrap_or(0) {
            self.bar.inc_length(4);
        }
        self.bar.inc(1);
        if what.starts_with("burst") {
            // Dozens per repetition: the bar counts them, no line each.
            self.bar.set_message(what.to_string());
            return;
        }
        let lost = c.offered.saturating_sub(c.received);
        self.line(format!(
            "{}: {what} {:.6} Mpps {:.6} s  offered {} lost {lost}",
            self.what,
            rate_pps / 1e6,
            duration_s,
            c.offered
        ));
    }

    fn part_ends(&mut self) {
        self.bar.finish_and_clear();
    }
}
