//! Endpoint configuration from a pipeline file's stage table: `mode` picks the
//! base (`"ours"`, the default, or `"usnic"`), other keys override it. Errors
//! name the key and what would be valid.

use super::endpoint::Config;
use crate::units::{parse_duration, parse_size};
use thiserror::Error;

/// Every key [`config_from_table`] understands.
pub const KEYS: &[&str] = &[
    "mode",
    "window",
    "credits",
    "priority_mtu",
    "data_mtu",
    "sack",
    "ack_delay",
    "ack_every",
    "ack_on_gap",
    "rto_initial",
    "rto_min",
    "rto_max",
    "retry_limit",
    "resend_cap",
    "max_message",
    "ordered",
    "initial_seq",
    "seq_bits",
    "flight_gain",
    "flight_floor",
    "peer_timeout",
];

/// A bad key or value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// Not a reliable-endpoint key.
    #[error("unknown key `{key}`; valid keys: {}", KEYS.join(", "))]
    Unknown {
        /// The key.
        key: String,
    },
    /// The value has the wrong type or is out of range.
    #[error("key `{key}`: {expected}")]
    Value {
        /// The key.
        key: String,
        /// What would be valid.
        expected: &'static str,
    },
}

fn bad(key: &str, expected: &'static str) -> KeyError {
    KeyError::Value {
        key: key.to_string(),
        expected,
    }
}

fn int(
    key: &str,
    v: &toml::Value,
    lo: i64,
    hi: i64,
    expected: &'static str,
) -> Result<i64, KeyError> {
    match v.as_integer() {
        Some(i) if (lo..=hi).contains(&i) => Ok(i),
        _ => Err(bad(key, expected)),
    }
}

fn dur(key: &str, v: &toml::Value) -> Result<core::time::Duration, KeyError> {
    v.as_str()
        .and_then(|s| parse_duration(s).ok())
        .ok_or_else(|| bad(key, "a duration string like \"50us\" or \"5ms\""))
}

fn boolean(key: &str, v: &toml::Value) -> Result<bool, KeyError> {
    v.as_bool().ok_or_else(|| bad(key, "true or false"))
}

/// Builds a [`Config`] from the endpoint keys of `table`, ignoring the keys in `skip`
/// (the stage's own: kind, lcore, port, ...).
pub fn config_from_table(table: &toml::Table, skip: &[&str]) -> Result<Config, KeyError> {
    let mut cfg = match table.get("mode").map(|v| v.as_str()) {
        None | Some(Some("ours")) => Config::default(),
        Some(Some("usnic")) => Config::usnic(),
        Some(_) => return Err(bad("mode", "\"ours\" or \"usnic\"")),
    };
    for (k, v) in table {
        let key = k.as_str();
        if skip.contains(&key) || key == "mode" {
            continue;
        }
        match key {
            "window" => {
                cfg.window = int(
                    key,
                    v,
                    64,
                    32768,
                    "an integer 64..=32768 (rounded up to a power of two)",
                )? as u32
            }
            "credits" => {
                cfg.credits = int(
                    key,
                    v,
                    1,
                    32768,
                    "an integer 1..=32768 (rounded up to a power of two)",
                )? as u32
            }
            "priority_mtu" => {
                cfg.priority_mtu =
                    int(key, v, 128, 65535, "an integer 128..=65535 (bytes)")? as usize
            }
            "data_mtu" => {
                cfg.data_mtu = int(key, v, 128, 65535, "an integer 128..=65535 (bytes)")? as usize
            }
            "sack" => cfg.sack = boolean(key, v)?,
            "ack_on_gap" => cfg.ack_on_gap = boolean(key, v)?,
            "ack_delay" => cfg.ack_delay = dur(key, v)?,
            "ack_every" => cfg.ack_every = int(key, v, 1, 1 << 16, "an integer 1..=65536")? as u32,
            "rto_initial" => cfg.rto_initial = dur(key, v)?,
            "rto_min" => cfg.rto_min = dur(key, v)?,
            "rto_max" => cfg.rto_max = dur(key, v)?,
            "retry_limit" => {
                cfg.retry_limit = match v {
                    toml::Value::String(s) if s == "none" => None,
                    _ => Some(int(key, v, 1, 1 << 16, "an integer 1..=65536 or \"none\"")? as u32),
                }
            }
            "resend_cap" => {
                cfg.resend_cap = int(key, v, 1, 1 << 20, "an integer 1..=1048576")? as usize
            }
            "max_message" => {
                let n = match v {
                    toml::Value::Integer(i) => u64::try_from(*i).ok(),
                    toml::Value::String(s) => parse_size(s).ok(),
                    _ => None,
                };
                cfg.max_message = n
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad(key, "a size like \"1 MiB\" (at most 4 GiB - 1)"))?;
            }
            "ordered" => {
                cfg.ordered = match v {
                    toml::Value::Boolean(b) => [*b, *b],
                    toml::Value::Array(a) if a.len() == 2 => {
                        [boolean(key, &a[0])?, boolean(key, &a[1])?]
                    }
                    _ => return Err(bad(key, "true, false, or [priority, data] booleans")),
                }
            }
            "flight_gain" => {
                cfg.flight_gain = int(key, v, 0, 64, "an integer 0..=64 (0: unbounded)")? as u32
            }
            "flight_floor" => {
                cfg.flight_floor = int(key, v, 1, 32768, "an integer 1..=32768")? as u32
            }
            "peer_timeout" => {
                cfg.peer_timeout = match v {
                    toml::Value::String(s) if s == "none" => None,
                    _ => {
                        let d = dur(key, v)?;
                        if d.is_zero() {
                            return Err(bad(
                                key,
                                "a duration above zero, like \"10s\", or \"none\"",
                            ));
                        }
                        Some(d)
                    }
                }
            }
            "seq_bits" => {
                cfg.seq_bits =
                    match v.as_integer() {
                        Some(b @ (16 | 32)) => b as u32,
                        _ => return Err(bad(
                            key,
                            "16 (usnic's wire format: no SACK ranges, window at most 16384) or 32",
                        )),
                    }
            }
            "initial_seq" => {
                cfg.initial_seq =
                    int(key, v, 0, i64::from(u32::MAX), "an integer 0..=4294967295")? as u32
            }
            _ => {
                return Err(KeyError::Unknown {
                    key: key.to_string(),
                })
            }
        }
    }
    if cfg.rto_min > cfg.rto_max {
        return Err(bad("rto_min", "at most rto_max"));
    }
    Ok(cfg)
}

#[cfg(test)]
mod test {
    use super::*;

    fn table(s: &str) -> toml::Table {
        s.parse().unwrap()
    }

    #[test]
    fn modes_and_overrides() {
        let c = config_from_table(
            &table("kind = 'reliable_tx'\nlcore = 1"),
            &["kind", "lcore"],
        )
        .unwrap();
        assert_eq!(c, Config::default());
        let c = config_from_table(
            &table("mode = 'usnic'\nwindow = 1024\nretry_limit = 8"),
            &[],
        )
        .unwrap();
        assert!(!c.sack && c.window == 1024 && c.retry_limit == Some(8));
        let c = config_from_table(
            &table("ack_delay = '20us'\nmax_message = '64 KiB'\nordered = [true, false]\nretry_limit = 'none'"),
            &[],
        )
        .unwrap();
        assert_eq!(c.ack_delay, core::time::Duration::from_micros(20));
        assert_eq!(c.max_message, 65536);
        assert_eq!(c.ordered, [true, false]);
        assert_eq!(c.retry_limit, None);
        let c = config_from_table(&table("peer_timeout = '2s'"), &[]).unwrap();
        assert_eq!(c.peer_timeout, Some(core::time::Duration::from_secs(2)));
        let c = config_from_table(&table("peer_timeout = 'none'"), &[]).unwrap();
        assert_eq!(c.peer_timeout, None);
        assert!(config_from_table(&table("peer_timeout = '0s'"), &[]).is_err());
        let c = config_from_table(&table("flight_gain = 0\nflight_floor = 8"), &[]).unwrap();
        assert_eq!((c.flight_gain, c.flight_floor), (0, 8));
        assert_eq!(Config::usnic().flight_gain, 0);
    }

    #[test]
    fn every_listed_key_is_read() {
        // One valid value per key: none may be refused as unknown.
        let valid = |k: &str| match k {
            "mode" => "'usnic'",
            "window" | "credits" | "flight_floor" => "128",
            "priority_mtu" | "data_mtu" => "1024",
            "sack" | "ack_on_gap" | "ordered" => "true",
            "ack_delay" | "rto_initial" | "rto_min" | "rto_max" | "peer_timeout" => "'1ms'",
            "ack_every" | "retry_limit" | "resend_cap" | "flight_gain" => "4",
            "max_message" => "'64 KiB'",
            "initial_seq" => "7",
            "seq_bits" => "16",
            other => panic!("no test value for `{other}`"),
        };
        for k in KEYS {
            let t = table(&format!("{k} = {}", valid(k)));
            assert!(config_from_table(&t, &[]).is_ok(), "{k}");
        }
        let c = config_from_table(&table("seq_bits = 16"), &[]).unwrap();
        assert_eq!(
            (c.seq_bits, c.wire_bits(), c.sack_ranges()),
            (16, 16, false)
        );
        let c = config_from_table(&table("mode = 'usnic'\nseq_bits = 32"), &[]).unwrap();
        assert_eq!(c.wire_bits(), 32);
        let e = config_from_table(&table("seq_bits = 24"), &[]).unwrap_err();
        assert!(e.to_string().contains("`seq_bits`") && e.to_string().contains("16"));
    }

    #[test]
    fn errors_name_the_key() {
        let e = config_from_table(&table("windw = 5"), &[]).unwrap_err();
        assert!(e.to_string().contains("`windw`") && e.to_string().contains("window"));
        let e = config_from_table(&table("mode = 'tcp'"), &[]).unwrap_err();
        assert!(e.to_string().contains("usnic"));
        let e = config_from_table(&table("window = 8"), &[]).unwrap_err();
        assert!(e.to_string().contains("64..=32768"));
        let e = config_from_table(&table("ack_delay = 50"), &[]).unwrap_err();
        assert!(e.to_string().contains("duration"));
        let e = config_from_table(&table("rto_min = '1s'\nrto_max = '1ms'"), &[]).unwrap_err();
        assert!(e.to_string().contains("rto_min"));
    }
}
