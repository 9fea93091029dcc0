//! The sections that are not ports or stages: `[pipeline]` (its cores),
//! `[pool]`, `[ring.NAME]` and `[eal]`, with their keys; `[host.NAME]` is
//! `host.rs`'s.

use toml::de::{DeTable, DeValue};

use super::super::diag::Sink;
use super::super::table::{as_int, Key, KindDoc, Span, Table};
use super::{common, host};
use crate::buf::{HugepageMode, PoolConfig};
use crate::units::parse_core_list;

pub(super) const PIPELINE_KEYS: &[Key] = &[
    Key::new(
        "name",
        "string",
        "the file's stem",
        "the pipeline's name in reports",
    ),
    Key::new(
        "lcores",
        "core list, core id or array of ids",
        "the first core available",
        "the cores the pipeline may use, like \"0-1,3\"",
    ),
    Key::new(
        "pin",
        "boolean",
        "true",
        "pin each lcore to its core (false: unpinned threads sharing the cores)",
    ),
];
const POOL_KEYS: &[Key] = &[
    Key::new(
        "buffers",
        "integer 64..2^26",
        "16384",
        "packet buffers in the pool",
    ),
    Key::new(
        "size",
        "size 256..=65664 bytes",
        "\"2 KiB\"",
        "bytes per buffer, headroom included",
    ),
    Key::new(
        "headroom",
        "integer 0..=1024",
        "128",
        "bytes kept free before each packet",
    ),
    Key::new(
        "hugepages",
        "true, false or \"auto\"",
        "false",
        "back the pool with hugepages (\"auto\": when available)",
    ),
];
const RING_KEYS: &[Key] = &[Key::new(
    "size",
    "power of two 2..=2^24",
    "1024",
    "slots in the ring",
)];
const EAL_KEYS: &[Key] = &[Key::new(
    "args",
    "array of strings",
    "[]",
    "DPDK EAL arguments, like [\"--no-huge\", \"--vdev=net_null0\"]",
)];

const fn section_doc(
    name: &'static str,
    what: &'static str,
    doc: &'static str,
    keys: &'static [Key],
) -> KindDoc {
    KindDoc {
        name,
        what,
        doc,
        keys,
        more_keys: &[],
    }
}

pub(super) const SECTIONS: &[KindDoc] = &[
    section_doc(
        "pipeline",
        "[pipeline]",
        "the pipeline's name and cores",
        PIPELINE_KEYS,
    ),
    section_doc("pool", "[pool]", "the packet buffer pool", POOL_KEYS),
    section_doc(
        "ring",
        "a ring",
        "a bounded link between two stages ([ring.NAME])",
        RING_KEYS,
    ),
    section_doc(
        "eal",
        "[eal]",
        "DPDK's EAL arguments, for pipelines with dpdk ports",
        EAL_KEYS,
    ),
    section_doc(
        "host",
        "[host.NAME]",
        "a host of a multi-host run under mpirun; ports and stages name it with `host`",
        host::HOST_KEYS,
    ),
];

/// A ring as declared.
#[derive(Debug, Clone)]
pub struct RingSpec {
    /// Its name.
    pub name: String,
    /// Slots (a power of two).
    pub size: usize,
    pub(crate) span: Span,
}

/// Reads `[pool]`.
pub(super) fn parse_pool(sink: &mut Sink<'_>, span: Span, map: &DeTable<'_>) -> PoolConfig {
    let mut pool = PoolConfig::default();
    let mut t = Table::new("pool", span, map);
    if let Some((n, _)) = t.int(sink, "buffers", 64..1 << 26) {
        pool.count = n as u32;
    }
    if let Some((s, span)) = t.size(sink, "size") {
        if !(256..=65536 + 128).contains(&s) {
            sink.error(
                span,
                "pool",
                Some("size"),
                format!("{s} bytes is out of range"),
                Some("from 256 to 65664 bytes per buffer, headroom included".into()),
            );
        }
        pool.buf_size = s as u32;
    }
    if let Some((h, _)) = t.int(sink, "headroom", 0..1025) {
        pool.headroom = h as u16;
    }
    let span = t.span_of("hugepages");
    if t.has("hugepages") {
        pool.hugepages = match map.get("hugepages").map(|v| v.get_ref()) {
            Some(DeValue::Boolean(true)) => HugepageMode::Required,
            Some(DeValue::Boolean(false)) => HugepageMode::Off,
            Some(DeValue::String(s)) if s == "auto" => HugepageMode::Auto,
            _ => {
                sink.error(
                    span,
                    "pool",
                    Some("hugepages"),
                    "expected true, false or \"auto\"",
                    None,
                );
                HugepageMode::Off
            }
        };
        t.mark_used("hugepages");
    }
    t.finish(sink, "[pool]", POOL_KEYS);
    pool
}

/// Reads `[eal]`: the EAL's arguments.
pub(super) fn parse_eal(sink: &mut Sink<'_>, span: Span, map: &DeTable<'_>) -> Vec<String> {
    let mut eal = Vec::new();
    let mut t = Table::new("eal", span.clone(), map);
    if !cfg!(feature = "dpdk") {
        sink.error(span.clone(), "eal", None, "[eal] is for dpdk ports, which this build does not have (build with `--features dpdk`)", None);
    }
    t.mark_used("args");
    match t.raw("args") {
        Some(DeValue::Array(a)) if a.iter().all(|v| matches!(v.get_ref(), DeValue::String(_))) => {
            eal = a.iter().filter_map(|v| match v.get_ref() { DeValue::String(s) => Some(s.to_string()), _ => None }).collect();
        }
        Some(_) => sink.error(t.span_of("args"), "eal", Some("args"), "expected an array of strings", Some("EAL arguments as strings, like [\"--no-huge\", \"-m\", \"512\", \"--vdev=net_null0\"]".into())),
        None => {}
    }
    t.finish(sink, "[eal]", EAL_KEYS);
    eal
}

/// Reads `[ring.NAME]`.
pub(super) fn parse_ring(
    sink: &mut Sink<'_>,
    name: String,
    span: Span,
    map: &DeTable<'_>,
) -> Option<RingSpec> {
    let mut t = Table::new(format!("ring.{name}"), span.clone(), map);
    let size = if t.has("size") {
        common::ring_size(&mut t, sink, "size")
    } else {
        Some(1024)
    };
    t.finish(sink, "a ring", RING_KEYS);
    Some(RingSpec {
        name,
        size: size?,
        span,
    })
}

pub(super) fn parse_lcores(
    sink: &mut Sink<'_>,
    t: &mut Table<'_, '_>,
    pin: bool,
    cores: &[usize],
) -> Vec<usize> {
    let span = t.span_of("lcores");
    let bad = |sink: &mut Sink<'_>, msg: String| {
        sink.error(
            span.clone(),
            "pipeline",
            Some("lcores"),
            msg,
            Some("a core list like \"0-1,3\", a core id, or an array of core ids".into()),
        );
        vec![0]
    };
    t.mark_used("lcores");
    let list = match t.raw("lcores") {
        Some(DeValue::String(s)) => match parse_core_list(s) {
            Ok(l) => l,
            Err(e) => return bad(sink, e.to_string()),
        },
        Some(DeValue::Integer(_)) => match t.raw("lcores").and_then(as_int) {
            Some(i @ 0..=4095) => vec![i as usize],
            _ => return bad(sink, "a core id must be from 0 to 4095".into()),
        },
        Some(DeValue::Array(a)) => {
            let ids: Option<Vec<usize>> = a
                .iter()
                .map(|v| {
                    as_int(v.get_ref())
                        .filter(|i| (0..4096).contains(i))
                        .map(|i| i as usize)
                })
                .collect();
            match ids {
                Some(mut l) if !l.is_empty() => {
                    l.sort_unstable();
                    l.dedup();
                    l
                }
                _ => {
                    return bad(
                        sink,
                        "every element must be a core id from 0 to 4095".into(),
                    )
                }
            }
        }
        Some(_) => return bad(sink, "expected a core list".into()),
        None => vec![cores.first().copied().unwrap_or(0)],
    };
    if pin {
        let missing: Vec<usize> = list
            .iter()
            .copied()
            .filter(|c| !cores.contains(c))
            .collect();
        if !missing.is_empty() {
            sink.error(
                span,
                &t.path,
                Some("lcores"),
                format!(
                    "lcore(s) {missing:?} are not on this machine, which has {} core(s) available to this process: {cores:?}",
                    cores.len()
                ),
                Some(format!(
                    "cores from {cores:?}; or set `pin = false` to run the lcores as unpinned threads (they then share the cores)"
                )),
            );
        }
    }
    list
}
