//! The plan: which lcore polls which stages, which stage feeds which ring and
//! port side. Planning checks the graph: every name resolves, every ring has
//! exactly one producer and one consumer, no port side is used twice, rates
//! resolve to packets per second, and no cycle of rings and wires exists.

use std::collections::BTreeMap;
use std::fmt;

use super::diag::{Diagnostics, Sink};
use super::schema::{CheckCtx, TrialLoad};
use super::Pipeline;
use crate::units::si;

/// A validated pipeline and its placement: what the runtime builds.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The pipeline.
    pub pipeline: Pipeline,
    /// Lcores that have stages, with the stages they poll in order.
    pub lcores: Vec<PlannedLcore>,
    /// Rings with their two ends.
    pub rings: Vec<RingUse>,
    /// Ports with the stages that use each side.
    pub ports: Vec<PortUse>,
}

/// One lcore of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedLcore {
    /// Its core.
    pub core: usize,
    /// Its stages, in polling order.
    pub stages: Vec<String>,
}

/// A ring of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingUse {
    /// Its name.
    pub name: String,
    /// Slots.
    pub size: usize,
    /// The stage that feeds it.
    pub producer: String,
    /// The stage that drains it.
    pub consumer: String,
}

/// A port of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortUse {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: &'static str,
    /// The stage receiving from it.
    pub rx_by: Vec<(u16, String)>,
    /// The stage transmitting to it.
    pub tx_by: Vec<(u16, String)>,
}

pub(crate) fn plan(mut p: Pipeline, src: &str, _cores: &[usize]) -> Result<Plan, Diagnostics> {
    let file = p.file.clone();
    let mut sink = Sink::new(&file, src);
    super::replica::expand(&mut p, &mut sink);
    let ends = resolve_ends(&p, &mut sink);
    let rings = pair_rings(&p, &ends, &mut sink);
    check_kinds(&mut p, &mut sink);
    check_cycles(&p, &rings, &ends.ports, &mut sink);
    if !sink.diags.is_empty() {
        return Err(Diagnostics(sink.diags));
    }
    let mut lcores: Vec<PlannedLcore> = Vec::new();
    for &core in &p.lcores {
        let stages: Vec<String> = p
            .stages
            .iter()
            .filter(|s| s.lcore == core)
            .map(|s| s.name.clone())
            .collect();
        if !stages.is_empty() {
            lcores.push(PlannedLcore { core, stages });
        }
    }
    Ok(Plan {
        pipeline: p,
        lcores,
        rings,
        ports: ends.ports,
    })
}

/// What every stage's `rx` and `tx` resolved to: port sides with their
/// users, and each ring's producers and consumers (by ring index).
struct Ends {
    ports: Vec<PortUse>,
    producers: Vec<Vec<String>>,
    consumers: Vec<Vec<String>>,
}

/// Resolves every `rx` and `tx` to a port queue or a ring; a port side
/// belongs to one stage.
fn resolve_ends(p: &Pipeline, sink: &mut Sink<'_>) -> Ends {
    let port_idx: BTreeMap<&str, usize> = p
        .ports
        .iter()
        .enumerate()
        .map(|(i, x)| (x.name.as_str(), i))
        .collect();
    let ring_idx: BTreeMap<&str, usize> = p
        .rings
        .iter()
        .enumerate()
        .map(|(i, x)| (x.name.as_str(), i))
        .collect();
    for r in &p.rings {
        if port_idx.contains_key(r.name.as_str()) {
            sink.error(
                r.span.clone(),
                &format!("ring.{}", r.name),
                None,
                format!(
                    "`{}` names both a port and a ring; a stage's rx/tx could mean either",
                    r.name
                ),
                Some("distinct names for ports and rings".into()),
            );
        }
    }
    let mut e = Ends {
        ports: p
            .ports
            .iter()
            .map(|x| PortUse {
                name: x.name.clone(),
                kind: x.kind.name(),
                rx_by: Vec::new(),
                tx_by: Vec::new(),
            })
            .collect(),
        producers: vec![Vec::new(); p.rings.len()],
        consumers: vec![Vec::new(); p.rings.len()],
    };
    for s in &p.stages {
        let section = format!("stage.{}", s.name);
        for (dir, target, span) in [("rx", &s.rx, &s.rx_span), ("tx", &s.tx, &s.tx_span)] {
            let Some(target) = target else { continue };
            // `nic:1` names queue 1 of port `nic`; `nic` is queue 0.
            let (base, queue) = match target.rsplit_once(':') {
                Some((b, q)) if port_idx.contains_key(b) => match q.parse::<u16>() {
                    Ok(q) => (b, q),
                    Err(_) => {
                        sink.error(
                            span.clone(),
                            &section,
                            Some(dir),
                            format!("`{q}` is not a queue number"),
                            Some(format!("`{b}` or `{b}:N` with N a queue of the port")),
                        );
                        continue;
                    }
                },
                _ => (target.as_str(), 0),
            };
            if let Some(&i) = port_idx.get(base) {
                let kind = &p.ports[i].kind;
                let users = if dir == "rx" {
                    &mut e.ports[i].rx_by
                } else {
                    &mut e.ports[i].tx_by
                };
                if let Err((message, help)) = take_side(kind, dir, target, queue, users) {
                    sink.error(span.clone(), &section, Some(dir), message, help);
                } else {
                    users.push((queue, s.name.clone()));
                }
            } else if let Some(&i) = ring_idx.get(target.as_str()) {
                if dir == "rx" {
                    e.consumers[i].push(s.name.clone())
                } else {
                    e.producers[i].push(s.name.clone())
                }
            } else {
                sink.error(
                    span.clone(),
                    &section,
                    Some(dir),
                    format!("no port or ring is named `{target}`"),
                    Some(known(p)),
                );
            }
        }
    }
    e
}

/// The ports and rings a stage could name, for "valid:".
fn known(p: &Pipeline) -> String {
    let mut names: Vec<String> = p
        .ports
        .iter()
        .map(|x| format!("port `{}`", x.name))
        .collect();
    names.extend(p.rings.iter().map(|x| format!("ring `{}`", x.name)));
    if names.is_empty() {
        "none declared: add a [port.NAME] or [ring.NAME]".to_string()
    } else {
        names.join(", ")
    }
}

/// Whether a stage may take queue `queue` of a port's `dir` side, which
/// `users` already use: the message and help if not.
fn take_side(
    kind: &super::PortKind,
    dir: &str,
    target: &str,
    queue: u16,
    users: &[(u16, String)],
) -> Result<(), (String, Option<String>)> {
    let base = target.split(':').next().unwrap_or(target);
    let queues = kind.queues(dir);
    let missing = if dir == "rx" {
        kind.rx_missing()
    } else {
        kind.tx_missing()
    };
    if queue >= queues {
        Err((
            format!("port `{base}` has {queues} {dir} queue(s); there is no queue {queue}"),
            Some(format!(
                "queues 0..{queues} (set `{dir}_queues` on the port for more)"
            )),
        ))
    } else if let Some(why) = missing {
        Err((format!("port `{target}` has no {dir} side: {why}"), None))
    } else if let Some((_, other)) = users.iter().find(|u| u.0 == queue) {
        Err((format!("the {dir} side of port `{target}` is already used by stage `{other}`; a port side belongs to one stage"), Some("another port, another queue (`port:N`), or a ring between the stages".into())))
    } else {
        Ok(())
    }
}

/// Each ring has one producer and one consumer.
fn pair_rings(p: &Pipeline, ends: &Ends, sink: &mut Sink<'_>) -> Vec<RingUse> {
    let mut rings = Vec::new();
    for (i, r) in p.rings.iter().enumerate() {
        let section = format!("ring.{}", r.name);
        let mut fail = |message: String, help: String| {
            sink.error(r.span.clone(), &section, None, message, Some(help));
        };
        match (ends.producers[i].as_slice(), ends.consumers[i].as_slice()) {
            ([prod], [cons]) => rings.push(RingUse {
                name: r.name.clone(),
                size: r.size,
                producer: prod.clone(),
                consumer: cons.clone(),
            }),
            (prods, conss) => {
                if prods.is_empty() {
                    fail(
                        format!("ring `{}` is dangling: no stage transmits to it", r.name),
                        format!("one stage with tx = \"{}\"", r.name),
                    );
                }
                if conss.is_empty() {
                    fail(
                        format!("ring `{}` is dangling: no stage receives from it", r.name),
                        format!("one stage with rx = \"{}\"", r.name),
                    );
                }
                if prods.len() > 1 {
                    fail(
                        format!(
                            "ring `{}` is fed by several stages ({}); a ring has one producer",
                            r.name,
                            prods.join(", ")
                        ),
                        "one ring per producing stage".into(),
                    );
                }
                if conss.len() > 1 {
                    fail(
                        format!(
                            "ring `{}` is drained by several stages ({}); a ring has one consumer",
                            r.name,
                            conss.join(", ")
                        ),
                        "one ring per consuming stage".into(),
                    );
                }
            }
        }
    }
    rings
}

/// Each kind checks its stage against the pipeline (and resolves what
/// depends on it), in file order.
fn check_kinds(p: &mut Pipeline, sink: &mut Sink<'_>) {
    let room = (p.pool.buf_size - u32::from(p.pool.headroom)) as usize;
    for i in 0..p.stages.len() {
        let mut kind = p.stages[i].kind.clone();
        kind.config_mut().check(&mut CheckCtx {
            stage: &p.stages[i],
            stages: &p.stages,
            ports: &p.ports,
            room,
            sink,
        });
        p.stages[i].kind = kind;
    }
}

/// No cycle of stages through rings and wires, but between two stages
/// whose links run both ways on purpose.
fn check_cycles(p: &Pipeline, rings: &[RingUse], ports: &[PortUse], sink: &mut Sink<'_>) {
    let exempt: Vec<bool> = p
        .stages
        .iter()
        .map(|s| s.kind.config().feeds_back())
        .collect();
    let stage_idx: BTreeMap<&str, usize> = p
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); p.stages.len()];
    let mut link = |from: &str, to: &str| {
        let (a, b) = (stage_idx[from], stage_idx[to]);
        if !(exempt[a] && exempt[b]) {
            next[a].push(b);
        }
    };
    for r in rings {
        link(&r.producer, &r.consumer);
    }
    for (i, u) in ports.iter().enumerate() {
        if let (true, Some((_, tx)), Some((_, rx))) = (
            p.ports[i].kind.config().is_wire(),
            u.tx_by.first(),
            u.rx_by.first(),
        ) {
            link(tx, rx);
        }
    }
    if let Some(cycle) = find_cycle(&next) {
        let names: Vec<&str> = cycle.iter().map(|&i| p.stages[i].name.as_str()).collect();
        let first = &p.stages[cycle[0]];
        sink.error(
            first.span.clone(),
            &format!("stage.{}", first.name),
            None,
            format!(
                "stages {} form a cycle through rings and wires: packets would circulate forever",
                names.join(" -> ")
            ),
            Some("a pipeline whose links run from sources to sinks".into()),
        );
    }
}

fn find_cycle(next: &[Vec<usize>]) -> Option<Vec<usize>> {
    // 0 = unseen, 1 = on the current path, 2 = done.
    fn visit(
        n: usize,
        next: &[Vec<usize>],
        state: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        state[n] = 1;
        path.push(n);
        for &m in &next[n] {
            if state[m] == 1 {
                let start = path.iter().position(|&x| x == m).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(m);
                return Some(cycle);
            }
            if state[m] == 0 {
                if let Some(c) = visit(m, next, state, path) {
                    return Some(c);
                }
            }
        }
        path.pop();
        state[n] = 2;
        None
    }
    let mut state = vec![0u8; next.len()];
    for n in 0..next.len() {
        if state[n] == 0 {
            if let Some(c) = visit(n, next, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.pipeline;
        writeln!(f, "pipeline `{}` ({})", p.name, p.file.display())?;
        let mem = match p.pool.hugepages {
            crate::buf::HugepageMode::Off => "anonymous memory",
            crate::buf::HugepageMode::Auto => "hugepages if available",
            crate::buf::HugepageMode::Required => "hugepages",
        };
        writeln!(
            f,
            "  pool: {} buffers x {} bytes (headroom {}), {mem}",
            p.pool.count, p.pool.buf_size, p.pool.headroom
        )?;
        writeln!(
            f,
            "  lcores ({}):",
            if p.pin { "pinned" } else { "unpinned" }
        )?;
        for l in &self.lcores {
            writeln!(f, "    lcore {}:", l.core)?;
            for name in &l.stages {
                let s = p
                    .stages
                    .iter()
                    .find(|s| &s.name == name)
                    .ok_or(fmt::Error)?;
                let rx =
                    s.rx.as_deref()
                        .map(|r| format!(" rx={r}"))
                        .unwrap_or_default();
                let tx =
                    s.tx.as_deref()
                        .map(|t| format!(" tx={t}"))
                        .unwrap_or_default();
                let replica = s.replica.as_ref().map_or(String::new(), |r| {
                    format!(", replica {} of {} of `{}`", r.index + 1, r.count, r.of)
                });
                writeln!(f, "      {name}:{rx}{tx}  ({}{replica})", s.kind.describe())?;
            }
        }
        writeln!(f, "  ports:")?;
        if self.ports.is_empty() {
            writeln!(f, "    (none)")?;
        }
        for (u, spec) in self.ports.iter().zip(&p.ports) {
            let users = |v: &[(u16, String)]| {
                if v.is_empty() {
                    return "-".to_string();
                }
                v.iter()
                    .map(|(q, s)| {
                        if *q == 0 && v.len() == 1 {
                            s.clone()
                        } else {
                            format!("{s} (queue {q})")
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let (tx, rx) = (users(&u.tx_by), users(&u.rx_by));
            let owns = spec.neigh.as_ref().map_or(String::new(), |n| {
                let a: Vec<String> = n.addrs.iter().map(ToString::to_string).collect();
                let udp = n.udp.map_or(String::new(), |u| {
                    format!(
                        "; carries UDP datagrams {} <-> {} (peer resolved within {:?})",
                        u.bind, u.connect, u.resolve_timeout
                    )
                });
                format!("; owns {} (answers ARP/NDP){udp}", a.join(", "))
            });
            writeln!(
                f,
                "    {} ({}): {}{owns}; tx from {tx}, rx to {rx}",
                u.name,
                u.kind,
                spec.kind.describe()
            )?;
        }
        writeln!(f, "  rings:")?;
        if self.rings.is_empty() {
            writeln!(f, "    (none)")?;
        }
        for r in &self.rings {
            writeln!(
                f,
                "    {} ({} slots): {} -> {}",
                r.name, r.size, r.producer, r.consumer
            )?;
        }
        if !p.hosts.is_empty() {
            writeln!(
                f,
                "  hosts (under mpirun, each rank builds only its host's part):"
            )?;
        }
        for h in &p.hosts {
            let on = |host: &Option<String>| host.as_deref() == Some(h.name.as_str());
            let list = |v: Vec<&str>| {
                if v.is_empty() {
                    "-".to_string()
                } else {
                    v.join(", ")
                }
            };
            let stages = list(
                p.stages
                    .iter()
                    .filter(|s| on(&s.host))
                    .map(|s| s.name.as_str())
                    .collect(),
            );
            let ports = list(
                p.ports
                    .iter()
                    .filter(|x| on(&x.host))
                    .map(|x| x.name.as_str())
                    .collect(),
            );
            let bound = match (h.rank, &h.hostname) {
                (Some(r), _) => format!("rank {r}"),
                // Bound after MPI init, to the lowest rank on that machine
                // no other host holds.
                (None, Some(n)) => format!("hostname {n} (a rank mpirun places there)"),
                (None, None) => "unbound".into(),
            };
            let netns = h
                .netns
                .as_deref()
                .map(|n| format!(", netns {n}"))
                .unwrap_or_default();
            let clock = match h.clock {
                super::HostClock::Tai => "tai",
                super::HostClock::Monotonic => "monotonic",
            };
            let eal = if h.eal.is_empty() {
                String::new()
            } else {
                format!(", eal += {}", h.eal.join(" "))
            };
            writeln!(
                f,
                "    {}: {bound}{netns}, clock {clock}{eal}; stages {stages}; ports {ports}",
                h.name
            )?;
        }
        Ok(())
    }
}

impl Plan {
    /// Turns a trial's aggregate rate into packets/s using the generators'
    /// frame sizes and their ports' line rates, and refuses a rate above the
    /// aggregate line rate.
    pub fn trial_rate_pps(&self, rate: crate::units::Rate) -> Result<f64, String> {
        let p = &self.pipeline;
        // Replicas share their port's line: each port's line counts once.
        let mut lines_seen = std::collections::BTreeSet::new();
        let gens: Vec<(TrialLoad, Option<f64>)> = p
            .stages
            .iter()
            .filter_map(|s| {
                let load = s.kind.config().trial_load()?;
                let port =
                    s.tx.as_deref()
                        .map(|t| t.split(':').next().unwrap_or(t))
                        .and_then(|t| p.ports.iter().find(|x| x.name == t));
                let line = port.and_then(|x| x.kind.line_rate_bps());
                let first = port.is_some_and(|x| lines_seen.insert(x.name.clone()));
                Some((load, if first { line } else { line.map(|_| 0.0) }))
            })
            .collect();
        if gens.is_empty() {
            return Err("the pipeline has no generator stage".into());
        }
        let share: f64 = gens.iter().map(|g| g.0.share).sum();
        let avg = gens.iter().map(|g| g.0.avg_frame * g.0.share).sum::<f64>() / share;
        let lines: Option<f64> = gens.iter().map(|g| g.1).sum();
        let pps = rate.to_pps(avg, lines).map_err(|e| e.to_string())?;
        if !(pps > 0.0 && pps.is_finite()) {
            return Err(format!("the rate {rate} is not above zero"));
        }
        if let Some(line) = lines {
            let max = line / ((avg + 20.0) * 8.0);
            if pps > max * 1.000_001 {
                return Err(format!(
                    "{}pps exceeds the generators' line rate ({}pps at {avg:.0}-byte frames)",
                    si(pps),
                    si(max)
                ));
            }
        }
        Ok(pps)
    }

    /// The pipeline as a Graphviz graph (`linerate check --dot`).
    pub fn dot(&self) -> String {
        let mut out = format!("digraph \"{}\" {{\n  rankdir=LR;\n", self.pipeline.name);
        for l in &self.lcores {
            out += &format!(
                "  subgraph cluster_lcore{0} {{ label=\"lcore {0}\";",
                l.core
            );
            for s in &l.stages {
                out += &format!(" \"{s}\";");
            }
            out += " }\n";
        }
        for u in &self.ports {
            out += &format!(
                "  \"port:{0}\" [shape=box, label=\"{0} ({1})\"];\n",
                u.name, u.kind
            );
            for (_, t) in &u.tx_by {
                out += &format!("  \"{t}\" -> \"port:{}\";\n", u.name);
            }
            for (_, r) in &u.rx_by {
                out += &format!("  \"port:{}\" -> \"{r}\";\n", u.name);
            }
        }
        for r in &self.rings {
            out += &format!(
                "  \"{}\" -> \"{}\" [label=\"{} ({})\"];\n",
                r.producer, r.consumer, r.name, r.size
            );
        }
        for st in &self.pipeline.stages {
            if let Some(from) = st.kind.config().takes_from() {
                out += &format!(
                    "  \"{}\" -> \"{}\" [label=\"chunks\", style=bold];\n",
                    from, st.name
                );
            }
        }
        out + "}\n"
    }
}
