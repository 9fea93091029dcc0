//! `rpc serve`: the bench's server side. It creates the shared-memory
//! region, answers the ping-pongs and the calls with [`ServerHandler`], and
//! follows the phases the bench sets in the region's control words until it
//! says done (or goes quiet for `--timeout`).

use super::echo::{self, EchoSide};
use super::{
    await_peer, check_fill, pin, region_paths, BenchResult, CTL_ECHO_READY, CTL_MSG_SIZE,
    CTL_PHASE, CTL_RESP_SIZE, IDLE_CHECK_SPINS, PHASE_DONE, PHASE_ECHO, PHASE_FLAGS,
    PHASE_PINGPONG, REQ_FILL, RESP_FILL, SEQ_BYTES,
};
use crate::rpc::endpoint::{Config, Endpoint, Handler, Request};
use crate::rpc::transport::shm::ShmTransport;
use crate::rpc::transport::Transport;
use crate::time::Clock;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What `rpc serve` does (`linerate rpc serve`'s arguments).
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Region file (default: linerate-rpc on the hugetlbfs mount if there is one
    /// and the mapping succeeds there, else /dev/shm/linerate-rpc).
    pub shm: Option<PathBuf>,
    /// Ring size (a power of two).
    pub ring: u64,
    /// Completion slots per side of the shared-memory region (a power of two).
    pub comp_slots: u64,
    /// Use the region's token line ([`ShmTransport::create_opts`]).
    pub token_line: bool,
    /// Core to pin to.
    pub core: Option<usize>,
    /// Give up when no client connects, or it goes quiet, for this long.
    pub timeout: Duration,
    /// Answer requests after `poll` returns (`reply` for each, then `flush`)
    /// instead of during it (`Handler::answer`, the default).
    pub reply_later: bool,
}

/// The bench server's handler: answers every request with `resp_size` bytes
/// (at most what the request allows) during `poll` when `answer_now`, else
/// keeps the requests for `reply` after it. It checks every request's
/// payload (its length too when `expect_len` is known) and echoes the
/// request's sequence number at the start of the response.
pub(crate) struct ServerHandler {
    requests: Vec<(Request, [u8; SEQ_BYTES])>,
    answer_now: bool,
    resp: Vec<u8>,
    resp_size: usize,
    expect_len: Option<usize>,
    /// The first request that was not what the bench sends.
    bad: Option<String>,
}

impl ServerHandler {
    pub(crate) fn new(capacity: u32, answer_now: bool) -> Self {
        ServerHandler {
            requests: Vec::with_capacity(capacity as usize),
            answer_now,
            resp: vec![RESP_FILL; 1 << 16],
            resp_size: 0,
            expect_len: None,
            bad: None,
        }
    }

    /// Sets the response size (growing the response buffer if needed).
    pub(crate) fn set_resp_size(&mut self, n: usize) {
        if n > self.resp.len() {
            self.resp.resize(n, RESP_FILL);
        }
        self.resp_size = n;
    }

    /// The request payload length every request must have.
    pub(crate) fn expect_len(&mut self, n: usize) {
        self.expect_len = Some(n);
    }

    /// An error if a request was not what the bench sends.
    pub(crate) fn check(&self) -> BenchResult<()> {
        match &self.bad {
            Some(why) => Err((1, why.clone())),
            None => Ok(()),
        }
    }

    /// Checks a request; returns the bytes to echo.
    #[inline]
    fn take(&mut self, payload: &[u8]) -> [u8; SEQ_BYTES] {
        let mut echo = [RESP_FILL; SEQ_BYTES];
        let seq = payload.get(..SEQ_BYTES);
        if let Some(head) = seq {
            echo.copy_from_slice(head);
        }
        if self.bad.is_none() {
            let len_ok = match self.expect_len {
                Some(n) if n != payload.len() => {
                    Err(format!("{} bytes, expected {n}", payload.len()))
                }
                _ => Ok(()),
            };
            if let Err(why) =
                len_ok.and_then(|()| check_fill(payload, seq.map_or(0, <[u8]>::len), REQ_FILL))
            {
                self.bad = Some(format!("a request arrived damaged: {why}"));
            }
        }
        echo
    }

    fn response(&mut self, req: &Request, echo: &[u8; SEQ_BYTES]) -> &[u8] {
        let n = self.resp_size.min(req.max_response() as usize);
        if n >= SEQ_BYTES {
            self.resp[..SEQ_BYTES].copy_from_slice(echo);
        }
        &self.resp[..n]
    }

    /// Replies to the requests left for after `poll` and flushes.
    pub(crate) fn reply_later<U, T: Transport + ?Sized>(
        &mut self,
        ep: &mut Endpoint<U>,
        t: &mut T,
    ) -> BenchResult<()> {
        if self.requests.is_empty() {
            return Ok(());
        }
        for i in 0..self.requests.len() {
            let (req, echo) = self.requests[i];
            ep.reply(&req, self.response(&req, &echo))
                .map_err(|e| (1, e.to_string()))?;
        }
        self.requests.clear();
        ep.flush(t).map_err(|e| (1, e.to_string()))
    }
}

impl Handler<()> for ServerHandler {
    #[inline]
    fn answer(&mut self, req: Request, payload: &[u8]) -> Option<&[u8]> {
        if self.answer_now {
            let echo = self.take(payload);
            Some(self.response(&req, &echo))
        } else {
            None
        }
    }
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        // A request `answer` took but could not answer in place comes here
        // too; checking it twice is harmless.
        let echo = self.take(payload);
        self.requests.push((req, echo));
    }
    fn on_response(&mut self, _call_id: u32, _user: (), _payload: &[u8]) {}
}

/// Runs the server side until the bench says it is done. Returns calls answered.
pub fn serve(args: &ServeConfig) -> BenchResult<u64> {
    pin(args.core)?;
    let config = Config::new(args.ring);
    let mut created = Err((1, "no region path".to_string()));
    for path in region_paths(&args.shm) {
        created = ShmTransport::create_opts(&path, args.ring, args.comp_slots, args.token_line)
            .map(|t| (t, path))
            .map_err(|e| (1, e.to_string()));
        if created.is_ok() {
            break;
        }
    }
    let (mut t, path) = created?;
    let _cleanup = RemoveOnDrop(path.clone());
    // The transport echo's region, made before this side's info is out so
    // the bench finds it; without it the bench measures everything else.
    let echo_path = echo::echo_path(&path);
    let mut echo_t = match ShmTransport::create_opts(
        &echo_path,
        echo::ECHO_RING,
        args.comp_slots,
        args.token_line,
    ) {
        Ok(e) => Some(e),
        Err(e) => {
            eprintln!("rpc serve: no transport echo region ({e}); the bench leaves the echo out");
            None
        }
    };
    if echo_t.is_none() {
        // A stale region from an earlier server must not look like this one's.
        let _ = std::fs::remove_file(&echo_path);
    }
    t.control(CTL_ECHO_READY)
        .store(u64::from(echo_t.is_some()), Ordering::Release);
    let _cleanup_echo = RemoveOnDrop(echo_path);
    let mut echo_side: Option<EchoSide> = None;
    let mut echo_stamp = 0u64;
    t.publish_info(&config.local_info());
    eprintln!("rpc serve: waiting on {}", path.display());
    let peer = await_peer(&t, args.timeout, "no client connected")?;
    let clock = Clock::new();
    let mut ep: Endpoint<()> = Endpoint::new(config, peer).map_err(|e| (1, e.to_string()))?;
    let mut h = ServerHandler::new(config.max_pending_calls, !args.reply_later);
    let mut last_seen = u64::MAX;
    let mut last_flag = u64::MAX;
    // Activity (ping-pong answers and calls answered) is counted, and the clock
    // read only every IDLE_CHECK_SPINS spins, never between a request and its
    // reply: at queue depth 1 a clock read there is on the round trip.
    let mut activity = 0u64;
    let mut activity_at_check = 0u64;
    let mut idle_since = clock.now();
    let mut spins = 0u32;
    loop {
        match t.control(CTL_PHASE).load(Ordering::Acquire) {
            PHASE_DONE => return Ok(ep.stats().replies),
            PHASE_PINGPONG => {
                activity += u64::from(answer_ping(t.pingpong(), t.pingpong(), &mut last_seen));
            }
            PHASE_FLAGS => {
                activity += u64::from(answer_ping(t.flag(1), t.flag(0), &mut last_flag));
            }
            PHASE_ECHO => {
                if let Some(e) = echo_t.as_mut() {
                    let side = match echo_side.as_mut() {
                        Some(side) => side,
                        None => {
                            // The sizes are set before the phase (Release
                            // on it) by the other process: checked as the
                            // bench checks them.
                            let size = |i| t.control(i).load(Ordering::Relaxed);
                            let (msg, resp) = (size(CTL_MSG_SIZE), size(CTL_RESP_SIZE));
                            if !echo::carries(msg, resp) {
                                return Err((1, format!(
                                    "the bench asked for an echo of {msg}- and {resp}-byte messages: batches over {} bytes",
                                    echo::ECHO_MAX_BATCH
                                )));
                            }
                            echo_side.insert(EchoSide::server(msg, resp))
                        }
                    };
                    let answered =
                        echo::serve_turn(e, side, &mut echo_stamp).map_err(|e| (1, e))?;
                    activity += u64::from(answered);
                }
            }
            _ => {
                let n = t.control(CTL_RESP_SIZE).load(Ordering::Relaxed) as usize;
                if n != h.resp_size {
                    h.set_resp_size(n);
                }
                ep.poll(&mut t, &mut h).map_err(|e| (1, e.to_string()))?;
                h.reply_later(&mut ep, &mut t)?;
                h.check()?;
            }
        }
        spins = spins.wrapping_add(1);
        if spins % IDLE_CHECK_SPINS == 0 {
            let now = clock.now();
            let activity = activity + ep.stats().requests;
            if activity != activity_at_check {
                activity_at_check = activity;
                idle_since = now;
            } else if now - idle_since > args.timeout {
                return Err((1, "client went quiet".into()));
            }
        }
    }
}

/// The server's side of a ping-pong: answers a new odd `ping` value `v` with
/// `v + 1` in `pong` (the same word for the one-line ping-pong). Returns
/// whether it answered.
fn answer_ping(ping: &AtomicU64, pong: &AtomicU64, last: &mut u64) -> bool {
    let v = ping.load(Ordering::Acquire);
    if v % 2 == 1 && v != *last {
        pong.store(v + 1, Ordering::Release);
        *last = v;
        return true;
    }
    false
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
