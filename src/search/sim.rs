//! The simulated device under test, implemented literally from its model.
//!
//! ```text
//! u(seed,k,j) = (splitmix64(seed*G1 + k*G2 + j*G3 mod 2^64) >> 11) / 2^53
//! f = exp(jitter * z), z = sqrt(-2 ln(1-u(k,1))) * cos(2 pi u(k,2))   (f = 1 when jitter = 0)
//! c1 = ndr*f, c2 = pdr*f, F = c2*(1-plr)
//! r(L) = 0 if L <= c1;  plr*(L-c1)/(c2-c1) if c1 < L <= c2;  1 - F/L if L > c2
//! offered = floor(L*D); loss = max(0, ceil(r(L)*offered) - buffer)
//! if u(k,0) < 1-(1-spike_rate)^D: loss += ceil(L*spike_len);  loss = min(loss, offered)
//! ```
//!
//! `k` is the index of the trial within one search run; a fresh [`SimDut`] starts at `k = 0`.
//! The same model is implemented in `scripts/search-mlrsearch.py` so that MLRsearch runs on
//! identical devices.

use std::str::FromStr;

use super::measurer::{MeasureError, Measurer, TrialCounts};

const G1: u64 = 0x9E37_79B9_7F4A_7C15;
const G2: u64 = 0xD1B5_4A32_D192_ED03;
const G3: u64 = 0x8CB9_2BA7_2F3D_8DD7;

/// The splitmix64 finaliser (all arithmetic modulo 2^64).
pub fn splitmix64(x: u64) -> u64 {
    let x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform deviate `u(seed, k, j)` in `[0, 1)`.
pub fn uniform(seed: u64, k: u64, j: u64) -> f64 {
    let x = seed
        .wrapping_mul(G1)
        .wrapping_add(k.wrapping_mul(G2))
        .wrapping_add(j.wrapping_mul(G3));
    (splitmix64(x) >> 11) as f64 / (1u64 << 53) as f64
}

/// Parameters of the simulated device (the `--sim` string).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SimModel {
    /// Non-drop rate capacity `ndr` (packets/s).
    pub ndr: f64,
    /// Partial-drop rate capacity `pdr` (packets/s), at least `ndr`.
    pub pdr: f64,
    /// Loss ratio reached at `pdr`.
    pub plr: f64,
    /// Log-normal capacity jitter per trial.
    pub jitter: f64,
    /// Probability per second of a loss spike.
    pub spike_rate: f64,
    /// Spike length in seconds (packets lost = ceil(L * spike_len)).
    pub spike_len: f64,
    /// Packets absorbed by the device's buffer in each trial.
    pub buffer: f64,
    /// Seed of the deterministic random stream.
    pub seed: u64,
}

impl Default for SimModel {
    fn default() -> Self {
        SimModel {
            ndr: 12e6,
            pdr: 12.2e6,
            plr: 0.005,
            jitter: 0.0,
            spike_rate: 0.0,
            spike_len: 0.0,
            buffer: 0.0,
            seed: 1,
        }
    }
}

/// A `--sim` string that does not describe a valid model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad --sim model {input:?}: {reason} (expected e.g. \"ndr=12e6,pdr=12.2e6,plr=0.005,jitter=0,spike_rate=0,spike_len=0,buffer=0,seed=1\")")]
pub struct SimParseError {
    /// The string given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for SimModel {
    type Err = SimParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| SimParseError {
            input: s.to_string(),
            reason,
        };
        let mut m = SimModel::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| err(format!("{part:?} is not key=value")))?;
            let key = key.trim();
            let value = value.trim();
            if key == "seed" {
                m.seed = value
                    .parse::<u64>()
                    .map_err(|e| err(format!("seed {value:?}: {e}")))?;
                continue;
            }
            let v: f64 = value
                .parse()
                .map_err(|e| err(format!("{key} value {value:?}: {e}")))?;
            if !v.is_finite() {
                return Err(err(format!("{key} must be finite")));
            }
            match key {
                "ndr" => m.ndr = v,
                "pdr" => m.pdr = v,
                "plr" => m.plr = v,
                "jitter" => m.jitter = v,
                "spike_rate" => m.spike_rate = v,
                "spike_len" => m.spike_len = v,
                "buffer" => m.buffer = v,
                other => {
                    return Err(err(format!(
                        "unknown key {other:?} (valid: ndr, pdr, plr, jitter, spike_rate, spike_len, buffer, seed)"
                    )))
                }
            }
        }
        if m.ndr <= 0.0 {
            return Err(err("ndr must be positive".into()));
        }
        if m.pdr < m.ndr {
            return Err(err("pdr must be at least ndr".into()));
        }
        if !(0.0..1.0).contains(&m.plr) {
            return Err(err("plr must be in [0, 1)".into()));
        }
        if m.jitter < 0.0 || m.spike_len < 0.0 || m.buffer < 0.0 {
            return Err(err(
                "jitter, spike_len and buffer must not be negative".into()
            ));
        }
        if !(0.0..=1.0).contains(&m.spike_rate) {
            return Err(err("spike_rate must be in [0, 1]".into()));
        }
        Ok(m)
    }
}

impl SimModel {
    /// Loss ratio function `r(L)` for capacity factor `f`.
    pub fn loss_fraction(&self, load: f64, f: f64) -> f64 {
        let c1 = self.ndr * f;
        let c2 = self.pdr * f;
        let big_f = c2 * (1.0 - self.plr);
        if load <= c1 {
            0.0
        } else if load <= c2 {
            self.plr * (load - c1) / (c2 - c1)
        } else {
            1.0 - big_f / load
        }
    }

    /// The capacity factor `f` of trial `k`.
    pub fn factor(&self, k: u64) -> f64 {
        if self.jitter == 0.0 {
            return 1.0;
        }
        let u1 = uniform(self.seed, k, 1);
        let u2 = uniform(self.seed, k, 2);
        let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        (self.jitter * z).exp()
    }

    /// Trial `k` at load `L` pps for `D` seconds: `(offered, loss)`.
    pub fn trial(&self, k: u64, load: f64, duration: f64) -> (u64, u64) {
        let f = self.factor(k);
        let offered = (load * duration).floor().max(0.0);
        let r = self.loss_fraction(load, f);
        let mut loss = ((r * offered).ceil() - self.buffer).max(0.0);
        let p_spike = 1.0 - (1.0 - self.spike_rate).powf(duration);
        if uniform(self.seed, k, 0) < p_spike {
            loss += (load * self.spike_len).ceil();
        }
        let loss = loss.min(offered);
        (offered as u64, loss as u64)
    }

    /// The true rate for a loss-ratio goal at a trial duration: the highest load whose loss
    /// ratio stays within `ratio` for the median device (f = 1, no spikes, buffer included).
    ///
    /// This is what a search on this model should bracket; for `buffer = 0` it is `ndr`
    /// for ratio 0 and `pdr` for ratio `plr`.
    pub fn true_rate(&self, ratio: f64, duration: f64) -> f64 {
        let good = |load: f64| {
            let offered = (load * duration).floor();
            if offered <= 0.0 {
                return true;
            }
            let loss = ((self.loss_fraction(load, 1.0) * offered).ceil() - self.buffer).max(0.0);
            loss / offered <= ratio
        };
        let (mut lo, mut hi) = (self.ndr * 1e-3, self.pdr * 1e3);
        if !good(lo) {
            return lo;
        }
        for _ in 0..200 {
            let mid = (lo * hi).sqrt();
            if good(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// A [`Measurer`] over a [`SimModel`]: a fresh device whose trial index starts at 0.
#[derive(Debug, Clone)]
pub struct SimDut {
    model: SimModel,
    k: u64,
}

impl SimDut {
    /// A fresh device at trial index 0.
    pub fn new(model: SimModel) -> Self {
        SimDut { model, k: 0 }
    }

    /// The model.
    pub fn model(&self) -> &SimModel {
        &self.model
    }
}

impl Measurer for SimDut {
    fn measure(&mut self, rate_pps: f64, duration_s: f64) -> Result<TrialCounts, MeasureError> {
        let (offered, loss) = self.model.trial(self.k, rate_pps, duration_s);
        self.k += 1;
        Ok(TrialCounts::new(offered, offered - loss))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn splitmix_reference() {
        // Published splitmix64 stream for state 0: first outputs of next() starting at x=0.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn parse_model() {
        let m: SimModel = "ndr=1e6, pdr=1.02e6,plr=0.01,jitter=0.02,spike_rate=0.02,spike_len=1e-4,buffer=2e6,seed=7"
            .parse()
            .unwrap();
        assert_eq!(m.ndr, 1e6);
        assert_eq!(m.pdr, 1.02e6);
        assert_eq!(m.plr, 0.01);
        assert_eq!(m.jitter, 0.02);
        assert_eq!(m.spike_rate, 0.02);
        assert_eq!(m.spike_len, 1e-4);
        assert_eq!(m.buffer, 2e6);
        assert_eq!(m.seed, 7);
        for bad in [
            "ndr",
            "ndr=x",
            "foo=1",
            "ndr=2,pdr=1",
            "plr=1",
            "ndr=-1",
            "seed=-1",
            "ndr=inf",
        ] {
            assert!(bad.parse::<SimModel>().is_err(), "{bad}");
        }
    }

    #[test]
    fn true_rate_matches_parameters_without_buffer() {
        let m = SimModel::default();
        assert!((m.true_rate(0.0, 30.0) / m.ndr - 1.0).abs() < 1e-6);
        assert!((m.true_rate(m.plr, 30.0) / m.pdr - 1.0).abs() < 1e-6);
        let b = SimModel { buffer: 2e6, ..m };
        // A buffer hides loss, more so for short trials.
        assert!(b.true_rate(0.0, 30.0) > m.ndr);
        assert!(b.true_rate(0.0, 1.0) > b.true_rate(0.0, 30.0));
    }

    /// Test vectors computed by the independent Python implementation of the issue's model
    /// in `scripts/search-mlrsearch.py --vectors`: (model, k, load, duration, offered, loss).
    #[rustfmt::skip]
    const VECTORS: &[(&str, u64, f64, f64, u64, u64)] = &[
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 0, 11880000.0, 1.0, 11880000, 0),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 0, 12059999.999999998, 5.477, 66052619, 99079),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 0, 12100000.0, 30.0, 363000000, 907500),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 0, 18300000.0, 2.0, 36600000, 12322000),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1, 11880000.0, 1.0, 11880000, 0),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1, 12059999.999999998, 5.477, 66052619, 99079),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1, 12100000.0, 30.0, 363000000, 907500),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1, 18300000.0, 2.0, 36600000, 12322000),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 2, 11880000.0, 1.0, 11880000, 0),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 2, 12059999.999999998, 5.477, 66052619, 99079),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 2, 12100000.0, 30.0, 363000000, 907500),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 2, 18300000.0, 2.0, 36600000, 12322000),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 7, 11880000.0, 1.0, 11880000, 0),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 7, 12059999.999999998, 5.477, 66052619, 99079),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 7, 12100000.0, 30.0, 363000000, 907500),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 7, 18300000.0, 2.0, 36600000, 12322000),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1000, 11880000.0, 1.0, 11880000, 0),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1000, 12059999.999999998, 5.477, 66052619, 99079),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1000, 12100000.0, 30.0, 363000000, 907500),
    ("ndr=12e6,pdr=12.2e6,plr=0.005,seed=1", 1000, 18300000.0, 2.0, 36600000, 12322000),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 0, 990000.0, 1.0, 990000, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 0, 1004999.9999999999, 5.477, 5504385, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 0, 1010000.0, 30.0, 30300000, 16715),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 0, 1530000.0, 2.0, 3060000, 1014416),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1, 990000.0, 1.0, 990000, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1, 1004999.9999999999, 5.477, 5504385, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1, 1010000.0, 30.0, 30300000, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1, 1530000.0, 2.0, 3060000, 1002084),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 2, 990000.0, 1.0, 990000, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 2, 1004999.9999999999, 5.477, 5504385, 18145),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 2, 1010000.0, 30.0, 30300000, 138065),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 2, 1530000.0, 2.0, 3060000, 1046599),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 7, 990000.0, 1.0, 990000, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 7, 1004999.9999999999, 5.477, 5504385, 6876),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 7, 1010000.0, 30.0, 30300000, 75723),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 7, 1530000.0, 2.0, 3060000, 1030193),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1000, 990000.0, 1.0, 990000, 0),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1000, 1004999.9999999999, 5.477, 5504385, 4881),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1000, 1010000.0, 30.0, 30300000, 64686),
    ("ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2", 1000, 1530000.0, 2.0, 3060000, 1027261),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 0, 4950000.0, 1.0, 4950000, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 0, 5024999.999999999, 5.477, 27521924, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 0, 5050000.0, 30.0, 151500000, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 0, 7650000.0, 2.0, 15300000, 5005660),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1, 4950000.0, 1.0, 4950000, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1, 5024999.999999999, 5.477, 27521924, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1, 5050000.0, 30.0, 151500000, 181554),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1, 7650000.0, 2.0, 15300000, 5098276),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 2, 4950000.0, 1.0, 4950000, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 2, 5024999.999999999, 5.477, 27521924, 0),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 2, 5050000.0, 30.0, 151500000, 164724),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 2, 7650000.0, 2.0, 15300000, 5093898),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 7, 4950000.0, 1.0, 4950000, 14196),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 7, 5024999.999999999, 5.477, 27521924, 318864),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 7, 5050000.0, 30.0, 151500000, 2497065),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 7, 7650000.0, 2.0, 15300000, 5366438),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1000, 4950000.0, 1.0, 4950000, 5902),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1000, 5024999.999999999, 5.477, 27521924, 137561),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1000, 5050000.0, 30.0, 151500000, 1502693),
    ("ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3", 1000, 7650000.0, 2.0, 15300000, 5300180),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 0, 19800000.0, 1.0, 19800000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 0, 20099999.999999996, 5.477, 110087699, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 0, 20200000.0, 30.0, 606000000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 0, 30600000.0, 2.0, 61200000, 18604000),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1, 19800000.0, 1.0, 19800000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1, 20099999.999999996, 5.477, 110087699, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1, 20200000.0, 30.0, 606000000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1, 30600000.0, 2.0, 61200000, 18604000),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 2, 19800000.0, 1.0, 19800000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 2, 20099999.999999996, 5.477, 110087699, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 2, 20200000.0, 30.0, 606000000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 2, 30600000.0, 2.0, 61200000, 18604000),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 7, 19800000.0, 1.0, 19800000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 7, 20099999.999999996, 5.477, 110087699, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 7, 20200000.0, 30.0, 606000000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 7, 30600000.0, 2.0, 61200000, 18604000),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1000, 19800000.0, 1.0, 19800000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1000, 20099999.999999996, 5.477, 110087699, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1000, 20200000.0, 30.0, 606000000, 0),
    ("ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4", 1000, 30600000.0, 2.0, 61200000, 18604000),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 0, 9900000.0, 1.0, 9900000, 82532),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 0, 10049999.999999998, 5.477, 55043849, 1101746),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 0, 10100000.0, 30.0, 303000000, 7494286),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 0, 15300000.0, 2.0, 30600000, 10913313),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1, 9900000.0, 1.0, 9900000, 0),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1, 10049999.999999998, 5.477, 55043849, 10050),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1, 10100000.0, 30.0, 303000000, 10100),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1, 15300000.0, 2.0, 30600000, 9760203),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 2, 9900000.0, 1.0, 9900000, 9900),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 2, 10049999.999999998, 5.477, 55043849, 10050),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 2, 10100000.0, 30.0, 303000000, 10100),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 2, 15300000.0, 2.0, 30600000, 9243594),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 7, 9900000.0, 1.0, 9900000, 77447),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 7, 10049999.999999998, 5.477, 55043849, 1153413),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 7, 10100000.0, 30.0, 303000000, 7777288),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 7, 15300000.0, 2.0, 30600000, 10916880),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1000, 9900000.0, 1.0, 9900000, 577951),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1000, 10049999.999999998, 5.477, 55043849, 3947291),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1000, 10100000.0, 30.0, 303000000, 23080620),
    ("ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615", 1000, 15300000.0, 2.0, 30600000, 11952402),
    ];

    #[test]
    fn sim_vectors_match_independent_implementation() {
        for &(model, k, load, duration, offered, loss) in VECTORS {
            let m: SimModel = model.parse().unwrap();
            assert_eq!(
                m.trial(k, load, duration),
                (offered, loss),
                "{model} k={k} load={load} duration={duration}"
            );
        }
        assert!((uniform(1, 0, 0) - 0.43152799704850997).abs() < 1e-17);
        // A fresh device starts at k = 0 and advances per trial.
        let m: SimModel = VECTORS[40].0.parse().unwrap();
        let (l, d) = (VECTORS[40].2, VECTORS[40].3);
        let mut dut = SimDut::new(m);
        let c0 = dut.measure(l, d).unwrap();
        assert_eq!((c0.offered, c0.offered - c0.received), m.trial(0, l, d));
        let c1 = dut.measure(l, d).unwrap();
        assert_eq!((c1.offered, c1.offered - c1.received), m.trial(1, l, d));
    }
}
