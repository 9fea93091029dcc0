//! A message source and a sink that checks every byte: message `i` is its
//! index (8 bytes, big-endian) followed by a pattern derived from `i`, so the
//! sink verifies content, order, loss and duplication without keeping copies.
//! Meant for the `reliable_tx` / `reliable_rx` stages and the tests.

/// Writes message `i` of `len` bytes (at least 8) into `out` (cleared first).
pub fn fill(i: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&i.to_be_bytes()[..len.min(8)]);
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push(x as u8);
    }
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

/// Checks an ordered stream of messages made by [`fill`] with a fixed length.
#[derive(Debug, Clone, Default)]
pub struct Sink {
    next: u64,
    len: usize,
    scratch: Vec<u8>,
    stats: SinkStats,
}

impl Sink {
    /// A sink expecting messages `0, 1, 2, ...` of `len` bytes.
    pub fn new(len: usize) -> Sink {
        Sink {
            len,
            ..Sink::default()
        }
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
        fill(i, self.len, &mut self.scratch);
        self.stats.bytes += data.len() as u64;
        if data != &self.scratch[..] {
            self.stats.corrupt += 1;
            return false;
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

    /// Index of the next expected message.
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
    fn patterns_differ_per_index() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        fill(5, 64, &mut a);
        fill(6, 64, &mut b);
        assert_ne!(a[8..], b[8..]);
        fill(5, 3, &mut a);
        assert_eq!(a, vec![0, 0, 0]);
    }
}
