//! Copies into memory that will not be read again soon (chunks handed to a
//! consumer on another core), with non-temporal stores: they skip the read
//! for ownership a normal store does, so a large copy moves a third less
//! memory traffic and does not evict the receiver's working set. spead2 does
//! the same (`memcpy_nontemporal`).

/// Copies `src` into `dst` (same length, or the shorter of the two), with
/// non-temporal stores where the CPU has them and the copy is large enough to
/// gain, and an ordinary copy otherwise. The stores are fenced before
/// returning, so handing `dst` to another thread afterwards is ordered as for
/// a normal copy.
pub fn copy_nontemporal(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    #[cfg(target_arch = "x86_64")]
    {
        // Below a few cache lines the fence costs more than the saved reads.
        if n >= 256 {
            x86::copy(dst, src);
            return;
        }
    }
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};

    pub(super) fn copy(dst: &mut [u8], src: &[u8]) {
        debug_assert_eq!(dst.len(), src.len());
        // Head up to 16-byte alignment of the destination, copied normally.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let body = (dst.len() - head) / 16 * 16;
        let (d, s) = (&mut dst[head..head + body], &src[head..head + body]);
        for (d, s) in d.chunks_exact_mut(16).zip(s.chunks_exact(16)) {
            // SAFETY: SSE2 is part of the x86_64 baseline. `s` is 16 readable
            // bytes (loadu has no alignment requirement); `d` is 16 writable
            // bytes at a 16-byte-aligned address (the head was split off at
            // dst's first 16-byte boundary and every chunk is 16 bytes), as
            // _mm_stream_si128 requires.
            unsafe {
                let v = _mm_loadu_si128(s.as_ptr().cast::<__m128i>());
                _mm_stream_si128(d.as_mut_ptr().cast::<__m128i>(), v);
            }
        }
        let tail = head + body;
        dst[tail..].copy_from_slice(&src[tail..]);
        // SAFETY: SSE2 baseline; sfence orders the streaming stores above
        // before any later store (such as publishing the chunk to a ring).
        unsafe { _mm_sfence() };
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment() {
        let src: Vec<u8> = (0..2048u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; 2100];
        for len in [0, 1, 15, 16, 17, 255, 256, 257, 1000, 1024, 2000] {
            for d_off in 0..17 {
                for s_off in [0, 1, 5, 16] {
                    dst.fill(0xee);
                    copy_nontemporal(&mut dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len]);
                    assert!(dst[..d_off].iter().all(|&b| b == 0xee), "before");
                    assert!(dst[d_off + len..].iter().all(|&b| b == 0xee), "after");
                }
            }
        }
    }

    #[test]
    fn unequal_lengths_copy_the_shorter() {
        let mut dst = [0u8; 300];
        copy_nontemporal(&mut dst, &[9u8; 280]);
        assert!(dst[..280].iter().all(|&b| b == 9) && dst[280..].iter().all(|&b| b == 0));
    }
}
