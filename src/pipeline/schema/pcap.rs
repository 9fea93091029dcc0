//! `kind = "pcap"`: a capture file to replay and/or record.

use std::path::PathBuf;

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::KIND;
use super::{Key, PortConfig, PortDef, PortKind};
use crate::pipeline::build::PortCtx;
use crate::port::pcap::{Pace, PcapConfig};
use crate::port::{OpenPort, PortError};
use crate::units::Rate;

const KEYS: &[Key] = &[
    KIND,
    Key::new("read", "path", "none", "a capture to replay on the rx side"),
    Key::new(
        "write",
        "path",
        "none",
        "a capture to record from the tx side",
    ),
    Key::new(
        "pace",
        "\"fast\", \"recorded\" or \"rate\"",
        "\"fast\"",
        "replay as fast as possible, at the recorded times (divided by `speedup`), or evenly at `rate`",
    ),
    Key::new(
        "rate",
        "packet rate",
        "none",
        "packets/s to replay at, with pace = \"rate\" (like \"10 kpps\")",
    ),
    Key::new(
        "speedup",
        "number > 0",
        "1",
        "with pace = \"recorded\": the recorded gaps are divided by this (2: twice as fast)",
    ),
    Key::new(
        "vlan",
        "integer 0..=4095",
        "none (frames as recorded)",
        "an 802.1Q tag with this VLAN id inserted in every replayed frame",
    ),
    Key::new(
        "repeat",
        "integer",
        "1",
        "times to replay the capture (0: forever)",
    ),
];

pub(super) const DEF: PortDef = PortDef::new(
    "pcap",
    "a pcap port",
    "a capture file to replay (read) and/or record (write)",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    let mut c = PcapConfig {
        read: t.string(sink, "read").map(|(s, _)| PathBuf::from(s)),
        write: t.string(sink, "write").map(|(s, _)| PathBuf::from(s)),
        repeat: t
            .int(sink, "repeat", 0..u32::MAX as i64)
            .map_or(1, |(r, _)| r as u32),
        ..PcapConfig::default()
    };
    c.pace = replay_pace(t, sink);
    c.vlan = t.int(sink, "vlan", 0..4096).map(|(v, _)| v as u16);
    if c.read.is_none() && c.write.is_none() {
        sink.error(t.span.clone(), &t.path, None, "a pcap port needs `read` (a capture to replay) or `write` (a capture to record), or both", None);
    }
    Some(PortKind::Pcap(c))
}

/// `pace` with its `rate` or `speedup`: each of those two belongs to one pace.
fn replay_pace(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Pace {
    #[derive(Clone, Copy, PartialEq)]
    enum Word {
        Fast,
        Recorded,
        Rate,
    }
    let word = t
        .choice(
            sink,
            "pace",
            "pace",
            &[
                ("fast", Word::Fast),
                ("recorded", Word::Recorded),
                ("rate", Word::Rate),
            ],
            "\"fast\", \"recorded\" or \"rate\"",
        )
        .unwrap_or(Word::Fast);
    for (key, needs, name) in [
        ("rate", Word::Rate, "rate"),
        ("speedup", Word::Recorded, "recorded"),
    ] {
        if word != needs && t.has(key) {
            sink.error(
                t.span_of(key),
                &t.path,
                Some(key),
                format!("`{key}` needs `pace = \"{name}\"`"),
                None,
            );
            t.mark_used(key);
        }
    }
    match word {
        Word::Fast => Pace::Fast,
        Word::Recorded => {
            let speedup = match t.raw("speedup") {
                None => 1.0,
                Some(_) => match t.float(sink, "speedup", f64::MIN, f64::MAX) {
                    Some(x) if x > 0.0 && x.is_finite() => x,
                    Some(x) => {
                        sink.error(
                            t.span_of("speedup"),
                            &t.path,
                            Some("speedup"),
                            format!("a speed-up of {x} is not above zero"),
                            Some(
                                "a number above 0: 2 replays twice as fast, 0.5 half as fast"
                                    .into(),
                            ),
                        );
                        1.0
                    }
                    None => 1.0,
                },
            };
            Pace::Recorded { speedup }
        }
        Word::Rate => {
            let pps = match t.rate(sink, "rate") {
                Some((Rate::Pps(x), _)) if x > 0.0 => Some(x),
                Some((_, span)) => {
                    sink.error(
                        span,
                        &t.path,
                        Some("rate"),
                        "a replay rate is a packet rate above zero",
                        Some("packets/s, like \"10 kpps\"".into()),
                    );
                    None
                }
                None => {
                    if !t.has("rate") {
                        sink.error(
                            t.span_of("pace"),
                            &t.path,
                            Some("pace"),
                            "`pace = \"rate\"` needs `rate`",
                            Some("the packets/s to replay at, like `rate = \"10 kpps\"`".into()),
                        );
                    }
                    None
                }
            };
            Pace::Rate {
                pps: pps.unwrap_or(1.0),
            }
        }
    }
}

impl PortConfig for PcapConfig {
    fn cannot_split(&self) -> Option<&'static str> {
        Some("a pcap file is one ordered stream of packets")
    }

    fn name(&self) -> &'static str {
        "pcap"
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = &self.read {
            let pace = match self.pace {
                Pace::Fast => "fast".to_string(),
                Pace::Recorded { speedup: 1.0 } => "as recorded".into(),
                Pace::Recorded { speedup } => format!("recorded times / {speedup}"),
                Pace::Rate { pps } => format!("{}pps", crate::units::si(pps)),
            };
            let tag = self
                .vlan
                .map_or(String::new(), |v| format!(", tagged VLAN {v}"));
            parts.push(format!(
                "read {} ({pace}, repeat {}{tag})",
                r.display(),
                self.repeat
            ))
        }
        if let Some(w) = &self.write {
            parts.push(format!("write {}", w.display()))
        }
        parts.join(", ")
    }

    fn open(&self, cx: &PortCtx<'_>) -> Result<OpenPort, PortError> {
        crate::port::pcap::open(self, cx.pool)
    }

    fn rx_missing(&self) -> Option<&'static str> {
        self.read
            .is_none()
            .then_some("a pcap port receives only with `read = \"FILE\"`")
    }

    fn tx_missing(&self) -> Option<&'static str> {
        self.write
            .is_none()
            .then_some("a pcap port transmits only with `write = \"FILE\"`")
    }
}
