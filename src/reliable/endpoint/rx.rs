//! The receiving half of a channel: the receive bitmap, ACK blocks, and the
//! receive path of [`Endpoint`] (datagrams in, messages and PUTs out).

use super::super::reassembly::{Accepted, Chunk, ChunkError, Completed, PutTarget, Reassembly};
use super::super::seq;
use super::super::wire::{
    self, AckRepr, Channel, DataRepr, Packet, Repr, SackRange, MAX_SACK_RANGES,
};
use super::{DeadReason, Endpoint, Event};
use crate::time::Instant;

#[derive(Debug)]
pub(super) struct RxChannel {
    pub(super) wmask: u32,
    pub(super) rcv_next: u32,
    pub(super) highest: u32,
    pub(super) bits: Vec<u64>,
    pub(super) ack_pending: bool,
    pub(super) ack_now: bool,
    pub(super) ack_due: Option<Instant>,
    pub(super) unacked: u32,
    pub(super) reasm: Reassembly,
}

impl RxChannel {
    pub(super) fn bit(&self, s: u32) -> bool {
        let i = (s & self.wmask) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    pub(super) fn set_bit(&mut self, s: u32, on: bool) {
        let i = (s & self.wmask) as usize;
        if on {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    /// The ACK block: cumulative point and up to `max_ranges` SACK ranges, highest first.
    pub(super) fn build_ack(&self, max_ranges: usize) -> AckRepr {
        let mut ack = AckRepr::cumulative(self.rcv_next);
        let span = self.highest.wrapping_sub(self.rcv_next);
        if max_ranges == 0 || span == 0 {
            return ack;
        }
        let max_ranges = max_ranges.min(MAX_SACK_RANGES);
        let mut n = 0;
        let mut run_end = None;
        // Walk from highest-1 down to rcv_next (whose bit is never set).
        for i in 1..=span {
            let s = self.highest.wrapping_sub(i);
            let set = s != self.rcv_next && self.bit(s);
            match (set, run_end) {
                (true, None) => run_end = Some(s.wrapping_add(1)),
                (false, Some(end)) => {
                    ack.ranges[n] = SackRange {
                        start: s.wrapping_add(1),
                        end,
                    };
                    n += 1;
                    run_end = None;
                    if n == max_ranges {
                        break;
                    }
                }
                _ => {}
            }
        }
        ack.n_ranges = n as u8;
        ack
    }

    pub(super) fn clear_ack(&mut self) {
        self.ack_pending = false;
        self.ack_now = false;
        self.ack_due = None;
        self.unacked = 0;
    }
}

impl Endpoint {
    /// Processes one received datagram. Anything malformed is counted in
    /// [`Stats`](super::Stats) and dropped.
    pub fn on_packet(&mut self, bytes: &[u8], now: Instant) {
        self.now = self.now.max(now);
        self.stats.rx_packets += 1;
        if self.dead {
            return;
        }
        let packet = match Packet::new_checked(bytes) {
            Ok(p) => p,
            Err(_) => {
                self.stats.bad_header += 1;
                return;
            }
        };
        let repr = match Repr::parse(&packet) {
            Ok(r) => r,
            Err(wire::Error::ChunkOutsideFragment) => {
                self.stats.bad_chunk += 1;
                return;
            }
            Err(_) => {
                self.stats.bad_header += 1;
                return;
            }
        };
        self.last_heard = Some(self.last_heard.map_or(now, |h| h.max(now)));
        if repr.abort {
            self.die(DeadReason::PeerAborted);
            return;
        }
        let bits = self.cfg.wire_bits();
        for ch in Channel::ALL {
            if let Some(mut ack) = repr.acks[ch.index()] {
                if bits < 32 {
                    // Narrow sequence numbers: widen cum against what we sent; no ranges.
                    ack.cum = seq::expand(ack.cum, self.tx[ch.index()].snd_una, bits);
                    ack.n_ranges = 0;
                }
                self.on_ack(ch, &ack, now);
            }
        }
        if let Some(mut d) = repr.data {
            d.seq = seq::expand(d.seq, self.rx[repr.channel.index()].rcv_next, bits);
            self.on_data(repr.channel, d, repr.payload, now);
        }
    }

    fn on_data(&mut self, ch: Channel, d: DataRepr, payload: &[u8], now: Instant) {
        let window = self.cfg.window_len();
        let rx = &mut self.rx[ch.index()];
        if seq::lt(d.seq, rx.rcv_next)
            || (seq::in_window(d.seq, rx.rcv_next, window) && rx.bit(d.seq))
        {
            // Already have it: our ACK was probably lost. ACK at once.
            self.stats.rx_duplicates += 1;
            rx.ack_pending = true;
            rx.ack_now = true;
            return;
        }
        if !seq::in_window(d.seq, rx.rcv_next, window) {
            self.stats.rx_out_of_window += 1;
            return;
        }
        let chunk = Chunk {
            frag_id: d.frag_id,
            frag_len: d.frag_len,
            offset: d.offset,
            bytes: payload,
            put: d.put.map(|p| PutTarget {
                region: p.region,
                offset: p.offset,
            }),
        };
        let events = &mut self.events;
        let stats = &mut self.stats;
        let res = rx.reasm.on_chunk(chunk, &mut self.regions, |c| match c {
            Completed::Message(data) => {
                stats.delivered += 1;
                events.push_back(Event::Message { channel: ch, data });
            }
            Completed::Put {
                region,
                offset,
                len,
            } => {
                stats.puts_received += 1;
                events.push_back(Event::PutReceived {
                    region,
                    offset,
                    len,
                });
            }
            Completed::PutRejected {
                region,
                offset,
                len,
            } => {
                events.push_back(Event::PutRejected {
                    region,
                    offset,
                    len,
                });
            }
        });
        match res {
            Ok(Accepted::Stored) => {}
            Ok(Accepted::PutOutsideRegion) => self.stats.bad_put += 1,
            Err(ChunkError::OutOfWindow) => {
                self.stats.rx_no_credit += 1;
                return;
            }
            Err(ChunkError::TooLarge | ChunkError::Inconsistent) => {
                self.stats.bad_chunk += 1;
                return;
            }
        }
        self.stats.rx_segments += 1;
        rx.set_bit(d.seq, true);
        if seq::gt(d.seq.wrapping_add(1), rx.highest) {
            rx.highest = d.seq.wrapping_add(1);
        }
        while rx.rcv_next != rx.highest && rx.bit(rx.rcv_next) {
            let s = rx.rcv_next;
            rx.set_bit(s, false);
            rx.rcv_next = s.wrapping_add(1);
        }
        rx.ack_pending = true;
        rx.unacked += 1;
        if (self.cfg.ack_on_gap && rx.rcv_next != rx.highest) || rx.unacked >= self.cfg.ack_every {
            rx.ack_now = true;
        } else if rx.ack_due.is_none() {
            rx.ack_due = Some(now + self.cfg.ack_delay);
        }
    }
}
