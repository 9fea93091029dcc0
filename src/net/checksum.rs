//! The internet checksum (RFC 1071), full and incremental (RFC 1624): the
//! one implementation the IPv4 header, UDP and ICMPv6 checksums use.
//!
//! A checksum is the ones'-complement of the ones'-complement sum of a
//! message's big-endian 16-bit words. Sums are kept in a `u32` accumulator
//! ([`add_bytes`], [`add32`], [`add128`], [`pseudo_header_v4`],
//! [`pseudo_header_v6`]) and folded to 16 bits once, at the end ([`fold`]);
//! an accumulator stays exact as long as it does not overflow, which
//! [`add_bytes`] guarantees by folding what it returns.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Adds the big-endian 16-bit words of `bytes` to `acc` (an odd last byte is
/// the high half of a word). The result is folded below 0x20000, so it can
/// take many more additions without overflow.
#[inline]
pub fn add_bytes(acc: u32, bytes: &[u8]) -> u32 {
    let mut sum = u64::from(acc);
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u64::from(*last) << 8;
    }
    // Two rounds take any u64 below 2^33, the sum of at most 2^32 bytes,
    // below 0x20000.
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum as u32
}

/// Folds a 32-bit ones'-complement sum to 16 bits. Two rounds always
/// suffice (the first leaves at most 0x1fffe, the second at most 0xffff), and
/// without a loop there is no branch for a packet's carries to mispredict.
#[inline(always)]
pub fn fold(acc: u32) -> u16 {
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// Adds a 32-bit value's two 16-bit words to `acc`.
#[inline(always)]
pub fn add32(acc: u32, v: u32) -> u32 {
    acc + (v >> 16) + (v & 0xffff)
}

/// Adds a 128-bit value's eight 16-bit words to `acc`.
///
/// The ones'-complement sum of the words of `a + i` equals that of `a`'s
/// words plus `i`'s (mod 0xffff): a carry out of one word subtracts 0x10000
/// (= 1 mod 0xffff) there and adds 1 to the next word, which has the same
/// weight in the sum. So a sender can sum a range's first address once and
/// add only per-packet offsets (as long as `a + i` does not wrap past 2^128).
#[inline]
pub fn add128(acc: u32, v: u128) -> u32 {
    let mut acc = acc;
    for w in [(v >> 64) as u64, v as u64] {
        acc += ((w >> 48) & 0xffff) as u32
            + ((w >> 32) & 0xffff) as u32
            + ((w >> 16) & 0xffff) as u32
            + (w & 0xffff) as u32;
    }
    acc
}

/// The checksum of `bytes` (with the checksum field zero): 0 over a message
/// that carries a correct checksum.
#[inline]
pub fn checksum(bytes: &[u8]) -> u16 {
    !fold(add_bytes(0, bytes))
}

/// Finishes a sum into a checksum: `!fold(acc)`.
#[inline(always)]
pub fn finish(acc: u32) -> u16 {
    !fold(acc)
}

/// RFC 1624 eqn. 3: the checksum `old_sum` after one 16-bit word of the
/// message changed from `old` to `new`, without summing the message again:
/// `HC' = ~(~HC + ~m + m')`. Equal to a full recomputation for any message
/// whose words are not all zero.
#[inline(always)]
pub fn update(old_sum: u16, old: u16, new: u16) -> u16 {
    !fold(u32::from(!old_sum) + u32::from(!old) + u32::from(new))
}

/// [`update`] for a 32-bit field (an IPv4 address, two adjacent words).
#[inline(always)]
pub fn update32(old_sum: u16, old: u32, new: u32) -> u16 {
    let acc = u32::from(!old_sum) + add32(0, !old) + add32(0, new);
    !fold(acc)
}

/// The sum of the IPv4 pseudo-header (RFC 768): addresses, protocol and the
/// upper-layer length.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u32 {
    add32(add32(0, src.to_bits()), dst.to_bits()) + u32::from(protocol) + u32::from(len)
}

/// The sum of the IPv6 pseudo-header (RFC 8200 section 8.1): addresses,
/// upper-layer length (32 bits) and next header.
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    add32(add128(add128(0, src.to_bits()), dst.to_bits()), len) + u32::from(next_header)
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4 header (RFC 1071's worked example family): a well-known
    /// header whose checksum is 0xb861.
    const HEADER: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn a_known_header_sums_to_its_checksum_and_then_to_zero() {
        assert_eq!(checksum(&HEADER), 0xb861);
        let mut h = HEADER;
        h[10..12].copy_from_slice(&0xb861u16.to_be_bytes());
        assert_eq!(checksum(&h), 0);
    }

    #[test]
    fn an_odd_last_byte_is_a_high_half() {
        assert_eq!(add_bytes(0, &[0x12]), 0x1200);
        assert_eq!(add_bytes(0, &[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(checksum(&[]), 0xffff);
    }

    #[test]
    fn incremental_update_matches_a_known_length_change() {
        let mut h = HEADER;
        let c = checksum(&h);
        h[2..4].copy_from_slice(&0x0100u16.to_be_bytes());
        assert_eq!(update(c, 0x0073, 0x0100), checksum(&h));
    }

    #[test]
    fn pseudo_headers_sum_their_fields() {
        let s = pseudo_header_v4(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            17,
            26,
        );
        assert_eq!(s, 0x0a00 + 1 + 0x0a00 + 2 + 17 + 26);
        let a: Ipv6Addr = "fd00::1".parse().unwrap();
        let b: Ipv6Addr = "fd00::2".parse().unwrap();
        assert_eq!(
            fold(pseudo_header_v6(a, b, 17, 26)),
            fold(0xfd00 * 2 + 1 + 2 + 17 + 26)
        );
    }

    proptest! {
        #[test]
        fn fold_is_the_sum_mod_0xffff(acc in proptest::num::u32::ANY) {
            let f = fold(acc);
            prop_assert_eq!(u32::from(f) % 0xffff, acc % 0xffff);
            // 0 and 0xffff are the same ones'-complement value; 0 only for 0.
            prop_assert_eq!(f == 0, acc == 0);
        }

        #[test]
        fn address_offsets_add_to_the_checksum_sum(a in proptest::num::u128::ANY, i in proptest::num::u32::ANY) {
            prop_assume!(a.checked_add(u128::from(i)).is_some());
            let whole = fold(add128(0, a + u128::from(i)));
            let split = fold(add32(u32::from(fold(add128(0, a))), i));
            prop_assert_eq!(whole % 0xffff, split % 0xffff);
        }

        #[test]
        fn incremental_equals_full(mut h in proptest::array::uniform20(any::<u8>()), at in 0usize..10, new in any::<u16>(), new32 in any::<u32>()) {
            h[0] = 0x45; // a header's words are never all zero
            h[10] = 0;
            h[11] = 0;
            let c = checksum(&h);
            let w = 2 * at;
            prop_assume!(w != 10);
            let old = u16::from_be_bytes([h[w], h[w + 1]]);
            let mut g = h;
            g[w..w + 2].copy_from_slice(&new.to_be_bytes());
            // RFC 1624's one exception: a message of all-zero words.
            prop_assume!(g.iter().any(|&b| b != 0));
            prop_assert_eq!(update(c, old, new), checksum(&g));
            let old32 = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            let mut g = h;
            g[12..16].copy_from_slice(&new32.to_be_bytes());
            prop_assert_eq!(update32(c, old32, new32), checksum(&g));
        }

        #[test]
        fn add_bytes_is_associative_over_even_splits(bytes in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..150) {
            let cut = (2 * cut).min(bytes.len() & !1);
            let whole = fold(add_bytes(0, &bytes));
            let split = fold(add_bytes(add_bytes(0, &bytes[..cut]), &bytes[cut..]));
            prop_assert_eq!(whole % 0xffff, split % 0xffff);
        }
    }
}
