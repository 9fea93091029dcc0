//! `linerate man [--dir DIR]`: man pages (roff), generated from the clap
//! definition with clap_mangen, so they say what `--help` says.

use std::path::PathBuf;

use clap::{Args, CommandFactory};

use super::{Cli, Failure};

/// Arguments of `linerate man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write linerate.1 and one page per subcommand (linerate-run.1, ...) into
    /// this directory instead of printing linerate.1 on stdout.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Prints linerate(1), or writes every page into `args.dir`.
pub fn run(args: &ManArgs) -> Result<(), Failure> {
    let cmd = Cli::command();
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .and_then(|()| clap_mangen::generate_to(cmd, dir))
                .map_err(|e| Failure::Runtime(format!("{}: {e}", dir.display())))?;
            println!("man pages written to {}", dir.display());
            Ok(())
        }
        None => match clap_mangen::Man::new(cmd).render(&mut std::io::stdout().lock()) {
            // A closed pipe (`linerate man | head`) is not a failure.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Failure::Runtime(format!("writing the man page: {e}")))
            }
            _ => Ok(()),
        },
    }
}
