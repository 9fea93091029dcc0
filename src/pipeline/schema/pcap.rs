//! `kind = "pcap"`: a capture file to replay and/or record.

use std::path::PathBuf;

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::KIND;
use super::{Key, PortConfig, PortDef, PortKind};
use crate::pipeline::build::PortCtx;
use crate::port::pcap::{Pace, PcapConfig};
use crate::port::{OpenPort, PortError};

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
        "\"fast\" or \"recorded\"",
        "\"fast\"",
        "replay as fast as possible or at the recorded times",
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
    if let Some(p) = t.choice(
        sink,
        "pace",
        "pace",
        &[("fast", Pace::Fast), ("recorded", Pace::Recorded)],
        "\"fast\" or \"recorded\"",
    ) {
        c.pace = p;
    }
    if c.read.is_none() && c.write.is_none() {
        sink.error(t.span.clone(), &t.path, None, "a pcap port needs `read` (a capture to replay) or `write` (a capture to record), or both", None);
    }
    Some(PortKind::Pcap(c))
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
            parts.push(format!(
                "read {} ({:?}, repeat {})",
                r.display(),
                self.pace,
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
