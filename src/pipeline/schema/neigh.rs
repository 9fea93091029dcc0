//! The keys of a port that owns addresses and answers ARP/NDP for them
//! (`ip`, `mac`), and of one that carries UDP datagrams in its frames
//! (`udp_bind`, `udp_connect`, `resolve_timeout`), shared by the kinds that
//! can (mem, dpdk): a kind declares [`IP`] and [`MAC`] (and [`UDP_BIND`],
//! [`UDP_CONNECT`], [`RESOLVE_TIMEOUT`]) among its keys, and `parse_port`
//! reads them for it.

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

/// `udp_bind`: the port carries UDP datagrams, received at this address.
pub(super) const UDP_BIND: Key = Key::new(
    "udp_bind",
    "IPv4:PORT",
    "none (the port carries frames)",
    "the port carries UDP datagrams, as a udp port does: it takes the Ethernet/IPv4/UDP frames from `udp_connect` to this address (one of `ip`) and hands stages their payloads; needs `udp_connect`",
);
/// `udp_connect`: where the port's datagrams go.
pub(super) const UDP_CONNECT: Key = Key::new(
    "udp_connect",
    "IPv4:PORT",
    "none",
    "the peer's address (on the subnet of `udp_bind`): its MAC address is resolved (ARP) before any stage runs, and every datagram a stage sends leaves in a frame to it; needs `udp_bind`",
);

/// `resolve_timeout`: how long the port waits for `udp_connect` to answer ARP.
pub(super) const RESOLVE_TIMEOUT: Key = Key::new(
    "resolve_timeout",
    "duration (1ms to 1h)",
    "9s",
    "how long the port waits, before any stage runs, for `udp_connect` to answer ARP (a request every 300 ms, answering the peer's meanwhile): longer for a peer that starts slowly, shorter to fail fast on a dead one; needs `udp_connect`",
);

/// The longest `resolve_timeout`: longer is a typo, not a slow peer.
const MAX_RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// A port's own addresses (`ip = ["10.1.0.2/24"]`) and the MAC address it
/// answers with (`mac`; default: the device's own, or 02:00:00:00:00:02 on a
/// port without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeighSpec {
    /// The addresses.
    pub addrs: Vec<crate::neigh::Owned>,
    /// The MAC address, when given.
    pub mac: Option<[u8; 6]>,
    /// The port carries UDP datagrams between these two addresses
    /// (`udp_bind`, `udp_connect`).
    pub udp: Option<UdpBinding>,
}

/// A frame port that carries UDP datagrams: its own address (one it owns)
/// and its peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpBinding {
    /// Where datagrams are received (`udp_bind`).
    pub bind: std::net::SocketAddrV4,
    /// Where they are sent (`udp_connect`).
    pub connect: std::net::SocketAddrV4,
    /// How long the peer's MAC address is waited for, before any stage runs
    /// (`resolve_timeout`).
    pub resolve_timeout: std::time::Duration,
}

/// A port's `udp_bind` and `udp_connect`, checked against its addresses.
fn parse_udp(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    addrs: &[crate::neigh::Owned],
    resolve_timeout: Option<std::time::Duration>,
) -> Option<UdpBinding> {
    let (has_bind, has_connect) = (t.has("udp_bind"), t.has("udp_connect"));
    if !has_bind && !has_connect {
        return None;
    }
    let addr = |t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str| {
        let (s, span) = t.string(sink, key)?;
        match s.trim().parse::<std::net::SocketAddrV4>() {
            Ok(a) if a.port() != 0 => Some((a, span)),
            _ => {
                sink.error(
                    span,
                    &t.path,
                    Some(key),
                    format!("`{s}` is not an IPv4 address with a port"),
                    Some("like \"10.77.0.11:47201\" (IPv6 is not carried yet)".into()),
                );
                None
            }
        }
    };
    let bind = addr(t, sink, "udp_bind");
    let connect = addr(t, sink, "udp_connect");
    let (missing, given) = match (has_bind, has_connect) {
        (true, false) => ("udp_connect", "udp_bind"),
        (false, true) => ("udp_bind", "udp_connect"),
        _ => ("", ""),
    };
    if !missing.is_empty() {
        sink.error(
            t.span_of(given),
            &t.path,
            Some(missing),
            format!("`{given}` needs `{missing}`: a port carries datagrams between two addresses"),
            Some("udp_bind = \"10.77.0.11:47201\" and udp_connect = \"10.77.0.12:47202\"".into()),
        );
        return None;
    }
    let ((bind, bspan), (connect, cspan)) = (bind?, connect?);
    let resolve_timeout = resolve_timeout?;
    let Some(own) = addrs
        .iter()
        .find(|a| a.ip == std::net::IpAddr::V4(*bind.ip()))
    else {
        sink.error(
            bspan,
            &t.path,
            Some("udp_bind"),
            format!("{} is not one of the port's addresses (`ip`)", bind.ip()),
            Some(format!("add it: ip = [\"{}/24\"]", bind.ip())),
        );
        return None;
    };
    if !own.contains(std::net::IpAddr::V4(*connect.ip())) || connect.ip() == bind.ip() {
        sink.error(
            cspan,
            &t.path,
            Some("udp_connect"),
            format!(
                "{} is not another address on {own}, the subnet of `udp_bind`",
                connect.ip()
            ),
            Some("the peer must be on the same link (no gateway is used)".into()),
        );
        return None;
    }
    Some(UdpBinding {
        bind,
        connect,
        resolve_timeout,
    })
}

/// A port's `resolve_timeout` (default [`crate::neigh::bind::PEER_RESOLVE_TIMEOUT`]),
/// `None` when it is wrong (reported): not a duration, out of range, or
/// given without `udp_connect`.
fn resolve_timeout(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    has_connect: bool,
) -> Option<std::time::Duration> {
    const KEY: &str = "resolve_timeout";
    if !t.has(KEY) {
        return Some(crate::neigh::bind::PEER_RESOLVE_TIMEOUT);
    }
    let (d, span) = t.parsed(
        sink,
        KEY,
        crate::units::parse_duration,
        "a duration like \"9s\"",
    )?;
    let hint = || Some("a duration from 1ms to 1h, like resolve_timeout = \"30s\"".into());
    if !has_connect {
        sink.error(
            span,
            &t.path,
            Some(KEY),
            "`resolve_timeout` is how long `udp_connect` is resolved: it needs `udp_connect`",
            Some("udp_bind = \"10.77.0.11:47201\" and udp_connect = \"10.77.0.12:47202\"".into()),
        );
        return None;
    }
    if d < std::time::Duration::from_millis(1) || d > MAX_RESOLVE_TIMEOUT {
        sink.error(
            span,
            &t.path,
            Some(KEY),
            format!("`resolve_timeout` {d:?} is out of range"),
            hint(),
        );
        return None;
    }
    Some(d)
}

/// A port's `ip` (one address or a list, each `ADDRESS/PREFIX`) and `mac`.
pub(super) fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<NeighSpec> {
    let hint =
        || Some("addresses with their prefix, like [\"10.1.0.2/24\", \"fd00:1::2/64\"]".into());
    let mac_given = t.has("mac");
    let udp_given = t.has("udp_bind") || t.has("udp_connect");
    // Read first, so that it is checked (and never called unknown) even on
    // a port whose `ip` is missing.
    let resolve_timeout = resolve_timeout(t, sink, t.has("udp_connect"));
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
            if udp_given {
                let key = if t.has("udp_bind") {
                    "udp_bind"
                } else {
                    "udp_connect"
                };
                sink.error(
                    t.span_of(key),
                    &t.path,
                    Some("ip"),
                    format!("`{key}` needs `ip`: the port must own the address it receives at and answer ARP for it"),
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
    let udp = parse_udp(t, sink, &addrs, resolve_timeout);
    Some(NeighSpec { addrs, mac, udp })
}
