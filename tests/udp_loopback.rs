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
