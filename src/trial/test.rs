use super::*;

fn analyzer(received: u64, rx_span_ns: u64, rx_first_burst: u64) -> AnalyzerReport {
    AnalyzerReport {
        epoch: 1,
        streams: vec![crate::traffic::analyzer::StreamReport {
            stream: 0,
            received,
            bytes: 64 * received,
            unique: received,
            duplicates: 0,
            reordered: 0,
            gaps: 0,
            histogram: latency::merge(std::iter::empty()),
            variation: Default::default(),
            unexpected_encap: 0,
        }],
        stale: 0,
        foreign: 0,
        invalid_latency: 0,
        rx_span_ns,
        rx_first_burst,
        encap: crate::traffic::analyzer::EncapReport::default(),
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn rates_are_over_the_span_the_packets_went_out_and_arrived_in() {
    // A 1 s trial at 10 kpps, 5 kpps per generator (a packet every
    // 200 us): `a` kept its rate (its first packet at 200 us, the other
    // 4,999 by 1 s), `b` sent late, its last burst 250 ms past the end.
    let part = TrialPart {
        generators: [
            (
                "a".to_string(),
                GeneratorShare::new(5000, 5000, 0, 999_800_000, 1),
            ),
            (
                "b".to_string(),
                GeneratorShare::new(5000, 5000, 0, 1_249_750_000, 1),
            ),
        ]
        .into(),
        analyzers: vec![("ana".to_string(), analyzer(10_000, 1_250_050_000, 2))],
        ..TrialPart::default()
    };
    let r = assemble(
        1,
        10_000.0,
        Duration::from_secs(1),
        &[part],
        &BTreeSet::new(),
    );
    assert!(close(r.generators["a"].tx_pps, 5000.0), "{r:?}");
    assert!(close(r.generators["b"].tx_pps, 4000.0), "{r:?}");
    assert_eq!(r.tx_span_s, 1.24975);
    // Over the span, not over the duration (which would say 10 kpps).
    assert_eq!(r.tx_pps, 9998.0 / 1.24975);
    assert!(r.tx_pps < 0.81 * r.sent as f64 / r.duration_s);
    assert!(close(r.tx_shortfall().unwrap(), 1.0 - r.tx_pps / 1e4));
    // The arrivals after the first burst over the time since it.
    assert_eq!(r.rx_span_s, 1.25005);
    assert_eq!(r.rx_pps, 9998.0 / 1.25005);
    assert_eq!(r.analyzers["ana"].rx_pps, r.rx_pps);
    // Every key in the JSON, for the trial and each generator and analyzer.
    let v = serde_json::to_value(&r).unwrap();
    for k in ["tx_pps", "tx_span_s", "rx_pps", "rx_span_s"] {
        assert!(v[k].is_number(), "{k}: {v}");
    }
    for k in ["offered", "sent", "unsent", "tx_pps", "tx_span_s"] {
        assert!(v["generators"]["b"][k].is_number(), "{k}: {v}");
    }
    for k in ["received", "rx_pps", "rx_span_s"] {
        assert!(v["analyzers"]["ana"][k].is_number(), "{k}: {v}");
    }
}

#[test]
fn a_generator_that_kept_its_rate_is_not_short_and_nothing_is_not_infinite() {
    let part = TrialPart {
        generators: [(
            "g".to_string(),
            GeneratorShare::new(1000, 1000, 0, 99_900_000, 1),
        )]
        .into(),
        analyzers: vec![("ana".to_string(), analyzer(1000, 0, 1000))],
        ..TrialPart::default()
    };
    let r = assemble(
        1,
        10_000.0,
        Duration::from_millis(100),
        &[part],
        &BTreeSet::new(),
    );
    assert!(close(r.tx_pps, 10_000.0), "{r:?}");
    assert_eq!(r.tx_shortfall(), None);
    // Everything arrived in one burst: no arrival rate to measure, so
    // received over the duration, said so in the docs.
    assert_eq!(r.rx_span_s, 0.0);
    assert_eq!(r.rx_pps, 10_000.0);
    let none = TrialPart {
        generators: [("g".to_string(), GeneratorShare::new(1000, 0, 1000, 0, 0))].into(),
        analyzers: vec![("ana".to_string(), analyzer(0, 0, 0))],
        ..TrialPart::default()
    };
    let r = assemble(
        1,
        10_000.0,
        Duration::from_millis(100),
        &[none],
        &BTreeSet::new(),
    );
    assert_eq!((r.tx_pps, r.rx_pps), (0.0, 0.0));
    assert_eq!(r.tx_shortfall(), Some(1.0));
    assert!(serde_json::to_string(&r)
        .unwrap()
        .contains("\"tx_pps\":0.0"));
}
