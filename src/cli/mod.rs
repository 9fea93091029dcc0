//! The command line: one file per subcommand, each thin (parse arguments, call
//! the library, print). Every subcommand returns `Result<(), Failure>`, and
//! [`main`] turns it into the exit status: 0 success, 1 runtime failure (of
//! what was measured or asked), 2 bad input (arguments, files read or
//! written, the environment), 128 + N after signal N.

mod check;
mod compare;
mod completions;
pub mod doctor;
mod hosts;
mod keys;
mod latency;
mod man;
mod metrics_args;
mod output;
pub mod reliable;
pub mod rpc;
mod run;
pub mod search;
pub mod spead;
pub mod suite;
mod trial;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use metrics_args::MetricsArgs;

/// linerate: a kernel-bypass packet pipeline for line-rate testing, SPEAD
/// ingest and reliable-transport research.
#[derive(Debug, Parser)]
#[command(name = "linerate", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate a pipeline file and print its plan.
    Check(check::CheckArgs),
    /// Run a pipeline: live stats on stderr, a summary on stdout, JSON on request.
    Run(run::RunArgs),
    /// Run one generator trial at a rate for a duration and report exact counts.
    Trial(trial::TrialArgs),
    /// NDR/PDR search (MDR, as FD.io CSIT): on a pipeline, a simulated device or an external command.
    Search(search::SearchArgs),
    /// The benchmark across frame sizes (RFC 2544, FD.io CSIT): per size the NDR/PDR search, latency at loads, back-to-back frames and the frame-loss curve.
    Suite(suite::SuiteArgs),
    /// Compare two search (or suite) reports goal by goal; exit 1 on a regression beyond the widths.
    Compare(compare::CompareArgs),
    /// SPEAD: send heaps (or an F-engine simulator's stream) and receive them into heaps or chunks, like spead2's tools.
    Spead(spead::SpeadArgs),
    /// Latency stats files: merge them exactly.
    Latency(latency::LatencyArgs),
    /// Reliable channels: compare our endpoint with usnic mode on a simulated link.
    Reliable(reliable::ReliableArgs),
    /// copyrpc-style ring RPC over shared memory: a server and a benchmark client.
    Rpc(rpc::RpcArgs),
    /// Check this machine for kernel-bypass work: hugepages, DPDK, devices,
    /// IOMMU/vfio, isolated cores, RDMA; each problem with its fix.
    Doctor(doctor::DoctorArgs),
    /// Check an MPI job (under mpirun): every rank checks in, rank 0 sums and reports; a dead or hung rank is named.
    Hosts(hosts::HostsArgs),
    /// Every pipeline key of every section, port kind and stage kind: type, default, meaning.
    Keys(keys::KeysArgs),
    /// Print a shell completion script (bash, zsh, fish, ...) on stdout.
    Completions(completions::CompletionsArgs),
    /// Print the man page linerate(1), or write every page with --dir.
    Man(man::ManArgs),
}

/// Why a subcommand failed, classified for the exit status.
#[derive(Debug)]
pub enum Failure {
    /// The user's input is wrong: an argument, a file to read or to write,
    /// the machine's setup (exit 2).
    Input(String),
    /// What was measured or asked failed at run time (exit 1).
    Runtime(String),
    /// Already reported (a summary that says it, a failure another rank
    /// named, a stop by signal N: 128 + N, as a shell reports it); exit with
    /// this status.
    Silent(u8),
}

impl Failure {
    /// The process exit status this failure ends with.
    pub fn exit_status(&self) -> u8 {
        match self {
            Failure::Input(_) => 2,
            Failure::Runtime(_) => 1,
            Failure::Silent(c) => *c,
        }
    }

    /// Prints the message, if any, as `WHO: message` on stderr, and returns
    /// the exit status.
    pub fn report(&self, who: &str) -> u8 {
        if let Failure::Input(m) | Failure::Runtime(m) = self {
            eprint_whole(&format!("{who}: {m}\n"));
        }
        self.exit_status()
    }
}

/// The exit status of a subcommand's result (0 when it succeeded).
pub fn status(result: &Result<(), Failure>) -> u8 {
    result.as_ref().err().map_or(0, Failure::exit_status)
}

/// The exit status of a subcommand's result, its failure's message (if
/// any) printed on stderr as `WHO: message`.
pub fn finish(who: &str, result: Result<(), Failure>) -> u8 {
    result.err().map_or(0, |f| f.report(who))
}

impl From<crate::pipeline::LoadError> for Failure {
    fn from(e: crate::pipeline::LoadError) -> Self {
        Failure::Input(e.to_string())
    }
}

/// Writes `line` (newline included) to stderr in one write. The ranks of an
/// MPI job share mpirun's stderr pipe, and `eprintln!` writes a formatted
/// line in pieces that interleave mid-line with another rank's (a test once
/// read "error: host error: b (rank 1)host b ..."); a pipe keeps a write of
/// up to PIPE_BUF bytes whole.
fn eprint_whole(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `linerate search`: across hosts when the pipeline has several (feature
/// `mpi`), else in this process.
fn search_cmd(a: &search::SearchArgs) -> Result<(), Failure> {
    #[cfg(feature = "mpi")]
    if let Some(result) = search::across_hosts(a) {
        return result;
    }
    search::run(a, &|path| {
        let m = crate::search::pipeline::PipelineMeasurer::open(
            path,
            std::time::Duration::from_millis(200),
            crate::sys::signals::interrupt_flag(),
        )?;
        Ok(Box::new(m) as Box<dyn crate::search::measurer::Measurer>)
    })
}

/// Runs the command line and returns the process exit status.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // clap uses 2 for usage errors and 0 for --help/--version.
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    // A command's message starts with `error:`, or with the command's own
    // name for the tools that stand alone (as spead2's and usnic's do).
    let (who, result) = match cli.command {
        Command::Check(a) => ("error", check::run(&a)),
        Command::Run(a) => ("error", run::run(&a)),
        Command::Trial(a) => ("error", trial::run(&a)),
        Command::Latency(a) => ("error", latency::run(&a)),
        Command::Compare(a) => ("error", compare::run(&a)),
        Command::Spead(a) => ("linerate spead", spead::run(&a)),
        Command::Search(a) => ("error", search_cmd(&a)),
        Command::Suite(a) => ("error", suite::run(&a)),
        Command::Reliable(a) => ("linerate reliable compare", reliable::run(&a)),
        Command::Doctor(a) => ("linerate doctor", doctor::run(&a)),
        Command::Rpc(a) => ("linerate rpc", rpc::run(&a)),
        Command::Hosts(a) => ("error", hosts::run(&a)),
        Command::Keys(a) => ("error", keys::run(&a)),
        Command::Completions(a) => ("error", completions::run(&a)),
        Command::Man(a) => ("error", man::run(&a)),
    };
    ExitCode::from(finish(who, result))
}
