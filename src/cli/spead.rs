//! `linerate spead send` and `linerate spead recv`: quick SPEAD tools like spead2's
//! `spead2_send` / `spead2_recv`, over kernel UDP sockets.
//!
//! The sockets are the runtime's udp port (`recvmmsg`/`sendmmsg` in batches of
//! up to [`BURST_MAX`] datagrams, into and out of pool buffers); every protocol
//! decision is made by the sans-IO cores.

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;

use crate::buf::copy::CopyMode;
use crate::buf::{Burst, Pool, PoolConfig, BURST_MAX};
use crate::metrics::SpeadCounters;
use crate::port::udp::UdpConfig;
use crate::port::{RxQueue, TxQueue};
use crate::spead::assemble::{AssembleConfig, AssembleStats, Assembler};
use crate::spead::check::{write_chunk, CheckReport, Checker};
use crate::spead::chunk::{ChunkStats, ChunkStream, KatgpucbfPlace, Push};
use crate::spead::fsim::{Fsim, FsimConfig};
use crate::spead::plot::Sample;
use crate::spead::send::{generic_descriptors, Pacer, Packetizer, SendHeap};
use crate::spead::wire::{Flavour, ItemValue};
use crate::time::Clock;
use crate::units::{parse_duration, parse_size, Rate};

/// Largest datagram the commands handle (jumbo frames); larger ones are
/// truncated by the port and counted as dropped.
pub const MAX_DATAGRAM: usize = 9216;

/// A pool of `MAX_DATAGRAM`-byte buffers for the commands' udp port.
fn pool() -> Result<Pool, Failure> {
    Pool::new(&PoolConfig {
        name: "spead".into(),
        count: 4096,
        buf_size: (MAX_DATAGRAM + 128) as u32,
        headroom: 128,
        ..PoolConfig::default()
    })
    .map_err(runtime)
}

fn socket_addr(what: &str, text: &str) -> Result<SocketAddr, Failure> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| Failure::Input(format!("{what} `{text}` is not a host:port")))
}

fn udp_port(config: &UdpConfig, pool: &Pool) -> Result<crate::port::OpenPort, Failure> {
    let port = crate::port::udp::open(config, pool).map_err(|e| match e {
        crate::port::PortError::Input(m) => Failure::Input(m),
        crate::port::PortError::Runtime(m) => Failure::Runtime(m),
    })?;
    for w in &port.warnings {
        eprintln!("linerate spead: {w}");
    }
    Ok(port)
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
    /// Non-temporal stores (the default; see BENCHMARKS.md).
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
    pub metrics: crate::metrics::MetricsArgs,
}

/// Runs `linerate spead ...`; returns the exit status (0 ok, 1 runtime failure, 2 bad input).
pub fn run(args: &SpeadArgs) -> i32 {
    let r = match &args.command {
        SpeadCommand::Send(a) => send(a),
        SpeadCommand::Recv(a) => recv(a),
    };
    match r {
        Ok(code) => code,
        Err(Failure::Input(m)) => {
            eprintln!("linerate spead: {m}");
            2
        }
        Err(Failure::Runtime(m)) => {
            eprintln!("linerate spead: {m}");
            1
        }
    }
}

enum Failure {
    Input(String),
    Runtime(String),
}

fn input<E: std::fmt::Display>(e: E) -> Failure {
    Failure::Input(e.to_string())
}

fn runtime<E: std::fmt::Display>(e: E) -> Failure {
    Failure::Runtime(e.to_string())
}

#[derive(Debug, Serialize)]
struct SendReport {
    heaps: u64,
    packets: u64,
    bytes: u64,
    /// Packets the kernel refused because nobody listened at the destination
    /// yet (an ICMP port unreachable came back): counted, not fatal.
    refused: u64,
    secs: f64,
    gbps: f64,
    pps: f64,
}

fn bits_per_second(rate: &str, packet: usize) -> Result<f64, Failure> {
    let r: Rate = rate.parse().map_err(input)?;
    Ok(match r {
        Rate::Pps(p) => p * packet as f64 * 8.0,
        Rate::L2Bps(b) | Rate::L1Bps(b) => b,
        Rate::Percent(_) => {
            return Err(Failure::Input(
                "a percentage rate needs a port line rate; give Gbps or pps".into(),
            ))
        }
    })
}

fn send(a: &SendArgs) -> Result<i32, Failure> {
    let flavour = a.flavour.flavour();
    let packet = parse_size(&a.packet).map_err(input)? as usize;
    if packet > MAX_DATAGRAM {
        return Err(Failure::Input(format!(
            "--packet {packet} is above the {MAX_DATAGRAM}-byte datagrams this command sends"
        )));
    }
    let dest = socket_addr("destination", &a.dest)?;
    let pool = pool()?;
    let port = udp_port(
        &UdpConfig {
            bind: None,
            connect: Some(dest),
            multicast: None,
            interface: Ipv4Addr::UNSPECIFIED,
            rcvbuf: None,
            sndbuf: Some(4 << 20),
            queues: 1,
            ..UdpConfig::default()
        },
        &pool,
    )?;
    let stats = port.stats.clone();
    let Some(mut tx) = port.tx.into_iter().next() else {
        return Err(Failure::Runtime("the udp port has no transmit side".into()));
    };
    let mut cache = pool.cache();
    let mut burst = Burst::new();
    let clock = Clock::new();
    let bps = bits_per_second(&a.rate, packet)?;
    let mut pacer = Pacer::new(bps, clock.now(), 100_000);
    let mut report = SendReport {
        heaps: 0,
        packets: 0,
        bytes: 0,
        refused: 0,
        secs: 0.0,
        gbps: 0.0,
        pps: 0.0,
    };
    let mut buf = vec![0u8; packet.max(2048)];
    // Sends the burst with sendmmsg, waiting while the socket buffer is full.
    // A datagram refused because nobody listens yet is dropped and counted by
    // the port.
    let flush = |tx: &mut Box<dyn TxQueue>, burst: &mut Burst| {
        while !burst.is_empty() {
            if tx.tx_burst(clock.now(), burst) == 0 {
                std::thread::yield_now();
            }
        }
    };
    let mut emit = |data: &[u8], report: &mut SendReport| -> Result<(), Failure> {
        if bps > 0.0 {
            while let Err(due) = pacer.poll(clock.now(), data.len()) {
                // Waiting for the pacer: send what is batched first.
                flush(&mut tx, &mut burst);
                let wait = due.as_nanos().saturating_sub(clock.now().as_nanos());
                if wait > 50_000 {
                    std::thread::sleep(Duration::from_nanos(wait - 20_000));
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        let mut pkt = match cache.alloc() {
            Some(p) => p,
            None => {
                flush(&mut tx, &mut burst);
                cache
                    .alloc()
                    .ok_or_else(|| Failure::Runtime("no packet buffer left".into()))?
            }
        };
        pkt.set_data(data).map_err(runtime)?;
        let _ = burst.push(pkt);
        if burst.room() == 0 {
            flush(&mut tx, &mut burst);
        }
        report.packets += 1;
        report.bytes += data.len() as u64;
        Ok(())
    };
    let mut next_cnt = 1;
    if a.fsim {
        let mut cfg = a.feng.fsim(flavour);
        cfg.rate_gbps = bps / 1e9;
        if cfg.max_packet() > packet {
            return Err(Failure::Input(format!(
                "F-engine packets are {} bytes, more than --packet {packet}",
                cfg.max_packet()
            )));
        }
        let mut sim = Fsim::new(cfg.clone()).map_err(Failure::Input)?;
        let total = a.heaps * cfg.n_ants as u64 * cfg.packets_per_heap() as u64;
        for _ in 0..total {
            let (n, _) = sim.next_packet(&mut buf).map_err(runtime)?;
            emit(&buf[..n], &mut report)?;
        }
        report.heaps = a.heaps * cfg.n_ants as u64;
        next_cnt = a.heaps * cfg.n_ants as u64;
    } else {
        let size = parse_size(&a.heap_size).map_err(input)? as usize;
        for k in 0..a.heaps {
            let mut h = SendHeap::new(next_cnt);
            if k == 0 {
                for d in generic_descriptors(flavour) {
                    h = h.descriptor(flavour, &d).map_err(runtime)?;
                }
            }
            let data: Vec<u8> = (0..size).map(|i| (i as u64 + k) as u8).collect();
            let h = h.immediate(0x1000, k).bytes(0x1001, data);
            let (ptrs, payload) = h.layout(flavour).map_err(runtime)?;
            let mut pk = Packetizer::new(flavour, h.cnt, &ptrs, &payload, packet).map_err(input)?;
            while let Some(r) = pk.next_packet(&mut buf) {
                let n = r.map_err(runtime)?;
                emit(&buf[..n], &mut report)?;
            }
            report.heaps += 1;
            next_cnt += 1;
        }
    }
    if !a.no_stop {
        let h = SendHeap::end_of_stream(next_cnt & flavour.max_value());
        let (ptrs, payload) = h.layout(flavour).map_err(runtime)?;
        let mut pk = Packetizer::new(flavour, h.cnt, &ptrs, &payload, packet).map_err(input)?;
        while let Some(r) = pk.next_packet(&mut buf) {
            let n = r.map_err(runtime)?;
            emit(&buf[..n], &mut report)?;
        }
    }
    // The last datagrams (emit sends only full bursts or before waiting).
    flush(&mut tx, &mut burst);
    report.refused = stats.report().dropped;
    report.secs = clock.elapsed().as_secs_f64();
    report.gbps = report.bytes as f64 * 8.0 / report.secs.max(1e-9) / 1e9;
    report.pps = report.packets as f64 / report.secs.max(1e-9);
    println!(
        "sent {} heaps, {} packets, {} bytes in {:.3} s: {:.3} Gb/s, {:.0} packets/s",
        report.heaps, report.packets, report.bytes, report.secs, report.gbps, report.pps
    );
    write_json(a.json.as_ref(), &report)?;
    Ok(0)
}

fn write_json<T: Serialize>(path: Option<&PathBuf>, v: &T) -> Result<(), Failure> {
    if let Some(p) = path {
        let text = serde_json::to_string_pretty(v).map_err(runtime)?;
        crate::report::write_text(p, &text)
            .map_err(|e| Failure::Runtime(format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct RecvReport {
    mode: &'static str,
    /// The whole receive, waiting for the sender included.
    secs: f64,
    /// From the first receive burst to the last: the time the packets
    /// arrived in.
    span_s: f64,
    /// Over `span_s` (see [`Arrivals::gbps`]).
    gbps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    heaps: Option<AssembleStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunks: Option<ChunkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    check: Option<CheckReport>,
}

fn recv(a: &RecvArgs) -> Result<i32, Failure> {
    let live = crate::metrics::Live::new("spead_recv");
    let server = a.metrics.start(&live).map_err(|e| match e {
        crate::metrics::MetricsError::Bind { .. } => Failure::Input(e.to_string()),
        crate::metrics::MetricsError::Start { .. } => Failure::Runtime(e.to_string()),
    })?;
    let pool = pool()?;
    let rx = recv_port(a, &pool)?;
    let r = recv_on(rx, &pool, a, &live);
    a.metrics.stop(server);
    r
}

/// How often the receive loop publishes its counters for `--metrics`.
const PUBLISH_EVERY_S: f64 = 0.25;

/// How often the receive loop samples its counters for `--plot`.
const SAMPLE_EVERY_S: f64 = 0.5;

fn heap_sample(t: f64, s: &AssembleStats) -> Sample {
    Sample {
        t,
        bytes: s.bytes,
        good: s.heaps_complete,
        total: s.heaps_complete + s.heaps_evicted + s.heaps_flushed + s.heaps_unsized,
    }
}

fn chunk_sample(t: f64, s: &ChunkStats) -> Sample {
    Sample {
        t,
        bytes: s.bytes,
        good: s.present,
        total: s.present_slots,
    }
}

fn write_plot(a: &RecvArgs, what: &str, samples: &[Sample]) -> Result<(), Failure> {
    let Some(path) = &a.plot else {
        return Ok(());
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    }
    let title = format!("spead recv {}: {what}", a.bind);
    for ext in ["svg", "png"] {
        crate::spead::plot::plot(&title, what, samples, &path.with_extension(ext))
            .map_err(runtime)?;
    }
    Ok(())
}

/// Opens the receiving udp port (spead2's default 8 MiB socket buffer).
fn recv_port(a: &RecvArgs, pool: &Pool) -> Result<Box<dyn RxQueue>, Failure> {
    let bind = socket_addr("bind address", &a.bind)?;
    let port = udp_port(
        &UdpConfig {
            bind: Some(bind),
            connect: None,
            multicast: None,
            interface: Ipv4Addr::UNSPECIFIED,
            rcvbuf: Some(8 << 20),
            sndbuf: None,
            queues: 1,
            ..UdpConfig::default()
        },
        pool,
    )?;
    port.rx
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Runtime("the udp port has no receive side".into()))
}

/// Receives on an already bound port (the tests bind first, so no packet
/// is sent before anybody listens): bursts of datagrams with recvmmsg, each
/// offered to the assembler or the chunk stream, the buffers freed in bulk.
/// When the packets arrived, clocked once per receive burst: Gb/s is over
/// the time they arrived in, not over the time spent waiting for the sender
/// to start or for `--duration` to run out after it stopped.
#[derive(Debug, Default)]
struct Arrivals {
    /// The first burst's time (s) and the bytes counted by its end.
    first: Option<(f64, u64)>,
    last: f64,
}

impl Arrivals {
    /// A burst arrived by `now`; `bytes` are counted so far.
    fn note(&mut self, now: f64, bytes: u64) {
        self.first.get_or_insert((now, bytes));
        self.last = now;
    }

    fn span_s(&self) -> f64 {
        self.first.map_or(0.0, |(t, _)| self.last - t)
    }

    /// `bytes` as Gb/s: those counted after the first burst over the span
    /// to the last (the first burst's arrived at the span's start); over the
    /// whole `secs` when everything came in one burst.
    fn gbps(&self, bytes: u64, secs: f64) -> f64 {
        match self.first {
            Some((t, b)) if self.last > t => {
                bytes.saturating_sub(b) as f64 * 8.0 / (self.last - t) / 1e9
            }
            _ => bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
        }
    }
}

fn recv_on(
    mut rx: Box<dyn RxQueue>,
    pool: &Pool,
    a: &RecvArgs,
    live: &crate::metrics::Live,
) -> Result<i32, Failure> {
    let limit = match &a.duration {
        Some(d) => Some(parse_duration(d).map_err(input)?),
        None => None,
    };
    if a.sink == SinkArg::Write && a.out.is_none() {
        return Err(Failure::Input("--sink write needs --out DIR".into()));
    }
    let mut cache = pool.cache();
    let mut burst = Burst::new();
    // Receives a burst, sleeping briefly when the socket is empty.
    let mut next_burst = |burst: &mut Burst, clock: &Clock| {
        let n = rx.rx_burst(clock.now(), burst, BURST_MAX);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        n
    };
    let clock = Clock::new();
    let mut arrivals = Arrivals::default();
    let mut last_report = 0.0;
    let mut last_publish = 0.0;
    let mut last_sample = 0.0;
    let mut samples = vec![Sample {
        t: 0.0,
        bytes: 0,
        good: 0,
        total: 0,
    }];
    // Ctrl-C and SIGTERM end the receive as `--duration` does: the summary
    // and the JSON report are still written.
    let interrupt = crate::sys::signals::interrupt_flag();
    let done = |secs: f64| {
        limit.is_some_and(|l| secs >= l.as_secs_f64())
            || interrupt.load(std::sync::atomic::Ordering::Relaxed)
    };
    if !a.chunks {
        let mut asm = Assembler::new(AssembleConfig {
            max_heaps: a.max_heaps,
            ..AssembleConfig::default()
        });
        let published = live.set_spead(SpeadCounters::new("heaps", asm.stats()));
        while !asm.stats().stopped && !done(clock.elapsed().as_secs_f64()) {
            let n = next_burst(&mut burst, &clock);
            for p in burst.iter() {
                let _ = asm.push(0, p.data());
                while let Some(h) = asm.poll_heap() {
                    if a.verbose {
                        print_heap(&h);
                    }
                    asm.recycle(h);
                }
            }
            cache.free_bulk(&mut burst);
            let now = clock.elapsed().as_secs_f64();
            if n > 0 {
                arrivals.note(now, asm.stats().bytes);
            }
            if now - last_publish >= PUBLISH_EVERY_S {
                last_publish = now;
                published.publish(asm.stats(), None);
            }
            if a.plot.is_some() && now - last_sample >= SAMPLE_EVERY_S {
                last_sample = now;
                samples.push(heap_sample(now, asm.stats()));
            }
            if now - last_report >= 1.0 {
                last_report = now;
                let s = asm.stats();
                eprintln!(
                    "{now:.0}s: {} packets, {} heaps complete, {} evicted, {} duplicates",
                    s.packets, s.heaps_complete, s.heaps_evicted, s.packets_duplicate
                );
            }
        }
        asm.flush();
        let secs = clock.elapsed().as_secs_f64();
        let s = asm.stats().clone();
        published.publish(&s, None);
        if a.plot.is_some() {
            samples.push(heap_sample(secs, &s));
            write_plot(a, "heaps complete", &samples)?;
        }
        println!(
            "received {} packets: {} heaps complete, {} unsized, {} evicted, {} flushed incomplete, \
             {} duplicate, {} malformed packets; {:.3} Gb/s",
            s.packets,
            s.heaps_complete,
            s.heaps_unsized,
            s.heaps_evicted,
            s.heaps_flushed,
            s.packets_duplicate,
            s.packets_malformed,
            arrivals.gbps(s.bytes, secs)
        );
        write_json(
            a.json.as_ref(),
            &RecvReport {
                mode: "heaps",
                secs,
                span_s: arrivals.span_s(),
                gbps: arrivals.gbps(s.bytes, secs),
                heaps: Some(s),
                chunks: None,
                check: None,
            },
        )?;
        return Ok(0);
    }

    let cfg = a.feng.fsim(a.flavour.flavour());
    cfg.validate().map_err(Failure::Input)?;
    let place = KatgpucbfPlace::for_fsim(&cfg, a.heaps_per_fengine_per_chunk);
    let mut ccfg = place.chunk_config(a.max_chunks, a.n_chunks.max(a.max_chunks));
    ccfg.max_heaps = a.max_heaps.max(cfg.n_ants * 2);
    ccfg.copy = a.copy.mode();
    let mut stream = ChunkStream::new(ccfg, place.clone());
    let published = live.set_spead(SpeadCounters::new("chunks", stream.stats()));
    let mut checker = Checker::new(place.clone(), 100);
    let mut wrong_total = 0u64;
    let mut sink_err = None;
    let mut consume = |stream: &mut ChunkStream<KatgpucbfPlace>, checker: &mut Checker| {
        while let Some(c) = stream.poll_chunk() {
            match a.sink {
                SinkArg::Discard => {}
                SinkArg::Check => {
                    wrong_total += checker.check(&c, |w| {
                        eprintln!(
                            "wrong byte: chunk {} heap {} (feng {}, timestamp {}) offset {}: {:#04x}, expected {:#04x}",
                            w.chunk_id, w.heap_index, w.feng_id, w.timestamp, w.heap_offset, w.got, w.expected
                        )
                    });
                }
                SinkArg::Write => {
                    if let Some(dir) = &a.out {
                        if let Err(e) = write_chunk(dir, stream.place(), &c) {
                            sink_err = Some(e.to_string());
                        }
                    }
                }
            }
            stream.add_free_chunk(c);
        }
    };
    while !stream.stats().stopped && !done(clock.elapsed().as_secs_f64()) {
        let n = next_burst(&mut burst, &clock);
        for p in burst.iter() {
            while let Push::Stall = stream.push(0, p.data()) {
                consume(&mut stream, &mut checker);
            }
            consume(&mut stream, &mut checker);
        }
        cache.free_bulk(&mut burst);
        let now = clock.elapsed().as_secs_f64();
        if n > 0 {
            arrivals.note(now, stream.stats().bytes);
        }
        if now - last_publish >= PUBLISH_EVERY_S {
            last_publish = now;
            let s = stream.stats();
            published.publish(s, Some(s.fraction_present()));
        }
        if a.plot.is_some() && now - last_sample >= SAMPLE_EVERY_S {
            last_sample = now;
            samples.push(chunk_sample(now, stream.stats()));
        }
        if now - last_report >= 1.0 {
            last_report = now;
            let s = stream.stats();
            eprintln!(
                "{now:.0}s: {} packets, {} heaps complete, {} chunks, {:.4} present",
                s.packets,
                s.heaps_complete,
                s.chunks,
                s.fraction_present()
            );
        }
    }
    stream.flush();
    consume(&mut stream, &mut checker);
    let secs = clock.elapsed().as_secs_f64();
    let s = stream.stats().clone();
    published.publish(&s, Some(s.fraction_present()));
    if a.plot.is_some() {
        samples.push(chunk_sample(secs, &s));
        write_plot(a, "heaps present in chunks", &samples)?;
    }
    println!(
        "received {} packets: {} heaps complete, {} incomplete (evicted {}, flushed {}), {} too old, \
         {} rejected; {} chunks, {:.6} present; {:.3} Gb/s",
        s.packets,
        s.heaps_complete,
        s.heaps_incomplete_evicted + s.heaps_incomplete_flushed,
        s.heaps_incomplete_evicted,
        s.heaps_incomplete_flushed,
        s.heaps_too_old,
        s.heaps_rejected,
        s.chunks,
        s.fraction_present(),
        arrivals.gbps(s.bytes, secs)
    );
    if a.sink == SinkArg::Check {
        let r = checker.report();
        println!(
            "checked {} heaps ({} bytes): {} wrong bytes",
            r.heaps_checked, r.bytes_checked, r.wrong_bytes
        );
    }
    write_json(
        a.json.as_ref(),
        &RecvReport {
            mode: "chunks",
            secs,
            span_s: arrivals.span_s(),
            gbps: arrivals.gbps(s.bytes, secs),
            heaps: None,
            chunks: Some(s),
            check: (a.sink == SinkArg::Check).then(|| checker.report().clone()),
        },
    )?;
    if let Some(e) = sink_err {
        return Err(Failure::Runtime(format!("writing chunks: {e}")));
    }
    Ok(if wrong_total > 0 { 1 } else { 0 })
}

fn print_heap(h: &crate::spead::assemble::Heap) {
    println!("heap {} (sender {}):", h.cnt, h.sender);
    for d in h.descriptors() {
        println!(
            "  descriptor {:#x} {:?}: {:?} shape {:?} format {:?}",
            d.id, d.name, d.description, d.shape, d.format
        );
    }
    for it in h.items() {
        match it.value {
            ItemValue::Immediate(v) => println!("  item {:#x} = {v}", it.id),
            ItemValue::Bytes(b) => println!("  item {:#x}: {} bytes", it.id, b.len()),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// Runs the receiver of `args` on a socket bound here and now, so the
    /// sender never sends to a port nobody listens on yet.
    fn spawn_receiver(args: SpeadArgs) -> std::thread::JoinHandle<i32> {
        let SpeadCommand::Recv(r) = args.command else {
            panic!("not a recv command")
        };
        let pool = pool().unwrap_or_else(|_| panic!("no pool"));
        let rx = recv_port(&r, &pool).unwrap_or_else(|_| panic!("cannot bind {}", r.bind));
        std::thread::spawn(move || {
            recv_on(rx, &pool, &r, &crate::metrics::Live::new("spead_recv")).unwrap_or(1)
        })
    }
    use clap::Parser;
    use std::net::UdpSocket;

    #[derive(Debug, Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: Cmd,
    }

    #[derive(Debug, Subcommand)]
    enum Cmd {
        Spead(SpeadArgs),
    }

    fn parse(args: &[&str]) -> SpeadArgs {
        let Cmd::Spead(a) = Top::try_parse_from(args).unwrap().cmd;
        a
    }

    #[test]
    fn loopback_fsim_send_and_checked_chunk_recv() {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("recv.json");
        let geo = [
            "--n-ants",
            "2",
            "--n-channels-total",
            "64",
            "--n-channels-per-stream",
            "2",
            "--n-samples-per-channel",
            "64",
            "--packet-payload",
            "256",
        ];
        let bind = format!("127.0.0.1:{port}");
        let mut r = vec!["x", "spead", "recv", &bind, "--chunks", "--sink", "check"];
        r.extend_from_slice(&geo);
        r.extend_from_slice(&[
            "--heaps-per-fengine-per-chunk",
            "2",
            "--duration",
            "20s",
            "--json",
        ]);
        let json_s = json.to_str().unwrap().to_string();
        r.push(&json_s);
        let plot = dir.path().join("recv");
        let plot_s = plot.to_str().unwrap().to_string();
        r.extend_from_slice(&["--plot", &plot_s]);
        let h = spawn_receiver(parse(&r));
        let mut s = vec![
            "x",
            "spead",
            "send",
            &bind,
            "--fsim",
            "--flavour",
            "64-48",
            "--heaps",
            "8",
            "--rate",
            "50 Mbps",
        ];
        s.extend_from_slice(&geo);
        assert_eq!(run(&parse(&s)), 0);
        assert_eq!(h.join().unwrap(), 0);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["chunks"]["stopped"], true);
        assert_eq!(v["check"]["wrong_bytes"], 0);
        // Loopback at 50 Mb/s loses nothing here; every heap is checked.
        assert_eq!(v["chunks"]["heaps_complete"], 16);
        assert_eq!(v["check"]["heaps_checked"], 16);
        let svg = std::fs::read_to_string(plot.with_extension("svg")).unwrap();
        assert!(svg.contains("fraction heaps present in chunks") && svg.contains("Gb/s"));
        assert_eq!(
            &std::fs::read(plot.with_extension("png")).unwrap()[1..4],
            b"PNG"
        );
    }

    #[test]
    fn loopback_generic_heaps_send_and_recv() {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("heaps.json");
        let json_s = json.to_str().unwrap().to_string();
        let bind = format!("127.0.0.1:{port}");
        let recv_args = parse(&[
            "x",
            "spead",
            "recv",
            &bind,
            "--duration",
            "20s",
            "--json",
            &json_s,
        ]);
        let h = spawn_receiver(recv_args);
        let send_json = dir.path().join("send.json");
        let send_s = send_json.to_str().unwrap().to_string();
        let s = parse(&[
            "x",
            "spead",
            "send",
            &bind,
            "--heaps",
            "5",
            "--heap-size",
            "10 KiB",
            "--packet",
            "1000",
            "--rate",
            "50 Mbps",
            "--json",
            &send_s,
        ]);
        assert_eq!(run(&s), 0);
        assert_eq!(h.join().unwrap(), 0);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["mode"], "heaps");
        assert_eq!(v["heaps"]["stopped"], true);
        assert_eq!(v["heaps"]["heaps_complete"], 5);
        assert_eq!(v["heaps"]["packets_duplicate"], 0);
        // The receiver waited for the sender to start: the rate is over the
        // time the packets arrived in, not over the whole receive.
        let (span, secs) = (v["span_s"].as_f64().unwrap(), v["secs"].as_f64().unwrap());
        assert!(span < secs, "{v}");
        assert!(v["gbps"].as_f64().unwrap() > 0.0, "{v}");
        let sent: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&send_json).unwrap()).unwrap();
        assert_eq!(sent["heaps"], 5);
        // 10 KiB in <= 1000-byte packets: 11 per heap, plus the end-of-stream packet.
        assert_eq!(sent["packets"], 5 * 11 + 1);
    }

    #[test]
    fn gbps_is_over_the_time_the_packets_arrived_in() {
        let mut a = Arrivals::default();
        assert_eq!((a.span_s(), a.gbps(0, 10.0)), (0.0, 0.0));
        // A first burst of 1000 bytes at 3 s (after waiting for the sender),
        // then 1000 bytes every 1 ms to 4 s, then nothing until 10 s.
        for k in 0..=1000u64 {
            a.note(3.0 + k as f64 * 1e-3, 1000 * (k + 1));
        }
        assert!((a.span_s() - 1.0).abs() < 1e-9);
        assert!((a.gbps(1_001_000, 10.0) - 0.008).abs() < 1e-9);
        // Everything in one burst: no span, the whole receive.
        let mut one = Arrivals::default();
        one.note(2.0, 500);
        assert_eq!(one.gbps(1000, 2.0), 1000.0 * 8.0 / 2.0 / 1e9);
    }

    #[test]
    fn bad_input_is_status_2() {
        let a = parse(&["x", "spead", "send", "127.0.0.1:9", "--rate", "fast"]);
        assert_eq!(run(&a), 2);
        let a = parse(&[
            "x",
            "spead",
            "recv",
            "127.0.0.1:0",
            "--chunks",
            "--sink",
            "write",
        ]);
        assert_eq!(run(&a), 2);
    }
}
