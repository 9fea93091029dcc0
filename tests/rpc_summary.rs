//! `scripts/rpc-summary.py`, the summary `scripts/bench-rpc` prints: runs are
//! split into regimes by their own two-line ping-pong and depth-1 p50, and
//! the verdict per regime does not depend on which regime most runs landed in.

use std::path::Path;

mod util;

/// One run's JSON as `rpc bench --json` writes it (the fields the summary
/// reads); `steady` false: the depth-1 rate changed inside the run (its
/// median 1 ms window far below its best).
fn run_json(two_line: u64, d1: u64, steady: bool) -> String {
    run_json_echo(two_line, d1, steady, None)
}

/// [`run_json`] with the transport echo's p50 when `echo` is given.
fn run_json_echo(two_line: u64, d1: u64, steady: bool, echo: Option<u64>) -> String {
    let w = r#"{"median_per_sec": 1.9e6, "p90_per_sec": 1.9e6, "max_per_sec": 2e6}"#;
    let w1 = if steady {
        w
    } else {
        r#"{"median_per_sec": 0.7e6, "p90_per_sec": 1.9e6, "max_per_sec": 2e6}"#
    };
    format!(
        r#"{{"pingpong": {{"rtt": {{"p50_ns": {pp}}}, "windows": {w}, "mean_rtt_ns": {pp}}},
            "pingpong_two_lines": {{"rtt": {{"p50_ns": {two_line}}}, "windows": {w}, "mean_rtt_ns": {two_line}}},
            "transport_echo": {echo},
            "depths": [
              {{"depth": 1, "latency": {{"p50_ns": {d1}}}, "mean_rtt_ns": {d1}, "rpc_per_sec": 4e6, "windows": {w1}}},
              {{"depth": 256, "latency": {{"p50_ns": 9000}}, "mean_rtt_ns": 9000, "rpc_per_sec": 2e7, "windows": {w}}}
            ]}}"#,
        pp = two_line * 9 / 10,
        echo = echo.map_or("null".to_string(), |e| format!(
            r#"{{"rtt": {{"p50_ns": {e}}}, "windows": {w}, "mean_rtt_ns": {e}}}"#
        )),
    )
}

/// Writes the runs, runs the summary, returns its stdout and summary.json.
fn summarize(dir: &Path, runs: &[(u64, u64, bool)]) -> (String, serde_json::Value) {
    let jsons: Vec<String> = runs
        .iter()
        .map(|&(t, d, steady)| run_json(t, d, steady))
        .collect();
    summarize_json(dir, &jsons)
}

/// [`summarize`] of runs already written as JSON.
fn summarize_json(dir: &Path, runs: &[String]) -> (String, serde_json::Value) {
    for (i, json) in runs.iter().enumerate() {
        std::fs::write(dir.join(format!("run-{}.json", i + 1)), json).unwrap();
    }
    util::summary_script("rpc-summary.py", dir, &[&runs.len().to_string()])
}

#[test]
fn mostly_slow_runs_do_not_hide_a_fast_regime_miss() {
    let dir = tempfile::tempdir().unwrap();
    // One fast run at 1.6x, three slow runs at 1.2x, one run whose placement
    // changed between the ping-pong (fast) and the RPCs (slow), and one whose
    // depth-1 rate changed inside it (a fast p50 over mostly slow windows).
    let (text, j) = summarize(
        dir.path(),
        &[
            (130, 208, true),
            (480, 576, true),
            (500, 600, true),
            (130, 600, true),
            (470, 564, true),
            (130, 190, false),
        ],
    );
    assert_eq!(
        j["regime_per_run"],
        serde_json::json!(["fast", "slow", "slow", "mixed", "slow", "mixed"])
    );
    // The median over all runs (the target's definition) passes...
    assert_eq!(j["met_median"], true, "{text}");
    // ...but the fast regime does not, and the summary says so.
    assert_eq!(j["regimes"]["fast"]["met"], false);
    assert_eq!(j["regimes"]["slow"]["met"], true);
    assert_eq!(j["met_every_regime"], false);
    assert!(
        text.contains("fast 1.60x (1 run) NOT MET; slow 1.20x (3 runs) MET; 2 mixed run(s) left out; every regime judged (fast, slow) meets the target: no"),
        "{text}"
    );
}

#[test]
fn one_regime_is_judged_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let (text, j) = summarize(
        dir.path(),
        &[(120, 168, true), (130, 190, true), (110, 160, true)],
    );
    assert_eq!(
        j["regime_per_run"],
        serde_json::json!(["one", "one", "one"])
    );
    assert_eq!(j["regimes"]["one"]["runs"], 3);
    assert_eq!(j["met_every_regime"], true, "{text}");
    assert!(
        text.contains("every regime judged (one) meets the target: yes"),
        "{text}"
    );
}

#[test]
fn the_echo_splits_each_regime_into_transport_and_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    // Two fast runs with the echo (endpoint +40 and +60 over it), one fast
    // run without (an older server), two slow runs with it.
    let (text, j) = summarize_json(
        dir.path(),
        &[
            run_json_echo(130, 190, true, Some(150)),
            run_json_echo(130, 200, true, Some(140)),
            run_json_echo(120, 190, true, None),
            run_json_echo(480, 560, true, Some(500)),
            run_json_echo(470, 550, true, Some(500)),
            // The placement changed before the echo and back after it: its
            // -290 ns over the echo says nothing, the run is left out.
            run_json_echo(130, 190, true, Some(480)),
        ],
    );
    assert_eq!(
        j["regime_per_run"],
        serde_json::json!(["fast", "fast", "fast", "slow", "slow", "mixed"])
    );
    let fast = &j["regimes"]["fast"];
    assert_eq!(fast["runs"], 3, "{text}");
    assert_eq!(fast["echo_runs"], 2);
    assert_eq!(fast["echo_p50_ns"], 145.0);
    assert_eq!(fast["endpoint_over_echo_ns"], 50.0);
    assert_eq!(j["regimes"]["slow"]["endpoint_over_echo_ns"], 55.0);
    assert!(
        text.contains("shm echo p50   145 ns (1.12x 2-line), endpoint +50 ns over the echo"),
        "{text}"
    );
    assert!(text.contains("5 of 6 runs"), "{text}");
}
