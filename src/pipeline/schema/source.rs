//! `kind = "source"`: a fixed template packet, as fast as possible or at a rate.

use super::{count_share, CheckCtx};
use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, tx, BURST, KIND, LCORE, LCORES, MAX_LAG, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::runtime::basic::SourceConfig;
use crate::runtime::basic::{udp_template, Source, SourcePacing};
use crate::runtime::Stage;
use crate::units::si;

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    LCORES,
    TX,
    Key::new(
        "rate",
        "rate",
        "none (as fast as possible)",
        "packets/s, bits/s, or a percent of the tx port's line rate",
    ),
    Key::new(
        "frame",
        "integer 64..=9018",
        "64",
        "frame size in bytes, FCS included",
    ),
    Key::new(
        "count",
        "integer",
        "none (forever)",
        "packets to send before finishing",
    ),
    BURST,
    MAX_LAG,
];

pub(super) const DEF: StageDef = StageDef::new(
    "source",
    "a source stage",
    "emits a fixed UDP template packet, as fast as possible or at a rate",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let tx = tx(t, sink);
    let frame = match t.int(sink, "frame", 64..9019) {
        Some((f, _)) => f as usize,
        None => 64,
    };
    let c = SourceConfig {
        rate: t.rate(sink, "rate").map(|x| x.0),
        rate_pps: None,
        frame,
        count: t.int(sink, "count", 1..i64::MAX).map(|(c, _)| c as u64),
        burst: burst(t, sink),
        max_lag: t
            .duration(sink, "max_lag")
            .unwrap_or(crate::traffic::generator::DEFAULT_MAX_LAG),
    };
    (StageKind::Source(c), None, tx)
}

impl StageConfig for SourceConfig {
    /// Its rate resolves against its port; its frame fits a buffer.
    fn check(&mut self, cx: &mut CheckCtx<'_, '_>) {
        if let Some(rate) = self.rate {
            self.rate_pps = cx.resolve_rate(rate, self.frame as f64);
        }
        cx.frame_fits(self.frame);
    }

    /// Replica k sends its share of the count (and of the rate, see
    /// [`CheckCtx::resolve_rate`]).
    fn split(&mut self, k: usize, n: usize) {
        self.count = self.count.map(|c| count_share(c, k, n));
    }

    fn name(&self) -> &'static str {
        "source"
    }

    fn describe(&self) -> String {
        let c = self;
        let rate = c
            .rate_pps
            .map_or("as fast as possible".into(), |r| format!("{}pps", si(r)));
        let count = c.count.map_or(String::new(), |n| format!(", {n} packets"));
        format!(
            "source, {}-byte frames, {rate}{count}, burst {}",
            c.frame, c.burst
        )
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let c = self;
        Ok(Box::new(Source::new(
            cx.output()?,
            cx.pool.cache(),
            udp_template(c.frame),
            SourcePacing {
                rate_pps: c.rate_pps,
                count: c.count,
                burst: c.burst,
                max_lag: c.max_lag,
            },
            cx.counters,
        )))
    }
}
