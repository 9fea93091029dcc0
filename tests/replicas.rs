//! Replicated stages: one logical stage on several lcores, each replica on
//! its own queue, counted as one. A replicated trial over impaired mem queue
//! pairs reconciles exactly, summed and per replica; bad replica lists are
//! refused with exit 2 naming the key.

mod util;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use linerate::trial::{TrialOptions, TrialRunner};

const TRIAL: &str = r#"
[pipeline]
lcores = "0-1"
pin = false
[port.dut]
kind = "mem"
queues = 2
ring = 65536
loss = 0.01
duplicate = 0.01
reorder = 0.01
delay = "20us"
seed = 7
[stage.gen]
kind = "generator"
lcores = "0-1"
tx = "dut"
stream = 3
src_port = "1000-1015"
max_lag = "1s"
[stage.ana]
kind = "analyzer"
lcores = "0-1"
rx = "dut"
"#;

#[test]
fn a_replicated_trial_reconciles_summed_and_per_replica() {
    let plan = linerate::pipeline::load_str(std::path::Path::new("t.toml"), TRIAL).unwrap();
    let shown = plan.to_string();
    for want in [
        "gen[0]",
        "gen[1]",
        "ana[1]",
        "replica 2 of 2 of `gen`",
        "stream 4",
    ] {
        assert!(shown.contains(want), "the plan shows `{want}`:\n{shown}");
    }
    let mut r = TrialRunner::start(
        &plan,
        TrialOptions {
            drain: Duration::from_millis(300),
            stats_interval: None,
        },
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    for _ in 0..2 {
        let t = r
            .trial(100_001.0, Duration::from_millis(300), &stop, &mut |_, _| {})
            .unwrap();
        let w = &t.ports["dut"];
        assert_eq!(w.queues.len(), 2, "{w:?}");
        // Each replica offered its half of the rate, rounded down on its own.
        assert_eq!(t.offered, 2 * 15_000);
        let (mut sent, mut received, mut dup, mut reo) = (0, 0, 0, 0);
        for k in 0..2 {
            let g = &t.generators[&format!("gen[{k}]")];
            let a = &t.analyzers[&format!("ana[{k}]")];
            let q = &w.queues[k];
            let d = |c: &str| q.detail[c];
            assert_eq!(g.offered, 15_000);
            assert_eq!(g.sent + g.unsent, g.offered);
            assert_eq!(q.tx_packets, g.sent, "queue {k} took what replica {k} sent");
            assert_eq!(d("overflow"), 0);
            assert_eq!(a.received, g.sent - d("lost") - d("queue_dropped"), "{t:?}");
            assert_eq!(a.duplicates, d("duplicated"), "{q:?}");
            assert_eq!(a.reordered, d("reordered"), "{q:?}");
            assert!(d("lost") > 0 && d("duplicated") > 0 && d("reordered") > 0);
            // Replica k sends stream 3 + k, and it arrives at analyzer k.
            let s = t.streams.iter().find(|s| s.stream == 3 + k as u16).unwrap();
            assert_eq!(s.received, a.received);
            sent += g.sent;
            received += a.received;
            dup += a.duplicates;
            reo += a.reordered;
        }
        assert_eq!(t.streams.len(), 2);
        assert_eq!((t.sent, t.received), (sent, received));
        assert_eq!((t.duplicates, t.reordered), (dup, reo));
        assert_eq!(w.tx_packets, t.sent);
        assert_eq!(
            t.received,
            t.sent - w.detail["lost"] - w.detail["queue_dropped"]
        );
        assert_eq!(t.lost, t.offered - t.received);
        assert_eq!(t.stale, 0);
        // One merged histogram: every distinct and duplicate packet a sample.
        assert_eq!(t.latency_ns.samples, t.received + t.duplicates);
        assert!(t.latency_ns.min >= 20_000);
    }
    let report = r.finish();
    let ana = &report.stages["ana"];
    assert_eq!(ana.replicas.len(), 2);
    assert_eq!(
        ana.packets_in,
        ana.replicas.iter().map(|x| x.packets_in).sum::<u64>()
    );
    assert_eq!(report.ports["dut"].rx_packets, ana.packets_in);
}

#[test]
fn a_replicated_forward_over_mem_queues_adds_up() {
    let text = r#"
[pipeline]
lcores = "0-1"
pin = false
[port.a]
kind = "mem"
queues = 2
[port.b]
kind = "mem"
queues = 2
[stage.src0]
kind = "source"
lcore = 0
tx = "a"
count = 5000
[stage.src1]
kind = "source"
lcore = 1
tx = "a:1"
count = 3000
[stage.fwd]
kind = "forward"
lcores = "0-1"
rx = "a"
tx = "b"
[stage.out]
kind = "sink"
lcores = "0-1"
rx = "b"
"#;
    let r = util::run_text("fwd.toml", text, Duration::from_secs(20));
    let fwd = &r.stages["fwd"];
    assert_eq!(fwd.packets_out, 8000, "{fwd:?}");
    assert_eq!(fwd.replicas[0].packets_out, 5000);
    assert_eq!(fwd.replicas[1].packets_out, 3000);
    assert_eq!(r.stages["out"].packets_in, 8000);
    assert_eq!(r.ports["b"].queues[1].rx_packets, 3000);
}

#[test]
fn replicated_udp_receivers_share_a_port_with_so_reuseport() {
    let port = util::free_udp_port();
    let text = format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false
[port.out]
kind = "udp"
connect = "127.0.0.1:{port}"
[port.in]
kind = "udp"
bind = "127.0.0.1:{port}"
queues = 2
rcvbuf = "4 MiB"
[stage.src]
kind = "source"
lcore = 0
tx = "out"
count = 2000
rate = "200 kpps"
[stage.rx]
kind = "sink"
lcores = "0-1"
rx = "in"
"#
    );
    let r = util::run_text("udp.toml", &text, Duration::from_secs(20));
    let rx = &r.stages["rx"];
    assert_eq!(rx.replicas.len(), 2);
    // One flow: the kernel hashes it to one socket; the sum is what counts.
    assert_eq!(rx.packets_in, r.ports["in"].rx_packets);
    assert_eq!(
        rx.packets_in + r.ports["in"].dropped,
        r.stages["src"].packets_out,
        "{r:?}"
    );
}

/// `linerate check` on `text`: exit 2, and stderr names each of `parts`.
fn refused(text: &str, parts: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "bad-replicas.toml", text);
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for p in parts.iter().chain(&["bad-replicas.toml"]) {
        assert!(stderr.contains(p), "missing `{p}` in:\n{stderr}");
    }
}

const HEAD: &str = "[pipeline]\nlcores = \"0-1\"\npin = false\n";

#[test]
fn more_replicas_than_queues_is_refused_naming_the_key() {
    refused(
        &format!(
            "{HEAD}[port.w]\nkind = \"mem\"\n[stage.s]\nkind = \"source\"\nlcores = \"0-1\"\ntx = \"w\"\n[stage.k]\nkind = \"sink\"\nrx = \"w\"\n"
        ),
        &["stage.s", "lcores", "2 tx queues of port `w`, which has 1", "queues = 2"],
    );
}

#[test]
fn overlapping_lcores_are_refused_naming_the_key() {
    refused(
        &format!(
            "{HEAD}[port.w]\nkind = \"mem\"\nqueues = 3\n[stage.s]\nkind = \"source\"\nlcores = \"0-1,1\"\ntx = \"w\"\n[stage.k]\nkind = \"sink\"\nrx = \"w\"\n"
        ),
        &["stage.s", "lcores", "lcore 1 is named twice"],
    );
    refused(
        &format!(
            "{HEAD}[port.w]\nkind = \"mem\"\nqueues = 2\n[stage.s]\nkind = \"source\"\nlcore = 0\nlcores = \"0-1\"\ntx = \"w\"\n[stage.k]\nkind = \"sink\"\nrx = \"w\"\n"
        ),
        &["stage.s", "lcores", "`lcores` and `lcore` are both set"],
    );
}

#[test]
fn a_port_that_cannot_split_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("x.pcap").display().to_string();
    refused(
        &format!(
            "{HEAD}[port.w]\nkind = \"mem\"\nqueues = 2\n[port.f]\nkind = \"pcap\"\nwrite = \"{cap}\"\n[stage.s]\nkind = \"source\"\nlcores = \"0-1\"\ntx = \"f\"\n"
        ),
        &["stage.s", "lcores", "port `f` (pcap) cannot give each of 2 replicas a queue"],
    );
    refused(
        &format!(
            "{HEAD}[port.w]\nkind = \"mem\"\nqueues = 2\n[ring.r]\nsize = 1024\n[stage.s]\nkind = \"source\"\nlcores = \"0-1\"\ntx = \"r\"\n[stage.k]\nkind = \"sink\"\nrx = \"r\"\n"
        ),
        &["stage.s", "lcores", "is a ring"],
    );
}

proptest::proptest! {
    /// Samples spread over any number of replicas' histograms, merged, give
    /// the histogram of all the samples pooled: the same counts at every value.
    #[test]
    fn merged_replica_histograms_equal_the_pooled_one(
        samples in proptest::collection::vec((1u64..50_000_000, 0usize..4), 0..500),
    ) {
        use linerate::latency::{merge, new_histogram, Summary};
        let mut pooled = new_histogram();
        let mut parts = vec![new_histogram(); 4];
        for &(v, k) in &samples {
            pooled.saturating_record(v);
            parts[k].saturating_record(v);
        }
        let merged = merge(parts.iter());
        proptest::prop_assert_eq!(&merged, &pooled);
        let (a, b) = (Summary::of(&merged), Summary::of(&pooled));
        proptest::prop_assert_eq!((a.samples, a.min, a.p50, a.p99, a.max), (b.samples, b.min, b.p50, b.p99, b.max));
    }
}

#[test]
fn spead_replicas_that_cannot_split_are_refused_naming_the_key() {
    let geo = "n_ants = 2\nn_channels_total = 64\nn_channels_per_stream = 4\nn_samples_per_channel = 256\nn_pols = 2\npacket_payload = 1024\n";
    // More simulator replicas than antennas.
    let head = "[pipeline]\nlcores = \"0-2\"\npin = false\n[port.w]\nkind = \"mem\"\nqueues = 3\n";
    refused(
        &format!("{head}[stage.f]\nkind = \"spead_send\"\nlcores = \"0-2\"\ntx = \"w\"\n{geo}[stage.r]\nkind = \"spead_recv\"\nlcores = \"0-2\"\nrx = \"w\"\n{geo}"),
        &["stage.f", "lcores", "need at least 3 antennas; it has 2"],
    );
    // Generic heaps are one ordered stream.
    refused(
        &format!("{HEAD}[port.w]\nkind = \"mem\"\nqueues = 2\n[stage.f]\nkind = \"spead_send\"\nsource = \"heaps\"\nlcores = \"0-1\"\ntx = \"w\"\n[stage.k]\nkind = \"sink\"\nrx = \"w\"\n"),
        &["stage.f", "lcores", "generic heaps are one ordered stream"],
    );
    // A receive group needs a queue per member.
    refused(
        &format!("{HEAD}[port.w]\nkind = \"mem\"\n[stage.f]\nkind = \"spead_send\"\ntx = \"w\"\n{geo}[stage.r]\nkind = \"spead_recv\"\nlcores = \"0-1\"\nrx = \"w\"\n{geo}"),
        &["stage.r", "lcores", "2 rx queues of port `w`, which has 1"],
    );
    // A bad eviction mode names the key and the choices.
    refused(
        &format!("{HEAD}[port.w]\nkind = \"mem\"\nqueues = 2\n[stage.f]\nkind = \"spead_send\"\nlcores = \"0-1\"\ntx = \"w\"\n{geo}[stage.r]\nkind = \"spead_recv\"\nlcores = \"0-1\"\nrx = \"w\"\neviction = \"never\"\n{geo}"),
        &["stage.r", "eviction", "lossless"],
    );
}
