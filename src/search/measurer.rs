//! Measurers: what performs one trial for the search.
//!
//! The search core never measures anything itself; a driver (see [`super::drive`]) takes the
//! core's proposed `(rate, duration)` to a [`Measurer`] and hands the [`TrialCounts`] back.
//! Implementations: the simulated device [`super::sim::SimDut`], the external command
//! [`CommandMeasurer`], and the pipeline trial measurer that the traffic area supplies.

use std::process::Command;

/// Packet counts of one trial.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TrialCounts {
    /// Packets the generator offered (sent, or was to send: see `unsent`).
    pub offered: u64,
    /// Packets that came back.
    pub received: u64,
    /// Of `offered`, packets the generator could not send in time, when the measurer
    /// knows them (None: unknown). Reported apart from the loss on the way; they still
    /// count as lost (as in MLRsearch), so they never change the search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsent: Option<u64>,
    /// Of the lost packets, those our own receiving side dropped (a port's missed or
    /// no-mbuf count, a kernel socket ring that was full), when the measurer knows them.
    /// Like `unsent`, they only decide who limited the trial, never the search.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_dropped: Option<u64>,
    /// The rate the generator actually sent at (packets/s over the span its
    /// packets went out in), when the measurer knows it. Reported only: the
    /// trial's load, which the search judges, is the rate it asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_pps: Option<f64>,
}

impl TrialCounts {
    /// Counts without an unsent count.
    pub fn new(offered: u64, received: u64) -> TrialCounts {
        TrialCounts {
            offered,
            received,
            unsent: None,
            rx_dropped: None,
            tx_pps: None,
        }
    }
}

/// Why a trial could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// A signal (Ctrl-C, SIGTERM) stopped the trial: its counts are not a
    /// measurement, and the search stops with what it finished.
    #[error("interrupted")]
    Interrupted,
    /// The measurer failed; `output` holds whatever it printed.
    #[error("measurer failed: {message}\n{output}")]
    Failed {
        /// What went wrong.
        message: String,
        /// The measurer's output (stdout and stderr), for the user.
        output: String,
    },
    /// The measurer reported more received than offered packets.
    #[error("measurer reported {received} received > {offered} offered packets\n{output}")]
    Inconsistent {
        /// Offered count reported.
        offered: u64,
        /// Received count reported.
        received: u64,
        /// The measurer's output.
        output: String,
    },
}

/// Performs trials: send at `rate_pps` for `duration_s` seconds, count what came back.
///
/// The pipeline measurer (a generator and an analyzer through the trial API) implements
/// this too; the search does not care which one it drives.
pub trait Measurer {
    /// Runs one trial.
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError>;

    /// A reader of the measuring pipeline's counters, when there is one (for
    /// the metrics endpoint).
    fn probe(&self) -> Option<crate::runtime::run::Probe> {
        None
    }

    /// Across hosts: the per-host breakdown of every trial this measurer
    /// finished, in order (one JSON object of host name to section each, as
    /// in `trial`'s `hosts`). Empty for a measurer on one host.
    fn hosts_of_trials(&self) -> Vec<serde_json::Value> {
        Vec::new()
    }
}

impl<M: Measurer + ?Sized> Measurer for Box<M> {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        (**self).measure(rate_pps, duration_s)
    }

    fn probe(&self) -> Option<crate::runtime::run::Probe> {
        (**self).probe()
    }

    fn hosts_of_trials(&self) -> Vec<serde_json::Value> {
        (**self).hosts_of_trials()
    }
}

/// Runs an external command per trial: `{rate}` and `{duration}` in the template are
/// replaced by the trial's rate (packets/s) and duration (seconds), the result is run with
/// `sh -c`, and its stdout must hold one JSON object `{"offered": N, "received": M}`
/// (or `{"offered": N, "lost": L}`), optionally with `"unsent": U` (of the offered
/// packets, those never sent; `U + received <= offered`), `"rx_dropped": D` (of the
/// lost packets, those the generator's own receiver dropped) and `"tx_pps": R` (the
/// rate it actually sent at, reported beside the trial). Any generator, TRex included,
/// can be driven this way.
#[derive(Debug, Clone)]
pub struct CommandMeasurer {
    template: String,
}

#[derive(serde::Deserialize)]
struct CommandOutput {
    offered: u64,
    received: Option<u64>,
    lost: Option<u64>,
    unsent: Option<u64>,
    rx_dropped: Option<u64>,
    tx_pps: Option<f64>,
}

impl CommandMeasurer {
    /// A measurer running `template` (with `{rate}` and `{duration}` placeholders).
    pub fn new(template: impl Into<String>) -> Self {
        CommandMeasurer {
            template: template.into(),
        }
    }

    /// The command line for one trial.
    pub fn command_line(&self, rate_pps: f64, duration_s: f64) -> String {
        self.template
            .replace("{rate}", &format!("{rate_pps:.3}"))
            .replace("{duration}", &format!("{duration_s}"))
    }
}

/// Parses a measurer's JSON output into counts, checking consistency.
pub fn parse_counts(stdout: &str, output_for_errors: &str) -> Result<TrialCounts, MeasureError> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .unwrap_or(stdout);
    let parsed: CommandOutput =
        serde_json::from_str(line.trim()).map_err(|e| MeasureError::Failed {
            message: format!(
                "cannot parse JSON counts ({e}); expected {{\"offered\": N, \"received\": M}}"
            ),
            output: output_for_errors.to_string(),
        })?;
    let received = match (parsed.received, parsed.lost) {
        (Some(r), _) => r,
        (None, Some(l)) => parsed.offered.checked_sub(l).ok_or(MeasureError::Failed {
            message: format!("lost {l} > offered {}", parsed.offered),
            output: output_for_errors.to_string(),
        })?,
        (None, None) => {
            return Err(MeasureError::Failed {
                message: "JSON counts need \"received\" or \"lost\"".into(),
                output: output_for_errors.to_string(),
            })
        }
    };
    if received > parsed.offered {
        return Err(MeasureError::Inconsistent {
            offered: parsed.offered,
            received,
            output: output_for_errors.to_string(),
        });
    }
    if let Some(u) = parsed.unsent {
        if u > parsed.offered - received {
            return Err(MeasureError::Failed {
                message: format!(
                    "unsent {u} + received {received} > offered {}",
                    parsed.offered
                ),
                output: output_for_errors.to_string(),
            });
        }
    }
    Ok(TrialCounts {
        offered: parsed.offered,
        received,
        unsent: parsed.unsent,
        rx_dropped: parsed.rx_dropped,
        tx_pps: parsed.tx_pps.filter(|r| r.is_finite() && *r >= 0.0),
    })
}

impl Measurer for CommandMeasurer {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        let line = self.command_line(rate_pps, duration_s);
        let out = Command::new("sh")
            .arg("-c")
            .arg(&line)
            .output()
            .map_err(|e| MeasureError::Failed {
                message: format!("cannot run `{line}`: {e}"),
                output: String::new(),
            })?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let all = format!("$ {line}\n{stdout}{stderr}");
        if !out.status.success() {
            return Err(MeasureError::Failed {
                message: format!("`{line}` exited with {}", out.status),
                output: all,
            });
        }
        parse_counts(&stdout, &all)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn counts_json() {
        assert_eq!(
            parse_counts("{\"offered\": 10, \"received\": 9}\n", "").unwrap(),
            TrialCounts::new(10, 9)
        );
        assert_eq!(
            parse_counts("noise\n{\"offered\": 10, \"lost\": 3}", "").unwrap(),
            TrialCounts::new(10, 7)
        );
        assert_eq!(
            parse_counts("{\"offered\": 10, \"received\": 7, \"unsent\": 2}", "").unwrap(),
            TrialCounts {
                offered: 10,
                received: 7,
                unsent: Some(2),
                rx_dropped: None,
                tx_pps: None,
            }
        );
        assert_eq!(
            parse_counts(r#"{"offered": 10, "received": 10, "tx_pps": 9.5}"#, "")
                .unwrap()
                .tx_pps,
            Some(9.5)
        );
        assert_eq!(
            parse_counts(
                r#"{"offered": 10, "received": 7, "unsent": 0, "rx_dropped": 3}"#,
                ""
            )
            .unwrap()
            .rx_dropped,
            Some(3)
        );
        // More unsent than could have been lost.
        assert!(parse_counts("{\"offered\": 10, \"received\": 7, \"unsent\": 4}", "").is_err());
        assert!(matches!(
            parse_counts("{\"offered\": 10, \"received\": 11}", "out"),
            Err(MeasureError::Inconsistent { output, .. }) if output == "out"
        ));
        assert!(parse_counts("{\"offered\": 10, \"lost\": 11}", "").is_err());
        assert!(parse_counts("{\"offered\": 10}", "").is_err());
        assert!(parse_counts("hello", "").is_err());
    }

    #[test]
    fn command_substitution_and_failure() {
        let m = CommandMeasurer::new("prog {rate} {duration}");
        assert_eq!(m.command_line(1e6, 2.5), "prog 1000000.000 2.5");
        let mut ok =
            CommandMeasurer::new("echo '{\"offered\": 5, \"received\": 4}' # {rate} {duration}");
        assert_eq!(ok.measure(1.0, 1.0).unwrap().received, 4);
        let mut fail = CommandMeasurer::new("echo oops >&2; exit 3");
        match fail.measure(1.0, 1.0) {
            Err(MeasureError::Failed { output, .. }) => assert!(output.contains("oops")),
            other => panic!("expected failure, got {other:?}"),
        }
    }
}
