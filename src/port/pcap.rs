//! The pcap port: a capture file read as a source and written as a sink,
//! readable by tcpdump and tshark (classic pcap, Ethernet link type).
//!
//! A capture to read is loaded and checked whole when the port opens, so a
//! truncated or foreign file is a clear error before anything runs, and reading
//! costs no I/O on the hot path. (Captures larger than memory are out of scope
//! for now.) Writes go through a buffered writer and are flushed at stop.

use std::fs::File;
use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::{DataLink, TsResolution};

use crate::buf::{Burst, Pool, PoolCache};
use crate::pace::{Pace as TrafficPace, Pacer};
use crate::time::Instant;

use super::{OpenPort, PortCounters, PortError, PortReport, PortStats, RxQueue, TxQueue};

/// How a capture is replayed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Pace {
    /// As fast as the pipeline takes it.
    #[default]
    Fast,
    /// At the pace recorded in the capture's timestamps, its gaps divided by
    /// the speed-up (1: as recorded, 2: twice as fast).
    Recorded {
        /// Recorded gaps are divided by this (> 0).
        speedup: f64,
    },
    /// At a set packet rate, evenly spaced, whatever the recorded times.
    Rate {
        /// Packets per second (> 0).
        pps: f64,
    },
}

/// A pcap port's configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PcapConfig {
    /// Capture to replay on the rx side.
    pub read: Option<PathBuf>,
    /// Capture to write from the tx side.
    pub write: Option<PathBuf>,
    /// Replay pace.
    pub pace: Pace,
    /// Times to replay the capture (0 = forever).
    pub repeat: u32,
    /// An 802.1Q tag with this VLAN id (0..=4095) inserted in every replayed
    /// frame after its MAC addresses.
    pub vlan: Option<u16>,
}

/// A capture loaded into memory.
#[derive(Debug, Default)]
pub struct Capture {
    data: Vec<u8>,
    /// (offset into data, length, timestamp since the first packet)
    records: Vec<(usize, usize, Duration)>,
}

impl Capture {
    /// Loads and checks a whole capture.
    pub fn load(path: &Path) -> Result<Capture, PortError> {
        let bad = |why: String| PortError::Input(format!("{}: {why}", path.display()));
        let mut file = File::open(path).map_err(|e| bad(format!("cannot open: {e}")))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| bad(format!("cannot read: {e}")))?;
        if bytes.starts_with(&[0x0a, 0x0d, 0x0d, 0x0a]) {
            return Err(bad(
                "is a pcapng capture; convert it with `editcap -F pcap IN OUT`".into(),
            ));
        }
        let mut reader = PcapReader::new(&bytes[..]).map_err(|e| {
            bad(format!(
                "is not a pcap capture ({e}); a pcap file starts with the magic a1b2c3d4 or a1b23c4d"
            ))
        })?;
        let mut cap = Capture::default();
        let mut first = None;
        let mut index = 0usize;
        while let Some(pkt) = reader.next_packet() {
            let pkt = pkt.map_err(|e| {
                bad(format!(
                    "record {index} is damaged or cut short ({e}); the file is truncated"
                ))
            })?;
            let t0 = *first.get_or_insert(pkt.timestamp);
            cap.records.push((
                cap.data.len(),
                pkt.data.len(),
                pkt.timestamp.saturating_sub(t0),
            ));
            cap.data.extend_from_slice(&pkt.data);
            index += 1;
        }
        Ok(cap)
    }

    /// Number of packets.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the capture has no packet.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Packet `i`'s bytes.
    pub fn packet(&self, i: usize) -> &[u8] {
        let (off, len, _) = self.records[i];
        &self.data[off..off + len]
    }
}

struct Stats {
    common: PortCounters,
}

impl PortStats for Stats {
    fn report(&self) -> PortReport {
        self.common.report("pcap")
    }
}

/// Opens a pcap port; `pool` supplies the buffers replayed packets are copied into.
pub fn open(config: &PcapConfig, pool: &Pool) -> Result<OpenPort, PortError> {
    let stats = Arc::new(Stats {
        common: PortCounters::default(),
    });
    let mut warnings = Vec::new();
    let rx: Vec<Box<dyn RxQueue>> = match &config.read {
        Some(path) => {
            let capture = Capture::load(path)?;
            if capture.is_empty() {
                warnings.push(format!("{} holds no packet", path.display()));
            }
            // A tag makes every frame 4 bytes longer.
            let grow = if config.vlan.is_some() { TAG_LEN } else { 0 };
            if let Some(big) = capture
                .records
                .iter()
                .find(|r| r.1 + grow > pool.data_room())
            {
                return Err(PortError::Input(format!(
                    "{} holds a {}-byte packet but pool buffers hold {} bytes; raise `size` in [pool]",
                    path.display(),
                    big.1 + grow,
                    pool.data_room()
                )));
            }
            vec![Box::new(PcapRx {
                capture,
                next: 0,
                round: 0,
                replayed: 0,
                pacer: match config.pace {
                    Pace::Rate { pps } => Some(Pacer::new(TrafficPace::Constant, pps)),
                    _ => None,
                },
                config: config.clone(),
                start: None,
                cache: pool.cache(),
                stats: stats.clone(),
            })]
        }
        None => Vec::new(),
    };
    let tx: Vec<Box<dyn TxQueue>> = match &config.write {
        Some(path) => {
            // A fresh checkout has no results/ yet: make the directory.
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| {
                    PortError::Input(format!(
                        "{}: cannot create its directory: {e}",
                        path.display()
                    ))
                })?;
            }
            let file = File::create(path)
                .map_err(|e| PortError::Input(format!("{}: cannot create: {e}", path.display())))?;
            let header = PcapHeader {
                datalink: DataLink::ETHERNET,
                ts_resolution: TsResolution::NanoSecond,
                ..PcapHeader::default()
            };
            let writer = PcapWriter::with_header(BufWriter::with_capacity(1 << 20, file), header)
                .map_err(|e| PortError::Input(format!("{}: {e}", path.display())))?;
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            vec![Box::new(PcapTx {
                writer: Some(writer),
                path: path.clone(),
                wall,
                error: None,
                stats: stats.clone(),
            })]
        }
        None => Vec::new(),
    };
    Ok(OpenPort {
        rx,
        tx,
        stats,
        warnings,
    })
}

struct PcapRx {
    capture: Capture,
    next: usize,
    round: u32,
    /// Packets replayed so far (all rounds), for `Pace::Rate`.
    replayed: u64,
    /// The evenly spaced schedule of `Pace::Rate`.
    pacer: Option<Pacer>,
    config: PcapConfig,
    /// When replay started, and the capture time of that moment, for pacing.
    start: Option<Instant>,
    cache: PoolCache,
    stats: Arc<Stats>,
}

impl RxQueue for PcapRx {
    fn rx_burst(&mut self, now: Instant, out: &mut Burst, max: usize) -> usize {
        if self.is_finished() || self.capture.is_empty() {
            return 0;
        }
        let start = *self.start.get_or_insert(now);
        let span = self.capture.records.last().map_or(Duration::ZERO, |r| r.2);
        let mut n = 0;
        let mut bytes = 0;
        let max = max.min(out.room());
        while n < max && !self.is_finished() {
            let (_, _, ts) = self.capture.records[self.next];
            match self.config.pace {
                Pace::Fast => {}
                Pace::Recorded { speedup } => {
                    // Each round starts where the previous one's span ended.
                    let due = start + (span * self.round + ts).div_f64(speedup);
                    if due > now {
                        break;
                    }
                }
                Pace::Rate { .. } => {
                    let elapsed = now.as_nanos().saturating_sub(start.as_nanos());
                    let due = self.pacer.as_mut().map_or(u64::MAX, |p| p.due_by(elapsed));
                    // The first packet goes at the start, the rest on the schedule.
                    if self.replayed > due {
                        break;
                    }
                }
            }
            let Some(mut pkt) = self.cache.alloc() else {
                self.stats.common.rx.dropped.add(1);
                break;
            };
            let frame = self.capture.packet(self.next);
            // Cannot fail: open() checked every packet (and its tag) fits a buffer.
            let len = match self.config.vlan {
                None => {
                    let _ = pkt.set_data(frame);
                    frame.len()
                }
                Some(vid) => {
                    let len = tag_into(frame, vid, pkt.spare_capacity());
                    let _ = pkt.set_len(len);
                    len
                }
            };
            bytes += len as u64;
            self.replayed += 1;
            let _ = out.push(pkt);
            n += 1;
            self.next += 1;
            if self.next == self.capture.len() {
                self.next = 0;
                self.round += 1;
            }
        }
        self.stats.common.rx.packets.add(n as u64);
        self.stats.common.rx.bytes.add(bytes);
        n
    }

    fn is_finished(&self) -> bool {
        self.capture.is_empty() || (self.config.repeat != 0 && self.round >= self.config.repeat)
    }

    fn is_finite(&self) -> bool {
        self.config.repeat != 0 || self.capture.is_empty()
    }
}

/// Bytes an 802.1Q tag adds.
const TAG_LEN: usize = crate::net::vlan::HEADER_LEN;

/// Writes `frame` into `room` with an 802.1Q tag of VLAN id `vid` after its
/// MAC addresses (priority 0); returns the tagged length. A frame too short to
/// hold the addresses and an EtherType is copied untagged. `room` holds
/// `frame.len() + TAG_LEN` bytes (the port checked at open).
fn tag_into(frame: &[u8], vid: u16, room: &mut [u8]) -> usize {
    const MACS: usize = 12;
    if frame.len() < MACS + 2 || room.len() < frame.len() + TAG_LEN {
        let n = frame.len().min(room.len());
        room[..n].copy_from_slice(&frame[..n]);
        return n;
    }
    room[..MACS].copy_from_slice(&frame[..MACS]);
    room[MACS..MACS + 2].copy_from_slice(&crate::net::ethernet::ethertype::VLAN.to_be_bytes());
    room[MACS + 2..MACS + 4].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
    room[MACS + TAG_LEN..frame.len() + TAG_LEN].copy_from_slice(&frame[MACS..]);
    frame.len() + TAG_LEN
}

struct PcapTx {
    writer: Option<PcapWriter<BufWriter<File>>>,
    path: PathBuf,
    wall: Duration,
    error: Option<String>,
    stats: Arc<Stats>,
}

impl TxQueue for PcapTx {
    fn tx_burst(&mut self, now: Instant, pkts: &mut Burst) -> usize {
        let n = pkts.len();
        let ts = self.wall + Duration::from_nanos(now.as_nanos());
        let mut bytes = 0;
        for pkt in pkts.drain() {
            let Some(w) = self.writer.as_mut() else {
                self.stats.common.tx.dropped.add(1);
                continue;
            };
            let rec = PcapPacket::new(ts, pkt.len() as u32, pkt.data());
            match w.write_packet(&rec) {
                Ok(_) => bytes += pkt.len() as u64,
                Err(e) => {
                    self.error = Some(e.to_string());
                    self.writer = None;
                    self.stats.common.tx.dropped.add(1);
                }
            }
        }
        self.stats.common.tx.packets.add(n as u64);
        self.stats.common.tx.bytes.add(bytes);
        n
    }

    fn finish(&mut self) -> Result<(), PortError> {
        if let Some(w) = self.writer.take() {
            use std::io::Write;
            if let Err(e) = w.into_writer().flush() {
                self.error = Some(e.to_string());
            }
        }
        match &self.error {
            Some(e) => Err(PortError::Runtime(format!(
                "writing {} failed: {e}",
                self.path.display()
            ))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::net::{ethernet, vlan};

    /// A replay of 11 frames recorded 1 ms apart, paced by `pace`; returns
    /// how many it released by each of `at_ms` (virtual ms after the first poll).
    fn released(pace: Pace, at_ms: &[u64]) -> Vec<usize> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pcap");
        {
            let f = File::create(&path).unwrap();
            let mut w = PcapWriter::new(f).unwrap();
            for i in 0..11u64 {
                let pkt = PcapPacket::new(Duration::from_millis(i), 60, &[0u8; 60]);
                w.write_packet(&pkt).unwrap();
            }
        }
        let pool = Pool::new(&crate::buf::PoolConfig::default()).unwrap();
        let config = PcapConfig {
            read: Some(path),
            pace,
            repeat: 1,
            ..PcapConfig::default()
        };
        let mut rx = open(&config, &pool).unwrap().rx.pop().unwrap();
        let mut total = 0;
        let mut out = Vec::new();
        let mut burst = Burst::new();
        total += rx.rx_burst(Instant::from_millis(1000), &mut burst, 32);
        burst.clear();
        for &ms in at_ms {
            total += rx.rx_burst(Instant::from_millis(1000 + ms), &mut burst, 32);
            burst.clear();
            out.push(total);
        }
        out
    }

    #[test]
    fn recorded_gaps_divided_by_the_speedup() {
        let at = [2, 4, 5, 6];
        assert_eq!(released(Pace::Recorded { speedup: 1.0 }, &at), [3, 5, 6, 7]);
        // Twice as fast: the 10 ms capture takes 5.
        assert_eq!(
            released(Pace::Recorded { speedup: 2.0 }, &at),
            [5, 9, 11, 11]
        );
    }

    #[test]
    fn a_set_rate_ignores_the_recorded_times() {
        // 500 pps: one frame every 2 ms from the first poll.
        let at = [1, 2, 4, 19, 20];
        assert_eq!(released(Pace::Rate { pps: 500.0 }, &at), [1, 2, 3, 10, 11]);
    }

    #[test]
    fn a_tag_goes_after_the_macs() {
        let frame: Vec<u8> = (0..60u8).collect();
        let mut room = [0u8; 128];
        let n = tag_into(&frame, 100, &mut room);
        assert_eq!(n, 64);
        let eth = ethernet::Frame::new_checked(&room[..n]).unwrap();
        assert_eq!(eth.ethertype(), ethernet::ethertype::VLAN);
        let tag = vlan::Tag::new_checked(&room[14..n]).unwrap();
        assert_eq!(tag.vid(), 100);
        assert_eq!(tag.ethertype(), u16::from_be_bytes([12, 13]));
        assert_eq!(&room[..12], &frame[..12]);
        assert_eq!(&room[18..n], &frame[14..]);
        // Too short for an EtherType: copied as is.
        assert_eq!(tag_into(&frame[..10], 100, &mut room), 10);
    }
}
