//! Prometheus metrics: `--metrics ADDR` on `run`, `trial`, `search` and
//! `spead recv` serves every counter of the running job in the OpenMetrics
//! text format at `http://ADDR/metrics`.
//!
//! What is served, and who writes it:
//! - a pipeline's stage, port, ring and pool counters, read at scrape time
//!   through a [`Probe`] (the same lock-free atomics the live stderr line reads;
//!   the lcores never see the server);
//! - the values stages publish beyond their counters (a SPEAD receiver's heap
//!   and chunk counters), read the same way;
//! - trial and search progress (phase, rate, bounds, totals), written by the
//!   controlling thread ([`Progress`]) under a mutex that only that thread and
//!   the server thread take, never an lcore.
//!
//! The model and the encoding are `prometheus-client`'s ([`encode`]); the HTTP
//! side is `tiny_http` on its own thread ([`server`]).

mod encode;
pub mod server;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use encode::{encode, Format};
pub use server::{MetricsError, MetricsServer};

use crate::runtime::run::Probe;

/// Where to serve metrics and how long to keep serving after the job (the
/// command line's `--metrics ADDR` and `--metrics-hold`).
#[derive(Debug, Clone, Default)]
pub struct MetricsConfig {
    /// Serve at http://ADDR/metrics; `None` serves nothing.
    pub addr: Option<SocketAddr>,
    /// Keep serving the final counters this long after the job ends, so a
    /// scraper sees the last values of a short run.
    pub hold: Duration,
}

impl MetricsConfig {
    /// Starts serving when an address is given. A bad or busy address is
    /// the user's input error (exit status 2).
    pub fn start(&self, live: &Arc<Live>) -> Result<Option<MetricsServer>, MetricsError> {
        match self.addr {
            None => Ok(None),
            Some(addr) => {
                let s = MetricsServer::start(addr, live.clone())?;
                eprintln!("metrics: http://{}/metrics", s.addr());
                Ok(Some(s))
            }
        }
    }

    /// Ends serving after `hold` (cut short by SIGINT or SIGTERM).
    pub fn stop(&self, server: Option<MetricsServer>) {
        if let Some(s) = server {
            let end = Instant::now() + self.hold;
            while Instant::now() < end && crate::sys::signals::received().is_none() {
                std::thread::sleep(
                    Duration::from_millis(50).min(end.saturating_duration_since(Instant::now())),
                );
            }
            s.stop();
        }
    }
}

/// Everything a scrape reads.
pub struct Live {
    started: Instant,
    command: &'static str,
    pipeline: OnceLock<Probe>,
    progress: Mutex<Progress>,
}

impl Live {
    /// Nothing to serve yet but the process itself; `command` is the
    /// subcommand (`run`, `trial`, `search`, `suite`, `spead_recv`).
    pub fn new(command: &'static str) -> Arc<Live> {
        Arc::new(Live {
            started: Instant::now(),
            command,
            pipeline: OnceLock::new(),
            progress: Mutex::new(Progress::default()),
        })
    }

    /// Serves this pipeline's counters from now on (the first one set stays).
    pub fn set_pipeline(&self, probe: Probe) {
        let _ = self.pipeline.set(probe);
    }

    /// Changes the trial and search progress (only the controlling thread
    /// calls this; a poisoned lock still holds usable numbers).
    pub fn progress(&self, f: impl FnOnce(&mut Progress)) {
        let mut p = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut p);
    }

    fn progress_now(&self) -> Progress {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Trial and search progress.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The trial running now, if one is.
    pub current: Option<TrialNow>,
    /// Trials completed.
    pub trials: u64,
    /// Totals over completed trials.
    pub totals: TrialTotals,
    /// The loss ratio of the last completed trial.
    pub last_loss_ratio: Option<f64>,
    /// The search, when one runs.
    pub search: Option<SearchNow>,
    /// Per stream, the delay variation of the last completed trial.
    pub last_delay: Vec<StreamDelay>,
}

/// One stream's delay variation in a completed trial, in ns (see
/// [`crate::latency::variation`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamDelay {
    /// Stream id.
    pub stream: u16,
    /// PDV percentiles.
    pub pdv: crate::latency::variation::PdvSummary,
    /// IPDV percentiles.
    pub ipdv: crate::latency::variation::SignedSummary,
    /// RFC 3550 jitter.
    pub jitter_ns: f64,
}

/// The trial running now.
#[derive(Debug, Clone, Default)]
pub struct TrialNow {
    /// Its number (1, 2, ...).
    pub number: u64,
    /// Its aggregate rate, packets/s.
    pub rate_pps: f64,
    /// Its duration, seconds.
    pub duration_s: f64,
}

/// Packet counts summed over completed trials.
#[derive(Debug, Clone, Copy, Default)]
pub struct TrialTotals {
    /// Offered.
    pub offered: u64,
    /// Sent.
    pub sent: u64,
    /// Could not be sent in time.
    pub unsent: u64,
    /// Received.
    pub received: u64,
}

impl Progress {
    /// A trial starts.
    pub fn trial_started(&mut self, rate_pps: f64, duration_s: f64) {
        self.current = Some(TrialNow {
            number: self.trials + 1,
            rate_pps,
            duration_s,
        });
    }

    /// A trial ended with these counts (`sent` = offered - unsent when the
    /// measurer does not know it).
    pub fn trial_done(&mut self, offered: u64, unsent: u64, received: u64) {
        self.current = None;
        self.trials += 1;
        self.totals.offered += offered;
        self.totals.unsent += unsent;
        self.totals.sent += offered.saturating_sub(unsent);
        self.totals.received += received;
        self.last_loss_ratio = Some(if offered == 0 {
            0.0
        } else {
            offered.saturating_sub(received) as f64 / offered as f64
        });
    }
}

/// A search's state.
#[derive(Debug, Clone, Default)]
pub struct SearchNow {
    /// The phase of the current (or last) trial: "initial", "intermediate 1", ...
    pub phase: String,
    /// Accounted search time so far, seconds.
    pub elapsed_s: f64,
    /// Per goal: (name, lower bound, upper bound), packets/s.
    pub bounds: Vec<(String, Option<f64>, Option<f64>)>,
    /// Whether the search has ended.
    pub done: bool,
}
