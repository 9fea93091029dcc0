//! `kind = "reliable_tx"` and `"reliable_rx"`: the two sides of a reliable
//! channel. Keys beyond the stage's own go to the endpoint's reader
//! ([`crate::reliable::keys`]), which reports its own unknown keys.

use super::super::check::{CheckCtx, MessageEnd, Refusal};
use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, rx, to_value, tx, BURST, KIND, LCORE, RX, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
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
    let mut endpoint_keys = toml::Table::new();
    for (k, v) in t.entries() {
        // Keys every stage has (`host`, `lcores`) were read before this
        // parser ran; the rest beyond the stage's own go to the endpoint.
        if !KEYS.iter().any(|own| own.name == k) && !t.was_read(k) {
            t.mark_used(k);
            endpoint_keys.insert(k.to_string(), to_value(v));
        }
    }
    let config = match crate::reliable::keys::config_from_table(&endpoint_keys, &[]) {
        Ok(c) => c,
        Err(e) => {
            let key = match &e {
                crate::reliable::keys::KeyError::Unknown { key }
                | crate::reliable::keys::KeyError::Value { key, .. } => key.clone(),
            };
            sink.error(t.span_of(&key), &t.path, Some(&key), e.to_string(), None);
            crate::reliable::endpoint::Config::default()
        }
    };
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

#[cfg(test)]
mod test {
    /// The documented endpoint keys are the ones its reader knows.
    #[test]
    fn endpoint_keys_match_the_reader() {
        let documented: Vec<&str> = super::ENDPOINT_KEYS.iter().map(|k| k.name).collect();
        assert_eq!(documented, crate::reliable::keys::KEYS);
    }

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
