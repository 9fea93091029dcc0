//! `mpirun -np 2 linerate rpc bench --transport reliable-udp` (or
//! `reliable-dpdk`): the RPC bench between two MPI ranks over the reliable
//! channel's PUT on UDP, through kernel sockets or DPDK ports that carry the
//! datagrams themselves ([`crate::port::encap`]).
//!
//! Rank 0 is host `client`, rank 1 host `server`. Each enters its network
//! namespace (after MPI init, so MPI's own links stay where mpirun started
//! them), opens a UDP socket bound to its address and connected to the
//! peer's, and makes a [`ReliableTransport`]. The out-of-band
//! [`ReliableInfo`](crate::rpc::transport::reliable::ReliableInfo) records
//! travel over MPI (one exchange with a timeout, which also checks both ranks
//! were started with the same sizes); everything after that is UDP until the
//! end. The client measures each depth as the in-process benches do and
//! checks every response; when done it says so in band (`'D'` on the
//! priority channel) and waits for the acknowledgement. The server answers
//! until it sees that, lingers briefly so its last acknowledgements go out,
//! and then both ranks hand rank 0 their host's counters (a gather with a
//! timeout) for the report.
//!
//! Nothing waits forever: responses that stop for `--timeout` end the job
//! naming the server (a hung rank; a killed one mpirun reports itself), a
//! client that goes quiet for as long ends it naming the client, and every
//! MPI step has the timeout.

use std::time::Duration;

use super::mpi::{InitError, Ranks};
use crate::buf::{Pool, PoolConfig};
use crate::port::udp::{self, UdpConfig};
use crate::port::OpenPort;
use crate::rpc::bench::{
    pin, run_depth, stalled, BenchConfig, BenchReport, BenchResult, BenchTransport, HostReport,
    Issued, ServerHandler, REQ_FILL,
};
use crate::rpc::endpoint::{Config, Endpoint};
use crate::rpc::transport::reliable::{PortLink, ReliableTransport};
use crate::time::Clock;

/// How long the server keeps answering after the client said it is done:
/// long enough for the acknowledgement of that to go out (and a resend of it
/// to be answered), short next to any run.
const LINGER: Duration = Duration::from_millis(300);
/// Server loop passes between two reads of the clock for the idle timeout.
const IDLE_CHECK_SPINS: u32 = 1024;
/// UDP socket buffers: a depth-256 burst of responses fits.
const SOCKET_BUFFER: usize = 8 << 20;

/// The two hosts, by rank.
const HOSTS: [&str; 2] = ["client", "server"];

/// Runs this rank's side (over udp or dpdk, as `args.transport` says). Rank 0 returns the report, rank 1 `None`. Errors
/// before MPI starts are the arguments' (exit 2, the same on both ranks);
/// later ones end the whole job naming the host.
pub fn bench(args: &BenchConfig) -> BenchResult<Option<BenchReport>> {
    let Checked {
        client,
        server,
        msg_size,
        resp_size,
    } = check_args(args)?;
    let names: Vec<String> = HOSTS.iter().map(|s| s.to_string()).collect();
    let ranks = Ranks::init(&names, args.timeout).map_err(|e| match e {
        InitError::Hosts(m) => (2, m),
        e => (1, e.to_string()),
    })?;
    if ranks.size() != 2 {
        return Err((
            2,
            format!(
                "rpc bench across ranks runs on exactly 2 ranks (client and server); mpirun started {}: use mpirun -np 2",
                ranks.size()
            ),
        ));
    }
    let is_client = ranks.is_driver();
    let (netns, mine, peer) = if is_client {
        (args.client_netns.as_deref(), client, server)
    } else {
        (args.server_netns.as_deref(), server, client)
    };
    ranks.enter_netns(netns);
    ranks.announce();

    // A descheduled peer on a shared machine is not a dead one, and one
    // timeout should decide, with one message naming the host: the bench's
    // `--timeout` (and MPI's), not the endpoint's retry limit or silence.
    let rcfg = crate::reliable::Config {
        retry_limit: None,
        peer_timeout: None,
        ..crate::reliable::Config::default()
    };
    let (_pool, _port, mut link) = open_link(args, &ranks, &rcfg, mine, peer);
    let mut t = ReliableTransport::new(rcfg, args.ring)
        .unwrap_or_else(|e| ranks.abort(&format!("reliable transport: {e}")));
    connect(args, &ranks, &mut t)?;

    let peer_label = ranks.hosts()[if is_client { 1 } else { 0 }].label();
    let (depths, rpcs) = if is_client {
        let depths = client_side(
            args,
            &ranks,
            &peer_label,
            &mut t,
            &mut link,
            msg_size,
            resp_size,
        );
        let rpcs = depths.iter().map(|d| d.calls).sum();
        (depths, rpcs)
    } else {
        let answered = server_side(
            args,
            &ranks,
            &peer_label,
            &mut t,
            &mut link,
            msg_size,
            resp_size,
        );
        (Vec::new(), answered)
    };

    let me = HostReport {
        name: ranks.host().name.clone(),
        rank: ranks.rank(),
        machine: ranks.processor_name(),
        netns: netns.map(str::to_string),
        address: mine.to_string(),
        rpcs,
        reliable: serde_json::to_value(t.endpoint().stats()).unwrap_or_default(),
    };
    let bytes = serde_json::to_vec(&me).unwrap_or_default();
    let Some(rows) = ranks.gather_bytes("rpc results", args.timeout, &bytes) else {
        return Ok(None);
    };
    report(args, &ranks, &rows, depths).map(Some)
}

/// What the arguments give once checked.
struct Checked {
    client: std::net::SocketAddr,
    server: std::net::SocketAddr,
    msg_size: usize,
    resp_size: u32,
}

/// The arguments' checks, before MPI starts, so both ranks fail alike
/// (exit 2).
fn check_args(args: &BenchConfig) -> BenchResult<Checked> {
    let dpdk = args.transport == BenchTransport::ReliableDpdk;
    let name = if dpdk {
        "reliable-dpdk"
    } else {
        "reliable-udp"
    };
    let (Some(client), Some(server)) = (args.client, args.server) else {
        return Err((
            2,
            format!("--transport {name} needs --client IP:PORT and --server IP:PORT (the two ranks' UDP addresses)"),
        ));
    };
    if dpdk {
        check_dpdk_args(args, client, server)?;
    }
    if args.depth.is_empty() || args.depth.contains(&0) {
        return Err((2, "queue depths must be at least 1".into()));
    }
    crate::rpc::ring::check_ring_size(args.ring).map_err(|e| (2, format!("--ring: {e}")))?;
    let config = Config::new(args.ring);
    let msg_size =
        usize::try_from(args.msg_size).map_err(|_| (2, "message too large".to_string()))?;
    let resp_size =
        u32::try_from(args.resp_size).map_err(|_| (2, "response too large".to_string()))?;
    {
        let probe: Endpoint<()> =
            Endpoint::new(config, config.local_info()).map_err(|e| (2, e.to_string()))?;
        crate::rpc::bench::check_sizes(&probe, msg_size, resp_size)?;
    }
    let max_depth = args.depth.iter().copied().max().unwrap_or(1);
    if max_depth > config.max_pending_calls {
        return Err((2, format!("queue depth above {}", config.max_pending_calls)));
    }
    Ok(Checked {
        client,
        server,
        msg_size,
        resp_size,
    })
}

/// This rank's pool, port and link to the other: a UDP socket, or a DPDK
/// port that carries the datagrams (the pool and the port outlive the
/// link). A failure ends the job naming the host.
fn open_link(
    args: &BenchConfig,
    ranks: &Ranks,
    rcfg: &crate::reliable::Config,
    mine: std::net::SocketAddr,
    peer: std::net::SocketAddr,
) -> (Pool, OpenPort, PortLink) {
    let dpdk = args.transport == BenchTransport::ReliableDpdk;
    let is_client = ranks.is_driver();
    // Headroom for the Ethernet/IPv4/UDP headers a dpdk port puts in front.
    let headroom = if dpdk { 64 } else { 0 };
    let pool = Pool::new(&PoolConfig {
        name: format!("rpc-{}", ranks.host().name),
        count: 1 << 14,
        buf_size: (rcfg.data_mtu.max(rcfg.priority_mtu) as u32 + headroom).max(2048),
        headroom: headroom as u16,
        ..PoolConfig::default()
    })
    .unwrap_or_else(|e| ranks.abort(&format!("buffer pool: {e}")));
    let mut port = if dpdk {
        let device = if is_client {
            &args.client_device
        } else {
            &args.server_device
        };
        let device = device.as_deref().unwrap_or_default();
        let core = if is_client {
            args.core
        } else {
            args.server_core
        };
        open_dpdk(args, device, core, mine, peer, &pool)
            .unwrap_or_else(|e| ranks.abort(&format!("dpdk {device} ({mine} -> {peer}): {e}")))
    } else {
        udp::open(
            &UdpConfig {
                bind: Some(mine),
                connect: Some(peer),
                rcvbuf: Some(SOCKET_BUFFER),
                sndbuf: Some(SOCKET_BUFFER),
                ..UdpConfig::default()
            },
            &pool,
        )
        .unwrap_or_else(|e| ranks.abort(&format!("udp {mine} -> {peer}: {e}")))
    };
    let (Some(rx), Some(tx)) = (
        std::mem::take(&mut port.rx).into_iter().next(),
        std::mem::take(&mut port.tx).into_iter().next(),
    ) else {
        ranks.abort(&"the port has no queues")
    };
    let link = PortLink::new(rx, tx, pool.cache(), pool.cache());
    (pool, port, link)
}

/// The out-of-band step: ring records, and the sizes both ranks were
/// started with (they must agree, or the server would answer other sizes).
fn connect(args: &BenchConfig, ranks: &Ranks, t: &mut ReliableTransport) -> BenchResult<()> {
    let info = t.info();
    let mine_words = [
        u64::from(info.ring_region),
        info.ring_size,
        args.msg_size,
        args.resp_size,
    ];
    let (both, _) = ranks.exchange("rpc connect", args.timeout, &mine_words, 8, |all| {
        all.iter().flat_map(|r| r.iter().copied()).collect()
    });
    let (c, s) = (&both[..4], &both[4..]);
    if c[1..] != s[1..] {
        return Err((
            2,
            format!(
                "the ranks were started with different sizes (client: ring {} B, request {} B, response {} B; server: {} B, {} B, {} B): give both the same arguments",
                c[1], c[2], c[3], s[1], s[2], s[3]
            ),
        ));
    }
    let theirs = if ranks.is_driver() { s } else { c };
    let peer_info = crate::rpc::transport::reliable::ReliableInfo {
        ring_region: crate::reliable::RegionId::try_from(theirs[0]).unwrap_or_else(|_| {
            ranks.abort(&format!("peer ring region {} out of range", theirs[0]))
        }),
        ring_size: theirs[1],
    };
    t.connect(peer_info)
        .unwrap_or_else(|e| ranks.abort(&format!("connect: {e}")));
    Ok(())
}

/// Rank 0's report: its depths and every host's counters (`rows`, as
/// gathered).
fn report(
    args: &BenchConfig,
    ranks: &Ranks,
    rows: &[Vec<u8>],
    depths: Vec<crate::rpc::bench::DepthReport>,
) -> BenchResult<BenchReport> {
    let (client, server) = (
        args.client.map(|a| a.to_string()).unwrap_or_default(),
        args.server.map(|a| a.to_string()).unwrap_or_default(),
    );
    let hosts = rows
        .iter()
        .enumerate()
        .map(|(r, b)| {
            serde_json::from_slice::<HostReport>(b).map_err(|e| {
                (
                    1,
                    format!("{}: unreadable results: {e}", ranks.hosts()[r].label()),
                )
            })
        })
        .collect::<BenchResult<Vec<_>>>()?;
    let over = if args.transport == BenchTransport::ReliableDpdk {
        format!(
            "dpdk ({} / {})",
            args.client_device.as_deref().unwrap_or_default(),
            args.server_device.as_deref().unwrap_or_default()
        )
    } else {
        "udp".to_string()
    };
    Ok(BenchReport {
        transport: args.transport,
        shm: format!(
            "reliable channel over {over}, client {client}{} <-> server {server}{}",
            args.client_netns
                .as_deref()
                .map(|n| format!(" (netns {n})"))
                .unwrap_or_default(),
            args.server_netns
                .as_deref()
                .map(|n| format!(" (netns {n})"))
                .unwrap_or_default()
        ),
        ring_size: args.ring,
        msg_size: args.msg_size,
        resp_size: args.resp_size,
        core: args.core,
        pingpong: None,
        pingpong_two_lines: None,
        transport_echo: None,
        depths,
        hosts,
    })
}

/// Rank 0: every depth, then `'D'` until acknowledged. Any failure ends the
/// job (the server rank cannot be told otherwise), naming the server when it
/// stopped answering.
#[allow(clippy::too_many_arguments)]
fn client_side(
    args: &BenchConfig,
    ranks: &Ranks,
    server: &str,
    t: &mut ReliableTransport,
    link: &mut PortLink,
    msg_size: usize,
    resp_size: u32,
) -> Vec<crate::rpc::bench::DepthReport> {
    if let Err((_, m)) = pin(args.core) {
        ranks.abort(&m);
    }
    let config = Config::new(args.ring);
    let mut ep: Endpoint<Issued> =
        Endpoint::new(config, config.local_info()).unwrap_or_else(|e| ranks.abort(&e.to_string()));
    let clock = Clock::new();
    let mut payload = vec![REQ_FILL; msg_size];
    let mut depths = Vec::new();
    for &depth in &args.depth {
        let r = run_depth(
            &mut ep,
            &mut *t,
            &mut |t: &mut ReliableTransport| {
                link.pump(t, clock.now());
            },
            &clock,
            &mut payload,
            resp_size,
            depth,
            args.duration,
            args.timeout,
            None,
        );
        match r {
            Ok(d) => depths.push(d),
            Err((_, m)) if m == stalled(args.timeout) => ranks.abort(&format!(
                "host {server} stopped answering RPCs at depth {depth}: {m} (dead, hung or unreachable)"
            )),
            Err((_, m)) => ranks.abort(&format!("depth {depth}, with host {server}: {m}")),
        }
    }
    if let Err(e) = t.send_done() {
        ranks.abort(&format!("telling {server} the bench is done: {e}"));
    }
    let start = clock.now();
    while !t.settled() {
        link.pump(t, clock.now());
        if let Some(why) = t.failure() {
            ranks.abort(&format!("{server}: {why}"));
        }
        if clock.now() - start > args.timeout {
            ranks.abort(&format!(
                "host {server} did not acknowledge the end of the bench within {:.1} s (dead, hung or unreachable)",
                args.timeout.as_secs_f64()
            ));
        }
    }
    depths
}

/// Rank 1: answers until the client is done (then lingers so the last
/// acknowledgements leave). Returns the requests answered. A client that
/// goes quiet for `--timeout`, a damaged request or a failed transport ends
/// the job.
#[allow(clippy::too_many_arguments)]
fn server_side(
    args: &BenchConfig,
    ranks: &Ranks,
    client: &str,
    t: &mut ReliableTransport,
    link: &mut PortLink,
    msg_size: usize,
    resp_size: u32,
) -> u64 {
    let fail = |m: &dyn std::fmt::Display| -> ! { ranks.abort(m) };
    if let Err((_, m)) = pin(args.server_core) {
        fail(&m);
    }
    let config = Config::new(args.ring);
    let mut ep: Endpoint<()> =
        Endpoint::new(config, config.local_info()).unwrap_or_else(|e| fail(&e));
    let mut h = ServerHandler::new(config.max_pending_calls, true);
    h.set_resp_size(resp_size as usize);
    h.expect_len(msg_size);
    let clock = Clock::new();
    let mut last = ep.stats().requests;
    let mut idle_since = clock.now();
    let mut done_at = None;
    let mut spins = 0u32;
    loop {
        link.pump(t, clock.now());
        if let Err(e) = ep.poll(&mut *t, &mut h) {
            fail(&format!("with host {client}: {e}"));
        }
        if let Err((_, m)) = h.reply_later(&mut ep, &mut *t).and_then(|()| h.check()) {
            fail(&format!("from host {client}: {m}"));
        }
        spins = spins.wrapping_add(1);
        if spins % IDLE_CHECK_SPINS != 0 {
            continue;
        }
        let now = clock.now();
        match done_at {
            Some(at) if now - at > LINGER => return ep.stats().replies,
            Some(_) => {}
            None if t.peer_done() => done_at = Some(now),
            None => {
                let n = ep.stats().requests;
                if n != last {
                    last = n;
                    idle_since = now;
                } else if now - idle_since > args.timeout {
                    fail(&format!(
                        "host {client} went quiet: no request for {:.1} s (dead, hung or unreachable)",
                        args.timeout.as_secs_f64()
                    ));
                }
            }
        }
    }
}

/// The checks of `--transport reliable-dpdk`'s own arguments, before MPI
/// starts (exit 2 on both ranks alike).
fn check_dpdk_args(
    args: &BenchConfig,
    client: std::net::SocketAddr,
    server: std::net::SocketAddr,
) -> BenchResult<()> {
    if !cfg!(feature = "dpdk") {
        return Err((
            2,
            "--transport reliable-dpdk needs the `dpdk` feature: rebuild with `--features mpi,dpdk`"
                .into(),
        ));
    }
    for (flag, dev) in [
        ("--client-device", &args.client_device),
        ("--server-device", &args.server_device),
    ] {
        if dev.as_deref().is_none_or(str::is_empty) {
            return Err((
                2,
                format!("--transport reliable-dpdk needs {flag} (a DPDK device, like net_af_packet0,iface=veth0, or a PCI address)"),
            ));
        }
    }
    for (flag, a) in [("--client", client), ("--server", server)] {
        if !a.is_ipv4() {
            return Err((
                2,
                format!("{flag} {a}: a dpdk port carries IPv4 datagrams only"),
            ));
        }
    }
    if client.ip() == server.ip() {
        return Err((
            2,
            format!("--client and --server have the same address {}: the two dpdk ports must own one each", client.ip()),
        ));
    }
    Ok(())
}

/// Starts the EAL with `device` and opens it as a port that carries UDP
/// datagrams from `mine` to `peer`: it owns `mine` (answering ARP for it),
/// resolves `peer`'s MAC address (waiting for the peer rank to open its own
/// port) and puts the headers on each datagram
/// ([`crate::pipeline::build::carry_datagrams`]).
#[cfg(feature = "dpdk")]
fn open_dpdk(
    args: &BenchConfig,
    device: &str,
    core: Option<usize>,
    mine: std::net::SocketAddr,
    peer: std::net::SocketAddr,
    pool: &Pool,
) -> Result<OpenPort, String> {
    let (std::net::SocketAddr::V4(mine), std::net::SocketAddr::V4(peer)) = (mine, peer) else {
        return Err("IPv4 addresses only".into());
    };
    let mut eal = args.eal.clone();
    // A PCI address is allowed (-a); anything else is a virtual device.
    let is_pci = device.split(',').next().is_some_and(|d| {
        d.contains(':')
            && d.chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
    });
    if is_pci {
        eal.push("-a".into());
        eal.push(device.to_string());
    } else {
        eal.push("--no-pci".into());
        eal.push(format!("--vdev={device}"));
    }
    if !eal
        .iter()
        .any(|a| a.starts_with("-l") || a.starts_with("--lcores"))
    {
        eal.push("-l".into());
        eal.push(core.unwrap_or(0).to_string());
    }
    if !eal.iter().any(|a| a.starts_with("--file-prefix")) {
        eal.push(format!("--file-prefix=linerate-{}", std::process::id()));
    }
    let cores = crate::pipeline::available_cores();
    let e = crate::sys::dpdk::init(&eal).map_err(|e| format!("the EAL did not start: {e}"))?;
    // The EAL pins this thread to its lcore; the bench pins itself as asked.
    crate::sys::dpdk::eal::set_affinity(&cores);
    let name = device.split(',').next().unwrap_or(device);
    let port = crate::port::dpdk::open(
        "rpc",
        &crate::port::dpdk::DpdkConfig {
            device: name.to_string(),
            ..crate::port::dpdk::DpdkConfig::default()
        },
        e,
    )
    .map_err(|e| e.to_string())?;
    let mac = port
        .stats
        .mac()
        .unwrap_or(crate::pipeline::build::DEFAULT_PORT_MAC);
    let (port, shared) = crate::neigh::bind::wrap(
        port,
        crate::neigh::Config {
            mac,
            addrs: vec![crate::neigh::Owned {
                ip: std::net::IpAddr::V4(*mine.ip()),
                prefix: 32,
            }],
        },
        pool.clone(),
    );
    crate::pipeline::build::carry_datagrams(
        port,
        &shared,
        crate::pipeline::UdpBinding {
            bind: mine,
            connect: peer,
            // The peer rank may start late: wait for it as long as for any
            // other step of the job.
            resolve_timeout: args.timeout,
        },
    )
    .map_err(|e| {
        format!(
            "{e} (--timeout {:?} is how long the peer is waited for)",
            args.timeout
        )
    })
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(
    _args: &BenchConfig,
    _device: &str,
    _core: Option<usize>,
    _mine: std::net::SocketAddr,
    _peer: std::net::SocketAddr,
    _pool: &Pool,
) -> Result<OpenPort, String> {
    Err("the `dpdk` feature is not built in".into())
}
