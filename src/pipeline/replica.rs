//! Replicated stages: one logical stage on several lcores (`lcores = "1-4"` on
//! a stage, DPDK list syntax), each replica on its own queue of every port the
//! stage touches (replica `k` uses `port:k`).
//!
//! The plan expands a replicated stage `gen` into plain stage instances
//! `gen[0]`, `gen[1]`, ... before anything else is checked, so the runtime
//! builds and polls each like any stage. What a replica changes is decided
//! here, as a plain value: a generator replica sends its own stream id (the
//! stage's `stream` plus `k`), its own slice of the flows and its share of
//! the rate and count; everything else is the stage's configuration.
//! The report adds the replicas' counters up under the stage's name and keeps
//! each replica's beside them.

use super::diag::Sink;
use super::schema::{PortKind, StageKind};
use super::table::Table;
use super::Pipeline;
use crate::traffic::template::FrameSpec;

pub use crate::runtime::build::Replica;

/// The name of replica `k` of stage `name`.
pub fn instance_name(name: &str, k: usize) -> String {
    format!("{name}[{k}]")
}

/// Parses a core list keeping every entry, so a core named twice is seen.
fn core_list(text: &str) -> Result<Vec<usize>, String> {
    let bad = || format!("`{text}` is not a core list like \"1-4\" or \"0,2-3\"");
    let mut out = Vec::new();
    for part in text.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let lo: usize = lo.trim().parse().map_err(|_| bad())?;
        let hi: usize = hi.trim().parse().map_err(|_| bad())?;
        if lo > hi || hi > 4095 {
            return Err(bad());
        }
        out.extend(lo..=hi);
    }
    Ok(out)
}

/// Reads a stage's `lcores` key: the replicas' cores, in order. Empty when the
/// key is absent. A core named twice, a core outside the pipeline's lcores,
/// or `lcores` beside `lcore` is an error naming the key.
pub(crate) fn parse_stage_lcores(
    sink: &mut Sink<'_>,
    t: &mut Table<'_, '_>,
    pipeline_lcores: &[usize],
) -> Vec<usize> {
    if !t.has("lcores") {
        return Vec::new();
    }
    t.mark_used("lcores");
    let span = t.span_of("lcores");
    let path = t.path.clone();
    let list = match t.raw("lcores") {
        Some(toml::de::DeValue::String(s)) => core_list(s),
        Some(toml::de::DeValue::Array(a)) => a
            .iter()
            .map(|v| {
                super::table::as_int(v.get_ref())
                    .filter(|i| (0..4096).contains(i))
                    .map(|i| i as usize)
                    .ok_or_else(|| "every element must be a core id from 0 to 4095".to_string())
            })
            .collect(),
        _ => Err("expected a core list like \"1-4\" or an array of core ids".into()),
    };
    let help = Some(format!(
        "distinct cores from the pipeline's lcores {pipeline_lcores:?}, like \"1-2\""
    ));
    let list = match list {
        Ok(l) if !l.is_empty() => l,
        Ok(_) => {
            sink.error(span, &path, Some("lcores"), "the list is empty", help);
            return Vec::new();
        }
        Err(e) => {
            sink.error(span, &path, Some("lcores"), e, help);
            return Vec::new();
        }
    };
    if t.has("lcore") {
        sink.error(
            span.clone(),
            &path,
            Some("lcores"),
            "`lcores` and `lcore` are both set; a stage runs on one lcore or on replicas",
            Some("`lcore = N` for one lcore, or `lcores = \"A-B\"` for replicas".into()),
        );
    }
    let mut seen = Vec::new();
    for &c in &list {
        if seen.contains(&c) {
            sink.error(
                span.clone(),
                &path,
                Some("lcores"),
                format!("lcore {c} is named twice: replicas of one stage overlap"),
                help.clone(),
            );
            return Vec::new();
        }
        seen.push(c);
    }
    let outside: Vec<usize> = list
        .iter()
        .copied()
        .filter(|c| !pipeline_lcores.contains(c))
        .collect();
    if !outside.is_empty() {
        sink.error(
            span,
            &path,
            Some("lcores"),
            format!("lcore(s) {outside:?} are not among the pipeline's lcores"),
            help,
        );
    }
    list
}

/// Why a port cannot give each replica its own queue, if it cannot.
fn cannot_split(kind: &PortKind) -> Option<&'static str> {
    match kind {
        PortKind::Mem(_) | PortKind::Udp(_) => None,
        #[cfg(feature = "dpdk")]
        PortKind::Dpdk(_) => None,
        PortKind::Pcap(_) => Some("a pcap file is one ordered stream of packets"),
        #[cfg(feature = "ibverbs")]
        PortKind::Ibverbs(_) => Some("ibverbs ports open one queue pair"),
    }
}

/// The key that sets a port's queues in a direction, for messages.
fn queues_key(kind: &PortKind, dir: &str) -> String {
    match kind {
        PortKind::Mem(_) | PortKind::Udp(_) => "queues".into(),
        _ => format!("{dir}_queues"),
    }
}

/// Replica `k` of `n` of a generator's flows: the largest of the four flow
/// ranges is cut into `n` contiguous slices (the last takes the remainder).
/// With fewer values than replicas in every range, replicas share the flows.
pub fn flow_slice(f: &FrameSpec, k: usize, n: usize) -> FrameSpec {
    let mut f = f.clone();
    let n32 = n as u32;
    let counts = [
        f.src_port.count,
        f.dst_port.count,
        f.src_ip.count,
        f.dst_ip.count,
    ];
    let (which, &most) = counts
        .iter()
        .enumerate()
        .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))
        .unwrap_or((0, &1));
    if most < n32 {
        return f;
    }
    let each = most / n32;
    let first = each * k as u32;
    let count = if k + 1 == n { most - first } else { each };
    match which {
        0 => {
            f.src_port.first += first as u16;
            f.src_port.count = count;
        }
        1 => {
            f.dst_port.first += first as u16;
            f.dst_port.count = count;
        }
        2 => f.src_ip = f.src_ip.slice(first, count),
        _ => f.dst_ip = f.dst_ip.slice(first, count),
    }
    f
}

/// Replaces each replicated stage by its instances, after checking that every
/// port it touches can give each replica a queue of its own.
pub(crate) fn expand(p: &mut Pipeline, sink: &mut Sink<'_>) {
    let mut out = Vec::with_capacity(p.stages.len());
    for s in std::mem::take(&mut p.stages) {
        if s.replicas.is_empty() {
            out.push(s);
            continue;
        }
        let n = s.replicas.len();
        let section = format!("stage.{}", s.name);
        let mut ok = true;
        let why_kind = match &s.kind {
            StageKind::Generator(_)
            | StageKind::Analyzer(_)
            | StageKind::Forward(_)
            | StageKind::Sink(_)
            | StageKind::Source(_) => None,
            // Its replicas are the members of a receive group.
            StageKind::SpeadRecv(_) => None,
            // Replica k simulates antennas k, k + n, ... (F-engines on
            // separate hosts, each reaching its own queue).
            StageKind::SpeadSend(c) => match &c.source {
                crate::spead::stage::SendSource::Fsim(f) if f.n_ants < n => {
                    sink.error(
                        s.lcores_span.clone(),
                        &section,
                        Some("lcores"),
                        format!(
                            "{n} replicas of the F-engine simulator need at least {n} antennas; it has {}",
                            f.n_ants
                        ),
                        Some(format!("at most {} lcores, or more `n_ants`", f.n_ants)),
                    );
                    ok = false;
                    None
                }
                crate::spead::stage::SendSource::Fsim(_) => None,
                crate::spead::stage::SendSource::Heaps { .. } => {
                    Some("generic heaps are one ordered stream (source = \"fsim\" splits its antennas over replicas)")
                }
            },
            StageKind::ChunkSink(_) => Some("a chunk sink consumes one receiver's chunks"),
            StageKind::Reliable(_) => Some("a reliable channel is one ordered sequence space"),
            StageKind::Impair(_) => Some("an impairment stage keeps one ordered schedule of delays"),
        };
        if let Some(why) = why_kind {
            sink.error(
                s.lcores_span.clone(),
                &section,
                Some("lcores"),
                format!("a {} stage cannot be replicated: {why}", s.kind.name()),
                Some("`lcore = N`".into()),
            );
            ok = false;
        }
        if let StageKind::Generator(g) = &s.kind {
            if usize::from(g.stream) + n > 256 {
                sink.error(
                    s.lcores_span.clone(),
                    &section,
                    Some("lcores"),
                    format!(
                        "{n} replicas send streams {}..{}, beyond the last stream id 255",
                        g.stream,
                        usize::from(g.stream) + n
                    ),
                    Some("a smaller `stream` or fewer lcores".into()),
                );
                ok = false;
            }
        }
        for (dir, target) in [("rx", &s.rx), ("tx", &s.tx)] {
            let Some(target) = target else { continue };
            let Some(port) = p.ports.iter().find(|x| &x.name == target) else {
                let what = if p.rings.iter().any(|r| &r.name == target) {
                    format!(
                        "its {dir} `{target}` is a ring, which joins one producer to one consumer"
                    )
                } else if target.contains(':') {
                    format!("its {dir} `{target}` names one queue; replica k takes queue k itself")
                } else {
                    format!("its {dir} `{target}` names no port")
                };
                sink.error(
                    s.lcores_span.clone(),
                    &section,
                    Some("lcores"),
                    format!("a replicated stage needs ports with a queue per replica: {what}"),
                    Some(format!(
                        "{dir} = \"PORT\" (a mem, udp or dpdk port with enough queues)"
                    )),
                );
                ok = false;
                continue;
            };
            if let Some(why) = cannot_split(&port.kind) {
                sink.error(
                    s.lcores_span.clone(),
                    &section,
                    Some("lcores"),
                    format!(
                        "port `{target}` ({}) cannot give each of {n} replicas a queue: {why}",
                        port.kind.name()
                    ),
                    Some("a mem, udp or dpdk port, or `lcore = N`".into()),
                );
                ok = false;
                continue;
            }
            let have = usize::from(port.kind.queues(dir));
            if have < n {
                sink.error(
                    s.lcores_span.clone(),
                    &section,
                    Some("lcores"),
                    format!(
                        "{n} replicas need {n} {dir} queues of port `{target}`, which has {have}"
                    ),
                    Some(format!(
                        "`{} = {n}` in [port.{target}], or at most {have} lcores",
                        queues_key(&port.kind, dir)
                    )),
                );
                ok = false;
            }
        }
        if !ok {
            continue;
        }
        for (k, &core) in s.replicas.iter().enumerate() {
            let mut r = s.clone();
            r.name = instance_name(&s.name, k);
            r.lcore = core;
            r.replicas = Vec::new();
            r.replica = Some(Replica {
                of: s.name.clone(),
                index: k,
                count: n,
            });
            r.rx = s.rx.as_ref().map(|x| format!("{x}:{k}"));
            r.tx = s.tx.as_ref().map(|x| format!("{x}:{k}"));
            let split = |total: u64| total / n as u64 + u64::from((k as u64) < total % n as u64);
            match &mut r.kind {
                StageKind::Generator(g) => {
                    g.stream += k as u16;
                    g.share /= n as f64;
                    g.count = g.count.map(split);
                    g.frames = flow_slice(&g.frames, k, n);
                }
                StageKind::Source(c) => c.count = c.count.map(split),
                StageKind::SpeadSend(c) => {
                    c.antennas = (k, n);
                    c.rate_bps = c.rate_bps.map(|b| b / n as f64);
                }
                _ => {}
            }
            out.push(r);
        }
    }
    p.stages = out;
}

/// A replica's share of a rate the plan resolved for the whole stage.
pub(crate) fn rate_share(replica: &Option<Replica>, pps: Option<f64>) -> Option<f64> {
    match replica {
        Some(r) => pps.map(|x| x / r.count as f64),
        None => pps,
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::traffic::template::PortRange;

    #[test]
    fn core_lists_keep_repeats() {
        assert_eq!(core_list("1-3").unwrap(), vec![1, 2, 3]);
        assert_eq!(core_list("0,2-3").unwrap(), vec![0, 2, 3]);
        assert_eq!(core_list("1-2,2").unwrap(), vec![1, 2, 2]);
        assert!(core_list("2-1").is_err());
        assert!(core_list("x").is_err());
    }

    #[test]
    fn flow_slices_partition_the_largest_range() {
        let f = FrameSpec {
            src_port: PortRange {
                first: 1000,
                count: 10,
            },
            ..FrameSpec::default()
        };
        let slices: Vec<FrameSpec> = (0..3).map(|k| flow_slice(&f, k, 3)).collect();
        assert_eq!(slices.iter().map(|s| s.flows()).sum::<u64>(), f.flows());
        assert_eq!(slices[0].src_port.first, 1000);
        assert_eq!(slices[1].src_port.first, 1003);
        assert_eq!(slices[2].src_port.first, 1006);
        assert_eq!(slices[2].src_port.count, 4);
        // One flow: every replica sends it.
        let one = FrameSpec::default();
        assert_eq!(flow_slice(&one, 1, 2), one);
    }
}
