//! The kernel device under test of `scripts/kernel-dut`, for the tests that
//! drive it: a namespace router, bridge or tunnel end with unique names,
//! removed when dropped (also on panic), every script call under `timeout`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The script.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kernel-dut")
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(2))
            == Some("0")
    })
}

/// One `scripts/kernel-dut` device, named uniquely.
pub struct Dut {
    /// Its namespace (interfaces NAME-a, NAME-b).
    pub name: String,
}

impl Dut {
    /// `kernel-dut up NAME ARGS...`, or None (a skip, said) without root or
    /// one of `tools` (iproute2's `ip` is always needed).
    pub fn up(test: &str, tools: &[&str], args: &[&str]) -> Option<Dut> {
        let have = |tool: &str| {
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !is_root() || !have("ip") || !tools.iter().all(|t| have(t)) {
            super::missing(&format!("{test}: root, iproute2 and {tools:?}"));
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lr{}k{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dut = Dut { name };
        let out = dut.script(60, "up", args);
        assert!(
            out.status.success(),
            "kernel-dut up {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(dut)
    }

    /// Its interfaces' counters (and per-VLAN counts, as a bridge).
    pub fn stats(&self) -> serde_json::Value {
        serde_json::from_slice(&self.script(30, "stats", &[]).stdout).unwrap()
    }

    /// `kernel-dut CMD NAME ARGS...` under `timeout LIMIT_S`.
    pub fn script(&self, limit_s: u32, cmd: &str, args: &[&str]) -> std::process::Output {
        Command::new("timeout")
            .arg(limit_s.to_string())
            .arg(script())
            .args([cmd, &self.name])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Dut {
    fn drop(&mut self) {
        let _ = self.script(60, "down", &[]);
    }
}
