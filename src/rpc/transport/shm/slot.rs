//! The completion-slot codec of the shm transport: what the 64-bit tag of a
//! slot says, and how a small write travels inside the slot. Pure functions
//! over words (no shared memory), so the parser the reader applies to whatever
//! the peer left in a slot is property-tested and fuzzed on its own
//! (`fuzz/fuzz_targets/rpc_shm_slot.rs`).
//!
//! A slot is two cache lines of eight 64-bit words. Word 0 is the tag, the
//! last word the writer stores (Release) and the only one the reader polls
//! (Acquire):
//!
//! ```text
//! bits 63..48  sequence + 1 (low 16 bits): the write this slot holds
//! bits 47..46  kind: 0 = data in the receive ring, 1 = data in the slot
//!              (3: in the token line, written by side 1; never in a slot)
//! kind 0:  bits 31..0 the immediate; bits 45..32 zero
//! kind 1:  bits 45..30 word map (bit i: word i of the write is in the slot)
//!          bits 29..22 length in bytes (0..=128)
//!          bits 21..18 how many words are in the slot (the map's bit count,
//!                      carried so the reader needs no population count)
//!          bits 17..0  the immediate
//! ```
//!
//! A write carried in the slot ("packed") is cut into little-endian words
//! (the last one zero-padded) and compared with the previous packed write of
//! the same direction, which both sides remember (the *reference*): only the
//! words that differ travel, in order, in words 1-7 of line 0 and then words
//! 9-15 of line 1 (whose word 8 repeats the tag, stored before line 0's tag).
//! The reader rebuilds the write from those words and its reference. For the
//! RPC endpoint's 96-byte batch of one 32-byte message (flow metadata and a
//! message), the consumer position, the call id and the payload change and the
//! message count, length, credit grant and padding repeat, so seven words or
//! fewer travel and the write is one cache line, tag included. A packed write
//! always lands at the reader's next receive position (the sum of the
//! immediates so far), so the slot carries no offset.
//!
//! The transport's token line, which both directions share, carries a packed
//! write of at most 7 changed words as line 0 of a slot does, with the kind
//! field naming the writer: 1 for side 0 (as in a slot), 3 for side 1
//! ([`token_tag`], [`token_holds`], [`from_token`]).

#![forbid(unsafe_code)]

use crate::rpc::wire::FLOW_METADATA_SIZE;

/// Words in a slot (two cache lines).
pub const SLOT_WORDS: usize = 16;
/// Word of line 1 that repeats the tag when line 1 carries data.
pub const LINE1_TAG: usize = 8;
/// Changed words a slot carries: 7 in line 0, 7 in line 1.
pub const MAX_CHANGED: usize = 14;
/// Changed words that fit line 0 with its tag.
pub const LINE0_CHANGED: usize = 7;
/// Longest packed write in bytes (the word map has 16 bits).
pub const PACK_MAX: usize = 128;
/// Words of the longest packed write.
pub const PACK_WORDS: usize = PACK_MAX / 8;
/// Largest immediate a packed write's tag holds.
pub const PACK_IMM_MAX: u32 = (1 << 18) - 1;

const SEQ_SHIFT: u32 = 48;
const KIND_SHIFT: u32 = 46;
const KIND_MASK: u64 = 3;
const KIND_RING: u64 = 0;
const KIND_PACKED: u64 = 1;
const MAP_SHIFT: u32 = 30;
const LEN_SHIFT: u32 = 22;
const COUNT_SHIFT: u32 = 18;
const RING_RESERVED: u64 = ((1 << KIND_SHIFT) - 1) & !0xffff_ffff;

/// The bytes one direction's packed writes are compared with, word by word:
/// the previous packed writes' bytes (zero at start; a shorter write leaves the
/// bytes past its last word), kept identically by writer and reader.
pub type Reference = [u8; PACK_MAX];

/// The tag's sequence field for write number `seq` (counted from 0): never 0
/// for the first lap, so a zeroed slot is not mistaken for a write.
#[inline(always)]
pub fn seq_field(seq: u64) -> u64 {
    (seq.wrapping_add(1) & 0xffff) << SEQ_SHIFT
}

/// [`seq_field`] of the next write: `seq_field(s + 1)` is
/// `seq_field(s).wrapping_add(SEQ_ONE)` (the field is the top 16 bits).
pub const SEQ_ONE: u64 = 1 << SEQ_SHIFT;

/// The sequence field of `tag`: [`holds`] is `seq_bits(tag) == seq_field(seq)`.
#[inline(always)]
pub fn seq_bits(tag: u64) -> u64 {
    tag & (0xffff << SEQ_SHIFT)
}

/// Whether `tag` holds write number `seq`.
#[inline(always)]
pub fn holds(tag: u64, seq: u64) -> bool {
    seq_bits(tag) == seq_field(seq)
}

/// The tag of write `seq` whose bytes were copied into the receive ring.
#[inline(always)]
pub fn ring_tag(seq: u64, imm: u32) -> u64 {
    seq_field(seq) | (KIND_RING << KIND_SHIFT) | u64::from(imm)
}

/// Whether a packed write of `count` changed words uses line 1 too (its
/// words and the tag's copy).
#[inline(always)]
pub const fn two_lines(count: usize) -> bool {
    count > LINE0_CHANGED
}

/// Slot word that carries changed word number `j` (`j < MAX_CHANGED`): 1-7 in
/// line 0, 9-15 in line 1 (masked into the slot for any `j`).
#[inline(always)]
pub const fn slot_word(j: usize) -> usize {
    // 1 + j, plus one from j = 7 on (k >> 3 is 1 exactly for k in 8..=15),
    // in fewer instructions than a compare: this is per word on both sides.
    let k = j + 1;
    (k + (k >> 3)) & (SLOT_WORDS - 1)
}

/// Little-endian word `i` of `b` (`8 * i + 8 <= b.len()`, else 0).
#[inline(always)]
fn word(b: &[u8], i: usize) -> u64 {
    match b.get(8 * i..8 * i + 8) {
        Some(c) => u64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
        None => 0,
    }
}

/// The word map of `data` against `reference`: bit `i` set when word `i`
/// (the last one zero-padded) differs. Whole 16-byte pieces are compared
/// first, as one 128-bit value each, and only a piece that differs is split
/// into its two words: a write that repeats most of the previous one (the
/// RPC endpoint's batches change 3 of 12 words) skips the per-word work for
/// most of it. The count of changed words is left to [`pack`]'s walk over
/// the set bits.
///
/// The portable form; the transport uses SIMD forms of it on x86-64
/// (`shm/simd.rs`), property-tested to give the same map.
///
/// Not inlined: inlined into the endpoint's flush, its `zip` loop compiled
/// differently from one build to the next (after the token line's change
/// around it, 160 more instructions per depth-1 RPC, `Zip::new` a call);
/// on its own it compiles the same everywhere, for one call.
#[inline(never)]
pub fn changed_map(data: &[u8], reference: &Reference) -> u64 {
    let pieces = data.chunks_exact(16);
    let rest = pieces.remainder();
    let mut map = 0u64;
    for (k, (d, r)) in pieces.zip(reference.chunks_exact(16)).enumerate() {
        let x = u128::from_le_bytes(d.try_into().unwrap_or([0; 16]))
            ^ u128::from_le_bytes(r.try_into().unwrap_or([0; 16]));
        if x != 0 {
            let bits = u64::from(x as u64 != 0) | u64::from((x >> 64) as u64 != 0) << 1;
            map |= bits << (2 * k);
        }
    }
    // Up to 15 bytes after the pieces: a whole word, then the last one
    // zero-padded.
    let mut i = (data.len() - rest.len()) / 8;
    let full = rest.chunks_exact(8);
    let tail = full.remainder();
    for c in full {
        map |= u64::from(word(c, 0) != word(reference, i)) << i;
        i += 1;
    }
    if !tail.is_empty() {
        let mut b = [0u8; 8];
        b[..tail.len()].copy_from_slice(tail);
        map |= u64::from(u64::from_le_bytes(b) != word(reference, i)) << i;
    }
    map
}

/// Copies `src[..n]` to `dst[..n]` (both at least `n` long, `n <= PACK_MAX`)
/// as two (possibly overlapping) fixed-size moves for the lengths packed writes have,
/// not a `memcpy` call: this is on the round trip at queue depth 1.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8], n: usize) {
    let (dst, src) = (&mut dst[..n], &src[..n]);
    match n {
        97..=PACK_MAX => {
            dst[..64].copy_from_slice(&src[..64]);
            dst[n - 64..].copy_from_slice(&src[n - 64..]);
        }
        // The RPC endpoint's 96-byte batch: 64 bytes and the last 32, not
        // two 64-byte moves that overlap by 32.
        64..=96 => {
            dst[..64].copy_from_slice(&src[..64]);
            dst[n - 32..].copy_from_slice(&src[n - 32..]);
        }
        32..=63 => {
            dst[..32].copy_from_slice(&src[..32]);
            dst[n - 32..].copy_from_slice(&src[n - 32..]);
        }
        _ => dst.copy_from_slice(src),
    }
}

/// Packs write `seq` (`data`, immediate `imm`) against `reference`: hands
/// each changed word to `put(j, word)` (`j` counting from 0; see
/// [`slot_word`]) and returns the tag and how many words it put, or `None`
/// (having put nothing) when the write does not fit a slot: longer than
/// [`PACK_MAX`], an immediate above [`PACK_IMM_MAX`], or more than
/// [`MAX_CHANGED`] changed words. On success `reference` holds the write's
/// words, as the reader's will after [`unpack`]. [`plan`] and [`emit`] are
/// its two halves, for a writer that picks the destination by the count.
#[inline(always)]
pub fn pack(
    seq: u64,
    data: &[u8],
    imm: u32,
    reference: &mut Reference,
    put: impl FnMut(usize, u64),
) -> Option<(u64, usize)> {
    let map = plan(data, imm, reference)?;
    Some(emit(seq, data, imm, map, reference, put))
}

/// The first half of [`pack`]: the word map of `data` against `reference`
/// (bit `i`: word `i` changed), or `None` when the write does not fit a
/// slot. Changes nothing.
#[inline(always)]
pub fn plan(data: &[u8], imm: u32, reference: &Reference) -> Option<u64> {
    plan_by(data, imm, reference, changed_map)
}

/// [`plan`] with the word map computed by `changed` (a form of
/// [`changed_map`] that gives the same map, called only for `data` of at
/// most [`PACK_MAX`] bytes).
#[inline(always)]
pub fn plan_by(
    data: &[u8],
    imm: u32,
    reference: &Reference,
    changed: impl FnOnce(&[u8], &Reference) -> u64,
) -> Option<u64> {
    if data.len() > PACK_MAX || imm > PACK_IMM_MAX {
        return None;
    }
    let map = changed(data, reference);
    // Only a write of more than 14 words can have more changed words than
    // a slot carries; the bit count is needed only then.
    if data.len() > 8 * MAX_CHANGED && count16(map) > MAX_CHANGED {
        return None;
    }
    Some(map)
}

/// Set bits of each byte value.
const BITS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u32).count_ones() as u8;
        i += 1;
    }
    t
};

/// Set bits among the low 16 of `map` (a word map of at most [`PACK_MAX`]
/// bytes has no others) in two table lookups: the x86-64 baseline has no
/// `popcnt`, and `count_ones` there is about 15 instructions, which LLVM
/// computed even for lengths whose count is not needed (+26 per write).
#[inline(always)]
fn count16(map: u64) -> usize {
    usize::from(BITS[(map & 0xff) as usize]) + usize::from(BITS[(map >> 8 & 0xff) as usize])
}

/// Whether a write of `len` bytes with word map `map` (from [`plan`]) fits
/// one line with its tag: at most [`LINE0_CHANGED`] changed words (the bit
/// count only for writes longer than that many words).
#[inline(always)]
pub fn one_line(len: usize, map: u64) -> bool {
    len <= 8 * LINE0_CHANGED || count16(map) <= LINE0_CHANGED
}

/// The second half of [`pack`]: puts the words `map` (from [`plan`] on the
/// same `data` and `reference`) names and returns the tag and the count.
#[inline(always)]
pub fn emit(
    seq: u64,
    data: &[u8],
    imm: u32,
    map: u64,
    reference: &mut Reference,
    mut put: impl FnMut(usize, u64),
) -> (u64, usize) {
    let mut m = map;
    let mut count = 0;
    let mut next = |m: &mut u64, count: &mut usize| {
        let i = m.trailing_zeros() as usize & (PACK_WORDS - 1);
        let w = match data.get(8 * i..8 * i + 8) {
            Some(c) => word(c, 0),
            None => {
                // The last, partial word, zero-padded.
                let t = data.get(8 * i..).unwrap_or(&[]);
                let mut b = [0u8; 8];
                b[..t.len().min(8)].copy_from_slice(&t[..t.len().min(8)]);
                u64::from_le_bytes(b)
            }
        };
        put(*count, w);
        set_word(reference, i, w);
        *count += 1;
        *m &= *m - 1;
    };
    // Line 0's words, then line 1's: in the first loop the count is below
    // 7, so a caller's `slot_word(count)` folds to `count + 1`.
    while m != 0 && count < LINE0_CHANGED {
        next(&mut m, &mut count);
    }
    while m != 0 {
        next(&mut m, &mut count);
    }
    // The map, length and count fields are adjacent (16, 8 and 4 bits; a
    // packable write's fit): shifted in one after the other.
    let fields = ((map << (MAP_SHIFT - LEN_SHIFT) | data.len() as u64)
        << (LEN_SHIFT - COUNT_SHIFT)
        | count as u64)
        << COUNT_SHIFT;
    let tag = seq_field(seq) | (KIND_PACKED << KIND_SHIFT) | fields | u64::from(imm);
    (tag, count)
}

/// The token line's kind field for a packed write by `side`: kind 1 for
/// side 0, 3 for side 1 (the line carries both directions' writes, whose
/// sequence numbers are counted separately and may be equal).
#[inline(always)]
const fn token_kind(side: usize) -> u64 {
    KIND_PACKED | ((side as u64 & 1) << 1)
}

/// The token-line tag of packed tag `tag` (from [`pack`] or [`emit`],
/// at most [`LINE0_CHANGED`] words) written by `side`.
#[inline(always)]
pub fn token_tag(tag: u64, side: usize) -> u64 {
    tag | (token_kind(side) << KIND_SHIFT)
}

/// Whether token-line tag `tag` holds write `seq` of `side` (the writer).
#[inline(always)]
pub fn token_holds(tag: u64, seq: u64, side: usize) -> bool {
    tag & (0xffff << SEQ_SHIFT | KIND_MASK << KIND_SHIFT)
        == seq_field(seq) | token_kind(side) << KIND_SHIFT
}

/// The slot tag a token-line tag that [`token_holds`] stands for, for
/// [`parse`].
#[inline(always)]
pub fn from_token(tag: u64) -> u64 {
    tag & !(2 << KIND_SHIFT)
}

/// Whether a ring slot whose tag is `tag` must be marked when write `seq`,
/// which that slot would have held, came through the token line instead: its
/// sequence field lags `seq` by half the 16-bit range or more. A slot the
/// writer keeps skipping would otherwise come to hold, 65,536 writes after
/// its last, a field equal to the one the reader expects next lap.
#[inline(always)]
pub fn stale(tag: u64, seq: u64) -> bool {
    (seq.wrapping_add(1).wrapping_sub(tag >> SEQ_SHIFT)) & 0xffff >= 0x8000
}

/// Sets word `i` (`i < PACK_WORDS`) of a reference.
#[inline(always)]
fn set_word(b: &mut Reference, i: usize, w: u64) {
    let i = i & (PACK_WORDS - 1);
    b[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
}

/// What a tag announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Announce {
    /// The bytes are in the receive ring already.
    Ring {
        /// The immediate.
        imm: u32,
    },
    /// The bytes are in the slot: `count` changed words, `len` bytes.
    Packed {
        /// The immediate.
        imm: u32,
        /// Length of the write in bytes.
        len: usize,
        /// Word map: bit `i` set when word `i` is in the slot.
        map: u16,
        /// Words in the slot (the map's bit count, as the writer stated it).
        count: usize,
    },
}

/// A tag that is no valid slot tag (a corrupt or foreign peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadTag(pub u64);

/// Parses a tag already known to hold the expected sequence ([`holds`]);
/// `room` is how many bytes the receive ring has from the reader's next
/// receive position to its end (a packed write lands there and must fit).
#[inline(always)]
pub fn parse(tag: u64, room: u64) -> Result<Announce, BadTag> {
    match (tag >> KIND_SHIFT) & KIND_MASK {
        KIND_RING if tag & RING_RESERVED == 0 => Ok(Announce::Ring { imm: tag as u32 }),
        KIND_PACKED => {
            let map = ((tag >> MAP_SHIFT) & 0xffff) as u16;
            let len = ((tag >> LEN_SHIFT) & 0xff) as usize;
            // A count that disagrees with the map (a corrupt peer) yields
            // wrong bytes, never an access outside the slot or the ring.
            let count = ((tag >> COUNT_SHIFT) & 0xf) as usize;
            // `len` is at most 255 here: no overflow, and two instructions
            // where `div_ceil` takes seven.
            let n = (len + 7) >> 3;
            if len > PACK_MAX
                || u32::from(map) >> n != 0
                || count > MAX_CHANGED
                || len as u64 > room
            {
                return Err(BadTag(tag));
            }
            Ok(Announce::Packed {
                imm: (tag & u64::from(PACK_IMM_MAX)) as u32,
                len,
                map,
                count,
            })
        }
        _ => Err(BadTag(tag)),
    }
}

/// Rebuilds a packed write into `out` (its first `len` bytes, `len` clamped to
/// `out` and [`PACK_MAX`]) from its changed words (`changed(j)` is changed word
/// `j`, `j < count` of [`Announce::Packed`]) and `reference`, which it updates
/// like [`pack`] did on the writer's side.
#[inline(always)]
pub fn unpack(
    map: u16,
    len: usize,
    changed: impl Fn(usize) -> u64,
    reference: &mut Reference,
    out: &mut [u8],
) {
    // The unchanged bytes first, straight from the reference, and then each
    // changed word into both the reference and `out`. The other order (the
    // words into the reference, then the whole reference copied out) reads
    // 16-byte pieces that 8-byte stores wrote a few instructions before,
    // which store-to-load forwarding cannot serve: the copy waited for those
    // stores to reach the cache, on the round trip at queue depth 1.
    let len = len.min(PACK_MAX).min(out.len());
    copy_short(out, reference, len);
    // The whole words (all of them for the endpoint's writes) without the
    // partial word's checks, then the partial last word, if any. A map bit
    // past the write's last word (which `parse` refuses) is ignored.
    let full = len / 8;
    let mut m = u32::from(map) & ((1 << full) - 1);
    let mut j = 0;
    let mut next = |m: &mut u32, j: &mut usize| {
        let i = m.trailing_zeros() as usize;
        let w = changed(*j);
        set_word(reference, i, w);
        if let Some(dst) = out.get_mut(8 * i..8 * i + 8) {
            dst.copy_from_slice(&w.to_le_bytes());
        }
        *j += 1;
        *m &= *m - 1;
    };
    // Line 0's words, then line 1's, as in `emit`.
    while m != 0 && j < LINE0_CHANGED {
        next(&mut m, &mut j);
    }
    while m != 0 {
        next(&mut m, &mut j);
    }
    if len % 8 != 0 && u32::from(map) >> full & 1 != 0 {
        let w = changed(j);
        set_word(reference, full, w);
        if let Some(dst) = out.get_mut(8 * full..len) {
            let n = dst.len().min(8);
            dst.copy_from_slice(&w.to_le_bytes()[..n]);
        }
    }
}

/// [`unpack`] into `reference` alone, for a reader that hands out the
/// reference itself as the write's bytes until they are released (the shm
/// transport's *held* write): afterwards `reference` is what `unpack` leaves
/// in it, and its first `len` bytes (at most [`PACK_MAX`]) are the write.
///
/// The flow metadata's words ([`SHIFT_FROM`] of them) are stored as words;
/// past them, each changed word is stored as the two 8-byte pieces at 4
/// bytes off the word grid that it overlaps (`set_shifted`). The copyrpc
/// message header is 12 bytes, so every message field and every 8-byte piece
/// of a payload lies at 4 mod 8 in the batch: the endpoint and its handler
/// read it within one such piece, and store-to-load forwarding serves the
/// read from that one store. Stored as words, the payload's first 8 bytes
/// straddled two, one of them just stored, and the read waited for the store
/// to reach the cache: about 10 ns on each side of a depth-1 round trip.
#[inline(always)]
pub fn unpack_ref(map: u16, len: usize, changed: impl Fn(usize) -> u64, reference: &mut Reference) {
    let len = len.min(PACK_MAX);
    // All the write's words, the partial last one included: the reference
    // keeps whole words, zero-padded as the writer's.
    let words = (len + 7) >> 3;
    let mut m = u32::from(map) & ((1 << words) - 1);
    let mut j = 0;
    // The last word stored and its value: the next word's lower piece takes
    // its upper half from here, never from the store just made.
    let mut last = (usize::MAX, 0u64);
    let mut next = |m: &mut u32, j: &mut usize, last: &mut (usize, u64)| {
        let i = m.trailing_zeros() as usize & (PACK_WORDS - 1);
        let w = changed(*j);
        if i < SHIFT_FROM {
            set_word(reference, i, w);
        } else {
            // Neither half read here was stored by this call: the pieces
            // of words below i - 1 end at 8 * i - 4 at most (word i - 1's
            // half, when it changed, comes from `last`), and no piece
            // stored so far reaches 8 * i + 8.
            let below = if last.0.wrapping_add(1) == i {
                last.1 >> 32
            } else {
                half_at(reference, 8 * i - 4)
            };
            let above = half_at(reference, 8 * i + 8);
            set_shifted(reference, 8 * i - 4, below | w << 32);
            set_shifted(reference, 8 * i + 4, w >> 32 | above << 32);
        }
        *last = (i, w);
        *j += 1;
        *m &= *m - 1;
    };
    // Line 0's words, then line 1's, as in `emit`.
    while m != 0 && j < LINE0_CHANGED {
        next(&mut m, &mut j, &mut last);
    }
    while m != 0 {
        next(&mut m, &mut j, &mut last);
    }
}

/// Words of a batch's flow metadata, which [`unpack_ref`] stores as words.
/// The codec knows this much of the copyrpc layout (`rpc::wire`: flow
/// metadata, then messages at 32-byte offsets with 12-byte headers) because
/// the writes it carries are the endpoint's batches; any other bytes are
/// rebuilt the same, only the stores are placed for that layout.
pub const SHIFT_FROM: usize = FLOW_METADATA_SIZE / 8;

/// The 4 little-endian bytes of `b` at `at`, as the low half of a word (0
/// past the end).
#[inline(always)]
fn half_at(b: &Reference, at: usize) -> u64 {
    match b.get(at..at + 4) {
        Some(c) => u64::from(u32::from_le_bytes(c.try_into().unwrap_or([0; 4]))),
        None => 0,
    }
}

/// Stores `w` at byte `at` of a reference, 8 bytes, or its low 4 where only
/// those fit (the upper piece of the last word).
#[inline(always)]
fn set_shifted(b: &mut Reference, at: usize, w: u64) {
    if let Some(d) = b.get_mut(at..at + 8) {
        d.copy_from_slice(&w.to_le_bytes());
    } else if let Some(d) = b.get_mut(at..at + 4) {
        d.copy_from_slice(&(w as u32).to_le_bytes());
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    /// Writes through `pack`, a slot of words, `parse` and `unpack`, as the
    /// transport moves them.
    fn round_trip(seq: u64, data: &[u8], imm: u32, wr: &mut Reference, rd: &mut Reference) -> bool {
        let mut slot = [0u64; SLOT_WORDS];
        let Some((tag, n)) = pack(seq, data, imm, wr, |j, w| slot[slot_word(j)] = w) else {
            assert_eq!(slot, [0; SLOT_WORDS]);
            return false;
        };
        assert!(holds(tag, seq) && !holds(tag, seq + 1));
        slot[0] = tag;
        let Ok(Announce::Packed {
            imm: i,
            len,
            map,
            count,
        }) = parse(slot[0], PACK_MAX as u64)
        else {
            panic!("tag {tag:#x} does not parse");
        };
        assert_eq!((i, len, count), (imm, data.len(), n));
        // The reader that holds the write in its reference gets the same.
        let mut held = *rd;
        unpack_ref(map, len, |j| slot[slot_word(j)], &mut held);
        let mut out = [0u8; PACK_MAX];
        unpack(map, len, |j| slot[slot_word(j)], rd, &mut out);
        assert_eq!(&out[..len], data);
        assert_eq!(wr, rd);
        assert_eq!(&held, rd);
        assert_eq!(&held[..len], data);
        true
    }

    #[test]
    fn one_line_for_a_repeating_batch() {
        // The bench's batch: flow metadata and one 32-byte message; only the
        // consumer position, the call id and the payload's sequence change.
        let (mut wr, mut rd) = ([0; PACK_MAX], [0; PACK_MAX]);
        let batch = |k: u64| {
            let mut b = [0u8; 96];
            b[..8].copy_from_slice(&(k * 96).to_le_bytes());
            b[16] = 1;
            b[32..36].copy_from_slice(&(k as u32).to_le_bytes());
            b[36] = 3;
            b[40] = 32;
            b[44..52].copy_from_slice(&k.to_le_bytes());
            b[52..76].fill(0xa5);
            b
        };
        assert!(round_trip(0, &batch(0), 3, &mut wr, &mut rd));
        for k in 1..100 {
            let (_, n) = pack(k, &batch(k), 3, &mut wr.clone(), |_, _| ()).unwrap();
            assert!(!two_lines(n), "{n} words");
            assert!(round_trip(k, &batch(k), 3, &mut wr, &mut rd));
        }
        // A 32-byte payload that changes entirely still fits line 0 alone.
        let mut b = batch(100);
        b[52..76].fill(0x11);
        assert_eq!(pack(100, &b, 3, &mut wr.clone(), |_, _| ()).unwrap().1, 7);
    }

    #[test]
    fn slot_words_and_counts() {
        let want: Vec<usize> = (1..8).chain(9..16).collect();
        assert_eq!((0..MAX_CHANGED).map(slot_word).collect::<Vec<_>>(), want);
        assert!((0..1000).all(|j| slot_word(j) < SLOT_WORDS));
        for m in 0..=0xffffu64 {
            assert_eq!(count16(m), m.count_ones() as usize);
        }
    }

    #[test]
    fn limits() {
        let mut r = [0; PACK_MAX];
        let none = |_, _| panic!("a refused write puts no word");
        assert!(pack(0, &[1; 129], 1, &mut r, none).is_none());
        assert!(pack(0, &[1; 8], PACK_IMM_MAX + 1, &mut r, none).is_none());
        assert!(pack(0, &[1; 128], 1, &mut r, none).is_none()); // 16 changed words
        assert_eq!(r, [0; PACK_MAX], "a refused write leaves the reference");
        assert_eq!(pack(0, &[1; 112], 1, &mut r, |_, _| ()).unwrap().1, 14);
        assert_eq!(pack(1, &[1; 128], 1, &mut r, |_, _| ()).unwrap().1, 2);
        // Sequence numbers wrap at 16 bits, never to the zeroed slot's 0 in a
        // slot that held the write one lap (at most 4096 writes) earlier.
        assert!(holds(ring_tag(65535, 0), 65535) && !holds(0, 65535 - 4096));
        assert!(!holds(0, 0) && holds(ring_tag(0, 9), 0));
        // The next write's field by one addition, across the 16-bit wrap.
        for s in [0, 1, 65534, 65535, 65536, 1 << 40] {
            assert_eq!(seq_field(s).wrapping_add(SEQ_ONE), seq_field(s + 1));
            assert!(holds(ring_tag(s, 1), s) && seq_bits(ring_tag(s, 1)) == seq_field(s));
        }
        assert_eq!(parse(ring_tag(5, 77), 0), Ok(Announce::Ring { imm: 77 }));
        assert!(parse(ring_tag(5, 77) | 1 << 40, 0).is_err());
        assert!(parse(3 << KIND_SHIFT, 0).is_err());
        // A packed write longer than the room to the ring end.
        let (tag, _) = pack(2, &[7; 64], 2, &mut [0; PACK_MAX], |_, _| ()).unwrap();
        assert!(parse(tag, 63).is_err() && parse(tag, 64).is_ok());
    }

    #[test]
    fn tag_layout() {
        // The packed tag's fields where the module doc puts them, written
        // out one by one (the wire format; `emit` shifts them in together).
        for (len, seq, imm) in [(96, 5, 3), (128, 65535, PACK_IMM_MAX), (1, 0, 0), (0, 9, 1)] {
            let data: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x33).collect();
            let mut r = [0u8; PACK_MAX];
            // The first five words unchanged, but for word 2.
            let k = len.min(40);
            r[..k].copy_from_slice(&data[..k]);
            r[16] ^= 1;
            let map = plan(&data, imm, &r).unwrap();
            let (tag, count) = pack(seq, &data, imm, &mut r, |_, _| ()).unwrap();
            assert_eq!(count, map.count_ones() as usize);
            let want = ((seq + 1) & 0xffff) << 48
                | 1 << 46
                | map << 30
                | (len as u64) << 22
                | (count as u64) << 18
                | u64::from(imm);
            assert_eq!(tag, want, "len {len}");
        }
    }

    #[test]
    fn token_tags() {
        let (tag, n) = pack(7, &[3; 40], 2, &mut [0; PACK_MAX], |_, _| ()).unwrap();
        assert_eq!(n, 5);
        for side in 0..2 {
            let t = token_tag(tag, side);
            // The writer's side is in the tag: the other side's write of the
            // same sequence and words is not this one.
            assert!(token_holds(t, 7, side) && !token_holds(t, 7, 1 - side));
            assert!(!token_holds(t, 8, side) && !token_holds(t, 7 + 65536 - 1, side));
            assert_eq!(from_token(t), tag);
        }
        // A zeroed line and ring tags never hold a token-line write.
        assert!((0..70_000).all(|s| !token_holds(0, s, 0) && !token_holds(ring_tag(s, 5), s, 0)));
        // A slot is stale when its field lags half the 16-bit range or more.
        assert!(!stale(ring_tag(100, 1), 100 + 4096) && !stale(0, 4000));
        assert!(stale(ring_tag(100, 1), 100 + 0x8000) && stale(0, 0x7fff));
        assert!(!stale(ring_tag(65530, 1), 65530 + 20) && !stale(seq_field(9), 9));
        // One line: at most seven changed words.
        assert!(one_line(56, 0x7f) && one_line(96, 0x7f) && !one_line(96, 0xff));
    }

    proptest! {
        /// Any sequence of writes (words often repeated from the previous one)
        /// that packs comes out as it went in, with both references equal.
        #[test]
        fn pack_unpack_round_trip(
            writes in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..=140), any::<u64>(), 0u32..=PACK_IMM_MAX + 8),
                1..40,
            ),
        ) {
            let (mut wr, mut rd) = ([0; PACK_MAX], [0; PACK_MAX]);
            let mut prev: Vec<u8> = Vec::new();
            for (seq, (mut data, keep, imm)) in writes.into_iter().enumerate() {
                // Keep some bytes of the previous write, so words repeat.
                for (i, b) in data.iter_mut().enumerate() {
                    if keep >> (i / 8 % 64) & 1 == 1 {
                        if let Some(&p) = prev.get(i) {
                            *b = p;
                        }
                    }
                }
                let before = wr;
                if !round_trip(seq as u64, &data, imm, &mut wr, &mut rd) {
                    prop_assert_eq!(wr, before);
                    prop_assert!(data.len() > PACK_MAX || imm > PACK_IMM_MAX || data.len() > 8 * MAX_CHANGED);
                }
                prev = data;
            }
        }

        /// The piece-wise word map is the word-by-word one.
        #[test]
        fn changed_map_is_word_by_word(
            data in proptest::collection::vec(0u8..3, 0..=PACK_MAX),
            reference in proptest::collection::vec(0u8..3, PACK_MAX..=PACK_MAX),
        ) {
            let mut r = [0u8; PACK_MAX];
            r.copy_from_slice(&reference);
            let mut want = 0u64;
            for i in 0..data.len().div_ceil(8) {
                let mut d = [0u8; 8];
                let c = &data[8 * i..(8 * i + 8).min(data.len())];
                d[..c.len()].copy_from_slice(c);
                if u64::from_le_bytes(d) != word(&r, i) {
                    want |= 1 << i;
                }
            }
            prop_assert_eq!(changed_map(&data, &r), want);
        }

        /// Whatever a peer leaves in a slot, parsing and unpacking never panic
        /// and a packed write never claims more than the room it was given.
        #[test]
        fn parse_any_tag(tag in any::<u64>(), room in 0u64..300, words in any::<[u64; SLOT_WORDS]>()) {
            if let Ok(Announce::Packed { len, map, count, .. }) = parse(tag, room) {
                prop_assert!(len as u64 <= room && len <= PACK_MAX && count <= MAX_CHANGED);
                let mut r = [0; PACK_MAX];
                let mut out = [0u8; PACK_MAX];
                unpack(map, len, |j| words[slot_word(j)], &mut r, &mut out);
                // Unpacking arbitrary words into a short buffer stays inside it.
                unpack(map, len, |j| words[slot_word(j)], &mut r, &mut out[..3]);
            }
        }
    }
}
