//! A trial part on the wire between ranks: counts as they are, histograms in
//! HdrHistogram's V2 format (DEFLATE, base64: [`crate::latency::encode`]), so
//! rank 0 merges exactly what every host recorded. Plain JSON: a part crosses
//! once per host per trial, never per packet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::latency;
use crate::latency::variation::Variation;
use crate::port::PortReport;
use crate::traffic::analyzer::{AnalyzerReport, EncapReport, StreamReport};
use crate::trial::{GeneratorShare, TrialPart};

#[derive(serde::Serialize, serde::Deserialize)]
struct PartWire {
    /// Per generator: offered, sent, unsent, its send span in ns and the
    /// packets of its first burst (a part of an older linerate has only the
    /// first three: no span).
    generators: BTreeMap<String, Vec<u64>>,
    gaps: Vec<String>,
    analyzers: Vec<AnalyzerWire>,
    ports: BTreeMap<String, PortWire>,
    start_ns: Option<u64>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct AnalyzerWire {
    name: String,
    epoch: u32,
    stale: u64,
    foreign: u64,
    invalid_latency: u64,
    #[serde(default)]
    rx_span_ns: u64,
    #[serde(default)]
    rx_first_burst: u64,
    streams: Vec<StreamWire>,
    #[serde(default)]
    encap: EncapReport,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StreamWire {
    stream: u16,
    received: u64,
    bytes: u64,
    unique: u64,
    duplicates: u64,
    reordered: u64,
    gaps: u64,
    histogram: String,
    /// IPDV: its histograms of values >= 0 and of negative magnitudes, and
    /// the RFC 3550 jitter with its sample count (absent from a part of an
    /// older linerate: no delay variation).
    #[serde(default)]
    ipdv_pos: Option<String>,
    #[serde(default)]
    ipdv_neg: Option<String>,
    #[serde(default)]
    jitter_ns: f64,
    #[serde(default)]
    jitter_samples: u64,
    #[serde(default)]
    unexpected_encap: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PortWire {
    kind: String,
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
    dropped: u64,
    detail: BTreeMap<String, u64>,
    queues: Vec<PortWire>,
}

/// Port kinds and counter names are `&'static str` in a [`PortReport`]; a
/// received one is interned, so each distinct name is stored once however
/// many trials arrive.
fn intern(s: &str) -> &'static str {
    static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(s) {
        return n;
    }
    let n: &'static str = Box::leak(s.to_string().into_boxed_str());
    names.insert(n);
    n
}

fn port_out(p: &PortReport) -> PortWire {
    PortWire {
        kind: p.kind.to_string(),
        rx_packets: p.rx_packets,
        rx_bytes: p.rx_bytes,
        tx_packets: p.tx_packets,
        tx_bytes: p.tx_bytes,
        dropped: p.dropped,
        detail: p.detail.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        queues: p.queues.iter().map(port_out).collect(),
    }
}

fn port_in(p: PortWire) -> PortReport {
    PortReport {
        kind: intern(&p.kind),
        rx_packets: p.rx_packets,
        rx_bytes: p.rx_bytes,
        tx_packets: p.tx_packets,
        tx_bytes: p.tx_bytes,
        dropped: p.dropped,
        detail: p.detail.iter().map(|(k, v)| (intern(k), *v)).collect(),
        queues: p.queues.into_iter().map(port_in).collect(),
    }
}

/// A part as bytes.
pub fn encode(part: &TrialPart) -> Vec<u8> {
    let w = PartWire {
        generators: part
            .generators
            .iter()
            .map(|(k, g)| {
                (
                    k.clone(),
                    vec![
                        g.offered,
                        g.sent,
                        g.unsent,
                        g.tx_span_ns(),
                        g.tx_first_burst,
                    ],
                )
            })
            .collect(),
        gaps: part.gaps.iter().map(latency::encode).collect(),
        analyzers: part
            .analyzers
            .iter()
            .map(|(name, r)| AnalyzerWire {
                name: name.clone(),
                epoch: r.epoch,
                stale: r.stale,
                foreign: r.foreign,
                invalid_latency: r.invalid_latency,
                rx_span_ns: r.rx_span_ns,
                rx_first_burst: r.rx_first_burst,
                streams: r
                    .streams
                    .iter()
                    .map(|s| StreamWire {
                        stream: s.stream,
                        received: s.received,
                        bytes: s.bytes,
                        unique: s.unique,
                        duplicates: s.duplicates,
                        reordered: s.reordered,
                        gaps: s.gaps,
                        histogram: latency::encode(&s.histogram),
                        ipdv_pos: Some(latency::encode(&s.variation.ipdv.pos)),
                        ipdv_neg: Some(latency::encode(&s.variation.ipdv.neg)),
                        jitter_ns: s.variation.jitter_ns,
                        jitter_samples: s.variation.jitter_samples,
                        unexpected_encap: s.unexpected_encap,
                    })
                    .collect(),
                encap: r.encap.clone(),
            })
            .collect(),
        ports: part
            .ports
            .iter()
            .map(|(k, p)| (k.clone(), port_out(p)))
            .collect(),
        start_ns: part.start_ns,
    };
    // Serialising plain structs of numbers and strings cannot fail.
    serde_json::to_vec(&w).unwrap_or_default()
}

/// [`encode`]'s bytes back as a part; damaged bytes are an error, never a panic.
pub fn decode(bytes: &[u8]) -> Result<TrialPart, String> {
    let w: PartWire =
        serde_json::from_slice(bytes).map_err(|e| format!("a trial part does not parse: {e}"))?;
    let mut generators = BTreeMap::new();
    for (k, g) in w.generators {
        let [offered, sent, unsent] = match g.get(..3) {
            Some(&[o, s, u]) => [o, s, u],
            _ => {
                return Err(format!(
                    "generator `{k}` has {} counts, not 3 to 5",
                    g.len()
                ))
            }
        };
        let (span, first) = (g.get(3).copied(), g.get(4).copied());
        generators.insert(
            k,
            GeneratorShare::new(offered, sent, unsent, span.unwrap_or(0), first.unwrap_or(0)),
        );
    }
    let mut part = TrialPart {
        generators,
        ports: w.ports.into_iter().map(|(k, p)| (k, port_in(p))).collect(),
        start_ns: w.start_ns,
        ..TrialPart::default()
    };
    for g in &w.gaps {
        part.gaps.push(latency::decode(g)?);
    }
    for a in w.analyzers {
        let mut streams = Vec::new();
        for s in a.streams {
            let mut variation = Variation::default();
            variation.jitter_ns = s.jitter_ns;
            variation.jitter_samples = s.jitter_samples;
            if let Some(h) = &s.ipdv_pos {
                variation.ipdv.pos = latency::decode(h)?;
            }
            if let Some(h) = &s.ipdv_neg {
                variation.ipdv.neg = latency::decode(h)?;
            }
            streams.push(StreamReport {
                stream: s.stream,
                received: s.received,
                bytes: s.bytes,
                unique: s.unique,
                duplicates: s.duplicates,
                reordered: s.reordered,
                gaps: s.gaps,
                histogram: latency::decode(&s.histogram)?,
                variation,
                unexpected_encap: s.unexpected_encap,
            });
        }
        part.analyzers.push((
            a.name,
            AnalyzerReport {
                epoch: a.epoch,
                streams,
                stale: a.stale,
                foreign: a.foreign,
                invalid_latency: a.invalid_latency,
                rx_span_ns: a.rx_span_ns,
                rx_first_burst: a.rx_first_burst,
                encap: a.encap,
            },
        ));
    }
    Ok(part)
}

#[cfg(test)]
mod test {
    use super::*;
    use std::time::Duration;

    fn variation(seed: u64) -> Variation {
        let mut v = Variation::default();
        for i in 0..100u64 {
            v.record(i, 1000 + (i * 7919 + seed) % 500);
        }
        v
    }

    fn part(seed: u64) -> TrialPart {
        let mut h = latency::merge(std::iter::empty());
        for v in 1..200 {
            h.saturating_record(v * 37 + seed);
        }
        let mut port = PortReport {
            kind: "mem",
            rx_packets: 10 + seed,
            dropped: 3,
            ..PortReport::default()
        };
        port.detail.insert("loss", 3);
        TrialPart {
            generators: [(
                format!("gen{seed}"),
                GeneratorShare::new(100, 90 + seed, 10 - seed, 1_000_000_007 * seed, seed),
            )]
            .into(),
            gaps: vec![h.clone()],
            analyzers: vec![(
                format!("ana{seed}"),
                AnalyzerReport {
                    epoch: 1,
                    streams: vec![StreamReport {
                        stream: 0,
                        received: 80,
                        bytes: 5120,
                        unique: 79,
                        duplicates: 1,
                        reordered: seed,
                        gaps: 0,
                        histogram: h,
                        variation: variation(seed),
                        unexpected_encap: seed,
                    }],
                    stale: 2,
                    foreign: 0,
                    invalid_latency: 0,
                    rx_span_ns: 999_999_937 + seed,
                    rx_first_burst: seed,
                    encap: EncapReport {
                        by_id: [(format!("vlan {seed}"), 79)].into(),
                        other_ids: seed,
                        unexpected_encap: seed,
                    },
                },
            )],
            ports: [(format!("p{seed}"), port)].into(),
            start_ns: Some(seed),
        }
    }

    #[test]
    fn a_part_survives_the_wire_and_assembles_the_same() {
        let parts = [part(1), part(2)];
        let back: Vec<TrialPart> = parts.iter().map(|p| decode(&encode(p)).unwrap()).collect();
        let d = Duration::from_secs(1);
        let none = BTreeSet::new();
        let a = crate::trial::assemble(1, 1e3, d, &parts, &none);
        let b = crate::trial::assemble(1, 1e3, d, &back, &none);
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        assert_eq!(a.histogram, b.histogram);
        // Exact sums, and one stream seen on two hosts is one entry.
        assert_eq!(b.offered, 200);
        assert_eq!(b.sent, 183);
        assert_eq!(b.received, 158);
        assert_eq!(b.streams.len(), 1);
        assert_eq!(b.histogram.len(), 2 * 199);
        assert_eq!(b.ports["p2"].detail["loss"], 3);
        // IPDV histograms merge exactly; jitter is the weighted mean.
        let s = &b.streams[0];
        assert_eq!(s.ipdv_ns.samples, 2 * 99);
        assert!(s.ipdv == a.streams[0].ipdv);
        let j = crate::latency::variation::merged_jitter([&variation(1), &variation(2)]);
        assert_eq!(s.jitter_ns, j);
        assert!(j > 0.0);
    }

    #[test]
    fn streams_without_comparable_clocks_keep_counts_but_no_latency() {
        let parts = [part(1), part(2)];
        let no: BTreeSet<(usize, u16)> = [(1, 0)].into();
        let r = crate::trial::assemble(1, 1e3, Duration::from_secs(1), &parts, &no);
        assert_eq!(r.received, 158);
        assert_eq!(r.histogram.len(), 199);
    }

    #[test]
    fn damaged_bytes_are_an_error() {
        let mut b = encode(&part(1));
        b.truncate(b.len() / 2);
        assert!(decode(&b).is_err());
        assert!(
            decode(b"{\"generators\":{},\"gaps\":[\"!!\"],\"analyzers\":[],\"ports\":{},\"start_ns\":null}").is_err()
        );
        // A generator's counts: 3 (without a span) to 5, never fewer.
        let with = |counts: &str| {
            format!("{{\"generators\":{{\"g\":{counts}}},\"gaps\":[],\"analyzers\":[],\"ports\":{{}},\"start_ns\":null}}")
        };
        let old = decode(with("[10,9,1]").as_bytes()).unwrap();
        assert_eq!(old.generators["g"].sent, 9);
        assert_eq!(old.generators["g"].tx_span_s, 0.0);
        let new = decode(with("[10,9,1,2000000000,1]").as_bytes()).unwrap();
        assert_eq!(new.generators["g"].tx_span_s, 2.0);
        assert_eq!(new.generators["g"].tx_first_burst, 1);
        assert!(decode(with("[10,9]").as_bytes()).is_err());
    }
}
