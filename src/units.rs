//! Quantities written by people: rates (`"10 Mpps"`, `"25 Gbps"`, `"40%"`),
//! durations (`"50us"`, `"1.5 s"`), sizes (`"64 MiB"`) and core lists (`"0-1,3"`).
//!
//! Every parser returns a [`UnitError`] that says what would have been valid, so
//! pipeline validation and the CLI can show it to the user as it is.

use core::fmt;
use core::str::FromStr;
use core::time::Duration;

/// Bytes a frame occupies on the wire beyond its own length: preamble + SFD (8)
/// and the minimum inter-frame gap (12).
pub const ETHERNET_L1_OVERHEAD: u64 = 20;

/// A value that could not be parsed, with what would have been valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} `{input}` is not valid: {expected}")]
pub struct UnitError {
    /// The kind of quantity ("rate", "duration", ...).
    pub what: &'static str,
    /// What the user wrote.
    pub input: String,
    /// What would be valid.
    pub expected: &'static str,
}

fn err(what: &'static str, input: &str, expected: &'static str) -> UnitError {
    UnitError {
        what,
        input: input.to_string(),
        expected,
    }
}

/// Splits `"12.5 Mpps"` into `(12.5, "Mpps")`. The number must be finite and >= 0.
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '_'))
        .map_or(s.len(), |(i, _)| i);
    // An exponent needs digits after it; "5e" followed by a unit is not a number.
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let value: f64 = num.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some((value, unit.trim()))
}

const RATE_EXPECTED: &str = "a number and a unit: pps, kpps, Mpps, Gpps (packets/s); bps, kbps, Mbps, Gbps, Tbps (L2 bits/s, add ' L1' to count preamble and gap); or a percentage of the port's line rate like '40%'";

/// A traffic rate as written in a pipeline or on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// Packets per second.
    Pps(f64),
    /// Layer-2 bits per second (frame bytes including FCS).
    L2Bps(f64),
    /// Layer-1 bits per second (frame + 20 bytes of preamble and inter-frame gap).
    L1Bps(f64),
    /// Percent of the port's line rate (an L1 rate).
    Percent(f64),
}

impl Rate {
    /// Packets per second for frames of `frame_len` bytes (including FCS) on a
    /// port whose line rate is `line_rate_bps` (L1 bits/s), if known.
    pub fn to_pps(self, frame_len: f64, line_rate_bps: Option<f64>) -> Result<f64, RateError> {
        let l1_bits = (frame_len + ETHERNET_L1_OVERHEAD as f64) * 8.0;
        match self {
            Rate::Pps(p) => Ok(p),
            Rate::L2Bps(b) => Ok(b / (frame_len * 8.0)),
            Rate::L1Bps(b) => Ok(b / l1_bits),
            Rate::Percent(p) => match line_rate_bps {
                Some(line) => Ok(line * p / 100.0 / l1_bits),
                None => Err(RateError::NoLineRate(p)),
            },
        }
    }
}

/// A rate that cannot be turned into packets per second.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RateError {
    /// A percentage was given for a port with no known line rate.
    #[error(
        "a rate of {0}% needs a port with a known line rate; give the rate in pps or bps instead"
    )]
    NoLineRate(f64),
}

impl FromStr for Rate {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, UnitError> {
        let bad = || err("rate", input, RATE_EXPECTED);
        let (value, unit) = split_number(input).ok_or_else(bad)?;
        if unit == "%" {
            if value > 100.0 || value == 0.0 {
                return Err(err(
                    "rate",
                    input,
                    "a percentage of line rate must be in (0, 100]",
                ));
            }
            return Ok(Rate::Percent(value));
        }
        let (unit, l1) = match unit.strip_suffix("L1").or_else(|| unit.strip_suffix("l1")) {
            Some(u) => (u.trim_end(), true),
            None => (unit.strip_suffix("L2").map_or(unit, str::trim_end), false),
        };
        let scale = |prefix: &str| -> Option<f64> {
            Some(match prefix {
                "" => 1.0,
                "k" | "K" => 1e3,
                "M" => 1e6,
                "G" => 1e9,
                "T" => 1e12,
                _ => return None,
            })
        };
        if let Some(prefix) = unit.strip_suffix("pps") {
            if l1 {
                return Err(bad());
            }
            return Ok(Rate::Pps(value * scale(prefix).ok_or_else(bad)?));
        }
        if let Some(prefix) = unit.strip_suffix("bps") {
            let bps = value * scale(prefix).ok_or_else(bad)?;
            return Ok(if l1 {
                Rate::L1Bps(bps)
            } else {
                Rate::L2Bps(bps)
            });
        }
        Err(bad())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rate::Pps(p) => write!(f, "{} pps", p),
            Rate::L2Bps(b) => write!(f, "{} bps", b),
            Rate::L1Bps(b) => write!(f, "{} bps L1", b),
            Rate::Percent(p) => write!(f, "{}%", p),
        }
    }
}

/// Parses a duration: a number and one of `ns`, `us`, `ms`, `s`, `m`, `h`
/// (`"50us"`, `"1.5 s"`). A bare number is seconds.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let bad = || {
        err(
            "duration",
            input,
            "a number and a unit: ns, us, ms, s, m or h (a bare number is seconds)",
        )
    };
    let (value, unit) = split_number(input).ok_or_else(bad)?;
    let secs = match unit {
        "ns" => value * 1e-9,
        "us" | "µs" => value * 1e-6,
        "ms" => value * 1e-3,
        "" | "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| bad())
}

/// Parses a size in bytes: a number and an optional unit `B`, `KiB`, `MiB`,
/// `GiB`, `kB`, `MB`, `GB` (`"64 MiB"`, `"4096"`).
pub fn parse_size(input: &str) -> Result<u64, UnitError> {
    let bad = || {
        err(
            "size",
            input,
            "a whole number of bytes, optionally with B, KiB, MiB, GiB, kB, MB or GB",
        )
    };
    let (value, unit) = split_number(input).ok_or_else(bad)?;
    let scale: f64 = match unit {
        "" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => return Err(bad()),
    };
    let bytes = value * scale;
    if bytes.fract() != 0.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// Parses a DPDK-style core list (`"0-1,3"`) into sorted, distinct core ids.
pub fn parse_core_list(input: &str) -> Result<Vec<usize>, UnitError> {
    let bad = || {
        err(
            "core list",
            input,
            "comma-separated core ids and ranges, like \"0\", \"0-3\" or \"0-1,4\"",
        )
    };
    let mut cores = Vec::new();
    for part in input.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: usize = lo.parse().map_err(|_| bad())?;
        let hi: usize = hi.parse().map_err(|_| bad())?;
        if lo > hi || hi > 4095 {
            return Err(bad());
        }
        cores.extend(lo..=hi);
    }
    cores.sort_unstable();
    cores.dedup();
    Ok(cores)
}

/// Formats a count per second with an SI prefix (`"12.35 M"`), for human output.
pub fn si(value: f64) -> String {
    let (v, p) = if value >= 1e12 {
        (value / 1e12, "T")
    } else if value >= 1e9 {
        (value / 1e9, "G")
    } else if value >= 1e6 {
        (value / 1e6, "M")
    } else if value >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    format!("{v:.2} {p}")
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("10 Mpps".parse(), Ok(Rate::Pps(10e6)));
        assert_eq!("1.5kpps".parse(), Ok(Rate::Pps(1500.0)));
        assert_eq!("25 Gbps".parse(), Ok(Rate::L2Bps(25e9)));
        assert_eq!("10 Gbps L1".parse(), Ok(Rate::L1Bps(10e9)));
        assert_eq!("40%".parse(), Ok(Rate::Percent(40.0)));
        assert_eq!("1_000 pps".parse(), Ok(Rate::Pps(1000.0)));
        for bad in [
            "", "10", "fast", "10 Xpps", "-1 pps", "101%", "0%", "5 pps L1", "inf pps",
        ] {
            assert!(bad.parse::<Rate>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn rates_convert() {
        // 10 GbE at 64-byte frames is the classic 14.88 Mpps.
        let pps = Rate::Percent(100.0).to_pps(64.0, Some(10e9)).unwrap();
        assert!((pps - 14_880_952.38).abs() < 1.0);
        let pps = Rate::L1Bps(10e9).to_pps(64.0, None).unwrap();
        assert!((pps - 14_880_952.38).abs() < 1.0);
        assert_eq!(Rate::L2Bps(512e6).to_pps(64.0, None).unwrap(), 1e6);
        assert!(Rate::Percent(50.0).to_pps(64.0, None).is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("50us"), Ok(Duration::from_micros(50)));
        assert_eq!(parse_duration("1.5 s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("100ns"), Ok(Duration::from_nanos(100)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1.5 KiB"), Ok(1536));
        assert!(parse_size("1.3 B").is_err());
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn core_lists_parse() {
        assert_eq!(parse_core_list("0-1,3"), Ok(vec![0, 1, 3]));
        assert_eq!(parse_core_list("2, 0"), Ok(vec![0, 2]));
        assert!(parse_core_list("3-1").is_err());
        assert!(parse_core_list("a").is_err());
        assert!(parse_core_list("").is_err());
    }
}
