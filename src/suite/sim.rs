//! The simulated device across frame sizes: the search's [`SimModel`] with a
//! bit-rate limit beside its packet-rate limit (`bps=10e9` in the `--sim`
//! string). At frame size S the device forwards min(ndr, bps / (8 (S + 20)))
//! packets/s; its NDR and PDR are both scaled by the same factor, so a
//! larger frame lowers them once the wire is the bottleneck.

use std::str::FromStr;
use std::sync::atomic::AtomicBool;

use super::{pps_at, SuiteDut};
use crate::search::measurer::{MeasureError, Measurer, TrialCounts};
use crate::search::resume::Interruptible;
use crate::search::sim::{SimDut, SimModel, SimParseError};

/// A [`SimModel`] with an optional bit-rate limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizedSim {
    /// The packet-rate model (its NDR and PDR at the smallest frames).
    pub model: SimModel,
    /// The device's L1 bit-rate limit, bits/s.
    pub bps: Option<f64>,
}

impl FromStr for SizedSim {
    type Err = SimParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut bps = None;
        let mut rest = Vec::new();
        for part in s.split(',') {
            match part.split_once('=') {
                Some((k, v)) if k.trim() == "bps" => {
                    let v: f64 = v.trim().parse().map_err(|e| SimParseError {
                        input: s.to_string(),
                        reason: format!("bps {v:?}: {e}"),
                    })?;
                    if !(v.is_finite() && v > 0.0) {
                        return Err(SimParseError {
                            input: s.to_string(),
                            reason: "bps must be a positive number of bits/s".into(),
                        });
                    }
                    bps = Some(v);
                }
                _ => rest.push(part),
            }
        }
        let model = rest
            .join(",")
            .parse::<SimModel>()
            .map_err(|e| SimParseError {
                input: s.to_string(),
                reason: e.reason,
            })?;
        Ok(SizedSim { model, bps })
    }
}

impl SizedSim {
    /// The packet-rate model at `frame`-byte frames (average, FCS included).
    pub fn at(&self, frame: f64) -> SimModel {
        let Some(bps) = self.bps else {
            return self.model;
        };
        let factor = (pps_at(bps, frame) / self.model.ndr).min(1.0);
        SimModel {
            ndr: self.model.ndr * factor,
            pdr: self.model.pdr * factor,
            ..self.model
        }
    }

    /// The `source` of its reports (as `linerate search --sim` writes it,
    /// with the bit-rate limit).
    pub fn source(&self) -> String {
        match self.bps {
            Some(b) => format!("sim {:?} bps {b}", self.model),
            None => format!("sim {:?}", self.model),
        }
    }
}

/// The simulated device at one frame size.
pub struct SimSizeDut(Interruptible<SimDut>);

impl SimSizeDut {
    /// The device at `frame`-byte frames; a trial stops when `flag` is set
    /// and first waits `time_scale` times its duration.
    pub fn new(
        sim: &SizedSim,
        frame: f64,
        flag: &'static AtomicBool,
        time_scale: f64,
    ) -> SimSizeDut {
        SimSizeDut(Interruptible::new(
            SimDut::new(sim.at(frame)),
            flag,
            time_scale,
        ))
    }
}

impl SuiteDut for SimSizeDut {
    fn measurer(&mut self) -> &mut dyn Measurer {
        &mut self.0
    }

    fn latency_trial(
        &mut self,
        rate_pps: f64,
        duration_s: f64,
    ) -> Result<(TrialCounts, serde_json::Value), MeasureError> {
        let c = self.0.measure(rate_pps, duration_s)?;
        Ok((c, serde_json::Value::Null))
    }

    fn no_latency(&self) -> Option<String> {
        Some("the simulated device has no latency (its model counts packets only)".into())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn bit_rate_limit_scales_ndr_and_pdr() {
        let s: SizedSim = "ndr=10e6,pdr=10.5e6,plr=0.01,bps=10e9,seed=3"
            .parse()
            .unwrap();
        assert_eq!(s.bps, Some(10e9));
        assert_eq!(s.model.seed, 3);
        // 64 bytes: 14.88 Mpps of wire, the packet limit rules.
        assert_eq!(s.at(64.0), s.model);
        // 1518 bytes: 812.7 kpps of wire.
        let m = s.at(1518.0);
        let wire = 10e9 / (8.0 * 1538.0);
        assert!((m.ndr - wire).abs() < 1e-6, "{m:?}");
        assert!((m.pdr / m.ndr - 1.05).abs() < 1e-12);
        let no_limit: SizedSim = "ndr=10e6".parse().unwrap();
        assert_eq!(no_limit.at(9000.0).ndr, 10e6);
        for bad in ["bps=0", "bps=x", "ndr=1e6,bps=-1", "bps=1e9,foo=1"] {
            assert!(bad.parse::<SizedSim>().is_err(), "{bad}");
        }
    }
}
