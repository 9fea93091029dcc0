//! The udp port over loopback: recvmmsg/sendmmsg batches end to end.

mod util;

use std::time::Duration;

#[test]
fn udp_loopback_round_trip() {
    let a = util::free_udp_port();
    let b = util::free_udp_port();
    let text = format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false

[port.out]
kind = "udp"
bind = "127.0.0.1:{a}"
connect = "127.0.0.1:{b}"
sndbuf = "4 MiB"

[port.in]
kind = "udp"
bind = "127.0.0.1:{b}"
rcvbuf = "16 MiB"

[stage.src]
kind = "source"
lcore = 0
tx = "out"
count = 5000
rate = "50 kpps"
# These tests count the port, not the pacing: a source descheduled on a busy
# machine catches up rather than skipping late packets.
max_lag = "10s"
frame = 128

[stage.rx]
kind = "sink"
lcore = 1
rx = "in"
"#
    );
    let r = util::run_text("udp.toml", &text, Duration::from_secs(30));
    assert_eq!(r.stages["src"].packets_out, 5000);
    assert_eq!(r.ports["out"].tx_packets, 5000);
    assert_eq!(r.ports["out"].tx_bytes, 5000 * 124);
    assert_eq!(r.stages["rx"].packets_in, 5000, "{:?}", r.ports);
    assert_eq!(r.ports["in"].rx_bytes, 5000 * 124);
}

/// A network namespace with a veth pair in it (10.81.0.1/24 on `NAME-v0`, its
/// peer up without an address) and no route for multicast; deleted on drop.
struct McastNetns(String);

impl McastNetns {
    fn new() -> Option<McastNetns> {
        use std::process::{Command, Stdio};
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "lrmc{}{}",
            NEXT.fetch_add(1, Ordering::Relaxed),
            std::process::id() % 100_000
        );
        let ns = McastNetns(name.clone());
        let (v0, v1) = (format!("{name}-v0"), format!("{name}-v1"));
        let steps: [&[&str]; 5] = [
            &["ip", "netns", "add", &name],
            &[
                "ip", "-n", &name, "link", "add", &v0, "type", "veth", "peer", "name", &v1,
            ],
            &["ip", "-n", &name, "addr", "add", "10.81.0.1/24", "dev", &v0],
            &["ip", "-n", &name, "link", "set", &v0, "up"],
            &["ip", "-n", &name, "link", "set", &v1, "up"],
        ];
        for s in steps {
            let ok = Command::new(s[0])
                .args(&s[1..])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|st| st.success());
            if !ok {
                util::missing(&format!(
                    "a network namespace: {s:?} failed (needs root and iproute2)"
                ));
                return None;
            }
        }
        Some(ns)
    }

    /// `linerate run` on `text` in the namespace, at most 60 s: exit code,
    /// the JSON report (when it ran) and stderr.
    fn run(&self, text: &str) -> (Option<i32>, Option<serde_json::Value>, String) {
        let dir = tempfile::tempdir().unwrap();
        let file = util::write(dir.path(), "mcast.toml", text);
        let json = dir.path().join("out.json");
        let out = std::process::Command::new("timeout")
            .args(["-k", "5", "60", "ip", "netns", "exec", &self.0])
            .arg(env!("CARGO_BIN_EXE_linerate"))
            .args(["run", "--duration", "10s", "--quiet", "--json"])
            .arg(&json)
            .arg(&file)
            .output()
            .unwrap();
        let doc = std::fs::read_to_string(&json)
            .ok()
            .map(|t| serde_json::from_str(&t).unwrap());
        (
            out.status.code(),
            doc,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs [`mcast_pipeline`] with `send_keys`, which must succeed: the
    /// packets port `out` sent and port `in` received.
    fn sent_and_received(&self, send_keys: &str) -> (u64, u64) {
        let (code, doc, err) = self.run(&mcast_pipeline(send_keys));
        assert_eq!(code, Some(0), "{err}");
        let doc = doc.unwrap();
        let n = |p: &str, k: &str| {
            doc["ports"][p][k]
                .as_u64()
                .unwrap_or_else(|| panic!("{doc}"))
        };
        (n("out", "tx_packets"), n("in", "rx_packets"))
    }
}

impl Drop for McastNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

/// A source sending 2000 packets to group 239.3.0.1 with `send_keys`, and a
/// sink on a socket of the same host that joined the group on 10.81.0.1.
fn mcast_pipeline(send_keys: &str) -> String {
    format!(
        r#"
[pipeline]
lcores = "0"
pin = false

[port.out]
kind = "udp"
connect = "239.3.0.1:47100"
{send_keys}

[port.in]
kind = "udp"
bind = "239.3.0.1:47100"
multicast = "239.3.0.1"
interface = "10.81.0.1"
rcvbuf = "16 MiB"

[stage.src]
kind = "source"
tx = "out"
count = 2000
rate = "20 kpps"
max_lag = "10s"
frame = 128

[stage.rx]
kind = "sink"
rx = "in"
"#
    )
}

#[test]
fn multicast_sends_leave_by_interface_and_multicast_loop_decides_local_members() {
    let Some(ns) = McastNetns::new() else {
        return;
    };
    // No route for the group: without `interface` the port cannot open,
    // and the error names the key to set.
    let (code, _, err) = ns.run(&mcast_pipeline(""));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("[port.out]"), "{err}");
    assert!(err.contains("Network is unreachable"), "{err}");
    assert!(err.contains("set `interface`"), "{err}");
    // With it the group leaves by the veth, and the host's own member gets
    // the kernel's loopback copy of every datagram...
    assert_eq!(
        ns.sent_and_received("interface = \"10.81.0.1\"\nmulticast_ttl = 1"),
        (2000, 2000)
    );
    // ...and none with `multicast_loop = false`, while all 2000 still go out.
    assert_eq!(
        ns.sent_and_received("interface = \"10.81.0.1\"\nmulticast_loop = false"),
        (2000, 0)
    );
}
