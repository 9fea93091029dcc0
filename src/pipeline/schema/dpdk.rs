//! `kind = "dpdk"`: a DPDK device (with the `dpdk` cargo feature).

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::KIND;
use super::{Key, PortDef, PortKind};

const KEYS: &[Key] = &[
    KIND,
    Key::new(
        "device",
        "string",
        "required",
        "a DPDK device name like \"net_null0\" or a PCI address like \"0000:01:00.0\"",
    ),
    Key::new("rx_queues", "integer 1..=64", "1", "receive queues"),
    Key::new("tx_queues", "integer 1..=64", "1", "transmit queues"),
    Key::new(
        "rx_desc",
        "integer 1..=32768",
        "1024",
        "descriptors per receive queue",
    ),
    Key::new(
        "tx_desc",
        "integer 1..=32768",
        "1024",
        "descriptors per transmit queue",
    ),
    Key::new("mtu", "integer 68..=9216", "the device's", "the port's MTU"),
    Key::new("promiscuous", "boolean", "true", "receive every frame"),
    Key::new(
        "mbufs",
        "integer 255..2^24",
        "16383",
        "mbufs in the port's mempool",
    ),
    Key::new("cache", "integer 0..=512", "256", "per-lcore mempool cache"),
    Key::new(
        "mbuf_layout",
        "\"auto\", \"packed\" or \"classic\"",
        "\"auto\"",
        "packed: mbuf headers apart from their data rooms, so a burst's headers share few pages; \
         auto: packed under --no-huge on net_null, net_ring, net_pcap, net_af_packet and net_tap",
    ),
    Key::new(
        "mbuf_size",
        "integer 1024..=65407",
        "2048",
        "bytes of frame an mbuf holds after its headroom: the largest frame the port carries \
         (FCS excluded); 9014 or more for 9018-byte jumbo frames, which also raises the MTU \
         where the driver has one",
    ),
    Key::new(
        "line_rate",
        "bits/s",
        "none",
        "the port's line rate, for rates given in percent",
    ),
    super::neigh::IP,
    super::neigh::MAC,
    super::neigh::UDP_BIND,
    super::neigh::UDP_CONNECT,
    super::neigh::RESOLVE_TIMEOUT,
];

pub(super) const DEF: PortDef = PortDef::new(
    "dpdk",
    "a dpdk port",
    "a DPDK device (needs the `dpdk` cargo feature)",
    KEYS,
    parse,
);

#[cfg(not(feature = "dpdk"))]
fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    super::common::unavailable(sink, t, "dpdk");
    None
}

#[cfg(feature = "dpdk")]
fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    use crate::port::dpdk::{DpdkConfig, MbufLayout, MAX_MBUF_SIZE};
    let d = DpdkConfig::default();
    let q = |t: &mut Table<'_, '_>, sink: &mut Sink<'_>, k: &str, dflt: u16, hi: i64| {
        t.int(sink, k, 1..hi + 1).map_or(dflt, |(v, _)| v as u16)
    };
    let (device, _) = t.required_string(
        sink,
        "device",
        "a DPDK device name like \"net_null0\" or a PCI address like \"0000:01:00.0\"",
    )?;
    let c = DpdkConfig {
        device,
        rx_queues: q(t, sink, "rx_queues", d.rx_queues, 64),
        tx_queues: q(t, sink, "tx_queues", d.tx_queues, 64),
        rx_desc: q(t, sink, "rx_desc", d.rx_desc, 32768),
        tx_desc: q(t, sink, "tx_desc", d.tx_desc, 32768),
        mtu: t.int(sink, "mtu", 68..9217).map(|(m, _)| m as u16),
        promiscuous: t.boolean(sink, "promiscuous").unwrap_or(d.promiscuous),
        mbufs: t
            .int(sink, "mbufs", 255..(1 << 24))
            .map_or(d.mbufs, |(m, _)| m as u32),
        cache: t
            .int(sink, "cache", 0..513)
            .map_or(d.cache, |(m, _)| m as u32),
        line_rate_bps: t
            .line_rate_bps(sink, "line_rate", "\"10 Gbps\"")
            .map(|b| b as u64),
        mbuf_layout: t
            .choice(
                sink,
                "mbuf_layout",
                "mbuf layout",
                &[
                    ("auto", MbufLayout::Auto),
                    ("packed", MbufLayout::Packed),
                    ("classic", MbufLayout::Classic),
                ],
                "\"auto\", \"packed\" or \"classic\"",
            )
            .unwrap_or(d.mbuf_layout),
        mbuf_size: t
            .int(sink, "mbuf_size", 1024..i64::from(MAX_MBUF_SIZE) + 1)
            .map_or(d.mbuf_size, |(m, _)| m as u16),
    };
    Some(PortKind::Dpdk(c))
}

#[cfg(feature = "dpdk")]
impl super::PortConfig for crate::port::dpdk::DpdkConfig {
    /// The data room of the port's mbufs after their headroom (`mbuf_size`).
    fn data_room(&self) -> Option<usize> {
        Some(usize::from(self.mbuf_size))
    }

    fn uses_eal(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "dpdk"
    }

    fn describe(&self) -> String {
        let c = self;
        format!(
            "device {}, {} rx / {} tx queue(s), {} / {} descriptors, {} mbufs of {} bytes{}",
            c.device,
            c.rx_queues,
            c.tx_queues,
            c.rx_desc,
            c.tx_desc,
            c.mbufs,
            c.mbuf_size,
            if c.promiscuous { ", promiscuous" } else { "" }
        )
    }

    fn open(
        &self,
        cx: &crate::pipeline::build::PortCtx<'_>,
    ) -> Result<crate::port::OpenPort, crate::port::PortError> {
        match cx.eal {
            Some(eal) => crate::port::dpdk::open(cx.name, self, eal),
            None => Err(crate::port::PortError::Runtime(
                "internal: the EAL was not initialised".into(),
            )),
        }
    }

    fn queues(&self, dir: &str) -> u16 {
        if dir == "rx" {
            self.rx_queues
        } else {
            self.tx_queues
        }
    }

    fn line_rate_bps(&self) -> Option<f64> {
        self.line_rate_bps.map(|b| b as f64)
    }
}
