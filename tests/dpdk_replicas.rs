//! Replicated stages on DPDK virtual devices: forwarding over two queue pairs
//! of a net_null pair (the raw-mbuf path, once per replica), and a two-lcore
//! trial through net_ring's per-queue loops, reconciled per replica.
#![cfg(feature = "dpdk")]

mod util;

const HEAD: &str = "[pipeline]\nlcores = \"0-1\"\npin = false\n";

#[test]
fn forwarding_over_two_queue_pairs_adds_up_with_zero_copies() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{HEAD}{}[port.in]\nkind = \"dpdk\"\ndevice = \"net_null0\"\nrx_queues = 2\n[port.out]\nkind = \"dpdk\"\ndevice = \"net_null1\"\ntx_queues = 2\n[stage.fwd]\nkind = \"forward\"\nlcores = \"0-1\"\nrx = \"in\"\ntx = \"out\"\n",
        util::eal("\"--vdev=net_null0\", \"--vdev=net_null1\"")
    );
    let file = util::write(dir.path(), "fwd.toml", &text);
    let r = util::run_json(&["run", "-q", "--duration", "1s"], &file);
    let fwd = &r["stages"]["fwd"];
    let reps = fwd["replicas"].as_array().unwrap();
    assert_eq!(reps.len(), 2);
    let sum: u64 = reps
        .iter()
        .map(|x| x["packets_out"].as_u64().unwrap())
        .sum();
    assert_eq!(fwd["packets_out"].as_u64().unwrap(), sum);
    assert!(
        reps.iter().all(|x| x["packets_out"].as_u64().unwrap() > 0),
        "{fwd}"
    );
    let out = &r["ports"]["out"];
    assert_eq!(out["tx_packets"].as_u64().unwrap(), sum);
    assert_eq!(
        out["detail"]["copied_in"].as_u64().unwrap(),
        0,
        "raw mbufs: {out}"
    );
}

#[test]
fn a_two_lcore_trial_through_net_ring_reconciles_per_replica() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{HEAD}{}[port.loop]\nkind = \"dpdk\"\ndevice = \"net_ring0\"\nrx_queues = 2\ntx_queues = 2\nrx_desc = 4096\ntx_desc = 4096\n[stage.gen]\nkind = \"generator\"\nlcores = \"0-1\"\ntx = \"loop\"\nframe = 128\nsrc_port = \"1000-1063\"\nmax_lag = \"1s\"\n[stage.ana]\nkind = \"analyzer\"\nlcores = \"0-1\"\nrx = \"loop\"\n",
        util::eal("\"--vdev=net_ring0\"")
    );
    let file = util::write(dir.path(), "ring.toml", &text);
    let t = util::run_json(&["trial", "--rate", "200 kpps", "--duration", "1s"], &file);
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    assert_eq!(n(&t["offered"]), 200_000);
    let (mut sent, mut received) = (0, 0);
    for k in 0..2 {
        let g = &t["generators"][format!("gen[{k}]")];
        let a = &t["analyzers"][format!("ana[{k}]")];
        assert_eq!(n(&g["offered"]), 100_000);
        assert_eq!(n(&g["sent"]) + n(&g["unsent"]), n(&g["offered"]));
        // Queue k loops back to queue k: replica k's stream reaches analyzer k.
        assert_eq!(n(&a["received"]), n(&g["sent"]), "{t}");
        assert_eq!(n(&a["duplicates"]), 0);
        let s = t["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| n(&s["stream"]) == k)
            .unwrap();
        assert_eq!(n(&s["received"]), n(&a["received"]));
        sent += n(&g["sent"]);
        received += n(&a["received"]);
    }
    assert_eq!((n(&t["sent"]), n(&t["received"])), (sent, received));
    assert_eq!(n(&t["latency_ns"]["samples"]), received);
}
