//! `kind = "sink"`: counts and frees packets.

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, rx, BURST, KIND, LCORE, LCORES, RX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::runtime::basic::SinkConfig;
use crate::runtime::Stage;

const KEYS: &[Key] = &[KIND, LCORE, LCORES, RX, BURST];

pub(super) const DEF: StageDef = StageDef::new(
    "sink",
    "a sink stage",
    "counts and frees packets",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let rx = rx(t, sink);
    let c = SinkConfig {
        burst: burst(t, sink),
    };
    (StageKind::Sink(c), rx, None)
}

impl StageConfig for SinkConfig {
    fn name(&self) -> &'static str {
        "sink"
    }

    fn describe(&self) -> String {
        format!("sink, burst {}", self.burst)
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        Ok(Box::new(crate::runtime::basic::Sink::new(
            cx.input()?,
            cx.pool.cache(),
            self.burst,
            cx.counters,
        )))
    }
}
