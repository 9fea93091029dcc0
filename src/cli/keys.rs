//! `linerate keys [KIND] [--markdown | --json]`: every section, port kind and
//! stage kind with its keys' types, defaults and meanings, from the schema
//! registry (the manual's key reference is this command's markdown).

use clap::Args;

use super::Failure;
use crate::pipeline::reference;

/// Arguments of `linerate keys`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    /// A section (pipeline, pool, ring, eal), port kind (mem, udp, ...) or
    /// stage kind (source, generator, ...); all of them when left out.
    pub kind: Option<String>,
    /// Print markdown tables (the manual's reference page) instead of text.
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Prints the reference for `args.kind`, or for everything.
pub fn run(args: &KeysArgs) -> Result<(), Failure> {
    let kinds = match &args.kind {
        Some(k) => reference::find(k).map_err(Failure::Input)?,
        None => reference::all(),
    };
    let out = if args.markdown {
        reference::markdown(&kinds)
    } else if args.json {
        let mut s = serde_json::to_string_pretty(&reference::json(&kinds))
            .map_err(|e| Failure::Runtime(e.to_string()))?;
        s.push('\n');
        s
    } else {
        reference::text(&kinds)
    };
    print!("{out}");
    Ok(())
}
