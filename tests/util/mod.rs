//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use linerate::runtime::build::build;
use linerate::runtime::run::{run, RunOptions, RunReport};

/// Loads, builds and runs a pipeline given as text, for at most `limit`.
pub fn run_text(name: &str, text: &str, limit: Duration) -> RunReport {
    let plan =
        linerate::pipeline::load_str(Path::new(name), text).unwrap_or_else(|e| panic!("{e}"));
    let built = build(&plan).unwrap_or_else(|e| panic!("{e}"));
    let stop = AtomicBool::new(false);
    run(
        built,
        RunOptions {
            duration: Some(limit),
            interrupt: &stop,
            drain_timeout: Duration::from_secs(2),
            drain_quiet: linerate::runtime::run::DRAIN_QUIET,
            on_tick: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The `linerate` binary.
pub fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_linerate"))
}

/// A free UDP port on loopback.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes a file in `dir` and returns its path.
pub fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
