//! `linerate reliable compare`: our defaults against usnic mode over the
//! simulated link, printed as a table (and optionally written as JSON).

use super::output::write_json;
use super::Failure;
use crate::reliable::compare::{compare, table, Params};
use crate::reliable::sim::LinkConfig;
use crate::units::{parse_duration, parse_size, Rate};
use clap::{Args, Subcommand};

/// `linerate reliable ...`.
#[derive(Debug, Clone, Args)]
pub struct ReliableArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ReliableCommand,
}

/// The `reliable` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum ReliableCommand {
    /// Our defaults against usnic mode on the same simulated link.
    Compare(CompareArgs),
}

/// Arguments of `linerate reliable compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// Random loss rates in percent, comma-separated.
    #[arg(long, default_value = "0,1,5", value_delimiter = ',')]
    pub loss: Vec<f64>,
    /// Messages per run.
    #[arg(long, default_value_t = 4000)]
    pub messages: u64,
    /// Message size (e.g. "8 KiB").
    #[arg(long, default_value = "8 KiB")]
    pub size: String,
    /// Runs (seeds) per cell; medians are reported.
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// One-way link latency (e.g. "10us").
    #[arg(long, default_value = "10us")]
    pub latency: String,
    /// Link rate in bits per second (e.g. "10 Gbps").
    #[arg(long, default_value = "10 Gbps")]
    pub bandwidth: String,
    /// TX ring of the link in packets: a full ring pushes back on the sender.
    /// A deep one (e.g. 16384) models the mem wire, where nothing pushes back
    /// and a standing queue builds in front of the slower side.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Extra delay per packet, drawn uniformly from 0 to this (e.g. "1ms"),
    /// as a busy relay or a descheduled forwarding process adds (0: none).
    #[arg(long, default_value = "0")]
    pub jitter: String,
    /// Whether jitter keeps packets in order (`keep`, as a FIFO relay does)
    /// or lets a packet overtake an earlier one (`any`).
    #[arg(long, default_value = "keep", value_parser = ["keep", "any"])]
    pub jitter_order: String,
    /// Our `window` key: segments in flight per channel, 64..=32768
    /// (rounded up to a power of two; default 16384). usnic mode keeps its own.
    #[arg(long)]
    pub window: Option<i64>,
    /// Our `credits` key: messages in flight per channel (the receiver's
    /// reassembly slots), 1..=32768 (rounded up to a power of two; default
    /// 4096). usnic mode keeps its own.
    #[arg(long)]
    pub credits: Option<i64>,
    /// Offered load of the latency run, percent of the link rate.
    #[arg(long, default_value_t = 50.0)]
    pub load: f64,
    /// Also write the rows as JSON to this path.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

fn link_and_params(a: &CompareArgs) -> Result<(LinkConfig, Params, Vec<f64>), String> {
    let latency = parse_duration(&a.latency).map_err(|e| e.to_string())?;
    let bandwidth_bps = match a.bandwidth.parse::<Rate>().map_err(|e| e.to_string())? {
        Rate::L2Bps(b) | Rate::L1Bps(b) if b >= 1e3 => b as u64,
        _ => {
            return Err(format!(
                "--bandwidth {:?}: give bits per second, like \"10 Gbps\"",
                a.bandwidth
            ))
        }
    };
    let jitter = parse_duration(&a.jitter).map_err(|e| format!("--jitter: {e}"))?;
    if jitter > core::time::Duration::from_secs(1) {
        return Err(format!("--jitter {}: at most 1s", a.jitter));
    }
    let size = parse_size(&a.size).map_err(|e| e.to_string())?;
    if !(8..=1 << 20).contains(&size) {
        return Err(format!("--size {}: must be 8 B .. 1 MiB", a.size));
    }
    let mut losses = Vec::new();
    for &l in &a.loss {
        if !(0.0..100.0).contains(&l) {
            return Err(format!("--loss {l}: must be a percentage in [0, 100)"));
        }
        losses.push(l / 100.0);
    }
    if a.queue == 0 {
        return Err("--queue must be at least 1 packet".into());
    }
    if a.messages == 0 || a.seeds == 0 {
        return Err("--messages and --seeds must be at least 1".into());
    }
    if !(a.load > 0.0 && a.load <= 100.0) {
        return Err(format!("--load {}: must be in (0, 100]", a.load));
    }
    let link = LinkConfig {
        latency,
        bandwidth_bps,
        queue: a.queue,
        jitter,
        jitter_ordered: a.jitter_order == "keep",
        ..LinkConfig::default()
    };
    let params = Params {
        messages: a.messages,
        message_size: size as usize,
        seeds: a.seeds,
        load: a.load / 100.0,
        ours: ours_config(a)?,
    };
    Ok((link, params, losses))
}

/// Our configuration with `--window` and `--credits` applied through the
/// pipeline keys of the same names, so both are validated (and rounded) as a
/// pipeline file's are.
fn ours_config(a: &CompareArgs) -> Result<crate::reliable::Config, String> {
    let mut keys = String::new();
    if let Some(w) = a.window {
        keys += &format!("window = {w}\n");
    }
    if let Some(c) = a.credits {
        keys += &format!("credits = {c}\n");
    }
    crate::pipeline::reliable_endpoint(&keys).map_err(|(key, valid)| {
        let v = if key == "window" { a.window } else { a.credits };
        format!("--{key} {}: {valid}", v.unwrap_or_default())
    })
}

/// Runs the command (exit status 0 ok, 1 failure, 2 bad arguments).
pub fn run(args: &ReliableArgs) -> Result<(), Failure> {
    match &args.command {
        ReliableCommand::Compare(a) => run_compare(a),
    }
}

fn run_compare(args: &CompareArgs) -> Result<(), Failure> {
    let (link, params, losses) = link_and_params(args).map_err(Failure::Input)?;
    let rows = compare(&link, &losses, &params).map_err(Failure::Runtime)?;
    print!("{}", table(&rows));
    if let Some(path) = &args.json {
        write_json(path, &rows)?;
    }
    Ok(())
}

#[cfg(test)]
mod test {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ReliableArgs,
    }

    impl T {
        fn a_compare(&self) -> CompareArgs {
            let ReliableCommand::Compare(c) = &self.a.command;
            c.clone()
        }
    }

    fn parse(args: &[&str]) -> T {
        let mut v = vec!["linerate", "compare"];
        v.extend_from_slice(args);
        T::parse_from(v)
    }

    #[test]
    fn bad_arguments_exit_2() {
        for bad in [
            vec!["--loss", "120"],
            vec!["--bandwidth", "5 Mpps"],
            vec!["--latency", "fast"],
            vec!["--size", "4"],
            vec!["--messages", "0"],
            vec!["--queue", "0"],
            vec!["--jitter", "soon"],
            vec!["--jitter", "5s"],
            vec!["--window", "63"],
            vec!["--window", "40000"],
            vec!["--credits", "0"],
            vec!["--credits=-3"],
        ] {
            let t = parse(&bad);
            assert_eq!(crate::cli::status(&run(&t.a)), 2, "{bad:?}");
        }
    }

    #[test]
    fn window_and_credits_are_validated_as_the_keys_and_named() {
        let e = ours_config(&parse(&["--window", "63"]).a_compare()).unwrap_err();
        assert!(e.starts_with("--window 63: an integer 64..=32768"), "{e}");
        let e = ours_config(&parse(&["--credits", "40000"]).a_compare()).unwrap_err();
        assert!(
            e.starts_with("--credits 40000: an integer 1..=32768"),
            "{e}"
        );
        let c =
            ours_config(&parse(&["--window", "5000", "--credits", "2048"]).a_compare()).unwrap();
        assert_eq!((c.window, c.credits), (5000, 2048));
        assert_eq!(c.sack, crate::reliable::Config::default().sack);
    }

    #[test]
    fn small_run_writes_json() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let t = parse(&[
            "--loss",
            "0,5",
            "--messages",
            "20",
            "--seeds",
            "1",
            "--size",
            "2000",
            "--queue",
            "16384",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(crate::cli::status(&run(&t.a)), 0);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 4);
        assert_eq!(v[0]["mode"], "ours");
    }
}
