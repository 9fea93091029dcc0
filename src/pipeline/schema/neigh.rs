//! The keys of a port that owns addresses and answers ARP/NDP for them
//! (`ip`, `mac`), shared by the kinds that can (mem, dpdk): a kind declares
//! [`IP`] and [`MAC`] among its keys, and `parse_port` reads them for it.

use toml::de::DeValue;

use super::super::diag::Sink;
use super::super::table::Table;
use super::{common, Key};

/// `ip`: the addresses the port owns.
pub(super) const IP: Key = Key::new(
    "ip",
    "address/prefix, or a list of them",
    "none (the port answers nothing)",
    "addresses the port owns: it answers ARP and neighbour solicitations for them and announces them at start, e.g. [\"10.1.0.2/24\", \"fd00:1::2/64\"]",
);
/// `mac`: the MAC address the port answers with.
pub(super) const MAC: Key = Key::new(
    "mac",
    "MAC address",
    "the device's own (02:00:00:00:00:02 on a mem wire)",
    "the MAC address the port answers ARP/NDP with (needs `ip`)",
);

/// A port's own addresses (`ip = ["10.1.0.2/24"]`) and the MAC address it
/// answers with (`mac`; default: the device's own, or 02:00:00:00:00:02 on a
/// port without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighSpec {
    /// The addresses.
    pub addrs: Vec<crate::neigh::Owned>,
    /// The MAC address, when given.
    pub mac: Option<[u8; 6]>,
}

/// A port's `ip` (one address or a list, each `ADDRESS/PREFIX`) and `mac`.
pub(super) fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<NeighSpec> {
    let hint =
        || Some("addresses with their prefix, like [\"10.1.0.2/24\", \"fd00:1::2/64\"]".into());
    let mac_given = t.has("mac");
    let mac = mac_given.then(|| common::mac(t, sink, "mac", [0; 6]));
    t.mark_used("ip");
    let span = t.span_of("ip");
    let items: Vec<String> = match t.raw("ip") {
        None => {
            if mac_given {
                sink.error(
                    t.span_of("mac"),
                    &t.path,
                    Some("mac"),
                    "`mac` is the address a port answers ARP/NDP with: it needs `ip`",
                    hint(),
                );
            }
            return None;
        }
        Some(DeValue::String(s)) => vec![s.to_string()],
        Some(DeValue::Array(a)) => {
            let v: Option<Vec<String>> = a
                .iter()
                .map(|x| match x.get_ref() {
                    DeValue::String(s) => Some(s.to_string()),
                    _ => None,
                })
                .collect();
            match v {
                Some(v) if !v.is_empty() => v,
                _ => {
                    sink.error(
                        span,
                        &t.path,
                        Some("ip"),
                        "expected a list of addresses",
                        hint(),
                    );
                    return None;
                }
            }
        }
        Some(_) => {
            sink.error(
                span,
                &t.path,
                Some("ip"),
                "expected an address or a list of addresses",
                hint(),
            );
            return None;
        }
    };
    let mut addrs = Vec::new();
    for s in items {
        match crate::neigh::Owned::parse(&s) {
            Ok(a) if addrs.iter().any(|b: &crate::neigh::Owned| b.ip == a.ip) => sink.error(
                span.clone(),
                &t.path,
                Some("ip"),
                format!("`{}` is listed twice", a.ip),
                None,
            ),
            Ok(a) => addrs.push(a),
            Err(e) => sink.error(span.clone(), &t.path, Some("ip"), e, hint()),
        }
    }
    Some(NeighSpec { addrs, mac })
}
