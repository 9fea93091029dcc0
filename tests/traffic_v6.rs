//! IPv6 traffic: generated Ethernet/IPv6/UDP frames are valid to an
//! independent parser (etherparse: lengths, mandatory UDP checksum, flows as
//! asked), a trial over the mem wire with IPv6 frames reconciles exactly (the
//! analyzer finds every stamp), and the generator's IPv6 keys give spanned
//! diagnostics.

mod util;

use std::net::Ipv6Addr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use linerate::trial::{TrialOptions, TrialRunner};

#[test]
fn ipv6_checksums_verified_by_etherparse() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("gen6.pcap");
    let text = format!(
        r#"
[pipeline]
pin = false
[port.cap]
kind = "pcap"
write = "{}"
[stage.gen]
kind = "generator"
tx = "cap"
count = 3000
frame = "imix"
imix = "84:3,85:1,777:2,1518:1,9018:1"
src_ip = "2001:db8::ffff:fffe-2001:db8::1:0:1"
dst_ip = "fd00::2"
dst_port = "5000-5009"
flows = "random"
[pool]
size = "10 KiB"
"#,
        cap.display()
    );
    let r = util::run_text("gen6.toml", &text, Duration::from_secs(30));
    assert_eq!(r.ports["cap"].tx_packets, 3000);
    let mut flows = std::collections::BTreeSet::new();
    let mut sizes = std::collections::BTreeSet::new();
    for (n, data) in util::capture(&cap).iter().enumerate() {
        let sliced = etherparse::SlicedPacket::from_ethernet(data).unwrap();
        let Some(etherparse::NetSlice::Ipv6(ip)) = sliced.net else {
            panic!("packet {n} is not IPv6")
        };
        let header = ip.header().to_header();
        assert_eq!(header.next_header, etherparse::IpNumber::UDP);
        assert_eq!(header.hop_limit, 64);
        assert_eq!(
            Ipv6Addr::from(header.destination),
            "fd00::2".parse::<Ipv6Addr>().unwrap()
        );
        let Some(etherparse::TransportSlice::Udp(udp)) = sliced.transport else {
            panic!("packet {n} is not UDP")
        };
        let uh = udp.to_header();
        assert_ne!(uh.checksum, 0, "IPv6 UDP checksums are mandatory");
        assert_eq!(
            uh.checksum,
            uh.calc_checksum_ipv6(&header, udp.payload()).unwrap(),
            "UDP checksum of packet {n}"
        );
        assert_eq!(usize::from(uh.length), udp.slice().len());
        assert_eq!(usize::from(header.payload_length), udp.slice().len());
        flows.insert((Ipv6Addr::from(header.source), uh.destination_port));
        sizes.insert(data.len() + 4);
    }
    assert_eq!(flows.len(), 40, "4 source addresses x 10 destination ports");
    let sources: std::collections::BTreeSet<Ipv6Addr> = flows.iter().map(|f| f.0).collect();
    let want: std::collections::BTreeSet<Ipv6Addr> = [
        "2001:db8::ffff:fffe",
        "2001:db8::ffff:ffff",
        "2001:db8::1:0:0",
        "2001:db8::1:0:1",
    ]
    .iter()
    .map(|a| a.parse().unwrap())
    .collect();
    assert_eq!(sources, want, "the range crosses a 32-bit boundary");
    assert_eq!(
        sizes.into_iter().collect::<Vec<_>>(),
        [84, 85, 777, 1518, 9018]
    );
}

#[test]
fn an_ipv6_trial_over_the_mem_wire_reconciles() {
    let text = r#"
[pipeline]
lcores = "0-1"
pin = false
[port.dut]
kind = "mem"
ring = 65536
loss = 0.01
reorder = 0.01
seed = 3
[stage.gen]
kind = "generator"
lcore = 0
tx = "dut"
ip = "v6"
src_port = "1000-1015"
max_lag = "1s"
[stage.ana]
kind = "analyzer"
lcore = 1
rx = "dut"
"#;
    let plan = linerate::pipeline::load_str(std::path::Path::new("t6.toml"), text).unwrap();
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
            .trial(100_000.0, Duration::from_millis(300), &stop, &mut |_, _| {})
            .unwrap();
        let w = &t.ports["dut"];
        let d = |k: &str| w.detail[k];
        assert_eq!(t.offered, 30_000);
        assert_eq!(w.tx_packets, t.sent);
        assert_eq!(
            w.tx_bytes,
            t.sent * 80,
            "84-byte frames by default for IPv6"
        );
        assert_eq!(d("overflow"), 0, "{w:?}");
        // Every IPv6 frame that left the wire was parsed and counted.
        assert_eq!(w.rx_packets, t.received + t.duplicates, "{t:?}");
        assert_eq!(t.received, t.sent - d("lost") - d("queue_dropped"), "{t:?}");
        assert_eq!(t.reordered, d("reordered"), "{w:?}");
        assert!(d("lost") > 0 && d("reordered") > 0, "{w:?}");
        assert_eq!(t.stale, 0);
        assert_eq!(t.latency_ns.samples, t.received);
    }
}

/// Runs `linerate check` on a generator with `keys`; returns stderr.
fn check_gen(name: &str, keys: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(
        dir.path(),
        name,
        &format!(
            "[pipeline]\npin = false\n[port.w]\nkind = \"mem\"\n[stage.gen]\nkind = \"generator\"\ntx = \"w\"\n{keys}\n[stage.ana]\nkind = \"analyzer\"\nrx = \"w\"\n"
        ),
    );
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout),
    )
}

#[test]
fn ipv6_keys_give_spanned_diagnostics() {
    for (name, keys, want) in [
        (
            "mixed.toml",
            "src_ip = \"10.0.0.1\"\ndst_ip = \"fd00::2\"",
            "mixed.toml:8:10: [stage.gen] `src_ip`: `src_ip` is IPv4 but the frames are IPv6 (the other address): a frame has one address family",
        ),
        (
            "family.toml",
            "ip = \"v4\"\ndst_ip = \"fd00::2-fd00::9\"",
            "family.toml:9:10: [stage.gen] `dst_ip`: `dst_ip` is IPv6 but the frames are IPv4 (`ip = \"v4\"`)",
        ),
        (
            "small.toml",
            "ip = \"v6\"\nframe = 64",
            "small.toml:9:9: [stage.gen] `frame`: a 64-byte frame cannot carry IPv6/UDP and the stamp",
        ),
        (
            "imix6.toml",
            "src_ip = \"fd00::1\"\nframe = \"imix\"\nimix = \"64:7,570:4\"",
            "imix6.toml:10:8: [stage.gen] `imix`: a 64-byte frame cannot carry IPv6/UDP and the stamp",
        ),
        (
            "unknown.toml",
            "ip = \"v5\"",
            "unknown.toml:8:6: [stage.gen] `ip`: unknown address family `v5`",
        ),
        (
            "huge.toml",
            "src_ip = \"fd00::-fd01::\"",
            "huge.toml:8:10: [stage.gen] `src_ip`: `fd00::-fd01::` spans more than 2^32 addresses",
        ),
    ] {
        let (code, text) = check_gen(name, keys);
        assert_eq!(code, Some(2), "{name}: {text}");
        assert!(text.contains(want), "{name}: missing `{want}` in:\n{text}");
    }
    // Defaults for IPv6: 84-byte frames, or the IMIX with 84 for 64.
    let (code, text) = check_gen("ok6.toml", "ip = \"v6\"");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("IPv6, 84-byte frames"), "{text}");
    let (code, text) = check_gen("imix-ok6.toml", "dst_ip = \"fd00::9\"\nframe = \"imix\"");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("IPv6, IMIX 84:7,570:4,1518:1"), "{text}");
}
