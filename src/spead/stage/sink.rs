//! The `chunk_sink` stage: chunks discarded, checked or written, then given back.

use super::*;
/// What a chunk sink does (see [`crate::spead::check::SinkMode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkSinkMode {
    /// Drop chunks.
    Discard,
    /// Verify the simulator's payload.
    Check,
    /// Write raw files and JSON sidecars into this directory.
    Write(PathBuf),
}

/// A `chunk_sink` stage's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSinkSpec {
    /// The `spead_recv` stage it consumes.
    pub from: String,
    /// What it does with each chunk.
    pub mode: ChunkSinkMode,
    /// Wrong bytes kept (located) in the report.
    pub keep_wrong: usize,
    /// Draw fraction present and Gb/s over time to this path with `.svg`
    /// and `.png` at the end.
    pub plot: Option<PathBuf>,
}

/// Where a chunk sink's chunks come from.
enum Feed {
    /// One receiver's chunk link.
    Link(SinkEnd),
    /// A receive group (a replicated receiver): polled directly, chunks given
    /// back to it (one lock per chunk, none per packet).
    Group(ChunkGroup),
}

/// How often a chunk sink samples its totals for its plot (doubled as the
/// samples fill [`PLOT_SAMPLES`]).
const PLOT_EVERY_S: f64 = 0.5;

/// Most samples a chunk sink keeps for its plot.
const PLOT_SAMPLES: usize = 4096;

/// The `chunk_sink` stage.
pub struct ChunkSink {
    spec: ChunkSinkSpec,
    feed: Feed,
    place: KatgpucbfPlace,
    checker: Checker,
    held: Vec<Chunk>,
    totals: SinkTotals,
    start: Option<Instant>,
    first: Option<Instant>,
    /// Bytes of the chunks taken at `first`: they arrived at the span's
    /// start, so Gb/s counts only the bytes after them.
    first_bytes: u64,
    last: Option<Instant>,
    sampler: Option<Sampler>,
    failure: Option<String>,
    counters: Arc<CacheAligned<StageCounters>>,
    values: Arc<StageValues>,
}

impl ChunkSink {
    /// A sink of `link`'s chunks, laid out by `recv`, publishing its totals
    /// in `values` (made from [`crate::spead::live::sink_defs`]).
    pub fn new(
        spec: ChunkSinkSpec,
        recv: &SpeadRecvSpec,
        link: SinkEnd,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> Result<ChunkSink, String> {
        ChunkSink::with(spec, recv, Feed::Link(link), counters, values)
    }

    /// A sink of a receive group's chunks (a replicated receiver's).
    pub fn for_group(
        spec: ChunkSinkSpec,
        recv: &SpeadRecvSpec,
        group: ChunkGroup,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> Result<ChunkSink, String> {
        ChunkSink::with(spec, recv, Feed::Group(group), counters, values)
    }

    fn with(
        spec: ChunkSinkSpec,
        recv: &SpeadRecvSpec,
        feed: Feed,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> Result<ChunkSink, String> {
        if recv.mode == RecvMode::Heaps {
            return Err(format!(
                "`{}` has mode = \"heaps\": it makes no chunks for a chunk_sink",
                spec.from
            ));
        }
        if let ChunkSinkMode::Write(dir) = &spec.mode {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let place = recv.place();
        Ok(ChunkSink {
            checker: Checker::new(place.clone(), spec.keep_wrong),
            place,
            feed,
            held: Vec::new(),
            totals: SinkTotals::default(),
            start: None,
            first: None,
            first_bytes: 0,
            last: None,
            sampler: spec
                .plot
                .as_ref()
                .map(|_| Sampler::new(PLOT_EVERY_S, PLOT_SAMPLES)),
            failure: None,
            counters,
            values,
            spec,
        })
    }

    fn consume(&mut self, c: &Chunk) {
        let t = &mut self.totals;
        t.chunks += 1;
        t.present += c.present_count() as u64;
        t.present_slots += c.present.len() as u64;
        t.bytes += c.data.len() as u64;
        match &self.spec.mode {
            ChunkSinkMode::Discard => {}
            ChunkSinkMode::Check => {
                t.wrong_bytes += self.checker.check(c, |_| {});
            }
            ChunkSinkMode::Write(dir) => match write_chunk(dir, &self.place, c) {
                Ok(_) => t.files += 2,
                Err(e) => {
                    self.failure
                        .get_or_insert(format!("writing chunk {}: {e}", c.chunk_id));
                }
            },
        }
    }
}

impl ChunkSink {
    /// The totals as a plot sample at `now`.
    fn sample(&self, now: Instant) -> Sample {
        Sample {
            t: self.start.map_or(0.0, |s| (now - s).as_secs_f64()),
            bytes: self.totals.bytes,
            good: self.totals.present,
            total: self.totals.present_slots,
        }
    }

    /// Draws the plot (`PATH.svg`, `PATH.png`).
    fn draw(&self, path: &std::path::Path, sampler: &Sampler) -> Result<(), String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let title = format!(
            "chunk_sink of `{}`: heaps present in chunks",
            self.spec.from
        );
        for ext in ["svg", "png"] {
            crate::spead::plot::plot(
                &title,
                "heaps present in chunks",
                sampler.samples(),
                &path.with_extension(ext),
            )
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl Stage for ChunkSink {
    fn poll(&mut self, cx: &Context) -> Poll {
        let start = *self.start.get_or_insert(cx.now);
        if let Some(s) = &self.sampler {
            if s.due((cx.now - start).as_secs_f64()) {
                let sample = self.sample(cx.now);
                if let Some(s) = self.sampler.as_mut() {
                    s.push(sample);
                }
            }
        }
        let mut n = 0;
        let upstream_done = match &self.feed {
            Feed::Group(group) => {
                // Read before polling: the last member flushes the group's
                // window before it counts itself finished.
                let done = group.finished();
                let group = group.clone();
                while n < CHUNKS_PER_POLL {
                    let Some(c) = group.poll_chunk() else {
                        break;
                    };
                    self.consume(&c);
                    group.add_free_chunk(c);
                    n += 1;
                }
                done
            }
            Feed::Link(link) => {
                // Read the flag before looking at the ring: the receiver sets
                // it after its last push.
                let done = link.done.load(Ordering::Acquire);
                while let Feed::Link(link) = &mut self.feed {
                    if !self.held.is_empty() {
                        link.free.push_bulk(&mut self.held);
                    }
                    if n == CHUNKS_PER_POLL {
                        break;
                    }
                    let Some(c) = link.chunks.pop() else {
                        break;
                    };
                    self.consume(&c);
                    self.held.push(c);
                    n += 1;
                }
                done
            }
        };
        if n > 0 {
            if self.first.is_none() {
                self.first = Some(cx.now);
                self.first_bytes = self.totals.bytes;
            }
            self.last = Some(cx.now);
            self.counters.packets_in.add(n as u64);
            publish_sink(&self.values, &self.totals);
            return Poll::Busy;
        }
        if upstream_done && self.held.is_empty() {
            Poll::Finished
        } else {
            Poll::Idle
        }
    }

    fn is_finite(&self) -> bool {
        true
    }

    fn finish(&mut self) -> Result<(), String> {
        publish_sink(&self.values, &self.totals);
        if let (Some(path), Some(mut sampler)) = (self.spec.plot.clone(), self.sampler.take()) {
            // The last sample at the last chunk (or the last poll before it).
            let end = self.last.or(self.start);
            if let Some(end) = end {
                sampler.push_last(self.sample(end));
            }
            let drawn = self.draw(&path, &sampler);
            self.sampler = Some(sampler);
            drawn.map_err(|e| format!("plot {}: {e}", path.display()))?;
        }
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        let r = self.checker.report();
        if r.wrong_bytes > 0 {
            let w = &r.first_wrong[0];
            return Err(format!(
                "{} wrong bytes in {} heaps checked; the first in chunk {} heap {} (F-engine {}, timestamp {}) at offset {}: {:#04x}, expected {:#04x}",
                r.wrong_bytes, r.heaps_checked, w.chunk_id, w.heap_index, w.feng_id, w.timestamp, w.heap_offset, w.got, w.expected
            ));
        }
        Ok(())
    }

    fn detail(&self) -> Option<serde_json::Value> {
        let secs = match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let check: Option<&CheckReport> =
            matches!(self.spec.mode, ChunkSinkMode::Check).then(|| self.checker.report());
        let t = &self.totals;
        let plot = match (&self.spec.plot, &self.sampler) {
            (Some(p), Some(s)) => serde_json::json!({
                "svg": p.with_extension("svg"),
                "png": p.with_extension("png"),
                "intervals": s.samples().len().saturating_sub(1),
                "interval_s": s.every_s(),
            }),
            _ => serde_json::Value::Null,
        };
        Some(serde_json::json!({
            "mode": match self.spec.mode { ChunkSinkMode::Discard => "discard", ChunkSinkMode::Check => "check", ChunkSinkMode::Write(_) => "write" },
            "chunks": t.chunks,
            "present": t.present,
            "present_slots": t.present_slots,
            "fraction_present": t.fraction_present(),
            "bytes": t.bytes,
            // Over the time the chunks came in: the first poll's chunks at
            // its start, the rest within it (a few chunks would otherwise
            // read one chunk's worth fast).
            "gbps": if secs > 0.0 { t.bytes.saturating_sub(self.first_bytes) as f64 * 8.0 / secs / 1e9 } else { 0.0 },
            "seconds": secs,
            "wrong_bytes": check.map(|c| c.wrong_bytes),
            "check": check,
            "files": t.files,
            "failure": self.failure,
            "plot": plot,
        }))
    }
}
