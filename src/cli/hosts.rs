//! `mpirun -np N linerate hosts`: check an MPI job before a run. Every rank
//! checks in, rank 0 gathers who plays which host and sums a count from every
//! rank, for a number of rounds; a rank that dies or hangs ends the job with
//! an error naming its host.

use std::path::PathBuf;
#[cfg(feature = "mpi")]
use std::time::Duration;

use super::Failure;
#[cfg(feature = "mpi")]
use crate::hosts::mpi::{InitError, Ranks};

/// Arguments of `linerate hosts`.
#[derive(Debug, clap::Args)]
pub struct HostsArgs {
    /// Host names bound to ranks in order (rank 0 first), comma-separated.
    #[arg(long, value_delimiter = ',', conflicts_with = "pipeline")]
    names: Vec<String>,
    /// Take the hosts from a pipeline file's `[host.NAME]` sections (by `rank`).
    #[arg(long)]
    pipeline: Option<PathBuf>,
    /// Rounds of barrier + exact sum.
    #[arg(long, default_value_t = 1)]
    rounds: u64,
    /// Pause between rounds, in milliseconds.
    #[arg(long, default_value_t = 0)]
    interval_ms: u64,
    /// Seconds to wait for a peer at each step before ending the job.
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Print JSON on rank 0 instead of the table.
    #[arg(long)]
    json: bool,
}

/// Without the `mpi` feature the command exists (so `--help` is the same on
/// every build) and says how to get it.
#[cfg(not(feature = "mpi"))]
pub(super) fn run(_args: &HostsArgs) -> Result<(), Failure> {
    Err(Failure::Input(
        "this linerate was built without the `mpi` feature: rebuild with \
         `cargo build --release --features mpi` (needs Open MPI: libopenmpi-dev, openmpi-bin)"
            .into(),
    ))
}

#[cfg(feature = "mpi")]
pub(super) fn run(args: &HostsArgs) -> Result<(), Failure> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::Input(format!(
            "--timeout {} is not a positive number of seconds",
            args.timeout
        )));
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let plan = match &args.pipeline {
        Some(path) => Some(crate::pipeline::load(path)?),
        None => None,
    };
    let init = match &plan {
        Some(plan) => Ranks::init_with(|size| crate::hosts::by_rank(&plan.pipeline, size)),
        None => Ranks::init(&args.names).map_err(|e| match e {
            InitError::Hosts(m) => InitError::Hosts(format!("--names: {m}")),
            e => e,
        }),
    };
    let ranks = init.map_err(|e| match e {
        InitError::Hosts(m) => Failure::Input(m),
        e => Failure::Runtime(e.to_string()),
    })?;
    // After MPI init, so MPI's own links stay in the namespace mpirun started.
    let netns = plan
        .as_ref()
        .and_then(|p| {
            p.pipeline
                .hosts
                .iter()
                .find(|h| h.name == ranks.host().name)
        })
        .and_then(|h| h.netns.clone());
    if let Some(ns) = &netns {
        if let Err(e) = crate::sys::netns::enter(ns) {
            ranks.abort(&format!("[host.{}] `netns`: {e}", ranks.host().name));
        }
    }
    let ns_inode = crate::sys::netns::current().unwrap_or(0);
    let pid = std::process::id();
    // One line per rank, so a test (or a person) can find a rank's process;
    // one write, so lines from ranks sharing mpirun's stderr do not interleave.
    let line = format!(
        "rank {} host {} pid {pid} on {}\n",
        ranks.rank(),
        ranks.host().name,
        ranks.processor_name()
    );
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    let mut per_rank = None;
    let mut total = Vec::new();
    for round in 0..args.rounds {
        ranks.barrier(&format!("round {round} start"), timeout);
        // Checks reduction exactly: rank r contributes 1, r, its pid and its
        // network namespace.
        let (sum, rows) = ranks.sum(
            &format!("round {round} sum"),
            timeout,
            &[1, ranks.rank() as u64, u64::from(pid), ns_inode],
        );
        total = sum;
        per_rank = rows.or(per_rank);
        if args.interval_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.interval_ms));
        }
    }
    let Some(rows) = per_rank else {
        return Ok(());
    };
    let hosts: Vec<serde_json::Value> = ranks
        .hosts()
        .iter()
        .zip(&rows)
        .map(|(h, row)| serde_json::json!({"name": h.name, "rank": h.rank, "pid": row[2], "netns_inode": row[3]}))
        .collect();
    if args.json {
        let doc = serde_json::json!({
            "ranks": ranks.size(),
            "rounds": args.rounds,
            "sum": {"ranks": total.first(), "rank_ids": total.get(1)},
            "hosts": hosts,
        });
        println!("{doc:#}");
    } else {
        for (h, row) in ranks.hosts().iter().zip(&rows) {
            println!("rank {:>3}  host {:<12} pid {}", h.rank, h.name, row[2]);
        }
        println!(
            "ok: {} ranks answered {} round{}",
            ranks.size(),
            args.rounds,
            if args.rounds == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// Prints a run-across-hosts error (on rank 0, or on the rank that had it)
/// and returns the exit status.
#[cfg(feature = "mpi")]
pub(super) fn report(e: crate::hosts::trial::HostsError) -> i32 {
    use crate::hosts::trial::HostsError;
    match &e {
        HostsError::Input(m) | HostsError::Runtime(m) => eprintln!("error: {m}"),
        HostsError::Peer(..) => eprintln!("error: {e}"),
        HostsError::Interrupted => eprintln!("interrupted"),
    }
    i32::from(e.code())
}
