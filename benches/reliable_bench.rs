//! Goodput, resends per lost segment and delivery tail latency of 8 KiB
//! messages over the simulated link: our defaults against usnic mode, same
//! link, same seeds, same run (see `linerate::reliable::compare`). Virtual
//! time, so the numbers are exact for the seeds; the spread is the seeds'.
//!
//! `cargo bench --bench reliable_bench [-- --messages N --seeds S --latency-us L]`

use linerate::reliable::compare::{compare, table, Params};
use linerate::reliable::sim::LinkConfig;

fn main() {
    let mut params = Params::default();
    let mut link = LinkConfig::default();
    let args: Vec<String> = std::env::args().collect();
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
}
