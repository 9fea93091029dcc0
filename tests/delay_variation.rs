//! Delay variation end to end: a generator's stream through an `impair` stage
//! with seeded uniform jitter that reorders, into an analyzer that lists the
//! stamps and receive times it recorded (`delay_log`). A Python reference
//! (numpy, from a venv: `$LINERATE_VENV` or `<crate root>/.venv`; skipped
//! without it unless `LINERATE_REQUIRE_PEERS=1`) computes IPDV, PDV and the
//! RFC 3550 jitter from that capture, and the analyzer's figures must match
//! within the latency histogram's precision.

mod util;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use linerate::runtime::run::StopReason;

/// The reference: one JSON object in (the analyzer's `delay_log` rows of
/// stream, sequence number, 32-bit send stamp, receive time), one out.
const REFERENCE: &str = r#"
import json, math, sys
import numpy as np

rows = np.array(json.load(open(sys.argv[1])), dtype=np.int64)
seq, tx, rx = rows[:, 1], rows[:, 2], rows[:, 3]
# One-way delay as the stamp carries it: 32-bit wrapping.
delay = (rx - tx) % (1 << 32)

def at_rank(sorted_values, q):
    # HdrHistogram's percentile: the max(1, ceil(q * n))-th smallest.
    n = len(sorted_values)
    return int(sorted_values[max(1, math.ceil(q * n)) - 1])

qs = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "p999": 0.999}
# RFC 5481 PDV: each delay minus the smallest (a latency of 0 counts as 1).
lat = np.sort(np.maximum(delay, 1))
pdv = lat - lat[0]
out = {"samples": len(lat), "min_latency": int(lat[0]),
       "pdv": {k: at_rank(pdv, q) for k, q in qs.items()}}
out["pdv"]["max"] = int(pdv[-1])
# RFC 3393 IPDV: packets consecutive in sequence number arriving one after
# the other; the difference taken modulo 2^32 as a signed 32-bit number.
diff = (delay[1:] - delay[:-1]) % (1 << 32)
diff = np.where(diff >= 1 << 31, diff - (1 << 32), diff)
pairs = np.sort(diff[seq[1:] == seq[:-1] + 1])
out["ipdv"] = {k: at_rank(pairs, q) for k, q in qs.items()}
out["ipdv"].update(samples=len(pairs), min=int(pairs[0]), max=int(pairs[-1]))
# RFC 3550 section 6.4.1 jitter over every arrival.
j = 0.0
for d in diff:
    j += (abs(int(d)) - j) / 16.0
out["jitter"] = j
json.dump(out, sys.stdout)
"#;

fn venv_python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var_os("LINERATE_VENV").map_or(root.join(".venv"), PathBuf::from);
    let py = venv.join("bin").join("python");
    let ok = Command::new(&py)
        .args(["-c", "import numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

const PACKETS: u64 = 20_000;

fn pipeline() -> String {
    format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false

[port.a]
kind = "mem"
ring = 65536

[port.b]
kind = "mem"
ring = 65536

[stage.gen]
kind = "generator"
lcore = 0
tx = "a"
rate = "50 kpps"
count = {PACKETS}
max_lag = "10s"

[stage.link]
kind = "impair"
lcore = 1
rx = "a"
tx = "b"
seed = 11
jitter = {{ distribution = "uniform", min = "0us", max = "100us", order = "any" }}

[stage.ana]
kind = "analyzer"
lcore = 0
rx = "b"
delay_log = {PACKETS}
"#
    )
}

/// `got` is `want` as the histogram reports it: within a bucket, a
/// thousandth of `scale` (plus rounding).
fn within(what: &str, got: i64, want: i64, scale: i64) {
    let tol = scale.abs() / 1000 + 2;
    assert!(
        (got - want).abs() <= tol,
        "{what}: analyzer {got}, reference {want} (tolerance {tol})"
    );
}

#[test]
fn ipdv_pdv_and_jitter_match_a_reference_from_the_capture() {
    let Some(py) = venv_python() else {
        util::missing("a Python venv with numpy (scripts/test makes .venv)");
        return;
    };
    let r = util::run_text("pdv.toml", &pipeline(), Duration::from_secs(60));
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    let d = r.stages["ana"].detail.clone().expect("analyzer detail");
    let s = &d["streams"][0];
    assert_eq!(s["received"], PACKETS, "{s}");
    assert!(
        s["reordered"].as_u64().unwrap() > 100,
        "jitter reorders: {s}"
    );
    let log = &d["delay_log"];
    assert_eq!(log.as_array().map(Vec::len), Some(PACKETS as usize));

    let dir = tempfile::tempdir().unwrap();
    let (script, capture) = (dir.path().join("ref.py"), dir.path().join("log.json"));
    std::fs::write(&script, REFERENCE).unwrap();
    std::fs::write(&capture, serde_json::to_vec(log).unwrap()).unwrap();
    let out = Command::new(py)
        .arg(&script)
        .arg(&capture)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("analyzer: {s}\nreference: {want}");
    let i = |v: &serde_json::Value| v.as_i64().unwrap_or_else(|| panic!("{v}"));

    // PDV: latency percentiles minus the minimum, both in buckets.
    assert_eq!(s["latency_ns"]["samples"], want["samples"]);
    let min = i(&want["min_latency"]);
    for k in ["p50", "p90", "p99", "p999", "max"] {
        let w = i(&want["pdv"][k]);
        within(&format!("pdv {k}"), i(&s["pdv_ns"][k]), w, w + 2 * min);
    }
    // IPDV, signed.
    assert_eq!(s["ipdv_ns"]["samples"], want["ipdv"]["samples"]);
    for k in ["min", "p50", "p90", "p99", "p999", "max"] {
        let w = i(&want["ipdv"][k]);
        within(&format!("ipdv {k}"), i(&s["ipdv_ns"][k]), w, w);
    }
    // Uniform jitter of up to 100 us both ways: differences of either sign.
    assert!(i(&want["ipdv"]["min"]) < -10_000 && i(&want["ipdv"]["max"]) > 10_000);
    // The same arithmetic in the same order: equal but for the last bits.
    let (jr, jw) = (
        s["jitter_ns"].as_f64().unwrap(),
        want["jitter"].as_f64().unwrap(),
    );
    assert!((jr - jw).abs() <= 1e-9 * jw, "jitter {jr} vs {jw}");
    assert!(jw > 5_000.0, "{jw}");
}

/// `linerate trial --json`: every stream (here two, at two analyzers)
/// carries `pdv_ns`, `ipdv_ns` and `jitter_ns`, PDV is the latency less its
/// minimum, and the jittered stream shows its jitter.
#[test]
fn the_trial_json_carries_each_streams_delay_variation() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("two.toml");
    std::fs::write(
        &file,
        r#"
[pipeline]
lcores = "0-1"
pin = false

[port.a]
kind = "mem"
ring = 65536

[port.b]
kind = "mem"
ring = 65536

[port.c]
kind = "mem"
ring = 65536

[stage.plain]
kind = "generator"
lcore = 0
tx = "c"
stream = 0

[stage.plain_ana]
kind = "analyzer"
lcore = 1
rx = "c"

[stage.gen]
kind = "generator"
lcore = 0
tx = "a"
stream = 1
max_lag = "1s"

[stage.link]
kind = "impair"
lcore = 1
rx = "a"
tx = "b"
seed = 5
jitter = { distribution = "uniform", min = "0us", max = "500us", order = "keep" }

[stage.ana]
kind = "analyzer"
lcore = 0
rx = "b"
"#,
    )
    .unwrap();
    let out = util::bin()
        .arg("trial")
        .arg(&file)
        .args(["--rate", "20 kpps", "--duration", "0.5s", "--json", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let streams = r["streams"].as_array().expect("streams");
    assert_eq!(streams.len(), 2, "{r}");
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("{v}"));
    for s in streams {
        let (l, p) = (&s["latency_ns"], &s["pdv_ns"]);
        for k in ["p50", "p90", "p99", "p999", "max"] {
            assert_eq!(u(&p[k]), u(&l[k]) - u(&l["min"]), "{k}: {s}");
        }
        let i = &s["ipdv_ns"];
        assert!(
            u(&i["samples"]) > 0 && u(&i["samples"]) < u(&s["received"]),
            "{s}"
        );
        assert!(i["min"].as_i64() <= i["p50"].as_i64() && i["p50"].as_i64() <= i["max"].as_i64());
        assert!(s["jitter_ns"].as_f64().is_some_and(|j| j >= 0.0), "{s}");
    }
    // Up to 500 us of jitter in order: the jittered stream's differences
    // reach tens of microseconds.
    let jittered = &streams[1];
    assert_eq!(jittered["stream"], 1);
    assert!(u(&jittered["pdv_ns"]["p99"]) > 100_000, "{jittered}");
    assert!(
        jittered["jitter_ns"].as_f64().unwrap() > 10_000.0,
        "{jittered}"
    );
}
