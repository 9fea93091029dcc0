//! Replicated stages: one logical stage on several lcores (`lcores = "1-4"` on
//! a stage, DPDK list syntax), each replica on its own queue of every port the
//! stage touches (replica `k` uses `port:k`).
//!
//! The plan expands a replicated stage `gen` into plain stage instances
//! `gen[0]`, `gen[1]`, ... before anything else is checked, so the runtime
//! builds and polls each like any stage. What a replica changes is decided
//! by each kind (its `StageConfig::replicate` says whether it
//! can split, `split` what replica `k` of `n` changes: a generator replica
//! sends its own stream id, its own slice of the flows and its share of the
//! rate and count); everything else is the stage's configuration.
//! The report adds the replicas' counters up under the stage's name and keeps
//! each replica's beside them.

use super::diag::Sink;
use super::table::Table;
use super::Pipeline;

pub use crate::runtime::build::Replica;

/// Why a stage cannot be replicated over `n` lcores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The kind never splits: "a KIND stage cannot be replicated: {why}".
    Kind(&'static str),
    /// This stage cannot split `n` ways: its own message and help.
    Says {
        /// What is wrong.
        message: String,
        /// What would be valid.
        help: String,
    },
}

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
        match s.kind.config().replicate(n) {
            Ok(()) => {}
            Err(Refusal::Kind(why)) => {
                sink.error(
                    s.lcores_span.clone(),
                    &section,
                    Some("lcores"),
                    format!("a {} stage cannot be replicated: {why}", s.kind.name()),
                    Some("`lcore = N`".into()),
                );
                ok = false;
            }
            Err(Refusal::Says { message, help }) => {
                sink.error(
                    s.lcores_span.clone(),
                    &section,
                    Some("lcores"),
                    message,
                    Some(help),
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
            if let Some(why) = port.kind.config().cannot_split() {
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
                        port.kind.config().queues_key(dir)
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
            r.kind.config_mut().split(k, n);
            out.push(r);
        }
    }
    p.stages = out;
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn core_lists_keep_repeats() {
        assert_eq!(core_list("1-3").unwrap(), vec![1, 2, 3]);
        assert_eq!(core_list("0,2-3").unwrap(), vec![0, 2, 3]);
        assert_eq!(core_list("1-2,2").unwrap(), vec![1, 2, 2]);
        assert!(core_list("2-1").is_err());
        assert!(core_list("x").is_err());
    }
}
