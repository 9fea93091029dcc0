//! `kind = "mem"`: the in-process wire, which doubles as a simulated device
//! under test (capacity, queue, impairments).

use super::super::diag::Sink;
use super::super::table::Table;
use super::common::{ring_size, DELAY, DUPLICATE, KIND, LOSS, REORDER};
use super::{Key, PortConfig, PortDef, PortKind};
use crate::pipeline::build::PortCtx;
use crate::port::mem::{Capacity, MemConfig};
use crate::port::{OpenPort, PortError};
use crate::units::si;

const KEYS: &[Key] = &[
    KIND,
    Key::new(
        "capacity",
        "rate",
        "none (an ideal wire)",
        "service rate of the simulated device: \"5 Mpps\", \"10 Gbps\", or \"40%\" of line_rate",
    ),
    Key::new(
        "queue",
        "integer 1..2^24",
        "1024",
        "packets that may wait in the device before tail drop (with a capacity)",
    ),
    LOSS,
    DUPLICATE,
    REORDER,
    DELAY,
    Key::new("seed", "integer", "1", "seed of the impairment decisions"),
    Key::new(
        "ring",
        "power of two 2..=2^24",
        "4096",
        "slots carrying packets to the rx side; a full ring drops (overflow)",
    ),
    Key::new(
        "line_rate",
        "bits/s",
        "none",
        "the wire's line rate, for rates given in percent",
    ),
    super::neigh::IP,
    super::neigh::MAC,
    super::neigh::UDP_BIND,
    super::neigh::UDP_CONNECT,
    super::neigh::RESOLVE_TIMEOUT,
    Key::new(
        "queues",
        "integer 1..=256",
        "1",
        "queue pairs, each a wire of its own (capacity split evenly), one per replica of a stage",
    ),
];

pub(super) const DEF: PortDef = PortDef::new(
    "mem",
    "a mem port",
    "an in-process wire with capacity, queue and impairments",
    KEYS,
    parse,
);

fn parse(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<PortKind> {
    // The impairment keys, read by the same code as the impair stage's.
    let (imp, line_rate_bps) = super::impair::impairments(t, sink);
    let mut c = MemConfig {
        line_rate_bps,
        ..MemConfig::default()
    }
    .with_impairments(&imp);
    if let Some(r) = ring_size(t, sink, "ring") {
        c.ring = r;
    }
    if let Some((q, _)) = t.int(sink, "queues", 1..257) {
        c.queues = q as u16;
    }
    Some(PortKind::Mem(c))
}

impl PortConfig for MemConfig {
    fn queues_key(&self, _dir: &str) -> String {
        "queues".into()
    }

    /// A wire carries whatever it is given.
    fn carries(&self) -> Option<&'static str> {
        None
    }

    fn is_wire(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "mem"
    }

    fn describe(&self) -> String {
        let c = self;
        let mut parts = Vec::new();
        match c.capacity {
            Some(Capacity::Pps(p)) => {
                parts.push(format!("capacity {}pps, queue {}", si(p), c.queue))
            }
            Some(Capacity::L2Bps(b)) => {
                parts.push(format!("capacity {}bps, queue {}", si(b), c.queue))
            }
            Some(Capacity::L1Bps(b)) => {
                parts.push(format!("capacity {}bps L1, queue {}", si(b), c.queue))
            }
            None => parts.push("ideal".into()),
        }
        for (name, v) in [
            ("loss", c.loss),
            ("duplicate", c.duplicate),
            ("reorder", c.reorder),
        ] {
            if v > 0.0 {
                parts.push(format!("{name} {}%", v * 100.0));
            }
        }
        if !c.delay.is_zero() {
            parts.push(format!("delay {:?}", c.delay));
        }
        if c.loss + c.duplicate + c.reorder > 0.0 {
            parts.push(format!("seed {}", c.seed));
        }
        if c.queues > 1 {
            parts.push(format!(
                "{} queue pairs (each a wire of its own, the capacity split evenly)",
                c.queues
            ));
        }
        parts.join(", ")
    }

    fn queues(&self, _dir: &str) -> u16 {
        self.queues
    }

    fn open(&self, _cx: &PortCtx<'_>) -> Result<OpenPort, PortError> {
        Ok(crate::port::mem::open(self))
    }

    fn line_rate_bps(&self) -> Option<f64> {
        self.line_rate_bps
    }
}
