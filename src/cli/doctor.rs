//! `linerate doctor [--json] [--strict]`.

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

/// Runs doctor; returns the exit status (0, or 1 with `--strict` and a problem).
pub fn run(args: &DoctorArgs) -> i32 {
    let report = diagnose(&Roots::default());
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("linerate doctor: cannot encode the report: {e}");
                return 1;
            }
        }
    } else {
        print!("{}", render(&report));
    }
    i32::from(args.strict && report.has_problems())
}
