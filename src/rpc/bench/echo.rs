//! The transport echo: the shm transport alone carrying a depth-1 RPC's two
//! batches, with no endpoint. `rpc bench` measures it between the
//! ping-pongs and the RPCs, so each run splits its depth-1 round trip into
//! the floor (the two-line ping-pong), what the transport adds to it, and
//! what the endpoint adds on top (depth-1 p50 minus the echo's).
//!
//! It runs over a second, small region beside the bench's own (`PATH-echo`,
//! [`echo_path`]): the packed writes land at the peer's receive position,
//! so writes that are not the endpoint's would leave the main region's
//! transport out of step with its endpoints. `rpc serve` creates it; a
//! server that could not (no free hugepage, say) leaves the echo out and
//! the bench says so.
//!
//! Each side writes the batch a depth-1 RPC of the run's sizes would: the
//! client [`batch_len`]`(request)` bytes, the server that of the response,
//! with three words changing from one write to the next as in the
//! endpoint's (consumer position, call id, payload sequence). The server
//! echoes the client's sequence word and the client checks it, so each side
//! reads what it was sent.

use super::report::{PingPongReport, Windows};
use super::{new_hist, BenchResult, CTL_PHASE, PHASE_ECHO, PHASE_IDLE};
use crate::rpc::transport::shm::ShmTransport;
use crate::rpc::transport::Transport;
use crate::rpc::wire::{encode_imm, padded_message_size, FLOW_METADATA_SIZE};
use crate::time::Clock;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Ring size of the echo region: room for many batches, one hugepage.
pub(super) const ECHO_RING: u64 = 64 * 1024;

/// Byte offset of the sequence word the server echoes (the first payload
/// word after the flow metadata and message header, rounded to a word).
const SEQ_AT: usize = 32;

/// The words that change from one write to the next, as in an endpoint's
/// depth-1 batch: the consumer position, the call id's word, the payload's
/// sequence (the last two at [`SEQ_AT`] and after it).
const VARYING: [usize; 3] = [0, SEQ_AT, SEQ_AT + 16];

/// The echo region beside the bench region at `path`.
pub(crate) fn echo_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-echo");
    PathBuf::from(p)
}

/// Bytes of a batch carrying one message of `payload` bytes.
pub(super) fn batch_len(payload: u64) -> usize {
    (FLOW_METADATA_SIZE as u64 + padded_message_size(payload as u32)) as usize
}

/// One side's writes: its batch, where it writes next and where it reads.
/// Batches go at a power-of-two stride so they never cross the ring end.
pub(super) struct EchoSide {
    batch: Vec<u8>,
    stride: u64,
    send: u64,
    recv: u64,
    peer_len: u64,
    peer_stride: u64,
}

impl EchoSide {
    /// A side writing `len`-byte batches and reading `peer_len`-byte ones.
    pub(super) fn new(len: usize, peer_len: usize) -> Self {
        let stride = (len as u64).next_power_of_two();
        EchoSide {
            batch: vec![0x5a; len.max(VARYING[2] + 8)],
            stride,
            send: 0,
            recv: 0,
            peer_len: peer_len as u64,
            peer_stride: (peer_len as u64).next_power_of_two(),
        }
    }

    /// Writes the batch with its varying words set to `stamp` and the
    /// sequence word to `seq`.
    fn write(&mut self, t: &mut ShmTransport, stamp: u64, seq: u64) -> Result<(), String> {
        for o in VARYING {
            self.batch[o..o + 8].copy_from_slice(&stamp.to_le_bytes());
        }
        self.batch[SEQ_AT..SEQ_AT + 8].copy_from_slice(&seq.to_le_bytes());
        let len = self.batch.len().min(self.stride as usize);
        t.write_with_imm(self.send, &self.batch[..len], encode_imm(self.stride))
            .map_err(|e| format!("transport echo: {e}"))?;
        self.send = (self.send + self.stride) % ECHO_RING;
        Ok(())
    }

    /// Takes a write when one arrived: its sequence word.
    fn take(&mut self, t: &mut ShmTransport) -> Result<Option<u64>, String> {
        let Some(_) = t.poll_imm().map_err(|e| format!("transport echo: {e}"))? else {
            return Ok(None);
        };
        let b = t.recv_bytes(self.recv, self.peer_len);
        let seq = b
            .get(SEQ_AT..SEQ_AT + 8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
            .ok_or_else(|| format!("transport echo: a {}-byte write came short", b.len()))?;
        // No consumer position published: the transport does not need it,
        // and the endpoint publishes its own off the round trip.
        self.recv = (self.recv + self.peer_stride) % ECHO_RING;
        Ok(Some(seq))
    }
}

/// The server's turn in the echo phase: answers a write that arrived with
/// one of its own carrying the same sequence word. Returns whether it did.
pub(super) fn serve_turn(
    t: &mut ShmTransport,
    side: &mut EchoSide,
    stamp: &mut u64,
) -> Result<bool, String> {
    let Some(seq) = side.take(t)? else {
        return Ok(false);
    };
    *stamp += 1;
    side.write(t, *stamp, seq)?;
    Ok(true)
}

/// The client's side: echoes for `dur` (one clock read per round trip, the
/// bookkeeping of round trip n done while n + 1 is on its way, as the
/// ping-pongs and the RPCs do), each answer's sequence checked.
pub(super) fn measure(
    main: &ShmTransport,
    t: &mut ShmTransport,
    req_len: usize,
    resp_len: usize,
    dur: Duration,
) -> BenchResult<PingPongReport> {
    let clock = Clock::new();
    let mut hist = new_hist()?;
    let mut side = EchoSide::new(req_len, resp_len);
    main.control(CTL_PHASE).store(PHASE_ECHO, Ordering::Release);
    let deadline = crate::time::duration_nanos(dur);
    let start = clock.now();
    let mut prev = start;
    let mut now = start;
    let mut win = Windows::new(start.as_nanos(), dur);
    let mut n = 0u64;
    let result = (|| -> Result<(), String> {
        loop {
            side.write(t, n, n)?;
            if n > 0 {
                let _ = hist.record((now - prev).as_nanos().max(1) as u64);
                win.tick(now.as_nanos(), n);
                prev = now;
            }
            let mut spins = 0u64;
            let seq = loop {
                if let Some(seq) = side.take(t)? {
                    break seq;
                }
                spins += 1;
                if spins == 1 << 30 {
                    return Err("server does not answer the transport echo".into());
                }
            };
            if seq != n {
                return Err(format!("transport echo: answer {n} came back as {seq}"));
            }
            n += 1;
            now = clock.now();
            if (now - start).as_nanos() as u64 >= deadline {
                let _ = hist.record((now - prev).as_nanos().max(1) as u64);
                win.tick(now.as_nanos(), n);
                prev = now;
                return Ok(());
            }
        }
    })();
    main.control(CTL_PHASE).store(PHASE_IDLE, Ordering::Release);
    result.map_err(|e| (1, e))?;
    let secs = (prev - start).as_secs_f64();
    Ok(PingPongReport {
        round_trips_per_sec: n as f64 / secs,
        mean_rtt_ns: secs * 1e9 / n as f64,
        rtt: super::Latency::of(&hist),
        windows: win.summary(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_the_endpoints_and_fit_the_ring() {
        // A 32-byte message: 32 bytes of metadata, 12 of header, padded to 64.
        assert_eq!(batch_len(32), 96);
        assert_eq!(batch_len(0), 64);
        let s = EchoSide::new(batch_len(32), batch_len(100));
        assert_eq!((s.stride, s.peer_stride), (128, 256));
        assert_eq!(ECHO_RING % s.stride, 0);
        assert_eq!(
            echo_path(Path::new("/dev/shm/x")),
            PathBuf::from("/dev/shm/x-echo")
        );
    }

    /// Both sides in one thread over a real region: every write is taken
    /// once, in order, with its sequence echoed, around the ring many times.
    #[test]
    fn echoes_carry_the_sequence_around_the_ring() {
        let path = std::env::temp_dir().join(format!("linerate-echo-test-{}", std::process::id()));
        let mut server = ShmTransport::create_opts(&path, ECHO_RING, 8, false).unwrap();
        let mut client = ShmTransport::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let (mut c, mut s) = (
            EchoSide::new(batch_len(32), batch_len(200)),
            EchoSide::new(batch_len(200), batch_len(32)),
        );
        let mut stamp = 0;
        assert!(!serve_turn(&mut server, &mut s, &mut stamp).unwrap());
        for n in 0..3 * ECHO_RING / 128 {
            c.write(&mut client, n, n).unwrap();
            assert!(serve_turn(&mut server, &mut s, &mut stamp).unwrap());
            assert_eq!(c.take(&mut client).unwrap(), Some(n));
            assert_eq!(c.take(&mut client).unwrap(), None);
        }
    }
}
