//! The `impair` stage in real pipelines: between mem wires and between UDP
//! sockets, in real time, with its counts reconciling exactly; jitter that
//! keeps the order or not; and the bad input it refuses with exit 2.

mod util;

use std::time::Duration;

use linerate::runtime::run::{RunReport, StopReason};

/// `received + duplicated = sent + lost + queue_dropped + overflow + refused + in_flight`.
fn reconciles(r: &RunReport, stage: &str) -> serde_json::Value {
    let s = &r.stages[stage];
    let d = s
        .detail
        .clone()
        .expect("the impair stage reports its causes");
    let n = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("no `{k}` in {d}"));
    assert_eq!(
        s.packets_in + n("duplicated"),
        s.packets_out
            + n("lost")
            + n("queue_dropped")
            + n("overflow")
            + n("refused")
            + n("in_flight"),
        "{d}"
    );
    assert_eq!(
        s.dropped,
        n("lost") + n("queue_dropped") + n("overflow") + n("refused") + n("in_flight")
    );
    d
}

fn generated(impair: &str, count: u64) -> String {
    format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false

[port.a]
kind = "mem"
ring = 65536

[port.b]
kind = "mem"
ring = 65536

[stage.gen]
kind = "generator"
lcore = 0
tx = "a"
rate = "50 kpps"
count = {count}
max_lag = "10s"

[stage.link]
kind = "impair"
lcore = 1
rx = "a"
tx = "b"
{impair}

[stage.ana]
kind = "analyzer"
lcore = 0
rx = "b"
"#
    )
}

fn stream(r: &RunReport) -> serde_json::Value {
    r.stages["ana"].detail.as_ref().unwrap()["streams"][0].clone()
}

#[test]
fn every_impairment_between_mem_wires_reconciles() {
    let r = util::run_text(
        "impair-mem.toml",
        &generated(
            r#"loss = 0.05
duplicate = 0.02
reorder = 0.02
delay = "500us"
seed = 3
jitter = { distribution = "exponential", mean = "200us", order = "any" }"#,
            20_000,
        ),
        Duration::from_secs(60),
    );
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    let d = reconciles(&r, "link");
    assert_eq!(r.stages["link"].packets_in, 20_000);
    for k in ["lost", "duplicated", "reordered", "delayed", "jittered"] {
        assert!(d[k].as_u64().unwrap() > 0, "{k}: {d}");
    }
    // 5 % loss, seeded: near 1000 of 20 000.
    let lost = d["lost"].as_u64().unwrap();
    assert!((800..1200).contains(&lost), "{lost}");
    assert_eq!(d["in_flight"], 0, "the drain waits for delayed packets");
    let s = stream(&r);
    assert_eq!(s["received"].as_u64(), Some(r.stages["link"].packets_out));
    assert!(s["reordered"].as_u64().unwrap() > 0);
}

#[test]
fn jitter_keeps_the_order_when_asked_and_not_otherwise() {
    let jitter = |order: &str| {
        format!(
            r#"jitter = {{ distribution = "uniform", min = "0ms", max = "2ms", order = "{order}" }}"#
        )
    };
    let kept = util::run_text(
        "jitter-keep.toml",
        &generated(&jitter("keep"), 10_000),
        Duration::from_secs(60),
    );
    reconciles(&kept, "link");
    let s = stream(&kept);
    assert_eq!(s["received"], 10_000);
    assert_eq!(s["reordered"], 0, "{s}");
    // 50 kpps with up to 2 ms of jitter: packets 20 us apart overtake each other.
    let any = util::run_text(
        "jitter-any.toml",
        &generated(&jitter("any"), 10_000),
        Duration::from_secs(60),
    );
    reconciles(&any, "link");
    let s = stream(&any);
    assert_eq!(s["received"], 10_000);
    assert!(s["reordered"].as_u64().unwrap() > 100, "{s}");
}

#[test]
fn between_udp_sockets() {
    let (p1, p2) = (util::free_udp_port(), util::free_udp_port());
    let text = format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false

[port.to_link]
kind = "udp"
connect = "127.0.0.1:{p1}"

[port.link_in]
kind = "udp"
bind = "127.0.0.1:{p1}"
rcvbuf = "4 MiB"

[port.link_out]
kind = "udp"
connect = "127.0.0.1:{p2}"

[port.far]
kind = "udp"
bind = "127.0.0.1:{p2}"
rcvbuf = "4 MiB"

[stage.src]
kind = "source"
lcore = 0
tx = "to_link"
rate = "20 kpps"
count = 10000
max_lag = "10s"

[stage.link]
kind = "impair"
lcore = 1
rx = "link_in"
tx = "link_out"
loss = 0.2
delay = "1ms"
jitter = {{ distribution = "normal", mean = "1ms", stddev = "300us" }}

[stage.rx]
kind = "sink"
lcore = 0
rx = "far"
"#
    );
    let r = util::run_text("impair-udp.toml", &text, Duration::from_secs(60));
    let d = reconciles(&r, "link");
    let link = &r.stages["link"];
    // The kernel drops datagrams when a socket's reader lost its core (the
    // machine is shared): what the stage took in is what it accounts for.
    assert!(
        (1000..=10_000).contains(&link.packets_in),
        "{}",
        link.packets_in
    );
    assert_near(d["lost"].as_u64().unwrap(), link.packets_in, 0.2);
    assert_eq!(
        d["jittered"].as_u64().unwrap() + d["lost"].as_u64().unwrap(),
        link.packets_in
    );
    let got = r.stages["rx"].packets_in;
    assert!(got > 0 && got <= link.packets_out, "{got}");
}

/// `k` of `n` is a fraction `p`, within six standard deviations.
fn assert_near(k: u64, n: u64, p: f64) {
    let sigma = (p * (1.0 - p) / n as f64).sqrt();
    let got = k as f64 / n as f64;
    assert!((got - p).abs() < 6.0 * sigma, "{k} of {n} is not near {p}");
}

/// `linerate check` on `text`: exit 2 and the message.
fn refused(name: &str, text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), name, text);
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
    assert!(
        stderr.contains(name) && !stderr.contains("panicked"),
        "{stderr}"
    );
    stderr
}

fn one_stage(ports: &str, impair: &str) -> String {
    format!(
        r#"
[pipeline]
lcores = "0"
pin = false
{ports}
[stage.link]
kind = "impair"
rx = "in"
tx = "out"
{impair}
"#
    )
}

const UDP_PORTS: &str = r#"
[port.in]
kind = "udp"
bind = "127.0.0.1:9"

[port.out]
kind = "udp"
connect = "127.0.0.1:10"
"#;

#[test]
fn ports_that_cannot_carry_its_traffic_are_refused() {
    // UDP payloads out of a socket are not Ethernet frames for a capture.
    let ports = r#"
[port.in]
kind = "udp"
bind = "127.0.0.1:9"

[port.out]
kind = "pcap"
write = "/tmp/never-written.pcap"
"#;
    let e = refused("udp-to-pcap.toml", &one_stage(ports, ""));
    assert!(e.contains("[stage.link] `tx`"), "{e}");
    assert!(
        e.contains("carries Ethernet frames") && e.contains("UDP payloads"),
        "{e}"
    );
    // A udp port without `connect` cannot send at all.
    let ports = r#"
[port.in]
kind = "udp"
bind = "127.0.0.1:9"

[port.out]
kind = "udp"
bind = "127.0.0.1:10"
"#;
    let e = refused("udp-no-connect.toml", &one_stage(ports, ""));
    assert!(e.contains("`tx`") && e.contains("no tx side"), "{e}");
}

#[test]
fn nonsensical_jitter_is_refused_naming_the_key() {
    for (name, jitter, key) in [
        (
            "backwards.toml",
            r#"jitter = { distribution = "uniform", min = "5ms", max = "1ms" }"#,
            "`max`",
        ),
        (
            "no-spread.toml",
            r#"jitter = { distribution = "normal", mean = "1ms", stddev = "0ms" }"#,
            "`stddev`",
        ),
        (
            "unknown.toml",
            r#"jitter = { distribution = "gaussian", mean = "1ms" }"#,
            "`distribution`",
        ),
        (
            "foreign-key.toml",
            r#"jitter = { distribution = "uniform", max = "1ms", stddev = "1ms" }"#,
            "`stddev`",
        ),
        (
            "missing.toml",
            r#"jitter = { distribution = "exponential" }"#,
            "`mean`",
        ),
        ("not-a-table.toml", r#"jitter = "2ms""#, "`jitter`"),
        (
            "order.toml",
            r#"jitter = { distribution = "uniform", max = "1ms", order = "sorted" }"#,
            "`order`",
        ),
        ("limit.toml", "limit = 0", "`limit`"),
    ] {
        let e = refused(name, &one_stage(UDP_PORTS, jitter));
        assert!(e.contains(key), "{name}: {e}");
        assert!(e.contains("stage.link"), "{name}: {e}");
    }
}

/// Between two DPDK ports (net_ring loops): mbufs in, mbufs out, duplicates
/// cloned or counted as failed, everything reconciled.
#[cfg(feature = "dpdk")]
#[test]
fn between_dpdk_ports() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false
{}
[port.r0]
kind = "dpdk"
device = "net_ring0"
rx_desc = 4096
tx_desc = 4096

[port.r1]
kind = "dpdk"
device = "net_ring1"
rx_desc = 4096
tx_desc = 4096

[stage.gen]
kind = "generator"
lcore = 0
tx = "r0"
rate = "50 kpps"
count = 20000
max_lag = "10s"

[stage.link]
kind = "impair"
lcore = 1
rx = "r0"
tx = "r1"
loss = 0.1
duplicate = 0.05
delay = "200us"
jitter = {{ distribution = "normal", mean = "300us", stddev = "100us" }}

[stage.ana]
kind = "analyzer"
lcore = 0
rx = "r1"
"#,
        util::eal("\"--vdev=net_ring0\", \"--vdev=net_ring1\"")
    );
    let file = util::write(dir.path(), "impair-dpdk.toml", &text);
    let r = util::run_json(&["run", "--quiet"], &file);
    let link = &r["stages"]["link"];
    let d = &link["detail"];
    let n = |x: &serde_json::Value| x.as_u64().unwrap();
    // A net_ring queue drops what its reader (starved on a shared machine)
    // did not take in time: the stage accounts for what it took in.
    assert!((1000..=20_000).contains(&n(&link["packets_in"])), "{link}");
    assert_eq!(
        n(&link["packets_in"]) + n(&d["duplicated"]),
        n(&link["packets_out"])
            + n(&d["lost"])
            + n(&d["queue_dropped"])
            + n(&d["overflow"])
            + n(&d["refused"])
            + n(&d["in_flight"]),
        "{d}"
    );
    assert_near(n(&d["lost"]), n(&link["packets_in"]), 0.1);
    assert!(n(&d["duplicated"]) + n(&d["duplicate_failed"]) > 0, "{d}");
    // The analyzer's queue may drop too when its lcore is starved.
    let got = n(&r["stages"]["ana"]["detail"]["streams"][0]["received"]);
    assert!(got > 0 && got <= n(&link["packets_out"]), "{got}");
}
