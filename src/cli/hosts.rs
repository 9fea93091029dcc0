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
    /// Take the hosts from a pipeline file's `[host.NAME]` sections (by `rank`
    /// or `hostname`).
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
        Some(plan) => Ranks::init_with(timeout, |machines| {
            crate::hosts::bind_file(&plan.pipeline, machines)
        }),
        None => Ranks::init(&args.names, timeout).map_err(|e| match e {
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
    // One line per rank, so a test (or a person) can find a rank's process.
    let line = format!(
        "rank {} host {} pid {pid} on {}\n",
        ranks.rank(),
        ranks.host().name,
        ranks.processor_name()
    );
    super::eprint_whole(&line);
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
        .map(|(h, row)| serde_json::json!({"name": h.name, "rank": h.rank, "machine": ranks.machines().get(h.rank), "pid": row[2], "netns_inode": row[3]}))
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
            println!(
                "rank {:>3}  host {:<12} machine {:<16} pid {}",
                h.rank,
                h.name,
                ranks.machines().get(h.rank).map_or("?", |m| m.as_str()),
                row[2]
            );
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
/// and returns the failure that ends with its exit status.
#[cfg(feature = "mpi")]
pub(super) fn report(e: crate::hosts::trial::HostsError) -> Failure {
    use crate::hosts::trial::HostsError;
    let line = match &e {
        HostsError::Input(m) | HostsError::Runtime(m) => format!("error: {m}\n"),
        HostsError::Peer(..) => format!("error: {e}\n"),
        HostsError::Interrupted(_) => "interrupted\n".to_string(),
    };
    super::eprint_whole(&line);
    Failure::Silent(e.code())
}

/// Rank 0's report of what has finished, written the moment a signal
/// arrives, from a thread of its own: mpirun passes a SIGTERM on to every
/// rank and SIGKILLs them about a second later (Open MPI's
/// `odls_base_sigkill_timeout`), which can be before the collective clean-up
/// after the signal lets the control thread write the report. The control
/// thread still writes the whole report when it gets there (a file is
/// replaced whole, so a kill mid-write leaves this one).
#[cfg(feature = "mpi")]
pub(super) struct EarlyReport {
    doc: std::sync::Arc<std::sync::Mutex<serde_json::Value>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[cfg(feature = "mpi")]
impl EarlyReport {
    /// How often the thread looks at the signal flag: far inside mpirun's
    /// second, and no load to speak of.
    const POLL: Duration = Duration::from_millis(5);

    /// Watches for a signal and then writes `doc` (as last set), with
    /// `"interrupted": true` and the signal's name, to `path`. Nothing to
    /// watch for stdout ("-") or no path: the report is printed at the end.
    pub(super) fn start(path: Option<&std::path::Path>, doc: serde_json::Value) -> EarlyReport {
        use std::sync::atomic::Ordering;
        let doc = std::sync::Arc::new(std::sync::Mutex::new(doc));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = path.filter(|p| p.as_os_str() != "-").map(|path| {
            let (doc, stop, path) = (doc.clone(), stop.clone(), path.to_path_buf());
            let flag = crate::sys::signals::interrupt_flag();
            std::thread::spawn(move || loop {
                // The flag first: a signal seen as the watch ends is still
                // written (`finish` waits for it).
                if flag.load(Ordering::Relaxed) {
                    let mut d = doc.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(m) = d.as_object_mut() {
                        m.insert("interrupted".into(), true.into());
                        let signal = crate::sys::signals::name().unwrap_or("a signal");
                        m.insert("signal".into(), signal.into());
                    }
                    // The control thread reports a failure to write.
                    let _ = super::output::write_json(&path, &d);
                    return;
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Self::POLL);
            })
        });
        EarlyReport { doc, stop, thread }
    }

    /// Changes what a signal would write (after each finished step).
    pub(super) fn update(&self, f: impl FnOnce(&mut serde_json::Value)) {
        f(&mut self.doc.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Ends the watch, waiting for a write under way, so the control
    /// thread's own write comes after it.
    pub(super) fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(feature = "mpi")]
impl Drop for EarlyReport {
    fn drop(&mut self) {
        self.end();
    }
}
