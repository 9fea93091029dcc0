//! Where a heap goes: a [`Place`] maps a heap's first packet (its item values)
//! to a chunk id, a `present` index and a byte offset; [`KatgpucbfPlace`] is
//! katgpucbf's layout (timestamp and F-engine id).

use super::ChunkConfig;
use crate::buf::copy::CopyMode;
use crate::spead::fsim::{FsimConfig, FENG_ID_ID, TIMESTAMP_ID};

/// Most items a [`Place`] may ask for.
pub const MAX_PLACE_ITEMS: usize = 8;

/// What a [`Place`] sees of a heap's first packet.
#[derive(Debug, Clone, Copy)]
pub struct PlaceInput<'a> {
    /// The sender the caller named.
    pub sender: u32,
    /// Heap counter.
    pub heap_cnt: u64,
    /// Heap length (chunk streams need it in every packet).
    pub heap_length: u64,
    /// Immediate values of the requested items, in [`Place::item_ids`] order.
    pub items: &'a [Option<u64>],
    /// The whole packet.
    pub packet: &'a [u8],
}

/// Where a heap goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Chunk id (negative: discard the heap).
    pub chunk_id: i64,
    /// Index in the chunk's `present` map.
    pub heap_index: usize,
    /// Byte offset of the heap in the chunk's data.
    pub heap_offset: usize,
}

/// Decides the placement of heaps (spead2's place callback).
pub trait Place {
    /// Items whose immediate values [`Place::place`] receives (at most [`MAX_PLACE_ITEMS`]).
    fn item_ids(&self) -> &[u64];
    /// The heap's placement, or `None` to reject it.
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement>;
}

/// katgpucbf's X-engine placement:
/// `chunk_id = timestamp / (heaps_per_fengine_per_chunk * timestamp_step)`,
/// `heap_index = heap_time_in_chunk * n_ants + feng_id`, chunk buffer
/// `[heaps_per_fengine_per_chunk][n_ants][channels][samples][pols]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KatgpucbfPlace {
    /// Antennas.
    pub n_ants: u64,
    /// Bytes per heap.
    pub heap_bytes: u64,
    /// Heaps of each F-engine in a chunk.
    pub heaps_per_fengine_per_chunk: u64,
    /// Timestamp difference between heaps of one F-engine.
    pub timestamp_step: u64,
    ids: [u64; 2],
}

impl KatgpucbfPlace {
    /// The placement for these dimensions.
    pub fn new(
        n_ants: u64,
        heap_bytes: u64,
        heaps_per_fengine_per_chunk: u64,
        timestamp_step: u64,
    ) -> KatgpucbfPlace {
        KatgpucbfPlace {
            n_ants: n_ants.max(1),
            heap_bytes,
            heaps_per_fengine_per_chunk: heaps_per_fengine_per_chunk.max(1),
            timestamp_step: timestamp_step.max(1),
            ids: [TIMESTAMP_ID, FENG_ID_ID],
        }
    }

    /// The placement for a simulator's stream.
    pub fn for_fsim(cfg: &FsimConfig, heaps_per_fengine_per_chunk: u64) -> KatgpucbfPlace {
        KatgpucbfPlace::new(
            cfg.n_ants as u64,
            cfg.heap_bytes() as u64,
            heaps_per_fengine_per_chunk,
            cfg.timestamp_step(),
        )
    }

    /// Heaps per chunk (the `present` map's length).
    pub fn heaps_per_chunk(&self) -> usize {
        (self.heaps_per_fengine_per_chunk * self.n_ants) as usize
    }

    /// Bytes per chunk.
    pub fn chunk_bytes(&self) -> usize {
        self.heaps_per_chunk() * self.heap_bytes as usize
    }

    /// The timestamp of the first heap in chunk `chunk_id`.
    pub fn chunk_timestamp(&self, chunk_id: i64) -> u64 {
        (chunk_id.max(0) as u64) * self.heaps_per_fengine_per_chunk * self.timestamp_step
    }

    /// (feng_id, timestamp) of the heap at `heap_index` in chunk `chunk_id`.
    pub fn heap_identity(&self, chunk_id: i64, heap_index: usize) -> (u64, u64) {
        let i = heap_index as u64;
        let t = i / self.n_ants;
        (
            i % self.n_ants,
            self.chunk_timestamp(chunk_id) + t * self.timestamp_step,
        )
    }

    /// A [`ChunkConfig`] matching this placement.
    pub fn chunk_config(&self, max_chunks: usize, n_chunks: usize) -> ChunkConfig {
        ChunkConfig {
            max_chunks,
            n_chunks,
            chunk_bytes: self.chunk_bytes(),
            present_len: self.heaps_per_chunk(),
            max_heaps: (self.n_ants as usize * 2).max(4),
            packet_presence: None,
            // Measured faster on this layout even while the chunks fit in the
            // last-level cache (docs/src/design/spead-group.md).
            copy: CopyMode::Stream,
        }
    }
}

impl Place for KatgpucbfPlace {
    fn item_ids(&self) -> &[u64] {
        &self.ids
    }

    #[inline]
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
        let ts = input.items[0]?;
        let feng = input.items[1]?;
        if input.heap_length != self.heap_bytes
            || feng >= self.n_ants
            || div(ts, self.timestamp_step) * self.timestamp_step != ts
        {
            return None;
        }
        let heap_no = div(ts, self.timestamp_step);
        let chunk_id = i64::try_from(div(heap_no, self.heaps_per_fengine_per_chunk)).ok()?;
        let t = heap_no - chunk_id as u64 * self.heaps_per_fengine_per_chunk;
        let heap_index = (t * self.n_ants + feng) as usize;
        Some(Placement {
            chunk_id,
            heap_index,
            heap_offset: heap_index * self.heap_bytes as usize,
        })
    }
}

/// `a / b`, a shift when `b` is a power of two (timestamp steps usually are).
#[inline]
fn div(a: u64, b: u64) -> u64 {
    if b.is_power_of_two() {
        a >> b.trailing_zeros()
    } else {
        a / b
    }
}
