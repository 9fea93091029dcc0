//! Mem wire round trips through real pipelines: every impairment, counts that
//! reconcile exactly.

mod util;

use std::time::Duration;

use linerate::runtime::run::StopReason;

fn pipeline(count: u64, port: &str) -> String {
    format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false

[port.wire]
kind = "mem"
{port}

[stage.src]
kind = "source"
lcore = 0
tx = "wire"
count = {count}
rate = "200 kpps"
# These tests count the port, not the pacing: a source descheduled on a busy
# machine catches up rather than skipping late packets.
max_lag = "10s"

[stage.rx]
kind = "sink"
lcore = 1
rx = "wire"
"#
    )
}

#[test]
fn ideal_wire_delivers_everything() {
    // A ring larger than the count: nothing can overflow even if the receiving
    // thread is descheduled on a busy machine.
    let r = util::run_text(
        "ideal.toml",
        &pipeline(20_000, "ring = 32768"),
        Duration::from_secs(30),
    );
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    assert_eq!(r.stages["src"].packets_out, 20_000);
    assert_eq!(r.stages["rx"].packets_in, 20_000);
    assert_eq!(r.ports["wire"].dropped, 0);
    assert_eq!(r.left_in_flight, 0);
}

#[test]
fn every_impairment_reconciles() {
    let port = r#"
loss = 0.02
duplicate = 0.01
reorder = 0.02
delay = "100us"
capacity = "150 kpps"
queue = 64
seed = 99
ring = 8192
"#;
    let n = 30_000;
    let r = util::run_text("impaired.toml", &pipeline(n, port), Duration::from_secs(60));
    let w = &r.ports["wire"];
    let d = |k: &str| w.detail[k];
    assert_eq!(r.stages["src"].packets_out, n);
    assert_eq!(w.tx_packets, n);
    assert_eq!(w.rx_packets, r.stages["rx"].packets_in);
    for k in [
        "lost",
        "duplicated",
        "reordered",
        "queue_dropped",
        "delayed",
    ] {
        assert!(d(k) > 0, "{k} never happened: {w:?}");
    }
    // sent = received + dropped by each cause, duplicates counted.
    assert_eq!(
        w.tx_packets + d("duplicated"),
        w.rx_packets + d("lost") + d("queue_dropped") + d("overflow") + d("in_flight"),
        "{w:?}"
    );
    assert_eq!(d("in_flight"), 0);
}

#[test]
fn ring_between_lcores_carries_every_packet() {
    let text = r#"
[pipeline]
lcores = "0-1"
pin = false

[port.a]
kind = "mem"

[ring.hop]
size = 1024

[stage.src]
kind = "source"
lcore = 0
tx = "a"
count = 50000

[stage.fwd]
kind = "forward"
lcore = 0
rx = "a"
tx = "hop"

[stage.rx]
kind = "sink"
lcore = 1
rx = "hop"
"#;
    let r = util::run_text("ring.toml", text, Duration::from_secs(30));
    let hop = &r.rings["hop"];
    assert_eq!(hop.enqueued + hop.dropped, 50_000 - r.ports["a"].dropped);
    assert_eq!(r.stages["rx"].packets_in, hop.enqueued);
    assert_eq!(hop.enqueued, hop.dequeued);
    assert_eq!(r.stages["fwd"].dropped, hop.dropped);
}
