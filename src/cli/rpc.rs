//! `linerate rpc serve` and `linerate rpc bench`: two processes over shared memory,
//! or (`bench --transport reliable-mem`) one process whose server thread talks to
//! it over the reliable channel's PUT on two mem wires, or (`--transport
//! reliable-udp` or `reliable-dpdk` under `mpirun -np 2`) two MPI ranks over
//! UDP, on kernel sockets or DPDK ports. The benchmark
//! itself is [`crate::rpc::bench`] (across ranks [`crate::hosts::rpc`]); this
//! file parses arguments and prints.

#![forbid(unsafe_code)]

use super::output::write_json;
use super::Failure;
use crate::units::{parse_duration, parse_size};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

pub use crate::rpc::bench::{
    BenchConfig, BenchReport, BenchResult, BenchTransport, DepthReport, HostReport, Latency,
    PingPongReport, ServeConfig, WindowRates,
};

/// `linerate rpc ...`
#[derive(Debug, Clone, Args)]
pub struct RpcArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: RpcCommand,
}

/// The `rpc` subcommands.
// Parsed once per process: the size of the larger variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Subcommand)]
pub enum RpcCommand {
    /// Create the shared region and answer calls until the bench finishes.
    Serve(ServeArgs),
    /// Connect to a server, measure a ping-pong, then RPC/s and latency.
    Bench(BenchArgs),
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

fn duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// Arguments of `rpc serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Region file (default: linerate-rpc on the hugetlbfs mount if there is one
    /// and the mapping succeeds there, else /dev/shm/linerate-rpc).
    #[arg(long)]
    pub shm: Option<PathBuf>,
    /// Ring size (a power of two).
    #[arg(long, default_value = "1 MiB", value_parser = size_arg)]
    pub ring: u64,
    /// Completion slots per side of the shared-memory region (a power of two).
    #[arg(long, default_value_t = crate::rpc::transport::shm::COMP_SLOTS)]
    pub comp_slots: u64,
    /// Let packed one-line writes of both directions share one cache line
    /// (the token line) instead of a completion slot each way: faster when
    /// the two cores are far apart, slower when they share a cache (see the
    /// manual's RPC chapter).
    #[arg(long)]
    pub token_line: bool,
    /// Core to pin to.
    #[arg(long)]
    pub core: Option<usize>,
    /// Give up when no client connects, or it goes quiet, for this long.
    #[arg(long, default_value = "30s", value_parser = duration_arg)]
    pub timeout: Duration,
    /// Answer requests after `poll` returns (`reply` for each, then `flush`)
    /// instead of during it (`Handler::answer`, the default).
    #[arg(long)]
    pub reply_later: bool,
}

impl clap::ValueEnum for BenchTransport {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            BenchTransport::Shm,
            BenchTransport::ReliableMem,
            BenchTransport::ReliableUdp,
            BenchTransport::ReliableDpdk,
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(match self {
            BenchTransport::Shm => clap::builder::PossibleValue::new("shm")
                .help("Shared memory with a separate `rpc serve` process (the default)"),
            BenchTransport::ReliableMem => clap::builder::PossibleValue::new("reliable-mem").help(
                "The reliable channel's checked PUT over two mem wires, the server in a second thread of this process (no `rpc serve` needed)",
            ),
            BenchTransport::ReliableUdp => clap::builder::PossibleValue::new("reliable-udp").help(
                "The reliable channel's checked PUT over UDP between two MPI ranks: `mpirun -np 2 linerate rpc bench --transport reliable-udp --client ADDR --server ADDR` (rank 0 the client, rank 1 the server; feature `mpi`)",
            ),
            BenchTransport::ReliableDpdk => clap::builder::PossibleValue::new("reliable-dpdk").help(
                "The same over DPDK ports: each rank drives its own device (`--client-device`, `--server-device`), whose frames carry the UDP datagrams (features `mpi` and `dpdk`)",
            ),
        })
    }
}

/// Arguments of `rpc bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Transport to measure.
    #[arg(long, value_enum, default_value = "shm")]
    pub transport: BenchTransport,
    /// Ring size for `--transport reliable-mem` and `reliable-udp` (with shm
    /// the server chooses).
    #[arg(long, default_value = "1 MiB", value_parser = size_arg)]
    pub ring: u64,
    /// Random loss on each mem wire (`--transport reliable-mem`), 0 to 1.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Core of the server thread (`--transport reliable-mem`) or of the
    /// server rank (`reliable-udp`).
    #[arg(long)]
    pub server_core: Option<usize>,
    /// Region file the server created (default: the server's default places).
    #[arg(long)]
    pub shm: Option<PathBuf>,
    /// Queue depths to measure, in order (comma-separated).
    #[arg(long, default_value = "1,256", value_delimiter = ',')]
    pub depth: Vec<u32>,
    /// Request payload size in bytes.
    #[arg(long, default_value = "32", value_parser = size_arg)]
    pub msg_size: u64,
    /// Response payload size in bytes.
    #[arg(long, default_value = "32", value_parser = size_arg)]
    pub resp_size: u64,
    /// Duration of each RPC measurement.
    #[arg(long, default_value = "2s", value_parser = duration_arg)]
    pub duration: Duration,
    /// Duration of each baseline: the two ping-pongs and the shm transport echo (0 to skip them).
    #[arg(long, default_value = "1s", value_parser = duration_arg)]
    pub pingpong: Duration,
    /// Core to pin to.
    #[arg(long)]
    pub core: Option<usize>,
    /// Wait this long for the server; with reliable-udp, also how long
    /// responses may stop before the server rank is called dead or hung;
    /// with reliable-dpdk, also how long each rank's port waits for the
    /// other's to answer ARP.
    #[arg(long, default_value = "30s", value_parser = duration_arg)]
    pub timeout: Duration,
    /// The client rank's UDP address, IP:PORT (`--transport reliable-udp`).
    #[arg(long)]
    pub client: Option<std::net::SocketAddr>,
    /// The server rank's UDP address, IP:PORT (`--transport reliable-udp`).
    #[arg(long)]
    pub server: Option<std::net::SocketAddr>,
    /// Network namespace the client rank enters before opening its socket
    /// (emulated hosts on one machine, see scripts/mpi-hosts).
    #[arg(long)]
    pub client_netns: Option<String>,
    /// Network namespace the server rank enters before opening its socket.
    #[arg(long)]
    pub server_netns: Option<String>,
    /// The client rank's DPDK device (`--transport reliable-dpdk`): a
    /// virtual device like `net_af_packet0,iface=veth0` (given to the EAL as
    /// --vdev) or a NIC's PCI address (-a).
    #[arg(long)]
    pub client_device: Option<String>,
    /// The server rank's DPDK device (`--transport reliable-dpdk`).
    #[arg(long)]
    pub server_device: Option<String>,
    /// EAL arguments both ranks start with (`--transport reliable-dpdk`),
    /// space-separated; each rank adds its device, `-l` and a --file-prefix
    /// of its own.
    #[arg(
        long,
        default_value = "--no-huge -m 512 --no-telemetry --log-level=lib.eal:error"
    )]
    pub eal: String,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

impl ServeArgs {
    /// The server's configuration.
    pub fn config(&self) -> ServeConfig {
        ServeConfig {
            shm: self.shm.clone(),
            ring: self.ring,
            comp_slots: self.comp_slots,
            token_line: self.token_line,
            core: self.core,
            timeout: self.timeout,
            reply_later: self.reply_later,
        }
    }
}

impl BenchArgs {
    /// The bench's configuration.
    pub fn config(&self) -> BenchConfig {
        BenchConfig {
            transport: self.transport,
            ring: self.ring,
            loss: self.loss,
            server_core: self.server_core,
            shm: self.shm.clone(),
            depth: self.depth.clone(),
            msg_size: self.msg_size,
            resp_size: self.resp_size,
            duration: self.duration,
            pingpong: self.pingpong,
            core: self.core,
            timeout: self.timeout,
            client: self.client,
            server: self.server,
            client_netns: self.client_netns.clone(),
            server_netns: self.server_netns.clone(),
            client_device: self.client_device.clone(),
            server_device: self.server_device.clone(),
            eal: self.eal.split_whitespace().map(str::to_string).collect(),
        }
    }
}

/// Runs the server side until the bench says it is done. Returns calls answered.
pub fn serve(args: &ServeArgs) -> BenchResult<u64> {
    crate::rpc::bench::serve(&args.config())
}

/// Runs the bench side against a running server (or, with reliable-mem, its
/// own). With reliable-udp this is one rank of two: rank 0 gets the report,
/// the server rank `None`.
pub fn bench(args: &BenchArgs) -> BenchResult<Option<BenchReport>> {
    let config = args.config();
    if config.transport.across_ranks() {
        return bench_ranks(&config);
    }
    crate::rpc::bench::bench(&config).map(Some)
}

#[cfg(feature = "mpi")]
fn bench_ranks(config: &BenchConfig) -> BenchResult<Option<BenchReport>> {
    crate::hosts::rpc::bench(config)
}

#[cfg(not(feature = "mpi"))]
fn bench_ranks(_config: &BenchConfig) -> BenchResult<Option<BenchReport>> {
    Err((
        2,
        "--transport reliable-udp and reliable-dpdk need the `mpi` feature: rebuild with \
         `cargo build --release --features mpi` (needs Open MPI: libopenmpi-dev, openmpi-bin)"
            .into(),
    ))
}

/// Runs `linerate rpc ...` (exit status 0, 1 runtime failure, 2 bad input).
pub fn run(args: &RpcArgs) -> Result<(), Failure> {
    match &args.command {
        RpcCommand::Serve(a) => {
            let n = serve(a).map_err(failure)?;
            eprintln!("rpc serve: answered {n} calls");
        }
        RpcCommand::Bench(a) => {
            // The server rank of a run across ranks: rank 0 reports.
            let Some(rep) = bench(a).map_err(failure)? else {
                return Ok(());
            };
            print_report(&rep);
            if let Some(p) = &a.json {
                write_json(p, &rep)?;
            }
        }
    }
    Ok(())
}

/// The bench's `(exit status, message)` as a failure.
fn failure((code, message): (i32, String)) -> Failure {
    match code {
        2 => Failure::Input(message),
        _ => Failure::Runtime(message),
    }
}

fn print_report(r: &BenchReport) {
    println!(
        "rpc bench over {} (ring {} B, request {} B, response {} B)",
        r.shm, r.ring_size, r.msg_size, r.resp_size
    );
    for (name, p) in [
        ("ping-pong", &r.pingpong),
        ("2-line p-p", &r.pingpong_two_lines),
        ("shm echo", &r.transport_echo),
    ] {
        let Some(p) = p else { continue };
        println!(
            "  {name:<10}  {:>11.0} round trips/s (1 ms windows: median {:>11.0}, best {:>11.0})   RTT p50 {:>6} ns   p99 {:>7} ns",
            p.round_trips_per_sec,
            p.windows.median_per_sec,
            p.windows.max_per_sec,
            p.rtt.p50_ns,
            p.rtt.p99_ns
        );
    }
    for d in &r.depths {
        println!(
            "  depth {:>4}  {:>11.0} RPC/s         (1 ms windows: median {:>11.0}, best {:>11.0})   {:>8.1} MB/s   latency p50 {:>6} ns   p90 {:>6} ns   p99 {:>8} ns   p99.9 {:>9} ns{}",
            d.depth,
            d.rpc_per_sec,
            d.windows.median_per_sec,
            d.windows.max_per_sec,
            d.bytes_per_sec / 1e6,
            d.latency.p50_ns,
            d.latency.p90_ns,
            d.latency.p99_ns,
            d.latency.p999_ns,
            d.p50_vs_pingpong_p50
                .map(|x| format!("   p50 {x:.2}x ping-pong p50"))
                .unwrap_or_default()
                + &d.p50_vs_two_line_pingpong_p50
                    .map(|x| format!(", {x:.2}x 2-line"))
                    .unwrap_or_default()
                + &d.p50_over_transport_echo_ns
                    .map(|x| format!(", endpoint {x:+} ns over the echo"))
                    .unwrap_or_default()
        );
    }
    let over = if r.transport == BenchTransport::ReliableDpdk {
        "dpdk"
    } else {
        "udp"
    };
    for h in &r.hosts {
        let n = |k: &str| h.reliable.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        println!(
            "  host {} (rank {}) on {}{}  {over} {}  {} RPCs {}  datagrams out {} in {}  retransmits {}",
            h.name,
            h.rank,
            h.machine,
            h.netns
                .as_deref()
                .map(|n| format!(" netns {n}"))
                .unwrap_or_default(),
            h.address,
            h.rpcs,
            if h.rank == 0 { "made" } else { "answered" },
            n("tx_packets"),
            n("rx_packets"),
            n("retransmits")
        );
    }
}
