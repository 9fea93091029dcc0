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
//! One file per stage (`send.rs`, `recv.rs`, `sink.rs`); this one holds what
//! they share: the imports, the drain constants and [`Encap`].

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
use crate::buf::{ring, Burst, Consumer, PoolCache, Producer, RingStatsHandle, BURST_MAX};
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

mod recv;
mod send;
mod sink;

pub use recv::*;
pub use send::*;
pub use sink::*;
