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
use crate::runtime::basic::{udp_template, Input, Output};
use crate::runtime::{Context, Poll, Stage, StageCounters, StageValues};
use crate::time::Instant;

/// Bytes of the Ethernet, IPv4 and UDP headers of [`Encap::Udp`].
pub const UDP_HEADERS: usize = crate::net::stack::UDP_V4_HEADERS;

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

    /// The SPEAD packet inside `frame`, or `None` when `frame` is not a UDP
    /// datagram over Ethernet (tagged or not) and IPv4 or IPv6, or its
    /// lengths do not fit ([`crate::net::udp_payload`]; never panics).
    #[inline]
    pub fn strip(self, frame: &[u8]) -> Option<&[u8]> {
        match self {
            Encap::None => Some(frame),
            Encap::Udp => crate::net::udp_payload(frame).ok().map(|v| v.payload()),
        }
    }
}

mod recv;
mod send;
mod sink;

pub use recv::*;
pub use send::*;
pub use sink::*;
