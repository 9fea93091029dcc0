//! `kind = "udp"`: a kernel UDP socket.

use std::net::{Ipv4Addr, SocketAddr};

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{ipv4, socket_addr, KIND};
use super::{Key, PortConfig, PortDef, PortKind};
use crate::pipeline::build::PortCtx;
use crate::port::udp::UdpConfig;
use crate::port::{OpenPort, PortError};

const KEYS: &[Key] = &[
    KIND,
    Key::new(
        "bind",
        "socket address",
        "none",
        "local address to bind (to receive, and the source of sends)",
    ),
    Key::new(
        "connect",
        "socket address",
        "none",
        "destination of sends (needed to transmit); a multicast group's address sends to the group",
    ),
    Key::new(
        "multicast",
        "IPv4 multicast address",
        "none",
        "multicast group to join (bind to the group's address or 0.0.0.0, with its port)",
    ),
    Key::new(
        "interface",
        "IPv4 address",
        "\"0.0.0.0\" (the routing table's choice)",
        "address of the interface that joins `multicast`, and that multicast sends leave by",
    ),
    Key::new(
        "multicast_ttl",
        "integer 0..=255",
        "1 (this link)",
        "hops a multicast send may cross (with `connect` to a group)",
    ),
    Key::new(
        "multicast_loop",
        "boolean",
        "true",
        "whether this host's own members of the group get a copy of its sends (with `connect` to a group)",
    ),
    Key::new(
        "rcvbuf",
        "size",
        "the kernel's",
        "receive buffer to ask the kernel for",
    ),
    Key::new(
        "sndbuf",
        "size",
        "the kernel's",
        "send buffer to ask the kernel for",
    ),
    Key::new(
        "queues",
        "integer 1..=256",
        "1",
        "sockets bound to one address with SO_REUSEPORT, one per replica of a stage",
    ),
];

pub(super) const DEF: PortDef =
    PortDef::new("udp", "a udp port", "a kernel UDP socket", KEYS, parse);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    let c = UdpConfig {
        bind: socket_addr(t, sink, "bind"),
        connect: socket_addr(t, sink, "connect"),
        multicast: ipv4(t, sink, "multicast"),
        interface: ipv4(t, sink, "interface").unwrap_or(Ipv4Addr::UNSPECIFIED),
        multicast_ttl: t.int(sink, "multicast_ttl", 0..256).map(|(v, _)| v as u8),
        multicast_loop: t.boolean(sink, "multicast_loop"),
        rcvbuf: t.size(sink, "rcvbuf").map(|(s, _)| s as usize),
        sndbuf: t.size(sink, "sndbuf").map(|(s, _)| s as usize),
        queues: t.int(sink, "queues", 1..257).map_or(1, |(q, _)| q as u16),
    };
    check_multicast(t, sink, &c);
    if c.bind.is_none() && c.connect.is_none() {
        sink.error(
            t.span.clone(),
            &t.path,
            None,
            "a udp port needs `bind` (to receive) or `connect` (to send), or both",
            None,
        );
    }
    Some(PortKind::Udp(c))
}

/// The multicast keys' sense: a group to join is a multicast address a
/// socket bound to it (or to any address) can receive, and the send options
/// go with a `connect` to a group.
fn check_multicast(t: &Table<'_, '_>, sink: &mut Sink<'_>, c: &UdpConfig) {
    if let Some(g) = c.multicast {
        if !g.is_multicast() {
            sink.error(
                t.span_of("multicast"),
                &t.path,
                Some("multicast"),
                format!("{g} is not a multicast group"),
                Some("an address in 224.0.0.0/4, like \"239.2.0.1\"".into()),
            );
        } else if let Some(SocketAddr::V4(b)) = c.bind {
            // Linux delivers a group's datagrams only to sockets bound to the
            // group or to the wildcard, never to a unicast address.
            if !b.ip().is_unspecified() && *b.ip() != g {
                sink.error(
                    t.span_of("bind"),
                    &t.path,
                    Some("bind"),
                    format!("a socket bound to {} never receives group {g}", b.ip()),
                    Some(format!(
                        "bind to the group's address, \"{g}:{}\" (only this group), or \"0.0.0.0:{}\"",
                        b.port(),
                        b.port()
                    )),
                );
            }
        }
    }
    let to_group = matches!(c.connect, Some(SocketAddr::V4(d)) if d.ip().is_multicast());
    if !to_group && c.multicast.is_none() && t.has("interface") {
        sink.error(
            t.span_of("interface"),
            &t.path,
            Some("interface"),
            "applies only to a multicast join or multicast sends",
            Some(
                "`multicast = \"GROUP\"` to join a group, or `connect` to a group's address".into(),
            ),
        );
    }
    if !to_group {
        let help = || Some("`connect` to a multicast group, like \"239.2.0.1:7148\"".to_string());
        if c.multicast_ttl.is_some() {
            sink.error(
                t.span_of("multicast_ttl"),
                &t.path,
                Some("multicast_ttl"),
                "applies only to multicast sends",
                help(),
            );
        }
        if c.multicast_loop.is_some() {
            sink.error(
                t.span_of("multicast_loop"),
                &t.path,
                Some("multicast_loop"),
                "applies only to multicast sends",
                help(),
            );
        }
    }
}

impl PortConfig for UdpConfig {
    fn queues_key(&self, _dir: &str) -> String {
        "queues".into()
    }

    fn carries(&self) -> Option<&'static str> {
        Some("UDP payloads (the kernel adds and strips the headers)")
    }

    fn name(&self) -> &'static str {
        "udp"
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = self.bind {
            parts.push(format!("bind {b}"))
        }
        if let Some(d) = self.connect {
            parts.push(format!("connect {d}"))
        }
        if let Some(g) = self.multicast {
            parts.push(format!("multicast {g}"))
        }
        if !self.interface.is_unspecified() {
            parts.push(format!("interface {}", self.interface))
        }
        if let Some(ttl) = self.multicast_ttl {
            parts.push(format!("ttl {ttl}"))
        }
        if self.queues > 1 {
            parts.push(format!("{} sockets (SO_REUSEPORT)", self.queues))
        }
        parts.join(", ")
    }

    fn queues(&self, _dir: &str) -> u16 {
        self.queues
    }

    fn open(&self, cx: &PortCtx<'_>) -> Result<OpenPort, PortError> {
        crate::port::udp::open(self, cx.pool)
    }

    fn tx_missing(&self) -> Option<&'static str> {
        self.connect
            .is_none()
            .then_some("a udp port transmits only with `connect = \"HOST:PORT\"`")
    }
}
