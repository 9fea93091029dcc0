//! Latency recording, done right (Collie's design, fixed).
//!
//! Samples go into an HdrHistogram, cumulatively (Collie overwrote its stats
//! every 10 samples). A stats file keeps Collie's `key: value` format so
//! existing scripts read it, and carries the full histogram (V2 + DEFLATE,
//! base64) beside the summary, so histograms from several hosts merge exactly:
//! the combined median and p99 are those of the pooled samples, never an average
//! of medians or a maximum of p99s as Collie computed them. Files are written
//! to a temporary name and renamed, so a reader never sees a partial file, and
//! each process writes its own file.

pub mod plot;
pub mod variation;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// Highest latency a histogram records exactly: 60 s; larger values are
/// recorded as 60 s (and the summary's max says so).
pub const HIGHEST_NS: u64 = 60_000_000_000;

/// A new latency histogram: 1 ns to [`HIGHEST_NS`], 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_NS, 3).expect("constant, valid bounds")
}

/// The summary of a histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub avg: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Largest.
    pub max: u64,
}

impl Summary {
    /// Summarises a histogram (all zero when empty).
    pub fn of(h: &Histogram<u64>) -> Summary {
        if h.is_empty() {
            return Summary::default();
        }
        Summary {
            samples: h.len(),
            min: h.min(),
            avg: h.mean(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// A stats file could not be read, written or merged.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The file is unusable: bad input (exit 2).
    #[error("{0}: {1}")]
    Invalid(PathBuf, String),
    /// I/O failed.
    #[error("{0}: {1}")]
    Io(PathBuf, std::io::Error),
}

const HIST_KEY: &str = "latency_histogram_v2_deflate_base64";
const TOOL_KEY: &str = "tool";

/// Encodes a histogram as V2 + DEFLATE, base64.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // Serialising into a Vec cannot fail for a well-formed histogram.
    let _ = V2DeflateSerializer::new().serialize(h, &mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes [`encode`]'s output.
pub fn decode(text: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("the histogram is not valid base64 ({e})"))?;
    Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| {
            format!("the histogram does not decode ({e:?}); the file is damaged or truncated")
        })
}

/// A stats file: Collie's keys, our context keys, and the histogram.
#[derive(Debug, Clone)]
pub struct StatsFile {
    /// Context (`tool`, `host`, `pid`, `trial`, `stream`, ...), in file order.
    pub context: BTreeMap<String, String>,
    /// The histogram.
    pub histogram: Histogram<u64>,
}

impl StatsFile {
    /// The file's text.
    pub fn render(&self) -> String {
        let s = Summary::of(&self.histogram);
        let mut out = String::new();
        out += &format!("{TOOL_KEY}: linerate\n");
        for (k, v) in &self.context {
            if k != TOOL_KEY {
                out += &format!("{k}: {v}\n");
            }
        }
        out += &format!(
            "latency_samples: {}\nlatency_min_ns: {}\nlatency_avg_ns: {:.0}\nlatency_median_ns: {}\nlatency_p95_ns: {}\nlatency_p99_ns: {}\nlatency_max_ns: {}\n",
            s.samples, s.min, s.avg, s.p50, s.p95, s.p99, s.max
        );
        out += &format!("{HIST_KEY}: {}\n", encode(&self.histogram));
        out
    }

    /// Writes atomically: to `path.tmp.PID`, fsync, rename over `path`.
    pub fn write(&self, path: &Path) -> Result<(), StatsError> {
        let io = |e| StatsError::Io(path.to_path_buf(), e);
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let mut f = std::fs::File::create(&tmp).map_err(io)?;
        f.write_all(self.render().as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    /// Parses a file's text.
    pub fn parse(path: &Path, text: &str) -> Result<StatsFile, StatsError> {
        let bad = |m: String| StatsError::Invalid(path.to_path_buf(), m);
        let mut context = BTreeMap::new();
        let mut hist = None;
        let mut samples = None;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let Some((k, v)) = line.split_once(':') else {
                return Err(bad(format!("line {} is not `key: value`", n + 1)));
            };
            let (k, v) = (k.trim(), v.trim());
            match k {
                HIST_KEY => hist = Some(decode(v).map_err(bad)?),
                "latency_samples" => samples = v.parse::<u64>().ok(),
                k if k.starts_with("latency_") => {}
                _ => {
                    context.insert(k.to_string(), v.to_string());
                }
            }
        }
        let histogram = match hist {
            Some(h) => h,
            None if samples.is_some() => {
                return Err(bad("has a latency summary but no histogram (a Collie file?): summaries alone cannot be merged exactly; record with linerate".into()))
            }
            None => return Err(bad("is not a linerate latency stats file (no `latency_histogram_v2_deflate_base64` line); it may be truncated".into())),
        };
        if context.get(TOOL_KEY).map(String::as_str) != Some("linerate") {
            return Err(bad(
                "was not written by linerate (no `tool: linerate` line)".into(),
            ));
        }
        if samples != Some(histogram.len()) {
            return Err(bad(format!(
                "says {} samples but its histogram holds {}: the file is damaged",
                samples.map_or("no".into(), |s| s.to_string()),
                histogram.len()
            )));
        }
        Ok(StatsFile { context, histogram })
    }

    /// Reads and parses a file.
    pub fn read(path: &Path) -> Result<StatsFile, StatsError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| StatsError::Io(path.to_path_buf(), e))?;
        StatsFile::parse(path, &text)
    }
}

/// Merges histograms exactly.
pub fn merge<'a>(hists: impl IntoIterator<Item = &'a Histogram<u64>>) -> Histogram<u64> {
    let mut all = new_histogram();
    for h in hists {
        // Same bounds (both made by new_histogram or decoded from such), so
        // adding cannot fail; a foreign histogram with wider bounds saturates.
        if all.add(h).is_err() {
            for v in h.iter_recorded() {
                all.saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }
    all
}

#[cfg(test)]
mod test {
    use super::*;
    use proptest::prelude::*;

    fn file(samples: &[u64]) -> StatsFile {
        let mut h = new_histogram();
        for &s in samples {
            h.saturating_record(s);
        }
        StatsFile {
            context: BTreeMap::from([("host".into(), "a".into())]),
            histogram: h,
        }
    }

    #[test]
    fn render_parse_round_trip_keeps_collie_keys() {
        let f = file(&[100, 200, 300, 400, 10_000]);
        let text = f.render();
        for k in [
            "latency_samples: 5",
            "latency_min_ns: 100",
            "latency_median_ns: 300",
            "latency_max_ns: 10007",
        ] {
            assert!(text.contains(k), "{k} in {text}");
        }
        let back = StatsFile::parse(Path::new("x"), &text).unwrap();
        assert_eq!(back.histogram, f.histogram);
        assert_eq!(back.context["host"], "a");
    }

    #[test]
    fn truncated_and_foreign_files_are_refused() {
        let text = file(&[1, 2, 3]).render();
        let cut = &text[..text.len() - 20];
        assert!(StatsFile::parse(Path::new("x"), cut).is_err());
        let collie = "latency_samples: 15\nlatency_min_ns: 1\nlatency_median_ns: 5\n";
        let e = StatsFile::parse(Path::new("c"), collie)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Collie"), "{e}");
        assert!(StatsFile::parse(Path::new("j"), "{\"json\": true}").is_err());
    }

    proptest! {
        #[test]
        fn merged_equals_pooled(a in proptest::collection::vec(1u64..10_000_000, 0..300), b in proptest::collection::vec(1u64..10_000_000, 0..300)) {
            let (fa, fb) = (file(&a), file(&b));
            let merged = merge([&fa.histogram, &fb.histogram]);
            let mut pooled = a.clone();
            pooled.extend(&b);
            let fp = file(&pooled);
            prop_assert_eq!(Summary::of(&merged), Summary::of(&fp.histogram));
            prop_assert_eq!(merged, fp.histogram);
        }
    }
}
