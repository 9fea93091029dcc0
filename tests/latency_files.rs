//! Stats files: a reader racing the writer never sees a partial file; merge on
//! the command line is exact and refuses foreign or truncated files.

mod util;

use std::collections::BTreeMap;

use linerate::latency::{new_histogram, StatsFile};

#[test]
fn a_reader_racing_the_writer_never_sees_a_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stats.txt");
    let mut h = new_histogram();
    h.record(1).unwrap();
    StatsFile {
        context: BTreeMap::new(),
        histogram: h.clone(),
    }
    .write(&path)
    .unwrap();
    let reader_path = path.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut reads = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let f = StatsFile::read(&reader_path)
                .unwrap_or_else(|e| panic!("partial read after {reads} reads: {e}"));
            assert!(!f.histogram.is_empty());
            reads += 1;
        }
        reads
    });
    for i in 0..300u64 {
        for v in 0..50 {
            h.record(1 + i * 1000 + v).unwrap();
        }
        StatsFile {
            context: BTreeMap::from([("trial".into(), i.to_string())]),
            histogram: h.clone(),
        }
        .write(&path)
        .unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
}

#[test]
fn merge_command_is_exact_and_refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, mut pooled) = (new_histogram(), new_histogram(), new_histogram());
    for v in 1..=1000u64 {
        let x = v * v;
        if v % 3 == 0 {
            a.record(x).unwrap()
        } else {
            b.record(x * 7).unwrap()
        }
        pooled.record(if v % 3 == 0 { x } else { x * 7 }).unwrap();
    }
    let pa = dir.path().join("a.txt");
    let pb = dir.path().join("b.txt");
    StatsFile {
        context: BTreeMap::new(),
        histogram: a,
    }
    .write(&pa)
    .unwrap();
    StatsFile {
        context: BTreeMap::new(),
        histogram: b,
    }
    .write(&pb)
    .unwrap();
    let out = util::bin()
        .args(["latency", "merge", "--json", "-"])
        .arg(&pa)
        .arg(&pb)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["merged"]["latency_ns"];
    assert_eq!(m["samples"], 1000);
    assert_eq!(m["p50"], pooled.value_at_quantile(0.5));
    assert_eq!(m["p99"], pooled.value_at_quantile(0.99));

    let text = std::fs::read_to_string(&pa).unwrap();
    let cut = util::write(dir.path(), "cut.txt", &text[..text.len() / 2]);
    let collie = util::write(
        dir.path(),
        "collie.txt",
        "latency_samples: 15\nlatency_min_ns: 1234567\nlatency_median_ns: 2341234\n",
    );
    for (bad, expect) in [(&cut, "cut.txt"), (&collie, "Collie")] {
        let out = util::bin()
            .args(["latency", "merge"])
            .arg(&pa)
            .arg(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{err}");
    }
}
