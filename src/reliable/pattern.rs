//! A message source and a sink that checks every byte: message `i` is its
//! index (8 bytes, big-endian) followed by a pattern derived from `i`, so the
//! sink verifies content, order, loss and duplication without keeping copies.
//! Meant for the `reliable_tx` / `reliable_rx` stages and the tests.

/// Writes message `i` of `len` bytes (at least 8) into `out` (cleared first;
/// no allocation once `out` has the capacity). Unstamped: see [`fill_stamped`].
pub fn fill(i: u64, len: usize, out: &mut Vec<u8>) {
    fill_stamped(i, 0, len, out);
}

/// Writes message `i` of `len` bytes into `out`, carrying `stamp` (nanoseconds
/// of the sender's [`crate::time::Instant`] at `send`, for the delivery latency)
/// in bytes 8..16 when `len >= 24`. The rest of the pattern is derived from
/// both (bijectively), so a damaged stamp is always caught as a damaged message.
pub fn fill_stamped(i: u64, stamp: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize(len, 0);
    let head = len.min(8);
    out[..head].copy_from_slice(&i.to_be_bytes()[..head]);
    let stamp = if len >= STAMPED { stamp } else { 0 };
    if len >= STAMPED {
        out[8..16].copy_from_slice(&stamp.to_be_bytes());
    }
    let seed = seed(i, stamp);
    let body = &mut out[body_start(len)..];
    let mut words = body.chunks_exact_mut(8);
    let mut k = 0u64;
    for w in &mut words {
        w.copy_from_slice(&word(seed, k).to_le_bytes());
        k += 1;
    }
    let tail = words.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&word(seed, k).to_le_bytes()[..n]);
}

/// Shortest message that carries a stamp: index, stamp and one word checking both.
pub const STAMPED: usize = 24;

/// The stamp a message carries (0 when unstamped or shorter than [`STAMPED`]).
pub fn stamp(data: &[u8]) -> u64 {
    if data.len() < STAMPED {
        return 0;
    }
    data.get(8..16)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_be_bytes)
}

fn body_start(len: usize) -> usize {
    if len >= STAMPED {
        16
    } else {
        len.min(8)
    }
}

/// Whether `data` is exactly message `i` of `data.len()` bytes, as [`fill`]
/// or [`fill_stamped`] make it (with the stamp it carries): compared a word at
/// a time, without building a copy.
pub fn matches(i: u64, data: &[u8]) -> bool {
    let head = data.len().min(8);
    if data[..head] != i.to_be_bytes()[..head] {
        return false;
    }
    let seed = seed(i, stamp(data));
    let mut words = data[body_start(data.len())..].chunks_exact(8);
    let mut k = 0u64;
    let mut diff = 0u64;
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        diff |= u64::from_le_bytes(b) ^ word(seed, k);
        k += 1;
    }
    let tail = words.remainder();
    diff == 0 && tail == &word(seed, k).to_le_bytes()[..tail.len()]
}

/// The per-message seed of the pattern.
fn seed(i: u64, stamp: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ word(stamp, u64::MAX)
}

/// Word `k` of the pattern: a bijective mix of seed and position, so every
/// word differs from its neighbours and from the same word of other messages.
/// Each word is independent of the others (no serial chain), which lets the
/// compiler pipeline the loop: the sink checks 8 KiB in about a microsecond.
#[inline]
fn word(seed: u64, k: u64) -> u64 {
    let mut x = (seed ^ k.wrapping_mul(0xd6e8_feb8_6659_fd93)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    x
}

/// What a [`Sink`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SinkStats {
    /// Messages in the expected order with the expected bytes.
    pub ok: u64,
    /// Messages whose bytes differ from what their index says.
    pub corrupt: u64,
    /// Messages that arrived ahead of the next expected index.
    pub out_of_order: u64,
    /// Messages whose index is below the next expected one (a duplicate, or late after a skip).
    pub duplicate: u64,
    /// Payload bytes checked.
    pub bytes: u64,
}

/// Checks a stream of messages made by [`fill`] with a fixed length: in
/// order ([`Sink::new`]) or in any order, each once ([`Sink::unordered`]).
#[derive(Debug, Clone, Default)]
pub struct Sink {
    next: u64,
    len: usize,
    stats: SinkStats,
    /// Unordered: one bit per index seen (from 0; grows with the highest index).
    seen: Option<Vec<u64>>,
}

impl Sink {
    /// A sink expecting messages `0, 1, 2, ...` of `len` bytes, in that order.
    pub fn new(len: usize) -> Sink {
        Sink {
            len,
            ..Sink::default()
        }
    }

    /// A sink expecting each of messages `0, 1, 2, ...` of `len` bytes once,
    /// in any order (an unordered channel); `expect` sizes its bitmap up
    /// front (it grows past that if need be).
    pub fn unordered(len: usize, expect: u64) -> Sink {
        Sink {
            len,
            seen: Some(vec![0; usize::try_from(expect.div_ceil(64)).unwrap_or(0)]),
            ..Sink::default()
        }
    }

    fn check_unordered(&mut self, i: u64) -> bool {
        let Some(seen) = self.seen.as_mut() else {
            return false;
        };
        let Ok(w) = usize::try_from(i / 64) else {
            self.stats.corrupt += 1;
            return false;
        };
        // An index far beyond anything sent is damage, not a reason to
        // allocate: at most 2^32 messages.
        if w >= 1 << 26 {
            self.stats.corrupt += 1;
            return false;
        }
        if w >= seen.len() {
            seen.resize((w + 1).next_power_of_two(), 0);
        }
        let bit = 1u64 << (i % 64);
        if seen[w] & bit != 0 {
            self.stats.duplicate += 1;
            return false;
        }
        seen[w] |= bit;
        self.stats.ok += 1;
        while seen
            .get((self.next / 64) as usize)
            .is_some_and(|x| x & (1 << (self.next % 64)) != 0)
        {
            self.next += 1;
        }
        true
    }

    /// Checks one delivered message; returns whether it was the expected one, intact.
    pub fn check(&mut self, data: &[u8]) -> bool {
        let idx = data
            .get(..8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_be_bytes);
        let Some(i) = idx else {
            self.stats.corrupt += 1;
            return false;
        };
        self.stats.bytes += data.len() as u64;
        if data.len() != self.len || !matches(i, data) {
            self.stats.corrupt += 1;
            return false;
        }
        if self.seen.is_some() {
            return self.check_unordered(i);
        }
        match i.cmp(&self.next) {
            core::cmp::Ordering::Equal => {
                self.next += 1;
                self.stats.ok += 1;
                true
            }
            core::cmp::Ordering::Less => {
                self.stats.duplicate += 1;
                false
            }
            core::cmp::Ordering::Greater => {
                self.stats.out_of_order += 1;
                self.next = i + 1;
                false
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> SinkStats {
        self.stats
    }

    /// Index of the next expected message (unordered: the lowest not seen yet).
    pub fn next(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn sink_classifies() {
        let mut s = Sink::new(100);
        let mut m = Vec::new();
        fill(0, 100, &mut m);
        assert!(s.check(&m));
        fill(2, 100, &mut m);
        assert!(!s.check(&m)); // skipped 1
        fill(1, 100, &mut m);
        assert!(!s.check(&m)); // late: counted as duplicate/old
        fill(3, 100, &mut m);
        m[50] ^= 1;
        assert!(!s.check(&m));
        assert!(!s.check(&[1, 2]));
        let st = s.stats();
        assert_eq!(
            (st.ok, st.out_of_order, st.duplicate, st.corrupt),
            (1, 1, 1, 2)
        );
        assert_eq!(s.next(), 3);
    }

    #[test]
    fn unordered_sink_counts_each_once() {
        let mut s = Sink::unordered(100, 2);
        let mut m = Vec::new();
        for i in [3, 0, 200, 1, 3, 2] {
            fill(i, 100, &mut m);
            s.check(&m);
        }
        let st = s.stats();
        assert_eq!((st.ok, st.duplicate, st.out_of_order), (5, 1, 0));
        assert_eq!(s.next(), 4);
        fill(u64::MAX, 100, &mut m);
        assert!(!s.check(&m));
        assert_eq!(s.stats().corrupt, 1);
    }

    #[test]
    fn patterns_differ_per_index() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        fill(5, 64, &mut a);
        fill(6, 64, &mut b);
        assert_ne!(a[8..], b[8..]);
        fill(5, 3, &mut a);
        assert_eq!(a, vec![0, 0, 0]);
    }

    #[test]
    fn matches_catches_any_flipped_byte() {
        let mut m = Vec::new();
        for len in [0usize, 3, 8, 9, 15, 16, 17, 23, 24, 25, 31, 100] {
            fill_stamped(7, 0x0102_0304_0506_0708, len, &mut m);
            assert_eq!(m.len(), len);
            assert!(matches(7, &m), "len {len}");
            assert!(
                len < 8 || !matches(8, &m),
                "len {len}: another index matched"
            );
            for at in 0..len {
                m[at] ^= 0x10;
                assert!(!matches(7, &m), "len {len}: flip at {at} missed");
                m[at] ^= 0x10;
            }
        }
    }

    #[test]
    fn sink_rejects_a_wrong_length_and_swapped_words() {
        let mut s = Sink::new(64);
        let mut m = Vec::new();
        fill(0, 64, &mut m);
        m.swap(20, 28); // two words' bytes exchanged
        assert!(!s.check(&m));
        fill(0, 72, &mut m);
        assert!(!s.check(&m));
        fill(0, 64, &mut m);
        assert!(s.check(&m));
        assert_eq!(s.stats().corrupt, 2);
    }

    #[test]
    fn stamps_ride_along_and_are_checked() {
        let mut m = Vec::new();
        fill_stamped(3, 123_456_789, 40, &mut m);
        assert_eq!(stamp(&m), 123_456_789);
        assert!(matches(3, &m));
        m[12] ^= 1; // the stamp itself damaged
        assert!(!matches(3, &m));
        fill_stamped(3, 99, 23, &mut m); // too short to carry one
        assert_eq!(stamp(&m), 0);
        assert!(matches(3, &m));
        let mut s = Sink::new(40);
        fill_stamped(0, 5, 40, &mut m);
        assert!(s.check(&m));
    }
}
