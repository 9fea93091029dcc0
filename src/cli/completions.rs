//! `linerate completions SHELL`: the shell completion script, from the same clap
//! definition the command line parses with (so it never falls behind).

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{Cli, Failure};

/// Arguments of `linerate completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// Prints the completion script for `args.shell` on stdout.
pub fn run(args: &CompletionsArgs) -> Result<(), Failure> {
    // Into memory first: clap_complete panics when its writer fails, and a
    // closed pipe (`linerate completions bash | head`) is no reason to panic.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "linerate", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::Runtime(format!(
            "writing the completion script: {e}"
        ))),
        _ => Ok(()),
    }
}
