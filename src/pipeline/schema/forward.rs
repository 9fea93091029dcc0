//! `kind = "forward"`: moves packets from rx to tx.

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, rx, tx, BURST, KIND, LCORE, LCORES, RX, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::runtime::basic::Forward;
use crate::runtime::basic::ForwardConfig;
use crate::runtime::Stage;

const KEYS: &[Key] = &[KIND, LCORE, LCORES, RX, TX, BURST];

pub(super) const DEF: StageDef = StageDef::new(
    "forward",
    "a forward stage",
    "moves packets from rx to tx",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let rx = rx(t, sink);
    let tx = tx(t, sink);
    let c = ForwardConfig {
        burst: burst(t, sink),
    };
    (StageKind::Forward(c), rx, tx)
}

impl StageConfig for ForwardConfig {
    fn name(&self) -> &'static str {
        "forward"
    }

    fn describe(&self) -> String {
        format!("forward, burst {}", self.burst)
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let (i, out) = (cx.input()?, cx.output()?);
        Ok(Box::new(Forward::new(i, out, self.burst, cx.counters)))
    }
}
