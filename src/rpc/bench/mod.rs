//! The RPC benchmark: `serve` answers calls over a shared-memory region,
//! `bench` opens it, measures a cache-line ping-pong between the two processes
//! first (the physical floor of a round trip between those cores), then drives
//! RPCs at each queue depth and reports RPC/s, bytes/s and latency
//! percentiles. With [`BenchTransport::ReliableMem`] one process measures the
//! reliable channel's PUT on two mem wires, its server in a second thread.
//! `linerate rpc` (in `cli/rpc.rs`) parses arguments into these and prints.
//!
//! Between the ping-pongs and the RPCs it measures the transport alone
//! carrying the same batches, over a second region `rpc serve` makes for it,
//! so a run shows the floor, what the transport adds to it, and what the
//! endpoint adds on top.
//!
//! Control words in the region's header coordinate the phases: word 0 is the
//! phase, word 1 the response size, word 3 the request size, word 4 whether
//! the server made the echo region.

use super::endpoint::{Config, Endpoint, Handler, Request};
use super::transport::reliable::{PortLink, ReliableTransport};
use super::transport::shm::{default_path, ShmError, ShmTransport};
use super::transport::Transport;
use crate::time::Clock;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

mod echo;
mod report;
mod serve;

use report::Windows;
pub use report::{BenchReport, DepthReport, HostReport, Latency, PingPongReport, WindowRates};
pub(crate) use serve::ServerHandler;
pub use serve::{serve, ServeConfig};

const PHASE_IDLE: u64 = 0;
const PHASE_PINGPONG: u64 = 1;
const PHASE_RPC: u64 = 2;
const PHASE_DONE: u64 = 3;
const PHASE_FLAGS: u64 = 4;
const PHASE_ECHO: u64 = 5;
const CTL_PHASE: usize = 0;
const CTL_RESP_SIZE: usize = 1;
const CTL_MSG_SIZE: usize = 3;
/// Set to 1 by a server that made the echo region ([`echo`]).
const CTL_ECHO_READY: usize = 4;

/// The medium `rpc bench` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchTransport {
    /// Shared memory with a separate `rpc serve` process (the default).
    Shm,
    /// The reliable channel's checked PUT over two mem wires, the server in a
    /// second thread of this process (no `rpc serve` needed).
    ReliableMem,
    /// The reliable channel's checked PUT over UDP between two MPI ranks
    /// (`mpirun -np 2`, feature `mpi`): rank 0 the client, rank 1 the server.
    ReliableUdp,
    /// The same over DPDK ports (features `mpi` and `dpdk`): each rank drives
    /// its own device (`--client-device`, `--server-device`), which carries
    /// the UDP datagrams in frames it builds itself.
    ReliableDpdk,
}

impl BenchTransport {
    /// Whether the bench runs across two MPI ranks.
    pub fn across_ranks(self) -> bool {
        matches!(
            self,
            BenchTransport::ReliableUdp | BenchTransport::ReliableDpdk
        )
    }
}

/// What `rpc bench` measures (`linerate rpc bench`'s arguments, less `--json`).
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Transport to measure.
    pub transport: BenchTransport,
    /// Ring size for `--transport reliable-mem` (with shm the server chooses).
    pub ring: u64,
    /// Random loss on each mem wire (`--transport reliable-mem`), 0 to 1.
    pub loss: f64,
    /// Core of the server thread (`--transport reliable-mem`) or of the
    /// server rank (`reliable-udp`).
    pub server_core: Option<usize>,
    /// Region file the server created (default: the server's default places).
    pub shm: Option<PathBuf>,
    /// Queue depths to measure, in order (comma-separated).
    pub depth: Vec<u32>,
    /// Request payload size in bytes.
    pub msg_size: u64,
    /// Response payload size in bytes.
    pub resp_size: u64,
    /// Duration of each RPC measurement (extended until at least one RPC
    /// completed in it, so a descheduled peer cannot leave it empty).
    pub duration: Duration,
    /// Duration of each baseline: the two ping-pongs and the shm transport
    /// echo (0 to skip them).
    pub pingpong: Duration,
    /// Core to pin to.
    pub core: Option<usize>,
    /// Wait this long for the server; with reliable-udp, also how long
    /// responses may stop before the server is called dead or hung; with
    /// reliable-dpdk, also how long each port waits for the peer's ARP answer.
    pub timeout: Duration,
    /// The client's UDP address (`--transport reliable-udp`, rank 0).
    pub client: Option<std::net::SocketAddr>,
    /// The server's UDP address (`--transport reliable-udp`, rank 1).
    pub server: Option<std::net::SocketAddr>,
    /// The network namespace the client rank enters before opening its socket.
    pub client_netns: Option<String>,
    /// The network namespace the server rank enters before opening its socket.
    pub server_netns: Option<String>,
    /// The client rank's DPDK device (`--transport reliable-dpdk`): a virtual
    /// device (`net_af_packet0,iface=eth1`, given to the EAL as `--vdev`) or
    /// a PCI address (`-a`).
    pub client_device: Option<String>,
    /// The server rank's DPDK device.
    pub server_device: Option<String>,
    /// EAL arguments both ranks start with (`--transport reliable-dpdk`;
    /// each rank adds its device and a `--file-prefix` of its own).
    pub eal: Vec<String>,
}

/// A result whose error carries the exit status (1 runtime failure, 2 bad
/// input) and the message.
pub type BenchResult<T> = Result<T, (i32, String)>;

pub(crate) fn pin(core: Option<usize>) -> BenchResult<()> {
    if let Some(c) = core {
        let ok = core_affinity::get_core_ids()
            .unwrap_or_default()
            .into_iter()
            .find(|id| id.id == c)
            .is_some_and(core_affinity::set_for_current);
        if !ok {
            return Err((2, format!("cannot pin to core {c}")));
        }
    }
    Ok(())
}

/// Where to look for the region: the given path, or the default on hugetlbfs
/// and then in /dev/shm (the server falls back there when hugepages run out).
fn region_paths(p: &Option<PathBuf>) -> Vec<PathBuf> {
    match p {
        Some(p) => vec![p.clone()],
        None => {
            let mut v = vec![default_path(DEFAULT_NAME)];
            let shm = Path::new("/dev/shm").join(DEFAULT_NAME);
            if !v.contains(&shm) {
                v.push(shm);
            }
            v
        }
    }
}

const DEFAULT_NAME: &str = "linerate-rpc";
/// How long `rpc bench` waits for a response before it calls the server gone.
const STALL_LIMIT: Duration = Duration::from_secs(30);
/// Server loop iterations between two reads of the clock for the idle timeout.
const IDLE_CHECK_SPINS: u32 = 4096;

/// The bytes of a request after its sequence number.
pub(crate) const REQ_FILL: u8 = 0xa5;
/// The bytes of a response after the echoed sequence number.
pub(crate) const RESP_FILL: u8 = 0x5a;
/// A request of at least this many bytes starts with its sequence number (u64
/// LE), which the server echoes at the start of a response at least as long:
/// the client then knows each response answers its own call.
const SEQ_BYTES: usize = 8;

/// Why a request or response payload is not what the bench sent: `len`
/// bytes expected (when known), the sequence number `seq` first (when
/// echoed), then `fill`.
fn check_payload(
    payload: &[u8],
    len: Option<usize>,
    seq: Option<u64>,
    fill: u8,
) -> Result<(), String> {
    if let Some(n) = len {
        if payload.len() != n {
            return Err(format!("{} bytes, expected {n}", payload.len()));
        }
    }
    let from = match seq {
        Some(want) => {
            let Some(head) = payload.get(..SEQ_BYTES) else {
                return Err(format!("{} bytes, too short to echo", payload.len()));
            };
            let mut b = [0u8; SEQ_BYTES];
            b.copy_from_slice(head);
            let got = u64::from_le_bytes(b);
            if got != want {
                return Err(format!("echoes call {got}, not {want}"));
            }
            SEQ_BYTES
        }
        None => 0,
    };
    check_fill(payload, from, fill)
}

/// Whether `payload` from byte `from` on is all `fill`; else which byte is not.
/// Both sides check every payload between seeing it and answering or taking
/// the clock, so at queue depth 1 the check is on the round trip: compared 8
/// bytes at a time (a byte loop was about 100 instructions per 32-byte
/// payload), and the failing byte searched for only on a mismatch.
#[inline]
fn check_fill(payload: &[u8], from: usize, fill: u8) -> Result<(), String> {
    let rest = payload.get(from..).unwrap_or(&[]);
    if is_fill(rest, fill) {
        return Ok(());
    }
    match rest.iter().position(|&b| b != fill) {
        Some(i) => Err(format!(
            "byte {} is {:#04x}, expected {fill:#04x}",
            from + i,
            rest[i]
        )),
        None => Ok(()),
    }
}

/// Whether every byte of `b` is `fill`, 8 bytes at a time.
#[inline(always)]
fn is_fill(b: &[u8], fill: u8) -> bool {
    let pattern = u64::from_ne_bytes([fill; 8]);
    let words = b.chunks_exact(8);
    let tail = words.remainder();
    let mut diff = 0u64;
    for w in words {
        let mut a = [0u8; 8];
        a.copy_from_slice(w);
        diff |= u64::from_ne_bytes(a) ^ pattern;
    }
    diff == 0 && tail.iter().all(|&x| x == fill)
}

/// Waits up to `timeout` for the peer's endpoint info in the region; `what`
/// is the error after that.
fn await_peer(
    t: &ShmTransport,
    timeout: Duration,
    what: &str,
) -> BenchResult<super::endpoint::PeerInfo> {
    let clock = Clock::new();
    loop {
        if let Some(p) = t.peer_info() {
            return Ok(p);
        }
        if clock.elapsed() > timeout {
            return Err((1, what.into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What the client keeps per call: when it was issued and its sequence
/// number (which the request carries and the response echoes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Issued {
    at: u64,
    seq: u64,
}

/// Keeps the issue stamps of the responses one `poll` delivered; the clock is
/// read once after the poll (as the ping-pong reads it once per round trip), not
/// on every spin. Checks every response: its length, the echo of its call's
/// sequence number, and its fill.
struct ClientHandler {
    issued: Vec<u64>,
    requests: u64,
    resp_len: usize,
    echo: bool,
    verified: u64,
    bad: Option<String>,
}

impl Handler<Issued> for ClientHandler {
    fn on_request(&mut self, _req: Request, _payload: &[u8]) {
        self.requests += 1;
    }
    #[inline]
    fn on_response(&mut self, call_id: u32, issued: Issued, payload: &[u8]) {
        if self.issued.len() < self.issued.capacity() {
            self.issued.push(issued.at);
        }
        match check_payload(
            payload,
            Some(self.resp_len),
            self.echo.then_some(issued.seq),
            RESP_FILL,
        ) {
            Ok(()) => self.verified += 1,
            Err(why) => {
                self.bad.get_or_insert(format!(
                    "the response to call {} (id {call_id}) arrived damaged: {why}",
                    issued.seq
                ));
            }
        }
    }
}

fn open_region(paths: &[PathBuf], timeout: Duration) -> BenchResult<(ShmTransport, PathBuf)> {
    let clock = Clock::new();
    loop {
        for path in paths {
            match ShmTransport::open(path) {
                Ok(t) => return Ok((t, path.clone())),
                Err(ShmError::NotReady(_)) | Err(ShmError::Io { .. })
                    if clock.elapsed() < timeout => {}
                Err(e) => return Err((1, e.to_string())),
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn new_hist() -> BenchResult<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| (1, e.to_string()))
}

/// A ping-pong: with `two_lines` false, one word on one line that both sides
/// write (the tightest round trip two cores can make); with `two_lines` true,
/// each side writes a line of its own and spins on the peer's (the floor of
/// any transport that writes into the peer's memory, as write-with-immediate
/// does).
fn pingpong(t: &ShmTransport, dur: Duration, two_lines: bool) -> BenchResult<PingPongReport> {
    let (ping, pong, phase) = if two_lines {
        (t.flag(1), t.flag(0), PHASE_FLAGS)
    } else {
        (t.pingpong(), t.pingpong(), PHASE_PINGPONG)
    };
    let mut v = pong
        .load(Ordering::Acquire)
        .max(ping.load(Ordering::Acquire));
    if v % 2 == 1 {
        v += 1;
    }
    t.control(CTL_PHASE).store(phase, Ordering::Release);
    // Round trip n pings with v + 2n + 1 and is answered with v + 2n + 2.
    let r = time_round_trips(
        dur,
        &mut (),
        |_, n| {
            ping.store(v + 2 * n + 1, Ordering::Release);
            Ok(())
        },
        |_, n| {
            if pong.load(Ordering::Acquire) == v + 2 * n + 2 {
                return Ok(true);
            }
            std::hint::spin_loop();
            Ok(false)
        },
        (1 << 32, "server does not answer the ping-pong"),
    );
    if r.is_ok() {
        t.control(CTL_PHASE).store(PHASE_IDLE, Ordering::Release);
    }
    r
}

/// Times round trips for `dur` and reports them as a baseline: `send(state,
/// n)` starts round trip n and `answered(state, n)` polls for its answer,
/// at most `spins` times before the round trip fails with `silent`. One
/// clock read per round trip, and the bookkeeping of round trip n
/// (histogram, windows) done while round trip n + 1 is on its way, as the
/// RPC bench does with its calls: only the clock read is between seeing the
/// answer and sending again. Shared by the ping-pongs and the shm echo, so
/// the floors and the echo are timed alike.
pub(super) fn time_round_trips<S>(
    dur: Duration,
    state: &mut S,
    mut send: impl FnMut(&mut S, u64) -> Result<(), String>,
    mut answered: impl FnMut(&mut S, u64) -> Result<bool, String>,
    (spins, silent): (u64, &str),
) -> BenchResult<PingPongReport> {
    let clock = Clock::new();
    let mut hist = new_hist()?;
    let deadline = crate::time::duration_nanos(dur);
    let start = clock.now();
    let mut prev = start;
    let mut n = 0u64;
    let mut win = Windows::new(start.as_nanos(), dur);
    let mut now = start;
    loop {
        send(state, n).map_err(|e| (1, e))?;
        if n > 0 {
            let _ = hist.record((now - prev).as_nanos().max(1) as u64);
            win.tick(now.as_nanos(), n);
            prev = now;
        }
        let mut tries = 0u64;
        while !answered(state, n).map_err(|e| (1, e))? {
            tries += 1;
            if tries == spins {
                return Err((1, silent.into()));
            }
        }
        n += 1;
        now = clock.now();
        if (now - start).as_nanos() as u64 >= deadline {
            let _ = hist.record((now - prev).as_nanos().max(1) as u64);
            win.tick(now.as_nanos(), n);
            prev = now;
            break;
        }
    }
    let secs = (prev - start).as_secs_f64();
    Ok(PingPongReport {
        round_trips_per_sec: n as f64 / secs,
        mean_rtt_ns: secs * 1e9 / n as f64,
        rtt: Latency::of(&hist),
        windows: win.summary(),
    })
}

/// Runs the bench side against a running server.
pub fn bench(args: &BenchConfig) -> BenchResult<BenchReport> {
    if args.depth.is_empty() || args.depth.contains(&0) {
        return Err((2, "queue depths must be at least 1".into()));
    }
    let msg_size =
        usize::try_from(args.msg_size).map_err(|_| (2, "message too large".to_string()))?;
    let resp_size =
        u32::try_from(args.resp_size).map_err(|_| (2, "response too large".to_string()))?;
    match args.transport {
        BenchTransport::ReliableMem => return bench_reliable_mem(args, msg_size, resp_size),
        BenchTransport::ReliableUdp | BenchTransport::ReliableDpdk => {
            let name = if args.transport == BenchTransport::ReliableUdp {
                "reliable-udp"
            } else {
                "reliable-dpdk"
            };
            return Err((
                2,
                format!("--transport {name} runs across two MPI ranks: use `mpirun -np 2 linerate rpc bench --transport {name} ...` (feature `mpi`)"),
            ));
        }
        BenchTransport::Shm => {}
    }
    pin(args.core)?;
    let (mut t, path) = open_region(&region_paths(&args.shm), args.timeout)?;
    let config = Config::new(t.ring_size());
    t.publish_info(&config.local_info());
    let peer = await_peer(&t, args.timeout, "server did not publish its info")?;
    let clock = Clock::new();
    let mut ep: Endpoint<Issued> = Endpoint::new(config, peer).map_err(|e| (1, e.to_string()))?;
    check_sizes(&ep, msg_size, resp_size)?;
    let max_depth = *args.depth.iter().max().unwrap_or(&1);
    if max_depth > config.max_pending_calls {
        return Err((2, format!("queue depth above {}", config.max_pending_calls)));
    }
    t.control(CTL_RESP_SIZE)
        .store(u64::from(resp_size), Ordering::Relaxed);
    t.control(CTL_MSG_SIZE)
        .store(msg_size as u64, Ordering::Relaxed);

    let baselines = (|| -> BenchResult<_> {
        if args.pingpong.is_zero() {
            return Ok((None, None, None));
        }
        Ok((
            Some(pingpong(&t, args.pingpong, false)?),
            Some(pingpong(&t, args.pingpong, true)?),
            transport_echo(&t, &path, msg_size, resp_size, args.pingpong)?,
        ))
    })();
    let (pp, pp2, echo) = match baselines {
        Ok(b) => b,
        Err(e) => {
            // The server stops now, not after its idle timeout.
            t.control(CTL_PHASE).store(PHASE_DONE, Ordering::Release);
            return Err(e);
        }
    };

    t.control(CTL_PHASE).store(PHASE_RPC, Ordering::Release);
    let mut payload = vec![REQ_FILL; msg_size];
    let mut depths = Vec::new();
    let result = (|| -> BenchResult<()> {
        for &depth in &args.depth {
            depths.push(run_depth(
                &mut ep,
                &mut t,
                &mut |_| {},
                &clock,
                &mut payload,
                resp_size,
                depth,
                args.duration,
                STALL_LIMIT,
                pp.as_ref(),
            )?);
        }
        Ok(())
    })();
    t.control(CTL_PHASE).store(PHASE_DONE, Ordering::Release);
    result?;
    if let Some(p) = &pp2 {
        for d in &mut depths {
            d.p50_vs_two_line_pingpong_p50 =
                Some(d.latency.p50_ns as f64 / p.rtt.p50_ns.max(1) as f64);
        }
    }
    if let Some(e) = &echo {
        for d in depths.iter_mut().filter(|d| d.depth == 1) {
            d.p50_over_transport_echo_ns = Some(d.latency.p50_ns as i64 - e.rtt.p50_ns as i64);
        }
    }
    Ok(BenchReport {
        transport: BenchTransport::Shm,
        shm: path.display().to_string(),
        ring_size: t.ring_size(),
        msg_size: args.msg_size,
        resp_size: args.resp_size,
        core: args.core,
        pingpong: pp,
        pingpong_two_lines: pp2,
        transport_echo: echo,
        depths,
        hosts: Vec::new(),
    })
}

/// The transport echo ([`echo`]) over the region beside `path`, or `None`
/// (said on stderr) when the server has none.
fn transport_echo(
    t: &ShmTransport,
    path: &Path,
    msg_size: usize,
    resp_size: u32,
    dur: Duration,
) -> BenchResult<Option<PingPongReport>> {
    if !echo::carries(msg_size as u64, u64::from(resp_size)) {
        eprintln!(
            "rpc bench: no transport echo (it carries batches of up to {} bytes)",
            echo::ECHO_MAX_BATCH
        );
        return Ok(None);
    }
    if t.control(CTL_ECHO_READY).load(Ordering::Acquire) != 1 {
        eprintln!("rpc bench: no transport echo (the server made no echo region)");
        return Ok(None);
    }
    let echo_path = echo::echo_path(path);
    let mut e = match ShmTransport::open(&echo_path) {
        Ok(e) => e,
        Err(err) => {
            eprintln!("rpc bench: no transport echo (its region: {err})");
            return Ok(None);
        }
    };
    echo::measure(t, &mut e, msg_size as u64, u64::from(resp_size), dur).map(Some)
}

/// `rpc bench --transport reliable-mem`: both ends in this process, the
/// server in a thread, each over a [`ReliableTransport`] bound to two mem wires
/// (one per direction, with `--loss`).
fn bench_reliable_mem(
    args: &BenchConfig,
    msg_size: usize,
    resp_size: u32,
) -> BenchResult<BenchReport> {
    use crate::buf::{Pool, PoolConfig};
    use crate::port::mem::{self, MemConfig};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    if !(0.0..1.0).contains(&args.loss) {
        return Err((2, "loss must be in [0, 1)".into()));
    }
    let bad = |e: super::TransportError| (2, e.to_string());
    let config = Config::new(args.ring);
    // Both threads share two cores with whatever else runs: a descheduled
    // peer is not a dead one here.
    let rcfg = crate::reliable::Config {
        retry_limit: None,
        ..crate::reliable::Config::default()
    };
    let mut tc = ReliableTransport::new(rcfg.clone(), args.ring).map_err(bad)?;
    let mut ts = ReliableTransport::new(rcfg.clone(), args.ring).map_err(bad)?;
    let (ic, is) = (tc.info(), ts.info());
    tc.connect(is).map_err(bad)?;
    ts.connect(ic).map_err(bad)?;
    let pool = Pool::new(&PoolConfig {
        name: "rpc-reliable-mem".into(),
        count: 1 << 16,
        buf_size: (rcfg.data_mtu.max(rcfg.priority_mtu) as u32).max(2048),
        headroom: 0,
        ..PoolConfig::default()
    })
    .map_err(|e| (1, e.to_string()))?;
    let wire = |seed| MemConfig {
        loss: args.loss,
        seed,
        ring: 1 << 15,
        ..MemConfig::default()
    };
    let (mut to_server, mut to_client) = (mem::open(&wire(1)), mem::open(&wire(2)));
    let take = |p: &mut crate::port::OpenPort| (p.rx.pop(), p.tx.pop());
    let ((Some(srx), Some(ctx)), (Some(crx), Some(stx))) =
        (take(&mut to_server), take(&mut to_client))
    else {
        return Err((1, "mem wire without queues".into()));
    };
    let mut client_link = PortLink::new(crx, ctx, pool.cache(), pool.cache());
    let mut server_link = PortLink::new(srx, stx, pool.cache(), pool.cache());
    let mut ep: Endpoint<Issued> =
        Endpoint::new(config, config.local_info()).map_err(|e| (2, e.to_string()))?;
    check_sizes(&ep, msg_size, resp_size)?;
    let stop = Arc::new(AtomicBool::new(false));
    let server_stop = stop.clone();
    let server_core = args.server_core;
    let server = std::thread::spawn(move || -> BenchResult<u64> {
        pin(server_core)?;
        let clock = Clock::new();
        let mut ep: Endpoint<()> =
            Endpoint::new(config, config.local_info()).map_err(|e| (1, e.to_string()))?;
        let mut h = ServerHandler::new(config.max_pending_calls, true);
        h.set_resp_size(resp_size as usize);
        h.expect_len(msg_size);
        while !server_stop.load(Ordering::Relaxed) {
            server_link.pump(&mut ts, clock.now());
            ep.poll(&mut ts, &mut h).map_err(|e| (1, e.to_string()))?;
            h.reply_later(&mut ep, &mut ts)?;
            h.check()?;
        }
        Ok(ep.stats().replies)
    });
    pin(args.core)?;
    let clock = Clock::new();
    let mut payload = vec![REQ_FILL; msg_size];
    let mut depths = Vec::new();
    let result = (|| -> BenchResult<()> {
        for &depth in &args.depth {
            depths.push(run_depth(
                &mut ep,
                &mut tc,
                &mut |t: &mut ReliableTransport| {
                    client_link.pump(t, clock.now());
                },
                &clock,
                &mut payload,
                resp_size,
                depth,
                args.duration,
                STALL_LIMIT,
                None,
            )?);
        }
        Ok(())
    })();
    stop.store(true, Ordering::Relaxed);
    let served = server
        .join()
        .map_err(|_| (1, "server thread panicked".to_string()))?;
    served.map_err(|(c, m)| (c, format!("server thread: {m}")))?;
    result?;
    Ok(BenchReport {
        transport: BenchTransport::ReliableMem,
        shm: format!("reliable channel over two mem wires (loss {})", args.loss),
        ring_size: args.ring,
        msg_size: args.msg_size,
        resp_size: args.resp_size,
        core: args.core,
        pingpong: None,
        pingpong_two_lines: None,
        transport_echo: None,
        depths,
        hosts: Vec::new(),
    })
}

/// Refuses (exit 2) a request or response that the endpoint's ring cannot
/// carry, naming the maximum.
pub(crate) fn check_sizes<U>(ep: &Endpoint<U>, msg_size: usize, resp_size: u32) -> BenchResult<()> {
    if msg_size > ep.max_payload() as usize {
        return Err((
            2,
            format!("message size above the maximum {}", ep.max_payload()),
        ));
    }
    if resp_size > ep.max_response_allowance() {
        return Err((
            2,
            format!(
                "response size above the maximum {}",
                ep.max_response_allowance()
            ),
        ));
    }
    Ok(())
}

fn config_pending<U>(ep: &Endpoint<U>) -> usize {
    ep.pending_calls() as usize + 4096
}

/// Measures one queue depth: calls `payload` (its first bytes overwritten
/// with each call's sequence number) with `depth` calls in flight for
/// `duration` after a tenth of it as warm-up, checks every response, and
/// fails when no response arrives for `stall`. `pump` moves the transport's
/// bytes (a no-op for shared memory).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_depth<T: Transport>(
    ep: &mut Endpoint<Issued>,
    t: &mut T,
    pump: &mut impl FnMut(&mut T),
    clock: &Clock,
    payload: &mut [u8],
    resp_size: u32,
    depth: u32,
    duration: Duration,
    stall: Duration,
    pp: Option<&PingPongReport>,
) -> BenchResult<DepthReport> {
    let echo = payload.len() >= SEQ_BYTES && resp_size as usize >= SEQ_BYTES;
    let mut h = ClientHandler {
        issued: Vec::with_capacity(config_pending(ep)),
        requests: 0,
        resp_len: resp_size as usize,
        echo,
        verified: 0,
        bad: None,
    };
    let mut seq = 0u64;
    let mut hist = new_hist()?;
    let fail = |e: super::RpcError| (1, e.to_string());
    let writes0 = ep.stats().writes;
    let mut retries = 0u64;
    // Warm up briefly, then measure.
    let warm = duration / 10;
    let start = clock.now();
    let mut now = start;
    let mut measuring = false;
    let mut t0 = start;
    let mut done = 0u64;
    let mut win = Windows::new(0, duration);
    let mut idle = 0u32;
    let mut last_response = start;
    // `now` is read right after a poll that delivered responses; the next calls
    // go out stamped with it before the delivered responses are accounted, so
    // the histogram and window bookkeeping overlap the next round trip instead
    // of delaying it (what a depth-1 measurement would otherwise include).
    let mut fresh = false;
    loop {
        if ep.pending_calls() < depth {
            while ep.pending_calls() < depth {
                if payload.len() >= SEQ_BYTES {
                    payload[..SEQ_BYTES].copy_from_slice(&seq.to_le_bytes());
                }
                let call = Issued {
                    at: now.as_nanos(),
                    seq,
                };
                match ep.call(payload, resp_size, call) {
                    Ok(_) => seq += 1,
                    Err(e) if e.kind.is_retryable() => {
                        retries += 1;
                        break;
                    }
                    Err(e) => return Err((1, format!("call failed: {:?}", e.kind))),
                }
            }
            ep.flush(t).map_err(fail)?;
        }
        if fresh {
            fresh = false;
            let ns = now.as_nanos();
            if !h.issued.is_empty() {
                last_response = now;
            } else if now - last_response > stall {
                return Err((1, stalled(stall)));
            }
            if let Some(why) = h.bad.take() {
                return Err((1, why));
            }
            if measuring {
                for &i in &h.issued {
                    let _ = hist.record(ns.saturating_sub(i).max(1));
                }
                done += h.issued.len() as u64;
                win.tick(ns, done);
                // At least one RPC measured: on a loaded machine either
                // process may be descheduled for the whole duration.
                if now - t0 >= duration && done > 0 {
                    break;
                }
            } else if now - start >= warm {
                measuring = true;
                t0 = now;
                win.start_at(ns);
            }
            h.issued.clear();
        }
        pump(t);
        ep.poll(t, &mut h).map_err(fail)?;
        if h.issued.is_empty() {
            idle += 1;
            if idle < 1024 {
                continue;
            }
        }
        idle = 0;
        now = clock.now();
        fresh = true;
    }
    let rpcs = done;
    let seconds = (now - t0).as_secs_f64();
    // Drain so the next depth starts clean.
    let drain_start = clock.now();
    while ep.pending_calls() > 0 {
        h.issued.clear();
        pump(t);
        ep.poll(t, &mut h).map_err(fail)?;
        if clock.now() - drain_start > stall {
            return Err((1, stalled(stall)));
        }
    }
    if let Some(why) = h.bad.take() {
        return Err((1, why));
    }
    if h.verified != seq {
        return Err((
            1,
            format!("{seq} calls made but {} responses checked", h.verified),
        ));
    }
    if h.requests > 0 {
        return Err((1, "the server sent requests".into()));
    }
    let rpc_per_sec = rpcs as f64 / seconds;
    let mean_rtt_ns = f64::from(depth) * 1e9 / rpc_per_sec;
    let latency = Latency::of(&hist);
    Ok(DepthReport {
        depth,
        rpcs,
        seconds,
        rpc_per_sec,
        bytes_per_sec: rpc_per_sec * (payload.len() as f64 + f64::from(resp_size)),
        latency,
        mean_rtt_ns,
        rtt_vs_pingpong: pp.map(|p| mean_rtt_ns / p.mean_rtt_ns),
        windows: win.summary(),
        p50_vs_pingpong_p50: pp.map(|p| latency.p50_ns as f64 / p.rtt.p50_ns.max(1) as f64),
        p50_vs_two_line_pingpong_p50: None,
        p50_over_transport_echo_ns: None,
        writes: ep.stats().writes - writes0,
        retries,
        calls: seq,
        verified: h.verified,
    })
}

/// The error of a bench whose responses stopped for `stall`.
pub(crate) fn stalled(stall: Duration) -> String {
    format!(
        "responses stopped arriving (none for {:.1} s)",
        stall.as_secs_f64()
    )
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn check_payload_finds_each_kind_of_damage() {
        let mut p = vec![RESP_FILL; 32];
        p[..8].copy_from_slice(&7u64.to_le_bytes());
        assert!(check_payload(&p, Some(32), Some(7), RESP_FILL).is_ok());
        // Another call's echo, a wrong length, a flipped byte.
        let e = check_payload(&p, Some(32), Some(8), RESP_FILL).unwrap_err();
        assert!(e.contains("echoes call 7, not 8"), "{e}");
        assert!(check_payload(&p[..31], Some(32), Some(7), RESP_FILL).is_err());
        p[20] ^= 1;
        let e = check_payload(&p, Some(32), Some(7), RESP_FILL).unwrap_err();
        assert!(e.starts_with("byte 20 "), "{e}");
        // Too short to carry an echo.
        assert!(check_payload(&[RESP_FILL; 4], None, Some(0), RESP_FILL).is_err());
        assert!(check_payload(&[RESP_FILL; 4], None, None, RESP_FILL).is_ok());
    }

    #[test]
    fn the_word_wise_fill_check_finds_every_byte() {
        for len in 0..41 {
            for from in [0, 3, 8] {
                let mut p = vec![REQ_FILL; len];
                assert!(check_fill(&p, from, REQ_FILL).is_ok());
                for i in from..len {
                    p[i] = 0;
                    let e = check_fill(&p, from, REQ_FILL).unwrap_err();
                    assert!(
                        e.starts_with(&format!("byte {i} ")),
                        "{len} {from} {i}: {e}"
                    );
                    p[i] = REQ_FILL;
                }
            }
        }
    }

    #[test]
    fn the_server_echoes_the_sequence_and_flags_a_damaged_request() {
        let mut h = ServerHandler::new(4, true);
        h.set_resp_size(16);
        h.expect_len(16);
        let mut req = vec![REQ_FILL; 16];
        req[..8].copy_from_slice(&41u64.to_le_bytes());
        let r = Request {
            call_id: 0,
            allowance: 1024,
        };
        let resp = h.answer(r, &req).unwrap().to_vec();
        assert!(check_payload(&resp, Some(16), Some(41), RESP_FILL).is_ok());
        assert!(h.check().is_ok());
        req[12] = 0;
        h.answer(r, &req);
        assert!(h.check().unwrap_err().1.contains("byte 12"));
        let mut h = ServerHandler::new(4, true);
        h.expect_len(16);
        h.answer(r, &[REQ_FILL; 15]);
        assert!(h.check().unwrap_err().1.contains("15 bytes, expected 16"));
    }

    /// The echo's sizes come from the other process: a server asked for
    /// batches the echo cannot carry fails with a message, not a panic.
    #[test]
    fn the_server_refuses_an_echo_too_large() {
        let path = std::env::temp_dir().join(format!("linerate-echo-big-{}", std::process::id()));
        let args = ServeConfig {
            shm: Some(path.clone()),
            ring: 1 << 16,
            comp_slots: 8,
            token_line: false,
            core: None,
            timeout: Duration::from_secs(30),
            reply_later: false,
        };
        let server = std::thread::spawn(move || serve(&args));
        let (t, _) = open_region(std::slice::from_ref(&path), Duration::from_secs(30)).unwrap();
        t.publish_info(&Config::new(t.ring_size()).local_info());
        t.control(CTL_MSG_SIZE).store(1 << 40, Ordering::Relaxed);
        t.control(CTL_RESP_SIZE).store(32, Ordering::Relaxed);
        t.control(CTL_PHASE).store(PHASE_ECHO, Ordering::Release);
        let (status, why) = server.join().unwrap().unwrap_err();
        assert_eq!(status, 1);
        assert!(why.contains("asked for an echo of 1099511627776-"), "{why}");
        assert!(!path.exists() && !echo::echo_path(&path).exists());
    }
}
