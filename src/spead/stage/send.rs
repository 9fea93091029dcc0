//! The `spead_send` stage: heaps built into pool buffers, paced.

use super::*;
/// Writes Ethernet/IPv4/UDP headers for a `payload`-byte datagram into the
/// first [`UDP_HEADERS`] bytes of `buf` (from [`udp_template`], lengths set
/// and the IPv4 checksum updated for them).
fn write_udp_headers(buf: &mut [u8], template: &[u8; UDP_HEADERS], payload: usize) {
    let h = &mut buf[..UDP_HEADERS];
    h.copy_from_slice(template);
    crate::net::stack::set_udp_v4_payload_len(h, payload as u16);
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
        for d in crate::spead::send::generic_descriptors(flavour) {
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
        let ip = crate::net::ipv4::Packet::new_checked(&frame[crate::net::ethernet::HEADER_LEN..])
            .unwrap();
        assert!(ip.verify_checksum(), "valid IPv4 checksum");
        let inner = Encap::Udp.strip(&frame).unwrap();
        assert_eq!(inner, &frame[UDP_HEADERS..]);
        // Trailing padding (a short frame padded to 60 bytes) is not payload.
        let mut short = vec![0u8; 60];
        write_udp_headers(&mut short, &template, 10);
        assert_eq!(Encap::Udp.strip(&short).unwrap().len(), 10);
        // Not IPv4, not UDP, truncated.
        let mut arp = frame.clone();
        crate::net::ethernet::Frame::new_unchecked(&mut arp[..])
            .set_ethertype(crate::net::ethernet::ethertype::ARP);
        assert!(Encap::Udp.strip(&arp).is_none());
        let mut tcp = frame.clone();
        crate::net::ipv4::Packet::new_unchecked(&mut tcp[crate::net::ethernet::HEADER_LEN..])
            .set_protocol(6);
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
