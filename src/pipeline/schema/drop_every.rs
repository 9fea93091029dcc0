//! `kind = "drop_every"`: moves packets from rx to tx and drops every n-th,
//! a loss pattern known in advance (a test of a receiver's loss accounting
//! needs no seed to say which packets went missing).
//!
//! The whole kind is this file and its line in the registry: its settings,
//! its keys and reader, its running stage and its build. It needs no check
//! against the pipeline and splits over replicas as it is (each replica
//! drops every n-th of its own packets), so it keeps the defaults of
//! [`StageConfig`] for those.

use std::sync::Arc;

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{burst, rx, tx, BURST, KIND, LCORE, LCORES, RX, TX};
use super::{Key, ParsedStage, StageConfig, StageDef, StageKind};
use crate::buf::counter::CacheAligned;
use crate::buf::{Burst, PoolCache};
use crate::pipeline::build::{BuildError, StageCtx};
use crate::runtime::basic::{Input, Output};
use crate::runtime::{Context, Poll, Stage, StageCounters};

/// A drop_every stage's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropEveryConfig {
    /// The stage drops packet n, 2n, 3n, ... of those it receives.
    pub every: u64,
    /// Packets per burst.
    pub burst: usize,
}

const KEYS: &[Key] = &[
    KIND,
    LCORE,
    LCORES,
    RX,
    TX,
    Key::new(
        "every",
        "integer 2..=2^32",
        "required",
        "drop packet n, 2n, 3n, ... of those received",
    ),
    BURST,
];

pub(super) const DEF: StageDef = StageDef::new(
    "drop_every",
    "a drop_every stage",
    "moves packets from rx to tx, dropping every n-th",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> ParsedStage {
    let rx = rx(t, sink);
    let tx = tx(t, sink);
    if !t.has("every") {
        sink.error(
            t.span.clone(),
            &t.path,
            Some("every"),
            "`every` is required here",
            Some("an integer from 2, like `every = 100`".into()),
        );
    }
    let every = t.int(sink, "every", 2..(1 << 32) + 1).map_or(2, |(n, _)| n as u64);
    let c = DropEveryConfig {
        every,
        burst: burst(t, sink),
    };
    (StageKind::DropEvery(c), rx, tx)
}

impl StageConfig for DropEveryConfig {
    fn name(&self) -> &'static str {
        "drop_every"
    }

    fn describe(&self) -> String {
        format!("drop_every {}, burst {}", self.every, self.burst)
    }

    fn build(&self, mut cx: StageCtx<'_>) -> Result<Box<dyn Stage>, BuildError> {
        Ok(Box::new(DropEvery {
            input: cx.input()?,
            out: cx.output()?,
            cache: cx.pool.cache(),
            every: self.every,
            seen: 0,
            burst_size: self.burst,
            burst: Burst::new(),
            keep: Burst::new(),
            drop: Burst::new(),
            counters: cx.counters,
        }))
    }
}

/// The running stage.
struct DropEvery {
    input: Input,
    out: Output,
    cache: PoolCache,
    every: u64,
    seen: u64,
    burst_size: usize,
    burst: Burst,
    keep: Burst,
    drop: Burst,
    counters: Arc<CacheAligned<StageCounters>>,
}

impl Stage for DropEvery {
    fn poll(&mut self, cx: &Context) -> Poll {
        let n = self.input.recv(cx.now, &mut self.burst, self.burst_size);
        if n == 0 {
            self.out.flush(cx.now);
            return if self.input.is_finished() {
                Poll::Finished
            } else {
                Poll::Idle
            };
        }
        let bytes_in = self.burst.bytes();
        for p in self.burst.drain() {
            self.seen += 1;
            let to = if self.seen % self.every == 0 {
                &mut self.drop
            } else {
                &mut self.keep
            };
            // Both hold a whole burst: `burst_size` is at most BURST_MAX.
            let _ = to.push(p);
        }
        let dropped = self.drop.len();
        self.cache.free_bulk(&mut self.drop);
        let bytes_out = self.keep.bytes();
        let (sent, refused) = self.out.send_or_drop(cx.now, &mut self.keep);
        let c = &self.counters;
        c.packets_in.add(n as u64);
        c.bytes_in.add(bytes_in);
        c.packets_out.add(sent as u64);
        c.bytes_out.add(bytes_out);
        c.dropped.add((dropped + refused) as u64);
        Poll::Busy
    }

    fn is_finite(&self) -> bool {
        self.input.is_finite()
    }

    fn finish(&mut self) -> Result<(), String> {
        self.out.finish()
    }
}
