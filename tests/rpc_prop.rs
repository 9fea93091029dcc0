//! Property tests of the RPC endpoint over the in-memory link: random
//! interleavings of call, reply and poll on both sides with random sizes.

use linerate::rpc::transport::mem::MemLink;
use linerate::rpc::{CallErrorKind, Config, Endpoint, Handler, Request};
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};

/// Request payload: tag (4 LE) | wanted response length (4 LE) | filler.
fn request_payload(tag: u32, resp_len: u32, len: usize) -> Vec<u8> {
    let mut v = vec![(tag % 251) as u8; len.max(8)];
    v[..4].copy_from_slice(&tag.to_le_bytes());
    v[4..8].copy_from_slice(&resp_len.to_le_bytes());
    v
}

#[derive(Default)]
struct Side {
    /// Which requests to answer during `poll` (`Handler::answer`): 0 none, 1
    /// all, 2 those with an even tag; the rest wait in `inbox` for `reply`.
    answer_mode: u8,
    /// The response an answer returns.
    answer_buf: Vec<u8>,
    /// Requests answered during `poll`.
    answered_in_poll: u64,
    /// Requests received and not yet answered: token, tag, wanted length.
    inbox: VecDeque<(Request, u32, u32)>,
    /// Calls made: call id -> tag.
    outstanding: HashMap<u32, u32>,
    answered: u64,
    errors: Vec<String>,
}

impl Side {
    /// Tag and wanted response length of a request payload, checked.
    fn parse(&mut self, payload: &[u8]) -> Option<(u32, u32)> {
        if payload.len() < 8 {
            self.errors.push(format!("short request {payload:?}"));
            return None;
        }
        let tag = u32::from_le_bytes(payload[..4].try_into().unwrap());
        let want = u32::from_le_bytes(payload[4..8].try_into().unwrap());
        if payload[8..].iter().any(|&b| b != (tag % 251) as u8) {
            self.errors.push(format!("request {tag} payload corrupted"));
        }
        Some((tag, want))
    }
}

impl Handler<u32> for Side {
    fn answer(&mut self, req: Request, payload: &[u8]) -> Option<&[u8]> {
        let now = match self.answer_mode {
            1 => true,
            2 => payload.len() >= 4 && payload[0] % 2 == 0,
            _ => false,
        };
        if !now {
            return None;
        }
        let (tag, want) = self.parse(payload)?;
        assert!(want <= req.max_response(), "response {want} over {req:?}");
        self.answer_buf = response_payload(tag, want as usize);
        // Counted as answered here; when the endpoint declines the answer (it
        // would wrap the ring), on_request gets the request and undoes this.
        self.answered_in_poll += 1;
        Some(&self.answer_buf)
    }

    fn on_request(&mut self, req: Request, payload: &[u8]) {
        let Some((tag, want)) = self.parse(payload) else {
            return;
        };
        if self.answer_mode == 1 || (self.answer_mode == 2 && tag % 2 == 0) {
            // Offered to `answer` first and declined by the endpoint.
            self.answered_in_poll -= 1;
        }
        self.inbox.push_back((req, tag, want));
    }

    fn on_response(&mut self, call_id: u32, tag: u32, payload: &[u8]) {
        match self.outstanding.remove(&call_id) {
            Some(t) if t == tag => {}
            other => self.errors.push(format!(
                "response to {call_id} with tag {tag}, expected {other:?}"
            )),
        }
        let expect = response_payload(tag, payload.len());
        if payload != expect.as_slice() {
            self.errors.push(format!("response {tag} payload mismatch"));
        }
        self.answered += 1;
    }
}

fn response_payload(tag: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (tag as usize * 7 + i) as u8).collect()
}

#[derive(Debug, Clone)]
enum Op {
    Call { side: usize, len: usize, resp: u32 },
    Reply { side: usize, pick: usize },
    Poll { side: usize },
    Busy { side: usize, n: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 8..200usize, 8..200u32).prop_map(|(side, len, resp)| Op::Call { side, len, resp }),
        3 => (0..2usize, any::<usize>()).prop_map(|(side, pick)| Op::Reply { side, pick }),
        3 => (0..2usize).prop_map(|side| Op::Poll { side }),
        1 => (0..2usize, 1..4u32).prop_map(|(side, n)| Op::Busy { side, n }),
    ]
}

struct World {
    eps: [Endpoint<u32>; 2],
    sides: [Side; 2],
    link: MemLink,
    next_tag: u32,
    max_payload: usize,
    max_resp: u32,
}

impl World {
    fn new(ring: u64) -> Self {
        Self::with_answers(ring, [0, 0])
    }

    /// A world whose sides answer requests during `poll` as `modes` say (see
    /// [`Side::answer_mode`]).
    fn with_answers(ring: u64, modes: [u8; 2]) -> Self {
        let c = Config::new(ring);
        let eps = [
            Endpoint::new(c, c.local_info()).unwrap(),
            Endpoint::new(c, c.local_info()).unwrap(),
        ];
        let max_payload = eps[0].max_payload() as usize;
        let max_resp = eps[0].max_response_allowance();
        World {
            eps,
            sides: modes.map(|answer_mode| Side {
                answer_mode,
                ..Side::default()
            }),
            link: MemLink::new(ring as usize),
            next_tag: 1,
            max_payload,
            max_resp,
        }
    }

    fn call(&mut self, side: usize, len: usize, resp: u32) -> Result<(), CallErrorKind> {
        let tag = self.next_tag;
        let len = len.min(self.max_payload).max(8);
        let resp = resp.min(self.max_resp);
        let payload = request_payload(tag, resp, len);
        match self.eps[side].call(&payload, resp, tag) {
            Ok(id) => {
                self.next_tag += 1;
                assert!(
                    self.sides[side].outstanding.insert(id, tag).is_none(),
                    "call id {id} reused while pending"
                );
                Ok(())
            }
            Err(e) => {
                assert_eq!(e.user, tag);
                Err(e.kind)
            }
        }
    }

    fn reply(&mut self, side: usize, pick: usize) {
        let inbox = &mut self.sides[side].inbox;
        if inbox.is_empty() {
            return;
        }
        let (req, tag, want) = inbox.remove(pick % inbox.len()).unwrap();
        let payload = response_payload(tag, want as usize);
        self.eps[side].reply(&req, &payload).unwrap();
    }

    fn poll(&mut self, side: usize) {
        let r = self.eps[side].poll(&mut self.link.side(side), &mut self.sides[side]);
        r.unwrap();
    }

    fn check(&self) {
        for s in 0..2 {
            assert!(
                self.eps[s].invariant_holds(),
                "invariant broken on side {s}: {:?}",
                self.eps[s]
            );
            assert!(
                self.sides[s].errors.is_empty(),
                "{:?}",
                self.sides[s].errors
            );
            assert_eq!(
                self.eps[s].pending_calls() as usize,
                self.sides[s].outstanding.len()
            );
        }
    }

    /// Both sides keep polling and answering until nothing is pending.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            for s in 0..2 {
                self.poll(s);
                while !self.sides[s].inbox.is_empty() {
                    self.reply(s, 0);
                }
                self.poll(s);
                self.check();
            }
            let idle = (0..2).all(|s| {
                self.sides[s].outstanding.is_empty()
                    && self.sides[s].inbox.is_empty()
                    && !self.eps[s].has_unflushed()
                    && self.link.queued(s) == 0
            });
            if idle {
                return;
            }
        }
        panic!("deadlock: {:?} {:?}", self.eps[0], self.eps[1]);
    }

    /// A call of the largest size succeeds once callers keep polling.
    fn big_call_completes(&mut self, side: usize) {
        let (len, resp) = (self.max_payload, self.max_resp);
        for _ in 0..1000 {
            match self.call(side, len, resp) {
                Ok(()) => {
                    self.drain();
                    return;
                }
                Err(k) => assert!(k.is_retryable(), "{k:?}"),
            }
            for s in 0..2 {
                self.poll(s);
                while !self.sides[s].inbox.is_empty() {
                    self.reply(s, 0);
                }
                self.poll(s);
            }
        }
        panic!(
            "a largest call never got through: {:?} / peer {:?}",
            self.eps[side],
            self.eps[1 - side]
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings(ring_log in 10u32..13, modes in [0u8..3, 0u8..3], ops in prop::collection::vec(op(), 1..400)) {
        replay(1 << ring_log, modes, ops);
    }
}

/// Runs `ops` on a fresh world, then checks every call was answered and that a
/// largest call gets through from either side once both are idle.
fn replay(ring: u64, modes: [u8; 2], ops: Vec<Op>) {
    let mut w = World::with_answers(ring, modes);
    let mut calls = 0u64;
    for op in ops {
        match op {
            Op::Call { side, len, resp } => {
                if w.call(side, len, resp).is_ok() {
                    calls += 1;
                }
            }
            Op::Reply { side, pick } => w.reply(side, pick),
            Op::Poll { side } => w.poll(side),
            Op::Busy { side, n } => w.link.refuse_writes(side, n),
        }
        w.check();
    }
    w.drain();
    assert_eq!(w.sides[0].answered + w.sides[1].answered, calls);
    w.big_call_completes(0);
    w.big_call_completes(1);
    w.check();
}

/// Regression: proptest's minimal failing input for a credit deadlock. The pair
/// ends idle with side 1 holding `R` one grant (32) below `max_R` and a stale
/// view of side 0's consumer: by that view a credit batch would itself shrink
/// the grant to 0, so none was sent and no consumer read was asked for, and side
/// 0 could never make a largest call.
#[test]
fn idle_pair_regains_full_credit() {
    use Op::*;
    let ops = vec![
        Call {
            side: 1,
            len: 8,
            resp: 8,
        },
        Poll { side: 1 },
        Call {
            side: 1,
            len: 21,
            resp: 8,
        },
        Call {
            side: 0,
            len: 8,
            resp: 53,
        },
        Poll { side: 0 },
        Reply { side: 0, pick: 0 },
        Poll { side: 1 },
        Poll { side: 0 },
        Reply { side: 1, pick: 0 },
        Poll { side: 1 },
        Poll { side: 0 },
        Call {
            side: 1,
            len: 117,
            resp: 8,
        },
        Call {
            side: 0,
            len: 8,
            resp: 149,
        },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Poll { side: 0 },
        Poll { side: 1 },
        Reply { side: 1, pick: 0 },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Poll { side: 1 },
        Poll { side: 0 },
        Poll { side: 1 },
        Call {
            side: 0,
            len: 8,
            resp: 181,
        },
        Call {
            side: 1,
            len: 8,
            resp: 8,
        },
        Poll { side: 0 },
        Poll { side: 1 },
        Busy { side: 1, n: 2 },
        Reply { side: 1, pick: 0 },
        Reply { side: 0, pick: 0 },
        Poll { side: 1 },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Call {
            side: 0,
            len: 8,
            resp: 8,
        },
        Reply { side: 0, pick: 0 },
    ];
    replay(1 << 10, [2, 0], ops);
}

/// Calls of pseudo-random sizes, one batch each, until wrap markers have been
/// written at every 32-byte offset where one can occur (from 3/4 of the ring on,
/// since the largest message with its metadata is a quarter of the ring); every
/// call is answered.
#[test]
fn wraps_at_every_offset() {
    for (ring, modes) in [
        (512u64, [0, 0]),
        (1024, [0, 0]),
        (4096, [0, 0]),
        (512, [1, 2]),
        (1024, [2, 1]),
        (4096, [1, 1]),
    ] {
        let mut w = World::with_answers(ring, modes);
        let expect: std::collections::BTreeSet<u64> = (ring * 3 / 4..ring).step_by(32).collect();
        let mut offsets = std::collections::BTreeSet::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut calls = 0;
        while !expect.is_subset(&offsets) {
            calls += 1;
            assert!(calls < 100_000, "wrapped only at {offsets:?}");
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = 8 + (x % w.max_payload as u64) as usize;
            let resp = (x >> 32) as u32 % (w.max_resp + 1);
            let side = (x >> 20) as usize & 1;
            let before = w.eps[side].stats().wraps;
            let pos = w.eps[side].send_producer() % ring;
            if w.call(side, len, resp).is_err() {
                w.drain();
                continue;
            }
            if w.eps[side].stats().wraps > before {
                offsets.insert(pos);
            }
            w.drain();
        }
        assert_eq!(
            w.sides[0].answered + w.sides[1].answered,
            w.eps[0].stats().calls + w.eps[1].stats().calls
        );
        for (s, &mode) in modes.iter().enumerate() {
            if mode != 0 {
                assert!(
                    w.sides[s].answered_in_poll > 0,
                    "side {s} never answered in poll"
                );
            }
            if mode == 1 {
                // All but those declined because they would wrap.
                let requests = w.eps[s].stats().requests;
                assert!(w.sides[s].answered_in_poll + w.eps[s].stats().wraps >= requests);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Garbage from the peer fails the connection or is taken; never a panic,
    /// never a write outside the ring.
    #[test]
    fn garbage_never_panics(blocks in prop::collection::vec(any::<[u8; 32]>(), 1..40), imms in prop::collection::vec(0u32..64, 1..6)) {
        let ring = 1024u64;
        let mut w = World::new(ring);
        let _ = w.call(0, 8, 8);
        let _ = w.call(0, 8, 8);
        w.poll(0);
        let bytes: Vec<u8> = blocks.concat();
        let bytes = &bytes[..bytes.len().min(ring as usize)];
        for imm in imms {
            w.link.inject(0, 0, bytes, imm).unwrap();
        }
        let mut side = Side::default();
        let _ = w.eps[0].poll(&mut w.link.side(0), &mut side);
        if w.eps[0].failure().is_none() {
            prop_assert!(w.eps[0].invariant_holds());
        }
    }
}
