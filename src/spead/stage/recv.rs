//! The `spead_recv` stage: packets into chunks (a stream or a group member),
//! handed to its sink; or, in heaps mode, into whole heaps (any SPEAD stream,
//! as spead2_recv assembles them), counted and optionally printed.

use super::*;
use crate::spead::assemble::{AssembleConfig, AssembleStats, Assembler, Heap};
use crate::spead::live::publish_heaps;
use crate::spead::wire::ItemValue;

/// What a `spead_recv` stage assembles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecvMode {
    /// F-engine heaps placed into chunks (katgpucbf's layout).
    #[default]
    Chunks,
    /// Any SPEAD heaps, assembled whole (no chunks, no geometry).
    Heaps,
}

/// How often a receiver samples its counters for its plot (doubled as the
/// samples fill [`RECV_PLOT_SAMPLES`]).
const RECV_PLOT_EVERY_S: f64 = 0.5;

/// Most samples a receiver keeps for its plot.
const RECV_PLOT_SAMPLES: usize = 4096;

/// A `spead_recv` stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeadRecvSpec {
    /// The F-engine geometry (and flavour) the stream has.
    pub fsim: FsimConfig,
    /// Heaps of each F-engine per chunk.
    pub heaps_per_fengine_per_chunk: u64,
    /// Live chunks (the window).
    pub max_chunks: usize,
    /// Chunks in all (at least `max_chunks`).
    pub n_chunks: usize,
    /// Live multi-packet heaps.
    pub max_heaps: usize,
    /// Headers in front of each packet.
    pub encap: Encap,
    /// End after this long without a packet (once one arrived).
    pub idle_timeout: Option<Duration>,
    /// Packets per burst.
    pub burst: usize,
    /// How payloads are copied into chunks.
    pub copy: CopyMode,
    /// With replicas (a receive group): what the group does when its window
    /// must move past a chunk a member still holds.
    pub eviction: Eviction,
    /// Chunks (the default) or whole heaps.
    pub mode: RecvMode,
    /// Heaps mode: print each heap's descriptors and items on stdout (off the
    /// hot path: only when asked for, as spead2_recv does).
    pub print: bool,
    /// Draw Gb/s and the fraction of heaps complete (heaps mode) or present
    /// in chunks (chunks mode) over time to this path with `.svg` and `.png`
    /// at the end.
    pub plot: Option<PathBuf>,
}

impl SpeadRecvSpec {
    /// The placement.
    pub fn place(&self) -> KatgpucbfPlace {
        KatgpucbfPlace::for_fsim(&self.fsim, self.heaps_per_fengine_per_chunk)
    }

    /// The values the stage publishes for live readers.
    pub fn value_defs(&self) -> Vec<crate::runtime::ValueDef> {
        match self.mode {
            RecvMode::Chunks => crate::spead::live::recv_defs(),
            RecvMode::Heaps => crate::spead::live::heap_defs(),
        }
    }

    /// The chunk stream's configuration.
    pub fn chunk_config(&self) -> ChunkConfig {
        let mut c = self.place().chunk_config(self.max_chunks, self.n_chunks);
        c.max_heaps = self.max_heaps;
        c.copy = self.copy;
        c
    }
}

/// The receiver's end of a chunk link.
pub struct RecvEnd {
    chunks: Producer<Chunk>,
    free: Consumer<Chunk>,
    done: Arc<AtomicBool>,
}

/// The sink's end of a chunk link.
pub struct SinkEnd {
    pub(super) chunks: Consumer<Chunk>,
    pub(super) free: Producer<Chunk>,
    pub(super) done: Arc<AtomicBool>,
}

/// A chunk link for `n_chunks` chunks: the receiver's end, the sink's end,
/// and the counters of its two rings (ready chunks, free chunks). Each ring
/// holds every chunk, so a push never fails.
pub fn chunk_link(n_chunks: usize) -> (RecvEnd, SinkEnd, [RingStatsHandle; 2]) {
    let size = n_chunks.max(2).next_power_of_two();
    let (cp, cc) = ring::<Chunk>(size);
    let (fp, fc) = ring::<Chunk>(size);
    let done = Arc::new(AtomicBool::new(false));
    let stats = [cp.stats_handle(), fp.stats_handle()];
    (
        RecvEnd {
            chunks: cp,
            free: fc,
            done: done.clone(),
        },
        SinkEnd {
            chunks: cc,
            free: fp,
            done,
        },
        stats,
    )
}

/// Why a receiver ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// An end-of-stream heap arrived.
    EndOfStream,
    /// No packet for `idle_timeout`.
    IdleTimeout,
    /// The pipeline stopped.
    Drain,
}

/// A replica's end of a receive group: its member, and whether a chunk sink
/// takes the group's chunks (otherwise the members give them back at once).
pub struct MemberEnd {
    /// The member.
    pub member: Member<KatgpucbfPlace>,
    /// Whether a chunk sink consumes the group's chunks.
    pub sink: bool,
}

/// What places a receiver's packets: its own chunk stream, or its member of
/// a receive group (a replicated `spead_recv`). One per stage, built once and
/// never moved on the hot path, so the size difference costs nothing, while
/// boxing the stream would cost the single receiver an indirection per packet.
#[allow(clippy::large_enum_variant)]
enum Receiver {
    One(ChunkStream<KatgpucbfPlace>),
    Member {
        member: Member<KatgpucbfPlace>,
        group: ChunkGroup,
        recycle: bool,
    },
    /// Heaps mode: whole heaps, no chunks.
    Heaps(Assembler),
}

impl Receiver {
    #[inline]
    fn push(&mut self, data: &[u8]) -> Push {
        match self {
            Receiver::One(s) => s.push(0, data),
            Receiver::Member { member, .. } => member.push(0, data),
            // Heaps are offered by `SpeadRecv::offer` to the assembler, never here.
            Receiver::Heaps(_) => Push::Accepted,
        }
    }

    /// The chunk stream's counters (a heaps-mode receiver has none: its
    /// counters are [`Receiver::heap_stats`]).
    fn stats(&self) -> &ChunkStats {
        static NONE: std::sync::OnceLock<ChunkStats> = std::sync::OnceLock::new();
        match self {
            Receiver::One(s) => s.stats(),
            Receiver::Member { member, .. } => member.stats(),
            Receiver::Heaps(_) => NONE.get_or_init(ChunkStats::default),
        }
    }

    fn heap_stats(&self) -> Option<&AssembleStats> {
        match self {
            Receiver::Heaps(a) => Some(a.stats()),
            _ => None,
        }
    }

    /// Payload bytes received so far (placed in chunks, or in heaps).
    fn bytes(&self) -> u64 {
        self.heap_stats().map_or(self.stats().bytes, |h| h.bytes)
    }

    /// The counters as a plot sample at `t`: heaps complete of those ended,
    /// or heaps present of the slots of delivered chunks.
    fn sample(&self, t: f64) -> Sample {
        match self.heap_stats() {
            Some(h) => Sample {
                t,
                bytes: h.bytes,
                good: h.heaps_complete,
                total: h.heaps_complete + h.heaps_evicted + h.heaps_flushed + h.heaps_unsized,
            },
            None => {
                let s = self.stats();
                Sample {
                    t,
                    bytes: s.bytes,
                    good: s.present,
                    total: s.present_slots,
                }
            }
        }
    }
}

/// Gb/s over the time the packets arrived in: the bytes counted after the
/// first burst (`first_bytes`, which arrived at the span's start) over
/// `span_s`, from the first burst to the last; over the whole receive
/// (`whole_s`) when everything came in one burst.
fn arrival_gbps(bytes: u64, first_bytes: u64, span_s: f64, whole_s: f64) -> f64 {
    if span_s > 0.0 {
        bytes.saturating_sub(first_bytes) as f64 * 8.0 / span_s / 1e9
    } else if whole_s > 0.0 {
        bytes as f64 * 8.0 / whole_s / 1e9
    } else {
        0.0
    }
}

/// Prints a heap's descriptors and items (heaps mode with `print`).
fn print_heap(h: &Heap) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "heap {} (sender {}):", h.cnt, h.sender);
    for d in h.descriptors() {
        let _ = writeln!(
            out,
            "  descriptor {:#x} {:?}: {:?} shape {:?} format {:?}",
            d.id, d.name, d.description, d.shape, d.format
        );
    }
    for it in h.items() {
        let _ = match it.value {
            ItemValue::Immediate(v) => writeln!(out, "  item {:#x} = {v}", it.id),
            ItemValue::Bytes(b) => writeln!(out, "  item {:#x}: {} bytes", it.id, b.len()),
        };
    }
}

/// Of the packets a burst skipped (`(index, not UDP)`, else of another
/// flavour), those before the one that `stalled`: counted now, as
/// `(not UDP, wrong flavour)`; the rest are counted when the burst is
/// offered again from there.
fn skipped_before(skipped: &[(usize, bool)], stalled: Option<usize>) -> (u64, u64) {
    skipped
        .iter()
        .filter(|s| stalled.is_none_or(|at| s.0 < at))
        .fold(
            (0, 0),
            |(u, f), s| if s.1 { (u + 1, f) } else { (u, f + 1) },
        )
}

/// The `spead_recv` stage (or one replica of it: a member of a receive group).
pub struct SpeadRecv {
    spec: SpeadRecvSpec,
    input: Input,
    rx: Receiver,
    link: Option<RecvEnd>,
    held: Vec<Chunk>,
    burst: Burst,
    pending_at: Option<usize>,
    cache: PoolCache,
    flavour_byte: u8,
    not_udp: u64,
    wrong_flavour: u64,
    stalled_polls: u64,
    after_end: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    /// Bytes counted by the end of the first burst: they arrived at the
    /// span's start, so Gb/s counts only those after.
    first_bytes: Option<u64>,
    /// The first poll and the latest: the whole receive.
    started: Option<Instant>,
    last_poll: Option<Instant>,
    sampler: Option<Sampler>,
    /// The last poll that had packets in hand (received, or held back by a
    /// stall): idle time counts from here, not from `last`, or a stall longer
    /// than `idle_timeout` (a lossless group waiting for a member whose lcore
    /// was descheduled) would end the stream the moment it cleared.
    worked: Option<Instant>,
    drain_since: Option<Instant>,
    end: Option<EndReason>,
    /// An end-of-stream heap arrived here (a group member keeps going until
    /// the group has one per member).
    stop_seen: bool,
    /// The first poll (a group member's idle time starts there).
    polled: Option<Instant>,
    done_signalled: bool,
    counters: Arc<CacheAligned<StageCounters>>,
    values: Arc<StageValues>,
}

impl SpeadRecv {
    /// A receiver from `input`, handing chunks to `link` (or, without one,
    /// recycling them at once), publishing its stream's counters in `values`
    /// (made from [`crate::spead::live::recv_defs`]).
    pub fn new(
        spec: SpeadRecvSpec,
        input: Input,
        link: Option<RecvEnd>,
        cache: PoolCache,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> SpeadRecv {
        let rx = match spec.mode {
            RecvMode::Chunks => Receiver::One(ChunkStream::new(spec.chunk_config(), spec.place())),
            RecvMode::Heaps => Receiver::Heaps(Assembler::new(AssembleConfig {
                max_heaps: spec.max_heaps,
                ..AssembleConfig::default()
            })),
        };
        SpeadRecv::with(spec, input, rx, link, cache, counters, values)
    }

    /// A replica of a replicated receiver: `end`'s member of the receive
    /// group, on `input` (its own queue), publishing its own counters in
    /// `values`.
    pub fn member(
        spec: SpeadRecvSpec,
        input: Input,
        end: MemberEnd,
        cache: PoolCache,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> SpeadRecv {
        let rx = Receiver::Member {
            group: end.member.group(),
            member: end.member,
            recycle: !end.sink,
        };
        SpeadRecv::with(spec, input, rx, None, cache, counters, values)
    }

    fn with(
        spec: SpeadRecvSpec,
        input: Input,
        rx: Receiver,
        link: Option<RecvEnd>,
        cache: PoolCache,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> SpeadRecv {
        SpeadRecv {
            rx,
            flavour_byte: (spec.fsim.flavour.heap_address_bits() / 8) as u8,
            input,
            link,
            held: Vec::with_capacity(spec.n_chunks),
            burst: Burst::new(),
            pending_at: None,
            cache,
            not_udp: 0,
            wrong_flavour: 0,
            stalled_polls: 0,
            after_end: 0,
            first: None,
            last: None,
            first_bytes: None,
            started: None,
            last_poll: None,
            sampler: spec
                .plot
                .as_ref()
                .map(|_| Sampler::new(RECV_PLOT_EVERY_S, RECV_PLOT_SAMPLES)),
            worked: None,
            drain_since: None,
            end: None,
            stop_seen: false,
            polled: None,
            done_signalled: false,
            counters,
            values,
            spec,
        }
    }

    /// Publishes the counters for live readers (a few relaxed stores).
    fn publish(&self) {
        match self.rx.heap_stats() {
            Some(h) => publish_heaps(&self.values, h, self.not_udp),
            None => publish_recv(
                &self.values,
                self.rx.stats(),
                self.not_udp,
                self.wrong_flavour,
            ),
        }
    }

    /// Takes chunks back from the sink and hands flushed ones to it; returns
    /// whether anything moved.
    fn exchange(&mut self) -> bool {
        let mut moved = false;
        let stream = match &mut self.rx {
            Receiver::One(s) => s,
            Receiver::Member {
                member,
                group,
                recycle,
            } => {
                // Let go of what the group's window left (one atomic load);
                // without a sink, give retired chunks straight back.
                member.sync();
                if *recycle {
                    while let Some(c) = group.poll_chunk() {
                        group.add_free_chunk(c);
                        moved = true;
                    }
                }
                return moved;
            }
            Receiver::Heaps(_) => return false,
        };
        if let Some(l) = self.link.as_mut() {
            moved |= l.free.pop_bulk(usize::MAX, |c| stream.add_free_chunk(c)) > 0;
        }
        while let Some(c) = stream.poll_chunk() {
            self.held.push(c);
        }
        if !self.held.is_empty() {
            moved = true;
            match self.link.as_mut() {
                Some(l) => {
                    l.chunks.push_bulk(&mut self.held);
                }
                None => {
                    for c in self.held.drain(..) {
                        stream.add_free_chunk(c);
                    }
                }
            }
        }
        moved
    }

    /// Offers the burst's packets from `at`; returns where it stalled, if it did.
    fn offer(&mut self, at: usize) -> Option<usize> {
        if matches!(self.end, Some(EndReason::IdleTimeout | EndReason::Drain)) {
            // The window was flushed: later packets are counted, not placed.
            self.after_end += self.burst.len().saturating_sub(at) as u64;
            return None;
        }
        if let Receiver::Heaps(asm) = &mut self.rx {
            // Any flavour: the assembler reads each packet's own.
            for pkt in self.burst.as_slice().iter().skip(at) {
                let Some(data) = self.spec.encap.strip(pkt.data()) else {
                    self.not_udp += 1;
                    continue;
                };
                let _ = asm.push(0, data);
                while let Some(h) = asm.poll_heap() {
                    if self.spec.print {
                        print_heap(&h);
                    }
                    asm.recycle(h);
                }
            }
            if asm.stats().stopped && self.end.is_none() {
                self.stop_seen = true;
                self.end_now(EndReason::EndOfStream);
            }
            return None;
        }
        if let Receiver::Member { member, .. } = &mut self.rx {
            // A member places the burst as one (its claims first, its copies
            // after: `Member::push_burst`).
            let mut data: [&[u8]; BURST_MAX] = [&[]; BURST_MAX];
            let mut index = [0usize; BURST_MAX];
            // Packets not offered: (index, not UDP).
            let mut skipped = [(0usize, false); BURST_MAX];
            let (mut n, mut k) = (0, 0);
            for (i, pkt) in self.burst.as_slice().iter().enumerate().skip(at) {
                match self.spec.encap.strip(pkt.data()) {
                    Some(d)
                        if !(d.len() >= wire::WORD
                            && d[0] == 0x53
                            && d[3] != self.flavour_byte) =>
                    {
                        data[n] = d;
                        index[n] = i;
                        n += 1;
                    }
                    other => {
                        skipped[k] = (i, other.is_none());
                        k += 1;
                    }
                }
            }
            let r = member.push_burst(0, &data[..n]);
            self.stop_seen |= r.stopped;
            let stalled = (r.taken < n).then(|| index[r.taken]);
            let (not_udp, wrong_flavour) = skipped_before(&skipped[..k], stalled);
            self.not_udp += not_udp;
            self.wrong_flavour += wrong_flavour;
            return stalled;
        }
        for (i, pkt) in self.burst.as_slice().iter().enumerate().skip(at) {
            let Some(data) = self.spec.encap.strip(pkt.data()) else {
                self.not_udp += 1;
                continue;
            };
            // Packets of another flavour are counted and dropped.
            if data.len() >= wire::WORD && data[0] == 0x53 && data[3] != self.flavour_byte {
                self.wrong_flavour += 1;
                continue;
            }
            match self.rx.push(data) {
                Push::Stall => return Some(i),
                Push::Stopped => {
                    // A group member's stop only counts: the group ends
                    // once it has seen one per member (checked each poll).
                    if matches!(self.rx, Receiver::One(_)) {
                        self.end.get_or_insert(EndReason::EndOfStream);
                    }
                    self.stop_seen = true;
                }
                Push::Accepted | Push::Discarded(_) => {}
            }
        }
        None
    }

    fn end_now(&mut self, why: EndReason) {
        match &mut self.rx {
            Receiver::One(s) => s.flush(),
            Receiver::Member { member, .. } => {
                member.finish();
            }
            Receiver::Heaps(asm) => {
                asm.flush();
                while let Some(h) = asm.poll_heap() {
                    if self.spec.print {
                        print_heap(&h);
                    }
                    asm.recycle(h);
                }
            }
        }
        self.end = Some(why);
    }
}

impl Stage for SpeadRecv {
    fn poll(&mut self, cx: &Context) -> Poll {
        let now = cx.now;
        let start = *self.started.get_or_insert(now);
        self.last_poll = Some(now);
        if self
            .sampler
            .as_ref()
            .is_some_and(|s| s.due((now - start).as_secs_f64()))
        {
            let sample = self.rx.sample((now - start).as_secs_f64());
            if let Some(s) = self.sampler.as_mut() {
                s.push(sample);
            }
        }
        let mut busy = self.exchange();
        if self.pending_at.is_none() {
            let n = self.input.recv(now, &mut self.burst, self.spec.burst);
            if n > 0 {
                self.counters.packets_in.add(n as u64);
                self.counters.bytes_in.add(self.burst.bytes());
                self.first.get_or_insert(now);
                self.last = Some(now);
                self.pending_at = Some(0);
            }
        }
        if let Some(mut at) = self.pending_at {
            busy = true;
            self.worked = Some(now);
            let mut stalled = self.offer(at);
            if let Some(s) = stalled {
                // Hand over what is ready, take back what returned, try once more.
                self.exchange();
                at = s;
                stalled = self.offer(at);
            }
            match stalled {
                Some(s) => {
                    self.stalled_polls += 1;
                    self.pending_at = Some(s);
                }
                None => {
                    self.pending_at = None;
                    self.cache.free_bulk(&mut self.burst);
                }
            }
            if self.first_bytes.is_none() {
                self.first_bytes = Some(self.rx.bytes());
            }
            self.exchange();
        }
        if self.end.is_none() && self.pending_at.is_none() {
            if let Receiver::Member { group, .. } = &self.rx {
                if group.stopped() {
                    self.end_now(EndReason::EndOfStream);
                }
            }
        }
        if self.end.is_none() && self.pending_at.is_none() {
            // A group member counts its idle time from its first poll even
            // before any packet: one that receives nothing (its share of
            // the senders went to another socket) must not hold a lossless
            // group for ever.
            let since = match self.rx {
                Receiver::Member { .. } => self.worked.or(Some(*self.polled.get_or_insert(now))),
                Receiver::One(_) | Receiver::Heaps(_) => self.worked,
            };
            if let (Some(t), Some(last)) = (self.spec.idle_timeout, since) {
                if now - last >= t {
                    // A member whose own stream ended with a stop stops
                    // waiting for the others' stops: its stream still ended
                    // by end of stream.
                    self.end_now(if self.stop_seen {
                        EndReason::EndOfStream
                    } else {
                        EndReason::IdleTimeout
                    });
                }
            }
            if cx.draining && self.end.is_none() {
                let since = *self.drain_since.get_or_insert(now);
                let quiet = self
                    .worked
                    .map_or(since, |l| if l > since { l } else { since });
                if now - quiet >= DRAIN_GRACE {
                    self.end_now(EndReason::Drain);
                }
            }
            if self.end.is_some() {
                busy |= self.exchange();
            }
        }
        if self.end.is_some() && !self.done_signalled && self.held.is_empty() {
            if let Some(l) = &self.link {
                l.done.store(true, Ordering::Release);
            }
            self.done_signalled = true;
        }
        if busy {
            self.publish();
        }
        if self.done_signalled {
            Poll::Finished
        } else if busy {
            Poll::Busy
        } else {
            Poll::Idle
        }
    }

    fn is_finite(&self) -> bool {
        true
    }

    fn finish(&mut self) -> Result<(), String> {
        // The last values, equal to the report's.
        self.publish();
        if let (Some(path), Some(mut sampler)) = (self.spec.plot.clone(), self.sampler.take()) {
            // The last sample at the last packet (or the last poll).
            if let (Some(start), Some(end)) = (self.started, self.last.or(self.last_poll)) {
                sampler.push_last(self.rx.sample((end - start).as_secs_f64()));
            }
            let drawn = self.draw(&path, &sampler);
            self.sampler = Some(sampler);
            drawn.map_err(|e| format!("plot {}: {e}", path.display()))?;
        }
        Ok(())
    }

    fn detail(&self) -> Option<serde_json::Value> {
        if let Some(h) = self.rx.heap_stats() {
            return Some(self.heap_detail(h));
        }
        let s: &ChunkStats = self.rx.stats();
        // A group's first member also reports the group: its members'
        // counters added up and the chunks it delivered.
        let group = match &self.rx {
            Receiver::Member { member, group, .. } if member.index() == 0 => {
                let t = group.totals();
                Some(serde_json::json!({
                    "members": group.members(),
                    "members_finished": group.finished(),
                    "eviction": group.eviction(),
                    "heaps_complete": t.heaps_complete,
                    "heaps_incomplete": t.heaps_incomplete_evicted + t.heaps_incomplete_flushed,
                    "chunks": t.chunks,
                    "present": t.present,
                    "present_slots": t.present_slots,
                    "fraction_present": t.fraction_present(),
                    "group": group.stats(),
                    "stream": t,
                }))
            }
            _ => None,
        };
        let secs = self.span_s();
        let held = self
            .pending_at
            .map_or(0, |at| self.burst.len().saturating_sub(at));
        Some(serde_json::json!({
            "packets": s.packets,
            "heaps_complete": s.heaps_complete,
            "heaps_incomplete": s.heaps_incomplete_evicted + s.heaps_incomplete_flushed,
            "heaps_too_old": s.heaps_too_old,
            "heaps_rejected": s.heaps_rejected,
            "chunks": s.chunks,
            "fraction_present": s.fraction_present(),
            "gbps": self.gbps(),
            "seconds": secs,
            "packets_not_udp": self.not_udp,
            "packets_wrong_flavour": self.wrong_flavour,
            "packets_held_at_stop": held,
            "stalled_polls": self.stalled_polls,
            "packets_after_end": self.after_end,
            "ended_by": self.end,
            "stream": s,
            "receive_group": group,
            "plot": self.plot_detail(),
        }))
    }
}

impl SpeadRecv {
    /// From the first burst to the last (s).
    fn span_s(&self) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }

    /// Gb/s over the time the packets arrived in (see [`arrival_gbps`]).
    fn gbps(&self) -> f64 {
        let whole = match (self.started, self.last_poll) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        arrival_gbps(
            self.rx.bytes(),
            self.first_bytes.unwrap_or(0),
            self.span_s(),
            whole,
        )
    }

    /// A heaps-mode receiver's detail: the assembler's counters.
    fn heap_detail(&self, h: &AssembleStats) -> serde_json::Value {
        serde_json::json!({
            "mode": "heaps",
            "packets": h.packets,
            "heaps_complete": h.heaps_complete,
            "heaps_unsized": h.heaps_unsized,
            "heaps_evicted": h.heaps_evicted,
            "heaps_flushed": h.heaps_flushed,
            "packets_duplicate": h.packets_duplicate,
            "packets_malformed": h.packets_malformed,
            "gbps": self.gbps(),
            "seconds": self.span_s(),
            "packets_not_udp": self.not_udp,
            "packets_after_end": self.after_end,
            "ended_by": self.end,
            "stream": h,
            "plot": self.plot_detail(),
        })
    }

    fn plot_detail(&self) -> serde_json::Value {
        match (&self.spec.plot, &self.sampler) {
            (Some(p), Some(s)) => serde_json::json!({
                "svg": p.with_extension("svg"),
                "png": p.with_extension("png"),
                "intervals": s.samples().len().saturating_sub(1),
                "interval_s": s.every_s(),
            }),
            _ => serde_json::Value::Null,
        }
    }

    /// Draws the plot (`PATH.svg`, `PATH.png`).
    fn draw(&self, path: &std::path::Path, sampler: &Sampler) -> Result<(), String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let what = match self.spec.mode {
            RecvMode::Heaps => "heaps complete",
            RecvMode::Chunks => "heaps present in chunks",
        };
        let title = format!("spead_recv: {what}");
        for ext in ["svg", "png"] {
            crate::spead::plot::plot(&title, what, sampler.samples(), &path.with_extension(ext))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_stalled_burst_counts_what_it_skipped_before_the_stall_only() {
        // Packets 1 and 4 not UDP, 2 and 6 of another flavour.
        let skipped = [(1, true), (2, false), (4, true), (6, false)];
        assert_eq!(skipped_before(&skipped, None), (2, 2));
        assert_eq!(skipped_before(&skipped, Some(4)), (1, 1));
        assert_eq!(skipped_before(&skipped, Some(0)), (0, 0));
        // Offered again from 4 after the stall: the rest, once.
        let again: Vec<_> = skipped.iter().copied().filter(|s| s.0 >= 4).collect();
        assert_eq!(skipped_before(&again, None), (1, 1));
    }

    #[test]
    fn gbps_is_over_the_time_the_packets_arrived_in() {
        assert_eq!(arrival_gbps(0, 0, 0.0, 10.0), 0.0);
        // A first burst of 1000 bytes at 3 s (after waiting for the sender),
        // then 1000 bytes every 1 ms to 4 s, then nothing until 10 s.
        assert!((arrival_gbps(1_001_000, 1000, 1.0, 10.0) - 0.008).abs() < 1e-9);
        // Everything in one burst: no span, the whole receive.
        assert_eq!(arrival_gbps(1000, 1000, 0.0, 2.0), 1000.0 * 8.0 / 2.0 / 1e9);
    }
}
