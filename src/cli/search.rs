//! `linerate search`: NDR/PDR (or any loss-ratio goals) search against a pipeline, a
//! simulated device or an external command, with progress on stderr, a summary on stdout,
//! a JSON report and a plot.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use super::metrics_args::{start_metrics, MetricsArgs};
use super::output::{create_parent, write_file, write_json};
use super::Failure;
use crate::search::measurer::{CommandMeasurer, MeasureError, Measurer};
use crate::search::resume::{check_resumable, digest, Interruptible, Replay};
use crate::search::searcher::{Goal, Outcome, SearchConfig, Searcher, TrialRecord, TrialRequest};
use crate::search::sim::{SimDut, SimModel};
use crate::search::{drive_with, plot, report_of, BinarySearch, MdrSearch, Report};
use crate::trial::TX_SHORT_TOLERANCE;
use crate::units::{parse_duration, Rate};

pub use crate::search::goal::{parse_goal, InputError};
use crate::search::summary::mpps;
pub use crate::search::summary::print_summary;

/// Arguments of `linerate search` (defaults are CSIT's).
#[derive(Debug, Clone, clap::Args)]
pub struct SearchArgs {
    /// Pipeline file whose generator and analyzer measure the device under test.
    pub pipeline: Option<PathBuf>,
    /// Simulated device instead of a pipeline, e.g.
    /// "ndr=12e6,pdr=12.2e6,plr=0.005,jitter=0,spike_rate=0,spike_len=0,buffer=0,seed=1";
    /// "bps=10e9" adds a bit-rate limit (L1) at --frame-size.
    #[arg(long, value_name = "MODEL")]
    pub sim: Option<String>,
    /// External measurer: a shell command with {rate} (pps) and {duration} (s) that prints
    /// JSON counts {"offered": N, "received": M} (or "lost"), optionally "unsent": U.
    #[arg(long, value_name = "CMD")]
    pub measure_cmd: Option<String>,
    /// Minimum transmit rate ("20 kpps", "1 Gbps" or plain packets/s).
    #[arg(long, default_value = "20 kpps")]
    pub min_rate: String,
    /// Maximum transmit rate (line rate).
    #[arg(long, default_value = "29.76 Mpps")]
    pub max_rate: String,
    /// Frame size in bytes, to convert bit rates into packet rates.
    #[arg(long, default_value_t = 64.0)]
    pub frame_size: f64,
    /// Loss ratio of the PDR goal.
    #[arg(long, default_value_t = 0.005)]
    pub plr: f64,
    /// Final trial duration ("30", "30s").
    #[arg(long, default_value = "30")]
    pub final_duration: String,
    /// Initial trial duration.
    #[arg(long, default_value = "1")]
    pub initial_duration: String,
    /// Final relative width of each goal's interval (0.005 = 0.5 %).
    #[arg(long, default_value_t = 0.005)]
    pub width: f64,
    /// Number of intermediate phases.
    #[arg(long, default_value_t = 2)]
    pub phases: u32,
    /// A goal, repeatable, replacing the default NDR and PDR goals:
    /// "LOSS_RATIO" or "name=X,loss=R,width=W,exceed=E,sum=S" (width, exceed
    /// and sum optional).
    #[arg(long = "goal", value_name = "GOAL")]
    pub goals: Vec<String>,
    /// Draft mode for the default goals: share of the duration sum bad trials may take.
    #[arg(long, default_value_t = 0.0)]
    pub exceed_ratio: f64,
    /// Draft mode for the default goals: trial duration sum (s) needed per load.
    #[arg(long)]
    pub duration_sum: Option<f64>,
    /// Stop (and fail) before the accounted trial time would pass this ("20m", "1200").
    #[arg(long)]
    pub time_budget: Option<String>,
    /// Per-trial overhead (s) added to the accounted time.
    #[arg(long, default_value_t = 0.0)]
    pub trial_overhead: f64,
    /// The seed's exact MDR (re-measure upper bounds, external steps of two interval
    /// widths) instead of the faster default.
    #[arg(long)]
    pub seed_exact: bool,
    /// Plain binary search, one goal after the other, for comparison.
    #[arg(long)]
    pub binary: bool,
    /// Continue the search of this JSON report (one interrupted by Ctrl-C or
    /// SIGTERM): its trials are taken as done. It must come from the same
    /// goals, parameters and pipeline (or --sim / --measure-cmd).
    #[arg(long, value_name = "REPORT")]
    pub resume: Option<PathBuf>,
    /// With --sim: spend this fraction of each simulated trial's duration in
    /// real time (0.01: a 30 s trial takes 0.3 s), to watch or interrupt it.
    #[arg(long, value_name = "FACTOR", default_value_t = 0.0)]
    pub sim_time_scale: f64,
    /// Write the JSON report here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Draw the search here (PATH.svg and PATH.png are both written).
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// Write one self-contained HTML report here: the configuration, the result table,
    /// every trial and the plot inline.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
    /// No progress display.
    #[arg(long, short)]
    pub quiet: bool,
    /// Across hosts (a pipeline with `[host.NAME]` sections under mpirun,
    /// feature `mpi`): seconds to wait for a rank at each step.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub timeout: f64,
    /// `--metrics ADDR`: Prometheus metrics while running.
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

fn parse_rate(s: &str, frame: f64) -> Result<f64, InputError> {
    if let Ok(v) = s.trim().parse::<f64>() {
        return Ok(v);
    }
    let rate: Rate = s.parse().map_err(|e| InputError(format!("{e}")))?;
    rate.to_pps(frame, None)
        .map_err(|e| InputError(format!("rate {s:?}: {e}")))
}

fn parse_secs(s: &str, what: &str) -> Result<f64, InputError> {
    if let Ok(v) = s.trim().parse::<f64>() {
        if v.is_finite() && v > 0.0 {
            return Ok(v);
        }
        return Err(InputError(format!("{what} {s:?} must be positive")));
    }
    parse_duration(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| InputError(format!("{what}: {e}")))
}

/// Builds the search configuration from the arguments.
pub fn config_of(args: &SearchArgs) -> Result<SearchConfig, InputError> {
    let mut cfg = SearchConfig {
        min_rate: parse_rate(&args.min_rate, args.frame_size)?,
        max_rate: parse_rate(&args.max_rate, args.frame_size)?,
        final_duration: parse_secs(&args.final_duration, "final duration")?,
        initial_duration: parse_secs(&args.initial_duration, "initial duration")?,
        phases: args.phases,
        time_budget: args
            .time_budget
            .as_deref()
            .map(|s| parse_secs(s, "time budget"))
            .transpose()?,
        trial_overhead: args.trial_overhead,
        seed_exact: args.seed_exact,
        ..SearchConfig::csit()
    };
    if args.goals.is_empty() {
        cfg.goals = vec![
            Goal {
                exceed_ratio: args.exceed_ratio,
                duration_sum: args.duration_sum,
                ..Goal::new("NDR", 0.0, args.width)
            },
            Goal {
                exceed_ratio: args.exceed_ratio,
                duration_sum: args.duration_sum,
                ..Goal::new("PDR", args.plr, args.width)
            },
        ];
    } else {
        cfg.goals = args
            .goals
            .iter()
            .enumerate()
            .map(|(i, s)| parse_goal(s, args.width, i))
            .collect::<Result<_, _>>()?;
    }
    cfg.validate().map_err(|e| InputError(e.to_string()))?;
    Ok(cfg)
}

/// Rough estimate of the accounted time still needed: each remaining phase measures every
/// goal's two bounds at its duration.
/// A finished trial's progress line: phase, rate, duration and loss (with
/// the unsent packets apart, and the rate the generators actually sent at
/// when more than 1 % below the trial's: the trial is judged at its own
/// rate, so a generator that did not keep it must not pass unnoticed),
/// then the goals' bounds `bounds`.
fn trial_line(trial: &TrialRecord, bounds: &str) -> String {
    let unsent = match trial.unsent {
        Some(u) if u > 0 => format!(" (unsent {u})"),
        _ => String::new(),
    };
    let short = match trial.tx_pps {
        Some(tx) if tx < trial.rate_pps * (1.0 - TX_SHORT_TOLERANCE) => {
            format!(" (sent at only {:.6} Mpps)", tx / 1e6)
        }
        _ => String::new(),
    };
    format!(
        "{:<15} {:>12.6} Mpps {:>8.3} s  loss {:.6}{unsent}{short}  {bounds}",
        trial.phase.to_string(),
        trial.rate_pps / 1e6,
        trial.duration_s,
        trial.loss_ratio,
    )
}

fn estimate_total(cfg: &SearchConfig, elapsed: f64, req: &TrialRequest) -> f64 {
    use crate::search::Phase;
    let n = cfg.goals.len() as f64;
    let dur = |p: u32| {
        if p > cfg.phases {
            cfg.final_duration
        } else {
            let e = f64::from(p - 1) / f64::from(cfg.phases.max(1));
            cfg.initial_duration * (cfg.final_duration / cfg.initial_duration).powf(e)
        }
    };
    let from = match req.phase {
        Phase::Initial => 1,
        Phase::Intermediate(p) => p + 1,
        Phase::Final | Phase::Binary(_) => cfg.phases + 2,
    };
    let rest: f64 = (from..=cfg.phases + 1).map(|p| 2.0 * n * dur(p)).sum();
    elapsed + req.duration_s + rest
}

/// The measurer of a pipeline file, built by the caller (in this process,
/// or across the hosts of an MPI job).
pub type OpenPipeline<'a> = &'a dyn Fn(&Path) -> anyhow::Result<Box<dyn Measurer>>;

/// Runs `linerate search`: exit status 0, 1 for a measurer failure or a
/// failed search (the minimum rate fails, the time budget ran out), 2 for
/// bad input, 128 + N after signal N. `pipeline_measurer` builds the trial
/// measurer of a pipeline file.
pub fn run(args: &SearchArgs, pipeline_measurer: OpenPipeline) -> Result<(), Failure> {
    let cfg = config_of(args).map_err(|e| Failure::Input(e.to_string()))?;
    let (live, server) = start_metrics(&args.metrics, "search")?;
    check_sources(args)?;
    let mut searcher = searcher_of(args, &cfg)?;
    // What is measured, so that only a report of the same is resumed.
    // A bit-rate limit (`bps=`) applies at --frame-size.
    let sized = args
        .sim
        .as_deref()
        .map(str::parse::<crate::suite::SizedSim>)
        .transpose()
        .map_err(|e| Failure::Input(e.to_string()))?;
    let sim_model = sized.map(|s| s.at(args.frame_size));
    let source = match &sized {
        Some(s) => s.source(),
        None => source_of(args),
    };
    let earlier = resumed_trials(args, searcher.as_ref(), &source)?;
    let inner = measurer_of(args, sim_model, pipeline_measurer)?;
    let scale = if args.sim.is_some() {
        args.sim_time_scale
    } else {
        0.0
    };
    let mut measurer = Replay::new(
        earlier.unwrap_or_default(),
        Interruptible::new(inner, crate::sys::signals::interrupt_flag(), scale),
    );
    if let Some(p) = measurer.probe() {
        live.set_pipeline(p);
    }
    let progress = Progress::new(args.quiet, &cfg, &live);
    let result = drive_with(
        searcher.as_mut(),
        &mut measurer,
        &mut |trial, outcome| progress.trial_done(trial, outcome),
        &mut |req| progress.trial_starts(req),
    );
    progress.finish();
    let mut report = match result {
        Ok(r) => r,
        Err(e) if matches!(e.error, MeasureError::Interrupted) => {
            let mut r = report_of(searcher.as_ref());
            r.bounds_history = e.history;
            r.interrupted = true;
            r.signal = crate::sys::signals::name().map(str::to_string);
            r
        }
        Err(e) => {
            return Err(Failure::Runtime(format!(
                "trial {} failed: {}",
                e.trials.len() + 1,
                e.error
            )))
        }
    };
    report.source = Some(source);
    if let Some(path) = &args.resume {
        report.resumed_from = Some(path.clone());
        for t in report.trials.iter_mut().take(measurer.replayed()) {
            t.resumed = true;
        }
    }
    let stdout = std::io::stdout();
    let _ = print_summary(&report, &mut stdout.lock());
    write_reports(
        args,
        &report,
        measurer.replayed(),
        &measurer.hosts_of_trials(),
    )?;
    let _ = std::io::stdout().flush();
    args.metrics.stop(server);
    if report.interrupted {
        return Err(Failure::Silent(
            crate::sys::signals::exit_status().unwrap_or(130),
        ));
    }
    let failed = report.outcome.timed_out || report.outcome.goals.iter().any(|g| g.min_rate_fails);
    // The summary says which goal failed.
    if failed {
        return Err(Failure::Silent(1));
    }
    Ok(())
}

/// Exactly one thing to measure, and a time scale that makes sense.
fn check_sources(args: &SearchArgs) -> Result<(), Failure> {
    let sources = [
        args.pipeline.is_some(),
        args.sim.is_some(),
        args.measure_cmd.is_some(),
    ];
    if sources.iter().filter(|&&b| b).count() != 1 {
        return Err(Failure::Input(
            "give exactly one of PIPELINE, --sim MODEL or --measure-cmd CMD".into(),
        ));
    }
    if !(0.0..=1e3).contains(&args.sim_time_scale) {
        return Err(Failure::Input(
            "--sim-time-scale must be from 0 to 1000".into(),
        ));
    }
    Ok(())
}

/// MDR, or plain binary search with `--binary`.
fn searcher_of(args: &SearchArgs, cfg: &SearchConfig) -> Result<Box<dyn Searcher>, Failure> {
    let searcher = if args.binary {
        BinarySearch::new(cfg.clone()).map(|s| Box::new(s) as Box<dyn Searcher>)
    } else {
        MdrSearch::new(cfg.clone()).map(|s| Box::new(s) as Box<dyn Searcher>)
    };
    searcher.map_err(|e| Failure::Input(e.to_string()))
}

/// What is measured, as the report records it: the command, or the
/// pipeline file's digest (a simulated device says its own).
fn source_of(args: &SearchArgs) -> String {
    if let Some(cmd) = &args.measure_cmd {
        format!("command {cmd}")
    } else {
        let path = args.pipeline.as_deref().unwrap_or(Path::new(""));
        match std::fs::read(path) {
            Ok(bytes) => format!("pipeline (digest {})", digest(&bytes)),
            // The pipeline measurer reports a missing file in its own words.
            Err(_) => format!("pipeline {}", path.display()),
        }
    }
}

/// With `--resume REPORT`: the report's trials, once it is known to come
/// from the same goals, parameters and source.
fn resumed_trials(
    args: &SearchArgs,
    searcher: &dyn Searcher,
    source: &str,
) -> Result<Option<Vec<TrialRecord>>, Failure> {
    let Some(path) = &args.resume else {
        return Ok(None);
    };
    let earlier = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Report>(&t).map_err(|e| e.to_string()))
        .map_err(|e| {
            Failure::Input(format!(
                "--resume {}: not a search report: {e}",
                path.display()
            ))
        })?;
    let mut now = report_of(searcher);
    now.source = Some(source.to_string());
    check_resumable(&earlier, &now).map_err(|why| {
        Failure::Input(format!(
            "--resume {}: the report is from another configuration: {why}",
            path.display()
        ))
    })?;
    Ok(Some(earlier.trials))
}

/// The measurer: the simulated device, the external command, or the
/// pipeline's (a pipeline that does not load is bad input).
fn measurer_of(
    args: &SearchArgs,
    sim_model: Option<SimModel>,
    pipeline_measurer: OpenPipeline,
) -> Result<Box<dyn Measurer>, Failure> {
    if let Some(model) = sim_model {
        return Ok(Box::new(SimDut::new(model)));
    }
    if let Some(cmd) = &args.measure_cmd {
        if !cmd.contains("{rate}") || !cmd.contains("{duration}") {
            return Err(Failure::Input(
                "--measure-cmd needs {rate} and {duration} placeholders".into(),
            ));
        }
        return Ok(Box::new(CommandMeasurer::new(cmd.clone())));
    }
    let path = args.pipeline.as_deref().unwrap_or(Path::new(""));
    pipeline_measurer(path).map_err(|e| Failure::Input(format!("{e:#}")))
}

/// What the user sees while the search runs: a progress bar on a terminal,
/// plain lines otherwise (none with `--quiet`), and the `--metrics`
/// progress.
struct Progress<'a> {
    bar: ProgressBar,
    quiet: bool,
    cfg: &'a SearchConfig,
    live: &'a crate::metrics::Live,
    /// The goals' bounds after the last trial, shown with the next.
    bounds_text: std::cell::RefCell<String>,
    /// Accounted time at the end of the last trial.
    elapsed: std::cell::Cell<f64>,
}

impl<'a> Progress<'a> {
    fn new(quiet: bool, cfg: &'a SearchConfig, live: &'a crate::metrics::Live) -> Self {
        let bar = if quiet {
            ProgressBar::hidden()
        } else {
            let bar = ProgressBar::new(1000);
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{bar:30}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        };
        Progress {
            bar,
            quiet,
            cfg,
            live,
            bounds_text: Default::default(),
            elapsed: Default::default(),
        }
    }

    /// A trial finished: its line, and the bounds it moved.
    fn trial_done(&self, trial: &TrialRecord, outcome: &Outcome) {
        self.elapsed.set(trial.end_s);
        let text = publish_trial(self.live, trial, outcome);
        let line = trial_line(trial, &text);
        if self.bar.is_hidden() {
            // Not a terminal (a log, CI): plain lines instead of a progress bar.
            if !self.quiet {
                let req = TrialRequest {
                    phase: trial.phase,
                    rate_pps: trial.rate_pps,
                    duration_s: trial.duration_s,
                };
                let total = estimate_total(self.cfg, trial.end_s - trial.duration_s, &req);
                eprintln!(
                    "{line}  elapsed {:.1} s of ~{:.0} s",
                    trial.end_s,
                    total.max(trial.end_s)
                );
            }
        } else {
            self.bar.println(line);
        }
        *self.bounds_text.borrow_mut() = text;
    }

    /// A trial is about to run: the bar's position and message.
    fn trial_starts(&self, req: &TrialRequest) {
        self.live.progress(|p| {
            p.trial_started(req.rate_pps, req.duration_s);
            p.search.get_or_insert_with(Default::default).phase = req.phase.to_string();
        });
        let elapsed = self.elapsed.get();
        let total = estimate_total(self.cfg, elapsed, req);
        self.bar.set_length((total * 10.0) as u64);
        self.bar.set_position((elapsed * 10.0) as u64);
        self.bar.set_message(format!(
            "{}: {:.6} Mpps for {:.3} s | elapsed {:.0} s of ~{:.0} s | {}",
            req.phase,
            req.rate_pps / 1e6,
            req.duration_s,
            elapsed,
            total,
            self.bounds_text.borrow()
        ));
    }

    /// The search ended.
    fn finish(&self) {
        self.bar.finish_and_clear();
        self.live.progress(|p| {
            p.current = None;
            p.search.get_or_insert_with(Default::default).done = true;
        });
    }
}

/// `--json`, `--plot` and `--html`, each where asked.
/// `replayed` trials came from `--resume`; `hosts` are the later trials'
/// sections across hosts.
fn write_reports(
    args: &SearchArgs,
    report: &Report,
    replayed: usize,
    hosts: &[serde_json::Value],
) -> Result<(), Failure> {
    if let Some(path) = &args.json {
        let value = with_hosts(report, replayed, hosts)
            .map_err(|e| Failure::Runtime(format!("cannot encode the report: {e}")))?;
        write_json(path, &value)?;
    }
    if let Some(path) = &args.plot {
        create_parent(path)?;
        for ext in ["svg", "png"] {
            let p = path.with_extension(ext);
            plot::plot(report, &p).map_err(|e| Failure::Runtime(e.to_string()))?;
        }
    }
    if let Some(path) = &args.html {
        let source = if let Some(p) = &args.pipeline {
            format!("pipeline {}", p.display())
        } else if let Some(m) = &args.sim {
            format!("simulated device {m}")
        } else {
            format!("command {}", args.measure_cmd.as_deref().unwrap_or(""))
        };
        let html = crate::search::html::render(report, &source)
            .map_err(|e| Failure::Runtime(format!("cannot write {}: {e}", path.display())))?;
        write_file(path, &html)?;
    }
    Ok(())
}

/// The report as JSON, each trial measured across hosts (those after the
/// `replayed` ones, in order) with its `hosts` section as in `trial`'s JSON.
fn with_hosts(
    report: &Report,
    replayed: usize,
    hosts: &[serde_json::Value],
) -> serde_json::Result<serde_json::Value> {
    let mut v = serde_json::to_value(report)?;
    if let Some(trials) = v.get_mut("trials").and_then(|t| t.as_array_mut()) {
        for (t, h) in trials.iter_mut().skip(replayed).zip(hosts) {
            if let Some(t) = t.as_object_mut() {
                t.insert("hosts".into(), h.clone());
            }
        }
    }
    Ok(v)
}

/// `mpirun -np N linerate search FILE` with a file of several hosts (feature
/// `mpi`): rank 0 runs the search, every rank its host's part of each trial.
/// `None` when the file has no hosts (or does not load: the ordinary path
/// reports that).
#[cfg(feature = "mpi")]
pub fn across_hosts(args: &SearchArgs) -> Option<Result<(), Failure>> {
    use crate::hosts::trial::{Cluster, HostsMeasurer};
    let plan = crate::pipeline::load(args.pipeline.as_deref()?).ok()?;
    if plan.pipeline.hosts.is_empty() {
        return None;
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Some(Err(Failure::Input(format!(
            "--timeout {} is not a positive number of seconds",
            args.timeout
        ))));
    }
    let options = crate::trial::TrialOptions {
        drain: Duration::from_millis(200),
        stats_interval: None,
    };
    let timeout = Duration::from_secs_f64(args.timeout);
    let mut cluster = match Cluster::open(
        &plan,
        options,
        timeout,
        crate::sys::signals::interrupt_flag(),
    ) {
        Ok(c) => c,
        Err(e) => return Some(Err(super::hosts::report(e))),
    };
    if !cluster.is_driver() {
        return Some(cluster.follow().map_err(|e| Failure::Silent(e.code())));
    }
    let cell = std::cell::RefCell::new(Some(cluster));
    let result = run(args, &|_| {
        let c = cell
            .borrow_mut()
            .take()
            .ok_or_else(|| anyhow::anyhow!("the cluster is already measuring"))?;
        Ok(Box::new(HostsMeasurer(c, Vec::new())) as Box<dyn Measurer>)
    });
    // A search that never measured still releases the other ranks.
    drop(cell);
    Some(result)
}

/// A search trial finished: its counts and the bounds it moved go to the
/// metrics; returns the bounds as text (`NDR [lo, hi] PDR [lo, hi]`) for the
/// progress line. Shared by `search` and `suite`.
pub(super) fn publish_trial(
    live: &crate::metrics::Live,
    trial: &TrialRecord,
    outcome: &Outcome,
) -> String {
    live.progress(|p| {
        p.trial_done(trial.offered, trial.unsent.unwrap_or(0), trial.received);
        let s = p.search.get_or_insert_with(Default::default);
        s.elapsed_s = trial.end_s;
        s.bounds = outcome
            .goals
            .iter()
            .map(|g| (g.goal.name.clone(), g.lower_pps, g.upper_pps))
            .collect();
    });
    outcome
        .goals
        .iter()
        .map(|g| {
            format!(
                "{} [{}, {}]",
                g.goal.name,
                mpps(g.lower_pps),
                mpps(g.upper_pps)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::cli::status;
    use crate::search::Report;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: SearchArgs,
    }

    fn args(v: &[&str]) -> SearchArgs {
        T::parse_from(std::iter::once("search").chain(v.iter().copied())).a
    }

    fn no_pipeline(_: &Path) -> anyhow::Result<Box<dyn Measurer>> {
        anyhow::bail!("no pipelines here")
    }

    #[test]
    fn csit_defaults() {
        let c = config_of(&args(&[])).unwrap();
        assert_eq!(c, SearchConfig::csit());
    }

    #[test]
    fn goals_and_units() {
        let a = args(&[
            "--goal",
            "0",
            "--goal",
            "name=P,loss=0.01,width=0.01,exceed=0.5,sum=60",
            "--min-rate",
            "1 Mpps",
            "--max-rate",
            "10Gbps",
            "--final-duration",
            "10s",
        ]);
        let c = config_of(&a).unwrap();
        assert_eq!(c.goals.len(), 2);
        assert_eq!(c.goals[1].name, "P");
        assert_eq!(c.goals[1].duration_sum, Some(60.0));
        assert_eq!(c.min_rate, 1e6);
        assert!((c.max_rate - 10e9 / 512.0).abs() < 1e-6);
        assert_eq!(c.final_duration, 10.0);
        assert!(parse_goal("loss", 0.005, 0).is_err());
        assert!(parse_goal("width=0.1", 0.005, 0).is_err());
    }

    #[test]
    fn bad_input_exits_2() {
        for bad in [
            &[
                "--sim",
                "ndr=1e6",
                "--min-rate",
                "2 Mpps",
                "--max-rate",
                "1 Mpps",
            ][..],
            &["--sim", "ndr=1e6", "--width", "0"],
            &["--sim", "ndr=1e6", "--width", "1.5"],
            &["--sim", "ndr=1e6", "--plr", "1"],
            &["--sim", "ndr=1e6", "--plr=-0.1"],
            &["--sim", "nonsense"],
            &["--sim", "ndr=1e6", "--measure-cmd", "x {rate} {duration}"],
            &[],
            &["--measure-cmd", "no placeholders"],
            &["--sim", "ndr=1e6", "--min-rate", "fast"],
            &["pipe.toml"],
        ] {
            assert_eq!(status(&run(&args(bad), &no_pipeline)), 2, "{bad:?}");
        }
    }

    #[test]
    fn measurer_failure_exits_1() {
        let a = args(&[
            "-q",
            "--measure-cmd",
            "echo '{\"offered\": 1, \"received\": 2}' # {rate} {duration}",
            "--final-duration",
            "1",
        ]);
        assert_eq!(status(&run(&a, &no_pipeline)), 1);
        let a = args(&["-q", "--measure-cmd", "exit 1 {rate} {duration}"]);
        assert_eq!(status(&run(&a, &no_pipeline)), 1);
    }

    #[test]
    fn summary_reports_unsent_apart() {
        let mut search = MdrSearch::new(SearchConfig::csit()).unwrap();
        let mut report = crate::search::drive(
            &mut search,
            &mut SimDut::new(SimModel::default()),
            &mut |_, _| {},
        )
        .unwrap();
        let text = |r: &Report| {
            let mut out = Vec::new();
            print_summary(r, &mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(!text(&report).contains("unsent"));
        report.trials[0].unsent = Some(700);
        report.trials[1].unsent = Some(0);
        let t = text(&report);
        assert!(t.contains("unsent: 700 packets in 1 of 2 trials"), "{t}");
        assert!(!t.contains("short of the rate"), "{t}");
        // The generators' achieved rate, where known: reported, never judged.
        let rate = report.trials[2].rate_pps;
        report.trials[2].tx_pps = Some(0.5 * rate);
        report.trials[3].tx_pps = Some(0.995 * report.trials[3].rate_pps);
        let t = text(&report);
        assert!(
            t.contains("generator short of the rate: in 1 of 2 trials") && t.contains("50.0 %"),
            "{t}"
        );
        let line = trial_line(&report.trials[2], "NDR [..]");
        assert!(
            line.contains(&format!("(sent at only {:.6} Mpps)", 0.5 * rate / 1e6)),
            "{line}"
        );
        assert!(!trial_line(&report.trials[3], "").contains("sent at"));
        assert!(!trial_line(&report.trials[4], "").contains("sent at"));
    }

    #[test]
    fn sim_search_writes_json_and_plots() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let plot = dir.path().join("r.svg");
        let a = args(&[
            "-q",
            "--sim",
            "ndr=5e6,pdr=5.1e6",
            "--final-duration",
            "10",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            plot.to_str().unwrap(),
        ]);
        assert_eq!(status(&run(&a, &no_pipeline)), 0);
        let r: Report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(r.outcome.goals.len(), 2);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        for key in [
            "phase",
            "rate_pps",
            "duration_s",
            "offered",
            "received",
            "loss_ratio",
        ] {
            assert!(v["trials"][0].get(key).is_some(), "{key}");
        }
        for key in [
            "lower_pps",
            "upper_pps",
            "trial_count",
            "trial_duration_sum_s",
        ] {
            assert!(v["outcome"]["goals"][0].get(key).is_some(), "{key}");
        }
        assert!(dir.path().join("r.png").exists());
        // A device failing at the minimum rate: a clear failure.
        let a = args(&["-q", "--sim", "ndr=1e3,pdr=1.1e3", "--final-duration", "2"]);
        assert_eq!(status(&run(&a, &no_pipeline)), 1);
        // The pipeline measurer is the caller's.
        let a = args(&["-q", "pipe.toml", "--final-duration", "2"]);
        let sim = |_: &Path| -> anyhow::Result<Box<dyn Measurer>> {
            Ok(Box::new(SimDut::new(SimModel::default())))
        };
        assert_eq!(status(&run(&a, &sim)), 0);
    }
}
