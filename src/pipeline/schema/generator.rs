//! `kind = "generator"`: stamped traffic for trials (frames, flows, sizes,
//! address family).

use std::sync::Arc;

use toml::de::DeValue;

use super::{count_share, CheckCtx, TrialLoad};
use super::super::replica::Refusal;
use super::super::diag::Sink;
use super::super::table::Table;
use super::encap;
use super::common::{burst, mac, tx, BURST, KIND, LCORE, LCORES, MAX_LAG, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, Mode, StageCtx};
use crate::runtime::Stage;
use crate::traffic::generator::GeneratorSpec;
use crate::traffic::generator::{GenConfig, GenControl, Generator, TrialGenerator};
use crate::pace::Pace;
use crate::traffic::template::{
    AddrRange, FlowOrder, FrameSpec, PortRange, Sizes, DEFAULT_DST_V6, DEFAULT_SRC_V6, MAX_FRAME,
    MIN_FRAME, MIN_FRAME_V6,
};
use crate::units::{si, Rate};

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    LCORES,
    TX,
    Key::new(
        "rate",
        "rate",
        "none (set by each trial)",
        "the free-running rate of `linerate run`: packets/s, bits/s or a percent of line rate",
    ),
    Key::new(
        "frame",
        "integer 64..=9018 or \"imix\"",
        "64 (IPv6: 84)",
        "frame size in bytes, FCS included",
    ),
    Key::new(
        "imix",
        "size:weight list",
        "\"64:7,570:4,1518:1\"",
        "the IMIX mix, with frame = \"imix\"",
    ),
    Key::new("src_mac", "MAC address", "02:00:00:00:00:01", "source MAC"),
    Key::new(
        "dst_mac",
        "MAC address",
        "02:00:00:00:00:02",
        "destination MAC",
    ),
    Key::new(
        "src_ip",
        "address or range",
        "10.0.0.1",
        "source IPv4 or IPv6 address(es)",
    ),
    Key::new(
        "dst_ip",
        "address or range",
        "10.0.0.2",
        "destination IPv4 or IPv6 address(es)",
    ),
    Key::new("src_port", "port or range", "1024", "UDP source port(s)"),
    Key::new(
        "dst_port",
        "port or range",
        "1024",
        "UDP destination port(s)",
    ),
    Key::new(
        "flows",
        "\"round-robin\" or \"random\"",
        "\"round-robin\"",
        "the order in which flows take turns",
    ),
    Key::new(
        "seed",
        "integer",
        "1",
        "seed of the random flow order and of Poisson gaps",
    ),
    Key::new(
        "stream",
        "integer 0..=255",
        "0",
        "stream id written in every stamp",
    ),
    Key::new(
        "count",
        "integer",
        "none (until stopped)",
        "packets to send when free-running",
    ),
    BURST,
    Key::new(
        "share",
        "number",
        "1",
        "this generator's weight in a trial's aggregate rate",
    ),
    MAX_LAG,
    Key::new(
        "pace",
        "\"constant\", \"poisson\" or \"burst\"",
        "\"constant\"",
        "the arrival process at the rate: evenly spaced, exponential gaps (seeded by `seed`), or trains of `burst_len` frames back to back; every pace offers a trial's exact count",
    ),
    Key::new(
        "burst_len",
        "integer 1..=1000000",
        "32",
        "frames per train, with pace = \"burst\"; trains start `burst_len / rate` apart",
    ),
    Key::new(
        "burst_gap",
        "duration",
        "none (from the rate)",
        "with pace = \"burst\": a train every `burst_gap`, which sets the free-running rate to `burst_len / burst_gap` (instead of `rate`); a trial's rate spaces the trains itself",
    ),
    Key::new(
        "ip",
        "\"v4\" or \"v6\"",
        "the addresses' family (IPv4)",
        "the frames' address family",
    ),
    Key::new(
        "gateway",
        "IP address",
        "none (use dst_mac)",
        "the device's address on this link: its MAC is resolved (ARP/NDP) before the first packet and becomes dst_mac; the tx port needs `ip`",
    ),
    encap::VLAN,
    encap::QINQ,
    encap::MPLS,
    encap::VXLAN,
];

pub(super) const DEF: StageDef = StageDef::new(
    "generator",
    "a generator stage",
    "stamped UDP traffic for trials and searches",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let tx = tx(t, sink);
    let g = parse_generator(t, sink);
    (StageKind::Generator(g), None, tx)
}

fn range<T>(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
    parse: fn(&str) -> Result<T, String>,
    default: T,
) -> T {
    let text = match t.raw(key) {
        Some(DeValue::Integer(_)) => t.int(sink, key, 0..65536).map(|(i, _)| i.to_string()),
        _ => t.string(sink, key).map(|x| x.0),
    };
    let Some(text) = text else { return default };
    match parse(&text) {
        Ok(v) => v,
        Err(e) => {
            sink.error(t.span_of(key), &t.path, Some(key), e, None);
            default
        }
    }
}

/// `gateway`: an address of the frames' family, instead of `dst_mac`.
fn generator_gateway(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    frames: &FrameSpec,
) -> Option<std::net::IpAddr> {
    let (s, span) = t.string(sink, "gateway")?;
    let ip: std::net::IpAddr = match s.parse() {
        Ok(ip) => ip,
        Err(_) => {
            sink.error(
                span,
                &t.path,
                Some("gateway"),
                format!("`{s}` is not an IP address"),
                Some(
                    "the device's address on this link, like \"10.1.0.1\" or \"fd00:1::1\"".into(),
                ),
            );
            return None;
        }
    };
    if t.has("dst_mac") {
        sink.error(
            t.span_of("dst_mac"),
            &t.path,
            Some("dst_mac"),
            "`dst_mac` and `gateway` both say where the frames go",
            Some("give one: `gateway` resolves the MAC address before the first packet".into()),
        );
    }
    if ip.is_ipv6() != frames.is_v6() {
        let fam = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
        sink.error(
            span,
            &t.path,
            Some("gateway"),
            format!(
                "the gateway is {} but the frames are {}",
                fam(ip.is_ipv6()),
                fam(frames.is_v6())
            ),
            None,
        );
    }
    Some(ip)
}

fn parse_generator(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> GeneratorSpec {
    let d = FrameSpec::default();
    let frame_span = t.span_of("frame");
    let sizes = match t.raw("frame") {
        Some(DeValue::String(s)) if s == "imix" => {
            t.mark_used("frame");
            match t.string(sink, "imix") {
                None => Sizes::default_imix(),
                Some((text, span)) => match parse_imix(&text) {
                    Ok(v) => Sizes::Imix(v),
                    Err(e) => {
                        sink.error(
                            span,
                            &t.path,
                            Some("imix"),
                            e,
                            Some("size:weight pairs like \"64:7,570:4,1518:1\"".into()),
                        );
                        Sizes::default_imix()
                    }
                },
            }
        }
        Some(DeValue::String(s)) => {
            t.mark_used("frame");
            sink.error(
                frame_span,
                &t.path,
                Some("frame"),
                format!("`{s}` is not a frame size"),
                Some(format!(
                    "a size in bytes from {MIN_FRAME} to {MAX_FRAME}, or \"imix\""
                )),
            );
            Sizes::Fixed(64)
        }
        _ => Sizes::Fixed(
            t.int(sink, "frame", MIN_FRAME as i64..MAX_FRAME as i64 + 1)
                .map_or(64, |(f, _)| f as usize),
        ),
    };
    if !matches!(sizes, Sizes::Imix(_)) && t.has("imix") {
        sink.error(
            t.span_of("imix"),
            &t.path,
            Some("imix"),
            "`imix` needs `frame = \"imix\"`",
            None,
        );
        t.mark_used("imix");
    }
    let order = t
        .choice(
            sink,
            "flows",
            "flow order",
            &[
                ("round-robin", FlowOrder::RoundRobin),
                ("random", FlowOrder::Random),
            ],
            "\"round-robin\" or \"random\"",
        )
        .unwrap_or(FlowOrder::RoundRobin);
    let (src_ip, dst_ip, sizes) = address_family(t, sink, sizes);
    let mut frames = FrameSpec {
        src_mac: mac(t, sink, "src_mac", d.src_mac),
        dst_mac: mac(t, sink, "dst_mac", d.dst_mac),
        src_ip,
        dst_ip,
        src_port: range(t, sink, "src_port", PortRange::parse, d.src_port),
        dst_port: range(t, sink, "dst_port", PortRange::parse, d.dst_port),
        order,
        sizes,
        seed: t
            .int(sink, "seed", 0..i64::MAX)
            .map_or(1, |(s, _)| s as u64),
        encap: encap::generator(t, sink),
    };
    encap::sizes(t, sink, &mut frames);
    let gateway = generator_gateway(t, sink, &frames);
    let (pace, gap_rate) = generator_pace(t, sink, frames.seed);
    GeneratorSpec {
        pace,
        gateway,
        src_mac_given: t.has("src_mac"),
        frames,
        stream: t.int(sink, "stream", 0..256).map_or(0, |(s, _)| s as u16),
        rate: t.rate(sink, "rate").map(|x| x.0).or(gap_rate),
        rate_pps: None,
        count: t.int(sink, "count", 1..i64::MAX).map(|(c, _)| c as u64),
        burst: burst(t, sink),
        share: t.float(sink, "share", 1e-9, 1e9).unwrap_or(1.0),
        max_lag: t
            .duration(sink, "max_lag")
            .unwrap_or(crate::traffic::generator::DEFAULT_MAX_LAG),
    }
}

/// `pace`, `burst_len` and `burst_gap`: the arrival process, and the rate
/// `burst_gap` sets. The burst keys need `pace = "burst"`; `burst_gap` and
/// `rate` both set the rate, so only one may be given.
fn generator_pace(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, seed: u64) -> (Pace, Option<Rate>) {
    const DEFAULT_BURST_LEN: u64 = 32;
    let pace = t
        .choice(
            sink,
            "pace",
            "pace",
            &[
                ("constant", Pace::Constant),
                ("poisson", Pace::Poisson { seed }),
                (
                    "burst",
                    Pace::Burst {
                        len: DEFAULT_BURST_LEN,
                    },
                ),
            ],
            "\"constant\", \"poisson\" or \"burst\"",
        )
        .unwrap_or(Pace::Constant);
    let Pace::Burst { .. } = pace else {
        for key in ["burst_len", "burst_gap"] {
            if t.has(key) {
                sink.error(
                    t.span_of(key),
                    &t.path,
                    Some(key),
                    format!("`{key}` needs `pace = \"burst\"`"),
                    Some(format!(
                        "add `pace = \"burst\"`, or drop `{key}` (the pace is {})",
                        pace.name()
                    )),
                );
                t.mark_used(key);
            }
        }
        return (pace, None);
    };
    let len = t
        .int(sink, "burst_len", 1..1_000_001)
        .map_or(DEFAULT_BURST_LEN, |(n, _)| n as u64);
    let gap = t.duration(sink, "burst_gap");
    if gap.is_some() && t.has("rate") {
        sink.error(
            t.span_of("burst_gap"),
            &t.path,
            Some("burst_gap"),
            "`burst_gap` and `rate` both set the rate",
            Some("give one: `burst_gap` makes it `burst_len / burst_gap`".into()),
        );
    }
    let gap_rate = match gap {
        Some(g) if g.is_zero() => {
            sink.error(
                t.span_of("burst_gap"),
                &t.path,
                Some("burst_gap"),
                "`burst_gap` must be above zero",
                None,
            );
            None
        }
        Some(g) => Some(Rate::Pps(len as f64 / g.as_secs_f64())),
        None => None,
    };
    (Pace::Burst { len }, gap_rate)
}

/// The generator's addresses and the family of its frames: `ip = "v4"` or
/// `"v6"` when given, else the family of the addresses given (IPv4 by
/// default). Addresses of the other family are errors at their key; IPv6
/// frames need [`MIN_FRAME_V6`] bytes for the stamp, and take that size (or
/// the IMIX 84:7,570:4,1518:1) by default.
fn address_family(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    sizes: Sizes,
) -> (AddrRange, AddrRange, Sizes) {
    let d = FrameSpec::default();
    let ip = t.choice(
        sink,
        "ip",
        "address family",
        &[
            ("v4", false),
            ("4", false),
            ("ipv4", false),
            ("v6", true),
            ("6", true),
            ("ipv6", true),
        ],
        "\"v4\" or \"v6\"",
    );
    let src = t
        .has("src_ip")
        .then(|| range(t, sink, "src_ip", AddrRange::parse, d.src_ip));
    let dst = t
        .has("dst_ip")
        .then(|| range(t, sink, "dst_ip", AddrRange::parse, d.dst_ip));
    let v6 = ip.unwrap_or_else(|| [src, dst].iter().flatten().any(AddrRange::is_v6));
    let family = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
    for (key, r) in [("src_ip", src), ("dst_ip", dst)] {
        if let Some(r) = r.filter(|r| r.is_v6() != v6) {
            let why = if ip.is_some() {
                format!("`ip = \"{}\"`", if v6 { "v6" } else { "v4" })
            } else {
                "the other address".into()
            };
            sink.error(
                t.span_of(key),
                &t.path,
                Some(key),
                format!(
                    "`{key}` is {} but the frames are {} ({why}): a frame has one address family",
                    family(r.is_v6()),
                    family(v6)
                ),
                None,
            );
        }
    }
    let (dsrc, ddst) = if v6 {
        (AddrRange::v6(DEFAULT_SRC_V6), AddrRange::v6(DEFAULT_DST_V6))
    } else {
        (d.src_ip, d.dst_ip)
    };
    let mut sizes = sizes;
    if v6 {
        let too_small = |s: usize| s < MIN_FRAME_V6;
        let hint = Some(format!(
            "IPv6 frames from {MIN_FRAME_V6} to {MAX_FRAME} bytes (FCS included): {MIN_FRAME_V6} holds the 62 bytes of Ethernet/IPv6/UDP headers, the 18-byte stamp and the FCS"
        ));
        match &sizes {
            Sizes::Fixed(_) if !t.has("frame") => sizes = Sizes::Fixed(MIN_FRAME_V6),
            Sizes::Fixed(f) if too_small(*f) => sink.error(
                t.span_of("frame"),
                &t.path,
                Some("frame"),
                format!("a {f}-byte frame cannot carry IPv6/UDP and the stamp"),
                hint,
            ),
            Sizes::Imix(_) if !t.has("imix") => {
                sizes = Sizes::Imix(vec![(MIN_FRAME_V6, 7), (570, 4), (1518, 1)])
            }
            Sizes::Imix(v) => {
                if let Some((f, _)) = v.iter().find(|x| too_small(x.0)) {
                    sink.error(
                        t.span_of("imix"),
                        &t.path,
                        Some("imix"),
                        format!("a {f}-byte frame cannot carry IPv6/UDP and the stamp"),
                        hint,
                    );
                }
            }
            Sizes::Fixed(_) => {}
        }
    }
    (src.unwrap_or(dsrc), dst.unwrap_or(ddst), sizes)
}

/// Parses `"64:7,570:4,1518:1"`.
pub(crate) fn parse_imix(text: &str) -> Result<Vec<(usize, u32)>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (size, weight) = part
            .split_once(':')
            .ok_or_else(|| format!("`{part}` is not size:weight"))?;
        let size: usize = size
            .trim()
            .parse()
            .map_err(|_| format!("`{size}` is not a frame size"))?;
        let weight: u32 = weight
            .trim()
            .parse()
            .map_err(|_| format!("`{weight}` is not a whole weight"))?;
        if !(MIN_FRAME..=MAX_FRAME).contains(&size) {
            return Err(format!(
                "frame size {size} is outside {MIN_FRAME}..={MAX_FRAME}"
            ));
        }
        if weight > 1000 {
            return Err(format!("weight {weight} is above 1000"));
        }
        out.push((size, weight));
    }
    if out.iter().map(|x| x.1).sum::<u32>() == 0 {
        return Err("the IMIX weights sum to 0".into());
    }
    Ok(out.into_iter().filter(|x| x.1 > 0).collect())
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

impl StageConfig for GeneratorSpec {
    /// Its stream is its own among generators and tracked by the analyzers;
    /// its rate resolves against its port; its frames fit a buffer.
    fn check(&mut self, cx: &mut CheckCtx<'_, '_>) {
        let g = self;
        let other = cx
            .earlier()
            .iter()
            .rev()
            .find(|s| s.kind.config().stream() == Some(g.stream))
            .map(|s| s.name.clone());
        if let Some(other) = other {
            cx.error(Some("stream"), format!("stream {} is also sent by generator `{other}`; each generator needs its own stream id", g.stream), Some("distinct `stream` ids, 0..=255".into()));
        }
        let tracked = cx
            .stages
            .iter()
            .filter_map(|s| s.kind.config().streams_tracked())
            .max();
        if let Some(m) = tracked {
            if usize::from(g.stream) >= m {
                cx.error(
                    Some("stream"),
                    format!(
                        "stream {} is beyond what the analyzers track (ids below {m})",
                        g.stream
                    ),
                    Some("a smaller `stream`, or a larger `streams` on the analyzer".into()),
                );
            }
        }
        if let Some(rate) = g.rate {
            g.rate_pps = cx.resolve_rate(rate, g.frames.sizes.average());
        }
        let frame = g.frames.sizes.max();
        cx.frame_fits(frame);
        // On a port with buffers of its own (a dpdk port's mbufs), each frame
        // is written into one of them.
        let room = cx
            .port(&cx.stage.tx)
            .and_then(|p| p.kind.config().data_room());
        if let Some(room) = room.filter(|&r| frame - 4 > r) {
            let port = cx.stage.tx.as_deref().unwrap_or_default();
            cx.error(
                Some("frame"),
                format!(
                    "a {frame}-byte frame does not fit port `{port}`'s mbufs ({room} bytes of data room): the generator builds single-segment frames"
                ),
                Some(format!(
                    "`mbuf_size = {}` (or more) on [port.{port}], or frames up to {} bytes",
                    frame - 4,
                    room + 4
                )),
            );
        }
    }

    /// Replica k sends its own stream id (the stage's `stream` plus k).
    fn replicate(&self, n: usize) -> Result<(), Refusal> {
        if usize::from(self.stream) + n > 256 {
            return Err(Refusal::Says {
                message: format!(
                    "{n} replicas send streams {}..{}, beyond the last stream id 255",
                    self.stream,
                    usize::from(self.stream) + n
                ),
                help: "a smaller `stream` or fewer lcores".into(),
            });
        }
        Ok(())
    }

    /// Replica k: stream `stream + k`, its slice of the flows, its share of
    /// the rate and count.
    fn split(&mut self, k: usize, n: usize) {
        self.stream += k as u16;
        self.share /= n as f64;
        self.count = self.count.map(|c| count_share(c, k, n));
        self.frames = flow_slice(&self.frames, k, n);
    }

    fn stream(&self) -> Option<u16> {
        Some(self.stream)
    }

    fn trial_load(&self) -> Option<TrialLoad> {
        Some(TrialLoad {
            share: self.share,
            avg_frame: self.frames.sizes.average(),
        })
    }

    fn name(&self) -> &'static str {
        "generator"
    }

    fn describe(&self) -> String {
        let g = self;
        let sizes = match &g.frames.sizes {
            Sizes::Fixed(f) => format!("{f}-byte frames"),
            Sizes::Imix(v) => format!(
                "IMIX {}",
                v.iter()
                    .map(|(s, w)| format!("{s}:{w}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        };
        let rate = g.rate_pps.map_or("rate set by each trial".into(), |r| {
            format!("{}pps when run", si(r))
        });
        let gw = g.gateway.map_or(String::new(), |ip| {
            format!(", gateway {ip} (resolved at start)")
        });
        format!(
            "generator, stream {}, {}{}{sizes}, {} flow(s), {rate}{}, burst {}{gw}",
            g.stream,
            if g.frames.is_v6() { "IPv6, " } else { "" },
            match g.frames.encap {
                crate::traffic::template::Encap::None => String::new(),
                ref e => format!("{} ({} bytes), ", e.name(), e.overhead()),
            },
            g.frames.flows(),
            match g.pace {
                Pace::Constant => String::new(),
                Pace::Poisson { seed } => format!(", Poisson arrivals (seed {seed})"),
                Pace::Burst { len } => format!(", trains of {len}"),
            },
            g.burst
        )
    }

    fn gateway(&self) -> Option<std::net::IpAddr> {
        self.gateway
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let g = self;
        let out = cx.output()?;
        let control = Arc::new(GenControl::default());
        if cx.mode == Mode::FreeRun {
            control.start(1, g.rate_pps, None, g.count);
        }
        let handle = TrialGenerator {
            control: control.clone(),
            share: g.share,
        };
        cx.controls.put(&cx.spec.name, Arc::new(handle));
        let mut frames = g.frames.clone();
        if let Some((gateway_mac, port_mac)) = cx.next_hop {
            frames.dst_mac = gateway_mac;
            if !g.src_mac_given {
                frames.src_mac = port_mac;
            }
        }
        let config = GenConfig {
            frames,
            stream: g.stream,
            burst: g.burst,
            max_lag: g.max_lag,
            pace: g
                .pace
                .for_replica(cx.spec.replica.as_ref().map_or(0, |r| r.index)),
        };
        let finite = cx.mode == Mode::FreeRun && g.count.is_some();
        Ok(Box::new(Generator::new(
            out,
            cx.pool.cache(),
            config,
            control,
            cx.counters,
            finite,
        )))
    }
}

#[cfg(test)]
mod test {
    use super::*;

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
