//! The manual's results page (`docs/src/benchmarks.md`) is rendered from
//! `docs/results.json` by `scripts/results-page`, so each figure lives in one
//! place: these tests fail when the page and the JSON disagree, and check that
//! a benchmark run's figures are taken in and judged by the project's targets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `scripts/results-page ARGS` from the repository's root.
fn results_page(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(root().join("scripts/results-page"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("python3 runs scripts/results-page")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Copies the JSON and the page into `dir`; returns their paths there.
fn copies(dir: &Path) -> (PathBuf, PathBuf) {
    let (json, page) = (dir.join("results.json"), dir.join("benchmarks.md"));
    std::fs::copy(root().join("docs/results.json"), &json).unwrap();
    std::fs::copy(root().join("docs/src/benchmarks.md"), &page).unwrap();
    (json, page)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_page_is_what_the_json_renders() {
    let out = results_page(&["--check"]);
    assert!(
        out.status.success(),
        "docs/src/benchmarks.md is not what docs/results.json renders: edit the JSON and run \
         scripts/results-page (the diff is page -> rendered)\n{}",
        text(&out)
    );
}

#[test]
fn a_figure_changed_in_the_json_alone_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let (json, page) = copies(dir.path());
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ring = j["targets"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|t| t["id"] == "ring-hop")
        .expect("a ring-hop record");
    ring["measured"] = "0.99x (a figure the page does not hold)".into();
    std::fs::write(&json, j.to_string()).unwrap();
    let out = results_page(&["--check", "--json", s(&json), "--page", s(&page)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("+| stage-to-stage ring hop") && stdout.contains("0.99x (a figure"),
        "the diff names the row: {}",
        text(&out)
    );
}

#[test]
fn every_row_has_its_cpu_date_and_command_or_says_not_measured_yet() {
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("docs/results.json")).unwrap())
            .unwrap();
    let page = std::fs::read_to_string(root().join("docs/src/benchmarks.md")).unwrap();
    let targets = j["targets"].as_array().unwrap();
    for t in targets {
        let row = page
            .lines()
            .find(|l| l.starts_with(&format!("| {} |", t["what"].as_str().unwrap())))
            .unwrap_or_else(|| panic!("no row for {}", t["id"]));
        if t["measured"].is_null() {
            assert!(row.contains("| not measured yet |"), "{row}");
            continue;
        }
        for key in ["peer", "target", "met", "cpu", "date", "command"] {
            let v = t[key].as_str().unwrap_or_default();
            assert!(!v.is_empty(), "{}: no {key}", t["id"]);
        }
        assert!(
            t["date"].as_str().unwrap().len() == 10,
            "{}: a date is YYYY-MM-DD",
            t["id"]
        );
    }
    assert!(page.lines().count() < 150, "the results page stays short");
}

/// A bench-cpu summary.json with the ring hop at `ring` (the script's own
/// target, <= 1.5, says met), an RPC depth 1 met over all runs but not in its
/// fast regime, and no SPEAD rows.
fn summary(ring: f64) -> String {
    format!(
        r#"{{"cpu_model": "Intel(R) Xeon(R) Platinum 8481C", "cpu_vendor": "GenuineIntel",
        "targets": [
          {{"what": "DPDK forwarding, 1 lcore, burst 32, net_null pair both ways (no-huge)",
            "measured": "1.10x (linerate 70.10 Mpps, testpmd io 64.00 Mpps)", "value": 1.1,
            "target": ">= 1.0x", "met": true, "source": "dpdk-no-huge"}},
          {{"what": "ring hop, 2 lcores, bulk 32, 16 B elements",
            "measured": "{ring:.2}x (linerate 12.0 cycles/elem, DPDK rte_ring SP/SC 10.0 cycles/elem)",
            "value": {ring}, "target": "<= 1.5x", "met": true, "source": "ring"}},
          {{"what": "RPC depth-1 p50 / two-line ping-pong, median of 5 runs",
            "measured": "1.40x (per run 1.52, 1.52, 1.30, 1.30, 1.40)", "value": 1.4,
            "target": "<= 1.5x", "met": true, "source": "rpc"}},
          {{"what": "  the same, fast regime only (2 runs)", "measured": "1.52x (198 vs 130 ns)",
            "value": 1.52, "target": "<= 1.5x", "met": false, "regime": "fast", "source": "rpc"}},
          {{"what": "  the same, slow regime only (3 runs)", "measured": "1.30x (520 vs 400 ns)",
            "value": 1.3, "target": "<= 1.5x", "met": true, "regime": "slow", "source": "rpc"}}],
        "not_measured": [{{"what": "SPEAD reassembly, 1 KiB (spead)", "why": "no spead2"}}],
        "met": 2, "measured": 2, "all_met": false, "rpc_regimes_missed": []}}"#
    )
}

#[test]
fn a_run_is_recorded_with_its_cpu_and_date_and_judged_by_the_projects_target() {
    let dir = tempfile::tempdir().unwrap();
    let (json, page) = copies(dir.path());
    let run = dir.path().join("results/cpu/20270102T030405Z");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("summary.json"), summary(1.2)).unwrap();
    let before: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let out = results_page(&[
        "--record",
        s(&run.join("summary.json")),
        "--json",
        s(&json),
        "--page",
        s(&page),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let after: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let find = |j: &serde_json::Value, id: &str| {
        j["targets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()
            .clone()
    };
    let ring = find(&after, "ring-hop");
    // The script's own target (<= 1.5) would say met; the project's is <= 1.0.
    assert_eq!(ring["met"], "no", "{ring}");
    assert_eq!(ring["cpu"], "Intel(R) Xeon(R) Platinum 8481C");
    assert_eq!(ring["date"], "2027-01-02");
    assert_eq!(ring["command"], "scripts/bench-cpu");
    assert!(ring["measured"].as_str().unwrap().starts_with("1.20x"));
    // Depth 1 is judged within one regime: the fast regime's miss is a miss.
    let rpc = find(&after, "rpc-depth-1");
    assert_eq!(rpc["met"], "no: fast regime 1.52x", "{rpc}");
    assert!(rpc["measured"]
        .as_str()
        .unwrap()
        .ends_with("by regime: fast 1.52x, slow 1.30x"));
    // Depth 256 was not in this run.
    assert_eq!(
        find(&after, "rpc-depth-256"),
        find(&before, "rpc-depth-256")
    );
    let fwd = find(&after, "dpdk-forward-no-huge");
    assert_eq!(fwd["met"], "yes");
    assert_eq!(fwd["value"], 1.1);
    // What the run did not measure keeps its figure, CPU and date.
    assert_eq!(
        find(&after, "spead-single-packet"),
        find(&before, "spead-single-packet")
    );
    assert_eq!(
        find(&after, "dpdk-forward-huge"),
        find(&before, "dpdk-forward-huge")
    );
    // The page was rendered again from the new JSON.
    let check = results_page(&["--check", "--json", s(&json), "--page", s(&page)]);
    assert!(check.status.success(), "{}", text(&check));
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .contains("| 1.20x (linerate 12.0 cycles/elem"));
}

#[test]
fn bad_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (json, page) = copies(dir.path());
    let bogus = dir.path().join("summary.json");
    std::fs::write(&bogus, "{\"not\": \"a summary\"}").unwrap();
    let out = results_page(&[
        "--record",
        s(&bogus),
        "--json",
        s(&json),
        "--page",
        s(&page),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = results_page(&["--frobnicate"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}
