//! Write-with-immediate over the reliable channel's checked PUT, so the RPC runs
//! over any datagram port (mem wire, UDP, DPDK) with loss, reordering and
//! duplication repaired below it.
//!
//! Each side registers its receive ring as a region of its
//! [`reliable::Endpoint`](crate::reliable::Endpoint); the region id travels in
//! the [`ReliableInfo`] record exchanged out of band. A write-with-immediate is
//! one PUT of `imm * 32` bytes at the ring offset into the peer's region, on the
//! data channel, which the peer bounds-checks against the region and delivers
//! in order as [`Event::PutReceived`]
//! once every byte is in place. The immediate is carried by the PUT itself:
//! its length / 32. When the endpoint's segment is shorter than its immediate
//! (a segment that ends with a wrap marker advances the producer to the ring
//! end but copies only up to the marker) the PUT is padded with zeros to the
//! ring end, which the receiver never reads. So every write is one PUT,
//! usually one datagram.
//!
//! The consumer-position fallback (the memo's RDMA READ) is a request and a
//! response on the priority channel: `'R'` asks, `'C' + u64 LE` answers with
//! the position the peer last published. `'D'` on the same channel says this
//! side is done ([`ReliableTransport::send_done`]), so two processes can end
//! a run in band, without another channel.
//!
//! Sans-IO like the endpoint it wraps: [`ReliableTransport::pump`] takes the
//! received datagrams, the time and a datagram sink; [`PortLink`] binds it to a
//! port's queues. Anything unexpected from the peer (a PUT outside the ring, a
//! PUT not a multiple of 32 bytes, an unknown control message, a dead peer)
//! fails the transport, and the RPC endpoint's next poll returns the error.

#![forbid(unsafe_code)]

use super::{Transport, TransportError};
use crate::buf::{Burst, PoolCache};
use crate::port::{RxQueue, TxQueue};
use crate::reliable::driver::{self, DatagramTx, Pass};
use crate::reliable::stage::PacketTx;
use crate::reliable::{Channel, Config, Endpoint, Event, RegionId, SendError};
use crate::time::Instant;
use std::collections::VecDeque;

const READ_REQUEST: u8 = b'R';
const READ_RESPONSE: u8 = b'C';
const DONE: u8 = b'D';

/// The out-of-band record of one side: where its receive ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReliableInfo {
    /// Region id of the receive ring at the reliable endpoint.
    pub ring_region: RegionId,
    /// Ring size in bytes.
    pub ring_size: u64,
}

/// One side of an RPC connection over a reliable channel.
#[derive(Debug)]
pub struct ReliableTransport {
    ep: Endpoint,
    ring: RegionId,
    ring_size: u64,
    peer_ring: Option<RegionId>,
    imms: VecDeque<u32>,
    published: u64,
    remote_consumer: Option<u64>,
    read_outstanding: bool,
    peer_done: bool,
    failed: Option<String>,
    scratch: Vec<u8>,
    padded: Vec<u8>,
}

impl ReliableTransport {
    /// A transport whose receive ring of `ring_size` bytes is a region of a new
    /// reliable endpoint made with `config` (whose `max_message` is raised to
    /// the ring size, the largest PUT). Both peers must use the same reliable
    /// configuration.
    pub fn new(mut config: Config, ring_size: u64) -> Result<Self, TransportError> {
        crate::rpc::ring::check_ring_size(ring_size)
            .map_err(|e| TransportError::Failed(e.to_string()))?;
        config.max_message = config.max_message.max(ring_size as u32);
        let mtu = config.data_mtu.max(config.priority_mtu);
        let mut ep = Endpoint::new(config);
        let ring = ep
            .register_region(ring_size as usize)
            .ok_or_else(|| TransportError::Failed("no region id left for the ring".into()))?;
        Ok(ReliableTransport {
            ep,
            ring,
            ring_size,
            peer_ring: None,
            imms: VecDeque::with_capacity(256),
            published: 0,
            remote_consumer: None,
            read_outstanding: false,
            peer_done: false,
            failed: None,
            scratch: vec![0; mtu],
            padded: Vec::new(),
        })
    }

    /// This side's record for the peer.
    pub fn info(&self) -> ReliableInfo {
        ReliableInfo {
            ring_region: self.ring,
            ring_size: self.ring_size,
        }
    }

    /// Connects to the peer that sent `peer`.
    pub fn connect(&mut self, peer: ReliableInfo) -> Result<(), TransportError> {
        if peer.ring_size != self.ring_size {
            return Err(TransportError::Failed(format!(
                "peer ring size {} differs from local {}",
                peer.ring_size, self.ring_size
            )));
        }
        self.peer_ring = Some(peer.ring_region);
        Ok(())
    }

    /// The reliable endpoint underneath (its counters, RTT, unacknowledged segments).
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// Tells the peer this side is done (it sees [`peer_done`](Self::peer_done));
    /// delivered like everything else, once [`settled`](Self::settled).
    pub fn send_done(&mut self) -> Result<(), TransportError> {
        self.check()?;
        self.ep
            .send(Channel::Priority, &[DONE])
            .map(|_| ())
            .map_err(|e| self.send_error(e))
    }

    /// Whether the peer said it is done.
    pub fn peer_done(&self) -> bool {
        self.peer_done
    }

    /// Whether everything this side sent has been acknowledged.
    pub fn settled(&self) -> bool {
        self.ep.unacked(Channel::Priority) == 0 && self.ep.unacked(Channel::Data) == 0
    }

    /// Why the transport failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// One pass of the reliable endpoint (see [`driver::pump`]): received
    /// datagrams in, timers, datagrams out to `tx`, and the events turned into
    /// immediates and consumer-position reads. `now` must not go backwards.
    pub fn pump<'a>(
        &mut self,
        now: Instant,
        rx: impl IntoIterator<Item = &'a [u8]>,
        tx: &mut impl DatagramTx,
    ) -> Pass {
        let Self {
            ep,
            ring,
            imms,
            remote_consumer,
            read_outstanding,
            peer_done,
            failed,
            scratch,
            published,
            ..
        } = self;
        let mut answer_read = false;
        let mut on_event = |e: Event| {
            let fail = |failed: &mut Option<String>, why: String| {
                failed.get_or_insert(why);
            };
            match e {
                Event::PutReceived { region, len, .. }
                    if region == *ring && len > 0 && len % 32 == 0 =>
                {
                    imms.push_back(len / 32);
                }
                Event::PutReceived {
                    region,
                    offset,
                    len,
                }
                | Event::PutRejected {
                    region,
                    offset,
                    len,
                } => fail(
                    failed,
                    format!(
                        "the peer wrote {len} bytes at offset {offset} of region {region}, not a write into the receive ring"
                    ),
                ),
                Event::Message {
                    channel: Channel::Priority,
                    data,
                } => match data.as_slice() {
                    [READ_REQUEST] => answer_read = true,
                    [DONE] => *peer_done = true,
                    [READ_RESPONSE, pos @ ..] if pos.len() == 8 && *read_outstanding => {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(pos);
                        *remote_consumer = Some(u64::from_le_bytes(b));
                        *read_outstanding = false;
                    }
                    _ => fail(
                        failed,
                        format!("unexpected control message of {} bytes", data.len()),
                    ),
                },
                Event::Message { data, .. } => fail(
                    failed,
                    format!("unexpected data message of {} bytes", data.len()),
                ),
                Event::PutDone { .. } => {}
                Event::PeerDead => fail(failed, "the peer stopped answering".into()),
            }
        };
        let pass = driver::pump(ep, now, rx, scratch, tx, &mut on_event);
        if answer_read {
            let mut m = [0u8; 9];
            m[0] = READ_RESPONSE;
            m[1..].copy_from_slice(&published.to_le_bytes());
            if let Err(e) = ep.send(Channel::Priority, &m) {
                failed.get_or_insert(format!("cannot answer a consumer read: {e}"));
            }
        }
        pass
    }

    fn check(&self) -> Result<(), TransportError> {
        match &self.failed {
            Some(why) => Err(TransportError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    fn send_error(&mut self, e: SendError) -> TransportError {
        match e {
            SendError::QueueFull => TransportError::Busy,
            e => {
                let why = format!("reliable channel: {e}");
                self.failed.get_or_insert(why.clone());
                TransportError::Failed(why)
            }
        }
    }
}

impl Transport for ReliableTransport {
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError> {
        self.check()?;
        let delta = u64::from(imm) * 32;
        let len = data.len() as u64;
        if delta < len || !matches!(offset.checked_add(delta), Some(e) if e <= self.ring_size) {
            return Err(TransportError::OutOfRange {
                offset,
                len: delta.max(len),
                size: self.ring_size,
            });
        }
        let Some(peer) = self.peer_ring else {
            return Err(TransportError::Failed("not connected".into()));
        };
        let r = if delta == len {
            self.ep.put(peer, offset, data)
        } else {
            self.padded.clear();
            self.padded.extend_from_slice(data);
            self.padded.resize(delta as usize, 0);
            self.ep.put(peer, offset, &self.padded)
        };
        r.map(|_| ()).map_err(|e| self.send_error(e))
    }

    fn poll_imm(&mut self) -> Result<Option<u32>, TransportError> {
        if let Some(imm) = self.imms.pop_front() {
            return Ok(Some(imm));
        }
        self.check()?;
        Ok(None)
    }

    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8] {
        let ring = self.ep.region(self.ring).unwrap_or(&[]);
        usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| ring.get(o..o.checked_add(l)?))
            .unwrap_or(&[])
    }

    fn publish_consumer(&mut self, pos: u64) {
        self.published = pos;
    }

    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError> {
        self.check()?;
        if let Some(pos) = self.remote_consumer.take() {
            return Ok(Some(pos));
        }
        if !self.read_outstanding {
            self.ep
                .send(Channel::Priority, &[READ_REQUEST])
                .map_err(|e| self.send_error(e))?;
            self.read_outstanding = true;
        }
        Ok(None)
    }
}

/// Binds a [`ReliableTransport`] to a port's receive and transmit queues (any
/// port: mem wire, UDP, DPDK), with a pool cache for outgoing packets.
pub struct PortLink {
    rx: Box<dyn RxQueue>,
    tx: Box<dyn TxQueue>,
    rx_burst: Burst,
    rx_cache: PoolCache,
    out: PacketTx,
}

impl std::fmt::Debug for PortLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortLink")
            .field("oversize", &self.out.oversize)
            .finish_non_exhaustive()
    }
}

impl PortLink {
    /// Receives on `rx`, transmits on `tx`, takes outgoing packets from
    /// `tx_cache` and frees received ones to `rx_cache`. The buffers must hold
    /// the reliable configuration's larger MTU.
    pub fn new(
        rx: Box<dyn RxQueue>,
        tx: Box<dyn TxQueue>,
        rx_cache: PoolCache,
        tx_cache: PoolCache,
    ) -> Self {
        PortLink {
            rx,
            tx,
            rx_burst: Burst::new(),
            rx_cache,
            out: PacketTx::new(tx_cache),
        }
    }

    /// Datagrams that did not fit a packet buffer.
    pub fn oversize(&self) -> u64 {
        self.out.oversize
    }

    /// One pass: a receive burst into `t`, `t`'s timers and transmissions, a
    /// transmit burst. What the port does not take stays for the next pass.
    pub fn pump(&mut self, t: &mut ReliableTransport, now: Instant) -> Pass {
        let room = self.rx_burst.room();
        self.rx.rx_burst(now, &mut self.rx_burst, room);
        let pass = t.pump(now, self.rx_burst.iter().map(|p| p.data()), &mut self.out);
        self.rx_cache.free_bulk(&mut self.rx_burst);
        self.tx.tx_burst(now, &mut self.out.burst);
        if self.out.burst.is_empty() {
            self.tx.flush(now);
        }
        pass
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn exchange(a: &mut ReliableTransport, b: &mut ReliableTransport, now: Instant) {
        let mut ab: Vec<Vec<u8>> = Vec::new();
        let mut ba: Vec<Vec<u8>> = Vec::new();
        for _ in 0..4 {
            let inbound = std::mem::take(&mut ba);
            a.pump(now, inbound.iter().map(|v| &v[..]), &mut ab);
            let inbound = std::mem::take(&mut ab);
            b.pump(now, inbound.iter().map(|v| &v[..]), &mut ba);
        }
    }

    fn pair() -> (ReliableTransport, ReliableTransport) {
        let mut a = ReliableTransport::new(Config::default(), 4096).unwrap();
        let mut b = ReliableTransport::new(Config::default(), 4096).unwrap();
        let (ia, ib) = (a.info(), b.info());
        a.connect(ib).unwrap();
        b.connect(ia).unwrap();
        (a, b)
    }

    #[test]
    fn put_carries_the_immediate() {
        let (mut a, mut b) = pair();
        let now = Instant::from_micros(1);
        a.write_with_imm(64, &[5u8; 96], 3).unwrap();
        // A segment ending with a wrap marker: 32 bytes copied, 4032 announced.
        // More data than announced, or past the ring end: refused.
        assert!(a.write_with_imm(0, &[6u8; 64], 1).is_err());
        assert!(a.write_with_imm(4064, &[6u8; 32], 2).is_err());
        a.write_with_imm(4096 - 64, &[6u8; 32], 2).unwrap();
        assert_eq!(b.poll_imm().unwrap(), None);
        exchange(&mut a, &mut b, now);
        assert_eq!(b.poll_imm().unwrap(), Some(3));
        assert_eq!(b.poll_imm().unwrap(), Some(2));
        assert_eq!(b.poll_imm().unwrap(), None);
        assert_eq!(b.recv_bytes(64, 96), &[5u8; 96]);
        assert_eq!(b.recv_bytes(4096 - 64, 64)[..32], [6u8; 32]);
        assert!(b.recv_bytes(4096 - 32, 64).is_empty());
    }

    #[test]
    fn consumer_read_round_trip() {
        let (mut a, mut b) = pair();
        let now = Instant::from_micros(1);
        b.publish_consumer(4160);
        assert_eq!(a.read_remote_consumer().unwrap(), None);
        assert_eq!(a.read_remote_consumer().unwrap(), None);
        exchange(&mut a, &mut b, now);
        assert_eq!(a.read_remote_consumer().unwrap(), Some(4160));
    }

    #[test]
    fn done_reaches_the_peer_and_settles() {
        let (mut a, mut b) = pair();
        let now = Instant::from_micros(1);
        assert!(a.settled() && !b.peer_done());
        a.send_done().unwrap();
        assert!(!a.settled());
        // Delivered, then acknowledged (the ACK may wait for the delayed-ACK
        // timer, so a later pass).
        exchange(&mut a, &mut b, now);
        assert!(b.peer_done());
        assert!(!a.peer_done());
        exchange(&mut a, &mut b, now + std::time::Duration::from_millis(50));
        assert!(a.settled(), "{:?}", a.endpoint().stats());
        assert!(a.failure().is_none() && b.failure().is_none());
    }

    #[test]
    fn stray_put_fails_the_transport() {
        let (mut a, mut b) = pair();
        let now = Instant::from_micros(1);
        // A PUT into a region that is not the ring (a region id one past it).
        let ring = b.info().ring_region;
        a.ep.put(ring + 1, 0, &[1u8; 32]).unwrap();
        exchange(&mut a, &mut b, now);
        assert!(matches!(b.poll_imm(), Err(TransportError::Failed(_))));
        // A PUT that is not a whole number of 32-byte blocks.
        let (mut a, mut b) = pair();
        a.ep.put(ring, 0, &[1u8; 33]).unwrap();
        exchange(&mut a, &mut b, now);
        assert!(b.failure().is_some());
        // An unknown control message.
        let (mut a, mut b) = pair();
        a.ep.send(Channel::Priority, b"?").unwrap();
        exchange(&mut a, &mut b, now);
        assert!(b.failure().unwrap().contains("control"));
    }
}
