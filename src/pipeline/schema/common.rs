//! Readers shared by several kinds (bursts, addresses, ring sizes) and the
//! keys every stage has.

use std::net::{Ipv4Addr, SocketAddr};

use super::super::diag::{suggest, Sink};
use super::super::table::{Span, Table};
use super::Key;
use crate::buf::BURST_MAX;

/// `kind`, which every port and stage has.
pub(super) const KIND: Key = Key::new("kind", "string", "required", "the kind of this section");
/// The impairment keys the mem wire and the `impair` stage share.
pub(super) const LOSS: Key = Key::new(
    "loss",
    "probability 0..=1",
    "0",
    "probability that a packet is lost",
);
/// See [`LOSS`].
pub(super) const DUPLICATE: Key = Key::new(
    "duplicate",
    "probability 0..=1",
    "0",
    "probability that a packet is duplicated",
);
/// See [`LOSS`].
pub(super) const REORDER: Key = Key::new(
    "reorder",
    "probability 0..=1",
    "0",
    "probability that a packet is held back and overtaken by the next",
);
/// See [`LOSS`].
pub(super) const DELAY: Key = Key::new("delay", "duration", "\"0s\"", "fixed one-way delay");
/// `lcore`, which every stage has.
pub(super) const LCORE: Key = Key::new(
    "lcore",
    "integer",
    "the first of [pipeline] lcores",
    "the core whose lcore polls this stage",
);
/// `lcores`, on stages that can run as replicas.
pub(super) const LCORES: Key = Key::new(
    "lcores",
    "core list",
    "none (one lcore, `lcore`)",
    "run as one replica per core, replica k on queue k of every port it touches (\"1-4\")",
);
/// A stage's `rx`.
pub(super) const RX: Key = Key::new("rx", "string", "required", HELP_RX);
/// A stage's `tx`.
pub(super) const TX: Key = Key::new("tx", "string", "required", HELP_TX);
/// A stage's `burst`.
pub(super) const BURST: Key = Key::new("burst", "integer 1..=64", "32", "packets per burst");
/// A paced stage's `max_lag`.
pub(super) const MAX_LAG: Key = Key::new(
    "max_lag",
    "duration",
    "\"100us\"",
    "how late a paced packet may go out; later ones are skipped and counted",
);

/// What `rx` names (the help of a missing `rx`).
pub(super) const HELP_RX: &str = "the name of a port or ring to receive from";
/// What `tx` names (the help of a missing `tx`).
pub(super) const HELP_TX: &str = "the name of a port or ring to transmit to";

/// A stage's required `rx`.
pub(super) fn rx(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<String> {
    t.required_string(sink, "rx", HELP_RX).map(|x| x.0)
}

/// A stage's required `tx`.
pub(super) fn tx(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<String> {
    t.required_string(sink, "tx", HELP_TX).map(|x| x.0)
}

/// A stage's `burst` (32 by default).
pub(super) fn burst(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> usize {
    t.int(sink, "burst", 1..BURST_MAX as i64 + 1)
        .map_or(32, |(b, _)| b as usize)
}

/// A socket address like `"127.0.0.1:9000"`.
pub(super) fn socket_addr(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
) -> Option<SocketAddr> {
    let (s, span) = t.string(sink, key)?;
    match s.parse() {
        Ok(a) => Some(a),
        Err(_) => {
            sink.error(
                span,
                &t.path,
                Some(key),
                format!("`{s}` is not a socket address"),
                Some("an IP address and port, like \"127.0.0.1:9000\" or \"[::1]:9000\"".into()),
            );
            None
        }
    }
}

/// An IPv4 address.
pub(super) fn ipv4(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str) -> Option<Ipv4Addr> {
    let (s, span) = t.string(sink, key)?;
    s.parse()
        .map_err(|_| {
            sink.error(
                span,
                &t.path,
                Some(key),
                format!("`{s}` is not an IPv4 address"),
                None,
            )
        })
        .ok()
}

/// A MAC address like `"02:00:00:00:00:01"`, or `default` when absent or bad.
pub(super) fn mac(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
    default: [u8; 6],
) -> [u8; 6] {
    let Some((s, span)) = t.string(sink, key) else {
        return default;
    };
    let parts: Vec<Option<u8>> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16).ok())
        .collect();
    if parts.len() == 6 && parts.iter().all(Option::is_some) {
        let mut m = [0u8; 6];
        for (d, p) in m.iter_mut().zip(parts) {
            *d = p.unwrap_or(0);
        }
        return m;
    }
    sink.error(
        span,
        &t.path,
        Some(key),
        format!("`{s}` is not a MAC address"),
        Some("six hex bytes like \"02:00:00:00:00:01\"".into()),
    );
    default
}

/// A ring size: a power of two from 2 to 2^24.
pub(super) fn ring_size(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str) -> Option<usize> {
    let (n, span) = t.int(sink, key, 2..(1 << 24) + 1)?;
    if !(n as u64).is_power_of_two() {
        let n = n as u64;
        sink.error(
            span,
            &t.path,
            Some(key),
            format!("{n} is not a power of two"),
            Some(format!(
                "a power of two from 2 to 16777216, such as {} or {}",
                n.next_power_of_two() / 2,
                n.next_power_of_two()
            )),
        );
        return None;
    }
    Some(n as usize)
}

/// Reports an unknown `kind`, suggesting the closest valid one.
pub(super) fn unknown_kind(
    sink: &mut Sink<'_>,
    span: Span,
    section: &str,
    what: &str,
    kind: &str,
    valid: &[&str],
) {
    let hint = suggest(kind, valid)
        .map(|s| format!(" (did you mean `{s}`?)"))
        .unwrap_or_default();
    sink.error(
        span,
        section,
        Some("kind"),
        format!("unknown {what} kind `{kind}`{hint}"),
        Some(valid.join(", ")),
    );
}

/// Reports a kind that needs a cargo feature this build does not have.
#[cfg(not(all(feature = "dpdk", feature = "ibverbs")))]
pub(super) fn unavailable(sink: &mut Sink<'_>, t: &Table<'_, '_>, kind: &str) {
    sink.error(
        t.span_of("kind"),
        &t.path,
        Some("kind"),
        format!("port kind `{kind}` is not available in this build: it needs the `{kind}` cargo feature and its system packages (build with `cargo build --release --features {kind}`; scripts/test installs the packages)"),
        None,
    );
}
