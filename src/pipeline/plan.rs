//! The plan: which lcore polls which stages, which stage feeds which ring and
//! port side. Planning checks the graph: every name resolves, every ring has
//! exactly one producer and one consumer, no port side is used twice, rates
//! resolve to packets per second, and no cycle of rings and wires exists.

use std::collections::BTreeMap;
use std::fmt;

use super::diag::{Diagnostics, Sink};
use super::schema::{PortKind, StageKind};
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
    let mut ports: Vec<PortUse> = p
        .ports
        .iter()
        .map(|x| PortUse {
            name: x.name.clone(),
            kind: x.kind.name(),
            rx_by: Vec::new(),
            tx_by: Vec::new(),
        })
        .collect();
    let mut producers: Vec<Vec<String>> = vec![Vec::new(); p.rings.len()];
    let mut consumers: Vec<Vec<String>> = vec![Vec::new(); p.rings.len()];
    let known = || {
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
                let queues = p.ports[i].kind.queues(dir);
                let (missing, users) = if dir == "rx" {
                    (p.ports[i].kind.rx_missing(), &mut ports[i].rx_by)
                } else {
                    (p.ports[i].kind.tx_missing(), &mut ports[i].tx_by)
                };
                if queue >= queues {
                    sink.error(
                        span.clone(),
                        &section,
                        Some(dir),
                        format!(
                            "port `{base}` has {queues} {dir} queue(s); there is no queue {queue}"
                        ),
                        Some(format!(
                            "queues 0..{queues} (set `{dir}_queues` on the port for more)"
                        )),
                    );
                } else if let Some(why) = missing {
                    sink.error(
                        span.clone(),
                        &section,
                        Some(dir),
                        format!("port `{target}` has no {dir} side: {why}"),
                        None,
                    );
                } else if let Some((_, other)) = users.iter().find(|u| u.0 == queue) {
                    sink.error(span.clone(), &section, Some(dir), format!("the {dir} side of port `{target}` is already used by stage `{other}`; a port side belongs to one stage"), Some("another port, another queue (`port:N`), or a ring between the stages".into()));
                } else {
                    users.push((queue, s.name.clone()));
                }
            } else if let Some(&i) = ring_idx.get(target.as_str()) {
                if dir == "rx" {
                    consumers[i].push(s.name.clone())
                } else {
                    producers[i].push(s.name.clone())
                }
            } else {
                sink.error(
                    span.clone(),
                    &section,
                    Some(dir),
                    format!("no port or ring is named `{target}`"),
                    Some(known()),
                );
            }
        }
    }
    let mut rings = Vec::new();
    for (i, r) in p.rings.iter().enumerate() {
        let section = format!("ring.{}", r.name);
        match (producers[i].as_slice(), consumers[i].as_slice()) {
            ([prod], [cons]) => rings.push(RingUse {
                name: r.name.clone(),
                size: r.size,
                producer: prod.clone(),
                consumer: cons.clone(),
            }),
            (prods, conss) => {
                if prods.is_empty() {
                    sink.error(
                        r.span.clone(),
                        &section,
                        None,
                        format!("ring `{}` is dangling: no stage transmits to it", r.name),
                        Some(format!("one stage with tx = \"{}\"", r.name)),
                    );
                }
                if conss.is_empty() {
                    sink.error(
                        r.span.clone(),
                        &section,
                        None,
                        format!("ring `{}` is dangling: no stage receives from it", r.name),
                        Some(format!("one stage with rx = \"{}\"", r.name)),
                    );
                }
                if prods.len() > 1 {
                    sink.error(
                        r.span.clone(),
                        &section,
                        None,
                        format!(
                            "ring `{}` is fed by several stages ({}); a ring has one producer",
                            r.name,
                            prods.join(", ")
                        ),
                        Some("one ring per producing stage".into()),
                    );
                }
                if conss.len() > 1 {
                    sink.error(
                        r.span.clone(),
                        &section,
                        None,
                        format!(
                            "ring `{}` is drained by several stages ({}); a ring has one consumer",
                            r.name,
                            conss.join(", ")
                        ),
                        Some("one ring per consuming stage".into()),
                    );
                }
            }
        }
    }
    // Rates and frame sizes, against the tx port and the pool.
    let room = (p.pool.buf_size - u32::from(p.pool.headroom)) as usize;
    let max_streams = p
        .stages
        .iter()
        .filter_map(|s| match &s.kind {
            StageKind::Analyzer(a) => Some(a.streams),
            _ => None,
        })
        .max();
    let mut streams: BTreeMap<u16, String> = BTreeMap::new();
    // Per port: its line rate (for rates in %) and whether it is a dpdk port.
    let port_info: BTreeMap<String, (Option<f64>, bool)> = p
        .ports
        .iter()
        .map(|x| {
            let info = (x.kind.line_rate_bps(), x.kind.name() == "dpdk");
            (x.name.clone(), info)
        })
        .collect();
    // `nic:1` is queue 1 of port `nic`.
    let tx_port = |tx: &Option<String>| {
        tx.as_deref()
            .and_then(|t| port_info.get(t.split(':').next().unwrap_or(t)).copied())
    };
    let tx_line_rate = |tx: &Option<String>| tx_port(tx).and_then(|(line, _)| line);
    let tx_is_dpdk = |tx: &Option<String>| tx_port(tx).is_some_and(|(_, dpdk)| dpdk);
    for s in p.stages.iter_mut() {
        if let StageKind::Generator(g) = &mut s.kind {
            let section = format!("stage.{}", s.name);
            if let Some(other) = streams.insert(g.stream, s.name.clone()) {
                sink.error(s.span.clone(), &section, Some("stream"), format!("stream {} is also sent by generator `{other}`; each generator needs its own stream id", g.stream), Some("distinct `stream` ids, 0..=255".into()));
            }
            if let Some(m) = max_streams {
                if usize::from(g.stream) >= m {
                    sink.error(
                        s.span.clone(),
                        &section,
                        Some("stream"),
                        format!(
                            "stream {} is beyond what the analyzers track (ids below {m})",
                            g.stream
                        ),
                        Some("a smaller `stream`, or a larger `streams` on the analyzer".into()),
                    );
                }
            }
            let line = tx_line_rate(&s.tx);
            if let Some(rate) = g.rate {
                g.rate_pps = resolve_rate(
                    &mut sink,
                    s.span.clone(),
                    &section,
                    rate,
                    g.frames.sizes.average(),
                    line,
                );
                g.rate_pps = super::replica::rate_share(&s.replica, g.rate_pps);
            }
            check_frame_fits(
                &mut sink,
                s.span.clone(),
                &section,
                g.frames.sizes.max(),
                room,
            );
            // A generator on a dpdk port writes each frame into one of the
            // port's mbufs, whose data room is DPDK's default 2048 bytes.
            let frame = g.frames.sizes.max();
            if tx_is_dpdk(&s.tx) && frame - 4 > DPDK_MBUF_DATA_ROOM {
                sink.error(
                    s.span.clone(),
                    &section,
                    Some("frame"),
                    format!(
                        "a {frame}-byte frame does not fit a dpdk port's mbuf ({DPDK_MBUF_DATA_ROOM} bytes of data room): the generator builds single-segment frames"
                    ),
                    Some(format!("frames up to {} bytes on a dpdk port", DPDK_MBUF_DATA_ROOM + 4)),
                );
            }
        }

        if let StageKind::Source(c) = &mut s.kind {
            let section = format!("stage.{}", s.name);
            let line = tx_line_rate(&s.tx);
            if let Some(rate) = c.rate {
                c.rate_pps = resolve_rate(
                    &mut sink,
                    s.span.clone(),
                    &section,
                    rate,
                    c.frame as f64,
                    line,
                );
                c.rate_pps = super::replica::rate_share(&s.replica, c.rate_pps);
            }
            check_frame_fits(&mut sink, s.span.clone(), &section, c.frame, room);
        }
    }
    for s in &p.stages {
        if let StageKind::Reliable(r) = &s.kind {
            let mtu = r.config.data_mtu.max(r.config.priority_mtu);
            if mtu > room {
                sink.error(s.span.clone(), &format!("stage.{}", s.name), Some("data_mtu"), format!("{mtu}-byte datagrams do not fit a pool buffer ({room} bytes after headroom)"), Some("a larger `size` in [pool] or a smaller `data_mtu`".into()));
            }
        }
    }
    // An impair stage forwards packets as they are: both ends must carry the
    // same kind of packet.
    for s in &p.stages {
        if let StageKind::Impair(_) = &s.kind {
            let layer = |end: &Option<String>| -> Option<(String, &str, &str)> {
                let name = end.as_deref()?;
                let base = name.split(':').next().unwrap_or(name);
                let i = *port_idx.get(base)?;
                Some((
                    base.to_string(),
                    p.ports[i].kind.name(),
                    super::schema::carries(&p.ports[i].kind)?,
                ))
            };
            if let (Some((rx, rk, rl)), Some((tx, tk, tl))) = (layer(&s.rx), layer(&s.tx)) {
                if rl != tl {
                    sink.error(
                        s.tx_span.clone(),
                        &format!("stage.{}", s.name),
                        Some("tx"),
                        format!("port `{tx}` ({tk}) carries {tl}, but port `{rx}` ({rk}) delivers {rl}: the impair stage passes packets on as they are, so its ports must carry the same kind of packet"),
                        Some("two udp ports, two frame ports (dpdk, pcap, ibverbs), or a mem port or ring on either side".into()),
                    );
                }
            }
        }
    }
    // SPEAD stages: packets fit a buffer; each chunk sink names one receiver.
    let mut sink_of: BTreeMap<&str, &str> = BTreeMap::new();
    for s in &p.stages {
        let section = format!("stage.{}", s.name);
        match &s.kind {
            StageKind::SpeadSend(c) if c.max_packet() > room => {
                sink.error(
                    s.span.clone(),
                    &section,
                    None,
                    format!(
                        "{}-byte packets do not fit a pool buffer ({room} bytes after headroom)",
                        c.max_packet()
                    ),
                    Some(
                        "a larger `size` in [pool], or a smaller `packet_payload` / `packet_size`"
                            .into(),
                    ),
                );
            }
            StageKind::ChunkSink(c) => {
                // A replicated receiver's replicas are named `from[k]`.
                let recv = p.stages.iter().find(|x| {
                    x.name == c.from || x.replica.as_ref().is_some_and(|r| r.of == c.from)
                });
                match recv.map(|x| &x.kind) {
                    Some(StageKind::SpeadRecv(_)) => {
                        if let Some(other) = sink_of.insert(c.from.as_str(), s.name.as_str()) {
                            sink.error(s.rx_span.clone(), &section, Some("from"), format!("the chunks of `{}` already go to chunk sink `{other}`; a receiver has one sink", c.from), None);
                        }
                    }
                    Some(k) => sink.error(
                        s.rx_span.clone(),
                        &section,
                        Some("from"),
                        format!(
                            "stage `{}` is a {} stage, not a spead_recv stage",
                            c.from,
                            k.name()
                        ),
                        None,
                    ),
                    None => {
                        let mut recvs: Vec<&str> = p
                            .stages
                            .iter()
                            .filter(|x| matches!(x.kind, StageKind::SpeadRecv(_)))
                            .map(|x| {
                                x.replica
                                    .as_ref()
                                    .map_or(x.name.as_str(), |r| r.of.as_str())
                            })
                            .collect();
                        recvs.dedup();
                        sink.error(
                            s.rx_span.clone(),
                            &section,
                            Some("from"),
                            format!("no stage is named `{}`", c.from),
                            Some(if recvs.is_empty() {
                                "the name of a spead_recv stage (none declared: add a [stage.NAME] with kind = \"spead_recv\")".to_string()
                            } else {
                                format!("a spead_recv stage: {}", recvs.join(", "))
                            }),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    // Cycles: stage -> stage through a ring or through a mem wire. Reliable
    // stages talk both ways on purpose: their links are exempt.
    let reliable: Vec<bool> = p
        .stages
        .iter()
        .map(|s| matches!(s.kind, StageKind::Reliable(_)))
        .collect();
    let stage_idx: BTreeMap<&str, usize> = p
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); p.stages.len()];
    for r in &rings {
        let (a, b) = (
            stage_idx[r.producer.as_str()],
            stage_idx[r.consumer.as_str()],
        );
        if !(reliable[a] && reliable[b]) {
            next[a].push(b);
        }
    }
    for (i, u) in ports.iter().enumerate() {
        if let (PortKind::Mem(_), Some((_, tx)), Some((_, rx))) =
            (&p.ports[i].kind, u.tx_by.first(), u.rx_by.first())
        {
            let (a, b) = (stage_idx[tx.as_str()], stage_idx[rx.as_str()]);
            if !(reliable[a] && reliable[b]) {
                next[a].push(b);
            }
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
        ports,
    })
}

/// A stage's rate in packets/s, checked against its port's line rate.
fn resolve_rate(
    sink: &mut Sink<'_>,
    span: std::ops::Range<usize>,
    section: &str,
    rate: crate::units::Rate,
    avg_frame: f64,
    line: Option<f64>,
) -> Option<f64> {
    let pps = match rate.to_pps(avg_frame, line) {
        Ok(pps) if pps > 0.0 && pps.is_finite() => pps,
        Ok(_) => {
            sink.error(
                span,
                section,
                Some("rate"),
                "the rate must be above zero",
                None,
            );
            return None;
        }
        Err(e) => {
            sink.error(span, section, Some("rate"), e.to_string(), None);
            return None;
        }
    };
    if let Some(line) = line {
        let max = line / ((avg_frame + 20.0) * 8.0);
        if pps > max * 1.000_001 {
            sink.error(
                span,
                section,
                Some("rate"),
                format!(
                    "{}pps exceeds the port's line rate ({}pps at {avg_frame:.0}-byte frames)",
                    si(pps),
                    si(max)
                ),
                None,
            );
        }
    }
    Some(pps)
}

/// A frame (FCS included) must fit a pool buffer after its headroom.
/// The data room of a dpdk port's mbufs (DPDK's `RTE_MBUF_DEFAULT_DATAROOM`,
/// which the port's pool uses), known here without the `dpdk` feature.
const DPDK_MBUF_DATA_ROOM: usize = 2048;

fn check_frame_fits(
    sink: &mut Sink<'_>,
    span: std::ops::Range<usize>,
    section: &str,
    frame: usize,
    room: usize,
) {
    if frame - 4 > room {
        sink.error(
            span,
            section,
            Some("frame"),
            format!(
                "a {frame}-byte frame does not fit a pool buffer ({room} bytes after headroom)"
            ),
            Some("a larger `size` in [pool]".into()),
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
        let gens: Vec<(&super::GeneratorSpec, Option<f64>)> = p
            .stages
            .iter()
            .filter_map(|s| match &s.kind {
                StageKind::Generator(g) => {
                    let port =
                        s.tx.as_deref()
                            .map(|t| t.split(':').next().unwrap_or(t))
                            .and_then(|t| p.ports.iter().find(|x| x.name == t));
                    let line = port.and_then(|x| x.kind.line_rate_bps());
                    let first = port.is_some_and(|x| lines_seen.insert(x.name.clone()));
                    Some((g, if first { line } else { line.map(|_| 0.0) }))
                }
                _ => None,
            })
            .collect();
        if gens.is_empty() {
            return Err("the pipeline has no generator stage".into());
        }
        let share: f64 = gens.iter().map(|g| g.0.share).sum();
        let avg = gens
            .iter()
            .map(|g| g.0.frames.sizes.average() * g.0.share)
            .sum::<f64>()
            / share;
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
            if let StageKind::ChunkSink(c) = &st.kind {
                out += &format!(
                    "  \"{}\" -> \"{}\" [label=\"chunks\", style=bold];\n",
                    c.from, st.name
                );
            }
        }
        out + "}\n"
    }
}
