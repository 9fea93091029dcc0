//! Bulk payload copies with non-temporal (streaming) stores.
//!
//! A receiver that places payloads into large buffers (SPEAD chunks) writes each
//! byte once and does not read it back; when the destination does not stay in the
//! cache, ordinary stores first read every destination line from memory (a
//! read-for-ownership) and later write it back, three memory transfers per line.
//! Non-temporal stores write whole lines through write-combining buffers: two
//! transfers. When the destination does fit in the last-level cache and is reused
//! (a small ring of chunks), ordinary stores are cheaper, which is why callers
//! choose ([`CopyMode`]).
//!
//! [`stream_copy`] is safe to call on any slices: it checks the CPU at run time
//! (256-bit AVX stores on x86-64, `copy_from_slice` elsewhere or without AVX),
//! copies an unaligned head and tail with ordinary stores and the 32-byte-aligned
//! body with streaming ones. Streaming stores are weakly ordered: call
//! [`store_fence`] before handing the destination to another thread.

/// How a bulk copy writes its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CopyMode {
    /// `copy_from_slice` (glibc's `memcpy`): best when the destination stays in
    /// the cache until it is read.
    #[default]
    Plain,
    /// Non-temporal stores for copies of at least [`STREAM_MIN`] bytes
    /// ([`stream_copy`]): best when the destination is far larger than the cache.
    Stream,
}

/// Copies shorter than this use ordinary stores even in [`CopyMode::Stream`]:
/// a streaming store of a partial line costs more than it saves.
pub const STREAM_MIN: usize = 256;

/// Copies `src` into `dst` as `mode` says.
///
/// # Panics
///
/// If the lengths differ (as `copy_from_slice`).
#[inline]
pub fn copy(mode: CopyMode, dst: &mut [u8], src: &[u8]) {
    match mode {
        CopyMode::Plain => dst.copy_from_slice(src),
        CopyMode::Stream => stream_copy(dst, src),
    }
}

/// Copies `src` into `dst` with non-temporal stores where the CPU has them and the
/// copy is at least [`STREAM_MIN`] bytes; `copy_from_slice` otherwise. The bytes
/// copied are the same either way; call [`store_fence`] before another thread
/// reads `dst`.
///
/// # Panics
///
/// If the lengths differ (as `copy_from_slice`).
#[inline]
pub fn stream_copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "stream_copy: destination and source lengths differ"
    );
    #[cfg(target_arch = "x86_64")]
    {
        if src.len() >= STREAM_MIN && std::arch::is_x86_feature_detected!("avx") {
            let head = dst.as_ptr().align_offset(32).min(dst.len());
            let body = (dst.len() - head) & !31;
            let (d_head, d_rest) = dst.split_at_mut(head);
            let (s_head, s_rest) = src.split_at(head);
            d_head.copy_from_slice(s_head);
            let (d_body, d_tail) = d_rest.split_at_mut(body);
            let (s_body, s_tail) = s_rest.split_at(body);
            // SAFETY: AVX was detected on this CPU just above; `d_body` and `s_body`
            // are distinct live slices (one is `&mut`) of the same length `body`, a
            // multiple of 32, and `d_body` starts 32-byte aligned (`head` is its
            // alignment offset, or the whole slice when that is 0-length).
            unsafe { x86::stream_body(d_body, s_body) };
            d_tail.copy_from_slice(s_tail);
            return;
        }
    }
    dst.copy_from_slice(src);
}

/// Orders every earlier streaming store before later stores (x86 `sfence`): call
/// it once before publishing memory written by [`stream_copy`] to another thread.
/// A no-op where streaming stores are not used.
#[inline]
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `sfence` is part of SSE, which every x86-64 CPU has; it only
        // orders stores and touches no memory or register.
        unsafe { core::arch::x86_64::_mm_sfence() };
    }
}

/// Asks the CPU to bring the cache lines of `data` (up to [`PREFETCH_MAX`]
/// bytes of it) into the caches now, to be read soon: a receiver calls it on
/// the packets a few places ahead in its burst while it places the current
/// one, so their misses overlap that work (DPDK's `rte_prefetch0`). A hint
/// only: it reads nothing into the program, cannot fault, and is a no-op
/// where not supported.
#[inline]
pub fn prefetch(data: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let n = data.len().min(PREFETCH_MAX);
        let p = data.as_ptr();
        let mut i = 0;
        while i < n {
            // SAFETY: `prefetcht0` is part of SSE, which every x86-64 CPU
            // has; it is a hint that never faults and changes no memory or
            // register, and `p + i` stays inside `data` (`i < n <= data.len()`).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(i).cast::<i8>()) };
            i += 64;
        }
        if n > 0 && (p as usize + n - 1) / 64 != (p as usize + i - 64) / 64 {
            // The last line, when `data` does not start on a line.
            // SAFETY: as above; `n - 1 < data.len()`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(n - 1).cast::<i8>()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Asks the CPU to bring the cache line holding `x` into the caches, to be
/// read or written soon (a word a compare-and-swap will take: the locked
/// instruction is a fence, so its line's miss would stall the CPU). A hint
/// only, as [`prefetch`].
#[inline]
pub fn prefetch_of<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: as in `prefetch`: a hint on the address of a live value.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// The most bytes [`prefetch`] asks for (a 9000-byte jumbo frame's lines).
pub const PREFETCH_MAX: usize = 9216;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::{__m256i, _mm256_loadu_si256, _mm256_stream_si256};

    /// Streams `src` into `dst` 128 bytes (two cache lines) per step, loads first.
    ///
    /// # Safety
    ///
    /// The CPU has AVX; `dst.len() == src.len()`, a multiple of 32; `dst` is
    /// 32-byte aligned.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn stream_body(dst: &mut [u8], src: &[u8]) {
        debug_assert_eq!(dst.len(), src.len());
        debug_assert_eq!(dst.len() % 32, 0);
        debug_assert_eq!(dst.as_ptr() as usize % 32, 0);
        let n = dst.len();
        let d = dst.as_mut_ptr();
        let s = src.as_ptr();
        let mut i = 0;
        while i + 128 <= n {
            // SAFETY: `i + 128 <= n`, so every load reads inside `src` and every
            // store writes inside `dst` (same length); `d + i` is 32-byte aligned
            // because `d` is and `i` is a multiple of 32, as `_mm256_stream_si256`
            // requires; unaligned loads have no alignment requirement.
            unsafe {
                let a = _mm256_loadu_si256(s.add(i).cast::<__m256i>());
                let b = _mm256_loadu_si256(s.add(i + 32).cast::<__m256i>());
                let c = _mm256_loadu_si256(s.add(i + 64).cast::<__m256i>());
                let e = _mm256_loadu_si256(s.add(i + 96).cast::<__m256i>());
                _mm256_stream_si256(d.add(i).cast::<__m256i>(), a);
                _mm256_stream_si256(d.add(i + 32).cast::<__m256i>(), b);
                _mm256_stream_si256(d.add(i + 64).cast::<__m256i>(), c);
                _mm256_stream_si256(d.add(i + 96).cast::<__m256i>(), e);
            }
            i += 128;
        }
        while i < n {
            // SAFETY: `i + 32 <= n` (n and i are multiples of 32), alignment as above.
            unsafe {
                let a = _mm256_loadu_si256(s.add(i).cast::<__m256i>());
                _mm256_stream_si256(d.add(i).cast::<__m256i>(), a);
            }
            i += 32;
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn copies_every_length_around_the_threshold_and_alignments() {
        let src = pattern(4096 + 64, 7);
        for len in [0, 1, 31, 32, 33, 255, 256, 257, 1000, 1024, 1056, 4096] {
            for d_off in [0, 1, 8, 31, 32] {
                for s_off in [0, 3, 32] {
                    let mut dst = vec![0u8; len + 64];
                    stream_copy(&mut dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    store_fence();
                    assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    assert!(dst[..d_off].iter().all(|&b| b == 0), "bytes before dst");
                    assert!(
                        dst[d_off + len..].iter().all(|&b| b == 0),
                        "bytes after dst"
                    );
                }
            }
        }
    }

    #[test]
    fn both_modes_copy() {
        let src = pattern(2048, 1);
        for mode in [CopyMode::Plain, CopyMode::Stream] {
            let mut dst = vec![0u8; 2048];
            copy(mode, &mut dst, &src);
            assert_eq!(dst, src);
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn length_mismatch_panics_like_copy_from_slice() {
        let mut dst = [0u8; 300];
        stream_copy(&mut dst, &[0u8; 299]);
    }

    proptest! {
        #[test]
        fn same_bytes_as_copy_from_slice(
            len in 0usize..3000,
            d_off in 0usize..64,
            s_off in 0usize..64,
            seed in any::<u8>(),
        ) {
            let src = pattern(len + 64, seed);
            let mut want = vec![0xa5u8; len + 128];
            let mut got = want.clone();
            want[d_off..d_off + len].copy_from_slice(&src[s_off..s_off + len]);
            stream_copy(&mut got[d_off..d_off + len], &src[s_off..s_off + len]);
            store_fence();
            prop_assert_eq!(got, want);
        }
    }
}
