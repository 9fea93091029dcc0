//! The receive side: slots posted to a raw packet queue pair, completions
//! polled a burst at a time, each frame copied once into a pool packet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::buf::counter::Counter;
use crate::buf::{Burst, Pool, PoolCache, BURST_MAX};
use crate::sys::ibverbs::{IbvError, MemoryRegion, RawQp, RecvSlot};
use crate::time::Instant;

use super::super::RxQueue;
use super::*;

/// Receive slot accounting: which of the region's slots the NIC holds
/// (posted) and which wait to be posted again. `posted + waiting = count`
/// always holds.
#[derive(Debug)]
pub struct RecvSlots {
    pub(super) slot_len: u32,
    pub(super) posted: Vec<bool>,
    pub(super) waiting: Vec<u32>,
    pub(super) n_posted: usize,
    pub(super) batch: Vec<RecvSlot>,
}

impl RecvSlots {
    /// `count` slots of `slot_len` bytes, none posted yet.
    pub fn new(count: u32, slot_len: u32) -> RecvSlots {
        RecvSlots {
            slot_len,
            posted: vec![false; count as usize],
            waiting: (0..count).rev().collect(),
            n_posted: 0,
            batch: Vec::with_capacity(count as usize),
        }
    }

    /// Slots in all.
    pub fn count(&self) -> usize {
        self.posted.len()
    }

    /// Slots the NIC holds.
    pub fn posted(&self) -> usize {
        self.n_posted
    }

    /// Slots waiting to be posted.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    pub(super) fn slot(&self, i: u32) -> RecvSlot {
        RecvSlot {
            wr_id: u64::from(i),
            offset: i as usize * self.slot_len as usize,
            len: self.slot_len,
        }
    }

    /// The NIC completed `wr_id`: the slot's bytes may be read, then it waits
    /// to be posted again.
    pub fn complete(&mut self, wr_id: u64) -> Result<RecvSlot, SlotError> {
        let i = usize::try_from(wr_id)
            .ok()
            .filter(|&i| i < self.posted.len())
            .ok_or(SlotError::Unknown(wr_id))?;
        if !self.posted[i] {
            return Err(SlotError::NotOutstanding(wr_id));
        }
        self.posted[i] = false;
        self.n_posted -= 1;
        self.waiting.push(i as u32);
        Ok(self.slot(i as u32))
    }

    /// Whether to re-post now: enough slots wait for one batch to be worth
    /// a post, or the NIC holds less than half of them.
    pub fn should_post(&self, min_batch: usize) -> bool {
        !self.waiting.is_empty()
            && (self.waiting.len() >= min_batch || self.n_posted < self.count() / 2)
    }

    /// Marks every waiting slot posted and returns them, for one post.
    pub fn take_batch(&mut self) -> &[RecvSlot] {
        self.batch.clear();
        while let Some(i) = self.waiting.pop() {
            self.posted[i as usize] = true;
            self.n_posted += 1;
            let s = self.slot(i);
            self.batch.push(s);
        }
        &self.batch
    }

    /// The post of the last batch failed: its slots wait again.
    pub fn unpost(&mut self) {
        for s in self.batch.drain(..) {
            self.posted[s.wr_id as usize] = false;
            self.n_posted -= 1;
            self.waiting.push(s.wr_id as u32);
        }
    }
}

#[derive(Default)]
pub(super) struct RxDetail {
    pub(super) completion_errors: Counter,
    pub(super) too_big: Counter,
    pub(super) bogus: Counter,
    pub(super) post_errors: Counter,
    pub(super) poll_errors: Counter,
    pub(super) posted: AtomicU64,
}

/// The receive side of an ibverbs port over any [`RecvQueue`].
pub struct IbvRx<Q: RecvQueue> {
    pub(super) q: Q,
    pub(super) slots: RecvSlots,
    pub(super) min_batch: usize,
    pub(super) cache: PoolCache,
    pub(super) spare: Burst,
    pub(super) comps: [Completion; BURST_MAX],
    pub(super) stats: Arc<Stats>,
}

impl<Q: RecvQueue> IbvRx<Q> {
    pub(super) fn new(
        mut q: Q,
        buffers: u32,
        slot_len: u32,
        pool: &Pool,
        stats: Arc<Stats>,
    ) -> Result<Self, IbvError> {
        let mut slots = RecvSlots::new(buffers, slot_len);
        q.post(slots.take_batch())?;
        stats
            .rx
            .posted
            .store(slots.posted() as u64, Ordering::Relaxed);
        Ok(IbvRx {
            q,
            min_batch: (buffers as usize / 8).clamp(1, BURST_MAX),
            slots,
            cache: pool.cache(),
            spare: Burst::new(),
            comps: [Completion::default(); BURST_MAX],
            stats,
        })
    }

    pub(super) fn repost(&mut self) {
        if !self.slots.should_post(self.min_batch) {
            return;
        }
        let batch = self.slots.take_batch();
        if self.q.post(batch).is_err() {
            self.slots.unpost();
            self.stats.rx.post_errors.add(1);
        }
        self.stats
            .rx
            .posted
            .store(self.slots.posted() as u64, Ordering::Relaxed);
    }
}

impl<Q: RecvQueue> RxQueue for IbvRx<Q> {
    fn rx_burst(&mut self, _now: Instant, out: &mut Burst, max: usize) -> usize {
        let want = max.min(out.room()).min(BURST_MAX);
        if self.spare.len() < want {
            let need = want - self.spare.len();
            self.cache.alloc_bulk(&mut self.spare, need);
        }
        // Poll no more completions than there are packets to copy them into.
        let n = want.min(self.spare.len());
        if n == 0 {
            return 0;
        }
        let got = match self.q.poll(&mut self.comps[..n]) {
            Ok(g) => g.min(n),
            Err(_) => {
                self.stats.rx.poll_errors.add(1);
                0
            }
        };
        let d = &self.stats.rx;
        let mut filled = 0;
        let mut bytes = 0u64;
        // The next spare packet to copy into; it advances only once filled.
        let mut spare = self.spare.iter_mut();
        let mut next = spare.next();
        for c in &self.comps[..got] {
            let slot = match self.slots.complete(c.wr_id) {
                Ok(s) => s,
                Err(_) => {
                    d.bogus.add(1);
                    continue;
                }
            };
            if c.status != STATUS_OK || c.len > slot.len {
                d.completion_errors.add(1);
                continue;
            }
            let len = c.len as usize;
            let Some(data) = self.q.mem().get(slot.offset..slot.offset + len) else {
                d.completion_errors.add(1);
                continue;
            };
            let Some(pkt) = next.as_deref_mut() else {
                // Cannot happen (no more completions are polled than there
                // are spare packets); the slot is re-posted, the frame counted
                // as dropped, and every later completion still retired.
                continue;
            };
            let room = pkt.spare_capacity();
            if room.len() < len {
                d.too_big.add(1);
                continue;
            }
            room[..len].copy_from_slice(data);
            if pkt.set_len(len).is_err() {
                d.too_big.add(1);
                continue;
            }
            bytes += len as u64;
            filled += 1;
            next = spare.next();
        }
        for pkt in self.spare.drain_front(filled) {
            // Cannot fail: at most `out.room()` packets were filled.
            let _ = out.push(pkt);
        }
        let c = &self.stats.common.rx;
        c.packets.add(filled as u64);
        c.bytes.add(bytes);
        c.dropped.add((got - filled) as u64);
        self.repost();
        filled
    }
}

/// The receive half of a hardware raw packet queue pair.
pub(super) struct HwRecv {
    // Field order is drop order: the QP (and its flow rule) before the region.
    pub(super) qp: RawQp,
    pub(super) mr: MemoryRegion,
    pub(super) wc: Vec<crate::sys::ffi::ibverbs::ibv_wc>,
}

impl RecvQueue for HwRecv {
    fn post(&mut self, slots: &[RecvSlot]) -> Result<(), IbvError> {
        self.qp.post_recv_batch(&self.mr, slots)
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError> {
        let n = out.len().min(self.wc.len());
        let got = self.qp.poll_recv(&mut self.wc[..n])?;
        for (o, w) in out.iter_mut().zip(&self.wc[..got]) {
            *o = Completion {
                wr_id: w.wr_id,
                len: w.byte_len,
                status: w.status,
            };
        }
        Ok(got)
    }

    fn mem(&self) -> &[u8] {
        self.mr.as_slice()
    }
}
