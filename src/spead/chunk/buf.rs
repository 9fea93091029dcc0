//! A chunk's memory: [`ChunkBuf`] (a plain or page-aligned buffer) and
//! [`Chunk`] (data, `present` map, id).

/// A chunk's payload memory: an anonymous mapping advised to use transparent huge
/// pages (as numpy does for large arrays; 4 KiB pages cost a TLB miss every few
/// packets on multi-megabyte chunks), or a plain vector when mapping fails.
pub struct ChunkBuf {
    inner: BufInner,
    len: usize,
}

enum BufInner {
    Map(memmap2::MmapMut),
    Vec(Vec<u8>),
}

/// The transparent huge page size chunks are mapped for.
const HUGE_PAGE: usize = 2 << 20;

impl ChunkBuf {
    /// `len` zero bytes, huge-page backed when the system allows, with every page
    /// touched so the receive path takes no page faults.
    pub fn new(len: usize) -> ChunkBuf {
        // Below one 2 MiB huge page a mapping gains nothing and costs an mmap,
        // a madvise and a munmap per chunk (small test and fuzzing streams).
        if len < HUGE_PAGE {
            return ChunkBuf::from(vec![0; len]);
        }
        let inner = match memmap2::MmapMut::map_anon(len) {
            Ok(mut m) => {
                #[cfg(target_os = "linux")]
                let _ = m.advise(memmap2::Advice::HugePage);
                for i in (0..m.len()).step_by(4096) {
                    m[i] = 0;
                }
                BufInner::Map(m)
            }
            Err(_) => BufInner::Vec(vec![0; len]),
        };
        ChunkBuf { inner, len }
    }
}

impl core::ops::Deref for ChunkBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.inner {
            BufInner::Map(m) => &m[..self.len],
            BufInner::Vec(v) => &v[..self.len],
        }
    }
}

impl core::ops::DerefMut for ChunkBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.inner {
            BufInner::Map(m) => &mut m[..self.len],
            BufInner::Vec(v) => &mut v[..self.len],
        }
    }
}

impl From<Vec<u8>> for ChunkBuf {
    fn from(v: Vec<u8>) -> ChunkBuf {
        ChunkBuf {
            len: v.len(),
            inner: BufInner::Vec(v),
        }
    }
}

impl Clone for ChunkBuf {
    fn clone(&self) -> ChunkBuf {
        ChunkBuf::from(self[..].to_vec())
    }
}

impl PartialEq for ChunkBuf {
    fn eq(&self, other: &ChunkBuf) -> bool {
        self[..] == other[..]
    }
}

impl Eq for ChunkBuf {}

impl core::fmt::Debug for ChunkBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ChunkBuf({} bytes)", self.len())
    }
}

/// A chunk: data, a `present` map and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Chunk id (-1 while free).
    pub chunk_id: i64,
    /// Payload bytes.
    pub data: ChunkBuf,
    /// One byte per heap (or packet): 1 if it arrived whole.
    pub present: Vec<u8>,
}

impl Chunk {
    /// A zeroed chunk (data in a [`ChunkBuf`]).
    pub fn new(chunk_bytes: usize, present_len: usize) -> Chunk {
        Chunk {
            chunk_id: -1,
            data: ChunkBuf::new(chunk_bytes),
            present: vec![0; present_len],
        }
    }

    /// Entries of `present` that are set.
    pub fn present_count(&self) -> usize {
        self.present.iter().filter(|&&p| p != 0).count()
    }
}
