//! SPEAD reassembly into chunks from an in-memory buffer, one core.
//!
//! `scripts/bench-spead` drives this against spead2's `ChunkRingStream` on the
//! same packets. Run alone:
//!
//! ```text
//! cargo bench --bench spead_chunks -- --mode single --mib 256 --rounds 3
//! cargo bench --bench spead_chunks -- --mode multi --write /tmp/p.bin   # packets for spead2
//! cargo bench --bench spead_chunks -- --mode multi --read /tmp/p.bin
//! ```
//!
//! `--what chunks` (default) reassembles the buffer; `memcpy` decodes each packet
//! and copies its payload into a buffer of two chunks (no reassembly); `decode`
//! walks the packets only; `limit` is the physical limit of the architecture's
//! performance table: the same payloads copied from a source of at least
//! `--limit-mib` (default 1024) of these packets repeated into a destination as
//! large, nothing else; `e2e` runs the F-engine simulator and the receiver in one
//! loop on one core (simulator -> in-memory wire -> chunks); `udp` sends the
//! simulator's packets over UDP loopback from a second thread at `--gbps` and
//! reports the fraction of heaps received (in `fraction_present`).
//!
//! `--what a,b,...` runs several cases alternately in one process, round by round
//! (the first case rotating), e.g. `chunks,limit,limit/hdr`. `limit/VARIANT` (or
//! `--limit-variant`) adds per-packet work to the limit loop, as diagnostics:
//! `hdr` reads and compares each header as header prediction does, `book` adds
//! bookkeeping stores, `hdr-book` both, `batch4|8|16` reads N headers then does N
//! copies, `touch` reads one byte of each header line, `hdr-sum` sums the header
//! words, `hdr2` reads two of them, `hdr-avx` compares with 256-bit loads,
//! `small-src` / `ring` / `small` take the source size of `chunks` and / or a
//! destination ring of four chunks. `--limit-dst-mib` sets a destination ring.
//!
//! Modes: `single` = 1 KiB heaps in one packet each (64 antennas, 32 heaps per
//! antenna per chunk); `multi` = 64 KiB heaps of 64 packets of 1 KiB (16 antennas,
//! 8 heaps per antenna per chunk). `--copy stream|plain` chooses how `chunks`,
//! `memcpy` and `limit` copy payloads: non-temporal stores (`stream`, the default,
//! as `KatgpucbfPlace::chunk_config`) or `copy_from_slice`. The packets sit
//! `--src-offset` bytes (default 0) past a page boundary, for every case alike.
//! CPU time is the whole process's (`CLOCK_PROCESS_CPUTIME_ID`), taken at the
//! same points as the wall clock (setup excluded).
//! Every line printed is one JSON measurement.

mod spead_common;

use std::time::Instant;

use linerate::buf::copy::{self, CopyMode};
use linerate::spead::chunk::{ChunkBuf, ChunkStream, KatgpucbfPlace, Push};
use linerate::spead::fsim::{Fsim, FsimConfig};
use linerate::spead::wire::decode;

/// Wall-clock and CPU seconds of one measured region.
type Secs = (f64, f64);

/// Starts measuring a region: wall clock and this process's CPU time, both taken
/// at the same points (after setup such as allocating chunks).
struct Timer {
    wall: Instant,
    cpu: u64,
}

impl Timer {
    fn start() -> Timer {
        Timer {
            cpu: cpu_ns(),
            wall: Instant::now(),
        }
    }

    fn stop(&self) -> Secs {
        let wall = self.wall.elapsed().as_secs_f64();
        (wall, (cpu_ns() - self.cpu) as f64 * 1e-9)
    }
}

struct Args {
    mode: String,
    mib: usize,
    rounds: usize,
    write: Option<String>,
    read: Option<String>,
    what: String,
    gbps: f64,
    copy: Option<CopyMode>,
    limit_mib: usize,
    limit_dst_mib: usize,
    limit_variant: String,
    src_offset: usize,
}

fn args() -> Args {
    let mut a = Args {
        mode: "single".into(),
        mib: 256,
        rounds: 3,
        write: None,
        read: None,
        what: "chunks".into(),
        gbps: 2.0,
        copy: None,
        limit_mib: 1024,
        limit_dst_mib: 0,
        limit_variant: "plain".into(),
        src_offset: 0,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let next = v.get(i + 1).cloned().unwrap_or_default();
        match v[i].as_str() {
            "--mode" => a.mode = next,
            "--mib" => a.mib = next.parse().expect("--mib N"),
            "--rounds" => a.rounds = next.parse().expect("--rounds N"),
            "--write" => a.write = Some(next),
            "--read" => a.read = Some(next),
            "--what" => a.what = next,
            "--gbps" => a.gbps = next.parse().expect("--gbps G"),
            "--src-offset" => a.src_offset = next.parse().expect("--src-offset N"),
            "--limit-mib" => a.limit_mib = next.parse().expect("--limit-mib N"),
            "--limit-dst-mib" => a.limit_dst_mib = next.parse().expect("--limit-dst-mib N"),
            "--limit-variant" => a.limit_variant = next,
            "--copy" => {
                a.copy = Some(match next.as_str() {
                    "plain" => CopyMode::Plain,
                    "stream" => CopyMode::Stream,
                    other => panic!("--copy plain|stream, not {other}"),
                })
            }
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    a
}

/// The simulator and placement for a mode.
fn setup(mode: &str) -> (FsimConfig, u64) {
    match mode {
        // The receive-group benchmarks' packets.
        "single" => (spead_common::cfg(), spead_common::HEAPS_PER_CHUNK),
        "multi" => (
            FsimConfig {
                n_ants: 16,
                n_channels_total: 4096,
                n_channels_per_stream: 64,
                n_samples_per_channel: 256,
                n_pols: 2,
                packet_payload: 1024,
                ..FsimConfig::default()
            },
            8,
        ),
        other => panic!("--mode single|multi, not {other}"),
    }
}

fn main() {
    let a = args();
    let (cfg, hpfc) = setup(&a.mode);
    let place = KatgpucbfPlace::for_fsim(&cfg, hpfc);
    let packets = match &a.read {
        Some(p) => std::fs::read(p).expect("packets file"),
        None => {
            let per_ts = cfg.n_ants * cfg.packets_per_heap() * cfg.max_packet();
            let n_ts = (a.mib << 20) / per_ts;
            // Whole chunks only.
            let n_ts = (n_ts as u64 / hpfc).max(1) * hpfc;
            Fsim::new(cfg.clone())
                .expect("config")
                .packets_buffer(n_ts)
                .expect("packets")
                .0
        }
    };
    if let Some(p) = &a.write {
        std::fs::write(p, &packets).expect("write packets");
        println!(
            "{{\"written\":\"{p}\",\"bytes\":{},\"n_ants\":{},\"heap_bytes\":{},\"hpfc\":{},\"step\":{}}}",
            packets.len(),
            place.n_ants,
            place.heap_bytes,
            hpfc,
            place.timestamp_step
        );
        return;
    }
    // The packets `--src-offset` bytes past a page boundary, in the same kind of
    // memory as the limit's source, so that both copy from the same alignment.
    let packets = {
        let mut b = ChunkBuf::new(a.src_offset + packets.len());
        b[a.src_offset..].copy_from_slice(&packets);
        b
    };
    let packets = &packets[a.src_offset..];
    let n_chunk_packets = count_packets(packets);
    let copy_mode = a.copy.unwrap_or(CopyMode::Stream);
    // `--what a,b,...` runs the cases alternately in one process, round by round
    // (the first case rotating), so that they share the process's memory
    // placement and the machine's moments; `limit/VARIANT` is the limit loop
    // with a `--limit-variant`.
    let whats: Vec<&str> = a.what.split(',').collect();
    let mut limit = whats.iter().any(|w| w.starts_with("limit")).then(|| {
        Limit::new(
            packets,
            a.limit_mib << 20,
            a.limit_dst_mib << 20,
            a.src_offset,
            place.chunk_bytes() * 4,
        )
    });
    for r in 0..a.rounds {
        for k in 0..whats.len() {
            let what = whats[(k + r) % whats.len()];
            let mut n_packets = n_chunk_packets;
            let ((secs, cpu_secs), heaps, frac) = match (what, limit.as_mut()) {
                ("decode", _) => (decode_only(packets), 0, 1.0),
                ("memcpy", _) => (memcpy_only(packets, place.chunk_bytes(), copy_mode), 0, 1.0),
                (w, Some(l)) if w.starts_with("limit") => {
                    n_packets = l.n_packets;
                    let variant = w.strip_prefix("limit/").unwrap_or(&a.limit_variant);
                    (l.run(copy_mode, variant), 0, 1.0)
                }
                ("e2e", _) => end_to_end(&cfg, &place, n_packets),
                ("udp", _) => udp_loopback(&cfg, &place, n_packets, a.gbps),
                ("chunks", _) => run_chunks(packets, &place, copy_mode),
                (other, _) => panic!("--what chunks|memcpy|decode|limit|e2e|udp, not {other}"),
            };
            println!(
                "{{\"impl\":\"linerate\",\"what\":\"{}\",\"copy\":\"{}\",\"mode\":\"{}\",\"packets\":{},\"heaps\":{},\"secs\":{:.6},\"cpu_secs\":{:.6},\"pps\":{:.0},\"cpu_pps\":{:.0},\"payload_gbps\":{:.3},\"fraction_present\":{:.6},\"thp_mib\":{}}}",
                what,
                match copy_mode {
                    CopyMode::Plain => "plain",
                    CopyMode::Stream => "stream",
                },
                a.mode,
                n_packets,
                heaps,
                secs,
                cpu_secs,
                n_packets as f64 / secs,
                n_packets as f64 / cpu_secs,
                n_packets as f64 * 1024.0 * 8.0 / secs / 1e9,
                frac,
                thp_mib()
            );
        }
    }
}

/// MiB of this process's memory in transparent huge pages (`AnonHugePages` of
/// `/proc/self/smaps_rollup`; 0 where it cannot be read): packets and chunks on
/// 4 KiB pages cost a TLB miss every few packets.
fn thp_mib() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("AnonHugePages:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib >> 10)
}

/// CPU time of all this process's threads, in ns (on a shared machine, wall time
/// mostly measures the other tenants). `CLOCK_PROCESS_CPUTIME_ID` brings the
/// running thread's time up to date when read; `/proc/self/task/*/schedstat`,
/// used before, only advances at scheduler ticks (4 ms here), a 10 % error on
/// a 40 ms run.
fn cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live, writable timespec for the duration of the call.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn count_packets(buf: &[u8]) -> usize {
    let mut at = 0;
    let mut n = 0;
    while at < buf.len() {
        at += decode(&buf[at..]).expect("valid packets").packet_len();
        n += 1;
    }
    n
}

/// Reassembles the whole buffer; the consumer returns each chunk at once.
fn run_chunks(packets: &[u8], place: &KatgpucbfPlace, copy: CopyMode) -> (Secs, u64, f64) {
    // Chunks are pre-faulted (and huge-page advised) at allocation, so page faults
    // are not measured; the spead2 side gets numpy arrays written before use.
    let mut cfg = place.chunk_config(2, 4);
    cfg.copy = copy;
    let mut s = ChunkStream::new(cfg, place.clone());
    let t = Timer::start();
    let mut at = 0;
    while at < packets.len() {
        let (used, last) = s.push_buffer(&packets[at..]);
        at += used;
        while let Some(c) = s.poll_chunk() {
            s.add_free_chunk(c);
        }
        if matches!(last, Push::Discarded(_)) && used == 0 {
            break;
        }
    }
    s.flush();
    while let Some(c) = s.poll_chunk() {
        s.add_free_chunk(c);
    }
    let secs = t.stop();
    (secs, s.stats().heaps_complete, s.stats().fraction_present())
}

/// Decode alone: the walk over the packets without touching payloads.
fn decode_only(packets: &[u8]) -> Secs {
    let t = Timer::start();
    let mut at = 0;
    let mut sum = 0u64;
    while at < packets.len() {
        let h = decode(&packets[at..]).expect("valid");
        sum = sum.wrapping_add(h.heap_cnt ^ h.payload_offset);
        at += h.packet_len();
    }
    std::hint::black_box(sum);
    t.stop()
}

/// Decode and copy alone: each packet's payload to the next place of a buffer of
/// two chunks.
fn memcpy_only(packets: &[u8], chunk_bytes: usize, mode: CopyMode) -> Secs {
    // Same memory as the chunks: huge-page advised, pre-faulted.
    let mut dst = ChunkBuf::new(chunk_bytes * 2);
    let t = Timer::start();
    let mut at = 0;
    let mut off = 0;
    while at < packets.len() {
        let h = decode(&packets[at..]).expect("valid");
        let len = h.payload_length as usize;
        if off + len > dst.len() {
            off = 0;
        }
        let p = at + h.payload_start();
        copy::copy(mode, &mut dst[off..off + len], &packets[p..p + len]);
        off += len;
        at += h.packet_len();
    }
    copy::store_fence();
    std::hint::black_box(&dst);
    t.stop()
}

/// The physical limit: a source of at least `bytes` made of the packets repeated,
/// and a destination as large (both far larger than the last-level cache), or a
/// ring of `dst_bytes` when that is not 0 (a diagnostic: a ring of chunk size).
struct Limit {
    src: ChunkBuf,
    src_offset: usize,
    dst: ChunkBuf,
    stride: usize,
    payload_start: usize,
    payload_len: usize,
    n_packets: usize,
    /// The first packet's header words, and masks leaving out the payload
    /// offset's value (what header prediction compares).
    want: Vec<u64>,
    masks: Vec<u64>,
    /// Packets in the buffer `chunks` reads, and a ring of four chunks.
    small_src_packets: usize,
    ring: ChunkBuf,
}

/// Per-packet bookkeeping stores like `ChunkStream`'s (the `book` variants).
#[derive(Default)]
struct Book {
    packets: u64,
    predicted: u64,
    accepted: u64,
    bytes: u64,
    received: u64,
    offsets: Vec<u64>,
}

impl Limit {
    fn new(
        packets: &[u8],
        bytes: usize,
        dst_bytes: usize,
        src_offset: usize,
        ring_bytes: usize,
    ) -> Limit {
        let h = decode(packets).expect("valid");
        let stride = h.packet_len();
        assert_eq!(
            packets.len() % stride,
            0,
            "the limit needs same-size packets"
        );
        let n_packets = bytes.div_ceil(h.payload_length as usize);
        let mut src = ChunkBuf::new(src_offset + n_packets * stride);
        for c in src[src_offset..].chunks_mut(packets.len()) {
            let n = c.len();
            c.copy_from_slice(&packets[..n]);
        }
        let n = h.payload_start();
        let want: Vec<u64> = packets[..n]
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
            .collect();
        // The payload offset is item 3 (the simulator's order).
        let masks = (0..want.len())
            .map(|k| {
                if k == 3 {
                    (!h.flavour.max_value()).to_be()
                } else {
                    u64::MAX
                }
            })
            .collect();
        let dst_len = if dst_bytes == 0 {
            n_packets * h.payload_length as usize
        } else {
            dst_bytes / h.payload_length as usize * h.payload_length as usize
        };
        Limit {
            dst: ChunkBuf::new(dst_len),
            src,
            src_offset,
            stride,
            payload_start: n,
            payload_len: h.payload_length as usize,
            n_packets,
            want,
            masks,
            small_src_packets: packets.len() / stride,
            ring: ChunkBuf::new(ring_bytes),
        }
    }

    /// Copies every packet's payload to the next place of the destination;
    /// `variant` adds per-packet work for diagnostics: `hdr` reads and compares
    /// each header (as header prediction does), `book` does bookkeeping stores
    /// after each copy, `hdr-book` both.
    fn run(&mut self, mode: CopyMode, variant: &str) -> Secs {
        match variant {
            "plain" => self.run_v::<false, false>(mode, false, false),
            "hdr" => self.run_v::<true, false>(mode, false, false),
            "book" => self.run_v::<false, true>(mode, false, false),
            "hdr-book" => self.run_v::<true, true>(mode, false, false),
            // The source wrapped at the packets' buffer size (as `chunks` reads),
            // the destination a ring of four chunks (as `chunks` writes), or both.
            "small-src" => self.run_v::<false, false>(mode, true, false),
            "ring" => self.run_v::<false, false>(mode, false, true),
            "small" => self.run_v::<false, false>(mode, true, true),
            "hdr-small" => self.run_v::<true, false>(mode, true, true),
            // One byte of each of the header's cache lines read, nothing compared:
            // the cost of bringing the header in alone.
            "touch" => self.run_touch(mode, 0),
            // Every header word summed (no compare against the expected words).
            "hdr-sum" => self.run_touch(mode, 1),
            // Two header words (the first and the last) summed.
            "hdr2" => self.run_touch(mode, 2),
            // The header compared with 256-bit loads (three for 96 bytes).
            "hdr-avx" => self.run_touch(mode, 3),
            "batch4" => self.run_batch::<4>(mode),
            "batch8" => self.run_batch::<8>(mode),
            "batch16" => self.run_batch::<16>(mode),
            other => panic!("--limit-variant plain|hdr|book|hdr-book|small-src|ring|small|hdr-small|touch|batchN, not {other}"),
        }
    }

    #[inline(never)]
    fn run_v<const HDR: bool, const BOOK: bool>(
        &mut self,
        mode: CopyMode,
        small_src: bool,
        ring: bool,
    ) -> Secs {
        let dst: &mut [u8] = if ring { &mut self.ring } else { &mut self.dst };
        let src_packets = if small_src {
            self.small_src_packets
        } else {
            self.n_packets
        };
        let src: &[u8] = &self.src;
        let (want, masks) = (&self.want[..], &self.masks[..]);
        let mut book = Book {
            offsets: Vec::with_capacity(64),
            ..Book::default()
        };
        let mut mismatches = 0u64;
        let mut offsets = 0u64;
        let t = Timer::start();
        let mut d = 0;
        for k in 0..self.n_packets {
            let base = self.src_offset + k % src_packets * self.stride;
            if HDR {
                let mut diff = 0;
                for (w, (&want, &mask)) in src[base..base + self.payload_start]
                    .chunks_exact(8)
                    .zip(want.iter().zip(masks))
                {
                    diff |= (u64::from_ne_bytes(w.try_into().expect("8 bytes")) ^ want) & mask;
                }
                if diff != 0 {
                    mismatches += 1;
                }
                offsets = offsets.wrapping_add(u64::from_be_bytes(
                    src[base + 24..base + 32].try_into().expect("8 bytes"),
                ));
            }
            let p = base + self.payload_start;
            if d + self.payload_len > dst.len() {
                d = 0;
            }
            copy::copy(
                mode,
                &mut dst[d..d + self.payload_len],
                &src[p..p + self.payload_len],
            );
            d += self.payload_len;
            if BOOK {
                // Materialised in memory each packet, as `&mut self` fields are.
                let b = std::hint::black_box(&mut book);
                b.packets += 1;
                b.predicted += 1;
                if b.offsets.len() == 64 {
                    b.offsets.clear();
                    b.received = 0;
                }
                b.offsets.push(k as u64);
                b.received += self.payload_len as u64;
                b.accepted += 1;
                b.bytes += self.payload_len as u64;
            }
        }
        copy::store_fence();
        std::hint::black_box((&dst, mismatches, offsets, &book.packets));
        t.stop()
    }
}

/// Whether `h` equals `want` under `masks` (8-byte words), 32 bytes per step.
///
/// # Safety
///
/// The CPU has AVX2, and `want` and `masks` hold at least `h.len() / 8` words.
#[target_feature(enable = "avx2")]
unsafe fn masked_eq_avx2(h: &[u8], want: &[u64], masks: &[u64]) -> bool {
    use std::arch::x86_64::*;
    let n = h.len() / 32;
    let mut acc = _mm256_setzero_si256();
    for i in 0..n {
        // SAFETY: 32 bytes at 32 * i are inside `h`, and inside `want` and
        // `masks` (as many words as `h` has), unaligned loads.
        unsafe {
            let a = _mm256_loadu_si256(h.as_ptr().add(32 * i).cast());
            let w = _mm256_loadu_si256(want.as_ptr().add(4 * i).cast());
            let m = _mm256_loadu_si256(masks.as_ptr().add(4 * i).cast());
            acc = _mm256_or_si256(acc, _mm256_and_si256(_mm256_xor_si256(a, w), m));
        }
    }
    _mm256_testz_si256(acc, acc) == 1
}

impl Limit {
    /// The limit loop reading one byte of every cache line of each header first.
    #[inline(never)]
    fn run_touch(&mut self, mode: CopyMode, how: u8) -> Secs {
        let dst: &mut [u8] = &mut self.dst;
        let src: &[u8] = &self.src;
        let mut sum = 0u8;
        let t = Timer::start();
        let mut d = 0;
        for k in 0..self.n_packets {
            let base = self.src_offset + k * self.stride;
            let word = |at: usize| u64::from_ne_bytes(src[at..at + 8].try_into().expect("8"));
            match how {
                0 => {
                    let mut line = base & !63;
                    while line < base + self.payload_start {
                        sum = sum.wrapping_add(src[line.max(base)]);
                        line += 64;
                    }
                }
                1 => {
                    let mut w = 0u64;
                    for at in (base..base + self.payload_start).step_by(8) {
                        w = w.wrapping_add(word(at));
                    }
                    sum = sum.wrapping_add(w as u8);
                }
                2 => {
                    let w = word(base) ^ word(base + self.payload_start - 8);
                    sum = sum.wrapping_add(w as u8);
                }
                _ => {
                    assert!(std::arch::is_x86_feature_detected!("avx2"));
                    let h = &src[base..base + self.payload_start];
                    // SAFETY: AVX2 was detected just above; `h` is `payload_start`
                    // bytes and `want` and `masks` hold `payload_start / 8` words.
                    let eq = unsafe { masked_eq_avx2(h, &self.want, &self.masks) };
                    sum = sum.wrapping_add(u8::from(eq));
                }
            }
            let p = base + self.payload_start;
            if d + self.payload_len > dst.len() {
                d = 0;
            }
            copy::copy(
                mode,
                &mut dst[d..d + self.payload_len],
                &src[p..p + self.payload_len],
            );
            d += self.payload_len;
        }
        copy::store_fence();
        std::hint::black_box((&dst, sum));
        t.stop()
    }

    /// `hdr-book` in batches of `N` packets: the `N` headers read and compared
    /// (offsets recorded), then the `N` copies back to back, then the counters once.
    #[inline(never)]
    fn run_batch<const N: usize>(&mut self, mode: CopyMode) -> Secs {
        let dst: &mut [u8] = &mut self.dst;
        let src: &[u8] = &self.src;
        let (want, masks) = (&self.want[..], &self.masks[..]);
        let mut book = Book {
            offsets: Vec::with_capacity(64),
            ..Book::default()
        };
        let mut mismatches = 0u64;
        let mut offsets = 0u64;
        let t = Timer::start();
        let mut d = 0;
        let mut k = 0;
        while k + N <= self.n_packets {
            let b = std::hint::black_box(&mut book);
            for j in 0..N {
                let base = self.src_offset + (k + j) * self.stride;
                let mut diff = 0;
                for (w, (&want, &mask)) in src[base..base + self.payload_start]
                    .chunks_exact(8)
                    .zip(want.iter().zip(masks))
                {
                    diff |= (u64::from_ne_bytes(w.try_into().expect("8 bytes")) ^ want) & mask;
                }
                if diff != 0 {
                    mismatches += 1;
                }
                let off =
                    u64::from_be_bytes(src[base + 24..base + 32].try_into().expect("8 bytes"));
                offsets = offsets.wrapping_add(off);
                if b.offsets.len() == 64 {
                    b.offsets.clear();
                    b.received = 0;
                }
                b.offsets.push(off);
            }
            for j in 0..N {
                let p = self.src_offset + (k + j) * self.stride + self.payload_start;
                if d + self.payload_len > dst.len() {
                    d = 0;
                }
                copy::copy(
                    mode,
                    &mut dst[d..d + self.payload_len],
                    &src[p..p + self.payload_len],
                );
                d += self.payload_len;
            }
            let b = std::hint::black_box(&mut book);
            b.packets += N as u64;
            b.predicted += N as u64;
            b.received += (N * self.payload_len) as u64;
            b.accepted += N as u64;
            b.bytes += (N * self.payload_len) as u64;
            k += N;
        }
        copy::store_fence();
        std::hint::black_box((&dst, mismatches, offsets, &book.packets));
        t.stop()
    }
}

/// The simulator feeding the receiver packet by packet, one core.
fn end_to_end(cfg: &FsimConfig, place: &KatgpucbfPlace, n_packets: usize) -> (Secs, u64, f64) {
    let mut sim = Fsim::new(cfg.clone()).expect("config");
    let mut s = ChunkStream::new(place.chunk_config(2, 4), place.clone());
    let mut buf = vec![0u8; cfg.max_packet()];
    let t = Timer::start();
    for _ in 0..n_packets {
        let (n, _) = sim.next_packet(&mut buf).expect("packet");
        while s.push(0, &buf[..n]) == Push::Stall {
            while let Some(c) = s.poll_chunk() {
                s.add_free_chunk(c);
            }
        }
        while let Some(c) = s.poll_chunk() {
            s.add_free_chunk(c);
        }
    }
    s.flush();
    let secs = t.stop();
    let st = s.stats();
    assert_eq!(
        st.heaps_incomplete_evicted + st.heaps_incomplete_flushed + st.heaps_too_old,
        0,
        "no heap may be lost on the in-memory path"
    );
    (secs, st.heaps_complete, st.fraction_present())
}

/// The simulator sends over UDP loopback at `gbps` from a thread; the receiver
/// places into chunks until the end-of-stream heap (or a 2 s silence).
fn udp_loopback(
    cfg: &FsimConfig,
    place: &KatgpucbfPlace,
    n_packets: usize,
    gbps: f64,
) -> (Secs, u64, f64) {
    use linerate::spead::send::{Pacer, Packetizer, SendHeap};
    use std::net::UdpSocket;
    let rx = UdpSocket::bind("127.0.0.1:0").expect("bind");
    set_rcvbuf(&rx, 256 << 20);
    rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .expect("timeout");
    let dest = rx.local_addr().expect("addr");
    let cfg2 = cfg.clone();
    let sender = std::thread::spawn(move || {
        let tx = UdpSocket::bind("127.0.0.1:0").expect("bind");
        tx.connect(dest).expect("connect");
        let mut sim = Fsim::new(cfg2.clone()).expect("config");
        let mut buf = vec![0u8; cfg2.max_packet().max(1500)];
        let clock = linerate::time::Clock::new();
        let mut pacer = Pacer::new(gbps * 1e9, clock.now(), 20_000);
        for _ in 0..n_packets {
            let (n, _) = sim.next_packet(&mut buf).expect("packet");
            while let Err(due) = pacer.poll(clock.now(), n) {
                let wait = due.as_nanos().saturating_sub(clock.now().as_nanos());
                if wait > 100_000 {
                    std::thread::sleep(std::time::Duration::from_nanos(wait - 50_000));
                } else {
                    std::hint::spin_loop();
                }
            }
            let _ = tx.send(&buf[..n]);
        }
        let f = cfg2.flavour;
        let (ptrs, payload) = SendHeap::end_of_stream(1 << 40).layout(f).expect("eos");
        let mut pk = Packetizer::new(f, 1 << 40, &ptrs, &payload, 1500).expect("eos");
        while let Some(Ok(n)) = pk.next_packet(&mut buf) {
            for _ in 0..3 {
                let _ = tx.send(&buf[..n]);
            }
        }
    });
    let mut s = ChunkStream::new(place.chunk_config(4, 8), place.clone());
    let mut buf = vec![0u8; 65536];
    let t = Timer::start();
    while !s.stats().stopped {
        let Ok(n) = rx.recv(&mut buf) else { break };
        while s.push(0, &buf[..n]) == Push::Stall {
            while let Some(c) = s.poll_chunk() {
                s.add_free_chunk(c);
            }
        }
        while let Some(c) = s.poll_chunk() {
            s.add_free_chunk(c);
        }
    }
    s.flush();
    let secs = t.stop();
    sender.join().expect("sender");
    let heaps_sent = (n_packets / cfg.packets_per_heap()) as f64;
    let st = s.stats();
    (
        secs,
        st.heaps_complete,
        st.heaps_complete as f64 / heaps_sent,
    )
}

/// A large receive buffer (as spead2's UDP reader asks for), forced past
/// `net.core.rmem_max` when running as root; a plain request otherwise.
fn set_rcvbuf(sock: &std::net::UdpSocket, bytes: libc::c_int) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `fd` is an open socket owned by `sock` for the duration of the
        // call, and the option value points to a live c_int of the stated size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}
