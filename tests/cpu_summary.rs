//! `scripts/cpu-summary.py`, the table `scripts/bench-cpu` ends with: each
//! benchmark row judged by the target it states, the RPC targets from
//! `rpc-summary.py`'s JSON, and a benchmark that could not run listed as not
//! measured, never as met.

use std::path::Path;

mod util;

const LSCPU: &str = "Architecture: x86_64\nCPU(s): 2\nVendor ID: GenuineIntel\nModel name: Intel(R) Xeon(R) Platinum 8481C\n";
const FWD: &str = "| DPDK forwarding, 1 lcore, burst 32, net_null pair both ways (no-huge) | linerate 70.10 Mpps | testpmd io 64.00 Mpps | ratio 1.10 (target >= 1.0) |";
const GEN_SLOW: &str = "| DPDK generator, stamped 64 B, 1 lcore, net_null (no-huge) | linerate 60.00 Mpps | testpmd txonly 61.40 Mpps | ratio 0.98 (target >= 1.0) |";
const GEN: &str = "| DPDK generator, stamped 64 B, 1 lcore, net_null (no-huge) | linerate 80.00 Mpps | testpmd txonly 61.40 Mpps | ratio 1.30 (target >= 1.0) |";
const SPEAD: &str = "| SPEAD reassembly, 1 KiB single-packet heaps, per CPU-second | linerate 9.10 Mpps | spead2 2.90 Mpps | ratio 3.14 (target >= 1.5) |
| SPEAD reassembly, 64 KiB heaps, in one process | linerate / physical limit 90.5% | the limit reading headers 91.0% | ratio 0.91 (target >= 0.9) |";
const ENCAP: &str = "| DPDK generator, one VLAN tag, 64 B, 1 lcore, net_null | linerate 70.00 Mpps | testpmd txonly 64 B 60.00 Mpps | ratio 1.167 (target >= 1.0) |
| DPDK generator, VXLAN, 114 B, 1 lcore, net_null | linerate 62.00 Mpps | testpmd txonly 114 B 60.00 Mpps | ratio 1.033 (target >= 1.0) |
| DPDK analyzer, one VLAN tag vs plain, 64 B, net_ring | linerate vlan 20.00 Mpps | linerate plain 20.50 Mpps | ratio 0.976 (target >= 0.95) |";
const RING: &str = "| ring hop, 2 lcores, bulk 32, 16 B elements | linerate 15.6 cycles/elem | DPDK rte_ring SP/SC 29.8 cycles/elem | ratio 0.52 (target <= 1.5) |";

/// An `rpc-summary.py` summary.json (the fields the CPU summary reads):
/// the target's rule over all runs at `median`, and a fast and a slow regime.
fn rpc_json(median: f64, fast: f64, slow: f64) -> String {
    let regime = |runs: u32, ratio: f64, two_line: f64| {
        format!(
            r#"{{"runs": {runs}, "echo_runs": {runs}, "echo_p50_ns": {echo}, "echo_vs_two_line": 1.1,
                "endpoint_over_echo_ns": 40, "two_line_p50_ns": {two_line}, "depth1_p50_ns": {d1},
                "ratio_p50": {ratio}, "ratio_means": {ratio}, "ratios": [{ratio}], "met": {met}}}"#,
            echo = two_line * 1.1,
            d1 = two_line * ratio,
            met = ratio <= 1.5,
        )
    };
    format!(
        r#"{{"runs": 5, "regime_per_run": ["fast", "fast", "slow", "slow", "slow"],
            "ratio_per_run": [{fast}, {fast}, {slow}, {slow}, {slow}], "ratio_median": {median},
            "met_median": {met}, "regimes": {{"fast": {f}, "slow": {s}}},
            "met_every_regime": false, "depth256_rpc_per_sec": 2.8e7, "met_depth256": true}}"#,
        met = median <= 1.5,
        f = regime(2, fast, 130.0),
        s = regime(3, slow, 480.0),
    )
}

/// Writes `files` into `dir`, runs the summary, returns its stdout and summary.json.
fn summarize(dir: &Path, files: &[(&str, String)]) -> (String, serde_json::Value) {
    std::fs::write(dir.join("lscpu.txt"), LSCPU).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    util::summary_script("cpu-summary.py", dir, &[])
}

#[test]
fn every_target_met_says_so_with_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let huge = |row: &str| row.replace("no-huge", "huge");
    let (text, j) = summarize(
        dir.path(),
        &[
            ("dpdk-no-huge.txt", format!("round 1: ...\n{FWD}\n{GEN}\n")),
            ("dpdk-huge.txt", format!("{}\n{}\n", huge(FWD), huge(GEN))),
            ("ring.txt", format!("{RING}\n")),
            ("spead.txt", format!("SUMMARY ...\n{SPEAD}\n")),
            ("encap.txt", format!("round 1: ...\n{ENCAP}\n")),
            ("rpc-summary.json", rpc_json(1.2, 1.45, 1.15)),
        ],
    );
    assert!(
        text.starts_with("CPU: Intel(R) Xeon(R) Platinum 8481C (GenuineIntel), 2 CPUs"),
        "{text}"
    );
    assert_eq!(j["cpu_model"], "Intel(R) Xeon(R) Platinum 8481C");
    // Two DPDK rows per memory mode, the ring hop, two SPEAD rows, three
    // encapsulation rows, the RPC rule and depth 256.
    assert_eq!(j["measured"], 12, "{text}");
    assert_eq!(j["met"], 12, "{text}");
    assert_eq!(j["all_met"], true);
    assert!(
        text.contains("CPU TARGETS: 12 of 12 measured targets met, 0 not measured; all met"),
        "{text}"
    );
    assert!(
        text.contains("1.10x (linerate 70.10 Mpps, testpmd io 64.00 Mpps)"),
        "{text}"
    );
}

#[test]
fn a_miss_a_skipped_benchmark_and_a_regime_miss_are_each_said() {
    let dir = tempfile::tempdir().unwrap();
    let (text, j) = summarize(
        dir.path(),
        &[
            ("dpdk-no-huge.txt", format!("{FWD}\n{GEN_SLOW}\n")),
            ("dpdk-huge.skipped", "no hugetlbfs on /dev/hugepages".into()),
            ("ring.txt", format!("{RING}\n")),
            ("spead.txt", format!("{SPEAD}\n")),
            ("encap.txt", format!("{ENCAP}\n")),
            // The rule over all five runs passes; the fast regime alone does not.
            ("rpc-summary.json", rpc_json(1.2, 1.54, 1.15)),
        ],
    );
    let gen = j["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["what"].as_str().unwrap().starts_with("DPDK generator"))
        .unwrap();
    assert_eq!(gen["met"], false);
    assert_eq!(gen["value"], 0.98);
    let missing: Vec<&str> = j["not_measured"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        missing,
        ["DPDK forwarding (dpdk-huge)", "DPDK generator (dpdk-huge)"]
    );
    assert!(
        text.contains("not measured: no hugetlbfs on /dev/hugepages"),
        "{text}"
    );
    assert_eq!(j["all_met"], false);
    // Regime rows are a reading beside the rule, not counted as targets, but
    // a regime that misses is named on the verdict line.
    assert_eq!(j["measured"], 10, "{text}");
    assert_eq!(j["met"], 9, "{text}");
    assert_eq!(j["rpc_regimes_missed"], serde_json::json!(["fast"]));
    assert!(
        text.contains("CPU TARGETS: 9 of 10 measured targets met, 2 not measured; RPC regimes judged apart that miss: fast"),
        "{text}"
    );
}

#[test]
fn a_benchmark_that_printed_nothing_is_not_measured_not_met() {
    let dir = tempfile::tempdir().unwrap();
    // bench-dpdk ran but printed no row (an EAL that failed in every round);
    // bench-rpc failed, and bench-cpu recorded why.
    let (text, j) = summarize(
        dir.path(),
        &[
            (
                "dpdk-no-huge.txt",
                "round 1: fwd linerate  testpmd \n".into(),
            ),
            ("dpdk-huge.txt", String::new()),
            ("ring.txt", format!("{RING}\n")),
            ("rpc.skipped", "failed (exit 1): could not build".into()),
        ],
    );
    assert_eq!(j["measured"], 1, "{text}");
    assert_eq!(j["met"], 1);
    assert_eq!(j["all_met"], false);
    // Four DPDK rows, two SPEAD and three encapsulation rows (no output at
    // all), the RPC's two.
    assert_eq!(j["not_measured"].as_array().unwrap().len(), 11, "{text}");
    assert!(
        text.contains("not measured: the benchmark printed no row for it"),
        "{text}"
    );
    assert!(
        text.contains("not measured: failed (exit 1): could not build"),
        "{text}"
    );
    assert!(
        text.contains("CPU TARGETS: 1 of 1 measured targets met, 11 not measured"),
        "{text}"
    );
    assert!(!text.contains("all met"), "{text}");
}

#[test]
fn an_rpc_summary_without_its_fields_is_not_measured() {
    let dir = tempfile::tempdir().unwrap();
    let (text, j) = summarize(
        dir.path(),
        &[
            ("ring.txt", format!("{RING}\n")),
            ("rpc-summary.json", r#"{"runs": 5}"#.into()),
        ],
    );
    assert!(
        text.contains("RPC depth 256 (rpc)")
            && text.contains("not measured: no usable RPC summary (KeyError: 'ratio_median')"),
        "{text}"
    );
    assert_eq!(j["all_met"], false);
}
