//! `kind = "impair"`: linerate as a lossy, jittery link between any two
//! ports or rings, through the mem wire's impairment engine, in real time
//! (see [`crate::runtime::impair`]). The impairment keys are the mem port's,
//! read by the same code ([`impairments`]).
//!
//! ```toml
//! [stage.link]
//! kind = "impair"
//! rx = "in"
//! tx = "out"
//! loss = 0.2
//! delay = "1ms"
//! jitter = { distribution = "normal", mean = "2ms", stddev = "500us", order = "keep" }
//! ```

use std::time::Duration;

use toml::de::DeValue;

use super::CheckCtx;
use super::super::replica::Refusal;
use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, rx, tx, BURST, DELAY, DUPLICATE, KIND, LCORE, LOSS, REORDER, RX, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::port::impair::{Capacity, Distribution, Impairments, Jitter};
use crate::runtime::impair::{Impair, ImpairSpec, DEFAULT_LIMIT};
use crate::runtime::Stage;
use crate::units::Rate;

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    RX,
    TX,
    LOSS,
    DUPLICATE,
    REORDER,
    DELAY,
    Key::new(
        "jitter",
        "table",
        "none",
        "a per-packet extra delay: { distribution = \"uniform\" (min, max) | \"normal\" (mean, stddev) | \"exponential\" (mean), order = \"keep\" | \"any\" }",
    ),
    Key::new(
        "capacity",
        "rate",
        "none (no bottleneck)",
        "service rate of a bottleneck on the link: \"5 Mpps\", \"10 Gbps\", or \"40%\" of line_rate",
    ),
    Key::new(
        "queue",
        "integer 1..2^24",
        "1024",
        "packets that may wait at the bottleneck before tail drop (with a capacity)",
    ),
    Key::new("seed", "integer", "1", "seed of the impairment decisions"),
    Key::new(
        "line_rate",
        "bits/s",
        "none",
        "the link's line rate, for a capacity in percent",
    ),
    Key::new(
        "limit",
        "integer 1..2^24",
        "8192",
        "packets the delay line may hold (they hold pool buffers); more are dropped as overflow",
    ),
    BURST,
];

/// The keys of a `jitter` table.
const JITTER_KEYS: &[Key] = &[
    Key::new(
        "distribution",
        "string",
        "required",
        "\"uniform\", \"normal\" or \"exponential\"",
    ),
    Key::new("min", "duration", "\"0s\"", "uniform: the smallest extra delay"),
    Key::new("max", "duration", "required", "uniform: the largest extra delay"),
    Key::new(
        "mean",
        "duration",
        "required",
        "normal, exponential: the mean extra delay",
    ),
    Key::new(
        "stddev",
        "duration",
        "required",
        "normal: the standard deviation",
    ),
    Key::new(
        "order",
        "string",
        "\"keep\"",
        "\"keep\": a packet never overtakes an earlier one; \"any\": each leaves when its delay is up",
    ),
];

pub(super) const DEF: StageDef = StageDef::new(
    "impair",
    "an impair stage",
    "forwards from rx to tx through seeded loss, duplication, reordering, delay and jitter, in real time",
    KEYS,
    parse,
);

const JITTER_EXAMPLE: &str = "jitter = { distribution = \"uniform\", min = \"0ms\", max = \"2ms\" }, { distribution = \"normal\", mean = \"2ms\", stddev = \"500us\" } or { distribution = \"exponential\", mean = \"1ms\" }, each with `order = \"keep\"` (the default) or `\"any\"`";

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let rx = rx(t, sink);
    let tx = tx(t, sink);
    let (mut impairments, _) = impairments(t, sink);
    impairments.jitter = jitter(t, sink);
    let limit = t
        .int(sink, "limit", 1..1 << 24)
        .map_or(DEFAULT_LIMIT, |(l, _)| l as usize);
    let spec = ImpairSpec {
        impairments,
        limit,
        burst: burst(t, sink),
    };
    (StageKind::Impair(spec), rx, tx)
}

/// The mem wire's impairments (and `line_rate`, in L1 bits/s, which a
/// capacity in percent is taken of).
pub(super) fn impairments(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
) -> (Impairments, Option<f64>) {
    let line = t.line_rate_bps(sink, "line_rate", "\"10 Gbps\"");
    let mut c = Impairments::default();
    if let Some((r, s)) = t.rate(sink, "capacity") {
        c.capacity = match r {
            Rate::Pps(p) => Some(Capacity::Pps(p)),
            Rate::L2Bps(b) => Some(Capacity::L2Bps(b)),
            Rate::L1Bps(b) => Some(Capacity::L1Bps(b)),
            Rate::Percent(p) => match line {
                Some(l) => Some(Capacity::L1Bps(l * p / 100.0)),
                None => {
                    sink.error(
                        s,
                        &t.path,
                        Some("capacity"),
                        format!(
                            "a capacity in percent needs `line_rate` on this {}",
                            if t.path.starts_with("port.") {
                                "port"
                            } else {
                                "stage"
                            }
                        ),
                        None,
                    );
                    None
                }
            },
        };
        if matches!(r, Rate::Pps(x) | Rate::L2Bps(x) | Rate::L1Bps(x) if x <= 0.0) {
            sink.error(
                t.span_of("capacity"),
                &t.path,
                Some("capacity"),
                "a capacity must be above zero",
                None,
            );
        }
    }
    if let Some((q, _)) = t.int(sink, "queue", 1..1 << 24) {
        c.queue = q as u32;
    }
    c.loss = t.float(sink, "loss", 0.0, 1.0).unwrap_or(0.0);
    c.duplicate = t.float(sink, "duplicate", 0.0, 1.0).unwrap_or(0.0);
    c.reorder = t.float(sink, "reorder", 0.0, 1.0).unwrap_or(0.0);
    c.delay = t.duration(sink, "delay").unwrap_or_default();
    if let Some((s, _)) = t.int(sink, "seed", 0..i64::MAX) {
        c.seed = s as u64;
    }
    (c, line)
}

/// The `jitter` table: a distribution, its parameters, and the order.
fn jitter(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<Jitter> {
    if !t.has("jitter") {
        return None;
    }
    t.mark_used("jitter");
    let span = t.span_of("jitter");
    let Some(DeValue::Table(map)) = t.raw("jitter") else {
        sink.error(
            span,
            &t.path,
            Some("jitter"),
            "expected a table naming a distribution",
            Some(JITTER_EXAMPLE.into()),
        );
        return None;
    };
    let mut j = Table::new(format!("{}.jitter", t.path), span, map);
    let path = j.path.clone();
    let dist = j.choice(
        sink,
        "distribution",
        "jitter distribution",
        &[("uniform", 0), ("normal", 1), ("exponential", 2)],
        "\"uniform\" (min, max), \"normal\" (mean, stddev) or \"exponential\" (mean)",
    );
    if !j.has("distribution") {
        sink.error(
            j.span.clone(),
            &path,
            Some("distribution"),
            "`distribution` is required in a jitter table",
            Some(JITTER_EXAMPLE.into()),
        );
    }
    let keep_order = j
        .choice(
            sink,
            "order",
            "jitter order",
            &[("keep", true), ("any", false)],
            "\"keep\" (a packet never overtakes an earlier one) or \"any\" (each leaves when its own delay is up)",
        )
        .unwrap_or(true);
    let (params, names): (&[&str], &str) = match dist? {
        0 => (&["min", "max"], "uniform"),
        1 => (&["mean", "stddev"], "normal"),
        _ => (&["mean"], "exponential"),
    };
    // Keys that belong to another distribution are mistakes, not defaults.
    for k in ["min", "max", "mean", "stddev"] {
        if j.has(k) && !params.contains(&k) {
            j.mark_used(k);
            sink.error(
                j.span_of(k),
                &path,
                Some(k),
                format!("a {names} jitter has no `{k}`"),
                Some(format!("{names}: {}", params.join(", "))),
            );
        }
    }
    let mut get = |j: &mut Table<'_, '_>, k: &str, required: bool| -> Option<Duration> {
        if !j.has(k) {
            if required {
                sink.error(
                    j.span.clone(),
                    &path,
                    Some(k),
                    format!("a {names} jitter needs `{k}`"),
                    Some(JITTER_EXAMPLE.into()),
                );
            }
            return None;
        }
        j.duration(sink, k)
    };
    let distribution = match dist? {
        0 => {
            let min = if j.has("min") {
                get(&mut j, "min", false)?
            } else {
                Duration::ZERO
            };
            Distribution::Uniform {
                min,
                max: get(&mut j, "max", true)?,
            }
        }
        1 => {
            let mean = get(&mut j, "mean", true);
            let stddev = get(&mut j, "stddev", true);
            Distribution::Normal {
                mean: mean?,
                stddev: stddev?,
            }
        }
        _ => Distribution::Exponential {
            mean: get(&mut j, "mean", true)?,
        },
    };
    if let Err((k, why)) = distribution.problem() {
        sink.error(
            j.span_of(k),
            &path,
            Some(k),
            why,
            Some(JITTER_EXAMPLE.into()),
        );
        return None;
    }
    j.finish(sink, "a jitter table", JITTER_KEYS);
    Some(Jitter {
        distribution,
        keep_order,
    })
}

impl StageConfig for ImpairSpec {
    /// It forwards packets as they are: both ends must carry the same kind
    /// of packet.
    fn check(&mut self, cx: &mut CheckCtx<'_, '_>) {
        let layer = |end: &Option<String>| {
            let port = cx.port(end)?;
            Some((
                port.name.clone(),
                port.kind.name(),
                port.kind.config().carries()?,
            ))
        };
        if let (Some((rx, rk, rl)), Some((tx, tk, tl))) = (layer(&cx.stage.rx), layer(&cx.stage.tx))
        {
            if rl != tl {
                cx.error_at(
                    cx.stage.tx_span.clone(),
                    Some("tx"),
                    format!("port `{tx}` ({tk}) carries {tl}, but port `{rx}` ({rk}) delivers {rl}: the impair stage passes packets on as they are, so its ports must carry the same kind of packet"),
                    Some("two udp ports, two frame ports (dpdk, pcap, ibverbs), or a mem port or ring on either side".into()),
                );
            }
        }
    }

    fn replicate(&self, _n: usize) -> Result<(), Refusal> {
        Err(Refusal::Kind(
            "an impairment stage keeps one ordered schedule of delays",
        ))
    }

    fn name(&self) -> &'static str {
        "impair"
    }

    fn describe(&self) -> String {
        let c = self;
        let i = &c.impairments;
        let mut parts = vec!["impair".to_string()];
        for (what, p) in [
            ("loss", i.loss),
            ("duplicate", i.duplicate),
            ("reorder", i.reorder),
        ] {
            if p > 0.0 {
                parts.push(format!("{what} {p}"));
            }
        }
        if let Some(cap) = i.capacity {
            let cap = match cap {
                Capacity::Pps(p) => format!("{}pps", crate::units::si(p)),
                Capacity::L2Bps(b) => format!("{}bps (L2)", crate::units::si(b)),
                Capacity::L1Bps(b) => format!("{}bps (L1)", crate::units::si(b)),
            };
            parts.push(format!("capacity {cap}, queue {}", i.queue));
        }
        if !i.delay.is_zero() {
            parts.push(format!("delay {:?}", i.delay));
        }
        if let Some(j) = i.jitter {
            let order = if j.keep_order {
                "order kept"
            } else {
                "any order"
            };
            let d = match j.distribution {
                Distribution::Uniform { min, max } => format!("uniform {min:?}..{max:?}"),
                Distribution::Normal { mean, stddev } => format!("normal {mean:?} +- {stddev:?}"),
                Distribution::Exponential { mean } => format!("exponential, mean {mean:?}"),
            };
            parts.push(format!("jitter {d}, {order}"));
        }
        parts.push(format!(
            "seed {}, limit {}, burst {}",
            i.seed, c.limit, c.burst
        ));
        parts.join(", ")
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let (i, out) = (cx.input()?, cx.output()?);
        Ok(Box::new(Impair::new(self, i, out, cx.counters)))
    }
}
