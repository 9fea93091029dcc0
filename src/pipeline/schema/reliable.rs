//! `kind = "reliable_tx"` and `"reliable_rx"`: the two sides of a reliable
//! channel. The endpoint's keys (window, credits, timers, ...) are read here
//! with the same spanned reader as every kind's, so their errors name the
//! file, line and key like any other.

use super::{CheckCtx, MessageEnd};
use super::super::replica::Refusal;
use super::super::diag::Sink;
use super::super::table::Table;
use std::time::Duration;

use toml::de::DeValue;

use super::super::table::as_int;
use super::common::{burst, rx, tx, BURST, KIND, LCORE, RX, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::reliable::endpoint::Config;
use crate::reliable::stage::{ReliableSpec, ReliableStage, Role};
use crate::runtime::Stage;

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    RX,
    TX,
    Key::new(
        "messages",
        "integer",
        "none (open-ended)",
        "messages to send (tx) or expect (rx)",
    ),
    Key::new(
        "size",
        "size 8..=max_message",
        "8192",
        "bytes per message (at least 8: the index)",
    ),
    BURST,
];

/// The endpoint's keys (see [`crate::reliable::endpoint::Config`]).
const ENDPOINT_KEYS: &[Key] = &[
    Key::new(
        "mode",
        "\"ours\" or \"usnic\"",
        "\"ours\"",
        "the base configuration the other keys override",
    ),
    Key::new(
        "window",
        "integer 64..=32768",
        "16384 (usnic mode: 4096)",
        "segments in flight per channel (rounded up to a power of two)",
    ),
    Key::new(
        "credits",
        "integer 1..=32768",
        "4096 (usnic mode: 256)",
        "fragments in flight per channel (rounded up to a power of two)",
    ),
    Key::new(
        "priority_mtu",
        "integer 128..=65535",
        "768",
        "largest priority-channel datagram, header included",
    ),
    Key::new(
        "data_mtu",
        "integer 128..=65535",
        "1472",
        "largest data-channel datagram, header included",
    ),
    Key::new(
        "sack",
        "boolean",
        "true",
        "send SACK ranges and detect losses from them",
    ),
    Key::new("ack_delay", "duration", "\"50us\"", "delayed-ACK timer"),
    Key::new(
        "ack_every",
        "integer 1..=65536",
        "8",
        "ACK at once after this many unacknowledged segments",
    ),
    Key::new(
        "ack_on_gap",
        "boolean",
        "true",
        "ACK at once when a segment arrives above a gap",
    ),
    Key::new(
        "rto_initial",
        "duration",
        "\"5ms\"",
        "retransmit timeout before the first RTT sample",
    ),
    Key::new(
        "rto_min",
        "duration",
        "\"200us\"",
        "smallest retransmit timeout",
    ),
    Key::new(
        "rto_max",
        "duration",
        "\"50ms\"",
        "largest retransmit timeout",
    ),
    Key::new(
        "retry_limit",
        "integer 1..=65536 or \"none\"",
        "16",
        "timeouts of one segment in a row before the peer is declared dead (after at least 1 s of its silence)",
    ),
    Key::new(
        "resend_cap",
        "integer 1..=1048576",
        "64",
        "resends per timer pass",
    ),
    Key::new("max_message", "size", "\"1 MiB\"", "largest message, bytes"),
    Key::new(
        "ordered",
        "boolean or [priority, data]",
        "true",
        "in-order delivery per channel",
    ),
    Key::new(
        "initial_seq",
        "integer 0..=4294967295",
        "0",
        "first sequence number of every channel",
    ),
    Key::new(
        "seq_bits",
        "16 or 32",
        "32 (usnic mode: 16)",
        "sequence number bits on the wire (16: no SACK ranges, window at most 16384)",
    ),
    Key::new(
        "flight_gain",
        "integer 0..=64",
        "3 (usnic mode: 0)",
        "flight bound as a multiple of the delivered rate (0: unbounded)",
    ),
    Key::new(
        "flight_floor",
        "integer 1..=32768",
        "16",
        "smallest flight bound, segments",
    ),
    Key::new(
        "peer_timeout",
        "duration or \"none\"",
        "\"10s\"",
        "silence from the peer after which a side that waits for it ends with an error",
    ),
];

const fn def(
    name: &'static str,
    doc: &'static str,
    parse: fn(&mut Table<'_, '_>, &mut Sink<'_>) -> ParsedStage,
) -> StageDef {
    StageDef::new(name, "a reliable stage", doc, KEYS, parse).more_keys(ENDPOINT_KEYS)
}

pub(super) const TX_DEF: StageDef = def(
    "reliable_tx",
    "the sending side of a reliable channel over an unreliable port",
    parse_tx,
);
pub(super) const RX_DEF: StageDef = def(
    "reliable_rx",
    "the receiving side of a reliable channel over an unreliable port",
    parse_rx,
);

fn parse_tx(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    parse(t, sink, Role::Tx)
}

fn parse_rx(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    parse(t, sink, Role::Rx)
}

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, role: Role) -> ParsedStage {
    let rx = rx(t, sink);
    let tx = tx(t, sink);
    let messages = t.int(sink, "messages", 1..i64::MAX).map(|(m, _)| m as u64);
    let size = t.size(sink, "size").map_or(8192, |(s, _)| s as usize);
    let burst = burst(t, sink);
    let config = endpoint(t, sink);
    if size < 8 || size > config.max_message as usize {
        sink.error(
            t.span_of("size"),
            &t.path,
            Some("size"),
            format!(
                "a message of {size} bytes is outside 8..={}",
                config.max_message
            ),
            Some("message sizes from 8 bytes to `max_message`".into()),
        );
    }
    (
        StageKind::Reliable(ReliableSpec {
            role,
            messages,
            size,
            config,
            burst,
        }),
        rx,
        tx,
    )
}

impl StageConfig for ReliableSpec {
    /// Its largest datagram fits a pool buffer.
    fn check(&mut self, cx: &mut CheckCtx<'_, '_>) {
        let mtu = self.config.data_mtu.max(self.config.priority_mtu);
        let room = cx.room;
        if mtu > room {
            cx.error(
                Some("data_mtu"),
                format!(
                    "{mtu}-byte datagrams do not fit a pool buffer ({room} bytes after headroom)"
                ),
                Some("a larger `size` in [pool] or a smaller `data_mtu`".into()),
            );
        }
    }

    fn replicate(&self, _n: usize) -> Result<(), Refusal> {
        Err(Refusal::Kind(
            "a reliable channel is one ordered sequence space",
        ))
    }

    /// Data one way and ACKs the other, on purpose.
    fn feeds_back(&self) -> bool {
        true
    }

    fn message_end(&self) -> Option<MessageEnd> {
        Some(match self.role {
            Role::Tx => MessageEnd::Sends,
            Role::Rx => MessageEnd::Receives,
        })
    }

    fn name(&self) -> &'static str {
        if self.role == Role::Tx {
            "reliable_tx"
        } else {
            "reliable_rx"
        }
    }

    fn describe(&self) -> String {
        let r = self;
        format!(
            "{}, {} messages of {} bytes, window {}, credits {}, burst {}",
            if r.role == Role::Tx {
                "reliable sender"
            } else {
                "reliable receiver"
            },
            r.messages
                .map_or("open-ended".to_string(), |m| m.to_string()),
            r.size,
            r.config.window,
            r.config.credits,
            r.burst
        )
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let (i, out) = (cx.input()?, cx.output()?);
        let peer = cx
            .tx_port
            .clone()
            .unwrap_or_else(|| format!("ring `{}`", cx.spec.tx.as_deref().unwrap_or("?")));
        Ok(Box::new(
            ReliableStage::new(
                self.clone(),
                i,
                out,
                cx.pool.cache(),
                cx.pool.cache(),
                cx.counters,
            )
            .named(&cx.spec.name, &peer),
        ))
    }
}

/// An integer key from `lo` to `hi`; out of range or of another type, an
/// error whose help is `valid`.
fn int_key(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
    (lo, hi): (i64, i64),
    valid: &str,
) -> Option<i64> {
    t.mark_used(key);
    let v = t.raw(key)?;
    let message = match as_int(v) {
        Some(i) if (lo..=hi).contains(&i) => return Some(i),
        Some(i) => format!("{i} is out of range"),
        None => "expected an integer".to_string(),
    };
    sink.error(
        t.span_of(key),
        &t.path,
        Some(key),
        message,
        Some(valid.into()),
    );
    None
}

/// A duration key, written as a string with its unit (a bare number would
/// be seconds, never what a timer of microseconds means).
fn duration_key(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, key: &str) -> Option<Duration> {
    match t.raw(key) {
        None | Some(DeValue::String(_)) => t.duration(sink, key),
        Some(_) => {
            t.mark_used(key);
            let help = "a duration string like \"50us\" or \"5ms\"";
            let message = "expected a duration with its unit".to_string();
            sink.error(
                t.span_of(key),
                &t.path,
                Some(key),
                message,
                Some(help.into()),
            );
            None
        }
    }
}

/// A key that is an integer from 1 to `hi`, or `"none"`: `Some(None)` for
/// `"none"`.
fn int_or_none(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
    hi: i64,
) -> Option<Option<u32>> {
    if matches!(t.raw(key), Some(DeValue::String(s)) if s == "none") {
        t.mark_used(key);
        return Some(None);
    }
    let valid = format!("an integer 1..={hi} or \"none\"");
    int_key(t, sink, key, (1, hi), &valid).map(|i| Some(i as u32))
}

/// The reliable endpoint's keys: `mode` picks the base configuration
/// (`"ours"`, the default, or `"usnic"`), the other keys override it.
fn endpoint(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Config {
    let usnic = t.choice(
        sink,
        "mode",
        "mode",
        &[("ours", false), ("usnic", true)],
        "\"ours\" or \"usnic\"",
    );
    let mut c = if usnic == Some(true) {
        Config::usnic()
    } else {
        Config::default()
    };
    let pow2 = |what: &str| format!("an integer {what} (rounded up to a power of two)");
    if let Some(w) = int_key(t, sink, "window", (64, 32768), &pow2("64..=32768")) {
        c.window = w as u32;
    }
    if let Some(n) = int_key(t, sink, "credits", (1, 32768), &pow2("1..=32768")) {
        c.credits = n as u32;
    }
    let mtu = "an integer 128..=65535 (bytes)";
    if let Some(m) = int_key(t, sink, "priority_mtu", (128, 65535), mtu) {
        c.priority_mtu = m as usize;
    }
    if let Some(m) = int_key(t, sink, "data_mtu", (128, 65535), mtu) {
        c.data_mtu = m as usize;
    }
    c.sack = t.boolean(sink, "sack").unwrap_or(c.sack);
    c.ack_on_gap = t.boolean(sink, "ack_on_gap").unwrap_or(c.ack_on_gap);
    c.ack_delay = duration_key(t, sink, "ack_delay").unwrap_or(c.ack_delay);
    if let Some(n) = int_key(t, sink, "ack_every", (1, 1 << 16), "an integer 1..=65536") {
        c.ack_every = n as u32;
    }
    timers(t, sink, &mut c);
    if let Some(r) = int_or_none(t, sink, "retry_limit", 1 << 16) {
        c.retry_limit = r;
    }
    let cap = "an integer 1..=1048576";
    if let Some(n) = int_key(t, sink, "resend_cap", (1, 1 << 20), cap) {
        c.resend_cap = n as usize;
    }
    if let Some((n, span)) = t.size(sink, "max_message") {
        match u32::try_from(n).ok().filter(|&n| n > 0) {
            Some(n) => c.max_message = n,
            None => sink.error(
                span,
                &t.path,
                Some("max_message"),
                format!("{n} bytes is out of range"),
                Some("a size like \"1 MiB\" (at most 4 GiB - 1)".into()),
            ),
        }
    }
    ordered(t, sink, &mut c);
    let gain = "an integer 0..=64 (0: unbounded)";
    if let Some(n) = int_key(t, sink, "flight_gain", (0, 64), gain) {
        c.flight_gain = n as u32;
    }
    let floor = "an integer 1..=32768";
    if let Some(n) = int_key(t, sink, "flight_floor", (1, 32768), floor) {
        c.flight_floor = n as u32;
    }
    peer_timeout(t, sink, &mut c);
    let bits = "16 (usnic's wire format: no SACK ranges, window at most 16384) or 32";
    match int_key(t, sink, "seq_bits", (16, 32), bits) {
        Some(b @ (16 | 32)) => c.seq_bits = b as u32,
        Some(b) => sink.error(
            t.span_of("seq_bits"),
            &t.path,
            Some("seq_bits"),
            format!("{b} is not a sequence number width"),
            Some(bits.into()),
        ),
        None => {}
    }
    let seq = "an integer 0..=4294967295";
    if let Some(n) = int_key(t, sink, "initial_seq", (0, i64::from(u32::MAX)), seq) {
        c.initial_seq = n as u32;
    }
    c
}

/// The retransmit timers; `rto_min` may not be above `rto_max`.
fn timers(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, c: &mut Config) {
    c.rto_initial = duration_key(t, sink, "rto_initial").unwrap_or(c.rto_initial);
    c.rto_min = duration_key(t, sink, "rto_min").unwrap_or(c.rto_min);
    c.rto_max = duration_key(t, sink, "rto_max").unwrap_or(c.rto_max);
    if c.rto_min > c.rto_max {
        sink.error(
            t.span_of("rto_min"),
            &t.path,
            Some("rto_min"),
            format!("{:?} is above rto_max ({:?})", c.rto_min, c.rto_max),
            Some("at most rto_max".into()),
        );
    }
}

/// `ordered`: one boolean for both channels, or `[priority, data]`.
fn ordered(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, c: &mut Config) {
    t.mark_used("ordered");
    let Some(v) = t.raw("ordered") else { return };
    let both = match v {
        DeValue::Boolean(b) => Some([*b, *b]),
        DeValue::Array(a) => match a.iter().map(|x| x.get_ref()).collect::<Vec<_>>()[..] {
            [DeValue::Boolean(p), DeValue::Boolean(d)] => Some([*p, *d]),
            _ => None,
        },
        _ => None,
    };
    match both {
        Some(o) => c.ordered = o,
        None => sink.error(
            t.span_of("ordered"),
            &t.path,
            Some("ordered"),
            "expected a boolean or two",
            Some("true, false, or [priority, data] booleans".into()),
        ),
    }
}

/// `peer_timeout`: a duration above zero, or `"none"`.
fn peer_timeout(t: &mut Table<'_, '_>, sink: &mut Sink<'_>, c: &mut Config) {
    if matches!(t.raw("peer_timeout"), Some(DeValue::String(s)) if s == "none") {
        t.mark_used("peer_timeout");
        c.peer_timeout = None;
        return;
    }
    match duration_key(t, sink, "peer_timeout") {
        Some(d) if d.is_zero() => sink.error(
            t.span_of("peer_timeout"),
            &t.path,
            Some("peer_timeout"),
            "the timeout must be above zero",
            Some("a duration above zero, like \"10s\", or \"none\"".into()),
        ),
        Some(d) => c.peer_timeout = Some(d),
        None => {}
    }
}

/// Reads reliable endpoint keys written as TOML (`window = 1024`) with the
/// reader a reliable stage's table goes through: the configuration, or the
/// first problem as (key, what would be valid).
pub fn reliable_endpoint(text: &str) -> Result<Config, (String, String)> {
    let mut sink = Sink::new(std::path::Path::new("endpoint"), text);
    let root =
        toml::de::DeTable::parse(text).map_err(|e| (String::new(), e.message().to_string()))?;
    let mut t = Table::new("endpoint", 0..0, root.get_ref());
    let c = endpoint(&mut t, &mut sink);
    t.finish(&mut sink, "a reliable endpoint", ENDPOINT_KEYS);
    match sink.diags.into_iter().next() {
        None => Ok(c),
        Some(d) => Err((d.key.unwrap_or_default(), d.help.unwrap_or(d.message))),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn ep(keys: &str) -> Result<Config, (String, String)> {
        reliable_endpoint(keys)
    }

    #[test]
    fn modes_and_overrides() {
        assert_eq!(ep("").unwrap(), Config::default());
        let c = ep("mode = 'usnic'\nwindow = 1024\nretry_limit = 8").unwrap();
        assert!(!c.sack && c.window == 1024 && c.retry_limit == Some(8));
        let c = ep("ack_delay = '20us'\nmax_message = '64 KiB'\nordered = [true, false]\nretry_limit = 'none'").unwrap();
        assert_eq!(c.ack_delay, core::time::Duration::from_micros(20));
        assert_eq!(c.max_message, 65536);
        assert_eq!(c.ordered, [true, false]);
        assert_eq!(c.retry_limit, None);
        let c = ep("peer_timeout = '2s'").unwrap();
        assert_eq!(c.peer_timeout, Some(core::time::Duration::from_secs(2)));
        assert_eq!(ep("peer_timeout = 'none'").unwrap().peer_timeout, None);
        assert!(ep("peer_timeout = '0s'").is_err());
        let c = ep("flight_gain = 0\nflight_floor = 8").unwrap();
        assert_eq!((c.flight_gain, c.flight_floor), (0, 8));
        assert_eq!(Config::usnic().flight_gain, 0);
    }

    #[test]
    fn every_documented_key_is_read() {
        // One valid value per key: none may be refused as unknown.
        let valid = |k: &str| match k {
            "mode" => "'usnic'",
            "window" | "credits" | "flight_floor" => "128",
            "priority_mtu" | "data_mtu" => "1024",
            "sack" | "ack_on_gap" | "ordered" => "true",
            "ack_delay" | "rto_initial" | "rto_min" | "rto_max" | "peer_timeout" => "'1ms'",
            "ack_every" | "retry_limit" | "resend_cap" | "flight_gain" => "4",
            "max_message" => "'64 KiB'",
            "initial_seq" => "7",
            "seq_bits" => "16",
            other => panic!("no test value for `{other}`"),
        };
        for k in ENDPOINT_KEYS {
            let text = format!("{} = {}", k.name, valid(k.name));
            assert!(ep(&text).is_ok(), "{}", k.name);
        }
        let c = ep("seq_bits = 16").unwrap();
        assert_eq!(
            (c.seq_bits, c.wire_bits(), c.sack_ranges()),
            (16, 16, false)
        );
        assert_eq!(ep("mode = 'usnic'\nseq_bits = 32").unwrap().wire_bits(), 32);
        let (k, why) = ep("seq_bits = 24").unwrap_err();
        assert!(k == "seq_bits" && why.contains("16"), "{k}: {why}");
    }

    #[test]
    fn errors_name_the_key() {
        let (k, why) = ep("windw = 5").unwrap_err();
        assert!(k == "windw" && why.contains("window"), "{k}: {why}");
        assert!(ep("mode = 'tcp'").unwrap_err().1.contains("usnic"));
        let (k, why) = ep("window = 8").unwrap_err();
        assert!(k == "window" && why.contains("64..=32768"), "{why}");
        assert!(ep("ack_delay = 50").unwrap_err().1.contains("duration"));
        assert_eq!(
            ep("rto_min = '1s'\nrto_max = '1ms'").unwrap_err().0,
            "rto_min"
        );
    }
}

#[cfg(test)]
mod stage_test {
    /// `host` is every stage's key, never the endpoint's; a misspelt key
    /// still is the endpoint reader's error.
    #[test]
    fn a_reliable_stage_takes_host_and_unknown_keys_stay_errors() {
        let file = |extra: &str| {
            format!(
                "[pipeline]\nlcores = \"0\"\npin = false\n[host.a]\nrank = 0\n[host.b]\nrank = 1\n\
                 [port.w]\nkind = \"mem\"\nhost = \"a\"\n\
                 [stage.tx]\nkind = \"reliable_tx\"\nhost = \"a\"\nrx = \"w\"\ntx = \"w\"\n{extra}"
            )
        };
        let path = std::path::Path::new("hosts.toml");
        let plan = crate::pipeline::load_str(path, &file("")).expect("valid");
        assert_eq!(plan.pipeline.stages[0].host.as_deref(), Some("a"));
        let e = crate::pipeline::load_str(path, &file("windw = 64\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("windw"), "{e}");
    }
}
