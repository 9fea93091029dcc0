//! Fuzzes the shm transport's completion-slot codec: an arbitrary tag and
//! slot words as a (corrupt) peer may leave them must parse to an error or to
//! a write that fits the room given, and unpack without panicking; and writes
//! cut from the input must come out of `pack`, `parse` and `unpack` as they
//! went in, with writer and reader references equal (and the reader that
//! rebuilds a write in its reference alone, `unpack_ref`, gets the same).
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::rpc::transport::shm::slot::{
    holds, pack, parse, slot_word, unpack, unpack_ref, Announce, MAX_CHANGED, PACK_MAX, SLOT_WORDS,
};

fn u64_at(d: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, x) in b.iter_mut().enumerate() {
        *x = d.get(i + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    // A slot as a peer left it.
    let tag = u64_at(data, 0);
    let room = u64_at(data, 8) % 512;
    let mut words = [0u64; MAX_CHANGED];
    for (j, w) in words.iter_mut().enumerate() {
        *w = u64_at(data, 16 + 8 * j);
    }
    if let Ok(Announce::Packed { len, map, count, .. }) = parse(tag, room) {
        assert!(len as u64 <= room && len <= PACK_MAX && count <= MAX_CHANGED);
        let mut r = [data.get(3).copied().unwrap_or(0); PACK_MAX];
        let mut held = r;
        let mut out = [0u8; PACK_MAX];
        unpack(map, len, |j| words[j % MAX_CHANGED], &mut r, &mut out);
        unpack_ref(map, len, |j| words[j % MAX_CHANGED], &mut held);
        assert_eq!(held, r);
    }
    // Writes: a length byte, then that many bytes (the rest of the input).
    let (mut wr, mut rd) = ([0u8; PACK_MAX], [0u8; PACK_MAX]);
    let mut rest = data;
    let mut seq = 0u64;
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let (write, next) = tail.split_at(n);
        rest = next;
        let imm = u32::from(n as u8) << 10;
        let mut slot = [0u64; SLOT_WORDS];
        if let Some((tag, n)) = pack(seq, write, imm, &mut wr, |j, w| slot[slot_word(j)] = w) {
            assert!(holds(tag, seq));
            let Ok(Announce::Packed { imm: i, len, map, count }) = parse(tag, PACK_MAX as u64) else {
                panic!("a packed tag does not parse");
            };
            assert_eq!((i, len, count), (imm, write.len(), n));
            let mut held = rd;
            let mut out = [0u8; PACK_MAX];
            unpack(map, len, |j| slot[slot_word(j)], &mut rd, &mut out);
            unpack_ref(map, len, |j| slot[slot_word(j)], &mut held);
            assert_eq!(&out[..len], write);
            assert_eq!(wr, rd);
            assert_eq!(held, rd);
        } else {
            assert!(write.len() > 8 * MAX_CHANGED);
        }
        seq += 1;
    }
});
