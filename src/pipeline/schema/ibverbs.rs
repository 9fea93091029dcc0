//! `kind = "ibverbs"`: raw packet queues on an RDMA device (with the
//! `ibverbs` cargo feature).

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::KIND;
use super::{Key, PortDef, PortKind};

const KEYS: &[Key] = &[
    KIND,
    Key::new(
        "device",
        "string",
        "the first device",
        "the RDMA device, like \"mlx5_0\"",
    ),
    Key::new("ib_port", "integer 1..=255", "1", "the device's port"),
    Key::new(
        "dst_mac",
        "MAC address",
        "none (tx only)",
        "the flow steering rule's destination MAC (needed to receive)",
    ),
    Key::new(
        "dst_ip",
        "IPv4 address",
        "none",
        "narrows the rule to this destination IP",
    ),
    Key::new(
        "dst_port",
        "integer 1..=65535",
        "none",
        "narrows the rule to this UDP port",
    ),
    Key::new(
        "rx_depth",
        "integer 16..=32768",
        "4096",
        "receive queue depth",
    ),
    Key::new("tx_depth", "integer 16..=32768", "1024", "send queue depth"),
    Key::new(
        "buffers",
        "integer 1..=32768",
        "rx_depth",
        "receive buffers posted at once",
    ),
    Key::new(
        "buffer_size",
        "size 64..=16384 bytes",
        "2048",
        "bytes per receive slot: the largest frame, without FCS",
    ),
    Key::new(
        "inline",
        "integer 0..=512",
        "60",
        "frames up to this many bytes are sent inline",
    ),
    Key::new(
        "line_rate",
        "bits/s",
        "none",
        "the port's line rate, for rates given in percent",
    ),
];

pub(super) const DEF: PortDef = PortDef::new(
    "ibverbs",
    "an ibverbs port",
    "ibverbs raw packet queues (needs the `ibverbs` cargo feature)",
    KEYS,
    parse,
);

#[cfg(not(feature = "ibverbs"))]
fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    super::common::unavailable(sink, t, "ibverbs");
    None
}

#[cfg(feature = "ibverbs")]
fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    use super::common::{ipv4, mac};
    use crate::port::ibverbs::{limits, IbverbsConfig};
    let d = IbverbsConfig::default();
    let int = |t: &mut Table<'_, '_>,
               sink: &mut Sink<'_>,
               k: &str,
               r: &std::ops::RangeInclusive<u32>,
               dflt: u32| {
        t.int(sink, k, i64::from(*r.start())..i64::from(*r.end()) + 1)
            .map_or(dflt, |(v, _)| v as u32)
    };
    let rx_depth = int(t, sink, "rx_depth", &limits::DEPTH, d.rx_depth);
    let mut c = IbverbsConfig {
        device: t.string(sink, "device").map(|x| x.0),
        ib_port: t
            .int(sink, "ib_port", 1..256)
            .map_or(d.ib_port, |(p, _)| p as u8),
        dst_mac: t.has("dst_mac").then(|| mac(t, sink, "dst_mac", [0; 6])),
        dst_ip: ipv4(t, sink, "dst_ip"),
        dst_port: t.int(sink, "dst_port", 1..65536).map(|(p, _)| p as u16),
        rx_depth,
        tx_depth: int(t, sink, "tx_depth", &limits::DEPTH, d.tx_depth),
        // Every buffer is posted at once: by default as many as the queue takes.
        buffers: int(t, sink, "buffers", &(1..=*limits::DEPTH.end()), rx_depth),
        buffer_size: d.buffer_size,
        inline: int(t, sink, "inline", &limits::INLINE, d.inline),
        line_rate_bps: t
            .line_rate_bps(sink, "line_rate", "\"100 Gbps\"")
            .map(|b| b as u64),
    };
    if let Some((b, span)) = t.size(sink, "buffer_size") {
        if u32::try_from(b).is_ok_and(|b| limits::BUFFER_SIZE.contains(&b)) {
            c.buffer_size = b as u32;
        } else {
            sink.error(
                span,
                &t.path,
                Some("buffer_size"),
                format!("{b} bytes is out of range"),
                Some(format!(
                    "from {} to {} bytes per slot: the largest frame, without FCS",
                    limits::BUFFER_SIZE.start(),
                    limits::BUFFER_SIZE.end()
                )),
            );
        }
    }
    // Cross-key problems, each at the key it names (only for keys that
    // parsed: a key already reported keeps its default here).
    for (key, msg) in c.problems() {
        if t.has(key) {
            sink.error(t.span_of(key), &t.path, Some(key), msg, None);
        } else {
            sink.error(
                t.span.clone(),
                &t.path,
                None,
                format!("`{key}`: {msg}"),
                None,
            );
        }
    }
    Some(PortKind::Ibverbs(c))
}

#[cfg(feature = "ibverbs")]
impl super::PortConfig for crate::port::ibverbs::IbverbsConfig {
    fn cannot_split(&self) -> Option<&'static str> {
        Some("ibverbs ports open one queue pair")
    }

    fn name(&self) -> &'static str {
        "ibverbs"
    }

    fn describe(&self) -> String {
        let c = self;
        let flow = match c.flow() {
            Some(f) => {
                let mac = f.dst_mac.map(|b| format!("{b:02x}")).join(":");
                let ip = f.dst_ip.map_or(String::new(), |ip| format!(" {ip}"));
                let port = f.dst_port.map_or(String::new(), |p| format!(" udp {p}"));
                format!("rx flow {mac}{ip}{port}, {} buffers", c.buffers)
            }
            None => "tx only".into(),
        };
        format!(
            "device {}, port {}, {flow}, {}-byte slots, rx/tx depth {} / {}, inline <= {} bytes",
            c.device.as_deref().unwrap_or("(first)"),
            c.ib_port,
            c.buffer_size,
            c.rx_depth,
            c.tx_depth,
            c.inline
        )
    }

    fn open(
        &self,
        cx: &crate::pipeline::build::PortCtx<'_>,
    ) -> Result<crate::port::OpenPort, crate::port::PortError> {
        crate::port::ibverbs::open(self, cx.pool)
    }

    fn rx_missing(&self) -> Option<&'static str> {
        self.dst_mac
            .is_none()
            .then_some("an ibverbs port receives only with `dst_mac` (its flow steering rule)")
    }

    fn line_rate_bps(&self) -> Option<f64> {
        self.line_rate_bps.map(|b| b as f64)
    }
}
