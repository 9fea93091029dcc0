//! The analyzer stage: per stream received packets and bytes, sequence gaps,
//! duplicates, reordering, and latency from the stamp into an HdrHistogram.
//!
//! [`SeqTracker`] is the sans-IO core: it remembers which of the last
//! [`WINDOW`] sequence numbers were seen, so a duplicate is told from a late
//! (reordered) packet exactly, and `unique` counts each sequence number once.
//! With the generator's `sent`, `lost = sent - unique` holds exactly.
//!
//! Recording allocates nothing: histograms are made when a stream is first
//! seen and reset in place between trials. The packets that give latency
//! samples also give the stream's delay variation (IPDV and RFC 3550 jitter:
//! [`crate::latency::variation`]).
//!
//! Frames are walked through VLAN tags, QinQ, MPLS and VXLAN
//! ([`crate::net::encap::walk`]); a stamped frame in another encapsulation
//! than the one expected counts as `unexpected_encap`, not as received, and
//! the expected one is counted per VLAN id, QinQ pair, outer label or VNI
//! (see [`super::encap`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;

pub use super::encap::{
    EncapKind, EncapReport, EncapSpec, IdCounts, DEFAULT_ENCAP_IDS, MAX_ENCAP_IDS,
};
use super::stamp::{latency_ns, Stamp, FLAG_LAST_IN_BURST};
use crate::buf::counter::CacheAligned;
use crate::buf::{Burst, PoolCache};
use crate::latency::new_histogram;
use crate::latency::variation::{PdvSummary, Variation};
use crate::runtime::basic::Input;
use crate::runtime::{Context, Poll, Stage, StageCounters};

/// Sequence numbers remembered per stream for telling duplicates from late packets.
pub const WINDOW: u64 = 1 << 16;
const WORDS: usize = (WINDOW / 64) as usize;

/// Which packets give a latency sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LatencyMode {
    /// Every packet.
    #[default]
    Packet,
    /// The last packet of each transmitted burst (Collie's per-batch mode: one
    /// timestamp per posted burst, completion when its last packet is seen).
    Batch,
    /// None.
    Off,
}

/// Exact sequence accounting for one stream (sans-IO).
#[derive(Clone)]
pub struct SeqTracker {
    seen: Box<[u64; WORDS]>,
    /// One past the highest sequence number seen.
    next: u64,
    started: bool,
    /// Distinct sequence numbers seen.
    pub unique: u64,
    /// Packets whose sequence number was already seen.
    pub duplicates: u64,
    /// Packets that arrived after a higher sequence number.
    pub reordered: u64,
    /// Late packets older than the window (counted as unique; a duplicate
    /// among them cannot be told apart).
    pub beyond_window: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        SeqTracker {
            seen: Box::new([0; WORDS]),
            next: 0,
            started: false,
            unique: 0,
            duplicates: 0,
            reordered: 0,
            beyond_window: 0,
        }
    }
}

impl SeqTracker {
    fn bit(seq: u64) -> (usize, u64) {
        let slot = seq % WINDOW;
        ((slot / 64) as usize, 1u64 << (slot % 64))
    }

    /// Accounts one packet.
    #[inline]
    pub fn record(&mut self, seq: u64) {
        if !self.started {
            self.started = true;
            self.next = seq;
        }
        if seq >= self.next {
            // Forget the slots the window moves over.
            if seq - self.next >= WINDOW {
                self.seen.fill(0);
            } else {
                for s in self.next..seq {
                    let (w, b) = Self::bit(s);
                    self.seen[w] &= !b;
                }
            }
            let (w, b) = Self::bit(seq);
            self.seen[w] |= b;
            self.next = seq + 1;
            self.unique += 1;
        } else if self.next - seq > WINDOW {
            self.beyond_window += 1;
            self.reordered += 1;
            self.unique += 1;
        } else {
            let (w, b) = Self::bit(seq);
            if self.seen[w] & b != 0 {
                self.duplicates += 1;
            } else {
                self.seen[w] |= b;
                self.reordered += 1;
                self.unique += 1;
            }
        }
    }

    /// Sequence numbers missing below the highest seen (gaps not filled yet).
    pub fn gaps(&self, first: u64) -> u64 {
        (self.next - first.min(self.next)).saturating_sub(self.unique)
    }

    /// Clears for a new trial.
    pub fn reset(&mut self) {
        self.seen.fill(0);
        self.next = 0;
        self.started = false;
        self.unique = 0;
        self.duplicates = 0;
        self.reordered = 0;
        self.beyond_window = 0;
    }
}

struct StreamState {
    tracker: SeqTracker,
    first_seq: u64,
    received: u64,
    bytes: u64,
    hist: Histogram<u64>,
    variation: Variation,
    /// Stamped packets in an encapsulation not expected.
    unexpected_encap: u64,
}

/// One stream's counts in a report.
#[derive(Clone, serde::Serialize)]
pub struct StreamReport {
    /// Stream id.
    pub stream: u16,
    /// Packets received (duplicates included).
    pub received: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Reordered packets.
    pub reordered: u64,
    /// Sequence numbers below the highest seen that never arrived.
    pub gaps: u64,
    /// Latency samples (not serialized; see the summary).
    #[serde(skip)]
    pub histogram: Histogram<u64>,
    /// IPDV samples and RFC 3550 jitter (not serialized; see the detail).
    #[serde(skip)]
    pub variation: Variation,
    /// Packets of the stream in an encapsulation not expected (not in
    /// `received`).
    pub unexpected_encap: u64,
}

impl std::fmt::Debug for StreamReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StreamReport{{stream: {}, received: {}, unique: {}, duplicates: {}, reordered: {}, gaps: {}, samples: {}}}", self.stream, self.received, self.unique, self.duplicates, self.reordered, self.gaps, self.histogram.len())
    }
}

/// What an analyzer reports on request.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AnalyzerReport {
    /// The trial epoch the counts belong to.
    pub epoch: u32,
    /// Per stream.
    pub streams: Vec<StreamReport>,
    /// Packets stamped for an earlier trial (arrived late), excluded.
    pub stale: u64,
    /// Packets without a stamp, or with a stream id out of range.
    pub foreign: u64,
    /// Latency samples refused because the stamp was later than the receive
    /// time (the sender's clock is ahead: another host).
    pub invalid_latency: u64,
    /// From the first to the last receive burst that held packets of this
    /// trial, in ns (0 when at most one did): the window they arrived in,
    /// clocked once per burst.
    pub rx_span_ns: u64,
    /// Packets of this trial in the first such burst.
    pub rx_first_burst: u64,
    /// Counts per encapsulation id, and packets in one not expected.
    pub encap: EncapReport,
}

/// Requests in, reports out; shared by an analyzer and the controller.
pub struct AnaControl {
    /// The trial whose packets count (set before the generators start).
    pub epoch: AtomicU32,
    /// The epoch the analyzer has reset itself for.
    pub ack_epoch: AtomicU32,
    /// Bumped to ask for a report.
    pub request: AtomicU64,
    /// Reports, one per request.
    pub reports: ArrayQueue<AnalyzerReport>,
}

impl Default for AnaControl {
    fn default() -> Self {
        AnaControl {
            epoch: AtomicU32::new(0),
            ack_epoch: AtomicU32::new(0),
            request: AtomicU64::new(0),
            reports: ArrayQueue::new(4),
        }
    }
}

/// The analyzer stage.
pub struct Analyzer {
    input: Input,
    cache: PoolCache,
    mode: LatencyMode,
    streams: Vec<Option<StreamState>>,
    control: Arc<AnaControl>,
    epoch: u32,
    served: u64,
    stale: u64,
    foreign: u64,
    invalid_latency: u64,
    burst_size: usize,
    burst: Burst,
    counters: Arc<CacheAligned<StageCounters>>,
    /// The first and last receive bursts with packets of this trial (ns,
    /// monotonic), and how many the first held.
    first_rx_ns: Option<u64>,
    last_rx_ns: u64,
    first_burst: u64,
    /// The first packets' (stream, sequence number, stamp, receive time),
    /// kept up to its capacity when asked (`delay_log`), to check the delay
    /// figures against; empty capacity keeps none.
    delay_log: Vec<[u64; 4]>,
    /// What frames arrive in, and the counts per id of this trial.
    encap: EncapSpec,
    encap_ids: IdCounts,
    unexpected_encap: u64,
}

impl Analyzer {
    /// An analyzer of streams `0..max_streams` arriving on `input`.
    pub fn new(
        input: Input,
        cache: PoolCache,
        mode: LatencyMode,
        max_streams: usize,
        burst_size: usize,
        control: Arc<AnaControl>,
        counters: Arc<CacheAligned<StageCounters>>,
    ) -> Self {
        // Every frame is parsed below; the ones that are not ours go to the
        // port's `offer`, so the port need not look at each one first.
        let mut input = input;
        input.set_inspected();
        Analyzer {
            input,
            cache,
            mode,
            streams: (0..max_streams).map(|_| None).collect(),
            control,
            epoch: 0,
            served: 0,
            stale: 0,
            foreign: 0,
            invalid_latency: 0,
            burst_size,
            burst: Burst::new(),
            counters,
            first_rx_ns: None,
            last_rx_ns: 0,
            first_burst: 0,
            delay_log: Vec::new(),
            encap: EncapSpec::default(),
            encap_ids: IdCounts::new(DEFAULT_ENCAP_IDS),
            unexpected_encap: 0,
        }
    }

    /// The analyzer expecting frames in `spec`'s encapsulation.
    pub fn with_encap(mut self, spec: EncapSpec) -> Self {
        self.encap = spec;
        self.encap_ids = IdCounts::new(spec.ids);
        self
    }

    /// Keeps the first `packets` latency samples' stamps and receive times
    /// of each trial, for the detail's `delay_log` (memory taken now).
    pub fn with_delay_log(mut self, packets: usize) -> Self {
        self.delay_log = Vec::with_capacity(packets);
        self
    }

    fn reset(&mut self) {
        for s in self.streams.iter_mut().flatten() {
            s.tracker.reset();
            s.received = 0;
            s.bytes = 0;
            s.hist.reset();
            s.variation.reset();
            s.unexpected_encap = 0;
        }
        self.delay_log.clear();
        self.encap_ids.reset();
        self.unexpected_encap = 0;
        self.stale = 0;
        self.foreign = 0;
        self.invalid_latency = 0;
        self.first_rx_ns = None;
        self.last_rx_ns = 0;
        self.first_burst = 0;
    }

    /// The current counts (clones the histograms: called per request, not per packet).
    pub fn report(&self) -> AnalyzerReport {
        AnalyzerReport {
            epoch: self.epoch,
            streams: self
                .streams
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
                .map(|(i, s)| StreamReport {
                    stream: i as u16,
                    received: s.received,
                    bytes: s.bytes,
                    unique: s.tracker.unique,
                    duplicates: s.tracker.duplicates,
                    reordered: s.tracker.reordered,
                    gaps: s.tracker.gaps(s.first_seq),
                    histogram: s.hist.clone(),
                    variation: s.variation.clone(),
                    unexpected_encap: s.unexpected_encap,
                })
                .collect(),
            stale: self.stale,
            foreign: self.foreign,
            invalid_latency: self.invalid_latency,
            rx_span_ns: self
                .first_rx_ns
                .map_or(0, |f| self.last_rx_ns.saturating_sub(f)),
            rx_first_burst: self.first_burst,
            encap: self.encap_report(),
        }
    }

    /// The encapsulation counts of this trial.
    fn encap_report(&self) -> EncapReport {
        let kind = self.encap.expect;
        EncapReport {
            by_id: self
                .encap_ids
                .ids()
                .into_iter()
                .map(|(id, n)| (kind.label(id), n))
                .collect(),
            other_ids: self.encap_ids.other,
            unexpected_encap: self.unexpected_encap,
        }
    }

    /// Notes a receive burst at `now_ns` that held `ours` packets of this
    /// trial (once per burst).
    #[inline]
    fn note_burst(&mut self, now_ns: u64, ours: u64) {
        if ours == 0 {
            return;
        }
        if self.first_rx_ns.is_none() {
            self.first_rx_ns = Some(now_ns);
            self.first_burst = ours;
        }
        self.last_rx_ns = now_ns;
    }
}

/// The UDP payload of an Ethernet/IPv4/UDP or Ethernet/IPv6/UDP frame (VLAN
/// tags, IPv4 options and IPv6 extension headers walked; fragments refused),
/// if it is one: [`crate::net::udp_payload`].
#[inline]
pub fn udp_payload(f: &[u8]) -> Option<&[u8]> {
    crate::net::udp_payload(f).ok().map(|v| v.payload())
}

/// The stamped payload of a frame in any encapsulation the analyzer knows
/// (VLAN, QinQ, MPLS, VXLAN to `vxlan_port`), with the encapsulation's kind
/// and id: [`crate::net::encap::walk`].
#[inline]
pub fn stamped(f: &[u8], vxlan_port: u16) -> Option<(EncapKind, u32, Stamp<&[u8]>)> {
    let (e, v) = crate::net::encap::walk(f, Some(vxlan_port)).ok()?;
    let stamp = Stamp::new_checked(v.payload()).ok()?;
    let (kind, id) = EncapKind::of(&e);
    Some((kind, id, stamp))
}

impl Stage for Analyzer {
    fn poll(&mut self, cx: &Context) -> Poll {
        let epoch = self.control.epoch.load(Ordering::Acquire);
        if epoch != self.epoch {
            self.reset();
            self.epoch = epoch;
            self.control.ack_epoch.store(epoch, Ordering::Release);
        }
        let request = self.control.request.load(Ordering::Acquire);
        if request != self.served {
            self.served = request;
            let _ = self.control.reports.force_push(self.report());
        }
        let n = self.input.recv(cx.now, &mut self.burst, self.burst_size);
        if n == 0 {
            return if self.input.is_finished() {
                Poll::Finished
            } else {
                Poll::Idle
            };
        }
        // The clock read after the burst arrived: the pass's start time may
        // precede the sender's stamp of a packet received in this very pass.
        let arrived = crate::time::monotonic_now();
        let now = crate::time::stamp_ns(arrived);
        let mut bytes = 0;
        let mut ours = 0u64;
        for pkt in self.burst.iter() {
            let data = pkt.data();
            bytes += data.len() as u64;
            let Some((kind, id, stamp)) = stamped(data, self.encap.vxlan_port) else {
                // Not ours: the port may want it (ARP/NDP for its addresses).
                if !self.input.offer(cx.now, data) {
                    self.foreign += 1;
                }
                continue;
            };
            if stamp.epoch() != self.epoch as u8 {
                self.stale += 1;
                continue;
            }
            let Some(slot) = self.streams.get_mut(usize::from(stamp.stream())) else {
                self.foreign += 1;
                continue;
            };
            let seq = stamp.seq();
            let s = slot.get_or_insert_with(|| StreamState {
                tracker: SeqTracker::default(),
                first_seq: seq,
                received: 0,
                bytes: 0,
                hist: new_histogram(),
                variation: Variation::default(),
                unexpected_encap: 0,
            });
            if kind != self.encap.expect {
                s.unexpected_encap += 1;
                self.unexpected_encap += 1;
                continue;
            }
            if kind != EncapKind::None {
                self.encap_ids.count(id);
            }
            if s.received == 0 {
                s.first_seq = seq;
            }
            s.received += 1;
            ours += 1;
            s.bytes += data.len() as u64;
            s.tracker.record(seq);
            let sample = match self.mode {
                LatencyMode::Packet => true,
                LatencyMode::Batch => stamp.flags() & FLAG_LAST_IN_BURST != 0,
                LatencyMode::Off => false,
            };
            if sample {
                let delay = latency_ns(stamp.tx_ns(), now);
                s.hist.saturating_record(delay.max(1));
                s.variation.record(seq, delay);
                if self.delay_log.len() < self.delay_log.capacity() {
                    self.delay_log.push([
                        u64::from(stamp.stream()),
                        seq,
                        u64::from(stamp.tx_ns()),
                        now,
                    ]);
                }
            }
        }
        self.note_burst(arrived.as_nanos(), ours);
        self.counters.packets_in.add(n as u64);
        self.counters.bytes_in.add(bytes);
        self.cache.free_bulk(&mut self.burst);
        Poll::Busy
    }

    fn is_finite(&self) -> bool {
        self.input.is_finite()
    }

    fn detail(&self) -> Option<serde_json::Value> {
        let r = self.report();
        let streams: Vec<serde_json::Value> = r
            .streams
            .iter()
            .map(|s| {
                serde_json::json!({
                    "stream": s.stream, "received": s.received, "bytes": s.bytes, "unique": s.unique,
                    "duplicates": s.duplicates, "reordered": s.reordered, "gaps": s.gaps,
                    "latency_ns": crate::latency::Summary::of(&s.histogram),
                    "pdv_ns": PdvSummary::of(&s.histogram),
                    "ipdv_ns": s.variation.ipdv_summary(),
                    "jitter_ns": s.variation.jitter_ns,
                    "unexpected_encap": s.unexpected_encap,
                })
            })
            .collect();
        // The rate they arrived at over the time they arrived in (the packets
        // after the first receive burst over the span to the last), as a
        // trial's `rx_pps`.
        let received: u64 = r.streams.iter().map(|s| s.unique).sum();
        let rx_pps = if r.rx_span_ns > 0 {
            received.saturating_sub(r.rx_first_burst) as f64 * 1e9 / r.rx_span_ns as f64
        } else {
            0.0
        };
        let mut d = serde_json::json!({
            "streams": streams, "stale": r.stale, "foreign": r.foreign,
            "invalid_latency": r.invalid_latency,
            "rx_span_s": r.rx_span_ns as f64 / 1e9, "rx_pps": rx_pps,
            "encap": r.encap,
        });
        if self.delay_log.capacity() > 0 {
            d["delay_log"] = serde_json::json!(self.delay_log);
        }
        Some(d)
    }
}

/// An analyzer stage's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyzerSpec {
    /// Which packets give latency samples.
    pub latency: LatencyMode,
    /// Streams tracked: ids 0..streams.
    pub streams: usize,
    /// Packets per burst.
    pub burst: usize,
    /// Latency samples whose stamps the detail lists (`delay_log`), per trial.
    pub delay_log: usize,
    /// What frames arrive in.
    pub encap: EncapSpec,
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_receive_span_is_clocked_per_burst_of_this_trials_packets() {
        use crate::buf::{Pool, PoolConfig};
        use crate::runtime::basic::Output;
        use crate::time::Instant;
        use crate::traffic::stamp::Repr;
        use crate::traffic::template::{FrameBuilder, FrameSpec};
        use std::time::Duration;
        let pool = Pool::new(&PoolConfig::default()).unwrap();
        let port = crate::port::mem::open(&crate::port::mem::MemConfig::default());
        let mut out = Output::Port(port.tx.into_iter().next().unwrap());
        let control = Arc::new(AnaControl::default());
        let mut a = Analyzer::new(
            Input::Port(port.rx.into_iter().next().unwrap()),
            pool.cache(),
            LatencyMode::Packet,
            4,
            32,
            control.clone(),
            Arc::new(CacheAligned::default()),
        )
        .with_delay_log(4);
        let mut cache = pool.cache();
        let mut builder = FrameBuilder::new(&FrameSpec::default());
        // `n` packets of trial `epoch` from sequence number `seq` on the wire.
        let mut send = |epoch: u8, seq: u64, n: usize| {
            let mut b = Burst::new();
            assert_eq!(cache.alloc_bulk(&mut b, n), n);
            for (i, p) in b.iter_mut().enumerate() {
                let st = Repr {
                    seq: seq + i as u64,
                    epoch,
                    ..Repr::default()
                };
                let len = builder.write(p.spare_capacity(), &st);
                p.set_len(len).unwrap();
            }
            assert_eq!(out.send_or_drop(Instant::ZERO, &mut b), (n, 0));
            out.flush(Instant::ZERO);
        };
        let cx = Context {
            now: Instant::ZERO,
            draining: false,
        };
        control.epoch.store(1, Ordering::Release);
        // Packets of an earlier trial start no span.
        send(0, 0, 5);
        let _ = a.poll(&cx);
        assert_eq!(a.report().stale, 5);
        assert_eq!((a.report().rx_span_ns, a.report().rx_first_burst), (0, 0));
        send(1, 0, 3);
        let _ = a.poll(&cx);
        std::thread::sleep(Duration::from_millis(2));
        send(1, 3, 7);
        let _ = a.poll(&cx);
        let r = a.report();
        assert_eq!(r.rx_first_burst, 3);
        assert!(r.rx_span_ns >= 2_000_000, "{r:?}");
        let d = a.detail().unwrap();
        assert_eq!(d["rx_pps"], 7.0 * 1e9 / r.rx_span_ns as f64);
        // Ten packets in order: nine IPDV pairs and jitter differences, and
        // the first four in the log.
        let v = &r.streams[0].variation;
        assert_eq!((v.ipdv.len(), v.jitter_samples), (9, 9));
        assert_eq!(d["streams"][0]["ipdv_ns"]["samples"], 9);
        let log = d["delay_log"].as_array().unwrap();
        let seqs: Vec<u64> = log.iter().map(|e| e[1].as_u64().unwrap()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        // A new trial starts a new span.
        control.epoch.store(2, Ordering::Release);
        let _ = a.poll(&cx);
        assert_eq!((a.report().rx_span_ns, a.report().rx_first_burst), (0, 0));
        assert!(a.report().streams[0].variation.ipdv.is_empty());
        assert_eq!(a.detail().unwrap()["delay_log"], serde_json::json!([]));
    }

    #[test]
    fn in_order_gaps_duplicates_reorders() {
        let mut t = SeqTracker::default();
        for s in [10, 11, 13, 12, 12, 14, 20] {
            t.record(s);
        }
        assert_eq!((t.unique, t.duplicates, t.reordered), (6, 1, 1));
        assert_eq!(t.gaps(10), 5); // 15..=19 missing
    }

    #[test]
    fn window_slides_and_forgets() {
        let mut t = SeqTracker::default();
        t.record(0);
        t.record(WINDOW + 5);
        t.record(WINDOW + 5);
        t.record(3); // older than the window: late, counted once
        assert_eq!((t.unique, t.duplicates, t.beyond_window), (3, 1, 1));
    }

    #[test]
    fn stamps_are_found_in_ipv4_and_ipv6_frames() {
        use crate::traffic::stamp::Repr;
        use crate::traffic::template::{
            AddrRange, FrameBuilder, FrameSpec, Sizes, DEFAULT_DST_V6, DEFAULT_SRC_V6, HEADERS,
            HEADERS_V6,
        };
        let v6 = FrameSpec {
            src_ip: AddrRange::v6(DEFAULT_SRC_V6),
            dst_ip: AddrRange::v6(DEFAULT_DST_V6),
            sizes: Sizes::Fixed(100),
            ..FrameSpec::default()
        };
        for spec in [FrameSpec::default(), v6] {
            let mut b = FrameBuilder::new(&spec);
            let mut buf = [0u8; 96];
            let st = Repr {
                stream: 4,
                seq: 77,
                ..Repr::default()
            };
            let n = b.write(&mut buf, &st);
            let p = udp_payload(&buf[..n]).expect("a UDP payload");
            assert_eq!(Repr::parse(&Stamp::new_checked(p).unwrap()).unwrap(), st);
            assert_eq!(p.len(), n - if spec.is_v6() { HEADERS_V6 } else { HEADERS });
            // A truncated frame is refused or yields the shorter payload (the
            // stamp check then refuses it), never a panic.
            let header = n - p.len();
            for cut in 0..n {
                if let Some(p) = udp_payload(&buf[..cut]) {
                    assert_eq!(p.len(), cut - header);
                }
            }
        }
        // IPv6 with another next header, or a version that does not match
        // the EtherType, is not ours.
        let mut b = FrameBuilder::new(&FrameSpec {
            src_ip: AddrRange::v6(DEFAULT_SRC_V6),
            ..FrameSpec::default()
        });
        let mut buf = [0u8; 80];
        b.write(&mut buf, &Repr::default());
        use crate::net::{ethernet::HEADER_LEN, ipv4, ipv6};
        let mut other = buf;
        ipv6::Packet::new_unchecked(&mut other[HEADER_LEN..]).set_next_header(6);
        assert!(udp_payload(&other).is_none());
        let mut other = buf;
        // Version 4 in an IPv6 frame.
        ipv4::Packet::new_unchecked(&mut other[HEADER_LEN..]).set_version_and_header_len(4, 0);
        assert!(udp_payload(&other).is_none());
        assert!(udp_payload(&buf[..61]).is_none());
    }

    proptest! {
        #[test]
        fn udp_payload_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120), v6 in any::<bool>()) {
            let mut f = bytes;
            if f.len() > 14 {
                use crate::net::ethernet::{ethertype, Frame};
                Frame::new_unchecked(&mut f[..]).set_ethertype(if v6 { ethertype::IPV6 } else { ethertype::IPV4 });
            }
            if let Some(p) = udp_payload(&f) {
                prop_assert!(p.len() <= f.len());
            }
        }

        /// Random bytes behind every EtherType the walk follows (tags,
        /// labels, IP) and at the VXLAN port: no panic, and a stamp is
        /// found only in a frame that can hold headers and stamp.
        #[test]
        fn the_encapsulation_walk_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            et in proptest::sample::select(vec![0x8100u16, 0x88a8, 0x8847, 0x8848, 0x0800, 0x86dd]),
            vxlan in any::<bool>(),
        ) {
            let mut f = bytes;
            if f.len() > 14 {
                use crate::net::ethernet::Frame;
                Frame::new_unchecked(&mut f[..]).set_ethertype(et);
            }
            let port = if vxlan { 4789 } else { u16::from_be_bytes([f.len() as u8, 0]) };
            if let Some((_, _, s)) = stamped(&f, port) {
                prop_assert!(crate::traffic::stamp::Repr::parse(&s).is_ok());
                prop_assert!(f.len() >= 60, "headers and a stamp need 60 bytes");
            }
        }

        #[test]
        fn unique_and_duplicates_are_exact(seqs in proptest::collection::vec(0u64..5000, 1..2000)) {
            let mut t = SeqTracker::default();
            let mut set = std::collections::BTreeSet::new();
            for &s in &seqs {
                t.record(s);
                set.insert(s);
            }
            prop_assert_eq!(t.unique, set.len() as u64);
            prop_assert_eq!(t.duplicates, (seqs.len() - set.len()) as u64);
        }
    }
}
