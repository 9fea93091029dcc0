//! The command line: one file per subcommand, each thin (parse arguments, call
//! the library, print). Exit status: 0 success, 1 runtime failure, 2 bad input.

mod check;
mod completions;
pub mod doctor;
mod hosts;
mod keys;
mod latency;
mod man;
pub mod reliable;
pub mod rpc;
mod run;
pub mod search;
pub mod spead;
mod trial;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

/// A failure, classified for the exit status.
#[derive(Debug)]
pub enum Failure {
    /// The user's input is wrong (exit 2).
    Input(String),
    /// Something failed at run time (exit 1).
    Runtime(String),
    /// Already reported; exit with this status.
    Silent(u8),
}

impl Failure {
    fn exit(&self) -> u8 {
        match self {
            Failure::Input(_) => 2,
            Failure::Runtime(_) => 1,
            Failure::Silent(c) => *c,
        }
    }
}

impl From<crate::pipeline::LoadError> for Failure {
    fn from(e: crate::pipeline::LoadError) -> Self {
        Failure::Input(e.to_string())
    }
}

/// Maps an area's own exit status (0, 1, 2) to a result; the area has
/// already printed its message.
/// Writes `line` (newline included) to stderr in one write. The ranks of an
/// MPI job share mpirun's stderr pipe, and `eprintln!` writes a formatted
/// line in pieces that interleave mid-line with another rank's (a test once
/// read "error: host error: b (rank 1)host b ..."); a pipe keeps a write of
/// up to PIPE_BUF bytes whole.
fn eprint_whole(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn exit_code(code: i32) -> Result<(), Failure> {
    match code {
        0 => Ok(()),
        2 => Err(Failure::Silent(2)),
        // Interrupted by a signal: 128 + its number, as a shell reports it.
        c @ 129..=255 => Err(Failure::Silent(c as u8)),
        _ => Err(Failure::Silent(1)),
    }
}

/// `linerate search`: across hosts when the pipeline has several (feature
/// `mpi`), else in this process.
fn search_cmd(a: &search::SearchArgs) -> i32 {
    #[cfg(feature = "mpi")]
    if let Some(code) = search::across_hosts(a) {
        return code;
    }
    search::run(a, &|path| {
        let m = crate::search::pipeline::PipelineMeasurer::open(
            path,
            std::time::Duration::from_millis(200),
            run::interrupt_flag(),
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
    let result = match cli.command {
        Command::Check(a) => check::run(&a),
        Command::Run(a) => run::run(&a),
        Command::Trial(a) => trial::run(&a),
        Command::Latency(a) => latency::run(&a),
        Command::Spead(a) => exit_code(spead::run(&a)),
        Command::Search(a) => exit_code(search_cmd(&a)),
        Command::Reliable(a) => exit_code(reliable::run(&a)),
        Command::Doctor(a) => exit_code(doctor::run(&a)),
        Command::Rpc(a) => exit_code(rpc::run(&a)),
        Command::Hosts(a) => hosts::run(&a),
        Command::Keys(a) => keys::run(&a),
        Command::Completions(a) => completions::run(&a),
        Command::Man(a) => man::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if let Failure::Input(m) | Failure::Runtime(m) = &f {
                eprint_whole(&format!("error: {m}\n"));
            }
            ExitCode::from(f.exit())
        }
    }
}
