//! An F-engine simulator in katgpucbf's format, with a deterministic payload.
//!
//! Each heap is one F-engine's (antenna's) channelised voltages for one
//! timestamp: `[n_channels_per_stream][n_samples_per_channel][n_pols]` complex
//! samples of 8+8 bits. Every packet carries the same item pointers (as MeerKAT's
//! F-engines do, so a receiver can place a heap from whichever packet arrives
//! first): heap counter, heap length, payload offset, payload length, timestamp
//! 0x1600, feng_id 0x4101, frequency 0x4103, raw data 0x4300 (addressed at 0), and
//! optionally three padding pointers that bring the header to 96 bytes.
//!
//! Antenna `a`'s heaps use heap counters `k * n_ants + a` for its k-th heap
//! (timestamp `first_timestamp + k * timestamp_step`), so each antenna has its own
//! heap-counter sequence and no two antennas share one.
//!
//! The payload is a pure function of (feng_id, timestamp, byte offset), so
//! [`check`](super::check) verifies every byte of a received chunk.

use super::send::Pacer;
use super::wire::{decode, id, Error, Flavour, ItemPointer, Packet, WORD};
use crate::time::Instant;

/// Item id of the timestamp (ADC sample count).
pub const TIMESTAMP_ID: u64 = 0x1600;
/// Item id of the F-engine (antenna) index.
pub const FENG_ID_ID: u64 = 0x4101;
/// Item id of the first channel in the heap.
pub const FREQUENCY_ID: u64 = 0x4103;
/// Item id of the raw channelised data.
pub const RAW_DATA_ID: u64 = 0x4300;

/// The simulator's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct FsimConfig {
    /// Antennas (F-engines).
    pub n_ants: usize,
    /// Channels out of each F-engine.
    pub n_channels_total: usize,
    /// Channels in each heap (this X-engine's share).
    pub n_channels_per_stream: usize,
    /// Time samples per channel per heap.
    pub n_samples_per_channel: usize,
    /// Polarisations.
    pub n_pols: usize,
    /// Payload bytes per packet (katgpucbf: 1024).
    pub packet_payload: usize,
    /// The first channel of this stream (the frequency item's value).
    pub first_channel: u64,
    /// Timestamp of the first heap (a multiple of the timestamp step is sensible).
    pub first_timestamp: u64,
    /// The SPEAD flavour (katgpucbf: SPEAD-64-48).
    pub flavour: Flavour,
    /// Add three padding pointers (96-byte header as MeerKAT's F-engines send).
    pub pad: bool,
    /// Sending rate in Gb/s of SPEAD packet bytes (0 = as fast as possible).
    pub rate_gbps: f64,
}

impl Default for FsimConfig {
    fn default() -> Self {
        FsimConfig {
            n_ants: 4,
            n_channels_total: 4096,
            n_channels_per_stream: 16,
            n_samples_per_channel: 256,
            n_pols: 2,
            packet_payload: 1024,
            first_channel: 0,
            first_timestamp: 0,
            flavour: Flavour::SPEAD_64_48,
            pad: true,
            rate_gbps: 0.0,
        }
    }
}

impl FsimConfig {
    /// Bytes in one heap: channels x samples x pols x 2 (8-bit real and imaginary).
    pub fn heap_bytes(&self) -> usize {
        self.n_channels_per_stream * self.n_samples_per_channel * self.n_pols * 2
    }

    /// Timestamp difference between successive heaps of one F-engine.
    pub fn timestamp_step(&self) -> u64 {
        (self.n_channels_total * 2 * self.n_samples_per_channel) as u64
    }

    /// Item pointers per packet.
    pub fn n_items(&self) -> usize {
        if self.pad {
            11
        } else {
            8
        }
    }

    /// Packets per heap.
    pub fn packets_per_heap(&self) -> usize {
        self.heap_bytes().div_ceil(self.packet_payload.max(1))
    }

    /// Largest packet in bytes.
    pub fn max_packet(&self) -> usize {
        WORD * (1 + self.n_items()) + self.packet_payload.min(self.heap_bytes())
    }

    /// A pacer at `rate_gbps` (SPEAD packet bytes) from `start`, or `None` when
    /// the rate is 0 (as fast as possible).
    pub fn pacer(&self, start: Instant) -> Option<Pacer> {
        (self.rate_gbps > 0.0).then(|| Pacer::new(self.rate_gbps * 1e9, start, 20_000))
    }

    /// Heaps per second at `rate_gbps` (all antennas together).
    pub fn heaps_per_second(&self) -> f64 {
        let bytes_per_heap =
            (self.packets_per_heap() * WORD * (1 + self.n_items()) + self.heap_bytes()) as f64;
        self.rate_gbps * 1e9 / 8.0 / bytes_per_heap
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), String> {
        if self.n_ants == 0
            || self.n_channels_per_stream == 0
            || self.n_samples_per_channel == 0
            || self.n_pols == 0
            || self.packet_payload == 0
        {
            return Err("n_ants, channels, samples, pols and packet payload must be > 0".into());
        }
        if self.n_channels_per_stream > self.n_channels_total {
            return Err("n_channels_per_stream must not exceed n_channels_total".into());
        }
        let per = self.n_channels_per_stream as u64;
        if self.first_channel % per != 0 || self.first_channel + per > self.n_channels_total as u64
        {
            return Err(format!(
                "first_channel {} does not start a stream of {per} channels within {} channels",
                self.first_channel, self.n_channels_total
            ));
        }
        if self.heap_bytes() as u64 > self.flavour.max_value() {
            return Err("heap larger than the flavour's heap address".into());
        }
        Ok(())
    }
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The per-heap seed of the deterministic payload.
#[inline]
pub fn heap_seed(feng_id: u64, timestamp: u64) -> u64 {
    mix(timestamp.wrapping_mul(0x1000_0000_01B3) ^ feng_id.wrapping_mul(GOLDEN) ^ 0x5EAD)
}

/// The 8-byte word `j` of a heap's payload (bytes `8j..8j+8`, little-endian).
#[inline]
pub fn payload_word(seed: u64, j: u64) -> u64 {
    let x = seed.wrapping_add(j.wrapping_mul(GOLDEN));
    x ^ (x >> 29)
}

/// The expected payload byte at `offset` of the heap from `feng_id` at `timestamp`.
#[inline]
pub fn payload_byte(feng_id: u64, timestamp: u64, offset: u64) -> u8 {
    payload_word(heap_seed(feng_id, timestamp), offset / 8).to_le_bytes()[(offset % 8) as usize]
}

/// Fills `out` with the heap payload bytes starting at heap `offset`.
pub fn fill_payload(feng_id: u64, timestamp: u64, offset: u64, out: &mut [u8]) {
    let seed = heap_seed(feng_id, timestamp);
    let mut i = 0usize;
    let mut off = offset;
    while i < out.len() && off % 8 != 0 {
        out[i] = payload_word(seed, off / 8).to_le_bytes()[(off % 8) as usize];
        i += 1;
        off += 1;
    }
    let mut words = out[i..].chunks_exact_mut(8);
    let mut j = off / 8;
    for w in &mut words {
        w.copy_from_slice(&payload_word(seed, j).to_le_bytes());
        j += 1;
    }
    let last = payload_word(seed, j).to_le_bytes();
    for (b, v) in words.into_remainder().iter_mut().zip(last) {
        *b = v;
    }
}

/// One simulated packet's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketId {
    /// Antenna.
    pub feng_id: u64,
    /// Heap timestamp.
    pub timestamp: u64,
    /// Heap counter.
    pub heap_cnt: u64,
    /// Payload offset in the heap.
    pub offset: u64,
}

/// The simulator: an endless, deterministic sequence of packets, heap after heap,
/// timestamp after timestamp, antenna after antenna within a timestamp.
#[derive(Debug, Clone)]
pub struct Fsim {
    cfg: FsimConfig,
    heap_bytes: usize,
    step: u64,
    k: u64,
    ant: u64,
    /// The antennas sent: `ant_first`, `ant_first + ant_step`, ... (all by default).
    ant_first: u64,
    ant_step: u64,
    offset: usize,
    pointers: [ItemPointer; 7],
    n_extra: usize,
}

impl Fsim {
    /// A simulator; fails on invalid parameters.
    pub fn new(cfg: FsimConfig) -> Result<Fsim, String> {
        cfg.validate()?;
        let heap_bytes = cfg.heap_bytes();
        let step = cfg.timestamp_step();
        let n_extra = cfg.n_items() - 4;
        Ok(Fsim {
            cfg,
            heap_bytes,
            step,
            k: 0,
            ant: 0,
            ant_first: 0,
            ant_step: 1,
            offset: 0,
            pointers: [ItemPointer(0); 7],
            n_extra,
        })
    }

    /// Sends only antennas `k`, `k + n`, `k + 2n`, ... (replica `k` of `n`
    /// senders, as F-engines on separate hosts): the same heaps, heap
    /// counters and payloads the whole simulator sends for them, in order.
    /// Fails when the slice holds no antenna.
    pub fn antennas(mut self, k: usize, n: usize) -> Result<Fsim, String> {
        if n == 0 || k >= n || k >= self.cfg.n_ants {
            return Err(format!(
                "antenna slice {k} of {n} is empty with {} antennas",
                self.cfg.n_ants
            ));
        }
        self.ant_first = k as u64;
        self.ant_step = n as u64;
        self.ant = k as u64;
        Ok(self)
    }

    /// Antennas this simulator sends.
    pub fn antennas_sent(&self) -> u64 {
        (self.cfg.n_ants as u64 - self.ant_first).div_ceil(self.ant_step)
    }

    /// The configuration.
    pub fn config(&self) -> &FsimConfig {
        &self.cfg
    }

    /// Heaps fully emitted per antenna so far (the index of the current timestamp).
    pub fn heaps_per_antenna_sent(&self) -> u64 {
        self.k
    }

    /// Writes the next packet into `buf` (at least [`FsimConfig::max_packet`]
    /// bytes) and returns its length and identity.
    pub fn next_packet(&mut self, buf: &mut [u8]) -> Result<(usize, PacketId), Error> {
        let f = self.cfg.flavour;
        let ts = self.cfg.first_timestamp + self.k * self.step;
        let n_ants = self.cfg.n_ants as u64;
        let heap_cnt = (self.k * n_ants + self.ant) & f.max_value();
        let len = self.cfg.packet_payload.min(self.heap_bytes - self.offset);
        self.pointers[0] = f.immediate(TIMESTAMP_ID, ts & f.max_value())?;
        self.pointers[1] = f.immediate(FENG_ID_ID, self.ant)?;
        self.pointers[2] = f.immediate(FREQUENCY_ID, self.cfg.first_channel)?;
        self.pointers[3] = f.addressed(RAW_DATA_ID, 0)?;
        for p in &mut self.pointers[4..] {
            *p = f.immediate(0, 0)?;
        }
        // What emit_packet writes, with the payload generated in place (no
        // copy through a staging buffer).
        let n_items = 4 + self.n_extra;
        let n = WORD * (1 + n_items) + len;
        if buf.len() < n {
            return Err(Error::BufferTooSmall {
                need: n,
                have: buf.len(),
            });
        }
        let mut p = Packet::new_unchecked(&mut buf[..n]);
        p.set_header(f, n_items as u16);
        p.set_item(0, f.immediate(id::HEAP_CNT, heap_cnt)?);
        p.set_item(1, f.immediate(id::HEAP_LENGTH, self.heap_bytes as u64)?);
        p.set_item(2, f.immediate(id::PAYLOAD_OFFSET, self.offset as u64)?);
        p.set_item(3, f.immediate(id::PAYLOAD_LENGTH, len as u64)?);
        for (k, it) in self.pointers[..self.n_extra].iter().enumerate() {
            p.set_item(4 + k, *it);
        }
        fill_payload(self.ant, ts, self.offset as u64, p.payload_mut(len));
        let id = PacketId {
            feng_id: self.ant,
            timestamp: ts,
            heap_cnt,
            offset: self.offset as u64,
        };
        self.offset += len;
        if self.offset >= self.heap_bytes {
            self.offset = 0;
            self.ant += self.ant_step;
            if self.ant >= n_ants {
                self.ant = self.ant_first;
                self.k += 1;
            }
        }
        Ok((n, id))
    }

    /// `n_timestamps` timestamps of every antenna's heaps as one buffer of
    /// back-to-back packets (what spead2's `add_buffer_reader` reads), with the
    /// packet boundaries.
    pub fn packets_buffer(&mut self, n_timestamps: u64) -> Result<(Vec<u8>, Vec<usize>), Error> {
        let per_ts = self.cfg.n_ants * self.cfg.packets_per_heap();
        let total = per_ts * n_timestamps as usize;
        let mut out = Vec::with_capacity(total * self.cfg.max_packet());
        let mut ends = Vec::with_capacity(total);
        let mut buf = vec![0u8; self.cfg.max_packet()];
        for _ in 0..total {
            let (n, _) = self.next_packet(&mut buf)?;
            out.extend_from_slice(&buf[..n]);
            ends.push(out.len());
        }
        Ok((out, ends))
    }
}

/// Reads (timestamp, feng_id) from a simulator packet.
pub fn packet_meta(data: &[u8]) -> Result<(u64, u64), Error> {
    let h = decode(data)?;
    let f = h.flavour;
    let mut ts = None;
    let mut feng = None;
    for i in 0..h.n_items {
        let mut w = [0u8; 8];
        w.copy_from_slice(&data[WORD * (1 + i)..WORD * (2 + i)]);
        let p = ItemPointer(u64::from_be_bytes(w));
        if p.is_immediate() {
            match p.id(f) {
                TIMESTAMP_ID => ts = Some(p.value(f)),
                FENG_ID_ID => feng = Some(p.value(f)),
                _ => {}
            }
        }
    }
    Ok((ts.unwrap_or(0), feng.unwrap_or(0)))
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::spead::wire::Packet;

    fn small() -> FsimConfig {
        FsimConfig {
            n_ants: 3,
            n_channels_total: 64,
            n_channels_per_stream: 4,
            n_samples_per_channel: 32,
            n_pols: 2,
            packet_payload: 128,
            first_timestamp: 0,
            ..FsimConfig::default()
        }
    }

    #[test]
    fn geometry() {
        let c = FsimConfig::default();
        assert_eq!(c.heap_bytes(), 16 * 256 * 2 * 2);
        assert_eq!(c.timestamp_step(), 4096 * 2 * 256);
        assert_eq!(c.max_packet(), 96 + 1024);
        assert_eq!(c.packets_per_heap(), 16);
    }

    #[test]
    fn packets_follow_katgpucbf_format() {
        let c = small();
        let mut s = Fsim::new(c.clone()).unwrap();
        let mut buf = vec![0u8; c.max_packet()];
        let per_heap = c.packets_per_heap();
        assert_eq!(per_heap, 4);
        for n in 0..(2 * 3 * per_heap) {
            let (len, id) = s.next_packet(&mut buf).unwrap();
            let k = (n / (3 * per_heap)) as u64;
            let ant = ((n / per_heap) % 3) as u64;
            assert_eq!(id.feng_id, ant);
            assert_eq!(id.timestamp, k * c.timestamp_step());
            assert_eq!(id.heap_cnt, k * 3 + ant);
            let p = Packet::new_checked(&buf[..len]).unwrap();
            let h = p.header().unwrap();
            assert_eq!(h.n_items, 11);
            assert_eq!(h.heap_length, Some(c.heap_bytes() as u64));
            assert_eq!(h.payload_offset, ((n % per_heap) * 128) as u64);
            assert_eq!(packet_meta(&buf[..len]).unwrap(), (id.timestamp, ant));
            for (i, b) in p.payload().iter().enumerate() {
                assert_eq!(
                    *b,
                    payload_byte(ant, id.timestamp, h.payload_offset + i as u64)
                );
            }
        }
    }

    #[test]
    fn rate_paces_packets() {
        let c = FsimConfig {
            rate_gbps: 8.0,
            ..FsimConfig::default()
        };
        // 8 Gb/s = 1 byte per ns; a 1120-byte packet every 1120 ns.
        let mut p = c.pacer(Instant::ZERO).unwrap();
        assert!(p.poll(Instant::ZERO, 1120).is_ok());
        assert_eq!(p.next_due(), Instant::from_nanos(1120));
        let per_heap = 16.0 * 1120.0;
        assert!((c.heaps_per_second() - 1e9 / per_heap).abs() < 1e-6);
        assert!(FsimConfig::default().pacer(Instant::ZERO).is_none());
    }

    #[test]
    fn fill_payload_any_alignment() {
        let mut a = vec![0u8; 37];
        fill_payload(2, 99, 5, &mut a);
        for (i, b) in a.iter().enumerate() {
            assert_eq!(*b, payload_byte(2, 99, 5 + i as u64));
        }
        // Different heaps differ.
        let mut b = vec![0u8; 37];
        fill_payload(3, 99, 5, &mut b);
        assert_ne!(a, b);
    }
}
