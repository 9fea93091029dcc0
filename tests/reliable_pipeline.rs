//! The reliable stages on real pipelines: over an impaired mem wire in both
//! modes, and between two linerate processes over UDP loopback.

mod util;

use std::time::Duration;

fn mem_pipeline(mode: &str, loss: f64) -> String {
    format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false
[pool]
buffers = 32768
[port.ab]
kind = "mem"
loss = {loss}
reorder = 0.01
duplicate = 0.005
delay = "20us"
ring = 16384
seed = 11
[port.ba]
kind = "mem"
loss = {loss}
delay = "20us"
ring = 16384
seed = 12
[stage.tx]
kind = "reliable_tx"
lcore = 0
tx = "ab"
rx = "ba"
messages = 3000
size = "4 KiB"
mode = "{mode}"
[stage.rx]
kind = "reliable_rx"
lcore = 1
rx = "ab"
tx = "ba"
messages = 3000
size = "4 KiB"
mode = "{mode}"
"#
    )
}

#[test]
fn every_message_once_in_order_over_an_impaired_wire_both_modes() {
    for mode in ["ours", "usnic"] {
        for loss in [0.0, 0.05] {
            let r = util::run_text(
                "rel.toml",
                &mem_pipeline(mode, loss),
                Duration::from_secs(120),
            );
            assert_eq!(
                r.stopped_by,
                Some(linerate::runtime::run::StopReason::Finished),
                "{mode} {loss}"
            );
            let rx = r.stages["rx"].detail.as_ref().unwrap();
            assert_eq!(rx["check"]["ok"], 3000, "{mode} {loss}: {rx}");
            assert_eq!(rx["check"]["corrupt"], 0);
            assert_eq!(rx["check"]["duplicate"], 0);
            assert_eq!(rx["check"]["out_of_order"], 0);
            // Goodput is over the time from the first delivery to the last:
            // the bytes delivered with the first message are not in it.
            let (bps, secs) = (
                rx["goodput_bps"].as_f64().unwrap(),
                rx["seconds_to_complete"].as_f64().unwrap(),
            );
            let bytes = rx["check"]["bytes"].as_f64().unwrap();
            assert!(bps > 0.0 && bps * secs / 8.0 < bytes * (1.0 - 1e-9), "{rx}");
            // Every delivered message carries its send time: one latency sample each.
            let lat = &rx["latency_ns"];
            assert_eq!(lat["samples"], 3000, "{mode} {loss}: {lat}");
            let (p50, p99, max) = (
                lat["p50"].as_u64().unwrap(),
                lat["p99"].as_u64().unwrap(),
                lat["max"].as_u64().unwrap(),
            );
            assert!(0 < p50 && p50 <= p99 && p99 <= max, "{mode} {loss}: {lat}");
            let tx = r.stages["tx"].detail.as_ref().unwrap();
            if loss > 0.0 {
                assert!(
                    tx["endpoint"]["retransmits"].as_u64().unwrap() > 0,
                    "{mode}: {tx}"
                );
                assert!(r.ports["ab"].detail["lost"] > 0);
            }
        }
    }
}

#[test]
fn two_processes_over_udp_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (util::free_udp_port(), util::free_udp_port());
    let side = |kind: &str, me: u16, peer: u16| {
        format!(
            "[pipeline]\npin = false\n[pool]\nbuffers = 32768\n[port.u]\nkind = \"udp\"\nbind = \"127.0.0.1:{me}\"\nconnect = \"127.0.0.1:{peer}\"\nrcvbuf = \"8 MiB\"\n[stage.s]\nkind = \"{kind}\"\nrx = \"u\"\ntx = \"u\"\nmessages = 2000\nsize = \"8 KiB\"\n"
        )
    };
    let recv = util::write(dir.path(), "recv.toml", &side("reliable_rx", b, a));
    let send = util::write(dir.path(), "send.toml", &side("reliable_tx", a, b));
    let (rj, sj) = (dir.path().join("r.json"), dir.path().join("s.json"));
    let mut receiver = util::bin()
        .args(["run", "-q", "--duration", "60s", "--json"])
        .arg(&rj)
        .arg(&recv)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let sender = util::bin()
        .args(["run", "-q", "--duration", "60s", "--json"])
        .arg(&sj)
        .arg(&send)
        .output()
        .unwrap();
    assert!(
        sender.status.success(),
        "{}",
        String::from_utf8_lossy(&sender.stderr)
    );
    let status = receiver.wait().unwrap();
    assert!(status.success());
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rj).unwrap()).unwrap();
    let check = &r["stages"]["s"]["detail"]["check"];
    assert_eq!(check["ok"], 2000, "{r}");
    assert_eq!(check["corrupt"], 0);
    assert_eq!(r["stopped_by"], "finished");
}
