//! The search through its public API: on simulated devices, and through the external-command
//! measurer with a small awk "device" (capacity 3 Mpps, everything above it is dropped).

use linerate::search::{
    drive, BinarySearch, CommandMeasurer, Goal, MdrSearch, MeasureError, Measurer, Report,
    SearchConfig, SimDut, SimModel,
};

fn contains_truth(report: &Report, truth: &[f64]) {
    for (g, &t) in report.outcome.goals.iter().zip(truth) {
        let (lo, hi) = (g.lower_pps.unwrap(), g.upper_pps.unwrap());
        assert!(lo <= t && t < hi, "{g:?} truth {t}");
        assert!(g.width.unwrap() <= g.goal.width * (1.0 + 1e-9));
        assert!(!g.incomplete);
    }
}

#[test]
fn mdr_on_the_issue_dut_set_beats_binary_search() {
    for ndr in [1e6, 5e6, 12e6, 20e6] {
        let model = SimModel {
            ndr,
            pdr: 1.02 * ndr,
            ..SimModel::default()
        };
        for final_duration in [10.0, 30.0, 60.0] {
            let cfg = SearchConfig {
                final_duration,
                ..SearchConfig::csit()
            };
            let mdr = drive(
                &mut MdrSearch::new(cfg.clone()).unwrap(),
                &mut SimDut::new(model),
                &mut |_, _| {},
            )
            .unwrap();
            let bin = drive(
                &mut BinarySearch::new(cfg).unwrap(),
                &mut SimDut::new(model),
                &mut |_, _| {},
            )
            .unwrap();
            let truth = [model.ndr, model.pdr];
            contains_truth(&mdr, &truth);
            contains_truth(&bin, &truth);
            assert!(
                mdr.outcome.trial_duration_sum_s < bin.outcome.trial_duration_sum_s / 2.0,
                "ndr {ndr} final {final_duration}: {} vs {}",
                mdr.outcome.trial_duration_sum_s,
                bin.outcome.trial_duration_sum_s
            );
        }
    }
}

fn awk_device() -> String {
    "awk -v r={rate} -v d={duration} 'BEGIN { o = int(r * d); c = int(3000000 * d); \
     if (o < c) c = o; printf \"{\\\"offered\\\": %d, \\\"received\\\": %d}\\n\", o, c }'"
        .to_string()
}

#[test]
fn external_command_measurer_drives_the_search() {
    let cfg = SearchConfig {
        min_rate: 1e5,
        max_rate: 1e7,
        final_duration: 2.0,
        initial_duration: 0.5,
        goals: vec![Goal::new("NDR", 0.0, 0.01), Goal::new("PDR", 0.01, 0.01)],
        ..SearchConfig::csit()
    };
    let mut m = CommandMeasurer::new(awk_device());
    let report = drive(&mut MdrSearch::new(cfg).unwrap(), &mut m, &mut |_, _| {}).unwrap();
    contains_truth(&report, &[3e6, 3e6 / 0.99]);
    for t in &report.trials {
        // The command saw the rate and duration (printed with 3 decimals).
        let expected = (t.rate_pps * t.duration_s).floor() as i64;
        assert!((t.offered as i64 - expected).abs() <= 1, "{t:?}");
    }
}

#[test]
fn external_command_errors_carry_output() {
    let mut liar =
        CommandMeasurer::new("echo '{\"offered\": 5, \"received\": 6}' # {rate} {duration}");
    match liar.measure(1.0, 1.0) {
        Err(MeasureError::Inconsistent {
            offered: 5,
            received: 6,
            output,
        }) => assert!(output.contains("\"received\": 6")),
        other => panic!("{other:?}"),
    }
    let mut failing = CommandMeasurer::new("echo 'link down' >&2; exit 7 # {rate} {duration}");
    let err = drive(
        &mut MdrSearch::new(SearchConfig::csit()).unwrap(),
        &mut failing,
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(err.trials.is_empty());
    assert!(err.to_string().contains("link down"), "{err}");
}
