//! SPEAD ingest across hosts: the totals of every host's `spead_send`,
//! `spead_recv` and `chunk_sink` stages, from the per-host reports rank 0
//! gathered after `mpirun -np N linerate run FILE`.
//!
//! Counts are added exactly; the fraction present is recomputed from the
//! summed present heaps and slots (not averaged), so a receiver that saw
//! more chunks weighs more. Rates add up: the stages ran at the same time on
//! different hosts, so the aggregate is the sum of their rates.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

/// What one host's SPEAD senders sent (all its `spead_send` stages).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Sent {
    /// The stages, by name.
    pub stages: Vec<String>,
    /// Heaps sent.
    pub heaps: u64,
    /// SPEAD packets sent.
    pub packets: u64,
    /// Bytes of SPEAD packets sent.
    pub bytes: u64,
    /// The sum of the stages' rates, in Gb/s.
    pub gbps: f64,
}

/// What one host's SPEAD receivers took in (its `spead_recv` stages and
/// their `chunk_sink`s).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Received {
    /// The receiver stages, by name.
    pub stages: Vec<String>,
    /// Packets received.
    pub packets: u64,
    /// Payload bytes placed into chunks.
    pub bytes: u64,
    /// Heaps complete.
    pub heaps_complete: u64,
    /// Heaps incomplete (evicted or flushed).
    pub heaps_incomplete: u64,
    /// Heaps too old or rejected.
    pub heaps_dropped: u64,
    /// Chunks completed.
    pub chunks: u64,
    /// Heaps present in the chunks.
    pub present: u64,
    /// Heap slots of the chunks.
    pub present_slots: u64,
    /// `present / present_slots` (0 with no slots: nothing arrived).
    pub fraction_present: f64,
    /// Bytes the chunk sinks in check mode found wrong (`None`: none checks).
    pub wrong_bytes: Option<u64>,
    /// The sum of the receivers' rates, in Gb/s.
    pub gbps: f64,
}

/// The ingest across hosts: per sending host, per receiving host, and the
/// totals.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Ingest {
    /// Senders, by host.
    pub senders: BTreeMap<String, Sent>,
    /// Receivers, by host.
    pub receivers: BTreeMap<String, Received>,
    /// Every sender added up.
    pub sent: Sent,
    /// Every receiver added up.
    pub received: Received,
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn f(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

/// A receiver with no heap slots got no heap at all (nobody sent to its
/// group or port): that is 0 present, never a vacuous 1.
fn fraction(present: u64, slots: u64) -> f64 {
    if slots == 0 {
        0.0
    } else {
        present as f64 / slots as f64
    }
}

impl Sent {
    fn add(&mut self, name: &str, d: &Value) {
        self.stages.push(name.to_string());
        self.heaps += u(d, "heaps");
        self.packets += u(d, "packets");
        self.bytes += u(d, "bytes");
        self.gbps += f(d, "gbps");
    }

    fn absorb(&mut self, o: &Sent) {
        self.stages.extend(o.stages.iter().cloned());
        self.heaps += o.heaps;
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.gbps += o.gbps;
    }
}

impl Received {
    fn add_recv(&mut self, name: &str, d: &Value) {
        self.stages.push(name.to_string());
        self.packets += u(d, "packets");
        self.heaps_complete += u(d, "heaps_complete");
        self.heaps_incomplete += u(d, "heaps_incomplete");
        self.heaps_dropped += u(d, "heaps_too_old") + u(d, "heaps_rejected");
        self.gbps += f(d, "gbps");
        let s = d.get("stream").unwrap_or(&Value::Null);
        self.bytes += u(s, "bytes");
        self.chunks += u(s, "chunks");
        self.present += u(s, "present");
        self.present_slots += u(s, "present_slots");
        self.fraction_present = fraction(self.present, self.present_slots);
    }

    fn add_sink(&mut self, d: &Value) {
        if let Some(w) = d.get("wrong_bytes").and_then(Value::as_u64) {
            self.wrong_bytes = Some(self.wrong_bytes.unwrap_or(0) + w);
        }
    }

    fn absorb(&mut self, o: &Received) {
        self.stages.extend(o.stages.iter().cloned());
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.heaps_complete += o.heaps_complete;
        self.heaps_incomplete += o.heaps_incomplete;
        self.heaps_dropped += o.heaps_dropped;
        self.chunks += o.chunks;
        self.present += o.present;
        self.present_slots += o.present_slots;
        self.fraction_present = fraction(self.present, self.present_slots);
        if let Some(w) = o.wrong_bytes {
            self.wrong_bytes = Some(self.wrong_bytes.unwrap_or(0) + w);
        }
        self.gbps += o.gbps;
    }
}

/// The ingest of a run across hosts from each host's run report (as JSON,
/// by host name); `None` when no host has a SPEAD stage.
pub fn summarise<'a>(hosts: impl IntoIterator<Item = (&'a str, &'a Value)>) -> Option<Ingest> {
    let mut out = Ingest::default();
    for (host, report) in hosts {
        let Some(stages) = report.get("stages").and_then(Value::as_object) else {
            continue;
        };
        let mut sent = Sent::default();
        let mut got = Received::default();
        let mut sinks = false;
        for (name, s) in stages {
            let d = s.get("detail").unwrap_or(&Value::Null);
            match s.get("kind").and_then(Value::as_str) {
                Some("spead_send") => sent.add(name, d),
                Some("spead_recv") => got.add_recv(name, d),
                Some("chunk_sink") => {
                    sinks = true;
                    got.add_sink(d);
                }
                _ => {}
            }
        }
        if !sent.stages.is_empty() {
            out.sent.absorb(&sent);
            out.senders.insert(host.to_string(), sent);
        }
        if !got.stages.is_empty() || sinks {
            got.fraction_present = fraction(got.present, got.present_slots);
            out.received.absorb(&got);
            out.receivers.insert(host.to_string(), got);
        }
    }
    out.received.fraction_present = fraction(out.received.present, out.received.present_slots);
    (!out.senders.is_empty() || !out.receivers.is_empty()).then_some(out)
}

impl Ingest {
    /// The human summary: a line per sending and receiving host, and the totals.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "SPEAD ingest across hosts:");
        let sent = |o: &mut String, who: &str, s: &Sent| {
            let _ = writeln!(
                o,
                "  sent     {who:<10} {:>10} heaps {:>12} packets {:>8.3} Gb/s  ({})",
                s.heaps,
                s.packets,
                s.gbps,
                s.stages.join(", ")
            );
        };
        let got = |o: &mut String, who: &str, r: &Received| {
            let mut wrong = r
                .wrong_bytes
                .map_or(String::new(), |w| format!(", {w} wrong bytes"));
            if r.packets == 0 {
                wrong.push_str(", NOTHING ARRIVED (no sender for its groups or ports?)");
            }
            let _ = writeln!(
                o,
                "  received {who:<10} {:>10} heaps {:>12} packets {:>8.3} Gb/s  fraction present {:.6} ({}/{} in {} chunks){wrong}",
                r.heaps_complete,
                r.packets,
                r.gbps,
                r.fraction_present,
                r.present,
                r.present_slots,
                r.chunks
            );
        };
        for (h, s) in &self.senders {
            sent(&mut o, h, s);
        }
        for (h, r) in &self.receivers {
            got(&mut o, h, r);
        }
        sent(&mut o, "total", &self.sent);
        got(&mut o, "total", &self.received);
        o
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use serde_json::json;

    fn recv(present: u64, slots: u64, gbps: f64) -> Value {
        json!({"kind": "spead_recv", "detail": {"packets": 10 * present, "heaps_complete": present,
            "heaps_incomplete": slots - present, "heaps_too_old": 1, "heaps_rejected": 0,
            "gbps": gbps, "stream": {"bytes": 1000 * present, "chunks": 2, "present": present,
            "present_slots": slots}}})
    }

    #[test]
    fn totals_add_up_exactly_and_the_fraction_is_pooled() {
        let a = json!({"stages": {
            "s1": {"kind": "spead_send", "detail": {"heaps": 100, "packets": 1500, "bytes": 9000, "gbps": 1.5}},
            "s2": {"kind": "spead_send", "detail": {"heaps": 64, "packets": 960, "bytes": 5760, "gbps": 0.5}},
            "other": {"kind": "generator", "detail": {"offered": 3}}}});
        let b = json!({"stages": {"r": recv(100, 100, 1.25),
            "c": {"kind": "chunk_sink", "detail": {"wrong_bytes": 0}}}});
        let c = json!({"stages": {"r": recv(48, 64, 0.25),
            "c": {"kind": "chunk_sink", "detail": {"wrong_bytes": 7}}}});
        let i = summarise([("a", &a), ("b", &b), ("c", &c)]).unwrap();
        assert_eq!(i.senders["a"].stages, ["s1", "s2"]);
        assert_eq!(i.sent.heaps, 164);
        assert_eq!(i.sent.packets, 2460);
        assert_eq!(i.sent.bytes, 14760);
        assert!((i.sent.gbps - 2.0).abs() < 1e-12);
        assert_eq!(i.receivers["b"].fraction_present, 1.0);
        assert_eq!(i.receivers["c"].fraction_present, 0.75);
        // Pooled: 148 of 164 slots, not the mean of 1.0 and 0.75.
        assert_eq!(i.received.present, 148);
        assert_eq!(i.received.present_slots, 164);
        assert!((i.received.fraction_present - 148.0 / 164.0).abs() < 1e-12);
        assert_eq!(i.received.heaps_complete, 148);
        assert_eq!(i.received.heaps_dropped, 2);
        assert_eq!(i.received.wrong_bytes, Some(7));
        assert!((i.received.gbps - 1.5).abs() < 1e-12);
        assert_eq!(i.received.stages, ["r", "r"]);
        let t = i.text();
        assert!(t.contains("received c"), "{t}");
        assert!(t.contains("fraction present 0.902439"), "{t}");
    }

    #[test]
    fn a_silent_receiver_is_zero_present_and_leaves_the_pooled_fraction_alone() {
        let b = json!({"stages": {"r": recv(48, 64, 0.25)}});
        let silent = json!({"stages": {"r": {"kind": "spead_recv", "detail": {"packets": 0,
            "heaps_complete": 0, "gbps": 0.0, "stream": {"chunks": 0, "present": 0, "present_slots": 0}}}}});
        let i = summarise([("b", &b), ("z", &silent)]).unwrap();
        assert_eq!(i.receivers["z"].fraction_present, 0.0);
        assert_eq!(i.receivers["b"].fraction_present, 0.75);
        assert_eq!(i.received.fraction_present, 0.75);
        let t = i.text();
        let line = t.lines().find(|l| l.contains("received z")).unwrap();
        assert!(line.contains("NOTHING ARRIVED"), "{t}");
        assert!(
            !t.lines()
                .any(|l| l.contains("received b") && l.contains("NOTHING")),
            "{t}"
        );
    }

    #[test]
    fn no_spead_stage_is_no_ingest_and_odd_reports_do_not_panic() {
        let a = json!({"stages": {"g": {"kind": "generator"}}});
        let odd = json!({"stages": {"r": {"kind": "spead_recv", "detail": "x"}}});
        let none = Value::Null;
        assert!(summarise([("a", &a), ("n", &none)]).is_none());
        let i = summarise([("o", &odd)]).unwrap();
        assert_eq!(i.received.fraction_present, 0.0);
        assert!(i.text().contains("received o"), "{}", i.text());
        assert!(i.text().contains("NOTHING ARRIVED"), "{}", i.text());
        assert_eq!(i.received.wrong_bytes, None);
    }
}
