//! What the `spead_recv` and `chunk_sink` stages publish while they run
//! ([`StageValues`]), for `--metrics` to serve live: every integer counter of
//! the receiver's chunk stream (or, in heaps mode, its heap assembler) as
//! `linerate_spead_<field>` (the JSON report's `stream` field names) and the sink's totals as
//! `linerate_chunk_sink_<field>` (its detail's names), plus each one's
//! fraction present. The stage sets them with relaxed stores once per busy
//! poll and once at the end, so the last scrape equals the JSON report.

use crate::runtime::{StageValues, ValueDef, ValueKind};

use super::assemble::AssembleStats;
use super::chunk::ChunkStats;

macro_rules! counters {
    ($defs:ident, $publish:ident, $ty:ty, $prefix:literal, { $($field:ident: $help:literal),* $(,)? }) => {
        /// The definitions, in publishing order.
        const $defs: &[ValueDef] = &[$(ValueDef {
            name: concat!($prefix, stringify!($field)),
            help: $help,
            kind: ValueKind::Counter,
        }),*];

        /// Stores every counter of `s` from index 0 on; returns the next index.
        #[inline]
        fn $publish(v: &StageValues, s: &$ty) -> usize {
            let mut i = 0;
            $(
                v.set(i, s.$field);
                i += 1;
            )*
            i
        }
    };
}

counters!(STREAM, publish_stream, ChunkStats, "linerate_spead_", {
    packets: "SPEAD packets offered to the chunk stream.",
    packets_accepted: "SPEAD packets copied into chunks.",
    packets_malformed: "SPEAD packets that did not decode.",
    packets_duplicate: "Duplicate SPEAD packets.",
    packets_unsized: "SPEAD packets without a heap length.",
    packets_inconsistent: "SPEAD packets whose heap length disagreed with their heap.",
    packets_too_old: "SPEAD packets of heaps older than the window.",
    packets_rejected: "SPEAD packets of rejected or out-of-bounds heaps.",
    packets_after_stop: "SPEAD packets after the end of stream.",
    packets_in_incomplete_heaps: "SPEAD packets of heaps dropped incomplete.",
    heaps_complete: "Heaps placed complete.",
    heaps_single_packet: "Heaps of a single packet (of those complete).",
    packets_predicted: "SPEAD packets recognised by header prediction.",
    heaps_incomplete_evicted: "Incomplete heaps evicted to make room for newer ones.",
    heaps_incomplete_flushed: "Incomplete heaps whose chunk was flushed.",
    heaps_too_old: "Heaps for chunks before the window.",
    heaps_rejected: "Heaps the placement rejected or that pointed outside the chunk.",
    chunks: "Chunks delivered.",
    stalls: "Offers that found no free chunk.",
    present: "Heaps present in delivered chunks (their present-map entries set).",
    present_slots: "Heap slots (present-map entries) of delivered chunks.",
    bytes: "Payload bytes copied into chunks.",
});

/// A `spead_recv` stage's values: the stream's counters, then these.
const RECV_MORE: [ValueDef; 3] = [
    ValueDef {
        name: "linerate_spead_packets_not_udp",
        help: "Packets without the expected Ethernet/IPv4/UDP headers.",
        kind: ValueKind::Counter,
    },
    ValueDef {
        name: "linerate_spead_packets_wrong_flavour",
        help: "SPEAD packets of another flavour, dropped.",
        kind: ValueKind::Counter,
    },
    ValueDef {
        name: "linerate_spead_fraction_present",
        help: "Share of the heap slots of delivered chunks that are present (1 before the first chunk).",
        kind: ValueKind::Gauge,
    },
];

/// What a `spead_recv` stage publishes.
pub fn recv_defs() -> Vec<ValueDef> {
    STREAM.iter().chain(RECV_MORE.iter()).copied().collect()
}

/// Publishes a receiver's counters (its stream's, packets not UDP, packets of
/// the wrong flavour, the fraction present).
#[inline]
pub fn publish_recv(v: &StageValues, s: &ChunkStats, not_udp: u64, wrong_flavour: u64) {
    let i = publish_stream(v, s);
    v.set(i, not_udp);
    v.set(i + 1, wrong_flavour);
    v.set_f64(i + 2, s.fraction_present());
}

counters!(HEAPS, publish_heap_stats, AssembleStats, "linerate_spead_", {
    packets: "SPEAD packets offered to the assembler.",
    packets_accepted: "SPEAD packets accepted into a heap.",
    packets_malformed: "SPEAD packets that did not decode.",
    packets_duplicate: "Duplicate SPEAD packets.",
    packets_inconsistent: "SPEAD packets whose heap length or flavour disagreed with their heap.",
    packets_too_large: "SPEAD packets of heaps larger than the limit.",
    packets_after_stop: "SPEAD packets after the end of stream.",
    heaps_complete: "Heaps delivered complete.",
    heaps_unsized: "Heaps without a heap length delivered because they were contiguous.",
    heaps_evicted: "Incomplete heaps evicted to make room.",
    heaps_flushed: "Incomplete heaps dropped at the end.",
    packets_in_dropped_heaps: "SPEAD packets of heaps evicted or flushed incomplete.",
    bytes: "Payload bytes delivered in heaps.",
});

/// What a `spead_recv` stage in heaps mode publishes: the assembler's
/// counters, then packets not UDP.
pub fn heap_defs() -> Vec<ValueDef> {
    HEAPS
        .iter()
        .chain(RECV_MORE.iter().take(1))
        .copied()
        .collect()
}

/// Publishes a heaps-mode receiver's counters (its assembler's, packets not UDP).
#[inline]
pub fn publish_heaps(v: &StageValues, s: &AssembleStats, not_udp: u64) {
    let i = publish_heap_stats(v, s);
    v.set(i, not_udp);
}

/// A chunk sink's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkTotals {
    /// Chunks consumed.
    pub chunks: u64,
    /// Heaps present in them.
    pub present: u64,
    /// Heap slots in them.
    pub present_slots: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Wrong bytes found (check mode).
    pub wrong_bytes: u64,
    /// Files written (write mode).
    pub files: u64,
}

impl SinkTotals {
    /// Share of the heap slots present (1 before the first chunk).
    pub fn fraction_present(&self) -> f64 {
        if self.present_slots == 0 {
            1.0
        } else {
            self.present as f64 / self.present_slots as f64
        }
    }
}

counters!(SINK, publish_totals, SinkTotals, "linerate_chunk_sink_", {
    chunks: "Chunks the sink consumed.",
    present: "Heaps present in the chunks consumed.",
    present_slots: "Heap slots (present-map entries) of the chunks consumed.",
    bytes: "Bytes of the chunks consumed (present or not).",
    wrong_bytes: "Wrong bytes found by a checking sink.",
    files: "Files a writing sink wrote.",
});

const SINK_FRACTION: ValueDef = ValueDef {
    name: "linerate_chunk_sink_fraction_present",
    help: "Share of the heap slots of the chunks consumed that are present (1 before the first chunk).",
    kind: ValueKind::Gauge,
};

/// What a `chunk_sink` stage publishes.
pub fn sink_defs() -> Vec<ValueDef> {
    SINK.iter().copied().chain([SINK_FRACTION]).collect()
}

/// Publishes a sink's totals and fraction present.
#[inline]
pub fn publish_sink(v: &StageValues, t: &SinkTotals) {
    let i = publish_totals(v, t);
    v.set_f64(i, t.fraction_present());
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn every_integer_field_of_the_stream_is_published_under_its_name() {
        let s = ChunkStats {
            packets: 1,
            heaps_complete: 2,
            bytes: 3,
            present: 4,
            present_slots: 5,
            ..Default::default()
        };
        let json = serde_json::to_value(&s).unwrap();
        let fields: Vec<&String> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.is_u64())
            .map(|(k, _)| k)
            .collect();
        let defs = recv_defs();
        let v = StageValues::new(defs.clone());
        publish_recv(&v, &s, 6, 7);
        let got: std::collections::BTreeMap<&str, f64> =
            v.read().map(|(d, x)| (d.name, x)).collect();
        assert_eq!(fields.len(), STREAM.len());
        for f in fields {
            let name = format!("linerate_spead_{f}");
            assert_eq!(got[name.as_str()], json[f].as_u64().unwrap() as f64, "{f}");
        }
        assert_eq!(got["linerate_spead_packets_not_udp"], 6.0);
        assert_eq!(got["linerate_spead_packets_wrong_flavour"], 7.0);
        assert_eq!(got["linerate_spead_fraction_present"], 0.8);
    }

    #[test]
    fn every_integer_field_of_the_assembler_is_published_under_its_name() {
        let s = AssembleStats {
            packets: 1,
            heaps_complete: 2,
            heaps_flushed: 3,
            bytes: 4,
            ..Default::default()
        };
        let json = serde_json::to_value(&s).unwrap();
        let v = StageValues::new(heap_defs());
        publish_heaps(&v, &s, 5);
        let got: std::collections::BTreeMap<&str, f64> =
            v.read().map(|(d, x)| (d.name, x)).collect();
        let fields: Vec<&String> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, v)| v.is_u64())
            .map(|(k, _)| k)
            .collect();
        assert_eq!(fields.len(), HEAPS.len());
        for f in fields {
            let name = format!("linerate_spead_{f}");
            assert_eq!(got[name.as_str()], json[f].as_u64().unwrap() as f64, "{f}");
        }
        assert_eq!(got["linerate_spead_packets_not_udp"], 5.0);
    }

    #[test]
    fn sink_totals_in_order() {
        let t = SinkTotals {
            chunks: 1,
            present: 3,
            present_slots: 4,
            bytes: 5,
            wrong_bytes: 6,
            files: 7,
        };
        let v = StageValues::new(sink_defs());
        publish_sink(&v, &t);
        let got: Vec<(&str, f64)> = v.read().map(|(d, x)| (d.name, x)).collect();
        assert_eq!(
            got,
            [
                ("linerate_chunk_sink_chunks", 1.0),
                ("linerate_chunk_sink_present", 3.0),
                ("linerate_chunk_sink_present_slots", 4.0),
                ("linerate_chunk_sink_bytes", 5.0),
                ("linerate_chunk_sink_wrong_bytes", 6.0),
                ("linerate_chunk_sink_files", 7.0),
                ("linerate_chunk_sink_fraction_present", 0.75),
            ]
        );
    }
}
