//! `kind = "spead_recv"`: reassembles SPEAD heaps into chunks (katgpucbf's
//! placement).

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, rx, BURST, KIND, LCORE, LCORES, RX};
use super::spead::{
    encap, flavour, fsim_geometry, ENCAP, FLAVOUR, N_ANTS, N_CHANNELS_PER_STREAM, N_CHANNELS_TOTAL,
    N_POLS, N_SAMPLES_PER_CHANNEL, PACKET_PAYLOAD,
};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::buf::copy::CopyMode;
use crate::pipeline::build::LinkCtx;
use crate::pipeline::build::{BuildError, StageCtx};
use crate::runtime::Stage;
use crate::spead::group::{ChunkGroup, Eviction};
use crate::spead::stage::{MemberEnd, RecvEnd, RecvMode, SpeadRecv, SpeadRecvSpec};

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    LCORES,
    RX,
    FLAVOUR,
    Key::new(
        "heaps_per_fengine_per_chunk",
        "integer 1..2^20",
        "32",
        "heaps of each F-engine in one chunk",
    ),
    Key::new(
        "max_chunks",
        "integer 1..=1024",
        "4",
        "chunks open at once (the window)",
    ),
    Key::new(
        "n_chunks",
        "integer max_chunks..=4096",
        "2 x max_chunks, at least 8",
        "chunks allocated (the window plus those the sink holds)",
    ),
    Key::new(
        "max_heaps",
        "integer 1..2^20",
        "2 x n_ants, at least 4",
        "heaps being assembled at once",
    ),
    Key::new(
        "copy",
        "\"stream\" or \"plain\"",
        "\"stream\"",
        "how payloads are copied into chunks: non-temporal stores or plain",
    ),
    Key::new(
        "idle_timeout",
        "duration",
        "none",
        "finish after this long without a packet",
    ),
    Key::new(
        "eviction",
        "\"lossy\" or \"lossless\"",
        "\"lossy\"",
        "with `lcores` (a receive group): move the window on past a member still holding a chunk (lossy) or wait for it (lossless)",
    ),
    Key::new(
        "mode",
        "\"chunks\" or \"heaps\"",
        "\"chunks\"",
        "place F-engine heaps into chunks (for a chunk_sink), or assemble any SPEAD heaps whole (the geometry keys are then unused)",
    ),
    Key::new(
        "print",
        "boolean",
        "false",
        "with mode = \"heaps\": print each heap's descriptors and items on stdout",
    ),
    Key::new(
        "plot",
        "path",
        "none",
        "at the end, draw Gb/s and the fraction of heaps complete (heaps) or present in chunks (chunks) over time to PATH.svg and PATH.png",
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
    "spead_recv",
    "a spead_recv stage",
    "reassembles SPEAD heaps and places them into chunks",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let rx = rx(t, sink);
    let c = parse_spead_recv(t, sink);
    (StageKind::SpeadRecv(c), rx, None)
}

fn parse_spead_recv(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> SpeadRecvSpec {
    let flavour = flavour(t, sink);
    let fsim = fsim_geometry(t, sink, flavour);
    let hpf = t
        .int(sink, "heaps_per_fengine_per_chunk", 1..1 << 20)
        .map_or(32, |(v, _)| v as u64);
    let max_chunks = t
        .int(sink, "max_chunks", 1..1025)
        .map_or(4, |(v, _)| v as usize);
    let n_chunks = match t.int(sink, "n_chunks", 1..4097) {
        Some((n, span)) if (n as usize) < max_chunks => {
            sink.error(
                span,
                &t.path,
                Some("n_chunks"),
                format!("{n} chunks cannot fill a window of max_chunks = {max_chunks}: the receiver would wait for ever"),
                Some(format!("n_chunks of at least {max_chunks} (more lets the sink hold chunks while the window fills)")),
            );
            max_chunks
        }
        Some((n, _)) => n as usize,
        None => (2 * max_chunks).max(8),
    };
    let max_heaps = t
        .int(sink, "max_heaps", 1..1 << 20)
        .map_or((fsim.n_ants * 2).max(4), |(v, _)| v as usize);
    let chunk_bytes = fsim.heap_bytes() as u64 * fsim.n_ants as u64 * hpf;
    if chunk_bytes * n_chunks as u64 > 64 << 30 {
        sink.error(
            t.span.clone(),
            &t.path,
            None,
            format!("{n_chunks} chunks of {chunk_bytes} bytes exceed 64 GiB"),
            Some("fewer `n_chunks` or a smaller `heaps_per_fengine_per_chunk`".into()),
        );
    }
    SpeadRecvSpec {
        fsim,
        heaps_per_fengine_per_chunk: hpf,
        max_chunks,
        n_chunks,
        max_heaps,
        encap: encap(t, sink),
        idle_timeout: t.duration(sink, "idle_timeout"),
        burst: burst(t, sink),
        copy: t
            .choice(
                sink,
                "copy",
                "copy mode",
                &[("stream", CopyMode::Stream), ("plain", CopyMode::Plain)],
                "\"stream\" (non-temporal stores) or \"plain\"",
            )
            .unwrap_or(CopyMode::Stream),
        eviction: t
            .choice(
                sink,
                "eviction",
                "eviction mode",
                &[("lossy", Eviction::Lossy), ("lossless", Eviction::Lossless)],
                "\"lossy\" (the group moves on; a laggard's late heaps are too old) or \"lossless\" (the group waits for it)",
            )
            .unwrap_or_default(),
        mode: t
            .choice(
                sink,
                "mode",
                "receive mode",
                &[("chunks", RecvMode::Chunks), ("heaps", RecvMode::Heaps)],
                "\"chunks\" (F-engine heaps placed into chunks) or \"heaps\" (any heaps, whole)",
            )
            .unwrap_or_default(),
        print: t.boolean(sink, "print").unwrap_or(false),
        plot: t
            .string(sink, "plot")
            .map(|(p, _)| std::path::PathBuf::from(p)),
    }
}

impl StageConfig for SpeadRecvSpec {
    fn name(&self) -> &'static str {
        "spead_recv"
    }

    fn describe(&self) -> String {
        let c = self;
        format!(
            "spead_recv, {} antennas, {}-byte heaps, {} heaps per F-engine per chunk, window {} of {} chunks, SPEAD-64-{}, burst {}",
            c.fsim.n_ants,
            c.fsim.heap_bytes(),
            c.heaps_per_fengine_per_chunk,
            c.max_chunks,
            c.n_chunks,
            c.fsim.flavour.heap_address_bits(),
            c.burst
        )
    }

    /// A replicated receiver is a receive group: its first replica makes
    /// the group and a member for each replica, unless a chunk sink takes
    /// its chunks (the sink's `link` makes them then, see [`group_links`]).
    fn link(&self, cx: &mut LinkCtx<'_>) -> Result<(), BuildError> {
        let Some(r) = cx.spec.replica.clone() else {
            return Ok(());
        };
        let has_sink =
            cx.pipeline.stages.iter().any(
                |x| matches!(&x.kind, crate::pipeline::StageKind::ChunkSink(c) if c.from == r.of),
            );
        if r.index == 0 && !has_sink {
            group_links(cx, self, &r.of, r.count, false)?;
        }
        Ok(())
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let i = cx.input()?;
        if cx.spec.replica.is_some() && self.mode == RecvMode::Heaps {
            return Err(cx.input_error(
                "mode = \"heaps\" has no receive group: use one lcore, not `lcores`".to_string(),
            ));
        }
        if cx.spec.replica.is_some() {
            let end = cx
                .take_link::<MemberEnd>()
                .ok_or_else(|| cx.missing("receive group member of", &cx.spec.name))?;
            return Ok(Box::new(SpeadRecv::member(
                self.clone(),
                i,
                end,
                cx.pool.cache(),
                cx.counters.clone(),
                cx.publish(self.value_defs()),
            )));
        }
        // Its chunk sink's link, made by the sink's `link` (none: chunks are
        // recycled at once).
        let link = cx.take_link::<RecvEnd>();
        Ok(Box::new(SpeadRecv::new(
            self.clone(),
            i,
            link,
            cx.pool.cache(),
            cx.counters.clone(),
            cx.publish(self.value_defs()),
        )))
    }
}

/// Makes the receive group of replicated receiver `of` (`count` replicas)
/// and leaves each replica its member; returns the group. Every member joins
/// here, before any receives.
pub(super) fn group_links(
    cx: &mut LinkCtx<'_>,
    spec: &SpeadRecvSpec,
    of: &str,
    count: usize,
    sink: bool,
) -> Result<ChunkGroup, BuildError> {
    let group = ChunkGroup::new(spec.chunk_config(), spec.eviction)
        .map_err(|e| BuildError::Input(format!("[stage.{of}]: {e}")))?;
    for k in 0..count {
        let member = group
            .member(spec.place())
            .map_err(|e| BuildError::Input(format!("[stage.{of}] lcores: {e}")))?;
        cx.put_link(
            &crate::pipeline::replica::instance_name(of, k),
            MemberEnd { member, sink },
        );
    }
    Ok(group)
}
