//! `kind = "udp"`: a kernel UDP socket.

use std::net::Ipv4Addr;

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{ipv4, socket_addr, KIND};
use super::{Key, PortConfig, PortDef, PortKind};
use crate::port::udp::UdpConfig;
use crate::port::{OpenPort, PortError};
use crate::runtime::build::PortCtx;

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
        "destination of sends (needed to transmit)",
    ),
    Key::new(
        "multicast",
        "IPv4 address",
        "none",
        "multicast group to join",
    ),
    Key::new(
        "interface",
        "IPv4 address",
        "\"0.0.0.0\"",
        "interface address for the multicast join",
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
];

pub(super) const DEF: PortDef =
    PortDef::new("udp", "a udp port", "a kernel UDP socket", KEYS, parse);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    let c = UdpConfig {
        bind: socket_addr(t, sink, "bind"),
        connect: socket_addr(t, sink, "connect"),
        multicast: ipv4(t, sink, "multicast"),
        interface: ipv4(t, sink, "interface").unwrap_or(Ipv4Addr::UNSPECIFIED),
        rcvbuf: t.size(sink, "rcvbuf").map(|(s, _)| s as usize),
        sndbuf: t.size(sink, "sndbuf").map(|(s, _)| s as usize),
    };
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

impl PortConfig for UdpConfig {
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
        parts.join(", ")
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
