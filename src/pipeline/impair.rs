//! The impairment keys, shared by the mem wire (`[port.NAME] kind = "mem"`)
//! and the `impair` stage, and the stage's own keys (`jitter`, `limit`).
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

use super::diag::Sink;
use super::table::Table;
use crate::port::impair::{Capacity, Distribution, Impairments, Jitter};
use crate::runtime::impair::{ImpairSpec, DEFAULT_LIMIT};
use crate::units::Rate;

/// The keys [`impairments`] reads.
pub(crate) const IMPAIRMENT_KEYS: &[&str] = &[
    "capacity",
    "queue",
    "loss",
    "duplicate",
    "reorder",
    "delay",
    "seed",
    "line_rate",
];

/// The keys of an impair stage.
pub(crate) const IMPAIR_STAGE_KEYS: &[&str] = &[
    "kind",
    "lcore",
    "rx",
    "tx",
    "capacity",
    "queue",
    "loss",
    "duplicate",
    "reorder",
    "delay",
    "seed",
    "line_rate",
    "jitter",
    "limit",
    "burst",
];

const JITTER_KEYS: &[&str] = &["distribution", "min", "max", "mean", "stddev", "order"];

const JITTER_EXAMPLE: &str = "jitter = { distribution = \"uniform\", min = \"0ms\", max = \"2ms\" }, { distribution = \"normal\", mean = \"2ms\", stddev = \"500us\" } or { distribution = \"exponential\", mean = \"1ms\" }, each with `order = \"keep\"` (the default) or `\"any\"`";

/// The mem wire's impairments (and `line_rate`, in L1 bits/s, which a
/// capacity in percent is taken of).
pub(crate) fn impairments(
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
                        "a capacity in percent needs `line_rate` here",
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

/// An impair stage's settings (its `rx` and `tx` are read by the caller).
pub(crate) fn impair_stage(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ImpairSpec {
    let (mut impairments, _) = impairments(t, sink);
    impairments.jitter = jitter(t, sink);
    let limit = t
        .int(sink, "limit", 1..1 << 24)
        .map_or(DEFAULT_LIMIT, |(l, _)| l as usize);
    let burst = t
        .int(sink, "burst", 1..crate::buf::BURST_MAX as i64 + 1)
        .map_or(32, |(b, _)| b as usize);
    ImpairSpec {
        impairments,
        limit,
        burst,
    }
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

/// The plan's one-line description of an impair stage.
pub(crate) fn describe(c: &ImpairSpec) -> String {
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
