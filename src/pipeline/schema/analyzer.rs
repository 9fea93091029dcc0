//! `kind = "analyzer"`: per-stream counts and latency of stamped traffic.

use std::sync::Arc;

use super::super::diag::Sink;
use super::super::table::Table;
use super::encap;
use super::common::{burst, rx, BURST, KIND, LCORE, LCORES, RX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::pipeline::build::{BuildError, Mode, StageCtx};
use crate::runtime::Stage;
use crate::traffic::analyzer::AnalyzerSpec;
use crate::traffic::analyzer::{AnaControl, Analyzer, LatencyMode};

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    LCORES,
    RX,
    Key::new(
        "latency",
        "\"packet\", \"batch\" or \"off\"",
        "\"packet\"",
        "which packets give latency samples",
    ),
    Key::new(
        "streams",
        "integer 1..=256",
        "16",
        "streams tracked: ids 0..streams",
    ),
    BURST,
    Key::new(
        "delay_log",
        "integer 0..=1000000",
        "0",
        "list the first N latency samples (stream, sequence number, stamp, receive time) in the detail's `delay_log`, to check the delay figures",
    ),
    encap::EXPECT,
    encap::VXLAN_PORT,
    encap::ENCAP_IDS,
];

pub(super) const DEF: StageDef = StageDef::new(
    "analyzer",
    "an analyzer stage",
    "counts stamped traffic per stream: loss, order, latency",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let rx = rx(t, sink);
    let latency = t
        .choice(
            sink,
            "latency",
            "latency mode",
            &[
                ("packet", LatencyMode::Packet),
                ("batch", LatencyMode::Batch),
                ("off", LatencyMode::Off),
            ],
            "\"packet\", \"batch\" or \"off\"",
        )
        .unwrap_or(LatencyMode::Packet);
    let streams = t
        .int(sink, "streams", 1..257)
        .map_or(16, |(n, _)| n as usize);
    let delay_log = t
        .int(sink, "delay_log", 0..1_000_001)
        .map_or(0, |(n, _)| n as usize);
    let c = AnalyzerSpec {
        latency,
        streams,
        burst: burst(t, sink),
        delay_log,
        encap: encap::analyzer(t, sink),
    };
    (StageKind::Analyzer(c), rx, None)
}

impl StageConfig for AnalyzerSpec {
    fn streams_tracked(&self) -> Option<usize> {
        Some(self.streams)
    }

    fn name(&self) -> &'static str {
        "analyzer"
    }

    fn describe(&self) -> String {
        format!(
            "analyzer, latency per {:?}, streams 0..{}, burst {}, expects {:?}",
            self.latency, self.streams, self.burst, self.encap.expect
        )
        .to_lowercase()
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        let i = cx.input()?;
        let control = Arc::new(AnaControl::default());
        if cx.mode == Mode::FreeRun {
            control.epoch.store(1, std::sync::atomic::Ordering::Relaxed);
        }
        cx.controls.put(&cx.spec.name, control.clone());
        Ok(Box::new(Analyzer::new(
            i,
            cx.pool.cache(),
            self.latency,
            self.streams,
            self.burst,
            control,
            cx.counters,
        )
        .with_delay_log(self.delay_log)
        .with_encap(self.encap)))
    }
}
