//! The command line: one file per subcommand, each thin.

use clap::Parser;

/// linerate: a kernel-bypass packet pipeline.
#[derive(Debug, Parser)]
#[command(name = "linerate", version, about)]
pub struct Cli {}

/// Runs the command line and returns the process exit status.
pub fn main() -> i32 {
    let _cli = Cli::parse();
    0
}
