//! What the SPEAD stages share: the flavour, the encapsulation, and the
//! F-engine geometry keys (checked together).

use super::super::diag::Sink;
use super::super::table::Table;
use super::Key;
use crate::spead::fsim::FsimConfig;
use crate::spead::stage::Encap;
use crate::spead::wire::Flavour;

/// `flavour`.
pub(super) const FLAVOUR: Key = Key::new(
    "flavour",
    "\"64-N\", N a multiple of 8 from 8 to 56",
    "\"64-48\"",
    "the SPEAD flavour: \"64-48\" (MeerKAT) or \"64-40\" (spead2's default)",
);
/// `encap`.
pub(super) const ENCAP: Key = Key::new(
    "encap",
    "\"none\" or \"udp\"",
    "\"none\"",
    "\"none\": the packet is the SPEAD packet (mem, udp ports); \"udp\": Ethernet/IPv4/UDP in front (dpdk)",
);
/// The F-engine geometry (katgpucbf's defaults).
pub(super) const N_ANTS: Key = Key::new("n_ants", "integer", "4", "antennas (F-engines)");
/// See [`N_ANTS`].
pub(super) const N_CHANNELS_TOTAL: Key = Key::new(
    "n_channels_total",
    "integer",
    "4096",
    "channels of the whole band",
);
/// See [`N_ANTS`].
pub(super) const N_CHANNELS_PER_STREAM: Key = Key::new(
    "n_channels_per_stream",
    "integer",
    "16",
    "channels in each heap",
);
/// See [`N_ANTS`].
pub(super) const N_SAMPLES_PER_CHANNEL: Key = Key::new(
    "n_samples_per_channel",
    "integer",
    "256",
    "samples per channel in each heap",
);
/// See [`N_ANTS`].
pub(super) const N_POLS: Key = Key::new("n_pols", "integer 1..=4", "2", "polarisations");
/// See [`N_ANTS`].
pub(super) const PACKET_PAYLOAD: Key = Key::new(
    "packet_payload",
    "integer 1..=9000",
    "1024",
    "payload bytes per packet",
);

/// The geometry keys, in the order a problem with them is reported.
const FSIM: &[Key] = &[
    N_ANTS,
    N_CHANNELS_TOTAL,
    N_CHANNELS_PER_STREAM,
    N_SAMPLES_PER_CHANNEL,
    N_POLS,
    PACKET_PAYLOAD,
];

pub(super) fn flavour(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Flavour {
    match t.string(sink, "flavour") {
        None => Flavour::SPEAD_64_48,
        Some((f, span)) => match f.as_str() {
            "64-48" => Flavour::SPEAD_64_48,
            "64-40" => Flavour::SPEAD_64_40,
            _ => {
                let bits = f
                    .strip_prefix("64-")
                    .and_then(|b| b.parse::<u32>().ok())
                    .and_then(|b| Flavour::new(b).ok());
                bits.unwrap_or_else(|| {
                    sink.error(
                        span,
                        &t.path,
                        Some("flavour"),
                        format!("`{f}` is not a SPEAD flavour"),
                        Some("\"64-48\" (MeerKAT), \"64-40\" (spead2's default), or \"64-N\" with N a multiple of 8 from 8 to 56".into()),
                    );
                    Flavour::SPEAD_64_48
                })
            }
        },
    }
}

pub(super) fn encap(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Encap {
    t.choice(
        sink,
        "encap",
        "encapsulation",
        &[("none", Encap::None), ("udp", Encap::Udp)],
        "\"none\" (the packet is the SPEAD packet: mem and udp ports) or \"udp\" (Ethernet/IPv4/UDP headers in front: dpdk ports)",
    )
    .unwrap_or(Encap::None)
}

/// The F-engine geometry keys (katgpucbf's defaults), checked together.
pub(super) fn fsim_geometry(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    flavour: Flavour,
) -> FsimConfig {
    let d = FsimConfig::default();
    let mut get =
        |k: &str, dflt: usize, hi: i64| t.int(sink, k, 1..hi).map_or(dflt, |(v, _)| v as usize);
    let c = FsimConfig {
        n_ants: get("n_ants", d.n_ants, 1 << 16),
        n_channels_total: get("n_channels_total", d.n_channels_total, 1 << 24),
        n_channels_per_stream: get("n_channels_per_stream", d.n_channels_per_stream, 1 << 24),
        n_samples_per_channel: get("n_samples_per_channel", d.n_samples_per_channel, 1 << 24),
        n_pols: get("n_pols", d.n_pols, 5),
        packet_payload: get("packet_payload", d.packet_payload, 9001),
        flavour,
        ..d
    };
    if let Err(e) = c.validate() {
        let key = FSIM
            .iter()
            .map(|k| k.name)
            .find(|k| t.has(k))
            .unwrap_or("n_channels_per_stream");
        sink.error(
            t.span_of(key),
            &t.path,
            Some(key),
            format!("the F-engine geometry is invalid: {e}"),
            None,
        );
    } else if c.heap_bytes() > 1 << 30 {
        sink.error(
            t.span.clone(),
            &t.path,
            None,
            format!(
                "heaps of {} bytes are too large (at most 1 GiB)",
                c.heap_bytes()
            ),
            Some("fewer channels or samples per heap".into()),
        );
    }
    c
}
