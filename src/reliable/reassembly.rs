//! Fragment reassembly and registered PUT regions, bounds-checked.
//!
//! A channel reassembles at most `slots` fragments at once: fragment ids must
//! lie in the window `[base, base + slots)`, where `base` is the oldest
//! fragment not yet delivered. The sender never starts a fragment beyond its
//! oldest unacknowledged one plus `slots` (its send credits), so an honest
//! peer always fits; anything else is refused. Messages are reassembled into
//! one buffer of the announced length (at most `max_message`); PUT chunks are
//! written straight into the named region after checking that the whole
//! fragment fits in it. Completed fragments are released in fragment-id order
//! (ordered channel) or as soon as they complete (unordered).

use super::seq;
use thiserror::Error;

/// A registered PUT region id.
pub type RegionId = u16;

/// Memory a peer may PUT into, by region id and offset (never a raw address).
#[derive(Debug, Default, Clone)]
pub struct Regions {
    regions: Vec<Option<Vec<u8>>>,
}

impl Regions {
    /// Registers a zeroed region of `len` bytes; `None` when all ids are used.
    pub fn register(&mut self, len: usize) -> Option<RegionId> {
        if let Some(i) = self.regions.iter().position(Option::is_none) {
            self.regions[i] = Some(vec![0; len]);
            return RegionId::try_from(i).ok();
        }
        let id = RegionId::try_from(self.regions.len()).ok()?;
        self.regions.push(Some(vec![0; len]));
        Some(id)
    }

    /// Removes a region, returning its memory.
    pub fn unregister(&mut self, id: RegionId) -> Option<Vec<u8>> {
        self.regions.get_mut(usize::from(id))?.take()
    }

    /// A region's bytes.
    pub fn get(&self, id: RegionId) -> Option<&[u8]> {
        self.regions.get(usize::from(id))?.as_deref()
    }

    /// A region's bytes, writable.
    pub fn get_mut(&mut self, id: RegionId) -> Option<&mut [u8]> {
        self.regions.get_mut(usize::from(id))?.as_deref_mut()
    }

    /// `len` bytes at `offset` of region `id` exist.
    pub fn fits(&self, id: RegionId, offset: u64, len: u64) -> bool {
        match (self.get(id), offset.checked_add(len)) {
            (Some(r), Some(end)) => end <= r.len() as u64,
            _ => false,
        }
    }
}

/// Why a chunk was refused (the segment is dropped and counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum ChunkError {
    /// Fragment id outside the reassembly window (stale, or beyond the credits).
    #[error("fragment outside the reassembly window")]
    OutOfWindow,
    /// Fragment longer than the configured maximum message.
    #[error("fragment too large")]
    TooLarge,
    /// Length or kind disagrees with earlier chunks of the same fragment, or
    /// more bytes than the fragment holds.
    #[error("chunk inconsistent with its fragment")]
    Inconsistent,
}

/// A PUT's target as carried in the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutTarget {
    /// Region id.
    pub region: RegionId,
    /// Offset in the region.
    pub offset: u64,
}

/// One chunk of a fragment.
#[derive(Debug, Clone, Copy)]
pub struct Chunk<'a> {
    /// Fragment id.
    pub frag_id: u32,
    /// Fragment length.
    pub frag_len: u32,
    /// Offset of `bytes` in the fragment.
    pub offset: u32,
    /// The bytes.
    pub bytes: &'a [u8],
    /// PUT target, or `None` for a message.
    pub put: Option<PutTarget>,
}

/// A fragment released by the reassembler.
#[derive(Debug, PartialEq, Eq)]
pub enum Completed {
    /// A whole message.
    Message(Vec<u8>),
    /// A PUT landed in its region.
    Put {
        /// Region.
        region: RegionId,
        /// Offset of the first byte.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// A PUT whose target was not inside a registered region; nothing was written.
    PutRejected {
        /// Region named by the peer.
        region: RegionId,
        /// Offset named by the peer.
        offset: u64,
        /// Length.
        len: u32,
    },
}

#[derive(Debug)]
enum Kind {
    Message(Vec<u8>),
    Put(PutTarget),
    Rejected(PutTarget),
}

#[derive(Debug)]
enum Slot {
    Free,
    Active {
        frag_id: u32,
        frag_len: u32,
        got: u64,
        kind: Kind,
    },
    Complete(Completed),
    Done,
}

/// What happened to an accepted chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// Stored.
    Stored,
    /// Stored nowhere: the first chunk of a PUT outside every region (counted once per fragment).
    PutOutsideRegion,
}

/// The reassembler of one channel.
#[derive(Debug)]
pub struct Reassembly {
    base: u32,
    slots: Vec<Slot>,
    mask: u32,
    ordered: bool,
    max_message: u32,
    pool: Vec<Vec<u8>>,
}

impl Reassembly {
    /// `slots` fragments in flight (rounded up to a power of two), the first
    /// fragment id expected, delivery order, and the largest message accepted.
    pub fn new(slots: u32, first_frag: u32, ordered: bool, max_message: u32) -> Reassembly {
        let n = slots.clamp(1, 1 << 16).next_power_of_two();
        Reassembly {
            base: first_frag,
            slots: (0..n).map(|_| Slot::Free).collect(),
            mask: n - 1,
            ordered,
            max_message,
            pool: Vec::new(),
        }
    }

    /// Oldest fragment id not yet released.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// Fragments currently held (partly received or complete and waiting for order).
    pub fn in_progress(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, Slot::Active { .. } | Slot::Complete(_)))
            .count()
    }

    /// Gives a delivered message buffer back for reuse.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < self.slots.len() {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// Stores one chunk; completed fragments are passed to `done` in release order.
    pub fn on_chunk(
        &mut self,
        c: Chunk<'_>,
        regions: &mut Regions,
        mut done: impl FnMut(Completed),
    ) -> Result<Accepted, ChunkError> {
        if !seq::in_window(c.frag_id, self.base, self.mask + 1) {
            return Err(ChunkError::OutOfWindow);
        }
        let end = u64::from(c.offset) + c.bytes.len() as u64;
        if end > u64::from(c.frag_len) {
            return Err(ChunkError::Inconsistent);
        }
        let idx = (c.frag_id & self.mask) as usize;
        let mut outcome = Accepted::Stored;
        if matches!(self.slots[idx], Slot::Free) {
            let kind = match c.put {
                None => {
                    if c.frag_len > self.max_message {
                        return Err(ChunkError::TooLarge);
                    }
                    let mut buf = self.pool.pop().unwrap_or_default();
                    buf.resize(c.frag_len as usize, 0);
                    Kind::Message(buf)
                }
                Some(t) if regions.fits(t.region, t.offset, u64::from(c.frag_len)) => Kind::Put(t),
                Some(t) => {
                    outcome = Accepted::PutOutsideRegion;
                    Kind::Rejected(t)
                }
            };
            self.slots[idx] = Slot::Active {
                frag_id: c.frag_id,
                frag_len: c.frag_len,
                got: 0,
                kind,
            };
        }
        let Slot::Active {
            frag_id,
            frag_len,
            got,
            kind,
        } = &mut self.slots[idx]
        else {
            return Err(ChunkError::Inconsistent);
        };
        let same_kind = match (kind as &Kind, c.put) {
            (Kind::Message(_), None) => true,
            (Kind::Put(t) | Kind::Rejected(t), Some(p)) => *t == p,
            _ => false,
        };
        if *frag_id != c.frag_id
            || *frag_len != c.frag_len
            || !same_kind
            || *got + c.bytes.len() as u64 > u64::from(*frag_len)
        {
            return Err(ChunkError::Inconsistent);
        }
        let off = c.offset as usize;
        match kind {
            Kind::Message(buf) => buf[off..off + c.bytes.len()].copy_from_slice(c.bytes),
            Kind::Put(t) => {
                // `fits` was checked for the whole fragment when it was opened,
                // and the chunk lies inside the fragment; check again anyway in
                // case the region was unregistered since.
                let at = t.offset.saturating_add(u64::from(c.offset));
                match regions.get_mut(t.region) {
                    Some(r) if at.saturating_add(c.bytes.len() as u64) <= r.len() as u64 => {
                        let at = at as usize;
                        r[at..at + c.bytes.len()].copy_from_slice(c.bytes);
                    }
                    _ => {
                        let t = *t;
                        *kind = Kind::Rejected(t);
                        outcome = Accepted::PutOutsideRegion;
                    }
                }
            }
            Kind::Rejected(_) => {}
        }
        *got += c.bytes.len() as u64;
        if *got == u64::from(*frag_len) {
            let len = *frag_len;
            let completed = match core::mem::replace(&mut self.slots[idx], Slot::Free) {
                Slot::Active { kind, .. } => match kind {
                    Kind::Message(b) => Completed::Message(b),
                    Kind::Put(t) => Completed::Put {
                        region: t.region,
                        offset: t.offset,
                        len,
                    },
                    Kind::Rejected(t) => Completed::PutRejected {
                        region: t.region,
                        offset: t.offset,
                        len,
                    },
                },
                _ => return Err(ChunkError::Inconsistent),
            };
            if self.ordered {
                self.slots[idx] = Slot::Complete(completed);
            } else {
                self.slots[idx] = Slot::Done;
                done(completed);
            }
            self.release(&mut done);
        }
        Ok(outcome)
    }

    fn release(&mut self, done: &mut impl FnMut(Completed)) {
        loop {
            let idx = (self.base & self.mask) as usize;
            match core::mem::replace(&mut self.slots[idx], Slot::Free) {
                Slot::Complete(c) => done(c),
                Slot::Done => {}
                other => {
                    self.slots[idx] = other;
                    return;
                }
            }
            self.base = self.base.wrapping_add(1);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn chunk(frag_id: u32, frag_len: u32, offset: u32, bytes: &[u8]) -> Chunk<'_> {
        Chunk {
            frag_id,
            frag_len,
            offset,
            bytes,
            put: None,
        }
    }

    #[test]
    fn ordered_release_waits_for_the_oldest() {
        let mut r = Reassembly::new(4, u32::MAX, true, 100);
        let mut regions = Regions::default();
        let mut out = Vec::new();
        // fragment u32::MAX+1 = 0 completes first but waits for u32::MAX
        r.on_chunk(chunk(0, 2, 0, b"bb"), &mut regions, |c| out.push(c))
            .unwrap();
        assert!(out.is_empty());
        r.on_chunk(chunk(u32::MAX, 4, 2, b"cd"), &mut regions, |c| out.push(c))
            .unwrap();
        assert!(out.is_empty());
        assert_eq!(r.in_progress(), 2);
        r.on_chunk(chunk(u32::MAX, 4, 0, b"ab"), &mut regions, |c| out.push(c))
            .unwrap();
        assert_eq!(
            out,
            vec![
                Completed::Message(b"abcd".to_vec()),
                Completed::Message(b"bb".to_vec())
            ]
        );
        assert_eq!(r.base(), 1);
        assert_eq!(r.in_progress(), 0);
    }

    #[test]
    fn unordered_release_at_once() {
        let mut r = Reassembly::new(4, 10, false, 100);
        let mut regions = Regions::default();
        let mut out = Vec::new();
        r.on_chunk(chunk(11, 1, 0, b"x"), &mut regions, |c| out.push(c))
            .unwrap();
        assert_eq!(out, vec![Completed::Message(b"x".to_vec())]);
        assert_eq!(r.base(), 10);
        r.on_chunk(chunk(10, 0, 0, b""), &mut regions, |c| out.push(c))
            .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(r.base(), 12);
    }

    #[test]
    fn bounds_and_window() {
        let mut r = Reassembly::new(4, 0, true, 8);
        let mut regions = Regions::default();
        let mut sink = |_c| {};
        assert_eq!(
            r.on_chunk(chunk(4, 1, 0, b"x"), &mut regions, &mut sink),
            Err(ChunkError::OutOfWindow)
        );
        assert_eq!(
            r.on_chunk(chunk(u32::MAX, 1, 0, b"x"), &mut regions, &mut sink),
            Err(ChunkError::OutOfWindow)
        );
        assert_eq!(
            r.on_chunk(chunk(0, 9, 0, b"x"), &mut regions, &mut sink),
            Err(ChunkError::TooLarge)
        );
        assert_eq!(
            r.on_chunk(chunk(0, 4, 3, b"xy"), &mut regions, &mut sink),
            Err(ChunkError::Inconsistent)
        );
        r.on_chunk(chunk(0, 4, 0, b"xy"), &mut regions, &mut sink)
            .unwrap();
        // different length for the same fragment
        assert_eq!(
            r.on_chunk(chunk(0, 5, 2, b"zw"), &mut regions, &mut sink),
            Err(ChunkError::Inconsistent)
        );
        // overlapping forgery beyond the fragment's byte count
        r.on_chunk(chunk(0, 4, 0, b"x"), &mut regions, &mut sink)
            .unwrap();
        assert_eq!(
            r.on_chunk(chunk(0, 4, 0, b"xy"), &mut regions, &mut sink),
            Err(ChunkError::Inconsistent)
        );
    }

    #[test]
    fn put_into_region_and_outside() {
        let mut regions = Regions::default();
        let id = regions.register(16).unwrap();
        let mut r = Reassembly::new(4, 0, true, 8);
        let mut out = Vec::new();
        let put = Some(PutTarget {
            region: id,
            offset: 10,
        });
        let c = Chunk {
            frag_id: 0,
            frag_len: 6,
            offset: 3,
            bytes: b"def",
            put,
        };
        assert_eq!(
            r.on_chunk(c, &mut regions, |c| out.push(c)),
            Ok(Accepted::Stored)
        );
        let c = Chunk {
            offset: 0,
            bytes: b"abc",
            ..c
        };
        r.on_chunk(c, &mut regions, |c| out.push(c)).unwrap();
        assert_eq!(
            out,
            vec![Completed::Put {
                region: id,
                offset: 10,
                len: 6
            }]
        );
        assert_eq!(&regions.get(id).unwrap()[10..], b"abcdef");
        // 11 + 6 > 16: rejected, nothing written, still released in order
        let bad = Chunk {
            frag_id: 1,
            frag_len: 6,
            offset: 0,
            bytes: b"ZZZZZZ",
            put: Some(PutTarget {
                region: id,
                offset: 11,
            }),
        };
        assert_eq!(
            r.on_chunk(bad, &mut regions, |c| out.push(c)),
            Ok(Accepted::PutOutsideRegion)
        );
        assert_eq!(&regions.get(id).unwrap()[10..], b"abcdef");
        assert!(matches!(out[1], Completed::PutRejected { offset: 11, .. }));
        // unknown region, and an offset that would overflow
        for (region, offset) in [(9u16, 0u64), (id, u64::MAX - 2)] {
            let c = Chunk {
                frag_id: r.base(),
                frag_len: 6,
                offset: 0,
                bytes: b"ZZZZZZ",
                put: Some(PutTarget { region, offset }),
            };
            assert_eq!(
                r.on_chunk(c, &mut regions, |c| out.push(c)),
                Ok(Accepted::PutOutsideRegion)
            );
        }
        assert_eq!(r.base(), 4);
    }
}
