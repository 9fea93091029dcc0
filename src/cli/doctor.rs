//! `linerate doctor [--json] [--strict]`.

use super::Failure;
use crate::doctor::{diagnose, render, Roots};

/// Check this machine for kernel-bypass I/O: hugepages, DPDK and its PMDs,
/// NICs and drivers, IOMMU/vfio, isolated cores, RDMA devices.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorArgs {
    /// Print the report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 when a problem is found (default: report only).
    #[arg(long)]
    pub strict: bool,
}

/// Runs doctor: 0, or 1 (the report says why) with `--strict` and a problem.
pub fn run(args: &DoctorArgs) -> Result<(), Failure> {
    let report = diagnose(&Roots::default());
    if args.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| Failure::Runtime(format!("cannot encode the report: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", render(&report));
    }
    if args.strict && report.has_problems() {
        return Err(Failure::Silent(1));
    }
    Ok(())
}
