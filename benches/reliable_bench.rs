//! Goodput, resends per lost segment and delivery tail latency of 8 KiB
//! messages over the simulated link: our defaults against usnic mode, same
//! link, same seeds, same run (see `linerate::reliable::compare`). Virtual
//! time, so the numbers are exact for the seeds; the spread is the seeds'.
//!
//! `cargo bench --bench reliable_bench [-- --messages N --seeds S --latency-us L]`

use linerate::reliable::compare::{compare, table, Params};
use linerate::reliable::driver::pump;
use linerate::reliable::sim::LinkConfig;
use linerate::reliable::{Channel, Config, Endpoint, Event};
use linerate::time::Instant;

/// Real (wall) CPU time of both endpoints moving `n` 8 KiB messages with no
/// link in between (datagrams handed over in bursts through vectors), in ns
/// per data segment. Time advances 1 us per pass so timers behave.
fn cpu_ns_per_segment(cfg: &Config, n: u64) -> f64 {
    let mut a = Endpoint::new(cfg.clone());
    let mut b = Endpoint::new(cfg.clone());
    let msg = vec![0x5au8; 8192];
    let mut scratch = vec![0u8; 2048];
    let mut ab: Vec<Vec<u8>> = Vec::new();
    let mut ba: Vec<Vec<u8>> = Vec::new();
    let mut sent = 0u64;
    let mut got = 0u64;
    let mut t = Instant::ZERO;
    let start = std::time::Instant::now();
    while got < n {
        while sent < n && a.unacked(Channel::Data) < 256 {
            a.send(Channel::Data, &msg).unwrap();
            sent += 1;
        }
        let inbound = core::mem::take(&mut ba);
        pump(
            &mut a,
            t,
            inbound.iter().map(|v| &v[..]),
            &mut scratch,
            &mut Burst(&mut ab, 32),
            |_| {},
        );
        let inbound = core::mem::take(&mut ab);
        let mut delivered = Vec::new();
        pump(
            &mut b,
            t,
            inbound.iter().map(|v| &v[..]),
            &mut scratch,
            &mut Burst(&mut ba, 32),
            |e| {
                if let Event::Message { data, .. } = e {
                    delivered.push(data);
                }
            },
        );
        for d in delivered {
            got += 1;
            b.recycle(d);
        }
        t += core::time::Duration::from_micros(1);
    }
    let el = start.elapsed().as_nanos() as f64;
    el / a.stats().tx_segments as f64
}

/// A TX burst of at most `.1` datagrams per pass.
struct Burst<'a>(&'a mut Vec<Vec<u8>>, usize);

impl linerate::reliable::driver::DatagramTx for Burst<'_> {
    fn has_room(&mut self) -> bool {
        self.0.len() < self.1
    }
    fn send(&mut self, bytes: &[u8]) {
        self.0.push(bytes.to_vec());
    }
}

fn main() {
    let mut params = Params::default();
    let mut link = LinkConfig::default();
    let args: Vec<String> = std::env::args().collect();
    // `cargo bench` passes --bench; under `cargo test --benches` run a quick smoke only.
    let smoke = !args.iter().any(|a| a == "--bench");
    if smoke {
        params.messages = 30;
        params.seeds = 1;
    }
    for w in args.windows(2) {
        match w[0].as_str() {
            "--messages" => params.messages = w[1].parse().unwrap_or(params.messages),
            "--seeds" => params.seeds = w[1].parse().unwrap_or(params.seeds),
            "--latency-us" => {
                link.latency = core::time::Duration::from_micros(w[1].parse().unwrap_or(10));
            }
            _ => {}
        }
    }
    println!(
        "link: {} Gb/s, {} us one way, TX ring {} packets; {} messages of {} B; median of {} seeds; latency at {:.0} % load",
        link.bandwidth_bps / 1_000_000_000,
        link.latency.as_micros(),
        link.queue,
        params.messages,
        params.message_size,
        params.seeds,
        params.load * 100.0
    );
    let wall = std::time::Instant::now();
    match compare(&link, &[0.0, 0.01, 0.05], &params) {
        Ok(rows) => print!("{}", table(&rows)),
        Err(e) => {
            eprintln!("reliable_bench: {e}");
            std::process::exit(1);
        }
    }
    println!("wall time {:.2} s", wall.elapsed().as_secs_f64());
    if smoke {
        return;
    }
    // Endpoint CPU cost on real time: alternating runs, median.
    let mut ours = Vec::new();
    let mut usnic = Vec::new();
    for _ in 0..5 {
        ours.push(cpu_ns_per_segment(&Config::default(), 20_000));
        usnic.push(cpu_ns_per_segment(&Config::usnic(), 20_000));
    }
    ours.sort_by(f64::total_cmp);
    usnic.sort_by(f64::total_cmp);
    println!(
        "endpoint CPU, both sides, lossless, bursts of 32: ours {:.0} ns/segment, usnic {:.0} ns/segment (median of 5 alternating runs of 20000 x 8 KiB)",
        ours[2], usnic[2]
    );
}
