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
//! Each side writes the batch a depth-1 RPC of the run's sizes would, laid
//! out as the endpoint lays it out (flow metadata, one message header, the
//! payload, zero padding): the client a request of `--msg-size` bytes, the
//! server a response of `--resp-size`. From one write to the next the same
//! words change as in the endpoint's: the consumer position and the
//! payload's first eight bytes, a sequence number the server echoes and
//! the client checks (in the metadata's reserved bytes for a payload
//! shorter than that), so each side reads what it was sent.

use super::report::PingPongReport;
use super::{
    time_round_trips, BenchResult, CTL_PHASE, PHASE_ECHO, PHASE_IDLE, REQ_FILL, RESP_FILL,
};
use crate::rpc::transport::shm::ShmTransport;
use crate::rpc::transport::Transport;
use crate::rpc::wire::{
    decode_imm, encode_imm, padded_message_size, ALIGNMENT, FLOW_METADATA_SIZE, HEADER_SIZE,
    RESPONSE_FLAG,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Ring size of the echo region: hundreds of batches a lap, one hugepage.
pub(super) const ECHO_RING: u64 = 64 * 1024;

/// Where a batch with a `payload`-byte message carries the echoed
/// sequence: the payload's first eight bytes (after the 32-byte flow
/// metadata and the 12-byte header), or the metadata's reserved bytes.
fn seq_at(payload: u64) -> usize {
    if payload >= 8 {
        FLOW_METADATA_SIZE + HEADER_SIZE
    } else {
        24
    }
}

/// The echo region beside the bench region at `path`.
pub(crate) fn echo_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-echo");
    PathBuf::from(p)
}

/// The largest batch the echo carries: a quarter of its ring.
pub(super) const ECHO_MAX_BATCH: u64 = ECHO_RING / 4;

/// Whether the echo carries a run's batches (requests of `msg` payload
/// bytes, responses of `resp`); larger ones are left to the RPCs alone.
pub(super) fn carries(msg: u64, resp: u64) -> bool {
    msg.max(resp) <= ECHO_MAX_BATCH && batch_len(msg.max(resp)) as u64 <= ECHO_MAX_BATCH
}

/// Bytes of a batch carrying one message of `payload` bytes.
pub(super) fn batch_len(payload: u64) -> usize {
    (FLOW_METADATA_SIZE as u64 + padded_message_size(payload as u32)) as usize
}

/// One side's writes: its batch, its send and receive positions (absolute,
/// as the endpoint's), and whether a taken write awaits its release.
///
/// As the endpoint at depth 1 does, each side announces exactly its batch
/// (so the reader holds a packed write in its reference instead of copying
/// it into the ring), releases what it took (publishes its consumer
/// position) only after its next write went out, and fills the ring's end
/// with one write when a batch would not fit before it (the endpoint's
/// wrap marker), which the reader skips.
pub(super) struct EchoSide {
    batch: Vec<u8>,
    seq_at: usize,
    peer_seq_at: usize,
    send: u64,
    recv: u64,
    peer_len: u64,
    unreleased: bool,
}

impl EchoSide {
    /// The client's side: requests of `msg` payload bytes, responses of `resp`.
    pub(super) fn client(msg: u64, resp: u64) -> Self {
        Self::new(msg, resp, false)
    }

    /// The server's side: [`client`](Self::client)'s mirror.
    pub(super) fn server(msg: u64, resp: u64) -> Self {
        Self::new(resp, msg, true)
    }

    fn new(payload: u64, peer_payload: u64, response: bool) -> Self {
        let len = batch_len(payload);
        let mut batch = vec![0u8; len];
        let mut put = |at: usize, v: u32| batch[at..at + 4].copy_from_slice(&v.to_le_bytes());
        // The metadata's message count, the header's call id, piggy-backed
        // allowance (a request reserves its response's batch) and length.
        put(16, 1);
        put(
            FLOW_METADATA_SIZE,
            if response { RESPONSE_FLAG | 1 } else { 1 },
        );
        let allowance = if response {
            0
        } else {
            batch_len(peer_payload) as u64
        };
        put(FLOW_METADATA_SIZE + 4, (allowance / ALIGNMENT) as u32);
        put(FLOW_METADATA_SIZE + 8, payload as u32);
        let fill = if response { RESP_FILL } else { REQ_FILL };
        let start = FLOW_METADATA_SIZE + HEADER_SIZE;
        batch[start..start + payload as usize].fill(fill);
        EchoSide {
            batch,
            seq_at: seq_at(payload),
            peer_seq_at: seq_at(peer_payload),
            send: 0,
            recv: 0,
            peer_len: batch_len(peer_payload) as u64,
            unreleased: false,
        }
    }

    /// Writes the batch with its consumer position word set to `stamp` and
    /// its sequence to `seq`, after a filler when it would not fit before
    /// the ring end; then releases what was taken before it.
    fn write(&mut self, t: &mut ShmTransport, stamp: u64, seq: u64) -> Result<(), String> {
        self.batch[..8].copy_from_slice(&stamp.to_le_bytes());
        let at = self.seq_at;
        self.batch[at..at + 8].copy_from_slice(&seq.to_le_bytes());
        let fail = |e| format!("transport echo: {e}");
        let len = self.batch.len() as u64;
        let room = ECHO_RING - self.send % ECHO_RING;
        if room < len {
            // Announces the rest of the ring; its bytes are never read.
            t.write_with_imm(self.send % ECHO_RING, &self.batch[..8], encode_imm(room))
                .map_err(fail)?;
            self.send += room;
        }
        t.write_with_imm(self.send % ECHO_RING, &self.batch, encode_imm(len))
            .map_err(fail)?;
        self.send += len;
        if self.unreleased {
            t.publish_consumer(self.recv);
            self.unreleased = false;
        }
        Ok(())
    }

    /// Takes a batch when one arrived (skipping a filler): its sequence word.
    fn take(&mut self, t: &mut ShmTransport) -> Result<Option<u64>, String> {
        loop {
            let Some(imm) = t.poll_imm().map_err(|e| format!("transport echo: {e}"))? else {
                return Ok(None);
            };
            let n = decode_imm(imm);
            let room = ECHO_RING - self.recv % ECHO_RING;
            if n != self.peer_len {
                if n != room || room >= self.peer_len {
                    return Err(format!(
                        "transport echo: a write of {n} bytes at {} is neither a batch nor the ring's end",
                        self.recv
                    ));
                }
                self.recv += n;
                self.unreleased = true;
                continue;
            }
            let b = t.recv_bytes(self.recv % ECHO_RING, n);
            let at = self.peer_seq_at;
            let seq = b
                .get(at..at + 8)
                .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
                .ok_or_else(|| format!("transport echo: a {}-byte write came short", b.len()))?;
            self.recv += n;
            self.unreleased = true;
            return Ok(Some(seq));
        }
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

/// The client's side: echoes for `dur`, timed as the ping-pongs are
/// ([`time_round_trips`]), each answer's sequence checked.
pub(super) fn measure(
    main: &ShmTransport,
    t: &mut ShmTransport,
    msg: u64,
    resp: u64,
    dur: Duration,
) -> BenchResult<PingPongReport> {
    let mut side = EchoSide::client(msg, resp);
    main.control(CTL_PHASE).store(PHASE_ECHO, Ordering::Release);
    let r = time_round_trips(
        dur,
        &mut (t, &mut side),
        |(t, side), n| side.write(t, n, n),
        |(t, side), n| match side.take(t)? {
            None => Ok(false),
            Some(seq) if seq == n => Ok(true),
            Some(seq) => Err(format!("transport echo: answer {n} came back as {seq}")),
        },
        (1 << 30, "server does not answer the transport echo"),
    );
    main.control(CTL_PHASE).store(PHASE_IDLE, Ordering::Release);
    r
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn batches_are_the_endpoints() {
        // A 32-byte message: 32 bytes of metadata, 12 of header, padded to 64.
        assert_eq!(batch_len(32), 96);
        assert_eq!(batch_len(0), 64);
        assert_eq!(batch_len(200) % 32, 0);
        assert!(carries(32, 32) && carries(0, 16_000));
        assert!(!carries(32, 16_384) && !carries(u64::from(u32::MAX) + 1, 0));
        assert_eq!(
            echo_path(Path::new("/dev/shm/x")),
            PathBuf::from("/dev/shm/x-echo")
        );
    }

    /// Both sides in one thread over a real region: every batch is taken
    /// once, in order, with its sequence echoed, around the ring several
    /// times (fillers at its end); and between a take and the next write the
    /// reader holds the write in its reference, as under the endpoint at
    /// depth 1, except right after a filler (as after its wrap marker).
    #[test]
    fn echoes_carry_the_sequence_around_the_ring() {
        let path = std::env::temp_dir().join(format!("linerate-echo-test-{}", std::process::id()));
        let mut server = ShmTransport::create_opts(&path, ECHO_RING, 8, false).unwrap();
        let mut client = ShmTransport::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        // A 96-byte request, a 128-byte response.
        let (mut c, mut s) = (EchoSide::client(32, 60), EchoSide::server(32, 60));
        let mut stamp = 0;
        let mut held = 0;
        assert!(!serve_turn(&mut server, &mut s, &mut stamp).unwrap());
        let n = 3 * ECHO_RING / 96;
        assert_eq!((c.batch.len(), s.batch.len()), (96, 128));
        for i in 0..n {
            c.write(&mut client, i, i).unwrap();
            assert!(serve_turn(&mut server, &mut s, &mut stamp).unwrap());
            assert_eq!(c.take(&mut client).unwrap(), Some(i));
            held += u64::from(client.holds_a_write());
            assert_eq!(c.take(&mut client).unwrap(), None);
        }
        assert!(c.send > 2 * ECHO_RING && s.send > 2 * ECHO_RING);
        // Fillers: one a lap of each ring, each leaving one take unheld.
        assert!(held >= n - s.send / ECHO_RING - 2, "{held} of {n} held");
    }
}
