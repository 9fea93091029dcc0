//! RPC benchmark driver (`harness = false`).
//!
//! * `rpc serve ...` / `rpc bench ...`: the same arguments as `linerate rpc`, so
//!   scripts can use this binary before the subcommand is wired into `linerate`.
//! * Run by `cargo bench --bench rpc` (no subcommand): starts a server child pinned
//!   to core 0, benches from core 1 at depths 1 and 256 with 32-byte messages,
//!   and prints the report next to the ping-pong baseline.
//! * `rpc raw server|client|local PATH LEN [SLOTS] [plain] [vary] [token]`: the shared-memory
//!   transport alone, one write-with-immediate of LEN bytes echoed back (server
//!   on core 0 creating the region with SLOTS completion slots, default 8;
//!   client on core 1), to separate transport from endpoint cost; `plain`
//!   waits without the transport's waiting prefetches; `vary` changes three
//!   words per write as the endpoint's batches do; `token` creates the region
//!   with the token line in use (`serve --token-line`); `local` runs both
//!   sides in one thread, echoing, and prints the software's time per write
//!   and receipt. Both print the share of writes that came through the
//!   token line.
//! * `rpc local`: the endpoint's software cost alone, both sides in one thread.
//! * `rpc local-shm [ROUNDS] [token]`: the same over the shared-memory transport, as
//!   `rpc serve` and `rpc bench` run it at depth 1 (the server answers during
//!   `poll`; the client calls, flushes and polls until the response): for
//!   instruction counts under `valgrind --tool=callgrind` (one thread, so no
//!   cache-line transfers and no spin); `token`: with the token line in use.
//! * `rpc local-phases [ROUNDS]`: the same with each step of a depth-1 round
//!   trip in a function of its own (`phase_call`: the client's call and flush;
//!   `phase_serve`: the server's poll; `phase_take`: the client's poll that
//!   takes the response; `phase_idle`: its next poll, which runs what the
//!   first deferred; `phase_idle_serve`: the server's next poll, which runs
//!   what its answering poll deferred, as `rpc serve` spinning on `poll` does
//!   while the client takes the response), for callgrind's inclusive
//!   per-function counts (`*phase_idle*` takes both idle polls).
//! * `rpc ep PATH`: depth-1 round trips against a running `rpc serve` with a
//!   minimal client loop (core 1), to separate the bench's own bookkeeping.
//! * `rpc lines [REPS]`: the cache-line floor of a round trip, two threads on
//!   cores 0 and 1: one word on one line both ways (the bench's ping-pong), one
//!   word on a line of its own each way (the bench's two-line ping-pong), rings
//!   of 1, 4, 16 and 256 one-line slots each way (a write moves its own line, as the shm
//!   transport's completion slots do), two lines per slot each way (an inline
//!   96-byte batch), and the answer written into the line the question came in.

use clap::Parser;
use linerate::cli::rpc::{self as cli, RpcArgs};
use std::process::Command;

#[derive(Debug, Parser)]
#[command(name = "rpc")]
struct Top {
    #[command(flatten)]
    rpc: RpcArgs,
}

/// Software cost alone: both endpoints in this thread over the in-memory link,
/// one call, poll, reply, poll, poll per round trip (no cache-line transfers).
fn local(ring: u64, depth: u32, rounds: u32) {
    use linerate::rpc::transport::mem::MemLink;
    use linerate::rpc::{Config, Endpoint, Handler, Request};
    struct S(Vec<Request>, u64);
    impl Handler<u64> for S {
        fn on_request(&mut self, r: Request, _: &[u8]) {
            self.0.push(r);
        }
        fn on_response(&mut self, _: u32, _: u64, _: &[u8]) {
            self.1 += 1;
        }
    }
    let c = Config::new(ring);
    let mut a: Endpoint<u64> = Endpoint::new(c, c.local_info()).unwrap();
    let mut b: Endpoint<u64> = Endpoint::new(c, c.local_info()).unwrap();
    let mut link = MemLink::new(c.ring_size as usize);
    let (mut ha, mut hb) = (
        S(Vec::with_capacity(4096), 0),
        S(Vec::with_capacity(4096), 0),
    );
    let msg = [0u8; 32];
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        while a.pending_calls() < depth {
            if a.call(&msg, 32, 0).is_err() {
                break;
            }
        }
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        for r in hb.0.drain(..) {
            b.reply(&r, &msg).unwrap();
        }
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64;
    println!(
        "local (one thread, both sides): ring {ring}: depth {depth}: {:.1} ns per RPC, {:.1} M RPC/s",
        ns / ha.1 as f64,
        ha.1 as f64 / ns * 1e3
    );
}

/// Depth-1 round trips over the shm transport in one thread (see the module doc).
fn local_shm(rounds: u64, phases: bool, token: bool) {
    use linerate::rpc::transport::shm::ShmTransport;
    use linerate::rpc::{Config, Endpoint, Handler, Request};
    /// Answers in `poll`, or keeps the request when the answer would wrap.
    struct Server([u8; 32], Vec<Request>);
    impl Handler<()> for Server {
        fn answer(&mut self, _: Request, _: &[u8]) -> Option<&[u8]> {
            Some(&self.0)
        }
        fn on_request(&mut self, r: Request, _: &[u8]) {
            self.1.push(r);
        }
        fn on_response(&mut self, _: u32, _: (), _: &[u8]) {}
    }
    struct Client(u64);
    impl Handler<u64> for Client {
        fn on_request(&mut self, _: Request, _: &[u8]) {}
        fn on_response(&mut self, _: u32, _: u64, _: &[u8]) {
            self.0 += 1;
        }
    }
    let path = std::env::temp_dir().join(format!("linerate-local-shm-{}", std::process::id()));
    let ring = 1u64 << 20;
    let mut ts = ShmTransport::create_opts(&path, ring, 8, token).unwrap();
    let mut tc = ShmTransport::open(&path).unwrap();
    let c = Config::new(ring);
    ts.publish_info(&c.local_info());
    tc.publish_info(&c.local_info());
    let mut s: Endpoint<()> = Endpoint::new(c, tc.peer_info().unwrap()).unwrap();
    let mut cl: Endpoint<u64> = Endpoint::new(c, ts.peer_info().unwrap()).unwrap();
    let (mut hs, mut hc) = (Server([0x5a; 32], Vec::with_capacity(16)), Client(0));
    let msg = [0xa5u8; 32];
    let start = std::time::Instant::now();
    if phases {
        // As `rpc bench` runs it: the response is taken in a poll of its own
        // and the deferred rest in the next, idle, poll; each step in a
        // function of its own for callgrind's per-function counts.
        #[inline(never)]
        fn phase_call(cl: &mut Endpoint<u64>, tc: &mut ShmTransport, msg: &[u8], i: u64) {
            cl.call(msg, 32, i).unwrap();
            cl.flush(tc).unwrap();
        }
        #[inline(never)]
        fn phase_serve(s: &mut Endpoint<()>, ts: &mut ShmTransport, hs: &mut Server) {
            s.poll(ts, hs).unwrap();
            // An answer that would wrap the ring is written after the poll
            // (once per lap of the ring).
            for r in hs.1.drain(..) {
                s.reply(&r, &hs.0).unwrap();
                s.flush(ts).unwrap();
            }
        }
        #[inline(never)]
        fn phase_take(cl: &mut Endpoint<u64>, tc: &mut ShmTransport, hc: &mut Client) {
            cl.poll(tc, hc).unwrap();
        }
        #[inline(never)]
        fn phase_idle(cl: &mut Endpoint<u64>, tc: &mut ShmTransport, hc: &mut Client) {
            cl.poll(tc, hc).unwrap();
        }
        #[inline(never)]
        fn phase_idle_serve(s: &mut Endpoint<()>, ts: &mut ShmTransport, hs: &mut Server) {
            s.poll(ts, hs).unwrap();
        }
        for i in 0..rounds {
            phase_call(&mut cl, &mut tc, &msg, i);
            phase_serve(&mut s, &mut ts, &mut hs);
            phase_take(&mut cl, &mut tc, &mut hc);
            while hc.0 <= i {
                // Only around a wrap (the client's poll takes a wrap marker
                // and the response in one, but the server may need a second).
                phase_serve(&mut s, &mut ts, &mut hs);
                phase_take(&mut cl, &mut tc, &mut hc);
            }
            // The server spins on `poll` while the client takes the response.
            phase_idle_serve(&mut s, &mut ts, &mut hs);
            phase_idle(&mut cl, &mut tc, &mut hc);
        }
    }
    for i in 0..if phases { 0 } else { rounds } {
        cl.call(&msg, 32, i).unwrap();
        cl.flush(&mut tc).unwrap();
        while hc.0 <= i {
            s.poll(&mut ts, &mut hs).unwrap();
            for r in hs.1.drain(..) {
                s.reply(&r, &hs.0).unwrap();
            }
            cl.poll(&mut tc, &mut hc).unwrap();
        }
    }
    let ns = start.elapsed().as_nanos() as f64;
    println!(
        "local-shm (one thread, both sides): {rounds} depth-1 RPCs, {:.1} ns per RPC; writes through the token line: {} of the client's, {} of the server's",
        ns / rounds as f64,
        ts.via_token(),
        tc.via_token()
    );
    drop((ts, tc));
    let _ = std::fs::remove_file(&path);
}

/// Transport alone: a write-with-immediate echoed back, no endpoint. The
/// server creates the region with `slots` completion slots; with `plain`
/// both sides wait with `poll_imm_more` (no waiting prefetches). The client
/// records round trip n while round trip n + 1 is in flight, as `rpc bench`
/// does, so only the clock read is between seeing the echo and writing again.
fn raw(
    role: &str,
    path: &str,
    core: usize,
    len: usize,
    slots: u64,
    (plain, vary, token): (bool, bool, bool),
) {
    use linerate::rpc::transport::shm::ShmTransport;
    use linerate::rpc::Transport;
    let id = core_affinity::get_core_ids()
        .unwrap()
        .into_iter()
        .find(|c| c.id == core)
        .unwrap();
    core_affinity::set_for_current(id);
    let mut data = vec![7u8; len];
    // With `vary`, three words change from one write to the next, as in the
    // endpoint's batches (consumer position, call id, payload sequence).
    let mut stamp = 0u64;
    let mut next = move |d: &mut [u8]| {
        if vary {
            stamp += 1;
            for o in [0, 32, 48] {
                if let Some(w) = d.get_mut(o..o + 8) {
                    w.copy_from_slice(&stamp.to_le_bytes());
                }
            }
        }
    };
    let mut off = 0u64;
    let ring = 65536u64;
    let poll = |t: &mut ShmTransport| {
        if plain {
            t.poll_imm_more().unwrap()
        } else {
            t.poll_imm().unwrap()
        }
    };
    if role == "local" {
        // Both sides in this thread: the transport's software alone, per
        // write and its receipt (no cache-line transfers, no wait).
        let mut a =
            ShmTransport::create_opts(std::path::Path::new(path), ring, slots, token).unwrap();
        let mut b = ShmTransport::open(std::path::Path::new(path)).unwrap();
        // Echoed, as the client and server do, so the writes take the
        // token line as theirs do.
        let n = 10_000_000u64;
        let start = std::time::Instant::now();
        for _ in 0..n {
            next(&mut data);
            a.write_with_imm(off, &data, 4).unwrap();
            std::hint::black_box(b.poll_imm().unwrap());
            std::hint::black_box(b.recv_bytes(off, len as u64));
            next(&mut data);
            b.write_with_imm(off, &data, 4).unwrap();
            std::hint::black_box(a.poll_imm().unwrap());
            std::hint::black_box(a.recv_bytes(off, len as u64));
            off = (off + 128) % ring;
        }
        println!(
            "raw transport, one thread: {len}-byte write and its receipt {:.2} ns ({:.1} % in the token line)",
            start.elapsed().as_nanos() as f64 / (2 * n) as f64,
            (a.via_token() + b.via_token()) as f64 / (2 * n) as f64 * 100.0
        );
        let _ = std::fs::remove_file(path);
        return;
    }
    if role == "server" {
        let mut t =
            ShmTransport::create_opts(std::path::Path::new(path), ring, slots, token).unwrap();
        let mut n = 0u64;
        while n < 3_000_000 {
            if let Some(imm) = poll(&mut t) {
                std::hint::black_box(t.recv_bytes(off, len as u64));
                next(&mut data);
                t.write_with_imm(off, &data, imm).unwrap();
                off = (off + 128) % ring;
                n += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let _ = std::fs::remove_file(path);
    } else {
        let mut t = loop {
            if let Ok(t) = ShmTransport::open(std::path::Path::new(path)) {
                break t;
            }
        };
        let mut hist = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        let mut prev = std::time::Instant::now();
        let mut now = prev;
        for i in 0..3_000_000u64 {
            next(&mut data);
            t.write_with_imm(off, &data, 4).unwrap();
            if i > 0 {
                hist.record((now - prev).as_nanos() as u64).unwrap();
                prev = now;
            }
            while poll(&mut t).is_none() {}
            std::hint::black_box(t.recv_bytes(off, len as u64));
            off = (off + 128) % ring;
            now = std::time::Instant::now();
        }
        println!(
            "raw transport echo of {len} bytes ({slots} slots{}{}, {:.1} % of echoes in the token line): RTT p10 {} p50 {} p90 {} p99 {} ns",
            if plain { ", no waiting prefetch" } else { "" },
            if vary { ", 3 words changing" } else { "" },
            t.via_token() as f64 / 3e4,
            hist.value_at_quantile(0.1),
            hist.value_at_quantile(0.5),
            hist.value_at_quantile(0.9),
            hist.value_at_quantile(0.99)
        );
    }
}

/// Endpoint round trips against `rpc serve` with a minimal client loop: no clock
/// per round trip, only the total time (to separate the bench's bookkeeping).
fn ep_client(path: &str, n: u64) {
    use linerate::rpc::transport::shm::ShmTransport;
    use linerate::rpc::{Config, Endpoint, Handler, Request};
    use std::sync::atomic::Ordering;
    struct H(u64);
    impl Handler<()> for H {
        fn on_request(&mut self, _: Request, _: &[u8]) {}
        fn on_response(&mut self, _: u32, _: (), _: &[u8]) {
            self.0 += 1;
        }
    }
    let id = core_affinity::get_core_ids()
        .unwrap()
        .into_iter()
        .find(|c| c.id == 1)
        .unwrap();
    core_affinity::set_for_current(id);
    let mut t = loop {
        if let Ok(t) = ShmTransport::open(std::path::Path::new(path)) {
            break t;
        }
    };
    let config = Config::new(t.ring_size());
    t.publish_info(&config.local_info());
    let peer = loop {
        if let Some(p) = t.peer_info() {
            break p;
        }
    };
    let mut ep: Endpoint<()> = Endpoint::new(config, peer).unwrap();
    t.control(1).store(32, Ordering::Relaxed);
    t.control(0).store(2, Ordering::Release);
    let mut h = H(0);
    let msg = [0u8; 32];
    for round in 0..2 {
        let mut hist = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        let mut prev = std::time::Instant::now();
        for i in 0..n {
            ep.call(&msg, 32, ()).unwrap();
            ep.flush(&mut t).unwrap();
            while h.0 <= i + round * n {
                ep.poll(&mut t, &mut h).unwrap();
            }
            let now = std::time::Instant::now();
            hist.record((now - prev).as_nanos() as u64).unwrap();
            prev = now;
        }
        println!(
            "endpoint round trip, minimal loop: p50 {} ns p10 {} ns",
            hist.value_at_quantile(0.5),
            hist.value_at_quantile(0.1)
        );
    }
    t.control(0).store(3, Ordering::Release);
}

/// Cache-line round trips between two threads (see the module doc).
fn lines(reps: usize) {
    use std::sync::atomic::{AtomicU64, Ordering::*};
    use std::sync::Arc;
    #[repr(align(128))]
    struct Slot([AtomicU64; 16]);
    #[derive(Clone, Copy)]
    struct Pattern {
        name: &'static str,
        /// Slots per direction; 0: one word on one line, both ways.
        slots: usize,
        /// Lines written per message (1 or 2).
        lines: usize,
        /// The answer goes into the slot the question came in.
        same: bool,
        /// Dependent arithmetic steps the server does between reading the
        /// question and answering (an endpoint's work: about 1 ns each).
        work: u64,
    }
    let send = |s: &Slot, tag: u64, lines: usize| {
        if lines == 0 {
            s.0[0].store(tag, Release);
            return;
        }
        if lines == 2 {
            for w in &s.0[9..15] {
                w.store(tag, Relaxed);
            }
            s.0[8].store(tag, Release);
        }
        for w in &s.0[1..7] {
            w.store(tag, Relaxed);
        }
        s.0[0].store(tag, Release);
    };
    let recv = |s: &Slot, tag: u64, lines: usize| {
        while s.0[0].load(Acquire) != tag {
            #[cfg(target_arch = "x86_64")]
            if lines == 2 {
                // As the transport does: ask for the second line while waiting.
                // SAFETY: SSE is baseline on x86_64; a prefetch is a hint.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        s.0[8].as_ptr() as *const i8,
                    )
                };
            }
        }
        if lines == 0 {
            return;
        }
        let mut sum = s.0[1..7].iter().map(|w| w.load(Relaxed)).sum::<u64>();
        if lines == 2 {
            while s.0[8].load(Acquire) != tag {}
            sum += s.0[9..15].iter().map(|w| w.load(Relaxed)).sum::<u64>();
        }
        std::hint::black_box(sum);
    };
    let pin = |core: usize| {
        core_affinity::set_for_current(core_affinity::CoreId { id: core });
    };
    let run = |p: Pattern, n: u64| -> u64 {
        let slots = p.slots.max(1);
        let ring = |_| {
            (0..slots)
                .map(|_| Slot(Default::default()))
                .collect::<Vec<_>>()
        };
        let rings: Arc<[Vec<Slot>; 2]> = Arc::new([ring(0), ring(1)]);
        let r2 = rings.clone();
        let server = std::thread::spawn(move || {
            pin(0);
            let (ask, ans) = (&r2[0], if p.same { &r2[0] } else { &r2[1] });
            for k in 0..n {
                if p.slots == 0 {
                    let w = &ask[0].0[0];
                    while w.load(Acquire) != 2 * k + 1 {
                        std::hint::spin_loop();
                    }
                    w.store(2 * k + 2, Release);
                    continue;
                }
                let i = k as usize % slots;
                recv(&ask[i], 2 * k + 1, p.lines);
                let mut x = k;
                for _ in 0..p.work {
                    x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
                }
                std::hint::black_box(x);
                send(&ans[i], 2 * k + 2, p.lines);
            }
        });
        pin(1);
        let (ask, ans) = (&rings[0], if p.same { &rings[0] } else { &rings[1] });
        let mut rtt = Vec::with_capacity(n as usize);
        let mut prev = std::time::Instant::now();
        for k in 0..n {
            if p.slots == 0 {
                let w = &ask[0].0[0];
                w.store(2 * k + 1, Release);
                while w.load(Acquire) != 2 * k + 2 {
                    std::hint::spin_loop();
                }
            } else {
                let i = k as usize % slots;
                send(&ask[i], 2 * k + 1, p.lines);
                recv(&ans[i], 2 * k + 2, p.lines);
            }
            let now = std::time::Instant::now();
            rtt.push((now - prev).as_nanos() as u64);
            prev = now;
        }
        server.join().unwrap();
        let tail = &mut rtt[n as usize / 10..];
        tail.sort_unstable();
        tail[tail.len() / 2]
    };
    let patterns = [
        Pattern {
            name: "one word on one line, both ways (ping-pong)",
            slots: 0,
            lines: 1,
            same: false,
            work: 0,
        },
        Pattern {
            name: "256 one-line slots each way",
            slots: 256,
            lines: 1,
            same: false,
            work: 0,
        },
        Pattern {
            name: "256 two-line slots each way (inline 96 B)",
            slots: 256,
            lines: 2,
            same: false,
            work: 0,
        },
        Pattern {
            name: "answer in the question's line, 256 slots",
            slots: 256,
            lines: 1,
            same: true,
            work: 0,
        },
        Pattern {
            name: "answer in the question's line, 8 slots",
            slots: 8,
            lines: 1,
            same: true,
            work: 0,
        },
        Pattern {
            name: "answer in the question's line, 1 slot",
            slots: 1,
            lines: 1,
            same: true,
            work: 0,
        },
        Pattern {
            name: "answer in the question's line, 1 slot, work 30",
            slots: 1,
            lines: 1,
            same: true,
            work: 30,
        },
        Pattern {
            name: "1 one-line slot each way, work 30",
            slots: 1,
            lines: 1,
            same: false,
            work: 30,
        },
        Pattern {
            name: "answer in the question's line, 1 slot, work 100",
            slots: 1,
            lines: 1,
            same: true,
            work: 100,
        },
        Pattern {
            name: "1 one-line slot each way, work 100",
            slots: 1,
            lines: 1,
            same: false,
            work: 100,
        },
        Pattern {
            name: "answer in the question's two lines",
            slots: 256,
            lines: 2,
            same: true,
            work: 0,
        },
        Pattern {
            name: "one word on its own line each way",
            slots: 1,
            lines: 0,
            same: false,
            work: 0,
        },
        Pattern {
            name: "1 one-line slot each way",
            slots: 1,
            lines: 1,
            same: false,
            work: 0,
        },
        Pattern {
            name: "4 one-line slots each way",
            slots: 4,
            lines: 1,
            same: false,
            work: 0,
        },
        Pattern {
            name: "16 one-line slots each way",
            slots: 16,
            lines: 1,
            same: false,
            work: 0,
        },
    ];
    let mut p50s = vec![Vec::new(); patterns.len()];
    for rep in 0..reps {
        for (i, p) in patterns.iter().enumerate() {
            let p50 = run(*p, 300_000);
            println!("rep {rep}: {:45} RTT p50 {p50} ns", p.name);
            p50s[i].push(p50);
        }
    }
    let med = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let base = med(&mut p50s[0]) as f64;
    println!("medians over {reps} alternating reps:");
    for (p, v) in patterns.iter().zip(p50s.iter_mut()) {
        let m = med(v);
        println!("  {:45} RTT p50 {m:5} ns  {:.2}x", p.name, m as f64 / base);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 2 && args[1] == "lines" {
        lines(args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5));
        return;
    }
    if args.len() >= 3 && args[1] == "ep" {
        ep_client(&args[2], 1_000_000);
        return;
    }
    if args.len() >= 4 && args[1] == "raw" {
        let len: usize = args[4].parse().unwrap();
        let slots = args.get(5).and_then(|s| s.parse().ok()).unwrap_or(8);
        raw(
            &args[2],
            &args[3],
            if args[2] == "server" { 0 } else { 1 },
            len,
            slots,
            (
                args.iter().any(|a| a == "plain"),
                args.iter().any(|a| a == "vary"),
                args.iter().any(|a| a == "token"),
            ),
        );
        return;
    }
    if args.len() >= 2 && (args[1] == "local-shm" || args[1] == "local-phases") {
        local_shm(
            args.get(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(1_000_000),
            args[1] == "local-phases",
            args.iter().any(|a| a == "token"),
        );
        return;
    }
    if args.iter().any(|a| a == "local") {
        for ring in [1 << 16, 1 << 20] {
            local(ring, 1, 2_000_000);
            local(ring, 256, 20_000);
        }
        return;
    }
    if args.iter().skip(1).any(|a| a == "serve" || a == "bench") {
        let top = Top::parse_from(args.iter().filter(|a| a.as_str() != "--bench"));
        std::process::exit(linerate::cli::finish("linerate rpc", cli::run(&top.rpc)).into());
    }
    let name = format!("linerate-rpc-bench-{}", std::process::id());
    let shm = linerate::rpc::transport::shm::default_path(&name);
    let shm = shm.display().to_string();
    let exe = std::env::current_exe().expect("current_exe");
    let mut server = Command::new(exe)
        .args(["serve", "--shm", &shm, "--core", "0"])
        .spawn()
        .expect("spawn server");
    let top = Top::parse_from([
        "rpc",
        "bench",
        "--shm",
        &shm,
        "--core",
        "1",
        "--depth",
        "1,256",
        "--duration",
        "2s",
    ]);
    let code = linerate::cli::finish("linerate rpc", cli::run(&top.rpc));
    let ok = server.wait().map(|s| s.success()).unwrap_or(false);
    std::process::exit(if code == 0 && ok { 0 } else { 1 });
}
