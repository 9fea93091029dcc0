//! `mpirun -np N linerate hosts`: check an MPI job before a run. Every rank
//! checks in, rank 0 gathers who plays which host and sums a count from every
//! rank, for a number of rounds; a rank that dies or hangs ends the job with
//! an error naming its host.

use std::time::Duration;

use super::Failure;
use crate::hosts::mpi::{InitError, Ranks};

/// Arguments of `linerate hosts`.
#[derive(Debug, clap::Args)]
pub struct HostsArgs {
    /// Host names bound to ranks in order (rank 0 first), comma-separated.
    #[arg(long, value_delimiter = ',')]
    names: Vec<String>,
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

pub(super) fn run(args: &HostsArgs) -> Result<(), Failure> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(Failure::Input(format!(
            "--timeout {} is not a positive number of seconds",
            args.timeout
        )));
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let ranks = Ranks::init(&args.names).map_err(|e| match e {
        InitError::Hosts(m) => Failure::Input(format!("--names: {m}")),
        e => Failure::Runtime(e.to_string()),
    })?;
    let pid = std::process::id();
    // One line per rank, so a test (or a person) can find a rank's process.
    eprintln!(
        "rank {} host {} pid {pid} on {}",
        ranks.rank(),
        ranks.host().name,
        ranks.processor_name()
    );
    let mut per_rank = None;
    let mut total = Vec::new();
    for round in 0..args.rounds {
        ranks.barrier(&format!("round {round} start"), timeout);
        // Checks reduction exactly: rank r contributes 1, r and its pid.
        let (sum, rows) = ranks.sum(
            &format!("round {round} sum"),
            timeout,
            &[1, ranks.rank() as u64, u64::from(pid)],
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
        .map(|(h, row)| serde_json::json!({"name": h.name, "rank": h.rank, "pid": row[2]}))
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
