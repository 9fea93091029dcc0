//! Wraparound-correct sequence number arithmetic (RFC 1982 serial numbers).
//!
//! Segment sequence numbers and fragment ids are 32-bit and wrap. `a` is
//! "before" `b` when the signed distance `b - a` (mod 2^32) is positive, which
//! is correct as long as live numbers are within 2^31 of each other; the send
//! window (at most 2^16 segments) keeps them far closer than that. 32 bits was
//! chosen over usnic's 16 so that a window of 4096 is a tiny fraction of the
//! space and a stale forged number is unlikely to land in the window.

/// `b - a` as a signed distance: positive when `b` is after `a`.
#[inline]
pub const fn diff(b: u32, a: u32) -> i32 {
    b.wrapping_sub(a) as i32
}

/// `a` is strictly before `b`.
#[inline]
pub const fn lt(a: u32, b: u32) -> bool {
    diff(b, a) > 0
}

/// `a` is before or equal to `b`.
#[inline]
pub const fn le(a: u32, b: u32) -> bool {
    diff(b, a) >= 0
}

/// `a` is strictly after `b`.
#[inline]
pub const fn gt(a: u32, b: u32) -> bool {
    lt(b, a)
}

/// The later of two sequence numbers.
#[inline]
pub const fn max(a: u32, b: u32) -> u32 {
    if lt(a, b) {
        b
    } else {
        a
    }
}

/// `x` lies in the half-open window `[start, start + len)`, modulo 2^32.
#[inline]
pub const fn in_window(x: u32, start: u32, len: u32) -> bool {
    x.wrapping_sub(start) < len
}

/// Widens a sequence number carried in its low `bits` bits to the 32-bit
/// value closest to `reference` (the way QUIC decodes packet numbers). With
/// `bits >= 32` it returns `raw` unchanged. Correct while the true value is
/// within half the `bits`-bit space of `reference`.
#[inline]
pub const fn expand(raw: u32, reference: u32, bits: u32) -> u32 {
    if bits >= 32 {
        return raw;
    }
    let span = 1u32 << bits;
    let mask = span - 1;
    let candidate = (reference & !mask) | (raw & mask);
    let d = diff(candidate, reference);
    let half = (span / 2) as i32;
    if d > half {
        candidate.wrapping_sub(span)
    } else if d < -half {
        candidate.wrapping_add(span)
    } else {
        candidate
    }
}

/// The low `bits` bits of `s` (all of it with `bits >= 32`).
#[inline]
pub const fn truncate(s: u32, bits: u32) -> u32 {
    if bits >= 32 {
        s
    } else {
        s & ((1 << bits) - 1)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn ordinary_order() {
        assert!(lt(1, 2));
        assert!(!lt(2, 2));
        assert!(le(2, 2));
        assert!(gt(3, 2));
        assert_eq!(diff(10, 3), 7);
        assert_eq!(diff(3, 10), -7);
        assert_eq!(max(3, 10), 10);
    }

    #[test]
    fn across_the_wrap() {
        let a = u32::MAX - 2;
        let b = a.wrapping_add(5); // 2
        assert_eq!(b, 2);
        assert!(lt(a, b));
        assert!(gt(b, a));
        assert!(!lt(b, a));
        assert_eq!(diff(b, a), 5);
        assert_eq!(diff(a, b), -5);
        assert_eq!(max(a, b), b);
        assert_eq!(max(b, a), b);
        assert!(in_window(1, u32::MAX - 1, 4));
        assert!(in_window(u32::MAX, u32::MAX - 1, 4));
        assert!(!in_window(2, u32::MAX - 1, 4));
        assert!(!in_window(u32::MAX - 2, u32::MAX - 1, 4));
    }

    #[test]
    fn half_space_boundary() {
        // Exactly 2^31 apart is ambiguous; just before it is still ordered.
        let a = 7u32;
        assert!(lt(a, a.wrapping_add((1 << 31) - 1)));
        assert!(!lt(a, a.wrapping_add(1 << 31)));
    }

    #[test]
    fn sixteen_bit_expansion_near_the_wrap() {
        // Reference just below a 16-bit wrap, value just above it.
        assert_eq!(expand(3, 0x0001_fffe, 16), 0x0002_0003);
        // Reference just above, value just below.
        assert_eq!(expand(0xfffe, 0x0002_0003, 16), 0x0001_fffe);
        // Across the 32-bit wrap too.
        assert_eq!(expand(2, u32::MAX - 1, 16), 2);
        assert_eq!(expand(0xffff, 1, 16), u32::MAX);
        assert_eq!(expand(0xdead_beef, 5, 32), 0xdead_beef);
        assert_eq!(truncate(0x1234_5678, 16), 0x5678);
        assert_eq!(truncate(0x1234_5678, 32), 0x1234_5678);
    }

    proptest::proptest! {
        #[test]
        fn expand_inverts_truncate(reference: u32, d in -32767i32..32767) {
            let s = reference.wrapping_add(d as u32);
            proptest::prop_assert_eq!(expand(truncate(s, 16), reference, 16), s);
        }

        #[test]
        fn order_is_translation_invariant(base: u32, d in 1u32..(1 << 30)) {
            let b = base.wrapping_add(d);
            proptest::prop_assert!(lt(base, b));
            proptest::prop_assert!(!lt(b, base));
            proptest::prop_assert_eq!(diff(b, base), d as i32);
            proptest::prop_assert!(in_window(b, base, d + 1));
            proptest::prop_assert!(!in_window(b, base, d));
        }
    }
}
