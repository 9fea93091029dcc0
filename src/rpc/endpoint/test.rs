//! Unit tests of the RPC endpoint: calls and replies, credit, ring wrap, transport errors and a misbehaving peer.

use super::*;
use crate::rpc::transport::mem::MemLink;
use crate::rpc::wire::{
    padded_message_size, to_response_id, FlowMeta, FlowMetaRepr, Message, MessageRepr,
    WRAP_MESSAGE_COUNT,
};

#[derive(Default)]
struct Rec {
    requests: Vec<(Request, Vec<u8>)>,
    responses: Vec<(u32, u32, Vec<u8>)>,
}

impl Handler<u32> for Rec {
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        self.requests.push((req, payload.to_vec()));
    }
    fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
        self.responses.push((call_id, user, payload.to_vec()));
    }
}

fn pair(ring: u64) -> (Endpoint<u32>, Endpoint<u32>, MemLink) {
    let c = Config::new(ring);
    let a = Endpoint::new(c, c.local_info()).unwrap();
    let b = Endpoint::new(c, c.local_info()).unwrap();
    (a, b, MemLink::new(ring as usize))
}

#[test]
fn call_and_reply_out_of_order() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Rec::default());
    let id1 = a.call(b"one", 8, 1).unwrap();
    let id2 = a.call(b"two", 8, 2).unwrap();
    assert_eq!(link.writes(0), 0, "call() only writes the local ring");
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(link.writes(0), 1, "one write per batch");
    b.poll(&mut link.side(1), &mut hb).unwrap();
    assert_eq!(hb.requests.len(), 2);
    assert_eq!(hb.requests[0].1, b"one");
    assert_eq!(hb.requests[1].1, b"two");
    let (r1, r2) = (hb.requests[0].0, hb.requests[1].0);
    b.reply(&r2, b"TWO").unwrap();
    b.reply(&r1, b"ONE").unwrap();
    assert!(matches!(
        b.reply(&r1, b"x"),
        Err(ReplyError::NotOutstanding)
    ));
    b.poll(&mut link.side(1), &mut hb).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(
        ha.responses,
        vec![(id2, 2, b"TWO".to_vec()), (id1, 1, b"ONE".to_vec())]
    );
    assert_eq!(a.pending_calls(), 0);
    assert!(a.invariant_holds() && b.invariant_holds());
}

/// Answers every request during `poll` with its payload reversed, or with
/// `len` bytes of 0xee when `len` is set.
#[derive(Default)]
struct Answering {
    rec: Rec,
    buf: Vec<u8>,
    len: Option<usize>,
}

impl Handler<u32> for Answering {
    fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
        self.buf = match self.len {
            Some(n) => vec![0xee; n],
            None => payload.iter().rev().copied().collect(),
        };
        Some(&self.buf)
    }
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        self.rec.on_request(req, payload);
    }
    fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
        self.rec.on_response(call_id, user, payload);
    }
}

#[test]
fn answer_during_poll() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Answering::default());
    let id1 = a.call(b"abc", 8, 1).unwrap();
    let id2 = a.call(b"de", 8, 2).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    b.poll(&mut link.side(1), &mut hb).unwrap();
    assert!(hb.rec.requests.is_empty(), "answered, not handed over");
    assert_eq!(link.writes(1), 1, "both answers in one batch of that poll");
    assert_eq!(b.stats().replies, 2);
    assert_eq!(b.flow().outstanding_requests(), 0);
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(
        ha.responses,
        vec![(id1, 1, b"cba".to_vec()), (id2, 2, b"ed".to_vec())]
    );
    assert!(a.invariant_holds() && b.invariant_holds());
    // Longer than the call allows (8 bytes asked, 20 reserved with the
    // header in one 32-byte block): handed to on_request instead.
    hb.len = Some(21);
    let id3 = a.call(b"f", 8, 3).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    b.poll(&mut link.side(1), &mut hb).unwrap();
    assert_eq!(hb.rec.requests.len(), 1);
    assert_eq!(link.writes(1), 1);
    let r = hb.rec.requests[0].0;
    b.reply(&r, b"later").unwrap();
    b.poll(&mut link.side(1), &mut hb).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(ha.responses[2], (id3, 3, b"later".to_vec()));
}

#[test]
fn answer_that_would_wrap_is_handed_over() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Answering::default());
    // Move B's send producer near its ring end with answers of 200 bytes.
    hb.len = Some(200);
    let mut n = 0;
    while b.send_producer() % 4096 + 32 + padded_message_size(200) < 4096 {
        a.call(b"x", 200, n).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
        n += 1;
    }
    assert_eq!(ha.responses.len(), n as usize);
    assert!(hb.rec.requests.is_empty());
    assert_eq!(b.stats().wraps, 0);
    // The next answer would not fit before the ring end.
    a.call(b"y", 200, n).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    b.poll(&mut link.side(1), &mut hb).unwrap();
    assert_eq!(hb.rec.requests.len(), 1, "declined: it would wrap");
    let r = hb.rec.requests[0].0;
    b.reply(&r, &[1; 200]).unwrap();
    assert_eq!(b.stats().wraps, 1);
    b.poll(&mut link.side(1), &mut hb).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(ha.responses.len(), n as usize + 1);
    assert!(a.invariant_holds() && b.invariant_holds());
}

#[test]
fn reply_too_large_refused() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Rec::default());
    a.call(b"q", 20, 0).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    b.poll(&mut link.side(1), &mut hb).unwrap();
    let r = hb.requests[0].0;
    assert_eq!(r.allowance, 64);
    assert_eq!(r.max_response(), 20);
    assert!(matches!(
        b.reply(&r, &[0; 21]),
        Err(ReplyError::TooLarge { .. })
    ));
    b.reply(&r, &[0; 20]).unwrap();
}

#[test]
fn credit_runs_out_and_comes_back() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Rec::default());
    // Initial credit 1024, each call reserves 64.
    let mut n = 0;
    loop {
        match a.call(&[], 0, n) {
            Ok(_) => n += 1,
            Err(e) => {
                assert_eq!(e.kind, CallErrorKind::InsufficientCredit);
                assert!(e.kind.is_retryable());
                assert_eq!(e.user, n);
                break;
            }
        }
    }
    assert_eq!(n, 16);
    a.poll(&mut link.side(0), &mut ha).unwrap();
    b.poll(&mut link.side(1), &mut hb).unwrap();
    for (r, _) in hb.requests.drain(..) {
        b.reply(&r, &[]).unwrap();
    }
    b.poll(&mut link.side(1), &mut hb).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(ha.responses.len(), 16);
    assert!(a.call(&[], 0, 99).is_ok());
}

#[test]
fn ring_full_reads_the_peer_consumer() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Rec::default());
    // B takes the requests in but never sends anything back, so A's
    // piggy-backed view of B's consumer never moves.
    let mut sent = 0;
    let kind = loop {
        match a.call(&[0u8; 200], 0, sent) {
            Ok(_) => sent += 1,
            Err(e) => break e.kind,
        }
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
    };
    assert_eq!(kind, CallErrorKind::RingFull);
    assert_eq!(link.writes(1), 0);
    assert_eq!(a.stats().consumer_reads, 0);
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert_eq!(a.stats().consumer_reads, 1);
    assert!(a.call(&[0u8; 200], 0, sent).is_ok());
    assert!(a.invariant_holds());
}

#[test]
fn busy_transport_keeps_data_for_next_poll() {
    let (mut a, mut b, mut link) = pair(4096);
    let (mut ha, mut hb) = (Rec::default(), Rec::default());
    a.call(b"x", 8, 1).unwrap();
    link.refuse_writes(0, 1);
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert!(a.has_unflushed());
    a.call(b"y", 8, 2).unwrap();
    a.poll(&mut link.side(0), &mut ha).unwrap();
    assert!(!a.has_unflushed());
    b.poll(&mut link.side(1), &mut hb).unwrap();
    assert_eq!(hb.requests.len(), 2);
}

#[test]
fn permanent_errors() {
    let (mut a, _, _) = pair(4096);
    let big = vec![0u8; a.max_payload() as usize + 1];
    assert_eq!(
        a.call(&big, 0, 0).unwrap_err().kind,
        CallErrorKind::MessageTooLarge
    );
    let max = a.max_response_allowance();
    assert_eq!(
        a.call(&[], max + 1, 0).unwrap_err().kind,
        CallErrorKind::AllowanceTooLarge
    );
    assert!(!CallErrorKind::MessageTooLarge.is_retryable());
    let c = Config::new(4096);
    assert!(Endpoint::<()>::new(c, Config::new(8192).local_info()).is_err());
    let mut bad = c;
    bad.max_resp_reservation = 2048;
    assert!(Endpoint::<()>::new(bad, c.local_info()).is_err());
}

fn meta(consumer_pos: u64, credit_grant: u64, message_count: u32) -> [u8; 32] {
    let mut b = [0u8; 32];
    FlowMetaRepr {
        consumer_pos,
        credit_grant,
        message_count,
    }
    .emit(&mut FlowMeta::new_unchecked(&mut b[..]));
    b
}

fn msg(call_id: u32, piggyback: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; padded_message_size(payload.len() as u32) as usize];
    let mut m = Message::new_unchecked(&mut v[..]);
    MessageRepr {
        call_id,
        piggyback,
        len: payload.len() as u32,
    }
    .emit(&mut m);
    m.payload_mut().copy_from_slice(payload);
    v
}

/// Injects `bytes` at offset 0 of side 0's ring and polls side 0.
fn inject(bytes: &[u8]) -> Result<(), RpcError> {
    let (mut a, _, mut link) = pair(4096);
    let mut h = Rec::default();
    link.inject(0, 0, bytes, (bytes.len() / 32) as u32).unwrap();
    let r = a.poll(&mut link.side(0), &mut h);
    if let Err(e) = &r {
        // The connection stays failed.
        assert_eq!(a.poll(&mut link.side(0), &mut h).unwrap_err(), *e);
        assert!(matches!(
            a.call(&[], 0, 0).unwrap_err().kind,
            CallErrorKind::Failed(_)
        ));
    }
    r
}

#[test]
fn garbage_length_past_batch() {
    let mut b = meta(0, 0, 1).to_vec();
    b.extend(msg(1, 2, b"hello"));
    b[32 + 8..32 + 12].copy_from_slice(&1000u32.to_le_bytes());
    assert!(matches!(inject(&b), Err(RpcError::Wire { .. })));
}

#[test]
fn garbage_count_overrun() {
    let mut b = meta(0, 0, 7).to_vec();
    b.extend(msg(1, 2, b"hello"));
    assert!(matches!(
        inject(&b),
        Err(RpcError::Wire {
            err: WireError::CountOverrun { count: 7 },
            ..
        })
    ));
}

#[test]
fn garbage_grant_breaks_invariant() {
    // Peer R starts at 1024; a grant of 1024 makes 2 * 2048 + 32 > 4096.
    assert!(matches!(
        inject(&meta(0, 1024, 0)),
        Err(RpcError::Flow(FlowError::GrantBreaksInvariant { .. }))
    ));
    assert!(inject(&meta(0, 992, 0)).is_ok());
}

#[test]
fn garbage_unknown_call_id() {
    let mut b = meta(0, 0, 1).to_vec();
    b.extend(msg(to_response_id(5), 2, b"hi"));
    assert_eq!(inject(&b), Err(RpcError::UnknownCallId(5)));
}

#[test]
fn garbage_request_over_credit() {
    let mut b = meta(0, 0, 1).to_vec();
    b.extend(msg(1, 64, b"hi")); // reserves 2048 > 1024 granted
    assert!(matches!(
        inject(&b),
        Err(RpcError::Flow(FlowError::RequestOverCredit { .. }))
    ));
}

#[test]
fn garbage_consumer_ahead() {
    assert!(matches!(
        inject(&meta(64, 0, 0)),
        Err(RpcError::Flow(FlowError::BadConsumerPos { .. }))
    ));
}

#[test]
fn garbage_overrun_and_ring_end() {
    let (mut a, _, mut link) = pair(4096);
    let mut h = Rec::default();
    link.inject(0, 0, &[], 129).unwrap();
    assert!(matches!(
        a.poll(&mut link.side(0), &mut h),
        Err(RpcError::Recv(RecvError::Overrun { .. }))
    ));
    // A wrap marker not announced to the ring end.
    let (mut a, _, mut link) = pair(4096);
    link.inject(0, 0, &meta(0, 0, WRAP_MESSAGE_COUNT), 1)
        .unwrap();
    assert_eq!(
        a.poll(&mut link.side(0), &mut h),
        Err(RpcError::ShortWrap(0))
    );
    // A batch ending exactly at the ring end (the strict rule).
    let (mut a, _, mut link) = pair(4096);
    let mut b = meta(0, 0, 1).to_vec();
    b.extend(msg(1, 2, &[0u8; 4096 - 32 - 12]));
    link.inject(0, 0, &b, 128).unwrap();
    assert!(matches!(
        a.poll(&mut link.side(0), &mut h),
        Err(RpcError::BatchCrossesRingEnd { .. })
    ));
}

/// A transport that folds every write (offset, immediate, bytes) into an
/// FNV-1a digest, then hands it to the link.
struct Digest<'a> {
    side: crate::rpc::transport::mem::MemSide<'a>,
    hash: &'a mut u64,
}

impl Digest<'_> {
    fn fold(&mut self, bytes: &[u8]) {
        for &b in bytes {
            *self.hash = (*self.hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
}

impl crate::rpc::transport::Transport for Digest<'_> {
    fn write_with_imm(
        &mut self,
        offset: u64,
        data: &[u8],
        imm: u32,
    ) -> Result<(), crate::rpc::transport::TransportError> {
        let r = self.side.write_with_imm(offset, data, imm);
        if r.is_ok() {
            self.fold(&offset.to_le_bytes());
            self.fold(&imm.to_le_bytes());
            self.fold(data);
        }
        r
    }
    fn poll_imm(&mut self) -> Result<Option<u32>, crate::rpc::transport::TransportError> {
        self.side.poll_imm()
    }
    fn recv_bytes(&self, offset: u64, len: u64) -> &[u8] {
        self.side.recv_bytes(offset, len)
    }
    fn publish_consumer(&mut self, pos: u64) {
        self.side.publish_consumer(pos)
    }
    fn read_remote_consumer(
        &mut self,
    ) -> Result<Option<u64>, crate::rpc::transport::TransportError> {
        self.side.read_remote_consumer()
    }
}

/// Answers during `poll` with `len` bytes when `len` is odd (a pseudo-random
/// choice of the driver), else hands the request over.
struct Golden {
    rec: Rec,
    buf: Vec<u8>,
    len: usize,
}

impl Handler<u32> for Golden {
    fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
        if self.len % 2 == 1 {
            self.buf.clear();
            self.buf.extend(payload.iter().rev());
            self.buf.resize(self.len, 0x3c);
            Some(&self.buf)
        } else {
            None
        }
    }
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        self.rec.on_request(req, payload);
    }
    fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
        self.rec.on_response(call_id, user, payload);
    }
}

/// The bytes on the wire are the memo's and must not change with the
/// endpoint's code: a fixed pseudo-random sequence of calls (depth 1 and
/// bursts, sizes up to a few hundred bytes), answers in `poll`, later
/// replies, polls and flushes, around a 4 KiB ring many times (wrap markers,
/// reads of the peer's consumer, multi-message batches), folded into one digest of every
/// write both sides made. The digest was taken from the endpoint before the
/// single-message intake path and must stay as it is.
#[test]
fn wire_bytes_golden() {
    let (mut a, mut b, mut link) = pair(4096);
    let mut ha = Golden {
        rec: Rec::default(),
        buf: Vec::new(),
        len: 0,
    };
    let mut hb = Golden {
        rec: Rec::default(),
        buf: Vec::new(),
        len: 0,
    };
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut user = 0u32;
    for step in 0..20_000u32 {
        let burst = if next(4) == 0 { 1 + next(16) } else { 1 };
        for _ in 0..burst {
            let len = match next(4) {
                0 => next(700) as usize,
                _ => 32,
            };
            let resp = (next(6) * 40) as u32;
            let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ user) as u8).collect();
            if a.call(&payload, resp, user).is_ok() {
                user += 1;
            }
        }
        hb.len = next(90) as usize;
        let mut poll = |e: &mut Endpoint<u32>, side: usize, h: &mut Golden, hash: &mut u64| {
            let mut t = Digest {
                side: link.side(side),
                hash,
            };
            match step % 3 {
                0 => e.flush(&mut t).unwrap(),
                _ => e.poll(&mut t, h).unwrap(),
            }
            e.poll(&mut t, h).unwrap();
        };
        poll(&mut a, 0, &mut ha, &mut hash);
        poll(&mut b, 1, &mut hb, &mut hash);
        for (r, p) in std::mem::take(&mut hb.rec.requests) {
            let n = match step % 4 {
                0 => r.max_response() as usize,
                _ => (p.len() + step as usize) % (r.max_response() as usize + 1),
            };
            b.reply(&r, &vec![0x5a; n]).unwrap();
        }
        poll(&mut b, 1, &mut hb, &mut hash);
        poll(&mut a, 0, &mut ha, &mut hash);
        if next(64) == 0 {
            // Idle polls: credit batches and reads of the peer's consumer.
            for _ in 0..3 {
                poll(&mut a, 0, &mut ha, &mut hash);
                poll(&mut b, 1, &mut hb, &mut hash);
            }
        }
        if next(16) == 0 {
            // The other direction now and then: b calls, a answers in poll.
            ha.len = 1 + 2 * next(20) as usize;
            let _ = b.call(b"back", 64, user);
            poll(&mut b, 1, &mut hb, &mut hash);
            poll(&mut a, 0, &mut ha, &mut hash);
            poll(&mut b, 1, &mut hb, &mut hash);
        }
    }
    assert!(a.stats().wraps > 10 && b.stats().wraps > 10);
    assert!(a.stats().responses > 15_000);
    assert!(a.stats().consumer_reads > 100);
    assert!(b.stats().requests > 40_000 && b.stats().batches_in < 23_000);
    assert_eq!(hash, 0x3c8b_00de_9846_a494, "digest of every write");
}

/// Answers requests whose payload starts with an odd byte during intake
/// (with the payload reversed), hands the others over; records everything.
#[derive(Default)]
struct OddAnswers {
    rec: Rec,
    buf: Vec<u8>,
}

impl Handler<u32> for OddAnswers {
    fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
        if payload.first().is_some_and(|b| b % 2 == 1) {
            self.buf = payload.iter().rev().copied().collect();
            Some(&self.buf)
        } else {
            None
        }
    }
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        self.rec.on_request(req, payload);
    }
    fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
        self.rec.on_response(call_id, user, payload);
    }
}

/// An endpoint with three calls pending (ids 0-2, 64, 96 and 128 bytes
/// reserved) and its ring flushed, the peer's batch due at receive position 0.
fn with_pending() -> Endpoint<u32> {
    let (mut a, _, mut link) = pair(4096);
    for (i, resp) in [0u32, 40, 60].into_iter().enumerate() {
        a.call(&[i as u8; 8], resp, i as u32).unwrap();
    }
    a.flush(&mut link.side(0)).unwrap();
    a
}

mod sole {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..Default::default() })]
        /// The single-message intake path decides exactly as the general one:
        /// the same result (error or bytes taken), the same handler calls, the
        /// same state after, for batches of one message with every header field
        /// near its limits, and for anything else that reaches `take_batch`.
        #[test]
        fn sole_path_matches_general(
            consumer in prop_oneof![Just(0u64), Just(32), Just(256), 0u64..400],
            grant in prop_oneof![Just(0u64), Just(64), Just(992), Just(1024), 0u64..2100],
            count in prop_oneof![8 => Just(1u32), 1 => 0u32..4, 1 => Just(u32::MAX)],
            call_id in prop_oneof![0u32..4, (0u32..5).prop_map(to_response_id), any::<u32>()],
            piggyback in prop_oneof![0u32..6, any::<u32>()],
            len in prop_oneof![0u32..120, any::<u32>()],
            first in any::<u8>(),
            extra in 0usize..200,
            pos in prop_oneof![Just(0u64), 0u64..128, Just(4096 - 64)],
        ) {
            let mut bytes = meta(consumer, grant, count).to_vec();
            let mut m = vec![0u8; 12 + 120];
            let mut v = Message::new_unchecked(&mut m[..]);
            MessageRepr { call_id, piggyback, len }.emit(&mut v);
            m[12] = first;
            bytes.extend_from_slice(&m);
            bytes.truncate(32 + extra.min(m.len()));
            let pos = pos & !31;
            let (mut a, mut b) = (with_pending(), with_pending());
            let (mut ha, mut hb) = (OddAnswers::default(), OddAnswers::default());
            let ra = a.take_batch(&bytes, pos, &mut ha);
            let rb = b.take_batch_general(&bytes, pos, &mut hb);
            prop_assert_eq!(&ra, &rb);
            prop_assert_eq!(&ha.rec.requests, &hb.rec.requests);
            prop_assert_eq!(&ha.rec.responses, &hb.rec.responses);
            prop_assert_eq!(a.stats(), b.stats());
            prop_assert_eq!(format!("{:?}", a.flow()), format!("{:?}", b.flow()));
            prop_assert_eq!(a.pending_calls(), b.pending_calls());
            prop_assert_eq!(a.send_producer(), b.send_producer());
        }
    }
}

mod deferral {
    use super::*;
    use proptest::prelude::*;

    /// One step of a random schedule on a pair of endpoints.
    #[derive(Debug, Clone)]
    enum Step {
        /// `a` calls with this payload length and response allowance.
        CallA(usize, u32),
        /// `b` calls `a` the other way.
        CallB(usize),
        /// `b` replies to the requests it holds, with this many bytes each.
        ReplyB(usize),
        /// `a` or `b` polls (`true`: `a`).
        Poll(bool),
        /// `a` or `b` flushes.
        Flush(bool),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0usize..200, 0u32..120).prop_map(|(n, r)| Step::CallA(n, r)),
            1 => (0usize..60).prop_map(Step::CallB),
            2 => (0usize..60).prop_map(Step::ReplyB),
            6 => any::<bool>().prop_map(Step::Poll),
            1 => any::<bool>().prop_map(Step::Flush),
        ]
    }

    /// The rule `poll` defers its tail by, written from what is seen
    /// outside it (not from the `took` byte nor the flush's verdict), for
    /// a poll that did not defer the time before:
    ///
    /// * it took responses and no request and found nothing to send
    ///   (answers written during the intake would be something to send,
    ///   but a poll that answered took a request): the tail waits, and so
    ///   does the send;
    /// * or its flush had something to do: a batch open before the poll
    ///   or opened by an answer during it, data left unflushed, or a credit
    ///   batch written.
    fn rule(before: (Stats, bool, bool, bool), after: Stats) -> bool {
        let (stats, deferred, batch_open, unflushed) = before;
        let responses_only = after.responses != stats.responses
            && after.requests == stats.requests
            && !batch_open
            && !unflushed;
        let sent = batch_open
            || unflushed
            || after.replies != stats.replies
            || after.credit_batches != stats.credit_batches;
        !deferred && (responses_only || sent)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..Default::default() })]
        /// Over random schedules of calls both ways, answers during `poll`
        /// (odd first bytes), later replies, polls and flushes around a small
        /// ring, every `poll` defers its tail exactly when the rule says, and
        /// never twice in a row.
        #[test]
        fn poll_defers_by_the_rule(steps in proptest::collection::vec(step(), 1..300)) {
            let (mut a, mut b, mut link) = pair(4096);
            let (mut ha, mut hb) = (OddAnswers::default(), OddAnswers::default());
            let mut user = 0u32;
            for s in steps {
                match s {
                    Step::CallA(n, r) => {
                        let p: Vec<u8> = (0..n).map(|i| (i as u32 + user) as u8).collect();
                        if a.call(&p, r, user).is_ok() {
                            user += 1;
                        }
                    }
                    Step::CallB(n) => {
                        let _ = b.call(&vec![(n % 2) as u8 | 1; n.max(1)], 40, user);
                    }
                    Step::ReplyB(n) => {
                        for (r, _) in std::mem::take(&mut hb.rec.requests) {
                            let n = n.min(r.max_response() as usize);
                            b.reply(&r, &vec![0x5a; n]).unwrap();
                        }
                    }
                    Step::Poll(side_a) => {
                        let (e, h, side) = if side_a { (&mut a, &mut ha, 0) } else { (&mut b, &mut hb, 1) };
                        let before = (e.stats(), e.deferred, e.send.batch_open(), e.has_unflushed());
                        e.poll(&mut link.side(side), h).unwrap();
                        prop_assert_eq!(e.deferred, rule(before, e.stats()));
                    }
                    Step::Flush(side_a) => {
                        let (e, side) = if side_a { (&mut a, 0) } else { (&mut b, 1) };
                        e.flush(&mut link.side(side)).unwrap();
                    }
                }
            }
        }
    }
}

/// The slab hands out ids 0, 1, 2... and reuses the most recently freed
/// first (the call ids on the wire depend on it), refuses when full, and
/// keeps a call pending when its check fails or its id is free or unknown.
#[test]
fn slab_ids_lifo_full_and_failed_checks() {
    let mut s: super::Slab<u32> = super::Slab::new(3);
    assert_eq!(s.insert(10, 64).ok(), Some(0));
    assert_eq!(s.insert(11, 96).ok(), Some(1));
    assert_eq!(s.insert(12, 128).ok(), Some(2));
    assert!(s.is_full());
    assert_eq!(s.insert(13, 64).err(), Some(13));
    let fail = |_| Err(RpcError::UnknownCallId(99));
    assert_eq!(
        s.take_checked(1, fail).err(),
        Some(RpcError::UnknownCallId(99))
    );
    assert_eq!(
        s.take_checked(3, |_| Ok(())).err(),
        Some(RpcError::UnknownCallId(3))
    );
    assert_eq!(
        s.take_checked(1, |r| if r == 96 { Ok(()) } else { fail(r) })
            .ok(),
        Some(11)
    );
    assert_eq!(
        s.take_checked(1, |_| Ok(())).err(),
        Some(RpcError::UnknownCallId(1))
    );
    assert_eq!(s.take_checked(0, |_| Ok(())).ok(), Some(10));
    assert_eq!(s.len, 1);
    assert!(!s.is_full());
    // Freed 1, then 0: 0 comes back first, then 1, then full again.
    assert_eq!(s.insert(20, 64).ok(), Some(0));
    assert_eq!(s.insert(21, 64).ok(), Some(1));
    assert!(s.is_full());
    assert_eq!(
        s.take_checked(2, |r| if r == 128 { Ok(()) } else { fail(r) })
            .ok(),
        Some(12)
    );
    assert_eq!(s.insert(22, 64).ok(), Some(2));
}
