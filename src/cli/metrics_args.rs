//! `--metrics ADDR` and `--metrics-hold`, flattened into each command that
//! serves Prometheus metrics (`run`, `trial`, `search`, `spead recv`); the
//! serving itself is [`crate::metrics`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::Failure;
use crate::metrics::{Live, MetricsConfig, MetricsError, MetricsServer};

/// The `--metrics` options.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics (OpenMetrics text) at http://ADDR/metrics while
    /// running, e.g. "127.0.0.1:9464" (port 0 picks a free port, printed on stderr).
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    pub metrics: Option<SocketAddr>,
    /// Keep serving the final counters this long after the job ends, so a
    /// scraper sees the last values of a short run ("5s").
    #[arg(long, value_name = "DURATION", value_parser = crate::units::parse_duration, default_value = "0s")]
    pub metrics_hold: Duration,
}

/// `host:port` with a numeric host (a name would need a lookup that may hang).
fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>().map_err(|_| {
        format!("`{s}` is not an address: give IP:PORT, e.g. 127.0.0.1:9464 or [::1]:9464")
    })
}

impl MetricsArgs {
    /// The library's configuration of these options.
    pub fn config(&self) -> MetricsConfig {
        MetricsConfig {
            addr: self.metrics,
            hold: self.metrics_hold,
        }
    }

    /// Starts serving when `--metrics` was given. A bad or busy address is
    /// the user's input error (exit status 2).
    pub fn start(&self, live: &Arc<Live>) -> Result<Option<MetricsServer>, MetricsError> {
        self.config().start(live)
    }

    /// Ends serving after `--metrics-hold` (cut short by SIGINT or SIGTERM).
    pub fn stop(&self, server: Option<MetricsServer>) {
        self.config().stop(server);
    }
}

/// Starts the `--metrics` endpoint of `command`, if asked for: a bad or busy
/// address is exit 2, a server that cannot start exit 1.
pub(crate) fn start_metrics(
    args: &MetricsArgs,
    command: &'static str,
) -> Result<(Arc<Live>, Option<MetricsServer>), Failure> {
    let live = Live::new(command);
    let server = args.start(&live).map_err(metrics_failure)?;
    Ok((live, server))
}

/// A metrics endpoint's failure, classified for the exit status.
pub(crate) fn metrics_failure(e: MetricsError) -> Failure {
    match e {
        MetricsError::Bind { .. } => Failure::Input(e.to_string()),
        MetricsError::Start { .. } => Failure::Runtime(e.to_string()),
    }
}
