//! What `rpc bench` reports: latency percentiles, the ping-pong baseline,
//! per-depth results and the hosts of a run across ranks, plus the 1 ms
//! window rates they are measured in. Plain data apart from the window
//! counter, so the benches beside it read as measurement code.

use super::BenchTransport;
use hdrhistogram::Histogram;
use serde::Serialize;
use std::time::Duration;

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Latency {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Maximum.
    pub max_ns: u64,
}

impl Latency {
    pub(super) fn of(h: &Histogram<u64>) -> Self {
        Latency {
            count: h.len(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// The ping-pong baseline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PingPongReport {
    /// Round trips per second.
    pub round_trips_per_sec: f64,
    /// Mean round trip, from the count.
    pub mean_rtt_ns: f64,
    /// Round-trip latency (one clock read per round trip).
    pub rtt: Latency,
    /// Round trips per second in 1 ms windows: median and best window (robust
    /// against the other processes of a shared machine preempting either side).
    pub windows: WindowRates,
}

/// Rates measured over consecutive 1 ms windows.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct WindowRates {
    /// Windows measured.
    pub count: usize,
    /// Median window rate, per second.
    pub median_per_sec: f64,
    /// 90th-percentile window rate, per second.
    pub p90_per_sec: f64,
    /// Best window rate, per second.
    pub max_per_sec: f64,
}

pub(super) struct Windows {
    width_ns: u64,
    start_ns: u64,
    last_count: u64,
    rates: Vec<f64>,
}

impl Windows {
    pub(super) fn new(start_ns: u64, total: Duration) -> Self {
        let width_ns = 1_000_000;
        let n = (crate::time::duration_nanos(total) / width_ns) as usize + 16;
        Windows {
            width_ns,
            start_ns,
            last_count: 0,
            rates: Vec::with_capacity(n),
        }
    }

    /// Starts the first window at `now_ns` (when measuring begins after a warm-up).
    pub(super) fn start_at(&mut self, now_ns: u64) {
        self.start_ns = now_ns;
    }

    #[inline]
    pub(super) fn tick(&mut self, now_ns: u64, count: u64) {
        let elapsed = now_ns.saturating_sub(self.start_ns);
        if elapsed >= self.width_ns {
            if self.rates.len() < self.rates.capacity() {
                self.rates
                    .push((count - self.last_count) as f64 * 1e9 / elapsed as f64);
            }
            self.start_ns = now_ns;
            self.last_count = count;
        }
    }

    pub(super) fn summary(mut self) -> WindowRates {
        self.rates.sort_by(f64::total_cmp);
        let n = self.rates.len();
        WindowRates {
            count: n,
            median_per_sec: if n == 0 { 0.0 } else { self.rates[n / 2] },
            p90_per_sec: if n == 0 { 0.0 } else { self.rates[n * 9 / 10] },
            max_per_sec: self.rates.last().copied().unwrap_or(0.0),
        }
    }
}

/// One queue depth's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DepthReport {
    /// Queue depth.
    pub depth: u32,
    /// Completed RPCs.
    pub rpcs: u64,
    /// Measured time in seconds.
    pub seconds: f64,
    /// RPCs per second.
    pub rpc_per_sec: f64,
    /// Request plus response payload bytes per second.
    pub bytes_per_sec: f64,
    /// Call-to-response latency.
    pub latency: Latency,
    /// Mean time per RPC at this depth, `depth / rpc_per_sec`.
    pub mean_rtt_ns: f64,
    /// `mean_rtt_ns / ping-pong mean_rtt_ns` (depth 1 is the comparable one).
    pub rtt_vs_pingpong: Option<f64>,
    /// RPCs per second in 1 ms windows (see [`PingPongReport::windows`]).
    pub windows: WindowRates,
    /// Median latency over the ping-pong's median round trip.
    pub p50_vs_pingpong_p50: Option<f64>,
    /// Median latency over the two-line ping-pong's median round trip.
    pub p50_vs_two_line_pingpong_p50: Option<f64>,
    /// Depth 1: median latency minus the transport echo's median round trip,
    /// what the endpoint adds to the transport carrying the same batches.
    pub p50_over_transport_echo_ns: Option<i64>,
    /// Writes with immediate the client issued.
    pub writes: u64,
    /// Times a call was refused for credit or ring room and retried.
    pub retries: u64,
    /// Calls made at this depth, warm-up and drain included.
    pub calls: u64,
    /// Responses whose length, echoed sequence number and bytes were checked
    /// and right: every call's (the bench fails on the first wrong one).
    pub verified: u64,
}

/// The whole bench report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BenchReport {
    /// The transport measured.
    pub transport: BenchTransport,
    /// Region file (shm) or a description of the wires.
    pub shm: String,
    /// Ring size.
    pub ring_size: u64,
    /// Request payload bytes.
    pub msg_size: u64,
    /// Response payload bytes.
    pub resp_size: u64,
    /// Core of the bench process, if pinned.
    pub core: Option<usize>,
    /// The ping-pong baseline: one line both sides write.
    pub pingpong: Option<PingPongReport>,
    /// The two-line ping-pong: each side writes its own line (shm only).
    pub pingpong_two_lines: Option<PingPongReport>,
    /// The shm transport alone carrying a depth-1 RPC's two batches, no
    /// endpoint (shm only; `None` when the server has no echo region).
    pub transport_echo: Option<PingPongReport>,
    /// One entry per depth.
    pub depths: Vec<DepthReport>,
    /// The hosts of a run across MPI ranks (reliable-udp), by rank.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostReport>,
}

/// One host of an `rpc bench` across MPI ranks.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct HostReport {
    /// The host's name (`client` or `server`).
    pub name: String,
    /// Its MPI rank.
    pub rank: usize,
    /// The machine MPI placed it on.
    pub machine: String,
    /// The network namespace it entered, if any.
    pub netns: Option<String>,
    /// Its UDP address.
    pub address: String,
    /// Requests it made (client) or answered (server), warm-up included.
    pub rpcs: u64,
    /// Its reliable endpoint's counters (datagrams, retransmits, ...).
    pub reliable: serde_json::Value,
}
