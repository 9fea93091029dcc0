//! The SPEAD stages: `spead_send`, `spead_recv` and `chunk_sink`.
//!
//! - `spead_send` builds packets (the F-engine simulator's or generic heaps)
//!   straight into pool buffers (or a dpdk port's mbufs), paced at a bit rate,
//!   for a number of heaps or until the pipeline stops, then the end-of-stream
//!   heap. What the output refuses is offered again on the next poll (back
//!   pressure), never dropped.
//! - `spead_recv` offers every packet to a [`ChunkStream`] with katgpucbf's
//!   placement and hands the chunks it flushes to its `chunk_sink` through a
//!   chunk ring; the sink gives them back through a free ring, so memory stays
//!   bounded. On [`Push::Stall`] (no free chunk) the packets of the burst are
//!   held, not dropped, and offered again once a chunk came back; the port
//!   behind backs up meanwhile (and counts what it drops).
//! - `chunk_sink` discards chunks, checks them against the simulator's
//!   payload (every wrong byte counted, the first ones located), or writes
//!   them as files (raw plus a JSON sidecar).
//!
//! A receiver ends at the end-of-stream heap, after `idle_timeout` without a
//! packet (if set), or when the pipeline drains; it then flushes its window,
//! hands every chunk over and tells its sink, which ends once it has consumed
//! them all.
//!
//! Long on purpose: the three SPEAD stages share their chunk link, counters and
//! drain protocol; split them into stage/{send,recv,sink}.rs when one grows.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::check::{write_chunk, CheckReport, Checker};
use super::chunk::{Chunk, ChunkConfig, ChunkStats, ChunkStream, KatgpucbfPlace, Push};
use super::fsim::{Fsim, FsimConfig};
use super::group::{ChunkGroup, Eviction, Member};
use super::live::{publish_recv, publish_sink, SinkTotals};
use super::plot::{Sample, Sampler};
use super::send::{Pacer, SendHeap};
use super::wire::{self, ctrl, emit_packet, id, Flavour, ItemPointer, WORD};
use crate::buf::copy::CopyMode;
use crate::buf::counter::CacheAligned;
use crate::buf::{ring, Burst, Consumer, PoolCache, Producer, RingStatsHandle};
use crate::runtime::basic::{ipv4_checksum, udp_template, Input, Output};
use crate::runtime::{Context, Poll, Stage, StageCounters, StageValues};
use crate::time::Instant;

/// Bytes of the Ethernet, IPv4 and UDP headers of [`Encap::Udp`].
pub const UDP_HEADERS: usize = 42;

/// How long a draining receiver waits without a packet before it flushes.
const DRAIN_GRACE: Duration = Duration::from_millis(5);

/// Chunks a sink consumes per poll at most.
const CHUNKS_PER_POLL: usize = 4;

/// What carries a SPEAD packet in a port's packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encap {
    /// The packet is the SPEAD packet (mem wires, udp ports: datagram payloads).
    None,
    /// Ethernet + IPv4 + UDP headers in front (dpdk ports carry frames).
    Udp,
}

impl Encap {
    /// Header bytes in front of the SPEAD packet.
    pub fn header_len(self) -> usize {
        match self {
            Encap::None => 0,
            Encap::Udp => UDP_HEADERS,
        }
    }

    /// The SPEAD packet inside `frame`, or `None` when `frame` is not
    /// Ethernet/IPv4/UDP (bounds-checked; never panics).
    #[inline]
    pub fn strip(self, frame: &[u8]) -> Option<&[u8]> {
        match self {
            Encap::None => Some(frame),
            Encap::Udp => {
                if frame.len() < UDP_HEADERS || frame[12..14] != [0x08, 0x00] {
                    return None;
                }
                let ihl = usize::from(frame[14] & 0x0f) * 4;
                if frame[14] >> 4 != 4 || ihl < 20 || frame[23] != 17 {
                    return None;
                }
                let udp = 14 + ihl;
                let b = frame.get(udp + 4..udp + 6)?;
                let len = usize::from(u16::from_be_bytes([b[0], b[1]]));
                frame.get(udp + 8..udp + len.max(8))
            }
        }
    }
}

/// Writes Ethernet/IPv4/UDP headers for a `payload`-byte datagram into the
/// first [`UDP_HEADERS`] bytes of `buf` (from [`udp_template`], lengths and
/// IPv4 checksum set).
fn write_udp_headers(buf: &mut [u8], template: &[u8; UDP_HEADERS], payload: usize) {
    let h = &mut buf[..UDP_HEADERS];
    h.copy_from_slice(template);
    let ip_len = (20 + 8 + payload) as u16;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    h[24..26].copy_from_slice(&[0, 0]);
    let sum = ipv4_checksum(&h[14..34]);
    h[24..26].copy_from_slice(&sum.to_be_bytes());
    h[38..40].copy_from_slice(&(8 + payload as u16).to_be_bytes());
}

/// What a `spead_send` stage sends.
#[derive(Debug, Clone, PartialEq)]
pub enum SendSource {
    /// The F-engine simulator (its `flavour` is the stage's).
    Fsim(FsimConfig),
    /// Generic heaps as `linerate spead send` sends them: item 0x1000 the heap
    /// index, item 0x1001 `heap_size` bytes, descriptors in the first heap.
    Heaps {
        /// Payload bytes of item 0x1001.
        heap_size: usize,
        /// Largest SPEAD packet.
        packet_size: usize,
    },
}

/// A `spead_send` stage's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeadSendSpec {
    /// What to send.
    pub source: SendSource,
    /// The flavour.
    pub flavour: Flavour,
    /// Heaps (generic) or timestamps (simulator: `n_ants` heaps each); `None`
    /// sends until the pipeline stops.
    pub count: Option<u64>,
    /// Rate in bits/s of SPEAD packet bytes; `None` is as fast as possible.
    pub rate_bps: Option<f64>,
    /// Send the end-of-stream heap at the end.
    pub end_of_stream: bool,
    /// Headers in front of each packet.
    pub encap: Encap,
    /// Packets per burst.
    pub burst: usize,
    /// Replica `k` of `n` (`(k, n)`): the simulator sends antennas `k`, `k +
    /// n`, ... only; `(0, 1)` sends them all.
    pub antennas: (usize, usize),
}

impl SpeadSendSpec {
    /// The largest SPEAD packet this stage builds.
    pub fn max_spead_packet(&self) -> usize {
        match &self.source {
            SendSource::Fsim(c) => c.max_packet(),
            SendSource::Heaps { packet_size, .. } => *packet_size,
        }
        .max(WORD * 6)
    }

    /// The largest packet (headers included) the stage puts in a buffer.
    pub fn max_packet(&self) -> usize {
        self.max_spead_packet() + self.encap.header_len()
    }

    /// Heaps in all (end of stream excluded), if finite.
    pub fn total_heaps(&self) -> Option<u64> {
        let per = match &self.source {
            SendSource::Fsim(c) => {
                let (k, n) = self.antennas;
                (c.n_ants.saturating_sub(k) as u64).div_ceil(n.max(1) as u64)
            }
            SendSource::Heaps { .. } => 1,
        };
        self.count.map(|c| c * per)
    }
}

/// Generic heaps, built without allocation after the first.
struct Generic {
    flavour: Flavour,
    heap_size: usize,
    packet_size: usize,
    /// Heap 0: descriptors, index and data.
    first_ptrs: Vec<ItemPointer>,
    first_payload: Vec<u8>,
    /// Byte `i` is `i as u8`: heap k's data is `pattern[k % 256..][..heap_size]`.
    pattern: Vec<u8>,
    ptrs: [ItemPointer; 2],
    k: u64,
    offset: usize,
    first: bool,
}

impl Generic {
    fn new(flavour: Flavour, heap_size: usize, packet_size: usize) -> Result<Generic, String> {
        let mut h = SendHeap::new(1);
        for d in super::send::generic_descriptors(flavour) {
            h = h.descriptor(flavour, &d).map_err(|e| e.to_string())?;
        }
        let data: Vec<u8> = (0..heap_size).map(|i| i as u8).collect();
        let h = h.immediate(0x1000, 0).bytes(0x1001, data);
        let (first_ptrs, first_payload) = h.layout(flavour).map_err(|e| e.to_string())?;
        if WORD * (5 + first_ptrs.len()) >= packet_size {
            return Err(format!(
                "{packet_size}-byte packets cannot hold the first heap's {} item pointers",
                first_ptrs.len() + 4
            ));
        }
        Ok(Generic {
            flavour,
            heap_size,
            packet_size,
            first_ptrs,
            first_payload,
            pattern: (0..heap_size + 256).map(|i| i as u8).collect(),
            ptrs: [ItemPointer(0); 2],
            k: 0,
            offset: 0,
            first: true,
        })
    }

    /// Writes the next packet; returns its length and whether it ended a heap.
    fn next_packet(&mut self, buf: &mut [u8]) -> Result<(usize, bool), wire::Error> {
        let f = self.flavour;
        let (ptrs, payload): (&[ItemPointer], &[u8]) = if self.k == 0 {
            (&self.first_ptrs, &self.first_payload)
        } else {
            if self.first {
                self.ptrs = [
                    f.immediate(0x1000, self.k & f.max_value())?,
                    f.addressed(0x1001, 0)?,
                ];
            }
            let s = (self.k % 256) as usize;
            (&self.ptrs, &self.pattern[s..s + self.heap_size])
        };
        let ptrs = if self.first { ptrs } else { &[] };
        let room = self.packet_size - WORD * (5 + ptrs.len());
        let end = (self.offset + room).min(payload.len());
        let n = emit_packet(
            buf,
            f,
            (self.k + 1) & f.max_value(),
            Some(payload.len() as u64),
            self.offset as u64,
            ptrs,
            &payload[self.offset..end],
        )?;
        self.first = false;
        self.offset = end;
        let done = end >= payload.len();
        if done {
            self.k += 1;
            self.offset = 0;
            self.first = true;
        }
        Ok((n, done))
    }
}

enum Source {
    Fsim {
        sim: Box<Fsim>,
        per_heap: u64,
        packets: u64,
    },
    Heaps(Box<Generic>),
}

/// The `spead_send` stage.
pub struct SpeadSend {
    spec: SpeadSendSpec,
    source: Source,
    out: Output,
    cache: PoolCache,
    burst: Burst,
    pacer: Option<Pacer>,
    template: [u8; UDP_HEADERS],
    heaps: u64,
    packets: u64,
    bytes: u64,
    eos_sent: bool,
    no_buffer: u64,
    first: Option<Instant>,
    last: Option<Instant>,
    failure: Option<String>,
    counters: Arc<CacheAligned<StageCounters>>,
}

impl SpeadSend {
    /// A sender to `out`; fails on parameters the simulator or the heap
    /// layout cannot take.
    pub fn new(
        spec: SpeadSendSpec,
        out: Output,
        cache: PoolCache,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Result<SpeadSend, String> {
        let source = match &spec.source {
            SendSource::Fsim(c) => {
                let c = FsimConfig {
                    flavour: spec.flavour,
                    ..c.clone()
                };
                let (k, n) = spec.antennas;
                Source::Fsim {
                    per_heap: c.packets_per_heap() as u64,
                    sim: Box::new(Fsim::new(c)?.antennas(k, n)?),
                    packets: 0,
                }
            }
            SendSource::Heaps {
                heap_size,
                packet_size,
            } => Source::Heaps(Box::new(Generic::new(
                spec.flavour,
                *heap_size,
                *packet_size,
            )?)),
        };
        let mut template = [0u8; UDP_HEADERS];
        template.copy_from_slice(&udp_template(64)[..UDP_HEADERS]);
        Ok(SpeadSend {
            source,
            out,
            cache,
            burst: Burst::new(),
            pacer: None,
            template,
            heaps: 0,
            packets: 0,
            bytes: 0,
            eos_sent: false,
            no_buffer: 0,
            first: None,
            last: None,
            failure: None,
            counters,
            spec,
        })
    }

    /// Whether the last packet sent ended a heap.
    fn at_heap_boundary(&self) -> bool {
        match &self.source {
            Source::Fsim {
                per_heap, packets, ..
            } => packets % per_heap == 0,
            Source::Heaps(g) => g.first,
        }
    }

    /// Whether to send more data: heaps are left, and when draining, only to
    /// complete the heap under way.
    fn data_left(&self, draining: bool) -> bool {
        (!draining || !self.at_heap_boundary())
            && self.spec.total_heaps().is_none_or(|t| self.heaps < t)
    }

    fn finished(&self, draining: bool) -> bool {
        self.failure.is_some()
            || (!self.data_left(draining)
                && (self.eos_sent || !self.spec.end_of_stream)
                && self.burst.is_empty())
    }

    /// Builds the next packet into the last packet of the burst.
    fn build(&mut self, data: bool) -> Result<usize, String> {
        let hdr = self.spec.encap.header_len();
        let Some(pkt) = self.burst.iter_mut().next_back() else {
            return Err("internal: no packet to build into".into());
        };
        let room = pkt.spare_capacity();
        if room.len() < self.spec.max_packet() {
            return Err(format!(
                "a {}-byte buffer cannot hold {}-byte packets",
                room.len(),
                self.spec.max_packet()
            ));
        }
        let spead = &mut room[hdr..];
        let len = if data {
            match &mut self.source {
                Source::Fsim {
                    sim,
                    per_heap,
                    packets,
                } => {
                    let (n, _) = sim.next_packet(spead).map_err(|e| e.to_string())?;
                    *packets += 1;
                    if *packets % *per_heap == 0 {
                        self.heaps += 1;
                    }
                    n
                }
                Source::Heaps(g) => {
                    let (n, done) = g.next_packet(spead).map_err(|e| e.to_string())?;
                    if done {
                        self.heaps += 1;
                    }
                    n
                }
            }
        } else {
            let f = self.spec.flavour;
            let cnt = (self.spec.total_heaps().unwrap_or(self.heaps) + 1) & f.max_value();
            let stop = f
                .immediate(id::STREAM_CTRL, ctrl::STOP)
                .map_err(|e| e.to_string())?;
            self.eos_sent = true;
            emit_packet(spead, f, cnt, Some(0), 0, &[stop], &[]).map_err(|e| e.to_string())?
        };
        if self.spec.encap == Encap::Udp {
            write_udp_headers(room, &self.template, len);
        }
        pkt.set_len(hdr + len).map_err(|e| e.to_string())?;
        Ok(len)
    }
}

impl SpeadSend {
    /// Sends the burst and counts what left (the output may keep a tail).
    fn send_counted(&mut self, now: Instant) -> usize {
        let bytes = self.burst.bytes();
        let sent = self.out.send(now, &mut self.burst);
        let kept = if self.burst.is_empty() {
            0
        } else {
            self.burst.bytes()
        };
        self.counters.packets_out.add(sent as u64);
        self.counters.bytes_out.add(bytes - kept);
        sent
    }
}

impl Stage for SpeadSend {
    fn poll(&mut self, cx: &Context) -> Poll {
        let now = cx.now;
        let mut busy = false;
        if !self.burst.is_empty() {
            // What the output refused last time goes first (back pressure).
            let before = self.burst.len();
            let sent = self.send_counted(now);
            if !self.burst.is_empty() {
                return if sent > 0 { Poll::Busy } else { Poll::Idle };
            }
            busy = before > 0;
        }
        if self.finished(cx.draining) {
            self.out.flush(now);
            return Poll::Finished;
        }
        if self.pacer.is_none() {
            if let Some(bps) = self.spec.rate_bps {
                // Up to two bursts (at least 5 ms) of lateness is caught up, so a
                // lcore that lost its core for a while still sends at the rate on
                // average.
                let burst_ns = (self.spec.burst * self.spec.max_spead_packet()) as f64 * 8e9 / bps;
                self.pacer = Some(Pacer::new(bps, now, (burst_ns * 2.0).max(5e6) as u64));
            }
        }
        while self.burst.len() < self.spec.burst {
            let data = self.data_left(cx.draining);
            if !data && (self.eos_sent || !self.spec.end_of_stream) {
                break;
            }
            if self.pacer.as_ref().is_some_and(|p| p.next_due() > now) {
                break;
            }
            // Packets for a dpdk port are built in its mbufs: no copy at the port.
            let got = match self.out.alloc(&mut self.burst, 1) {
                Some(got) => got,
                None => match self.cache.alloc() {
                    Some(p) => usize::from(self.burst.push(p).is_ok()),
                    None => 0,
                },
            };
            if got == 0 {
                self.no_buffer += 1;
                break;
            }
            match self.build(data) {
                Ok(len) => {
                    if let Some(p) = self.pacer.as_mut() {
                        let _ = p.poll(now, len);
                    }
                    self.packets += 1;
                    self.bytes += len as u64;
                    self.first.get_or_insert(now);
                    self.last = Some(now);
                }
                Err(e) => {
                    self.burst.vec_mut().pop();
                    self.failure = Some(e);
                    break;
                }
            }
        }
        if !self.burst.is_empty() {
            busy = true;
            self.send_counted(now);
        } else {
            self.out.flush(now);
        }
        if busy {
            Poll::Busy
        } else {
            Poll::Idle
        }
    }

    fn is_finite(&self) -> bool {
        self.spec.count.is_some()
    }

    fn finish(&mut self) -> Result<(), String> {
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        self.out.finish()
    }

    fn detail(&self) -> Option<serde_json::Value> {
        let secs = match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
        let rate = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        Some(serde_json::json!({
            "source": match self.spec.source { SendSource::Fsim(_) => "fsim", SendSource::Heaps { .. } => "heaps" },
            "heaps": self.heaps,
            "packets": self.packets,
            "bytes": self.bytes,
            "end_of_stream_sent": self.eos_sent,
            "no_buffer": self.no_buffer,
            "seconds": secs,
            "gbps": rate(self.bytes as f64 * 8.0) / 1e9,
            "pps": rate(self.packets as f64),
            "failure": self.failure,
        }))
    }
}

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
}

impl SpeadRecvSpec {
    /// The placement.
    pub fn place(&self) -> KatgpucbfPlace {
        KatgpucbfPlace::for_fsim(&self.fsim, self.heaps_per_fengine_per_chunk)
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
    chunks: Consumer<Chunk>,
    free: Producer<Chunk>,
    done: Arc<AtomicBool>,
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
}

impl Receiver {
    #[inline]
    fn push(&mut self, data: &[u8]) -> Push {
        match self {
            Receiver::One(s) => s.push(0, data),
            Receiver::Member { member, .. } => member.push(0, data),
        }
    }

    fn stats(&self) -> &ChunkStats {
        match self {
            Receiver::One(s) => s.stats(),
            Receiver::Member { member, .. } => member.stats(),
        }
    }
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
    /// (made from [`super::live::recv_defs`]).
    pub fn new(
        spec: SpeadRecvSpec,
        input: Input,
        link: Option<RecvEnd>,
        cache: PoolCache,
        counters: Arc<CacheAligned<StageCounters>>,
        values: Arc<StageValues>,
    ) -> SpeadRecv {
        let rx = Receiver::One(ChunkStream::new(spec.chunk_config(), spec.place()));
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
        publish_recv(
            &self.values,
            self.rx.stats(),
            self.not_udp,
            self.wrong_flavour,
        );
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
        }
        self.end = Some(why);
    }
}

impl Stage for SpeadRecv {
    fn poll(&mut self, cx: &Context) -> Poll {
        let now = cx.now;
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
                Receiver::One(_) => self.worked,
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
        Ok(())
    }

    fn detail(&self) -> Option<serde_json::Value> {
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
        let secs = match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        };
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
            "gbps": if secs > 0.0 { s.bytes as f64 * 8.0 / secs / 1e9 } else { 0.0 },
            "seconds": secs,
            "packets_not_udp": self.not_udp,
            "packets_wrong_flavour": self.wrong_flavour,
            "packets_held_at_stop": held,
            "stalled_polls": self.stalled_polls,
            "packets_after_end": self.after_end,
            "ended_by": self.end,
            "stream": s,
            "receive_group": group,
        }))
    }
}

/// What a chunk sink does (see [`super::check::SinkMode`]).
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
    /// in `values` (made from [`super::live::sink_defs`]).
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
            super::plot::plot(
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

#[cfg(test)]
mod test {
    use super::*;
    use crate::spead::wire::decode;
    use proptest::prelude::*;

    #[test]
    fn udp_headers_round_trip_through_strip() {
        let mut template = [0u8; UDP_HEADERS];
        template.copy_from_slice(&udp_template(64)[..UDP_HEADERS]);
        let mut frame = vec![0u8; UDP_HEADERS + 100];
        for (i, b) in frame[UDP_HEADERS..].iter_mut().enumerate() {
            *b = i as u8;
        }
        write_udp_headers(&mut frame, &template, 100);
        assert_eq!(ipv4_checksum(&frame[14..34]), 0, "valid IPv4 checksum");
        let inner = Encap::Udp.strip(&frame).unwrap();
        assert_eq!(inner, &frame[UDP_HEADERS..]);
        // Trailing padding (a short frame padded to 60 bytes) is not payload.
        let mut short = vec![0u8; 60];
        write_udp_headers(&mut short, &template, 10);
        assert_eq!(Encap::Udp.strip(&short).unwrap().len(), 10);
        // Not IPv4, not UDP, truncated.
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(Encap::Udp.strip(&arp).is_none());
        let mut tcp = frame.clone();
        tcp[23] = 6;
        assert!(Encap::Udp.strip(&tcp).is_none());
        assert!(Encap::Udp.strip(&frame[..30]).is_none());
        assert_eq!(Encap::None.strip(&frame[..30]).unwrap().len(), 30);
    }

    proptest! {
        #[test]
        fn strip_never_panics(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Some(inner) = Encap::Udp.strip(&frame) {
                prop_assert!(inner.len() <= frame.len() - UDP_HEADERS.min(frame.len()));
            }
        }
    }

    #[test]
    fn generic_heaps_cut_like_the_packetizer() {
        let f = Flavour::SPEAD_64_40;
        let mut g = Generic::new(f, 3000, 1000).unwrap();
        let mut buf = vec![0u8; 1000];
        // Heap 1 (after the first, which carries descriptors): 2 item pointers
        // in its first packet.
        while g.k == 0 {
            g.next_packet(&mut buf).unwrap();
        }
        let mut lens = Vec::new();
        loop {
            let (n, done) = g.next_packet(&mut buf).unwrap();
            let h = decode(&buf[..n]).unwrap();
            assert_eq!(h.heap_cnt, 2);
            assert_eq!(h.heap_length, Some(3000));
            lens.push(h.payload_length);
            if done {
                break;
            }
        }
        // 1000 - 8 * (1 + 4 + 2) = 944, then 1000 - 40 = 960.
        assert_eq!(lens, vec![944, 960, 960, 136]);
    }
}
