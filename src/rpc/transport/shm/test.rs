//! The shared-memory transport's tests (moved out of `shm.rs` when the token line made it long).

use super::*;

#[test]
fn create_open_write_poll() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ring");
    let mut a = ShmTransport::create(&path, 4096).unwrap();
    let mut b = ShmTransport::open(&path).unwrap();
    assert_eq!(b.ring_size(), 4096);
    assert_eq!(b.side(), 1);
    assert!(b.peer_info().is_none());
    let info = PeerInfo {
        ring_size: 4096,
        initial_credit: 1024,
        max_resp_reservation: 1024,
    };
    a.publish_info(&info);
    assert_eq!(b.peer_info(), Some(info));
    assert_eq!(b.poll_imm().unwrap(), None);
    a.write_with_imm(64, &[1, 2, 3], 2).unwrap();
    a.write_with_imm(4064, &[9; 32], 1).unwrap();
    assert!(a.write_with_imm(4080, &[9; 32], 1).is_err());
    assert_eq!(b.poll_imm().unwrap(), Some(2));
    assert_eq!(b.poll_imm().unwrap(), Some(1));
    assert_eq!(b.poll_imm().unwrap(), None);
    assert_eq!(b.recv_bytes(64, 3), &[1, 2, 3]);
    assert_eq!(b.recv_bytes(4064, 32), &[9; 32]);
    assert!(b.recv_bytes(4064, 64).is_empty());
    b.publish_consumer(96);
    assert_eq!(a.read_remote_consumer().unwrap(), Some(96));
    // Completion slots are reused around the ring.
    for i in 0..600u32 {
        b.write_with_imm(0, &[], i).unwrap();
        assert_eq!(a.poll_imm().unwrap(), Some(i));
    }
    // Writes at offsets other than the reader's receive position go
    // through the ring, whatever their length.
    for len in [1usize, 47, 48, 49, 103, 104, 105, 200] {
        let data: Vec<u8> = (0..len).map(|i| (i * 3 + len) as u8).collect();
        a.write_with_imm(1024, &data, len as u32).unwrap();
        assert_eq!(b.poll_imm().unwrap(), Some(len as u32));
        assert_eq!(b.recv_bytes(1024, len as u64), &data[..], "length {len}");
    }
    // A region created without the token line never uses it, even for
    // depth-1 exchanges of packable writes.
    for i in 0..100u64 {
        let (pa, pb) = (a.peer_pos & 4095, b.peer_pos & 4095);
        a.write_with_imm(pa, &i.to_le_bytes(), 1).unwrap();
        assert_eq!(b.poll_imm().unwrap(), Some(1));
        b.write_with_imm(pb, &i.to_le_bytes(), 1).unwrap();
        assert_eq!(a.poll_imm().unwrap(), Some(1));
    }
    assert_eq!((a.via_token(), b.via_token()), (0, 0));
}

/// How write `seq` to `r` travelled, from where `r` will find it: 0
/// through the ring, 1 packed in a slot's line 0, 2 in both its lines,
/// 3 in the token line.
fn kind_of(r: &ShmTransport, seq: u64) -> usize {
    let token = r.token_words()[0].load(Ordering::Relaxed);
    if r.token_state == Token::Away && slot::token_holds(token, seq, 1 - r.me) {
        return 3;
    }
    let tag = r.slot_words(r.slot_ptr(r.me, seq))[0].load(Ordering::Relaxed);
    assert!(slot::holds(tag, seq), "tag {tag:#x} for write {seq}");
    match slot::parse(tag, r.ring_size) {
        Ok(slot::Announce::Ring { .. }) => 0,
        Ok(slot::Announce::Packed { count, .. }) => 1 + usize::from(count > 7),
        Err(e) => panic!("{e:?}"),
    }
}

/// One direction's writes, as the test wrote them.
#[derive(Default)]
struct Dir {
    /// The reader's receive position (where the next write lands).
    pos: u64,
    sent: std::collections::VecDeque<(u64, Vec<u8>, u32)>,
    prev: Vec<u8>,
    /// Writes by [`kind_of`].
    kinds: [u64; 4],
    /// With [`Pair::releasing`]: the writes taken and not yet released by
    /// the reader's published consumer position (ring offset, bytes,
    /// immediate), and the reader's position past the last one taken.
    taken: std::collections::VecDeque<(u64, Vec<u8>, u32)>,
    taken_end: u64,
    /// Takes after which the reader held the write in its reference.
    held: u64,
}

/// Two sides that write as the endpoint does (each write at the reader's
/// receive position, the immediate counting 32-byte blocks, a short
/// write announcing the rest of the ring at its end) and check what the
/// other side gets.
struct Pair {
    t: [ShmTransport; 2],
    /// By writer side.
    d: [Dir; 2],
    /// The readers keep taken writes until [`release`](Self::release), as
    /// the endpoint does: every take checks them all again (a held write
    /// must read the same from the reference and, once a later write was
    /// taken, from the ring), and the writer counts them as unread.
    releasing: bool,
}

impl Pair {
    fn new(dir: &Path, ring: u64, slots: u64) -> Pair {
        let path = dir.join(format!("slots-{slots}"));
        let a = ShmTransport::create_opts(&path, ring, slots, true).unwrap();
        let b = ShmTransport::open(&path).unwrap();
        assert_eq!(b.comp_slots, slots);
        Pair {
            t: [a, b],
            d: Default::default(),
            releasing: false,
        }
    }

    /// Side 0 writes (see [`write_from`](Self::write_from)).
    fn write(&mut self, len: usize, keep: u64, fill: u8) -> bool {
        self.write_from(0, len, keep, fill)
    }

    /// Side 1 takes (see [`take_by`](Self::take_by)).
    fn take(&mut self) -> bool {
        self.take_by(1)
    }

    /// Side `side` writes `len` bytes keeping the previous write's
    /// 8-byte word `i` when bit `i` of `keep` is set (others get
    /// `fill`); false when Busy or the reader's ring is full.
    fn write_from(&mut self, side: usize, len: usize, keep: u64, fill: u8) -> bool {
        let (lo, hi) = self.t.split_at_mut(1);
        let (w, r) = if side == 0 {
            (&mut lo[0], &hi[0])
        } else {
            (&mut hi[0], &lo[0])
        };
        let d = &mut self.d[side];
        let ring = w.ring_size;
        let off = d.pos & (ring - 1);
        let (data, imm) = if ring - off < wire_len(len) {
            (
                vec![fill; (ring - off).min(32) as usize],
                ((ring - off) / 32) as u32,
            )
        } else {
            let data = (0..len)
                .map(|i| match d.prev.get(i) {
                    Some(&p) if keep >> (i / 8 % 64) & 1 == 1 => p,
                    _ => fill.wrapping_add(i as u8),
                })
                .collect();
            (data, (wire_len(len) / 32) as u32)
        };
        // The endpoint never writes over bytes the reader has not taken
        // (its credits bound the ring): nor does this writer.
        let unread: u64 = d
            .sent
            .iter()
            .chain(&d.taken)
            .map(|&(_, _, i)| u64::from(i) * 32)
            .sum();
        if unread + u64::from(imm) * 32 > ring {
            return false;
        }
        match w.write_with_imm(off, &data, imm) {
            Ok(()) => {}
            Err(TransportError::Busy) => return false,
            Err(e) => panic!("{e}"),
        }
        d.kinds[kind_of(r, w.send_seq - 1)] += 1;
        d.sent.push_back((off, data.clone(), imm));
        d.prev = data;
        d.pos += u64::from(imm) * 32;
        true
    }

    /// Side `side` polls one completion and checks it; false when there
    /// was none.
    fn take_by(&mut self, side: usize) -> bool {
        let r = &mut self.t[side];
        let d = &mut self.d[1 - side];
        let Some(imm) = r.poll_imm().unwrap() else {
            assert!(d.sent.is_empty(), "{} writes not seen", d.sent.len());
            return false;
        };
        let (off, data, want) = d.sent.pop_front().expect("a completion nobody wrote");
        assert_eq!(imm, want);
        assert_eq!(r.recv_bytes(off, data.len() as u64), &data[..]);
        if self.releasing {
            d.held += u64::from(r.held.is_some());
            d.taken_end += u64::from(imm) * 32;
            d.taken.push_back((off, data, imm));
            for (off, data, _) in &d.taken {
                assert_eq!(r.recv_bytes(*off, data.len() as u64), &data[..]);
            }
            // The endpoint asks for all it took at once: whole writes from
            // the first on, while their ring offsets run on.
            let (first, _, _) = d.taken[0];
            let mut run = Vec::new();
            for (off, data, imm) in &d.taken {
                if *off != first + run.len() as u64 || data.len() != *imm as usize * 32 {
                    break;
                }
                run.extend_from_slice(data);
            }
            assert_eq!(r.recv_bytes(first, run.len() as u64), &run[..]);
        }
        true
    }

    /// Side `side` publishes its consumer position past the first `n` of
    /// the writes it took (all of them when `n` is larger; see
    /// [`releasing`](Self::releasing)).
    fn release(&mut self, side: usize, n: usize) {
        let d = &mut self.d[1 - side];
        let keep = d.taken.len().saturating_sub(n);
        let kept: u64 = d
            .taken
            .iter()
            .rev()
            .take(keep)
            .map(|&(_, _, i)| u64::from(i) * 32)
            .sum();
        d.taken.drain(..d.taken.len() - keep);
        self.t[side].publish_consumer(d.taken_end - kept);
    }
}

/// Ring bytes a write of `len` takes (at least one 32-byte block).
fn wire_len(len: usize) -> u64 {
    (len as u64).div_ceil(32).max(1) * 32
}

/// Every slot count the region accepts: writes of every kind around the
/// completion ring (several laps, the receive ring wrapping too), the
/// 16-bit sequence wrapping, and a full completion ring.
#[test]
fn every_slot_count() {
    let dir = tempfile::tempdir().unwrap();
    let mut counts = vec![];
    let mut n = *COMP_SLOTS_RANGE.start();
    while n <= *COMP_SLOTS_RANGE.end() {
        counts.push(n);
        n *= 2;
    }
    assert!(counts.contains(&COMP_SLOTS) && counts.len() == 11);
    let lens = [0usize, 3, 8, 32, 96, 96, 96, 100, 112, 128, 129, 200, 96];
    for slots in counts {
        // Room in the ring for a full completion ring of 96-byte writes.
        let mut p = Pair::new(dir.path(), (slots * 128).max(4096), slots);
        // Laps of the completion ring; at the ends of the range, past the
        // 16-bit sequence's wrap (the largest ring is 4096 slots).
        let writes = if slots == 4 || slots == 4096 {
            70_000
        } else {
            3 * slots + 7
        };
        for i in 0..writes {
            let keep = if i % 5 == 0 { 0 } else { !(0b1101 << (i % 9)) };
            assert!(p.write(lens[i as usize % lens.len()], keep, i as u8));
            assert!(p.take());
        }
        assert!(!p.take());
        // The first write takes the token line (side 0 holds the token
        // at the start), and side 1, which never writes, keeps it.
        let kinds = p.d[0].kinds;
        assert!(
            kinds[..3].iter().all(|&k| k > 0) && kinds[3] == 1,
            "{slots} slots: kinds {kinds:?}"
        );
        // A full completion ring is Busy until the reader polls. The reader
        // publishes its count when a first poll finds nothing (the last
        // `take` above), or after half a ring of receipts.
        let mut n = 0u64;
        while p.write(96, u64::MAX, n as u8) {
            n += 1;
        }
        assert_eq!(n, slots, "{slots} slots: {n} writes");
        assert!(!p.write(32, 0, 1));
        for _ in 1..slots / 2 {
            assert!(p.take());
        }
        assert!(!p.write(32, 0, 1), "{slots} slots: room before the count");
        assert!(p.take());
        assert!(
            p.write(96, u64::MAX, 7),
            "{slots} slots: room after half a ring of polls"
        );
        while p.take() {}
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Random writes (lengths, repeated words) and a random polling
    /// schedule arrive intact and in order, for any slot count.
    #[test]
    fn random_writes_arrive(
        shift in 2u32..=12,
        ops in proptest::collection::vec((0usize..=160, proptest::prelude::any::<u64>(), 0u8..4), 1..300),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Pair::new(dir.path(), 1024, 1 << shift);
        for (i, (len, keep, polls)) in ops.into_iter().enumerate() {
            while !p.write(len, keep, i as u8) {
                proptest::prop_assert!(p.take());
            }
            for _ in 0..polls {
                p.take();
            }
        }
        while p.take() {}
    }

    /// Both sides write and poll on a random schedule, each side often
    /// several writes ahead of its reader, so writes through the token
    /// line, slots of one and two lines and the ring mix in both
    /// directions: every byte arrives, in order.
    #[test]
    fn both_ways_random_schedule(
        shift in 2u32..=5,
        ops in proptest::collection::vec((0u8..4, 0usize..=136, proptest::prelude::any::<u64>()), 1..400),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut p = Pair::new(dir.path(), 2048, 1 << shift);
        for (i, (op, len, keep)) in ops.into_iter().enumerate() {
            let side = usize::from(op & 1);
            if op < 2 {
                // Mostly repeated words, so many writes fit one line.
                let keep = keep | keep >> 7 | keep << 3;
                while !p.write_from(side, len, keep, i as u8) {
                    proptest::prop_assert!(p.take_by(1 - side));
                }
            } else {
                p.take_by(side);
            }
        }
        while p.take_by(0) {}
        while p.take_by(1) {}
    }
}

/// A small deterministic generator for the schedule tests.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Depth 1 both ways (a call, its answer): after the first exchange
/// every write travels in the token line, past the 16-bit sequence's
/// wrap (where a slot skipped since the start would otherwise hold the
/// field the reader expects); then bursts of several writes each way
/// (slots again, the token line where it is free), and depth 1 again.
#[test]
fn depth_one_uses_the_token_line() {
    let dir = tempfile::tempdir().unwrap();
    for slots in [4, 8, 64] {
        let mut p = Pair::new(dir.path(), 1 << 16, slots);
        let n = 70_000u64;
        // 64-byte writes (so the ring never wraps in the middle of one,
        // which would put a two-line write into a slot) with 3 words
        // changing, as the endpoint's batch.
        let keep = !0b1000_0101u64;
        let round = |p: &mut Pair, i: u64, len: usize| {
            assert!(p.write_from(1, len, keep, i as u8));
            assert!(p.take_by(0) && !p.take_by(0));
            assert!(p.write_from(0, len, keep, !i as u8));
            assert!(p.take_by(1) && !p.take_by(1));
        };
        for i in 0..n {
            round(&mut p, i, 64);
        }
        // The first writes of each side change all their words (two
        // slot lines); side 1's second found the token still at side 0.
        let (a, b) = (p.d[0].kinds, p.d[1].kinds);
        assert_eq!(
            (a, b),
            ([0, 0, 1, n - 1], [0, 1, 1, n - 2]),
            "{slots} slots"
        );
        assert_eq!((p.t[1].via_token(), p.t[0].via_token()), (a[3], b[3]));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for burst in 0..2000u64 {
            // At most what the writer surely finds free (the reader
            // publishes its count every eighth of the ring).
            let depth = 1 + xorshift(&mut x) % (slots + 1 - (slots / 8).max(1));
            for k in 0..depth {
                let len = [64, 96, 8][(burst % 3) as usize];
                assert!(p.write_from(1, len, keep, (burst + k) as u8));
                assert!(p.write_from(0, len, keep, !(burst + k) as u8));
            }
            for _ in 0..depth {
                assert!(p.take_by(0) && p.take_by(1));
            }
            assert!(!p.take_by(0) && !p.take_by(1));
        }
        for i in 0..1000 {
            round(&mut p, i, 96);
        }
        let (a2, b2) = (p.d[0].kinds, p.d[1].kinds);
        for (k0, k) in [(a, a2), (b, b2)] {
            assert!(
                k[1] > k0[1] && k[3] - k0[3] >= 1000,
                "{slots}: {k0:?} -> {k:?}"
            );
        }
    }
}

/// `n` random steps from `seed`, then both sides drained: a write by a
/// random side of a length from `lens` that changes the words at `changes`
/// random places (a side whose completion ring is full lets the peer take
/// one first), or a take by a random side.
fn random_schedule(p: &mut Pair, seed: u64, n: u64, lens: &[usize], changes: u32) {
    let mut x = seed;
    for i in 0..n {
        let r = xorshift(&mut x);
        let side = (r & 1) as usize;
        if r >> 1 & 3 != 0 {
            let len = lens[(r >> 3) as usize % lens.len()];
            let keep = !(0..changes).fold(0u64, |m, k| m | 1 << (r >> (8 + 4 * k) & 15));
            if !p.write_from(side, len, keep, i as u8) && !p.take_by(1 - side) {
                // Nothing to take: the reader's ring is full of writes it
                // took and has not released.
                assert!(p.releasing && !p.d[side].taken.is_empty());
                p.release(1 - side, usize::MAX);
            }
        } else if p.releasing && r >> 3 & 1 == 1 {
            // Often all, sometimes all but the last one or two.
            let n = p.d[1 - side]
                .taken
                .len()
                .saturating_sub((r >> 4 & 3).saturating_sub(1) as usize);
            p.release(side, n);
        } else {
            p.take_by(side);
        }
    }
    while p.take_by(0) {}
    while p.take_by(1) {}
}

/// Both sides several writes ahead on a long random schedule (past the
/// 16-bit wrap), writes of the endpoint's size mostly: the token line
/// and one-line slots both carry writes in each direction.
#[test]
fn both_ways_long_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pair::new(dir.path(), 1 << 14, 8);
    let lens = [96, 96, 96, 32, 8, 120, 129];
    random_schedule(&mut p, 0x2545_f491_4f6c_dd1d, 300_000, &lens, 2);
    for d in &p.d {
        assert!(d.kinds.iter().all(|&k| k > 1000), "kinds {:?}", d.kinds);
    }
}

/// Readers that keep what they took until they publish their consumer
/// position, at random points, as the endpoint does: a packed write is
/// held in the reference while it is the only one unreleased, and every
/// take reads all unreleased writes again, one by one and as one range, so
/// a held write must read the same before and after a later take copies it
/// to the ring (both ways, token line and slots, at every length).
#[test]
fn held_writes_read_the_same_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = Pair::new(dir.path(), 1 << 12, 8);
    p.releasing = true;
    let lens = [96, 96, 96, 32, 3, 8, 64, 120, 128, 129];
    random_schedule(&mut p, 0x6a09_e667_f3bc_c908, 100_000, &lens, 2);
    for d in &p.d {
        assert!(d.kinds.iter().all(|&k| k > 500), "kinds {:?}", d.kinds);
    }
    // Held at depth 1: a write taken, read and released before the next.
    for d in &p.d {
        assert!(d.held > 1000, "{} held", d.held);
    }
}

/// Each side picks its word compare for itself (the slot bytes are the
/// same): every pairing of the compares this CPU runs carries writes both
/// ways, through the token line and one- and two-line slots.
#[test]
fn mixed_codecs() {
    use super::simd::Codec;
    let mut codecs = vec![Codec::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        codecs.push(Codec::Sse2);
        if std::arch::is_x86_feature_detected!("avx2") {
            codecs.push(Codec::Avx2);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for &c0 in &codecs {
        for &c1 in &codecs {
            let mut p = Pair::new(dir.path(), 1 << 14, 8);
            (p.t[0].codec, p.t[1].codec) = (c0, c1);
            let lens = [96, 96, 3, 32, 13, 120, 128, 129];
            random_schedule(&mut p, 0x9e37_79b9_7f4a_7c15, 20_000, &lens, 3);
            for d in &p.d {
                assert!(
                    d.kinds.iter().all(|&k| k > 100),
                    "{c0:?}/{c1:?}: kinds {:?}",
                    d.kinds
                );
            }
        }
    }
}

#[test]
fn corrupt_tag_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c");
    let mut a = ShmTransport::create_opts(&path, 4096, 8, true).unwrap();
    let mut b = ShmTransport::open(&path).unwrap();
    // A packed write claiming 128 bytes 64 bytes before the ring end.
    a.write_with_imm(0, &[0; 32], 126).unwrap();
    assert_eq!(b.poll_imm().unwrap(), Some(126));
    let (tag, _) = slot::pack(1, &[1; 128], 1, &mut [1; 128], |_, _| ()).unwrap();
    b.slot_words(b.slot_ptr(1, 1))[0].store(tag, Ordering::Release);
    assert!(b.poll_imm().is_err());
    // A packed write of more than seven words without line 1's tag copy.
    let (tag, n) = slot::pack(2, &[1; 96], 1, &mut [0; 128], |_, _| ()).unwrap();
    assert!(slot::two_lines(n));
    let mut c = ShmTransport::open(&path).unwrap();
    c.set_recv_seq(2);
    c.slot_words(c.slot_ptr(1, 2))[0].store(tag, Ordering::Release);
    assert!(c.poll_imm().is_err());
    // An unknown kind.
    c.slot_words(c.slot_ptr(1, 2))[0].store(slot::seq_field(2) | 3 << 46, Ordering::Release);
    assert!(c.poll_imm().is_err());
    // In the token line: a packed write of more than seven words, which
    // the line cannot hold.
    let mut d = ShmTransport::open(&path).unwrap();
    d.set_recv_seq(3);
    let (tag, n) = slot::pack(3, &[1; 96], 1, &mut [0; 128], |_, _| ()).unwrap();
    assert!(slot::two_lines(n));
    d.token_words()[0].store(slot::token_tag(tag, 0), Ordering::Release);
    assert!(d.poll_imm().is_err());
    // A token-line write of this side's own (side 1) is not the peer's.
    let mut d = ShmTransport::open(&path).unwrap();
    d.set_recv_seq(3);
    let (tag, _) = slot::pack(3, &[0; 8], 1, &mut [0; 128], |_, _| ()).unwrap();
    d.token_words()[0].store(slot::token_tag(tag, 1), Ordering::Release);
    assert_eq!(d.poll_imm().unwrap(), None);
    d.token_words()[0].store(slot::token_tag(tag, 0), Ordering::Release);
    assert_eq!(d.poll_imm().unwrap(), Some(1));
    drop(a);
}

#[test]
fn open_missing_or_foreign() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x");
    assert!(ShmTransport::open(&path).is_err());
    std::fs::write(&path, vec![0u8; 8192]).unwrap();
    assert!(matches!(
        ShmTransport::open(&path),
        Err(ShmError::NotReady(_))
    ));
}
