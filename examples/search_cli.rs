//! `linerate search` as a standalone program until the subcommand is wired into the main
//! CLI: `cargo run --example search_cli -- --sim "ndr=12e6,pdr=12.24e6" --plot /tmp/s.svg`.
//! Pipelines are not available here (the pipeline trial measurer lives in the main CLI).

use clap::Parser;
use linerate::search::cli::{run, SearchArgs};

#[derive(Parser)]
#[command(name = "search", about = "NDR/PDR search (MDR)")]
struct Cli {
    #[command(flatten)]
    args: SearchArgs,
}

fn main() {
    let cli = Cli::parse();
    let status = run(&cli.args, &|path| {
        anyhow::bail!(
            "{}: pipelines need the main `linerate search` command",
            path.display()
        )
    });
    std::process::exit(status);
}
