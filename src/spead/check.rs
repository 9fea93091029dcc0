//! What a chunk consumer does with a chunk: discard it, check it against the
//! F-engine simulator's deterministic payload (every wrong byte reported with its
//! location), or write it to files (raw bytes plus a JSON sidecar with the chunk
//! id, timestamp and `present` map).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::chunk::{Chunk, KatgpucbfPlace};
use super::fsim::{heap_seed, payload_word};

/// Where a wrong byte is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WrongByte {
    /// Chunk id.
    pub chunk_id: i64,
    /// Heap index in the chunk.
    pub heap_index: usize,
    /// F-engine of the heap.
    pub feng_id: u64,
    /// Timestamp of the heap.
    pub timestamp: u64,
    /// Offset within the heap.
    pub heap_offset: u64,
    /// Offset within the chunk's data.
    pub chunk_offset: usize,
    /// Expected byte.
    pub expected: u8,
    /// Byte found.
    pub got: u8,
}

/// What checking found so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Chunks checked.
    pub chunks: u64,
    /// Heaps present and checked.
    pub heaps_checked: u64,
    /// Heaps absent (`present` = 0), not checked.
    pub heaps_absent: u64,
    /// Bytes compared.
    pub bytes_checked: u64,
    /// Wrong bytes in all.
    pub wrong_bytes: u64,
    /// The first wrong bytes (up to the limit given to [`Checker::new`]).
    pub first_wrong: Vec<WrongByte>,
}

/// Verifies chunks built from the simulator's stream with katgpucbf's placement.
#[derive(Debug, Clone)]
pub struct Checker {
    place: KatgpucbfPlace,
    keep: usize,
    report: CheckReport,
}

impl Checker {
    /// A checker that keeps the first `keep` wrong bytes in its report.
    pub fn new(place: KatgpucbfPlace, keep: usize) -> Checker {
        Checker {
            place,
            keep,
            report: CheckReport::default(),
        }
    }

    /// The report.
    pub fn report(&self) -> &CheckReport {
        &self.report
    }

    /// Checks every present heap of `chunk`, calling `on_wrong` for every wrong
    /// byte. Returns the number of wrong bytes in this chunk.
    pub fn check(&mut self, chunk: &Chunk, mut on_wrong: impl FnMut(&WrongByte)) -> u64 {
        let hb = self.place.heap_bytes as usize;
        let mut wrong = 0;
        self.report.chunks += 1;
        for (hi, &p) in chunk.present.iter().enumerate() {
            if p == 0 {
                self.report.heaps_absent += 1;
                continue;
            }
            let (feng, ts) = self.place.heap_identity(chunk.chunk_id, hi);
            let Some(heap) = chunk.data.get(hi * hb..(hi + 1) * hb) else {
                continue;
            };
            self.report.heaps_checked += 1;
            self.report.bytes_checked += hb as u64;
            let seed = heap_seed(feng, ts);
            for (j, w) in heap.chunks(8).enumerate() {
                let want = payload_word(seed, j as u64).to_le_bytes();
                if w == &want[..w.len()] {
                    continue;
                }
                for (k, (&got, &expected)) in w.iter().zip(want.iter()).enumerate() {
                    if got != expected {
                        let off = j * 8 + k;
                        let e = WrongByte {
                            chunk_id: chunk.chunk_id,
                            heap_index: hi,
                            feng_id: feng,
                            timestamp: ts,
                            heap_offset: off as u64,
                            chunk_offset: hi * hb + off,
                            expected,
                            got,
                        };
                        on_wrong(&e);
                        wrong += 1;
                        if self.report.first_wrong.len() < self.keep {
                            self.report.first_wrong.push(e);
                        }
                    }
                }
            }
        }
        self.report.wrong_bytes += wrong;
        wrong
    }
}

/// The JSON sidecar of a chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sidecar {
    /// Chunk id.
    pub chunk_id: i64,
    /// Timestamp of its first heap.
    pub timestamp: u64,
    /// Bytes per heap.
    pub heap_bytes: u64,
    /// Antennas.
    pub n_ants: u64,
    /// Heaps per F-engine in the chunk.
    pub heaps_per_fengine_per_chunk: u64,
    /// Layout of the raw file.
    pub layout: &'static str,
    /// Heaps present.
    pub present_count: usize,
    /// The `present` map.
    pub present: Vec<u8>,
}

/// The sidecar describing `chunk`.
pub fn sidecar(place: &KatgpucbfPlace, chunk: &Chunk) -> Sidecar {
    Sidecar {
        chunk_id: chunk.chunk_id,
        timestamp: place.chunk_timestamp(chunk.chunk_id),
        heap_bytes: place.heap_bytes,
        n_ants: place.n_ants,
        heaps_per_fengine_per_chunk: place.heaps_per_fengine_per_chunk,
        layout: "[heaps_per_fengine_per_chunk][n_ants][n_channels_per_stream][n_samples_per_channel][n_pols][re,im] int8",
        present_count: chunk.present_count(),
        present: chunk.present.clone(),
    }
}

/// Writes `chunk_<id>.raw` and `chunk_<id>.json` into `dir`; returns both paths.
pub fn write_chunk(
    dir: &Path,
    place: &KatgpucbfPlace,
    chunk: &Chunk,
) -> io::Result<(PathBuf, PathBuf)> {
    let raw = dir.join(format!("chunk_{:010}.raw", chunk.chunk_id));
    let json = dir.join(format!("chunk_{:010}.json", chunk.chunk_id));
    fs::write(&raw, &chunk.data[..])?;
    let text = serde_json::to_string_pretty(&sidecar(place, chunk)).map_err(io::Error::other)?;
    fs::write(&json, text)?;
    Ok((raw, json))
}

/// What a chunk sink does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkMode {
    /// Drop chunks (measures the receiver alone).
    Discard,
    /// Verify the simulator's payload.
    Check,
    /// Write chunks to this directory.
    Write(PathBuf),
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::spead::chunk::{ChunkStream, Push};
    use crate::spead::fsim::{Fsim, FsimConfig};

    fn chunks() -> (KatgpucbfPlace, Vec<Chunk>) {
        let cfg = FsimConfig {
            n_ants: 2,
            n_channels_total: 32,
            n_channels_per_stream: 2,
            n_samples_per_channel: 16,
            packet_payload: 64,
            ..FsimConfig::default()
        };
        let place = KatgpucbfPlace::for_fsim(&cfg, 2);
        let mut s = ChunkStream::new(place.chunk_config(2, 4), place.clone());
        let (buf, ends) = Fsim::new(cfg).unwrap().packets_buffer(4).unwrap();
        // Drop one packet (the 3rd) so one heap is absent.
        let mut start = 0;
        for (i, &e) in ends.iter().enumerate() {
            if i != 2 {
                assert_eq!(s.push(0, &buf[start..e]), Push::Accepted);
            }
            start = e;
        }
        s.flush();
        let mut v = Vec::new();
        while let Some(c) = s.poll_chunk() {
            v.push(c);
        }
        (place, v)
    }

    #[test]
    fn clean_chunks_pass_and_corruption_is_located() {
        let (place, mut cs) = chunks();
        assert_eq!(cs.len(), 2);
        let mut ck = Checker::new(place.clone(), 10);
        for c in &cs {
            assert_eq!(ck.check(c, |_| {}), 0);
        }
        assert_eq!(ck.report().heaps_absent, 1);
        assert_eq!(ck.report().heaps_checked, 7);
        // Corrupt two bytes of heap 3 of chunk 1.
        let hb = place.heap_bytes as usize;
        cs[1].data[3 * hb + 5] ^= 0xff;
        cs[1].data[3 * hb + 70] ^= 0x01;
        let mut seen = Vec::new();
        assert_eq!(ck.check(&cs[1], |w| seen.push(*w)), 2);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].heap_index, 3);
        assert_eq!(seen[0].heap_offset, 5);
        assert_eq!(seen[0].chunk_id, 1);
        let (feng, ts) = place.heap_identity(1, 3);
        assert_eq!((seen[0].feng_id, seen[0].timestamp), (feng, ts));
        assert_eq!(seen[1].heap_offset, 70);
        assert_eq!(seen[0].got, seen[0].expected ^ 0xff);
        assert_eq!(ck.report().wrong_bytes, 2);
    }

    #[test]
    fn write_raw_and_sidecar() {
        let (place, cs) = chunks();
        let dir = tempfile::tempdir().unwrap();
        let (raw, json) = write_chunk(dir.path(), &place, &cs[0]).unwrap();
        assert_eq!(fs::read(raw).unwrap(), &cs[0].data[..]);
        let v: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(json).unwrap()).unwrap();
        assert_eq!(v["chunk_id"], 0);
        assert_eq!(v["timestamp"], 0);
        assert_eq!(v["present"].as_array().unwrap().len(), 4);
        assert_eq!(v["present_count"], 3);
    }
}
