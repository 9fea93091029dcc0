//! A burst: up to [`BURST_MAX`] packets moved together between a port, a stage
//! and a ring. Its storage is allocated once and reused, so passing bursts
//! around allocates nothing.

use super::Packet;

/// The most packets a burst holds.
pub const BURST_MAX: usize = 64;

/// Up to [`BURST_MAX`] packets, in order.
#[derive(Debug)]
pub struct Burst {
    pkts: Vec<Packet>,
}

impl Default for Burst {
    fn default() -> Self {
        Burst::new()
    }
}

impl Burst {
    /// An empty burst with room for [`BURST_MAX`] packets.
    pub fn new() -> Self {
        Burst {
            pkts: Vec::with_capacity(BURST_MAX),
        }
    }

    /// Number of packets held.
    pub fn len(&self) -> usize {
        self.pkts.len()
    }

    /// Whether the burst holds no packet.
    pub fn is_empty(&self) -> bool {
        self.pkts.is_empty()
    }

    /// Room left before the burst is full.
    pub fn room(&self) -> usize {
        BURST_MAX - self.pkts.len()
    }

    /// Appends a packet, or gives it back when the burst is full.
    pub fn push(&mut self, pkt: Packet) -> Result<(), Packet> {
        if self.pkts.len() == BURST_MAX {
            return Err(pkt);
        }
        self.pkts.push(pkt);
        Ok(())
    }

    /// The packets, in order.
    pub fn iter(&self) -> core::slice::Iter<'_, Packet> {
        self.pkts.iter()
    }

    /// The packets, mutably.
    pub fn iter_mut(&mut self) -> core::slice::IterMut<'_, Packet> {
        self.pkts.iter_mut()
    }

    /// The packets as a slice.
    pub fn as_slice(&self) -> &[Packet] {
        &self.pkts
    }

    /// Removes and yields the first `n` packets (all of them if fewer).
    pub fn drain_front(&mut self, n: usize) -> std::vec::Drain<'_, Packet> {
        let n = n.min(self.pkts.len());
        self.pkts.drain(..n)
    }

    /// Removes and yields every packet.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Packet> {
        self.pkts.drain(..)
    }

    /// Total bytes of the packets held.
    pub fn bytes(&self) -> u64 {
        self.pkts.iter().map(|p| p.len() as u64).sum()
    }

    /// The storage, for moving packets in bulk into a ring.
    pub(crate) fn vec_mut(&mut self) -> &mut Vec<Packet> {
        &mut self.pkts
    }

    /// Drops every packet (returning buffers to their pools).
    pub fn clear(&mut self) {
        self.pkts.clear();
    }
}
