//! `kind = "spead_send"`: SPEAD heaps from the F-engine simulator or generic
//! ones.

use super::CheckCtx;
use super::super::replica::Refusal;
use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, tx, BURST, KIND, LCORE, LCORES, TX};
use super::spead::{
    encap, flavour, fsim_geometry, ENCAP, FLAVOUR, N_ANTS, N_CHANNELS_PER_STREAM, N_CHANNELS_TOTAL,
    N_POLS, N_SAMPLES_PER_CHANNEL, PACKET_PAYLOAD,
};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::runtime::Stage;
use crate::spead::stage::{SendSource, SpeadSend, SpeadSendSpec};
use crate::units::{si, Rate};

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    LCORES,
    TX,
    Key::new(
        "source",
        "\"fsim\" or \"heaps\"",
        "\"fsim\"",
        "the F-engine simulator or generic heaps",
    ),
    FLAVOUR,
    Key::new(
        "rate",
        "bits/s or packets/s",
        "none (as fast as possible)",
        "the rate of SPEAD packets",
    ),
    Key::new(
        "timestamps",
        "integer",
        "none (open-ended)",
        "timestamps to send (n_ants heaps each), with source = \"fsim\"",
    ),
    Key::new(
        "first_channel",
        "integer",
        "0",
        "the first channel of this stream's heaps (a multiple of n_channels_per_stream), with source = \"fsim\": one stage per substream, each to its own multicast group",
    ),
    Key::new(
        "heaps",
        "integer",
        "none (open-ended)",
        "heaps to send, with source = \"heaps\"",
    ),
    Key::new(
        "heap_size",
        "size",
        "\"64 KiB\"",
        "bytes per heap, with source = \"heaps\"",
    ),
    Key::new(
        "packet_size",
        "integer 64..=65507",
        "1472",
        "largest packet, with source = \"heaps\"",
    ),
    Key::new(
        "end_of_stream",
        "boolean",
        "true",
        "send an end-of-stream heap last",
    ),
    ENCAP,
    BURST,
    N_ANTS,
    N_CHANNELS_TOTAL,
    N_CHANNELS_PER_STREAM,
    N_SAMPLES_PER_CHANNEL,
    N_POLS,
    PACKET_PAYLOAD,
];

pub(super) const DEF: StageDef = StageDef::new(
    "spead_send",
    "a spead_send stage",
    "sends SPEAD heaps: the F-engine simulator's or generic ones",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let tx = tx(t, sink);
    let c = parse_spead_send(t, sink);
    (StageKind::SpeadSend(c), None, tx)
}

fn parse_spead_send(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> SpeadSendSpec {
    let flavour = flavour(t, sink);
    let source = t.string(sink, "source");
    let fsim = match &source {
        None => true,
        Some((s, _)) if s == "fsim" => true,
        Some((s, _)) if s == "heaps" => false,
        Some((s, span)) => {
            sink.error(
                span.clone(),
                &t.path,
                Some("source"),
                format!("unknown source `{s}`"),
                Some("\"fsim\" (the F-engine simulator) or \"heaps\" (generic heaps)".into()),
            );
            true
        }
    };
    let (source, count, wrong) = if fsim {
        let mut g = fsim_geometry(t, sink, flavour);
        if let Some((c, span)) = t.int(sink, "first_channel", 0..1 << 24) {
            g.first_channel = c as u64;
            if let Err(e) = g.validate() {
                sink.error(
                    span,
                    &t.path,
                    Some("first_channel"),
                    e,
                    Some(format!(
                        "a multiple of n_channels_per_stream ({}) below n_channels_total ({})",
                        g.n_channels_per_stream, g.n_channels_total
                    )),
                );
            }
        }
        let count = t
            .int(sink, "timestamps", 1..i64::MAX)
            .map(|(c, _)| c as u64);
        (
            SendSource::Fsim(g),
            count,
            ["heaps", "heap_size", "packet_size"].as_slice(),
        )
    } else {
        let heap_size = t.size(sink, "heap_size").map_or(65536, |(s, _)| s as usize);
        let packet_size = t
            .int(sink, "packet_size", 64..65508)
            .map_or(1472, |(s, _)| s as usize);
        if heap_size as u64 > flavour.max_value() || heap_size > 1 << 30 {
            sink.error(
                t.span_of("heap_size"),
                &t.path,
                Some("heap_size"),
                format!("heaps of {heap_size} bytes are too large"),
                Some("at most 1 GiB (and what the flavour's heap addresses reach)".into()),
            );
        }
        let count = t.int(sink, "heaps", 1..i64::MAX).map(|(c, _)| c as u64);
        (
            SendSource::Heaps {
                heap_size,
                packet_size,
            },
            count,
            [
                "timestamps",
                "first_channel",
                "n_ants",
                "n_channels_total",
                "n_channels_per_stream",
                "n_samples_per_channel",
                "n_pols",
                "packet_payload",
            ]
            .as_slice(),
        )
    };
    for k in wrong {
        if t.has(k) {
            t.mark_used(k);
            let (this, other) = if fsim {
                ("source = \"fsim\"", "source = \"heaps\"")
            } else {
                ("source = \"heaps\"", "source = \"fsim\"")
            };
            sink.error(
                t.span_of(k),
                &t.path,
                Some(k),
                format!("`{k}` is not a key of {this}"),
                Some(format!("`{k}` belongs with {other}; the simulator counts `timestamps` (n_ants heaps each), generic heaps count `heaps`")),
            );
        }
    }
    let rate_bps = match t.rate(sink, "rate") {
        None => None,
        Some((Rate::L1Bps(b) | Rate::L2Bps(b), span)) => {
            if b <= 0.0 {
                sink.error(
                    span,
                    &t.path,
                    Some("rate"),
                    "the rate must be above zero",
                    None,
                );
            }
            Some(b)
        }
        Some((Rate::Pps(p), span)) => {
            if p <= 0.0 {
                sink.error(
                    span,
                    &t.path,
                    Some("rate"),
                    "the rate must be above zero",
                    None,
                );
            }
            let max = match &source {
                SendSource::Fsim(c) => c.max_packet(),
                SendSource::Heaps { packet_size, .. } => *packet_size,
            };
            Some(p * max as f64 * 8.0)
        }
        Some((Rate::Percent(_), span)) => {
            sink.error(span, &t.path, Some("rate"), "a SPEAD sender's rate is in bits/s of SPEAD packets (or packets/s), not a percentage", Some("\"10 Gbps\" or \"100 kpps\"".into()));
            None
        }
    };
    SpeadSendSpec {
        source,
        flavour,
        count,
        rate_bps,
        end_of_stream: t.boolean(sink, "end_of_stream").unwrap_or(true),
        encap: encap(t, sink),
        burst: burst(t, sink),
        antennas: (0, 1),
    }
}

impl StageConfig for SpeadSendSpec {
    /// Its packets fit a pool buffer.
    fn check(&mut self, cx: &mut CheckCtx<'_, '_>) {
        let (max, room) = (self.max_packet(), cx.room);
        if max > room {
            cx.error(
                None,
                format!(
                    "{max}-byte packets do not fit a pool buffer ({room} bytes after headroom)"
                ),
                Some(
                    "a larger `size` in [pool], or a smaller `packet_payload` / `packet_size`"
                        .into(),
                ),
            );
        }
    }

    /// Replica k simulates antennas k, k + n, ... (F-engines on separate
    /// hosts, each reaching its own queue).
    fn replicate(&self, n: usize) -> Result<(), Refusal> {
        match &self.source {
            SendSource::Fsim(f) if f.n_ants < n => Err(Refusal::Says {
                message: format!(
                    "{n} replicas of the F-engine simulator need at least {n} antennas; it has {}",
                    f.n_ants
                ),
                help: format!("at most {} lcores, or more `n_ants`", f.n_ants),
            }),
            SendSource::Fsim(_) => Ok(()),
            SendSource::Heaps { .. } => Err(Refusal::Kind("generic heaps are one ordered stream (source = \"fsim\" splits its antennas over replicas)")),
        }
    }

    fn split(&mut self, k: usize, n: usize) {
        self.antennas = (k, n);
        self.rate_bps = self.rate_bps.map(|b| b / n as f64);
    }

    fn name(&self) -> &'static str {
        "spead_send"
    }

    fn describe(&self) -> String {
        let c = self;
        let what = match &c.source {
            SendSource::Fsim(f) => format!(
                "F-engine simulator, {} antennas, channels {}..{}, {}-byte heaps in {}-byte packets, {}",
                f.n_ants,
                f.first_channel,
                f.first_channel + f.n_channels_per_stream as u64,
                f.heap_bytes(),
                f.max_packet(),
                c.count
                    .map_or("open-ended".into(), |n| format!("{n} timestamps"))
            ),
            SendSource::Heaps {
                heap_size,
                packet_size,
            } => format!(
                "generic {heap_size}-byte heaps in packets of at most {packet_size} bytes, {}",
                c.count
                    .map_or("open-ended".into(), |n| format!("{n} heaps"))
            ),
        };
        let rate = c
            .rate_bps
            .map_or("as fast as possible".into(), |b| format!("{}bps", si(b)));
        let slice = match c.antennas {
            (_, 1) => String::new(),
            (k, n) => format!(", antennas {k}, {}, ... (one in {n})", k + n),
        };
        format!(
            "spead_send, {what}{slice}, SPEAD-64-{}, {rate}, burst {}",
            c.flavour.heap_address_bits(),
            c.burst
        )
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let out = cx.output()?;
        let stage = SpeadSend::new(self.clone(), out, cx.pool.cache(), cx.counters.clone())
            .map_err(|e| cx.input_error(e))?;
        Ok(Box::new(stage))
    }
}
