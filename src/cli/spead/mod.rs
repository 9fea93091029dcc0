//! `linerate spead send` and `linerate spead recv`: quick SPEAD tools like spead2's
//! `spead2_send` / `spead2_recv`, over kernel UDP sockets.
//!
//! Each builds a pipeline from its flags (a udp port and the SPEAD stages)
//! and runs it on the runtime as `linerate run` runs a file, so the sockets
//! are the runtime's udp port (`recvmmsg`/`sendmmsg` in batches of up to
//! [`BURST_MAX`] datagrams, into and out of pool buffers) and every protocol
//! decision is made by the stages' sans-IO cores.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use super::output::write_json_if;
use super::Failure;

use crate::buf::copy::CopyMode;
use crate::buf::BURST_MAX;
use crate::spead::fsim::FsimConfig;
use crate::spead::wire::Flavour;
use crate::units::{parse_duration, parse_size, Rate};

/// Largest datagram the commands handle (jumbo frames); larger ones are
/// truncated by the port and counted as dropped.
pub const MAX_DATAGRAM: usize = 9216;

fn socket_addr(what: &str, text: &str) -> Result<SocketAddr, Failure> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Failure::Input(format!("{what} `{text}` is not a host:port")))
}

/// SPEAD tools.
#[derive(Debug, Clone, Args)]
pub struct SpeadArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SpeadCommand,
}

/// `spead send` or `spead recv`.
#[derive(Debug, Clone, Subcommand)]
pub enum SpeadCommand {
    /// Send heaps (generic or F-engine simulator) over UDP.
    Send(SendArgs),
    /// Receive heaps over UDP, as heaps or placed into chunks.
    Recv(RecvArgs),
}

/// SPEAD flavour on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlavourArg {
    /// SPEAD-64-40 (spead2's default).
    #[value(name = "64-40")]
    S64_40,
    /// SPEAD-64-48 (MeerKAT).
    #[value(name = "64-48")]
    S64_48,
}

impl FlavourArg {
    fn flavour(self) -> Flavour {
        match self {
            FlavourArg::S64_40 => Flavour::SPEAD_64_40,
            FlavourArg::S64_48 => Flavour::SPEAD_64_48,
        }
    }
}

/// F-engine geometry (katgpucbf), shared by `send --fsim` and `recv --chunks`.
#[derive(Debug, Clone, Args)]
pub struct FengineArgs {
    /// Antennas (F-engines).
    #[arg(long, default_value_t = 4)]
    pub n_ants: usize,
    /// Channels out of each F-engine.
    #[arg(long, default_value_t = 4096)]
    pub n_channels_total: usize,
    /// Channels per heap.
    #[arg(long, default_value_t = 16)]
    pub n_channels_per_stream: usize,
    /// Time samples per channel per heap.
    #[arg(long, default_value_t = 256)]
    pub n_samples_per_channel: usize,
    /// Polarisations.
    #[arg(long, default_value_t = 2)]
    pub n_pols: usize,
    /// Payload bytes per packet.
    #[arg(long, default_value_t = 1024)]
    pub packet_payload: usize,
}

impl FengineArgs {
    fn fsim(&self, flavour: Flavour) -> FsimConfig {
        FsimConfig {
            n_ants: self.n_ants,
            n_channels_total: self.n_channels_total,
            n_channels_per_stream: self.n_channels_per_stream,
            n_samples_per_channel: self.n_samples_per_channel,
            n_pols: self.n_pols,
            packet_payload: self.packet_payload,
            flavour,
            ..FsimConfig::default()
        }
    }
}

/// `linerate spead send`.
#[derive(Debug, Clone, Args)]
pub struct SendArgs {
    /// Destination `host:port`.
    pub dest: String,
    /// SPEAD flavour.
    #[arg(long, value_enum, default_value = "64-40")]
    pub flavour: FlavourArg,
    /// Largest packet (SPEAD bytes, without UDP/IP headers).
    #[arg(long, default_value = "1472")]
    pub packet: String,
    /// Sending rate of SPEAD bytes (`"10 Gbps"`, `"100 kpps"`); 0 = unpaced. With
    /// --fsim this is the simulator's rate in Gb/s.
    #[arg(long, default_value = "0 Gbps")]
    pub rate: String,
    /// Heaps to send (per antenna with --fsim).
    #[arg(long, default_value_t = 1000)]
    pub heaps: u64,
    /// Payload bytes per generic heap.
    #[arg(long, default_value = "64 KiB")]
    pub heap_size: String,
    /// Send the F-engine simulator's stream instead of generic heaps.
    #[arg(long)]
    pub fsim: bool,
    /// F-engine geometry.
    #[command(flatten)]
    pub feng: FengineArgs,
    /// Do not send the end-of-stream heap.
    #[arg(long)]
    pub no_stop: bool,
    /// Write a JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Print the pipeline these flags make (TOML, as `linerate run` reads
    /// it) and exit.
    #[arg(long)]
    pub print_pipeline: bool,
}

/// What `recv` does with chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SinkArg {
    /// Drop them.
    Discard,
    /// Verify the simulator's payload.
    Check,
    /// Write raw + JSON sidecar into --out.
    Write,
}

/// How `recv` copies payloads into chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CopyArg {
    /// Non-temporal stores (the default; see docs/src/design/spead-group.md).
    Stream,
    /// Ordinary stores (`memcpy`).
    Plain,
}

impl CopyArg {
    /// The chunk stream's copy mode.
    pub fn mode(self) -> CopyMode {
        match self {
            CopyArg::Stream => CopyMode::Stream,
            CopyArg::Plain => CopyMode::Plain,
        }
    }
}

/// `linerate spead recv`.
#[derive(Debug, Clone, Args)]
pub struct RecvArgs {
    /// Bind address `host:port`.
    pub bind: String,
    /// Place F-engine heaps into chunks (katgpucbf layout) instead of assembling heaps.
    #[arg(long)]
    pub chunks: bool,
    /// F-engine geometry for --chunks.
    #[command(flatten)]
    pub feng: FengineArgs,
    /// Flavour the F-engine stream uses (for --chunks geometry checks).
    #[arg(long, value_enum, default_value = "64-48")]
    pub flavour: FlavourArg,
    /// Heaps per F-engine per chunk.
    #[arg(long, default_value_t = 32)]
    pub heaps_per_fengine_per_chunk: u64,
    /// Live chunks (the window).
    #[arg(long, default_value_t = 4)]
    pub max_chunks: usize,
    /// Chunks allocated in all (the free ring).
    #[arg(long, default_value_t = 8)]
    pub n_chunks: usize,
    /// Live heaps being assembled.
    #[arg(long, default_value_t = 16)]
    pub max_heaps: usize,
    /// How payloads are copied into chunks.
    #[arg(long, value_enum, default_value = "stream")]
    pub copy: CopyArg,
    /// Chunk consumer.
    #[arg(long, value_enum, default_value = "discard")]
    pub sink: SinkArg,
    /// Directory for --sink write.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Stop after this long (`"10s"`); default: at the end-of-stream heap.
    #[arg(long)]
    pub duration: Option<String>,
    /// Print each heap's items (heap mode).
    #[arg(long)]
    pub verbose: bool,
    /// Write a JSON report here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Plot the receive here (PATH.svg and PATH.png): Gb/s and the fraction
    /// present (chunks) or complete (heaps) over time.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
    /// `--metrics ADDR`: Prometheus metrics while running.
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
    /// Print the pipeline these flags make (TOML, as `linerate run` reads
    /// it) and exit.
    #[arg(long)]
    pub print_pipeline: bool,
}

/// Runs `linerate spead ...`.
pub fn run(args: &SpeadArgs) -> Result<(), Failure> {
    match &args.command {
        SpeadCommand::Send(a) => send(a),
        // A wrong byte under `--sink check`: the summary says so (exit 1).
        SpeadCommand::Recv(a) => match recv(a)? {
            0 => Ok(()),
            code => Err(Failure::Silent(code.clamp(1, 255) as u8)),
        },
    }
}

fn input<E: std::fmt::Display>(e: E) -> Failure {
    Failure::Input(e.to_string())
}

mod recv;
mod send;
#[cfg(test)]
mod test;

use recv::recv;
use send::send;
