//! Every class of bad input gives exit status 2 and one clear message that
//! names the file, line and key: never a panic or a backtrace.

mod util;

use std::path::Path;

const GOOD_TAIL: &str = r#"
[port.wire]
kind = "mem"

[stage.src]
kind = "source"
tx = "wire"

[stage.rx]
kind = "sink"
rx = "wire"
"#;

/// Runs `linerate check` (and `run` when `run` is set) on `text`; returns stderr.
fn bad(name: &str, text: &str, run: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), name, text);
    let mut cmd = util::bin();
    if run {
        cmd.args(["run", "--duration", "1s", "--quiet"]);
    } else {
        cmd.arg("check");
    }
    let out = cmd.arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{name}: expected exit 2, stderr:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
    assert!(
        stderr.contains(name),
        "{name}: the message must name the file:\n{stderr}"
    );
    stderr
}

fn assert_has(stderr: &str, parts: &[&str]) {
    for p in parts {
        assert!(stderr.contains(p), "missing `{p}` in:\n{stderr}");
    }
}

#[test]
fn malformed_toml() {
    let e = bad("syntax.toml", "[pipeline\nname = 1\n", false);
    assert_has(&e, &["syntax.toml:1:", "not valid TOML"]);
}

#[test]
fn wrong_type() {
    let e = bad(
        "types.toml",
        &format!("[pipeline]\nname = 5\n{GOOD_TAIL}"),
        false,
    );
    assert_has(
        &e,
        &[
            "types.toml:2:8",
            "`name`",
            "expected a string, found an integer",
        ],
    );
}

#[test]
fn unknown_key_suggests() {
    let text = GOOD_TAIL.replace("tx = \"wire\"", "tx = \"wire\"\nrat = \"1 Mpps\"");
    let e = bad("keys.toml", &text, false);
    assert_has(
        &e,
        &[
            "keys.toml:8:1",
            "[stage.src] `rat`",
            "did you mean `rate`",
            "valid: kind, lcore, lcores, tx, rate",
        ],
    );
}

#[test]
fn unknown_kinds() {
    let text = GOOD_TAIL
        .replace("kind = \"sink\"", "kind = \"snk\"")
        .replace("kind = \"mem\"", "kind = \"carrier-pigeon\"");
    let e = bad("kinds.toml", &text, false);
    assert_has(
        &e,
        &[
            "unknown stage kind `snk` (did you mean `sink`?)",
            "unknown port kind `carrier-pigeon`",
            "valid: mem, udp, pcap",
        ],
    );
}

#[test]
fn missing_port() {
    let text = GOOD_TAIL.replace("rx = \"wire\"", "rx = \"wier\"");
    let e = bad("missing.toml", &text, false);
    assert_has(
        &e,
        &[
            "missing.toml:11:6",
            "[stage.rx] `rx`",
            "no port or ring is named `wier`",
            "port `wire`",
        ],
    );
}

#[test]
fn dangling_and_doubly_fed_rings() {
    let text = r#"
[ring.a]
size = 64
[ring.b]
size = 64
[port.p]
kind = "mem"
[stage.s1]
kind = "source"
tx = "b"
[stage.s2]
kind = "source"
tx = "b"
[stage.k]
kind = "sink"
rx = "b"
"#;
    let e = bad("rings.toml", text, false);
    assert_has(
        &e,
        &[
            "ring `a` is dangling: no stage transmits to it",
            "ring `b` is fed by several stages (s1, s2)",
        ],
    );
}

#[test]
fn doubly_used_port_side() {
    let text = format!("{GOOD_TAIL}\n[stage.rx2]\nkind = \"sink\"\nrx = \"wire\"\n");
    let e = bad("twice.toml", &text, false);
    assert_has(
        &e,
        &["the rx side of port `wire` is already used by stage `rx`"],
    );
}

#[test]
fn cycle() {
    let text = r#"
[ring.a]
[ring.b]
[stage.x]
kind = "forward"
rx = "a"
tx = "b"
[stage.y]
kind = "forward"
rx = "b"
tx = "a"
"#;
    let e = bad("cycle.toml", text, false);
    assert_has(&e, &["form a cycle", "x -> y -> x"]);
}

#[test]
fn lcore_out_of_range() {
    let e = bad(
        "lcores.toml",
        &format!("[pipeline]\nlcores = \"0-4000\"\n{GOOD_TAIL}"),
        false,
    );
    assert_has(
        &e,
        &["lcores.toml:2:10", "are not on this machine", "pin = false"],
    );
    let text = GOOD_TAIL.replace("kind = \"sink\"", "kind = \"sink\"\nlcore = 3");
    let e = bad("stage-lcore.toml", &text, false);
    assert_has(&e, &["lcore 3 is not among the pipeline's lcores"]);
}

#[test]
fn ring_size_not_power_of_two() {
    let text = GOOD_TAIL.replace("kind = \"mem\"", "kind = \"mem\"\nring = 1000");
    let e = bad("pow2.toml", &text, false);
    assert_has(&e, &["1000 is not a power of two", "such as 512 or 1024"]);
}

#[test]
fn rate_that_does_not_parse() {
    let text = GOOD_TAIL.replace("tx = \"wire\"", "tx = \"wire\"\nrate = \"fast\"");
    let e = bad("rate.toml", &text, false);
    assert_has(&e, &["rate.toml:8:8", "rate `fast` is not valid", "Mpps"]);
    let text = GOOD_TAIL.replace("tx = \"wire\"", "tx = \"wire\"\nrate = \"50%\"");
    let e = bad("percent.toml", &text, false);
    assert_has(&e, &["needs a port with a known line rate"]);
}

#[test]
fn line_rate_that_is_not_in_bits() {
    let text = GOOD_TAIL.replace("kind = \"mem\"", "kind = \"mem\"\nline_rate = \"10 Mpps\"");
    let e = bad("line.toml", &text, false);
    assert_has(&e, &["line.toml:", "a line rate is in bits/s", "10 Gbps"]);
}

#[test]
fn words_outside_their_set() {
    let text = TRIAL
        .replace("tx = \"dut\"", "tx = \"dut\"\nflows = \"zigzag\"")
        .replace("rx = \"dut\"", "rx = \"dut\"\nlatency = \"sometimes\"");
    let e = bad("words.toml", &text, false);
    assert_has(
        &e,
        &[
            "[stage.gen] `flows`: unknown flow order `zigzag`",
            "\"round-robin\" or \"random\"",
            "[stage.ana] `latency`: unknown latency mode `sometimes`",
            "\"packet\", \"batch\" or \"off\"",
        ],
    );
}

#[test]
fn truncated_and_foreign_pcap() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.pcap");
    {
        let f = std::fs::File::create(&good).unwrap();
        let mut w = pcap_file::pcap::PcapWriter::new(f).unwrap();
        let pkt = pcap_file::pcap::PcapPacket::new(std::time::Duration::ZERO, 60, &[0u8; 60]);
        w.write_packet(&pkt).unwrap();
        w.write_packet(&pkt).unwrap();
    }
    let bytes = std::fs::read(&good).unwrap();
    let cut = util::write(dir.path(), "cut.pcap", "");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let foreign = util::write(
        dir.path(),
        "foreign.pcap",
        "this is not a capture at all, just text",
    );
    for (file, expect) in [(&cut, "truncated"), (&foreign, "is not a pcap capture")] {
        let text = format!(
            "[port.cap]\nkind = \"pcap\"\nread = \"{}\"\n[stage.k]\nkind = \"sink\"\nrx = \"cap\"\n",
            file.display()
        );
        let e = bad("pcap.toml", &text, true);
        assert_has(&e, &[expect, file.file_name().unwrap().to_str().unwrap()]);
    }
}

#[test]
fn udp_address_that_cannot_be_bound() {
    // 192.0.2.1 (TEST-NET-1) is not an address of this host: bind fails at once.
    let text = "[port.u]\nkind = \"udp\"\nbind = \"192.0.2.1:9\"\n[stage.k]\nkind = \"sink\"\nrx = \"u\"\n";
    let e = bad("bind.toml", text, true);
    assert_has(&e, &["cannot bind UDP address 192.0.2.1:9"]);
}

#[test]
fn udp_multicast_keys_that_cannot_work() {
    // A group that is no multicast address; a receiver bound to a unicast
    // address (it would never see the group); send options on a port that
    // does not send to a group.
    let text = "[port.u]\nkind = \"udp\"\nbind = \"10.0.0.1:7148\"\nmulticast = \"239.2.0.1\"\n\
        [port.v]\nkind = \"udp\"\nbind = \"0.0.0.0:7149\"\nmulticast = \"10.0.0.2\"\n\
        [port.w]\nkind = \"udp\"\nconnect = \"10.0.0.3:7148\"\nmulticast_ttl = 4\nmulticast_loop = false\ninterface = \"10.0.0.4\"\n\
        [stage.k]\nkind = \"sink\"\nrx = \"u\"\n[stage.l]\nkind = \"sink\"\nrx = \"v\"\n\
        [stage.g]\nkind = \"source\"\ntx = \"w\"\n";
    let e = bad("mcast.toml", text, false);
    assert_has(
        &e,
        &[
            "mcast.toml:3:8",
            "[port.u] `bind`",
            "a socket bound to 10.0.0.1 never receives group 239.2.0.1",
            "\"239.2.0.1:7148\"",
            "[port.v] `multicast`",
            "10.0.0.2 is not a multicast group",
            "[port.w] `multicast_ttl`",
            "[port.w] `multicast_loop`",
            "applies only to multicast sends",
            "[port.w] `interface`",
            "applies only to a multicast join or multicast sends",
        ],
    );
    // A substream that does not start on a stream boundary.
    let text = SPEAD_TAIL.replace("timestamps = 8", "timestamps = 8\nfirst_channel = 8");
    let e = bad("first-channel.toml", &text, false);
    assert_has(
        &e,
        &[
            "[stage.fsim] `first_channel`",
            "first_channel 8 does not start a stream of 16 channels",
            "a multiple of n_channels_per_stream (16)",
        ],
    );
}

#[test]
fn missing_file_and_bad_arguments() {
    let out = util::bin()
        .args(["check", "/nonexistent/p.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("cannot read pipeline file /nonexistent/p.toml"));
    let out = util::bin()
        .args(["run", "x.toml", "--duration", "soon"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("duration `soon` is not valid"));
    let _ = Path::new("");
}

const TRIAL: &str = r#"
[port.dut]
kind = "mem"
line_rate = "10 Gbps"
[stage.gen]
kind = "generator"
tx = "dut"
[stage.ana]
kind = "analyzer"
rx = "dut"
"#;

#[test]
fn trial_rates_that_do_not_parse_or_exceed_line_rate() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(dir.path(), "trial.toml", TRIAL);
    for (rate, expect) in [
        ("fast", "rate `fast` is not valid"),
        ("20 Mpps", "exceeds the generators' line rate"),
        ("101%", "percentage"),
    ] {
        let out = util::bin()
            .args(["trial", "--duration", "1s", "--rate", rate])
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{rate}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{rate}: {err}");
    }
}

#[test]
fn frame_sizes_and_imix_weights() {
    let text = TRIAL.replace("tx = \"dut\"", "tx = \"dut\"\nframe = 63");
    let e = bad("frame.toml", &text, false);
    assert_has(
        &e,
        &[
            "[stage.gen] `frame`",
            "63 is out of range",
            "from 64 to 9018",
        ],
    );
    let text = TRIAL.replace(
        "tx = \"dut\"",
        "tx = \"dut\"\nframe = \"imix\"\nimix = \"64:0,1518:0\"",
    );
    let e = bad("imix.toml", &text, false);
    assert_has(&e, &["the IMIX weights sum to 0"]);
    let text = TRIAL.replace("tx = \"dut\"", "tx = \"dut\"\nframe = 9000");
    let e = bad("room.toml", &text, false);
    assert_has(&e, &["does not fit a pool buffer"]);
}

/// A receiver and its sink, to break one key at a time.
const SPEAD_TAIL: &str = r#"
[port.wire]
kind = "mem"

[stage.fsim]
kind = "spead_send"
tx = "wire"
timestamps = 8

[stage.recv]
kind = "spead_recv"
rx = "wire"

[stage.sink]
kind = "chunk_sink"
from = "recv"
mode = "check"
"#;

#[test]
fn spead_stage_keys() {
    // Sender: a flavour that is none, a count of the other source, a rate in percent.
    let text = SPEAD_TAIL.replace(
        "timestamps = 8",
        "timestamps = 8\nflavour = \"64-44\"\nheaps = 3\nrate = \"50%\"",
    );
    let e = bad("spead-send.toml", &text, false);
    assert_has(
        &e,
        &[
            "spead-send.toml:9:11",
            "[stage.fsim] `flavour`",
            "`64-44` is not a SPEAD flavour",
            "\"64-48\" (MeerKAT)",
            "`heaps` is not a key of source = \"fsim\"",
            "spead-send.toml:11:8",
            "not a percentage",
        ],
    );
    // Receiver: fewer chunks than the window, an impossible geometry.
    let text = SPEAD_TAIL.replace(
        "rx = \"wire\"",
        "rx = \"wire\"\nmax_chunks = 4\nn_chunks = 2\nn_channels_per_stream = 8192",
    );
    let e = bad("spead-recv.toml", &text, false);
    assert_has(
        &e,
        &[
            "spead-recv.toml:14:12",
            "[stage.recv] `n_chunks`",
            "2 chunks cannot fill a window of max_chunks = 4",
            "spead-recv.toml:15:25",
            "the F-engine geometry is invalid",
        ],
    );
    // Sink: a write without a directory; a receiver that does not exist.
    let text = SPEAD_TAIL.replace("mode = \"check\"", "mode = \"write\"");
    let e = bad("chunk-sink-mode.toml", &text, false);
    assert_has(
        &e,
        &["chunk-sink-mode.toml:17:8", "mode = \"write\" needs `dir`"],
    );
    let text = SPEAD_TAIL.replace("from = \"recv\"", "from = \"rcv\"");
    let e = bad("chunk-sink.toml", &text, false);
    assert_has(
        &e,
        &[
            "chunk-sink.toml:16:8",
            "[stage.sink] `from`",
            "no stage is named `rcv`",
            "a spead_recv stage: recv",
        ],
    );
    // A sink fed by a stage that is not a receiver, and a packet larger than a buffer.
    let text = SPEAD_TAIL
        .replace("from = \"recv\"", "from = \"fsim\"")
        .replace("timestamps = 8", "timestamps = 8\npacket_payload = 4096")
        .replace("rx = \"wire\"", "rx = \"wire\"\npacket_payload = 4096");
    let e = bad("chunk-sink-from.toml", &text, false);
    assert_has(
        &e,
        &[
            "stage `fsim` is a spead_send stage, not a spead_recv stage",
            "4192-byte packets do not fit a pool buffer",
        ],
    );
}

/// A frame larger than a dpdk port's mbufs is refused at check time, even
/// when the pool has room for it (the generator builds one segment per frame;
/// it used to panic on its lcore instead).
#[cfg(feature = "dpdk")]
#[test]
fn generator_frame_larger_than_an_mbuf() {
    let text = r#"[pool]
size = 10000
[eal]
args = ["--no-huge", "-m", "256", "--no-pci", "--vdev=net_null0", "-l", "0"]
[port.out]
kind = "dpdk"
device = "net_null0"
[stage.gen]
kind = "generator"
tx = "out"
frame = 9000
"#;
    let e = bad("jumbo.toml", text, false);
    assert_has(
        &e,
        &[
            "jumbo.toml:",
            "[stage.gen]",
            "`frame`",
            "9000-byte frame does not fit port `out`'s mbufs (2048 bytes of data room)",
            "`mbuf_size = 8996` (or more) on [port.out]",
        ],
    );
    // With mbufs that large, the same frame passes.
    let text = text.replace(
        "device = \"net_null0\"",
        "device = \"net_null0\"\nmbuf_size = 8996",
    );
    linerate::pipeline::load_str(std::path::Path::new("jumbo.toml"), &text).unwrap();
}

#[test]
fn paces_that_cannot_work() {
    // The generator's line in TRIAL after the inserted key: line 8.
    for (key, expect) in [
        ("pace = \"bursty\"", "unknown pace `bursty`"),
        ("burst_len = 16", "`burst_len` needs `pace = \"burst\"`"),
        (
            "pace = \"poisson\"\nburst_gap = \"1ms\"",
            "`burst_gap` needs `pace = \"burst\"`",
        ),
    ] {
        let text = TRIAL.replace("tx = \"dut\"", &format!("tx = \"dut\"\n{key}"));
        let e = bad("pace.toml", &text, false);
        let name = key.rsplit('\n').next().unwrap().split(' ').next().unwrap();
        let line = 8 + key.matches('\n').count();
        assert_has(
            &e,
            &[&format!("pace.toml:{line}"), &format!("`{name}`"), expect],
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let cap = util::record(dir.path(), 2);
    for (key, expect) in [
        ("pace = \"recorded\"\nspeedup = 0", "not above zero"),
        ("pace = \"recorded\"\nspeedup = -2.5", "not above zero"),
        ("speedup = 2", "`speedup` needs `pace = \"recorded\"`"),
        ("pace = \"rate\"\nrate = \"1 Gbps\"", "a packet rate"),
        ("vlan = 4096", "4096 is out of range"),
        ("pace = \"sometimes\"", "unknown pace `sometimes`"),
    ] {
        let text = format!(
            "[port.cap]\nkind = \"pcap\"\nread = \"{}\"\n{key}\n[stage.k]\nkind = \"sink\"\nrx = \"cap\"\n",
            cap.display()
        );
        let e = bad("replay.toml", &text, false);
        let name = key.rsplit('\n').next().unwrap().split(' ').next().unwrap();
        let line = 4 + key.matches('\n').count();
        assert_has(
            &e,
            &[&format!("replay.toml:{line}"), &format!("`{name}`"), expect],
        );
    }
}
