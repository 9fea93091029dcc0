//! Arrival processes end to end: a generator's departures over the mem wire.
//! Poisson departures pass a Kolmogorov-Smirnov test against the exponential
//! (scipy, from a Python venv: `$LINERATE_VENV` or `<crate root>/.venv`;
//! without it that test is skipped, unless `LINERATE_REQUIRE_PEERS=1`, when it
//! fails); bursts go out as whole trains and every pace's counts reconcile.

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use linerate::runtime::run::StopReason;
use linerate::traffic::stamp::Stamp;

/// One pipeline at a time: two at once would leave each of their four
/// busy-polling lcores half a core, and the departures would be the
/// scheduler's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn venv_python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var_os("LINERATE_VENV").map_or(root.join(".venv"), PathBuf::from);
    let py = venv.join("bin").join("python");
    let ok = Command::new(&py)
        .args(["-c", "import scipy"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

/// Runs a generator with `pace_keys` sending `count` frames at `rate` over a
/// mem wire to a forward stage that records them in a capture; returns each
/// frame's departure time (its stamp's transmit time, ns, unwrapped).
fn departures(dir: &Path, pace_keys: &str, count: u64, rate: &str) -> Vec<u64> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let cap = dir.join("wire.pcap");
    let text = format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false
[port.wire]
kind = "mem"
ring = 65536
[port.cap]
kind = "pcap"
write = "{}"
[stage.gen]
kind = "generator"
lcore = 0
tx = "wire"
count = {count}
rate = "{rate}"
# Late packets go out late rather than unsent: the departures are the process's.
max_lag = "10s"
{pace_keys}
[stage.fwd]
kind = "forward"
lcore = 1
rx = "wire"
tx = "cap"
"#,
        cap.display()
    );
    let r = util::run_text("pace.toml", &text, Duration::from_secs(30));
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    assert_eq!(r.stages["gen"].packets_out, count);
    let frames = util::capture(&cap);
    assert_eq!(frames.len() as u64, count);
    let mut out = Vec::with_capacity(frames.len());
    let mut last32 = 0u32;
    let mut t = 0u64;
    for (i, f) in frames.iter().enumerate() {
        let (_, _, payload) = util::check_udp_v4(f, i);
        let s = Stamp::new_checked(payload).expect("a stamp");
        assert_eq!(s.seq(), i as u64, "frames in order, none lost");
        // The stamp holds the low 32 bits of the time: unwrap.
        t += u64::from(s.tx_ns().wrapping_sub(last32));
        last32 = s.tx_ns();
        out.push(t);
    }
    out
}

#[test]
fn poisson_departures_are_exponential_at_the_mean_rate() {
    let py = venv_python();
    if py.is_none() && std::env::var("LINERATE_REQUIRE_PEERS").as_deref() == Ok("1") {
        panic!("scipy not found: python3 -m venv .venv && .venv/bin/pip install scipy (or set LINERATE_VENV)");
    }
    let dir = tempfile::tempdir().unwrap();
    // 10,000 departures at 5 kpps: 2 s. The mean rate of a Poisson process's
    // 10,000 arrivals spreads by 1 % from seed to seed; this seed's own is
    // 0.46 % above the rate, so 1 % bounds what the generator adds.
    let rate = 5_000.0;
    let d_ns = 20_000;
    let mut t = Vec::new();
    for attempt in 1..=3 {
        t = departures(dir.path(), "pace = \"poisson\"\nseed = 2", 10_000, "5 kpps");
        // P(gap > 20 us) at 5 kpps is e^-0.1: about 90 % of them. Far fewer
        // is the signature of an lcore that lost its core for long stretches
        // (see below): run again, up to three times in all.
        let over = t.windows(2).filter(|w| w[1] - w[0] > d_ns).count();
        if over > 8_000 {
            break;
        }
        eprintln!("attempt {attempt}: only {over} gaps over 20 us: the lcores were starved");
    }
    let span = (t[t.len() - 1] - t[0]) as f64 * 1e-9;
    let mean_pps = (t.len() - 1) as f64 / span;
    let err = mean_pps / rate - 1.0;
    eprintln!("mean rate {mean_pps:.1} pps ({:+.3} %)", err * 100.0);
    assert!(err.abs() < 0.01, "mean rate {mean_pps} pps");
    let Some(py) = py else {
        eprintln!("skipped the KS test: no venv with scipy (set LINERATE_VENV or create .venv)");
        return;
    };
    // A poll that finds the generator late (it lost its core on a busy
    // machine) sends what fell due in one burst: gaps of about zero that are
    // the scheduler's, not the process's. By memorylessness, the gaps above
    // any `d`, less `d`, are again exponential with the same mean: test those.
    let gaps: Vec<String> = t
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|&g| g > d_ns)
        .map(|g| (g - d_ns).to_string())
        .collect();
    let file = dir.path().join("gaps.txt");
    std::fs::write(&file, gaps.join("\n")).unwrap();
    let script = format!(
        "import sys, numpy, scipy.stats\n\
         g = numpy.loadtxt(sys.argv[1]) * 1e-9\n\
         r = scipy.stats.kstest(g, 'expon', args=(0, 1 / {rate}))\n\
         print(r.statistic, r.pvalue)\n"
    );
    let out = Command::new(py)
        .args(["-c", &script])
        .arg(&file)
        .output()
        .expect("run scipy");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut it = text.split_whitespace().map(|x| x.parse::<f64>().unwrap());
    let (d, p) = (it.next().unwrap(), it.next().unwrap());
    eprintln!(
        "KS statistic {d:.5}, p-value {p:.4} over {} gaps",
        gaps.len()
    );
    assert!(
        p > 0.01,
        "the gaps are not exponential: KS D = {d}, p = {p}"
    );
}

#[test]
fn burst_departures_are_whole_trains_and_counts_reconcile() {
    let dir = tempfile::tempdir().unwrap();
    // 20,000 frames at 20 kpps in trains of 50: a train every 2.5 ms.
    let (mut t, mut long) = (Vec::new(), 0);
    for attempt in 1..=3 {
        t = departures(
            dir.path(),
            "pace = \"burst\"\nburst_len = 50",
            20_000,
            "20 kpps",
        );
        // Between trains, about 2.5 ms (an even pace would leave 50 us); a
        // train that went out late (its lcore lost its core on a busy
        // machine) may run into the next: 90 % of the boundaries, else run
        // again, up to three times, and then at least half.
        long = t
            .windows(2)
            .enumerate()
            .filter(|(i, w)| (i + 1) % 50 == 0 && w[1] - w[0] > 1_000_000)
            .count();
        if long >= 360 {
            break;
        }
        eprintln!(
            "attempt {attempt}: {long} of 399 trains after a long gap: the lcores were starved"
        );
    }
    assert!(long >= 200, "{long} of 399 trains after a long gap");
    let mut sorted: Vec<u64> = t
        .windows(2)
        .enumerate()
        .filter(|(i, _)| (i + 1) % 50 != 0)
        .map(|(_, w)| w[1] - w[0])
        .collect();
    sorted.sort_unstable();
    // Within a train the frames go back to back.
    let median = sorted[sorted.len() / 2];
    assert!(median < 10_000, "median gap within a train {median} ns");
    let long_inside = sorted.iter().filter(|&&g| g > 1_000_000).count();
    assert!(
        long_inside * 100 < sorted.len(),
        "{long_inside} long gaps within trains"
    );
}
