//! The slot codec's word compare ([`slot::changed_map`]) in x86-64 vector
//! instructions: the first thing a packed write does, before any store to
//! the slot, so its time is on the round trip. AVX2 (detected once per
//! transport, [`Codec::detect`]) compares four words per instruction and
//! SSE2 (the x86-64 baseline) two; both give the scalar code's map for
//! every length (property-tested below), so the wire format is the same
//! whichever a side uses. Other architectures use the scalar code.
//!
//! Not AVX-512: it was measured, but its
//! intrinsics need Rust 1.89 (the MSRV is 1.85) and valgrind 3.19 cannot
//! execute it, which blinds `scripts/rpc-instructions`.

use super::slot::{self, Reference};

/// Which word compare a transport uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Codec {
    /// The portable code ([`slot::changed_map`]); on x86-64 only the tests
    /// use it (as the reference the vector forms must match).
    #[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
    Scalar,
    /// 16-byte compares (x86-64 baseline).
    #[cfg(target_arch = "x86_64")]
    Sse2,
    /// 32-byte compares, on a CPU that has AVX2.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Codec {
    /// The fastest compare this CPU runs (`is_x86_feature_detected!` caches
    /// its answer; the transport asks once, at setup).
    pub(super) fn detect() -> Codec {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return Codec::Avx2;
            }
            Codec::Sse2
        }
        #[cfg(not(target_arch = "x86_64"))]
        Codec::Scalar
    }

    /// [`slot::changed_map`]: bit `i` set when word `i` of `data` (the last
    /// one zero-padded) differs from word `i` of `reference`. For `data` of
    /// at most [`slot::PACK_MAX`] bytes (as [`slot::plan_by`] passes); a
    /// longer one gets some map, never an access out of bounds. The tests';
    /// the writer uses [`plan`](Self::plan).
    #[cfg(test)]
    #[inline(always)]
    pub(super) fn changed_map(self, data: &[u8], reference: &Reference) -> u64 {
        match self {
            Codec::Scalar => slot::changed_map(data, reference),
            #[cfg(target_arch = "x86_64")]
            Codec::Sse2 => x86::changed_map_sse2(data, reference),
            // SAFETY: `Avx2` is only chosen (`detect`) or tested on a CPU
            // that has AVX2.
            #[cfg(target_arch = "x86_64")]
            Codec::Avx2 => unsafe { x86::changed_map_avx2(data, reference) },
        }
    }
}

impl Codec {
    /// [`slot::plan_by`] with this compare: the word map of a write of
    /// `data` (immediate `imm`) against `reference`, or `None` when it does
    /// not pack. The compare is called straight from the match (a closure
    /// that matched inside was compiled as a function of its own, one more
    /// call per write).
    #[inline(always)]
    pub(super) fn plan(self, data: &[u8], imm: u32, reference: &Reference) -> Option<u64> {
        match self {
            Codec::Scalar => slot::plan_by(data, imm, reference, slot::changed_map),
            #[cfg(target_arch = "x86_64")]
            Codec::Sse2 => slot::plan_by(data, imm, reference, x86::changed_map_sse2),
            // SAFETY: `Avx2` is only chosen (`detect`) or tested on a CPU
            // that has AVX2.
            #[cfg(target_arch = "x86_64")]
            Codec::Avx2 => slot::plan_by(data, imm, reference, |d, r| unsafe {
                x86::changed_map_avx2(d, r)
            }),
        }
    }
}

/// Whether the CPU has `prefetchw` (CPUID 8000_0001h ECX bit 8, "3DNow!
/// prefetch": every AMD x86-64 CPU, Intel from Broadwell on).
pub(super) fn has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86-64 CPU; leaf 8000_0000h gives the
        // highest extended leaf, asked before leaf 8000_0001h. (`__cpuid` is
        // an unsafe function in Rust 1.85, the MSRV, and safe in later ones.)
        #[allow(unused_unsafe)]
        let ecx = unsafe {
            if __cpuid(0x8000_0000).eax < 0x8000_0001 {
                return false;
            }
            __cpuid(0x8000_0001).ecx
        };
        ecx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::slot::{Reference, PACK_MAX};
    use std::arch::x86_64::*;

    /// The last, partial word of `data` (`data.len() % 8 != 0`), zero-padded:
    /// the 8 bytes ending at the end shifted down when the write is that
    /// long (no byte loop, no `memcpy` call), else byte by byte.
    #[inline(always)]
    fn last_partial(data: &[u8]) -> u64 {
        let n = data.len();
        let rem = n % 8;
        match data.get(n.wrapping_sub(8)..n) {
            Some(c) => u64::from_le_bytes(c.try_into().unwrap_or([0; 8])) >> (64 - 8 * rem as u32),
            None => data
                .iter()
                .rev()
                .fold(0u64, |w, &b| (w << 8) | u64::from(b)),
        }
    }

    /// Little-endian word `i` of the reference.
    #[inline(always)]
    fn ref_word(r: &Reference, i: usize) -> u64 {
        let i = i & (PACK_MAX / 8 - 1);
        u64::from_le_bytes(r[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]))
    }

    /// The words after the whole vector pieces (from byte `k`, a multiple
    /// of 8): whole words, then the zero-padded last one. Returns their
    /// "changed" bits at their word positions.
    #[inline(always)]
    fn tail_map(data: &[u8], reference: &Reference, mut k: usize) -> u64 {
        let mut map = 0;
        while let Some(c) = data.get(k..k + 8) {
            let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            map |= u64::from(w != ref_word(reference, k / 8)) << (k / 8);
            k += 8;
        }
        if k < data.len() {
            map |= u64::from(last_partial(data) != ref_word(reference, k / 8)) << (k / 8);
        }
        map
    }

    /// [`slot::changed_map`](super::slot::changed_map) in SSE2: each 16-byte
    /// piece compared as four 32-bit lanes (a word is unchanged when both its
    /// lanes are), the lane masks gathered in one 32-bit value and folded to
    /// one bit per word at the end.
    #[inline(never)]
    pub(super) fn changed_map_sse2(data: &[u8], reference: &Reference) -> u64 {
        let data = &data[..data.len().min(PACK_MAX)];
        let n = data.len();
        let (d, r) = (data.as_ptr(), reference.as_ptr());
        // Bit 2i (2i + 1): the low (high) half of word i differs.
        let mut lanes = 0u32;
        let mut k = 0;
        while k + 16 <= n {
            // SAFETY: `k + 16 <= n`, and `n` is at most `data.len()` and
            // `PACK_MAX` (the reference's length), so both 16-byte loads
            // (unaligned) lie inside their slices. SSE2 is part of the
            // x86-64 baseline.
            let eq = unsafe {
                let x = _mm_loadu_si128(d.add(k).cast());
                let y = _mm_loadu_si128(r.add(k).cast());
                _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(x, y)))
            };
            lanes |= ((eq as u32) ^ 0xf) << (k / 4);
            k += 16;
        }
        // One bit per word: a word changed when either lane did, the odd
        // bits then squeezed out.
        let mut x = (lanes | lanes >> 1) & 0x5555_5555;
        x = (x | x >> 1) & 0x3333_3333;
        x = (x | x >> 2) & 0x0f0f_0f0f;
        x = (x | x >> 4) & 0x00ff_00ff;
        x = (x | x >> 8) & 0x0000_ffff;
        u64::from(x) | tail_map(data, reference, k)
    }

    /// [`slot::changed_map`](super::slot::changed_map) in AVX2: 32 bytes
    /// (four words) per compare, the rest as in [`changed_map_sse2`].
    ///
    /// # Safety
    ///
    /// The CPU must have AVX2.
    #[inline(never)]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn changed_map_avx2(data: &[u8], reference: &Reference) -> u64 {
        let data = &data[..data.len().min(PACK_MAX)];
        let n = data.len();
        let (d, r) = (data.as_ptr(), reference.as_ptr());
        let mut map = 0u64;
        let mut k = 0;
        while k + 32 <= n {
            // SAFETY: `k + 32 <= n <= min(data.len(), PACK_MAX)`, so both
            // 32-byte loads (unaligned) lie inside their slices; the caller
            // vouches for AVX2.
            let eq = unsafe {
                let x = _mm256_loadu_si256(d.add(k).cast());
                let y = _mm256_loadu_si256(r.add(k).cast());
                _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x, y)))
            };
            map |= ((eq as u64) ^ 0xf) << (k / 8);
            k += 32;
        }
        if k == n {
            // A whole number of 32-byte pieces (the RPC endpoint's 96-byte
            // batch): no tail to look at.
            return map;
        }
        if k + 16 <= n {
            // SAFETY: as above, 16 bytes; SSE4.1's 64-bit compare comes with
            // AVX2.
            let eq = unsafe {
                let x = _mm_loadu_si128(d.add(k).cast());
                let y = _mm_loadu_si128(r.add(k).cast());
                _mm_movemask_pd(_mm_castsi128_pd(_mm_cmpeq_epi64(x, y)))
            };
            map |= ((eq as u64) ^ 0x3) << (k / 8);
            k += 16;
        }
        map | tail_map(data, reference, k)
    }
}

#[cfg(test)]
mod test {
    use super::super::slot::{self, PACK_MAX};
    use super::*;
    use proptest::prelude::*;

    /// Every compare this CPU can run.
    fn codecs() -> Vec<Codec> {
        let mut v = vec![Codec::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            v.push(Codec::Sse2);
            if std::arch::is_x86_feature_detected!("avx2") {
                v.push(Codec::Avx2);
            } else {
                eprintln!("simd tests: no AVX2 on this CPU, its compare not tested");
            }
        }
        v
    }

    #[test]
    fn detect_picks_a_compare_this_cpu_runs() {
        assert!(codecs().contains(&Codec::detect()));
    }

    #[test]
    fn every_length_and_word() {
        // Each length 0..=128, each single changed byte.
        for codec in codecs() {
            for n in 0..=PACK_MAX {
                let data: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x5a).collect();
                let mut r = [0u8; PACK_MAX];
                for (i, b) in r.iter_mut().enumerate().take(n) {
                    *b = i as u8 ^ 0x5a;
                }
                assert_eq!(codec.changed_map(&data, &r), 0, "{codec:?} len {n}");
                for i in 0..n {
                    let mut d = data.clone();
                    d[i] ^= 0x80;
                    let want = slot::changed_map(&d, &r);
                    assert_eq!(want, 1 << (i / 8));
                    assert_eq!(
                        codec.changed_map(&d, &r),
                        want,
                        "{codec:?} len {n} byte {i}"
                    );
                }
                // The reference past the last byte of a partial word counts
                // (the write is zero-padded).
                if n % 8 != 0 && n < PACK_MAX {
                    r[n] = 1;
                    assert_eq!(
                        codec.changed_map(&data, &r),
                        1 << (n / 8),
                        "{codec:?} len {n} pad"
                    );
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// On random data and references (words often equal, as in the
        /// endpoint's batches), any length: every compare gives the scalar
        /// map, packing with it puts the same words, tag and reference, and
        /// unpacking those words rebuilds the write and the reference.
        #[test]
        fn vector_map_is_scalar_map(
            data in proptest::collection::vec(any::<u8>(), 0..=PACK_MAX),
            noise in proptest::collection::vec(any::<u8>(), PACK_MAX..=PACK_MAX),
            keep in any::<u64>(),
            seq in any::<u64>(),
        ) {
            // The reference: the data with some words changed.
            let mut r = [0u8; PACK_MAX];
            for (i, b) in r.iter_mut().enumerate() {
                let d = data.get(i).copied().unwrap_or(0);
                *b = if keep >> (i / 8 % 64) & 1 == 1 { d } else { d ^ noise[i] };
            }
            let want = slot::changed_map(&data, &r);
            for codec in codecs() {
                prop_assert_eq!(codec.changed_map(&data, &r), want, "{:?}", codec);
                let (mut a, mut b) = (r, r);
                let (mut wa, mut wb) = (Vec::new(), Vec::new());
                let pa = slot::pack(seq, &data, 5, &mut a, |j, w| wa.push((j, w)));
                let pb = slot::plan_by(&data, 5, &b, |d, r| codec.changed_map(d, r))
                    .map(|m| slot::emit(seq, &data, 5, m, &mut b, |j, w| wb.push((j, w))));
                prop_assert_eq!(pa, pb);
                prop_assert_eq!(&wa, &wb);
                prop_assert_eq!(a, b);
                // The reader, from the same reference, rebuilds the write.
                if let Some((_, count)) = pb {
                    let map = slot::plan_by(&data, 5, &r, |d, r| codec.changed_map(d, r));
                    prop_assert_eq!(count, wb.len());
                    let (mut rd, mut out) = (r, [0u8; PACK_MAX]);
                    let map = map.unwrap_or(0) as u16;
                    slot::unpack(map, data.len(), |j| wb[j].1, &mut rd, &mut out);
                    prop_assert_eq!(&out[..data.len()], &data[..]);
                    prop_assert_eq!(rd, b);
                }
            }
        }
    }
}
