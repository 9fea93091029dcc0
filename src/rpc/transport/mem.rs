//! An in-process link: two receive rings, two immediate queues and two exposed
//! consumer positions in one value. Tests drive both endpoints over it, one side
//! at a time, and can inject arbitrary bytes as a misbehaving peer.

#![forbid(unsafe_code)]

use super::{Transport, TransportError};
use std::collections::VecDeque;

/// Both directions of an in-memory connection.
#[derive(Debug, Clone)]
pub struct MemLink {
    rings: [Vec<u8>; 2],
    imms: [VecDeque<u32>; 2],
    consumer: [u64; 2],
    writes: [u64; 2],
    refuse: [u32; 2],
}

impl MemLink {
    /// A link whose two receive rings hold `ring_size` bytes each.
    pub fn new(ring_size: usize) -> Self {
        MemLink {
            rings: [vec![0u8; ring_size], vec![0u8; ring_size]],
            imms: [VecDeque::new(), VecDeque::new()],
            consumer: [0, 0],
            writes: [0, 0],
            refuse: [0, 0],
        }
    }

    /// Side 0 or 1 (any other value is taken as 1) as a [`Transport`].
    #[inline]
    pub fn side(&mut self, side: usize) -> MemSide<'_> {
        MemSide {
            link: self,
            me: usize::from(side != 0),
        }
    }

    /// Writes bytes into side `to`'s receive ring and queues an immediate, as a
    /// peer would; out-of-range bytes are an error.
    pub fn inject(
        &mut self,
        to: usize,
        offset: u64,
        data: &[u8],
        imm: u32,
    ) -> Result<(), TransportError> {
        let to = usize::from(to != 0);
        let ring = &mut self.rings[to];
        let size = ring.len() as u64;
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= size);
        let Some(end) = end else {
            return Err(TransportError::OutOfRange {
                offset,
                len: data.len() as u64,
                size,
            });
        };
        ring[offset as usize..end as usize].copy_from_slice(data);
        self.imms[to].push_back(imm);
        self.writes[usize::from(to == 0)] += 1;
        Ok(())
    }

    /// Makes the next `n` writes of side `side` fail with
    /// [`TransportError::Busy`], as a full send or completion queue would.
    pub fn refuse_writes(&mut self, side: usize, n: u32) {
        self.refuse[usize::from(side != 0)] = n;
    }

    /// Immediates queued for side `side` and not yet polled.
    #[inline]
    pub fn queued(&self, side: usize) -> usize {
        self.imms[usize::from(side != 0)].len()
    }

    /// Writes side `side` has issued.
    #[inline]
    pub fn writes(&self, side: usize) -> u64 {
        self.writes[usize::from(side != 0)]
    }
}

/// One side of a [`MemLink`].
#[derive(Debug)]
pub struct MemSide<'a> {
    link: &'a mut MemLink,
    me: usize,
}

impl Transport for MemSide<'_> {
    #[inline]
    fn write_with_imm(&mut self, offset: u64, data: &[u8], imm: u32) -> Result<(), TransportError> {
        if self.link.refuse[self.me] > 0 {
            self.link.refuse[self.me] -= 1;
            return Err(TransportError::Busy);
        }
        self.link.inject(1 - self.me, offset, data, imm)
    }

    #[inline]
    fn poll_imm(&mut self) -> Result<Option<u32>, TransportError> {
        Ok(self.link.imms[self.me].pop_front())
    }

    #[inline]
    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8] {
        let ring = &self.link.rings[self.me];
        usize::try_from(offset)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(o, l)| ring.get(o..o.checked_add(l)?))
            .unwrap_or(&[])
    }

    #[inline]
    fn publish_consumer(&mut self, pos: u64) {
        self.link.consumer[self.me] = pos;
    }

    #[inline]
    fn read_remote_consumer(&mut self) -> Result<Option<u64>, TransportError> {
        Ok(Some(self.link.consumer[1 - self.me]))
    }
}
