//! The window of live chunks (spead2's semantics): at most `max_chunks`
//! consecutive ids, `head..tail`; chunks come from the free ring, are flushed
//! to the ready queue in order, and come back through `add_free_chunk`. The
//! single receiver's [`ChunkSource`].

use std::collections::VecDeque;

use super::{Chunk, ChunkBuf, ChunkConfig, ChunkDiscard, ChunkSource, ChunkStats, ChunkStream};
use super::{Piece, Place, Placement, Push};
use crate::buf::copy::{copy, store_fence, CopyMode};

/// A single receiver's chunks: the window, the free ring and the ready queue.
#[derive(Debug)]
pub(super) struct Window {
    pub(super) cfg: ChunkConfig,
    pub(super) slots: Vec<Option<Chunk>>,
    pub(super) head: i64,
    pub(super) tail: i64,
    pub(super) head_pos: usize,
    tail_pos: usize,
    pub(super) free: Vec<Chunk>,
    ready: VecDeque<Chunk>,
    /// Chunks flushed so far ([`ChunkSource::epoch`]).
    flushed: u64,
}

impl Window {
    /// `cfg.n_chunks` chunks allocated up front, none live.
    pub(super) fn new(cfg: ChunkConfig) -> Window {
        let free = (0..cfg.n_chunks)
            .map(|_| Chunk::new(cfg.chunk_bytes, cfg.present_len))
            .collect();
        Window {
            slots: vec![None; cfg.max_chunks],
            cfg,
            head: 0,
            tail: 0,
            head_pos: 0,
            tail_pos: 0,
            free,
            ready: VecDeque::new(),
            flushed: 0,
        }
    }

    fn flush_head(&mut self, stats: &mut ChunkStats) {
        if let Some(c) = self.slots[self.head_pos].take() {
            if self.cfg.copy == CopyMode::Stream {
                // Streaming stores are weakly ordered: make them visible before the
                // chunk can reach another thread.
                store_fence();
            }
            stats.chunks += 1;
            stats.present += c.present_count() as u64;
            stats.present_slots += c.present.len() as u64;
            self.ready.push_back(c);
        }
        self.flushed += 1;
        self.head += 1;
        self.head_pos = (self.head_pos + 1) % self.cfg.max_chunks;
    }

    /// The window slot of a chunk id inside the window.
    #[inline]
    pub(super) fn slot_of(&self, chunk_id: i64) -> usize {
        let s = self.head_pos + (chunk_id - self.head) as usize;
        if s >= self.cfg.max_chunks {
            s - self.cfg.max_chunks
        } else {
            s
        }
    }
}

impl ChunkSource for Window {
    fn chunk(&mut self, chunk_id: i64, stats: &mut ChunkStats) -> Result<usize, Push> {
        if chunk_id < self.head {
            return Err(Push::Discarded(ChunkDiscard::TooOld));
        }
        let max = self.cfg.max_chunks as i64;
        if chunk_id >= self.tail && chunk_id - self.tail >= max {
            // So far ahead that the whole window is stale: flush it and restart.
            while self.head < self.tail {
                self.flush_head(stats);
            }
            self.head = chunk_id - (max - 1);
            self.tail = self.head;
            self.head_pos = 0;
            self.tail_pos = 0;
        }
        while chunk_id >= self.tail {
            if self.tail - self.head == max {
                self.flush_head(stats);
            }
            let Some(mut c) = self.free.pop() else {
                return Err(Push::Stall);
            };
            c.chunk_id = self.tail;
            self.slots[self.tail_pos] = Some(c);
            self.tail += 1;
            self.tail_pos = (self.tail_pos + 1) % self.cfg.max_chunks;
        }
        Ok(self.slot_of(chunk_id))
    }

    #[inline]
    fn find(&self, chunk_id: i64) -> Option<usize> {
        if chunk_id < self.head || chunk_id >= self.tail {
            return None;
        }
        let s = self.slot_of(chunk_id);
        self.slots[s].is_some().then_some(s)
    }

    #[inline]
    fn epoch(&self) -> u64 {
        self.flushed
    }

    #[inline]
    fn fits(&self, p: &Placement, heap_length: u64) -> bool {
        let last_present = match self.cfg.packet_presence {
            Some(ps) => p.heap_index + (heap_length.max(1) as usize - 1) / ps.max(1),
            None => p.heap_index,
        };
        p.heap_offset
            .checked_add(heap_length as usize)
            .is_some_and(|end| end <= self.cfg.chunk_bytes)
            && last_present < self.cfg.present_len
    }

    #[inline]
    fn claim(&mut self, h: usize, heap_index: usize, single: bool) -> Result<(), ChunkDiscard> {
        let Some(chunk) = self.slots[h].as_ref() else {
            return Err(ChunkDiscard::Rejected);
        };
        // One receiver: a heap of one packet already present is a duplicate
        // (a multi-packet heap's duplicates are found by its offsets).
        if single && chunk.present[heap_index] != 0 {
            return Err(ChunkDiscard::Duplicate);
        }
        Ok(())
    }

    #[inline]
    fn write(&mut self, h: usize, piece: &Piece<'_>) {
        let Some(chunk) = self.slots[h].as_mut() else {
            return;
        };
        let dst = piece.heap_offset + piece.offset;
        copy(
            self.cfg.copy,
            &mut chunk.data[dst..dst + piece.payload.len()],
            piece.payload,
        );
        match self.cfg.packet_presence {
            _ if piece.single => chunk.present[piece.heap_index] = 1,
            // An empty packet (possibly at the heap's very end) has no slot of its own.
            Some(ps) if !piece.payload.is_empty() => {
                if let Some(p) = chunk
                    .present
                    .get_mut(piece.heap_index + piece.offset / ps.max(1))
                {
                    *p = 1;
                }
            }
            Some(_) => {}
            None if piece.complete => chunk.present[piece.heap_index] = 1,
            None => {}
        }
    }
}

impl<P: Place> ChunkStream<P> {
    /// The next flushed chunk.
    #[must_use]
    pub fn poll_chunk(&mut self) -> Option<Chunk> {
        self.win.ready.pop_front()
    }

    /// Gives a chunk back to the free ring; its `present` map is zeroed (data is not).
    pub fn add_free_chunk(&mut self, mut chunk: Chunk) {
        chunk.chunk_id = -1;
        chunk.present.clear();
        chunk.present.resize(self.win.cfg.present_len, 0);
        if chunk.data.len() != self.win.cfg.chunk_bytes {
            chunk.data = ChunkBuf::new(self.win.cfg.chunk_bytes);
        }
        self.win.free.push(chunk);
    }

    /// Flushes every live heap and chunk (at the end of input).
    pub fn flush(&mut self) {
        while self.win.head < self.win.tail {
            self.win.flush_head(&mut self.heaps.stats);
        }
        self.heaps.flush();
    }
}
