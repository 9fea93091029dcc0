//! Our defaults against usnic mode on the same simulated link: goodput,
//! resends per lost segment, and delivery latency of fixed-size messages.
//! Used by `benches/reliable_bench.rs` and the `linerate reliable compare`
//! command. Virtual time: results are exact for a given seed.

use super::endpoint::{Config, Event};
use super::sim::{LinkConfig, Pair};
use super::wire::Channel;
use crate::time::Instant;
use core::time::Duration;
use serde::Serialize;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// Messages per run.
    pub messages: u64,
    /// Bytes per message (at least 8: the index is stamped in front).
    pub message_size: usize,
    /// Runs (seeds) per cell; medians are reported.
    pub seeds: u64,
    /// Offered load of the latency run, as a fraction of the link rate.
    pub load: f64,
    /// Our configuration: the defaults, or with `window` and `credits`
    /// changed (`linerate reliable compare --window --credits`). usnic mode
    /// always runs with [`Config::usnic`].
    pub ours: Config,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            messages: 4000,
            message_size: 8192,
            seeds: 5,
            load: 0.5,
            ours: Config::default(),
        }
    }
}

/// One saturating transfer.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Transfer {
    /// Message bytes delivered per second of virtual time, in bits/s.
    pub goodput_bps: f64,
    /// Data segments the link lost.
    pub lost: u64,
    /// Resends by the sender.
    pub retransmits: u64,
    /// Of those, second copies of resends whose earlier resend was lost
    /// ([`Config::repair_copies`]).
    pub repair_copies: u64,
    /// Retransmit-timer expiries at the sender.
    pub timeouts: u64,
}

/// Medians over seeds of one (mode, link) cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// Median goodput, bits/s.
    pub goodput_bps: f64,
    /// Median resends per lost data segment (0 when nothing was lost).
    pub retx_per_loss: f64,
    /// Mean timer expiries per run.
    pub timeouts_per_run: f64,
    /// Delivery latency percentiles over all seeds of the paced run, microseconds.
    pub latency_us: Latency,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

fn message(i: u64, size: usize) -> Vec<u8> {
    let mut v = vec![(i % 251) as u8; size.max(8)];
    v[..8].copy_from_slice(&i.to_be_bytes());
    v
}

fn stamp(d: &[u8]) -> Option<u64> {
    let a: [u8; 8] = d.get(..8)?.try_into().ok()?;
    Some(u64::from_be_bytes(a))
}

const LIMIT: Instant = Instant::from_millis(600_000);

/// Sends `n` messages as fast as the link takes them; checks every byte and
/// the order; goodput is measured to the last delivery.
pub fn saturate(
    cfg: &Config,
    link: &LinkConfig,
    n: u64,
    size: usize,
    seed: u64,
) -> Result<Transfer, String> {
    let mut p = Pair::symmetric(cfg.clone(), link.clone(), seed);
    for i in 0..n {
        p.a.send(Channel::Data, &message(i, size))
            .map_err(|e| e.to_string())?;
    }
    let mut got = 0u64;
    let mut last = Instant::ZERO;
    while got < n {
        if !p.step() || p.now > LIMIT {
            return Err(format!("stalled at {} after {got}/{n} messages", p.now));
        }
        for (t, e) in p.b_events.drain(..) {
            match e {
                Event::Message { data, .. } => {
                    if data != message(got, size) {
                        return Err(format!("message {got} corrupt or out of order"));
                    }
                    got += 1;
                    last = t;
                    p.b.recycle(data);
                }
                other => return Err(format!("unexpected event {other:?}")),
            }
        }
    }
    Ok(Transfer {
        goodput_bps: (n as f64 * size as f64 * 8.0) / last.as_secs_f64().max(1e-12),
        lost: p.ab.stats().lost,
        retransmits: p.a.stats().retransmits,
        repair_copies: p.a.stats().repair_copies,
        timeouts: p.a.stats().timeouts,
    })
}

/// Offers `n` messages at `load` of the link rate; returns each message's
/// delivery latency (send call to delivery event).
pub fn paced(
    cfg: &Config,
    link: &LinkConfig,
    n: u64,
    size: usize,
    seed: u64,
    load: f64,
) -> Result<Vec<Duration>, String> {
    let mut p = Pair::symmetric(cfg.clone(), link.clone(), seed);
    let bps = if link.bandwidth_bps == 0 {
        1e12
    } else {
        link.bandwidth_bps as f64
    };
    let gap_ns = (size.max(8) as f64 * 8.0 * 1e9 / (bps * load.clamp(1e-3, 1.0))) as u64;
    let mut sent = 0u64;
    let mut sent_at = Vec::with_capacity(n as usize);
    let mut lat = Vec::with_capacity(n as usize);
    while (lat.len() as u64) < n {
        if sent < n && p.now >= Instant::from_nanos(sent * gap_ns) {
            p.a.send(Channel::Data, &message(sent, size))
                .map_err(|e| e.to_string())?;
            sent_at.push(p.now);
            sent += 1;
        }
        let target = if sent < n {
            Instant::from_nanos(sent * gap_ns)
        } else {
            LIMIT
        };
        if !p.step_to(target) || p.now > LIMIT {
            return Err(format!(
                "stalled at {} after {}/{n} messages",
                p.now,
                lat.len()
            ));
        }
        for (t, e) in p.b_events.drain(..) {
            if let Event::Message { data, .. } = e {
                let i = stamp(&data).ok_or("short message")? as usize;
                let at = sent_at.get(i).ok_or("message never sent")?;
                lat.push(t - *at);
                p.b.recycle(data);
            }
        }
    }
    Ok(lat)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Runs one cell: `seeds` saturating runs and `seeds` paced runs.
pub fn measure(cfg: &Config, link: &LinkConfig, params: &Params) -> Result<Cell, String> {
    let mut goodput = Vec::new();
    let mut per = Vec::new();
    let mut timeouts = 0u64;
    let mut lat = Vec::new();
    for s in 0..params.seeds.max(1) {
        let t = saturate(cfg, link, params.messages, params.message_size, 1000 + s)?;
        goodput.push(t.goodput_bps);
        per.push(if t.lost == 0 {
            0.0
        } else {
            t.retransmits as f64 / t.lost as f64
        });
        timeouts += t.timeouts;
        lat.extend(paced(
            cfg,
            link,
            params.messages,
            params.message_size,
            2000 + s,
            params.load,
        )?);
    }
    lat.sort_unstable();
    Ok(Cell {
        goodput_bps: median(goodput),
        retx_per_loss: median(per),
        timeouts_per_run: timeouts as f64 / params.seeds.max(1) as f64,
        latency_us: Latency {
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
            p999: percentile(&lat, 0.999),
            max: percentile(&lat, 1.0),
        },
    })
}

/// One row of the comparison table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Random loss probability.
    pub loss: f64,
    /// The link's largest per-packet jitter, microseconds.
    pub jitter_us: f64,
    /// `"ours"` or `"usnic"`.
    pub mode: &'static str,
    /// The measurements.
    pub cell: Cell,
    /// Goodput as a fraction of the same mode's lossless goodput.
    pub of_lossless: f64,
}

/// Both modes at each loss rate (a 0 % run is added for the ratio), modes
/// alternating within each loss rate.
pub fn compare(link: &LinkConfig, losses: &[f64], params: &Params) -> Result<Vec<Row>, String> {
    let modes = [("ours", params.ours.clone()), ("usnic", Config::usnic())];
    let mut lossless = [0.0f64; 2];
    let mut rows = Vec::new();
    let mut all = vec![0.0];
    all.extend(losses.iter().copied().filter(|&l| l > 0.0));
    for &loss in &all {
        let l = LinkConfig {
            loss,
            ..link.clone()
        };
        for (k, (name, cfg)) in modes.iter().enumerate() {
            let cell = measure(cfg, &l, params)?;
            if loss == 0.0 {
                lossless[k] = cell.goodput_bps;
            }
            let of_lossless = if lossless[k] > 0.0 {
                cell.goodput_bps / lossless[k]
            } else {
                0.0
            };
            if loss == 0.0 && !losses.contains(&0.0) {
                continue;
            }
            rows.push(Row {
                loss,
                jitter_us: link.jitter.as_secs_f64() * 1e6,
                mode: name,
                cell,
                of_lossless,
            });
        }
    }
    Ok(rows)
}

/// The rows as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| loss | jitter us | mode | goodput Gb/s | of lossless | resends per lost segment | timeouts per run | p50 us | p99 us | p99.9 us | max us |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let c = &r.cell;
        s.push_str(&format!(
            "| {:.0} % | {:.0} | {} | {:.3} | {:.1} % | {:.2} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
            r.loss * 100.0,
            r.jitter_us,
            r.mode,
            c.goodput_bps / 1e9,
            r.of_lossless * 100.0,
            c.retx_per_loss,
            c.timeouts_per_run,
            c.latency_us.p50,
            c.latency_us.p99,
            c.latency_us.p999,
            c.latency_us.max
        ));
    }
    s
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn small_comparison_runs_and_checks_bytes() {
        let params = Params {
            messages: 40,
            message_size: 3000,
            seeds: 1,
            load: 0.5,
            ..Params::default()
        };
        let rows = compare(&LinkConfig::default(), &[0.0, 0.05], &params).unwrap();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].of_lossless, 1.0);
        assert!(rows.iter().all(|r| r.cell.goodput_bps > 0.0));
        let t = table(&rows);
        assert_eq!(t.lines().count(), 6);
    }
}
