//! Goodput, retransmissions per loss and delivery tail latency of 8 KiB
//! messages over the simulated link: our defaults against usnic mode, same
//! link, same seeds, same run. Virtual time, so the numbers are exact and
//! reproducible (the spread comes from the seeds, not from the machine).
//!
//! `cargo bench --bench reliable_bench` (optionally `-- --messages N --seeds S`).

use core::time::Duration;
use linerate::reliable::endpoint::{Config, Event};
use linerate::reliable::sim::{LinkConfig, Pair};
use linerate::reliable::Channel;
use linerate::time::Instant;

const MSG: usize = 8192;

struct Run {
    goodput_gbps: f64,
    retx_per_loss: f64,
    timeouts: u64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

fn msg(i: u64) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; MSG];
    v[..8].copy_from_slice(&i.to_be_bytes());
    v
}

fn stamp(d: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&d[..8]);
    u64::from_be_bytes(a)
}

/// Saturating transfer of `n` messages: goodput and retransmissions per lost segment.
fn saturate(cfg: &Config, link: &LinkConfig, n: u64, seed: u64) -> (f64, f64, u64) {
    let mut p = Pair::symmetric(cfg.clone(), link.clone(), seed);
    for i in 0..n {
        p.a.send(Channel::Data, &msg(i)).unwrap();
    }
    let mut got = 0u64;
    let mut last = Instant::ZERO;
    while got < n {
        assert!(p.step(), "stalled");
        for (t, e) in p.b_events.drain(..) {
            if let Event::Message { data, .. } = e {
                assert_eq!(stamp(&data), got, "out of order");
                assert!(data[8..].iter().all(|&b| b == (got % 251) as u8));
                got += 1;
                last = t;
                p.b.recycle(data);
            }
        }
        assert!(p.now < Instant::from_millis(600_000), "no progress");
    }
    let bits = (n as usize * MSG * 8) as f64;
    let goodput = bits / (last.as_nanos() as f64); // Gbit/s
    let lost = p.ab.stats().lost;
    let retx = p.a.stats().retransmits;
    let per = if lost == 0 {
        0.0
    } else {
        retx as f64 / lost as f64
    };
    (goodput, per, p.a.stats().timeouts)
}

/// Paced transfer at `load` of the link rate: per-message delivery latency.
fn paced(cfg: &Config, link: &LinkConfig, n: u64, seed: u64, load: f64) -> Vec<f64> {
    let mut p = Pair::symmetric(cfg.clone(), link.clone(), seed);
    let gap_ns = (MSG as f64 * 8.0 * 1e9 / (link.bandwidth_bps as f64 * load)) as u64;
    let mut sent = 0u64;
    let mut sent_at = Vec::with_capacity(n as usize);
    let mut lat = Vec::with_capacity(n as usize);
    while (lat.len() as u64) < n {
        let next_send = Instant::from_nanos(sent * gap_ns);
        if sent < n && p.now >= next_send {
            p.a.send(Channel::Data, &msg(sent)).unwrap();
            sent_at.push(p.now);
            sent += 1;
        }
        let target = if sent < n {
            Instant::from_nanos(sent * gap_ns)
        } else {
            Instant::MAX
        };
        p.step_to(target);
        for (t, e) in p.b_events.drain(..) {
            if let Event::Message { data, .. } = e {
                let i = stamp(&data) as usize;
                lat.push((t - sent_at[i]).as_nanos() as f64 / 1000.0);
                p.b.recycle(data);
            }
        }
        assert!(p.now < Instant::from_millis(600_000), "no progress");
    }
    lat
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn measure(cfg: &Config, link: &LinkConfig, n: u64, seeds: u64) -> Run {
    let mut g = Vec::new();
    let mut r = Vec::new();
    let mut to = 0;
    let mut lats = Vec::new();
    for s in 0..seeds {
        let (gp, per, t) = saturate(cfg, link, n, 1000 + s);
        g.push(gp);
        r.push(per);
        to += t;
        lats.extend(paced(cfg, link, n, 2000 + s, 0.5));
    }
    lats.sort_by(f64::total_cmp);
    Run {
        goodput_gbps: median(g),
        retx_per_loss: median(r),
        timeouts: to / seeds,
        p50_us: pct(&lats, 0.5),
        p99_us: pct(&lats, 0.99),
        p999_us: pct(&lats, 0.999),
        max_us: *lats.last().unwrap_or(&0.0),
    }
}

fn main() {
    let mut n = 4000u64;
    let mut seeds = 5u64;
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--messages" => n = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(n),
            "--seeds" => {
                seeds = args
                    .get(i + 1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(seeds)
            }
            _ => {}
        }
        i += 1;
    }
    let base = LinkConfig::default();
    println!(
        "link: {} Gb/s, {} us one way, TX ring {} packets; {n} messages of {MSG} B; median of {seeds} seeds; latency at 50% load",
        base.bandwidth_bps / 1_000_000_000,
        base.latency.as_micros(),
        base.queue
    );
    println!("| loss | mode | goodput Gb/s | % of lossless | retx per lost seg | timeouts/run | p50 us | p99 us | p99.9 us | max us |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let modes = [("ours", Config::default()), ("usnic", Config::usnic())];
    let mut lossless = [0.0f64; 2];
    for loss in [0.0, 0.01, 0.05] {
        let link = LinkConfig {
            loss,
            ..base.clone()
        };
        // Alternate the modes within each loss rate.
        let mut row = Vec::new();
        for (k, (name, cfg)) in modes.iter().enumerate() {
            let r = measure(cfg, &link, n, seeds);
            if loss == 0.0 {
                lossless[k] = r.goodput_gbps;
            }
            row.push((name, r, k));
        }
        for (name, r, k) in row {
            println!(
                "| {:.0} % | {name} | {:.3} | {:.1} % | {:.2} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                loss * 100.0,
                r.goodput_gbps,
                100.0 * r.goodput_gbps / lossless[k],
                r.retx_per_loss,
                r.timeouts,
                r.p50_us,
                r.p99_us,
                r.p999_us,
                r.max_us
            );
        }
    }
    let _ = Duration::ZERO;
}
