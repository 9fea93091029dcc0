//! The exposition: a `prometheus-client` collector that reads [`Live`] at
//! scrape time and writes OpenMetrics text.
//!
//! Names follow Prometheus conventions: `linerate_` first, the unit in the
//! name, `_total` on counters (added by the encoder). Every family carries the
//! `pipeline` label when a pipeline runs.

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::Live;

/// Port detail keys that are levels, not counts.
const PORT_GAUGES: [&str; 5] = [
    "in_flight",
    "mbufs_in_use",
    "link_up",
    "link_speed_mbps",
    "rx_posted",
];

type Labels = Vec<(&'static str, String)>;

/// Samples of one family, written together.
struct Family {
    name: String,
    help: &'static str,
    kind: MetricType,
    samples: Vec<(Labels, f64)>,
}

impl Family {
    fn new(name: impl Into<String>, help: &'static str, kind: MetricType) -> Family {
        Family {
            name: name.into(),
            help,
            kind,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Labels, v: impl Into<f64>) {
        self.samples.push((labels, v.into()));
    }

    /// Adds an integer counter (exact up to 2^53, about 9e15 packets).
    fn count(&mut self, labels: Labels, v: u64) {
        self.samples.push((labels, v as f64));
    }

    fn write(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        if self.samples.is_empty() {
            return Ok(());
        }
        let mut m = enc.encode_descriptor(&self.name, self.help, None, self.kind)?;
        for (labels, v) in &self.samples {
            let fam = m.encode_family(labels)?;
            match self.kind {
                // Integral counts print as integers.
                MetricType::Counter if v.fract() == 0.0 && *v < 9.0e15 => {
                    ConstCounter::new(*v as u64).encode(fam)?
                }
                MetricType::Counter => ConstCounter::new(*v).encode(fam)?,
                _ => ConstGauge::new(*v).encode(fam)?,
            }
        }
        Ok(())
    }
}

#[derive(Debug)]
struct LiveCollector(Arc<LiveRef>);

struct LiveRef(Arc<Live>);

impl fmt::Debug for LiveRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Live")
    }
}

impl Collector for LiveCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for f in families(&self.0 .0) {
            f.write(&mut enc)?;
        }
        Ok(())
    }
}

/// The text formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 (what Prometheus asks for first).
    OpenMetrics,
    /// The classic Prometheus text format 0.0.4 (curl, promtool, older scrapers).
    Prometheus,
}

impl Format {
    /// The format an HTTP `Accept` header asks for.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The exposition text of everything `live` holds now.
pub fn encode(live: &Arc<Live>, format: Format) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(LiveCollector(Arc::new(LiveRef(live.clone())))));
    let mut out = String::with_capacity(16 << 10);
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
        Format::Prometheus => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
        }
    }
    Ok(out)
}

fn families(live: &Live) -> Vec<Family> {
    use MetricType::Gauge;
    let mut out = Vec::new();
    let mut info = Family::new(
        "linerate_info",
        "The running linerate: version, subcommand and pipeline.",
        Gauge,
    );
    let pipeline = live.pipeline.get().map(|p| p.name().to_string());
    let mut base = vec![
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("command", live.command.to_string()),
    ];
    if let Some(p) = &pipeline {
        base.push(("pipeline", p.clone()));
    }
    info.add(base, 1.0);
    out.push(info);
    let mut up = Family::new(
        "linerate_uptime_seconds",
        "Seconds since the command started.",
        Gauge,
    );
    up.add(Vec::new(), live.started.elapsed().as_secs_f64());
    out.push(up);

    if let Some(probe) = live.pipeline.get() {
        pipeline_families(&probe.snapshot(), &mut out);
        stage_value_families(probe, &mut out);
    }
    progress_families(live, pipeline.as_deref(), &mut out);
    out.retain(|f| !f.samples.is_empty());
    out
}

fn pipeline_families(r: &crate::runtime::run::RunReport, out: &mut Vec<Family>) {
    use MetricType::{Counter, Gauge};
    let pl = || ("pipeline", r.pipeline.clone());

    let mut rx_p = Family::new(
        "linerate_port_rx_packets",
        "Packets a port received.",
        Counter,
    );
    let mut rx_b = Family::new("linerate_port_rx_bytes", "Bytes a port received.", Counter);
    let mut tx_p = Family::new(
        "linerate_port_tx_packets",
        "Packets a port transmitted.",
        Counter,
    );
    let mut tx_b = Family::new(
        "linerate_port_tx_bytes",
        "Bytes a port transmitted.",
        Counter,
    );
    let mut drop = Family::new(
        "linerate_port_dropped_packets",
        "Packets a port dropped, all causes.",
        Counter,
    );
    let mut ev = Family::new(
        "linerate_port_events",
        "A port's kind-specific counts (drops by cause, impairments, errors), by `event`.",
        Counter,
    );
    let mut st = Family::new(
        "linerate_port_state",
        "A port's kind-specific levels (packets in flight, link state), by `state`.",
        Gauge,
    );
    for (name, p) in &r.ports {
        let l = || vec![pl(), ("port", name.clone()), ("kind", p.kind.to_string())];
        rx_p.count(l(), p.rx_packets);
        rx_b.count(l(), p.rx_bytes);
        tx_p.count(l(), p.tx_packets);
        tx_b.count(l(), p.tx_bytes);
        drop.count(l(), p.dropped);
        for (k, v) in &p.detail {
            if PORT_GAUGES.contains(k) {
                let mut lab = l();
                lab.push(("state", k.to_string()));
                st.add(lab, *v as f64);
            } else {
                let mut lab = l();
                lab.push(("event", k.to_string()));
                ev.count(lab, *v);
            }
        }
    }
    out.extend([rx_p, rx_b, tx_p, tx_b, drop, ev, st]);

    let mut s_in = Family::new(
        "linerate_stage_in_packets",
        "Packets a stage took in.",
        Counter,
    );
    let mut s_out = Family::new(
        "linerate_stage_out_packets",
        "Packets a stage passed on.",
        Counter,
    );
    let mut s_inb = Family::new("linerate_stage_in_bytes", "Bytes a stage took in.", Counter);
    let mut s_outb = Family::new(
        "linerate_stage_out_bytes",
        "Bytes a stage passed on.",
        Counter,
    );
    let mut s_drop = Family::new(
        "linerate_stage_dropped_packets",
        "Packets a stage dropped.",
        Counter,
    );
    let mut s_polls = Family::new(
        "linerate_stage_polls",
        "Polls of a stage, by `result` (busy: did work; idle: found nothing).",
        Counter,
    );
    for (name, s) in &r.stages {
        let l = || {
            vec![
                pl(),
                ("stage", name.clone()),
                ("kind", s.kind.to_string()),
                ("lcore", s.lcore.to_string()),
            ]
        };
        s_in.count(l(), s.packets_in);
        s_out.count(l(), s.packets_out);
        s_inb.count(l(), s.bytes_in);
        s_outb.count(l(), s.bytes_out);
        s_drop.count(l(), s.dropped);
        for (res, v) in [("busy", s.busy_polls), ("idle", s.idle_polls)] {
            let mut lab = l();
            lab.push(("result", res.to_string()));
            s_polls.count(lab, v);
        }
    }
    out.extend([s_in, s_out, s_inb, s_outb, s_drop, s_polls]);

    let mut r_enq = Family::new(
        "linerate_ring_enqueued_items",
        "Items put on a ring.",
        Counter,
    );
    let mut r_deq = Family::new(
        "linerate_ring_dequeued_items",
        "Items taken off a ring.",
        Counter,
    );
    let mut r_drop = Family::new(
        "linerate_ring_dropped_items",
        "Items a full ring refused.",
        Counter,
    );
    let mut r_size = Family::new("linerate_ring_slots", "Slots in a ring.", Gauge);
    for (name, g) in &r.rings {
        let l = || vec![pl(), ("ring", name.clone())];
        r_enq.count(l(), g.enqueued);
        r_deq.count(l(), g.dequeued);
        r_drop.count(l(), g.dropped);
        r_size.add(l(), g.size as f64);
    }
    out.extend([r_enq, r_deq, r_drop, r_size]);

    let mut pool = Family::new(
        "linerate_pool_buffers",
        "Packet buffers of the pool, by `state` (total, free: on the shared free list).",
        Gauge,
    );
    pool.add(vec![pl(), ("state", "total".into())], r.pool.count as f64);
    pool.add(vec![pl(), ("state", "free".into())], r.pool.free as f64);
    let mut dry = Family::new(
        "linerate_pool_exhausted",
        "Allocations that found the pool empty.",
        Counter,
    );
    dry.count(vec![pl()], r.pool.exhausted);
    let mut inflight = Family::new(
        "linerate_in_flight_packets",
        "Packets in rings and wires right now.",
        Gauge,
    );
    inflight.add(vec![pl()], r.left_in_flight as f64);
    out.extend([pool, dry, inflight]);
}

/// What stages publish beyond their counters (a SPEAD receiver's heaps and
/// chunks, a chunk sink's totals), one family per value name, labelled like
/// the stage families (and `replica` for a replica).
fn stage_value_families(probe: &crate::runtime::run::Probe, out: &mut Vec<Family>) {
    let mut fams: Vec<Family> = Vec::new();
    for (stage, kind, lcore, replica, values) in probe.stage_values() {
        for (def, v) in values.read() {
            let i = match fams.iter().position(|f| f.name == def.name) {
                Some(i) => i,
                None => {
                    let t = match def.kind {
                        crate::runtime::ValueKind::Counter => MetricType::Counter,
                        crate::runtime::ValueKind::Gauge => MetricType::Gauge,
                    };
                    fams.push(Family::new(def.name, def.help, t));
                    fams.len() - 1
                }
            };
            let mut l: Labels = vec![
                ("pipeline", probe.name().to_string()),
                ("stage", stage.to_string()),
                ("kind", kind.to_string()),
                ("lcore", lcore.to_string()),
            ];
            if let Some(r) = replica {
                l.push(("replica", r.to_string()));
            }
            fams[i].add(l, v);
        }
    }
    out.extend(fams);
}

/// The last completed trial's PDV, IPDV (label `quantile`: 0 is the
/// minimum, 1 the maximum) and jitter, per stream, in seconds.
fn delay_families(
    streams: &[super::StreamDelay],
    base: &dyn Fn() -> Labels,
    out: &mut Vec<Family>,
) {
    if streams.is_empty() {
        return;
    }
    let mut pdv = Family::new(
        "linerate_trial_last_pdv_seconds",
        "PDV (RFC 5481) of the last completed trial per stream: latency quantile minus the minimum.",
        MetricType::Gauge,
    );
    let mut ipdv = Family::new(
        "linerate_trial_last_ipdv_seconds",
        "IPDV (RFC 3393) of the last completed trial per stream, signed (quantile 0: minimum).",
        MetricType::Gauge,
    );
    let mut jitter = Family::new(
        "linerate_trial_last_jitter_seconds",
        "RFC 3550 inter-arrival jitter of the last completed trial per stream.",
        MetricType::Gauge,
    );
    let labels = |stream: u16, q: Option<&str>| {
        let mut l = base();
        l.push(("stream", stream.to_string()));
        if let Some(q) = q {
            l.push(("quantile", q.to_string()));
        }
        l
    };
    for d in streams {
        let p = &d.pdv;
        for (q, v) in [
            ("0.5", p.p50),
            ("0.9", p.p90),
            ("0.99", p.p99),
            ("0.999", p.p999),
            ("1", p.max),
        ] {
            pdv.add(labels(d.stream, Some(q)), v as f64 / 1e9);
        }
        let i = &d.ipdv;
        for (q, v) in [
            ("0", i.min),
            ("0.5", i.p50),
            ("0.9", i.p90),
            ("0.99", i.p99),
            ("0.999", i.p999),
            ("1", i.max),
        ] {
            ipdv.add(labels(d.stream, Some(q)), v as f64 / 1e9);
        }
        jitter.add(labels(d.stream, None), d.jitter_ns / 1e9);
    }
    out.extend([pdv, ipdv, jitter]);
}

fn progress_families(live: &Live, pipeline: Option<&str>, out: &mut Vec<Family>) {
    use MetricType::{Counter, Gauge};
    let p = live.progress_now();
    let base = || -> Labels {
        pipeline
            .map(|n| vec![("pipeline", n.to_string())])
            .unwrap_or_default()
    };
    if matches!(live.command, "trial" | "search" | "suite") {
        let mut n = Family::new("linerate_trials", "Trials completed.", MetricType::Counter);
        n.count(base(), p.trials);
        out.push(n);
        let t = p.totals;
        for (name, help, v) in [
            (
                "linerate_trial_offered_packets",
                "Packets the completed trials offered.",
                t.offered,
            ),
            (
                "linerate_trial_sent_packets",
                "Packets the completed trials sent.",
                t.sent,
            ),
            (
                "linerate_trial_unsent_packets",
                "Packets the completed trials could not send in time (counted as loss).",
                t.unsent,
            ),
            (
                "linerate_trial_received_packets",
                "Packets of the completed trials received.",
                t.received,
            ),
        ] {
            let mut f = Family::new(name, help, Counter);
            f.count(base(), v);
            out.push(f);
        }
        let mut running = Family::new("linerate_trial_running", "1 while a trial runs.", Gauge);
        running.add(base(), if p.current.is_some() { 1.0 } else { 0.0 });
        out.push(running);
        if let Some(c) = &p.current {
            let mut num = Family::new(
                "linerate_trial_number",
                "The running trial's number.",
                Gauge,
            );
            num.add(base(), c.number as f64);
            let mut rate = Family::new(
                "linerate_trial_rate_packets_per_second",
                "The running trial's aggregate rate.",
                Gauge,
            );
            rate.add(base(), c.rate_pps);
            let mut dur = Family::new(
                "linerate_trial_duration_seconds",
                "The running trial's duration.",
                Gauge,
            );
            dur.add(base(), c.duration_s);
            out.extend([num, rate, dur]);
        }
        delay_families(&p.last_delay, &base, out);
        if let Some(l) = p.last_loss_ratio {
            let mut f = Family::new(
                "linerate_trial_last_loss_ratio",
                "Loss ratio of the last completed trial (unsent counts as lost).",
                Gauge,
            );
            f.add(base(), l);
            out.push(f);
        }
    }
    if let Some(s) = &p.search {
        let mut phase = Family::new(
            "linerate_search_phase",
            "1 for the search's current phase (`done` once it has ended).",
            Gauge,
        );
        let name = if s.done {
            "done".to_string()
        } else {
            s.phase.clone()
        };
        let mut l = base();
        l.push(("phase", name));
        phase.add(l, 1.0);
        let mut el = Family::new(
            "linerate_search_elapsed_seconds",
            "Accounted search time so far.",
            Gauge,
        );
        el.add(base(), s.elapsed_s);
        let mut bounds = Family::new(
            "linerate_search_bound_packets_per_second",
            "A goal's bounds (`bound`: lower, upper), once established.",
            Gauge,
        );
        for (goal, lo, hi) in &s.bounds {
            for (which, v) in [("lower", lo), ("upper", hi)] {
                if let Some(v) = v {
                    let mut l = base();
                    l.push(("goal", goal.clone()));
                    l.push(("bound", which.to_string()));
                    bounds.add(l, *v);
                }
            }
        }
        out.extend([phase, el, bounds]);
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::metrics::Live;
    use std::collections::BTreeMap;

    /// A strict reader of the text format: `# TYPE`/`# HELP` lines, samples
    /// `name{k="v",...} value`, `# EOF` last; returns sample -> value and the
    /// declared type of each family.
    type Parsed = (BTreeMap<String, f64>, BTreeMap<String, String>);

    pub(crate) fn parse(text: &str) -> Result<Parsed, String> {
        let mut samples = BTreeMap::new();
        let mut types = BTreeMap::new();
        let mut eof = false;
        for line in text.lines() {
            if eof {
                return Err(format!("text after # EOF: {line}"));
            }
            if line == "# EOF" {
                eof = true;
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').ok_or("bad TYPE")?;
                types.insert(name.to_string(), kind.to_string());
                continue;
            }
            if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').ok_or(format!("no value: {line}"))?;
            let v: f64 = value.parse().map_err(|_| format!("bad value: {line}"))?;
            let name = series.split("{").next().unwrap_or("");
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            {
                return Err(format!("bad name: {line}"));
            }
            let family = types
                .keys()
                .filter(|f| name.starts_with(f.as_str()))
                .max_by_key(|f| f.len())
                .ok_or(format!("sample before its TYPE: {line}"))?;
            if types[family] == "counter" && name != format!("{family}_total") {
                return Err(format!("counter sample without _total: {line}"));
            }
            if let Some(labels) = series.strip_prefix(name) {
                if !(labels.is_empty() || labels.starts_with('{') && labels.ends_with('}')) {
                    return Err(format!("bad labels: {line}"));
                }
            }
            if samples.insert(series.to_string(), v).is_some() {
                return Err(format!("duplicate series: {series}"));
            }
        }
        if !eof {
            return Err("no # EOF".into());
        }
        Ok((samples, types))
    }

    #[test]
    fn exposition_parses_and_carries_the_numbers() {
        let text = "[pipeline]\nname = \"m\"\npin = false\n[port.wire]\nkind = \"mem\"\n\
                    [stage.src]\nkind = \"source\"\ntx = \"wire\"\ncount = 1000\n\
                    [stage.sink]\nkind = \"sink\"\nrx = \"wire\"\n";
        let plan = crate::pipeline::load_str(std::path::Path::new("m.toml"), text).unwrap();
        let built = crate::pipeline::build::build(&plan).unwrap();
        let live = Live::new("run");
        live.set_pipeline(crate::runtime::run::Probe::of(&built));
        let flag = std::sync::atomic::AtomicBool::new(false);
        let report = crate::runtime::run::run(
            built,
            crate::runtime::run::RunOptions {
                duration: Some(std::time::Duration::from_secs(10)),
                interrupt: &flag,
                drain_timeout: std::time::Duration::from_secs(1),
                drain_quiet: crate::runtime::run::DRAIN_QUIET,
                on_tick: None,
            },
        )
        .unwrap();
        live.progress(|p| {
            p.trial_started(1e6, 2.0);
        });
        let text = encode(&live, Format::OpenMetrics).unwrap();
        let (samples, types) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let rx = report.ports["wire"].rx_packets;
        assert_eq!(rx, 1000);
        assert_eq!(
            samples[r#"linerate_port_rx_packets_total{pipeline="m",port="wire",kind="mem"}"#],
            rx as f64
        );
        assert_eq!(
            samples[r#"linerate_stage_in_packets_total{pipeline="m",stage="sink",kind="sink",lcore="0"}"#],
            1000.0,
            "{text}"
        );
        assert_eq!(types["linerate_port_rx_packets"], "counter");
        assert_eq!(types["linerate_pool_buffers"], "gauge");
        assert!(samples
            .keys()
            .any(|k| k.starts_with("linerate_port_events_total{") && k.contains("event=\"lost\"")));
        // `run` has no trials: no trial families.
        assert!(!samples.keys().any(|k| k.starts_with("linerate_trial")));
    }

    /// A pipeline's SPEAD stages: their published values parse as counters
    /// and gauges with the stage's labels, and end at the report's values.
    #[test]
    fn spead_stage_values_are_served_with_their_labels() {
        let text = std::fs::read_to_string("pipelines/telescope-ingest.toml")
            .unwrap()
            .replace("timestamps = 1024", "timestamps = 64")
            .replace("lcores = \"0\"", "lcores = \"0\"\npin = false");
        let plan = crate::pipeline::load_str(std::path::Path::new("t.toml"), &text).unwrap();
        let built = crate::pipeline::build::build(&plan).unwrap();
        let live = Live::new("run");
        live.set_pipeline(crate::runtime::run::Probe::of(&built));
        let flag = std::sync::atomic::AtomicBool::new(false);
        let report = crate::runtime::run::run(
            built,
            crate::runtime::run::RunOptions {
                duration: Some(std::time::Duration::from_secs(30)),
                interrupt: &flag,
                drain_timeout: std::time::Duration::from_secs(1),
                drain_quiet: crate::runtime::run::DRAIN_QUIET,
                on_tick: None,
            },
        )
        .unwrap();
        let text = encode(&live, Format::OpenMetrics).unwrap();
        let (s, types) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let recv = report.stages["recv"].detail.as_ref().unwrap();
        let sink = report.stages["check"].detail.as_ref().unwrap();
        let l = |stage: &str, kind: &str| {
            format!(
                "{{pipeline=\"telescope-ingest\",stage=\"{stage}\",kind=\"{kind}\",lcore=\"0\"}}"
            )
        };
        let r = l("recv", "spead_recv");
        let c = l("check", "chunk_sink");
        assert_eq!(recv["stream"]["heaps_complete"], 256);
        assert_eq!(s[&format!("linerate_spead_heaps_complete_total{r}")], 256.0);
        assert_eq!(
            s[&format!("linerate_spead_packets_total{r}")],
            recv["stream"]["packets"].as_f64().unwrap()
        );
        assert_eq!(
            s[&format!("linerate_spead_chunks_total{r}")],
            recv["chunks"].as_f64().unwrap()
        );
        assert_eq!(s[&format!("linerate_spead_fraction_present{r}")], 1.0);
        assert_eq!(
            s[&format!("linerate_chunk_sink_chunks_total{c}")],
            sink["chunks"].as_f64().unwrap()
        );
        assert_eq!(s[&format!("linerate_chunk_sink_present_total{c}")], 256.0);
        assert_eq!(s[&format!("linerate_chunk_sink_wrong_bytes_total{c}")], 0.0);
        assert_eq!(types["linerate_spead_heaps_complete"], "counter");
        assert_eq!(types["linerate_chunk_sink_fraction_present"], "gauge");
    }

    #[test]
    fn trial_and_search_progress() {
        let live = Live::new("search");
        live.progress(|p| {
            p.trial_started(2e6, 1.0);
            p.trial_done(2000, 10, 1900);
            p.last_delay = vec![crate::metrics::StreamDelay {
                stream: 3,
                pdv: crate::latency::variation::PdvSummary {
                    p99: 2_500,
                    ..Default::default()
                },
                ipdv: crate::latency::variation::SignedSummary {
                    min: -4_000,
                    ..Default::default()
                },
                jitter_ns: 1_500.0,
            }];
            p.trial_started(1e6, 1.0);
            p.search = Some(crate::metrics::SearchNow {
                phase: "initial".into(),
                elapsed_s: 1.0,
                bounds: vec![("NDR".into(), None, Some(2e6))],
                done: false,
            });
        });
        let text = encode(&live, Format::OpenMetrics).unwrap();
        let (s, types) = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(s["linerate_trials_total"], 1.0);
        assert_eq!(s["linerate_trial_offered_packets_total"], 2000.0);
        assert_eq!(s["linerate_trial_sent_packets_total"], 1990.0);
        assert_eq!(s["linerate_trial_unsent_packets_total"], 10.0);
        assert_eq!(s["linerate_trial_received_packets_total"], 1900.0);
        assert_eq!(s["linerate_trial_number"], 2.0);
        assert_eq!(s["linerate_trial_running"], 1.0);
        assert_eq!(s["linerate_trial_last_loss_ratio"], 0.05);
        assert_eq!(
            s[r#"linerate_trial_last_pdv_seconds{stream="3",quantile="0.99"}"#],
            2.5e-6
        );
        assert_eq!(
            s[r#"linerate_trial_last_ipdv_seconds{stream="3",quantile="0"}"#],
            -4e-6
        );
        assert_eq!(
            s[r#"linerate_trial_last_jitter_seconds{stream="3"}"#],
            1.5e-6
        );
        assert_eq!(types["linerate_trial_last_jitter_seconds"], "gauge");
        assert_eq!(s[r#"linerate_search_phase{phase="initial"}"#], 1.0);
        assert_eq!(
            s[r#"linerate_search_bound_packets_per_second{goal="NDR",bound="upper"}"#],
            2e6
        );
        assert!(!s.keys().any(|k| k.contains("bound=\"lower\"")));
    }

    #[test]
    fn parser_refuses_broken_text() {
        assert!(parse("# TYPE a counter\na 1\n# EOF\n").is_err());
        assert!(parse("# TYPE a counter\na_total 1\n").is_err());
        assert!(parse("a 1\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\na 1\na 2\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\na x\n# EOF\n").is_err());
        assert!(parse("# TYPE a gauge\na 1\n# EOF\n").is_ok());
    }
}
