//! The transmit side: frames copied into send slots and posted a burst at a
//! time as one chained send, retired in order by signaled completions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::buf::counter::Counter;
use crate::buf::{Burst, BURST_MAX};
use crate::sys::ibverbs::{self as verbs, IbvError, MemoryRegion, RawQp, SendBatch, SendSlot};
use crate::time::Instant;

use super::super::TxQueue;
use super::*;

/// Send slot accounting: a ring of `depth` slots used in order; send `k`
/// (its work request id) uses slot `k % depth`. A completion for `k` retires
/// every send up to `k` (send queues complete in order), so only some sends
/// are signaled: the last of each burst and every `signal_every`-th.
#[derive(Debug, Clone)]
pub struct SendRing {
    pub(super) depth: u64,
    pub(super) slot_len: u32,
    pub(super) head: u64,
    pub(super) tail: u64,
    pub(super) signal_every: u32,
    pub(super) run: u32,
}

impl SendRing {
    /// A ring of `depth` slots of `slot_len` bytes.
    pub fn new(depth: u32, slot_len: u32) -> SendRing {
        SendRing {
            depth: u64::from(depth.max(1)),
            slot_len,
            head: 0,
            tail: 0,
            signal_every: (depth / 4).max(1),
            run: 0,
        }
    }

    /// Sends in flight (posted, not yet retired by a completion).
    pub fn outstanding(&self) -> u64 {
        self.head - self.tail
    }

    /// Slots free for new sends.
    pub fn free(&self) -> usize {
        (self.depth - self.outstanding()) as usize
    }

    /// Takes the next slot for a frame of `len` bytes; the caller checked
    /// [`SendRing::free`].
    pub fn push(&mut self, len: u32) -> SendSlot {
        let wr_id = self.head;
        self.head += 1;
        self.run += 1;
        let signaled = self.run >= self.signal_every;
        if signaled {
            self.run = 0;
        }
        SendSlot {
            wr_id,
            offset: (wr_id % self.depth) as usize * self.slot_len as usize,
            len,
            signaled,
        }
    }

    /// Ends a burst: its last send is signaled, so no send waits unretired.
    pub fn close_burst(&mut self, sends: &mut [SendSlot]) {
        if let Some(last) = sends.last_mut() {
            last.signaled = true;
            self.run = 0;
        }
    }

    /// The post of the last `n` pushed sends failed: give their slots back.
    pub fn rollback(&mut self, n: usize) {
        self.head -= (n as u64).min(self.outstanding());
        self.run = 0;
    }

    /// A signaled send completed: it and every send before it are retired;
    /// returns how many that freed.
    pub fn complete(&mut self, wr_id: u64) -> Result<u64, SlotError> {
        if wr_id < self.tail || wr_id >= self.head {
            return Err(SlotError::NotOutstanding(wr_id));
        }
        let freed = wr_id + 1 - self.tail;
        self.tail = wr_id + 1;
        Ok(freed)
    }
}

#[derive(Default)]
pub(super) struct TxDetail {
    pub(super) completion_errors: Counter,
    pub(super) too_big: Counter,
    pub(super) bogus: Counter,
    pub(super) post_errors: Counter,
    pub(super) poll_errors: Counter,
    pub(super) inline: Counter,
    pub(super) signaled: Counter,
    pub(super) outstanding: AtomicU64,
}

/// The transmit side of an ibverbs port over any [`SendQueue`].
pub struct IbvTx<Q: SendQueue> {
    pub(super) q: Q,
    pub(super) ring: SendRing,
    pub(super) slot_len: u32,
    pub(super) inline: u32,
    pub(super) sends: Vec<SendSlot>,
    pub(super) comps: [Completion; BURST_MAX],
    pub(super) stats: Arc<Stats>,
}

impl<Q: SendQueue> IbvTx<Q> {
    pub(super) fn new(q: Q, depth: u32, slot_len: u32, inline: u32, stats: Arc<Stats>) -> Self {
        IbvTx {
            q,
            ring: SendRing::new(depth, slot_len),
            slot_len,
            inline,
            sends: Vec::with_capacity(BURST_MAX),
            comps: [Completion::default(); BURST_MAX],
            stats,
        }
    }

    /// Retires completed sends.
    pub(super) fn reap(&mut self) {
        let d = &self.stats.tx;
        loop {
            let got = match self.q.poll(&mut self.comps) {
                Ok(g) => g.min(BURST_MAX),
                Err(_) => {
                    d.poll_errors.add(1);
                    0
                }
            };
            for c in &self.comps[..got] {
                if c.status != STATUS_OK {
                    d.completion_errors.add(1);
                }
                if self.ring.complete(c.wr_id).is_err() {
                    d.bogus.add(1);
                }
            }
            if got < BURST_MAX {
                break;
            }
        }
        d.outstanding
            .store(self.ring.outstanding(), Ordering::Relaxed);
    }
}

impl<Q: SendQueue> TxQueue for IbvTx<Q> {
    fn tx_burst(&mut self, _now: Instant, pkts: &mut Burst) -> usize {
        if pkts.is_empty() {
            return 0;
        }
        self.reap();
        let n = pkts.len().min(self.ring.free());
        if n == 0 {
            return 0;
        }
        let d = &self.stats.tx;
        self.sends.clear();
        let mut bytes = 0u64;
        let mut inline = 0u64;
        for p in pkts.iter().take(n) {
            let data = p.data();
            let len = data.len();
            if len > self.slot_len as usize {
                d.too_big.add(1);
                continue;
            }
            let s = self.ring.push(len as u32);
            let Some(dst) = self.q.mem_mut().get_mut(s.offset..s.offset + len) else {
                // Cannot happen: the region holds `depth` slots of `slot_len`.
                self.ring.rollback(1);
                d.too_big.add(1);
                continue;
            };
            dst.copy_from_slice(data);
            bytes += len as u64;
            inline += u64::from(verbs::sends_inline(len as u32, self.inline));
            self.sends.push(s);
        }
        self.ring.close_burst(&mut self.sends);
        let c = &self.stats.common.tx;
        let posted = self.sends.len();
        match self.q.post(&self.sends) {
            Ok(()) => {
                c.packets.add(posted as u64);
                c.bytes.add(bytes);
                c.dropped.add((n - posted) as u64);
                d.inline.add(inline);
                d.signaled
                    .add(self.sends.iter().filter(|s| s.signaled).count() as u64);
            }
            Err(_) => {
                // A failed post means the queue pair is broken (error state):
                // the burst is dropped and counted rather than retried forever.
                self.ring.rollback(posted);
                d.post_errors.add(1);
                c.dropped.add(n as u64);
            }
        }
        d.outstanding
            .store(self.ring.outstanding(), Ordering::Relaxed);
        pkts.drain_front(n);
        n
    }

    fn flush(&mut self, _now: Instant) {
        self.reap();
    }
}

/// The send half of a hardware raw packet queue pair.
pub(super) struct HwSend {
    pub(super) qp: RawQp,
    pub(super) mr: MemoryRegion,
    pub(super) batch: SendBatch,
    pub(super) wc: Vec<crate::sys::ffi::ibverbs::ibv_wc>,
}

impl SendQueue for HwSend {
    fn mem_mut(&mut self) -> &mut [u8] {
        self.mr.as_mut_slice()
    }

    fn post(&mut self, sends: &[SendSlot]) -> Result<(), IbvError> {
        self.qp.post_send_batch(&self.mr, &mut self.batch, sends)
    }

    fn poll(&mut self, out: &mut [Completion]) -> Result<usize, IbvError> {
        let n = out.len().min(self.wc.len());
        let got = self.qp.poll_send(&mut self.wc[..n])?;
        for (o, w) in out.iter_mut().zip(&self.wc[..got]) {
            *o = Completion {
                wr_id: w.wr_id,
                len: w.byte_len,
                status: w.status,
            };
        }
        Ok(got)
    }
}
