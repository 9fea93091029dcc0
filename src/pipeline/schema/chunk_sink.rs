//! `kind = "chunk_sink"`: consumes a `spead_recv` stage's chunks (discard,
//! check or write them).

use std::path::PathBuf;

use super::CheckCtx;
use super::super::replica::Refusal;
use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{KIND, LCORE};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, LinkCtx, StageCtx};
use crate::runtime::Stage;
use crate::spead::group::ChunkGroup;
use crate::spead::stage::{
    chunk_link, ChunkSink, ChunkSinkMode, ChunkSinkSpec, SinkEnd, SpeadRecvSpec,
};

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    Key::new(
        "from",
        "string",
        "required",
        "the spead_recv stage whose chunks this sink consumes",
    ),
    Key::new(
        "mode",
        "\"discard\", \"check\" or \"write\"",
        "\"discard\"",
        "what to do with each chunk",
    ),
    Key::new(
        "dir",
        "path",
        "none",
        "where mode = \"write\" puts chunk_<id>.raw and chunk_<id>.json",
    ),
    Key::new(
        "keep_wrong",
        "integer 0..2^20",
        "16",
        "wrong heaps described in full by mode = \"check\"",
    ),
    Key::new(
        "plot",
        "path",
        "none",
        "at the end, draw Gb/s and the fraction of heaps present over time to PATH.svg and PATH.png",
    ),
];

/// What a chunk sink takes its chunks from: one receiver's chunk link, or
/// the receive group of a replicated receiver.
enum SinkLink {
    One(SinkEnd),
    Group(ChunkGroup),
}

// A chunk sink has no rx: the span of its `from` (resolved by the plan)
// stands in the rx span.
pub(super) const DEF: StageDef = StageDef::new(
    "chunk_sink",
    "a chunk_sink stage",
    "consumes a spead_recv stage's chunks: discards, checks or writes them",
    KEYS,
    parse,
)
.rx_key("from");

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let c = parse_chunk_sink(t, sink);
    (StageKind::ChunkSink(c), None, None)
}

fn parse_chunk_sink(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ChunkSinkSpec {
    let from = t
        .required_string(
            sink,
            "from",
            "the name of the spead_recv stage whose chunks this sink consumes",
        )
        .map_or(String::new(), |x| x.0);
    let dir = t.string(sink, "dir");
    let mode = match t.string(sink, "mode") {
        None => ChunkSinkMode::Discard,
        Some((m, span)) => {
            match m.as_str() {
                "discard" => ChunkSinkMode::Discard,
                "check" => ChunkSinkMode::Check,
                "write" => {
                    match &dir {
                        Some((d, _)) => ChunkSinkMode::Write(PathBuf::from(d)),
                        None => {
                            sink.error(span, &t.path, Some("mode"), "mode = \"write\" needs `dir`", Some("dir = \"chunks/\", where chunk_<id>.raw and chunk_<id>.json go".into()));
                            ChunkSinkMode::Discard
                        }
                    }
                }
                _ => {
                    sink.error(
                        span,
                        &t.path,
                        Some("mode"),
                        format!("unknown chunk sink mode `{m}`"),
                        Some("\"discard\", \"check\" or \"write\"".into()),
                    );
                    ChunkSinkMode::Discard
                }
            }
        }
    };
    if let (Some((_, span)), false) = (&dir, matches!(mode, ChunkSinkMode::Write(_))) {
        sink.error(
            span.clone(),
            &t.path,
            Some("dir"),
            "`dir` is for mode = \"write\"",
            None,
        );
    }
    ChunkSinkSpec {
        from,
        mode,
        keep_wrong: t
            .int(sink, "keep_wrong", 0..1 << 20)
            .map_or(16, |(k, _)| k as usize),
        plot: t.string(sink, "plot").map(|(p, _)| PathBuf::from(p)),
    }
}

impl StageConfig for ChunkSinkSpec {
    /// `from` names a spead_recv stage, whose chunks go to no other sink.
    fn check(&mut self, cx: &mut CheckCtx<'_, '_>) {
        let span = cx.stage.rx_span.clone();
        let takes = |s: &crate::pipeline::StageSpec| {
            s.kind.config().takes_from() == Some(self.from.as_str())
        };
        match cx.stage_named(&self.from).map(|x| &x.kind) {
            Some(StageKind::SpeadRecv(_)) => {
                if let Some(other) = cx.earlier().iter().rev().find(|s| takes(s)) {
                    let message = format!(
                        "the chunks of `{}` already go to chunk sink `{}`; a receiver has one sink",
                        self.from, other.name
                    );
                    cx.error_at(span, Some("from"), message, None);
                }
            }
            Some(k) => {
                let message = format!(
                    "stage `{}` is a {} stage, not a spead_recv stage",
                    self.from,
                    k.name()
                );
                cx.error_at(span, Some("from"), message, None);
            }
            None => {
                let mut recvs: Vec<&str> = cx
                    .stages
                    .iter()
                    .filter(|x| matches!(x.kind, StageKind::SpeadRecv(_)))
                    .map(|x| {
                        x.replica
                            .as_ref()
                            .map_or(x.name.as_str(), |r| r.of.as_str())
                    })
                    .collect();
                recvs.dedup();
                let help = if recvs.is_empty() {
                    "the name of a spead_recv stage (none declared: add a [stage.NAME] with kind = \"spead_recv\")".to_string()
                } else {
                    format!("a spead_recv stage: {}", recvs.join(", "))
                };
                let message = format!("no stage is named `{}`", self.from);
                cx.error_at(span, Some("from"), message, Some(help));
            }
        }
    }

    fn replicate(&self, _n: usize) -> Result<(), Refusal> {
        Err(Refusal::Kind("a chunk sink consumes one receiver's chunks"))
    }

    fn takes_from(&self) -> Option<&str> {
        Some(&self.from)
    }

    fn name(&self) -> &'static str {
        "chunk_sink"
    }

    fn describe(&self) -> String {
        let mut d = format!(
            "chunk_sink, {} the chunks of `{}`",
            match &self.mode {
                ChunkSinkMode::Discard => "discards".to_string(),
                ChunkSinkMode::Check => "checks".to_string(),
                ChunkSinkMode::Write(d) => format!("writes to {}", d.display()),
            },
            self.from
        );
        if let Some(p) = &self.plot {
            d += &format!(", plots to {}.svg and .png", p.display());
        }
        d
    }

    /// Links this sink to the spead_recv stage it names, through a ring of
    /// full chunks and a ring of free ones.
    fn link(&self, cx: &mut LinkCtx<'_>) -> Result<(), BuildError> {
        // A replicated receiver: its replicas are a receive group, whose
        // chunks this sink polls.
        let group = cx
            .pipeline
            .stages
            .iter()
            .find_map(|x| match (&x.kind, &x.replica) {
                (StageKind::SpeadRecv(r), Some(rep)) if rep.of == self.from => {
                    Some((r.clone(), rep.count))
                }
                _ => None,
            });
        if let Some((recv, count)) = group {
            let group = super::spead_recv::group_links(cx, &recv, &self.from, count, true)?;
            let name = cx.spec.name.clone();
            cx.put_link(&name, (SinkLink::Group(group), recv));
            return Ok(());
        }
        let recv = cx.pipeline.stages.iter().find_map(|x| match &x.kind {
            StageKind::SpeadRecv(r) if x.name == self.from => Some(r),
            _ => None,
        });
        let recv = recv.ok_or_else(|| cx.missing("spead_recv stage", &self.from))?;
        let (re, se, [chunks, free]) = chunk_link(recv.n_chunks);
        cx.rings.push((format!("{}.chunks", self.from), chunks));
        cx.rings.push((format!("{}.free_chunks", self.from), free));
        cx.put_link(&self.from, re);
        let name = cx.spec.name.clone();
        cx.put_link(&name, (SinkLink::One(se), recv.clone()));
        Ok(())
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let (end, recv) = cx
            .take_link::<(SinkLink, SpeadRecvSpec)>()
            .ok_or_else(|| cx.missing("chunk link of", &cx.spec.name))?;
        let values = cx.publish(crate::spead::live::sink_defs());
        let stage = match end {
            SinkLink::One(end) => {
                ChunkSink::new(self.clone(), &recv, end, cx.counters.clone(), values)
            }
            SinkLink::Group(g) => {
                ChunkSink::for_group(self.clone(), &recv, g, cx.counters.clone(), values)
            }
        }
        .map_err(|e| cx.input_error(e))?;
        Ok(Box::new(stage))
    }
}
