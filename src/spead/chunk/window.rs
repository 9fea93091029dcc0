//! The window of live chunks (spead2's semantics): at most `max_chunks`
//! consecutive ids, `head..tail`; chunks come from the free ring, are flushed
//! to the ready queue in order, and come back through `add_free_chunk`.

use super::{Chunk, ChunkBuf, ChunkDiscard, ChunkStream, HeapState, Place, Push};
use crate::buf::copy::{store_fence, CopyMode};

impl<P: Place> ChunkStream<P> {
    /// The next flushed chunk.
    #[must_use]
    pub fn poll_chunk(&mut self) -> Option<Chunk> {
        self.ready.pop_front()
    }

    /// Gives a chunk back to the free ring; its `present` map is zeroed (data is not).
    pub fn add_free_chunk(&mut self, mut chunk: Chunk) {
        chunk.chunk_id = -1;
        chunk.present.clear();
        chunk.present.resize(self.cfg.present_len, 0);
        if chunk.data.len() != self.cfg.chunk_bytes {
            chunk.data = ChunkBuf::new(self.cfg.chunk_bytes);
        }
        self.free.push(chunk);
    }

    /// Flushes every live heap and chunk (at the end of input).
    pub fn flush(&mut self) {
        while self.head < self.tail {
            self.flush_head();
        }
        for i in 0..self.n_live {
            let l = &self.live[i];
            if matches!(l.state, HeapState::Placing { .. }) {
                self.stats.heaps_incomplete_flushed += 1;
                self.stats.packets_in_incomplete_heaps += l.offsets.len() as u64;
            }
        }
        self.n_live = 0;
        self.predict.valid = false;
    }

    pub(super) fn flush_head(&mut self) {
        let head = self.head;
        // Live heaps of this chunk die with it.
        let mut i = 0;
        while i < self.n_live {
            if let HeapState::Placing { chunk_id, .. } = self.live[i].state {
                if chunk_id == head {
                    self.stats.heaps_incomplete_flushed += 1;
                    self.stats.packets_in_incomplete_heaps += self.live[i].offsets.len() as u64;
                    self.remove_live(i);
                    continue;
                }
            }
            i += 1;
        }
        if let Some(c) = self.window[self.head_pos].take() {
            if self.cfg.copy == CopyMode::Stream {
                // Streaming stores are weakly ordered: make them visible before the
                // chunk can reach another thread.
                store_fence();
            }
            self.stats.chunks += 1;
            self.stats.present += c.present_count() as u64;
            self.stats.present_slots += c.present.len() as u64;
            self.ready.push_back(c);
        }
        self.head += 1;
        self.head_pos = (self.head_pos + 1) % self.cfg.max_chunks;
    }

    /// The window slot of `chunk_id`, moving the window forward if needed.
    pub(super) fn chunk_slot(&mut self, chunk_id: i64) -> Result<usize, Push> {
        if chunk_id < self.head {
            return Err(Push::Discarded(ChunkDiscard::TooOld));
        }
        let max = self.cfg.max_chunks as i64;
        if chunk_id >= self.tail && chunk_id - self.tail >= max {
            // So far ahead that the whole window is stale: flush it and restart.
            while self.head < self.tail {
                self.flush_head();
            }
            self.head = chunk_id - (max - 1);
            self.tail = self.head;
            self.head_pos = 0;
            self.tail_pos = 0;
        }
        while chunk_id >= self.tail {
            if self.tail - self.head == max {
                self.flush_head();
            }
            let Some(mut c) = self.free.pop() else {
                return Err(Push::Stall);
            };
            c.chunk_id = self.tail;
            self.window[self.tail_pos] = Some(c);
            self.tail += 1;
            self.tail_pos = (self.tail_pos + 1) % self.cfg.max_chunks;
        }
        Ok(self.slot_of(chunk_id))
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
