//! `linerate check PIPELINE`: validate and print the plan.

use std::path::PathBuf;

use super::Failure;

/// Arguments of `linerate check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    /// Print the pipeline as a Graphviz graph instead (pipe it to `dot -Tsvg`).
    #[arg(long)]
    dot: bool,
}

pub(super) fn run(args: &CheckArgs) -> Result<(), Failure> {
    let plan = crate::pipeline::load(&args.pipeline)?;
    if args.dot {
        print!("{}", plan.dot());
    } else {
        print!("{plan}");
        println!("ok: {} is valid", args.pipeline.display());
    }
    Ok(())
}
