//! `linerate compare` through the binary, on reports that `linerate search --sim ... --json`
//! wrote: identical reports, a lowered and a raised NDR, different devices, and suite reports
//! assembled from two searches.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

const MODEL: &str = "ndr=12e6,pdr=12.24e6,plr=0.005";

fn linerate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .output()
        .unwrap()
}

/// The JSON report of a simulated search.
fn search(dir: &Path, name: &str, model: &str) -> Value {
    let path = dir.join(name);
    let out = linerate(&[
        "search",
        "--sim",
        model,
        "--json",
        path.to_str().unwrap(),
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write(dir: &Path, name: &str, v: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, v.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

/// Runs `compare OLD NEW EXTRA...`: (exit status, stdout, stderr).
fn compare(dir: &Path, old: &Value, new: &Value, extra: &[&str]) -> (i32, String, String) {
    let (o, n) = (write(dir, "old.json", old), write(dir, "new.json", new));
    let mut args = vec!["compare", o.as_str(), n.as_str()];
    args.extend_from_slice(extra);
    let out = linerate(&args);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap(),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Scales goal `goal`'s lower bound by `factor`.
fn scale(report: &Value, goal: usize, factor: f64) -> Value {
    let mut r = report.clone();
    let lo = &mut r["outcome"]["goals"][goal]["lower_pps"];
    *lo = json!(lo.as_f64().unwrap() * factor);
    r
}

#[test]
fn identical_reports_show_no_change() {
    let dir = tempfile::tempdir().unwrap();
    let r = search(dir.path(), "r.json", MODEL);
    let (code, out, err) = compare(dir.path(), &r, &r, &["--json", "-"]);
    assert_eq!(code, 0, "{err}");
    let c: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (c["regressions"].as_u64(), c["progressions"].as_u64()),
        (Some(0), Some(0))
    );
    let rows = c["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert!(
        rows.iter()
            .all(|r| r["verdict"] == "same" && r["change"] == 0.0),
        "{c}"
    );
}

#[test]
fn a_lower_ndr_past_the_width_is_a_regression_a_higher_one_a_progression() {
    let dir = tempfile::tempdir().unwrap();
    let r = search(dir.path(), "r.json", MODEL);
    // 3 % lower: past the 0.5 % widths.
    let lower = scale(&r, 0, 0.97);
    let (code, out, err) = compare(dir.path(), &r, &lower, &[]);
    assert_eq!(code, 1, "{out}{err}");
    let ndr = out.lines().find(|l| l.starts_with("NDR")).unwrap();
    assert!(
        ndr.contains("-3.000") && ndr.ends_with("REGRESSION"),
        "{out}"
    );
    assert!(err.contains("1 regression past the widths"), "{err}");
    // Within a 5 % threshold: flagged, but no failure.
    let (code, out, _) = compare(dir.path(), &r, &lower, &["--threshold", "5%"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("regression (within the threshold)"), "{out}");
    // Within the width: no change.
    let (code, out, _) = compare(dir.path(), &r, &scale(&r, 0, 0.998), &[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 regressions, 0 progressions"), "{out}");
    let (code, out, _) = compare(dir.path(), &r, &scale(&r, 0, 1.03), &[]);
    assert_eq!(code, 0, "{out}");
    let ndr = out.lines().find(|l| l.starts_with("NDR")).unwrap();
    assert!(ndr.ends_with("progression"), "{out}");
}

#[test]
fn reports_of_different_devices_are_refused_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let a = search(dir.path(), "a.json", MODEL);
    let b = search(dir.path(), "b.json", "ndr=6e6,pdr=6.1e6,plr=0.005");
    let (code, _, err) = compare(dir.path(), &a, &b, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("different sources") && err.contains("ndr: 6000000.0"),
        "{err}"
    );
    let (code, out, err) = compare(dir.path(), &a, &b, &["--force"]);
    assert_eq!(code, 1, "half the rate is a regression: {out}{err}");
    assert!(err.contains("warning: different sources"), "{err}");
}

#[test]
fn unreadable_and_invalid_reports_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let r = search(dir.path(), "r.json", MODEL);
    let (code, _, err) = compare(dir.path(), &r, &json!({"sizes": [{"frame": "64"}]}), &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("new.json: sizes[0] (frame 64) has no `throughput`"),
        "{err}"
    );
    let out = linerate(&["compare", "no-such.json", "no-such.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read no-such.json"));
}

#[test]
fn suite_reports_are_compared_size_by_size() {
    let dir = tempfile::tempdir().unwrap();
    let small = search(dir.path(), "64.json", MODEL);
    let large = search(dir.path(), "1518.json", "ndr=0.8e6,pdr=0.81e6,plr=0.005");
    let suite = |s: &Value, l: &Value| {
        json!({"suite": 1, "source": "sim suite", "sizes": [
            {"frame": "64", "throughput": s},
            {"frame": "1518", "throughput": l},
        ]})
    };
    let old = suite(&small, &large);
    let (code, out, err) = compare(dir.path(), &old, &old, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with("64 ") || l.starts_with("1518 "))
            .count(),
        4,
        "{out}"
    );
    // The PDR of the large frames drops 10 %.
    let new = suite(&small, &scale(&large, 1, 0.9));
    let (code, out, _) = compare(dir.path(), &old, &new, &["--json", "-"]);
    assert_eq!(code, 1);
    let c: Value = serde_json::from_str(&out).unwrap();
    let bad: Vec<_> = c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["verdict"] == "regression")
        .collect();
    assert_eq!(bad.len(), 1, "{c}");
    assert_eq!(
        (bad[0]["frame"].as_str(), bad[0]["goal"].as_str()),
        (Some("1518"), Some("PDR"))
    );
    // A suite without the 1518 B size is refused, and compared on 64 B when forced.
    let fewer =
        json!({"suite": 1, "source": "sim suite", "sizes": [{"frame": "64", "throughput": small}]});
    let (code, _, err) = compare(dir.path(), &old, &fewer, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("different frame sizes: [64,1518] and [64]"),
        "{err}"
    );
    let (code, out, _) = compare(dir.path(), &old, &fewer, &["--force"]);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("1518"), "{out}");
}
