//! linerate's MDR search against FD.io MLRsearch 1.2.1 (the peer, in a Python venv) on the same
//! simulated device. The venv is `$LINERATE_VENV` or `<crate root>/.venv`; without it the test
//! is skipped, unless `LINERATE_REQUIRE_PEERS=1`, when it fails.

use std::path::PathBuf;
use std::process::Command;

use linerate::search::{drive, MdrSearch, SearchConfig, SimDut, SimModel};

fn venv_python() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var_os("LINERATE_VENV").map_or(root.join(".venv"), PathBuf::from);
    let py = venv.join("bin").join("python");
    let ok = Command::new(&py)
        .args(["-c", "import MLRsearch"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

#[test]
fn mdr_needs_less_trial_time_than_mlrsearch_on_a_consistent_device() {
    let Some(py) = venv_python() else {
        if std::env::var("LINERATE_REQUIRE_PEERS").as_deref() == Ok("1") {
            panic!("MLRsearch 1.2.1 not found: python3 -m venv .venv && .venv/bin/pip install MLRsearch==1.2.1 (or set LINERATE_VENV)");
        }
        eprintln!("skipped: no venv with MLRsearch 1.2.1 (set LINERATE_VENV or create .venv)");
        return;
    };
    let model_text = "ndr=12e6,pdr=12.24e6,plr=0.005,seed=1";
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/search-mlrsearch.py");
    let out = Command::new(py)
        .arg(script)
        .args(["--final", "30", "--sim", model_text])
        .output()
        .expect("run the MLRsearch harness");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("harness JSON");
    let model: SimModel = model_text.parse().unwrap();
    let ours = drive(
        &mut MdrSearch::new(SearchConfig::csit()).unwrap(),
        &mut SimDut::new(model),
        &mut |_, _| {},
    )
    .unwrap();
    let truths = [model.ndr, model.pdr];
    for (i, truth) in truths.iter().enumerate() {
        let g = &ours.outcome.goals[i];
        assert!(g.lower_pps.unwrap() <= *truth && *truth < g.upper_pps.unwrap());
        let p = &peer["goals"][i];
        let (lo, hi) = (
            p["lower_pps"].as_f64().unwrap(),
            p["upper_pps"].as_f64().unwrap(),
        );
        assert!(lo <= *truth && *truth < hi, "MLRsearch {p}");
        // Same accuracy: the same grid point as lower bound.
        assert!((g.lower_pps.unwrap() / lo - 1.0).abs() < 1e-9);
    }
    let theirs = peer["trial_duration_sum_s"].as_f64().unwrap();
    assert!(
        ours.outcome.trial_duration_sum_s < theirs,
        "ours {} s, MLRsearch {theirs} s",
        ours.outcome.trial_duration_sum_s
    );
    // The harness simulates the same device: its trials reproduce ours where they coincide.
    let trials = peer["trial_list"].as_array().unwrap();
    let (rate, duration, offered, loss) = (
        trials[0][0].as_f64().unwrap(),
        trials[0][1].as_f64().unwrap(),
        trials[0][2].as_u64().unwrap(),
        trials[0][3].as_u64().unwrap(),
    );
    assert_eq!(model.trial(0, rate, duration), (offered, loss));
}
