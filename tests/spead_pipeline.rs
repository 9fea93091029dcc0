//! The SPEAD stages on real pipelines: the telescope-ingest pipelines as
//! shipped (mem wire, UDP loopback, and a DPDK vdev with `--features dpdk`),
//! an impaired wire, a sink on another lcore with as few chunks as the window
//! (the receiver stalls and holds packets), chunks written to files, and the
//! generic-heap sender read back by the heap assembler and by a receiver in
//! heaps mode.

mod util;

use std::path::Path;
use std::time::Duration;

use linerate::runtime::run::{RunReport, StopReason};
use linerate::spead::assemble::{AssembleConfig, Assembler};
use linerate::spead::wire::ItemValue;
use serde_json::Value;

fn pipeline(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("pipelines")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

fn detail(r: &RunReport, stage: &str) -> Value {
    r.stages[stage].detail.clone().unwrap_or(Value::Null)
}

/// Asserts a lossless run of `heaps` heaps of `packets_per_heap` packets,
/// every byte checked, and returns the receiver's detail.
fn assert_lossless(r: &RunReport, heaps: u64, packets_per_heap: u64, heap_bytes: u64) -> Value {
    assert_eq!(r.stopped_by, Some(StopReason::Finished), "{r:?}");
    let (tx, rx, check) = (detail(r, "fsim"), detail(r, "recv"), detail(r, "check"));
    let packets = heaps * packets_per_heap + 1;
    assert_eq!(tx["heaps"], heaps, "{tx}");
    assert_eq!(tx["packets"], packets, "{tx}");
    assert_eq!(tx["end_of_stream_sent"], true);
    assert_eq!(rx["packets"], packets, "{rx}");
    assert_eq!(rx["heaps_complete"], heaps, "{rx}");
    assert_eq!(rx["heaps_incomplete"], 0, "{rx}");
    assert_eq!(rx["heaps_too_old"], 0, "{rx}");
    assert_eq!(rx["heaps_rejected"], 0, "{rx}");
    assert_eq!(rx["fraction_present"], 1.0, "{rx}");
    assert_eq!(rx["ended_by"], "end_of_stream", "{rx}");
    assert_eq!(rx["stream"]["packets_accepted"], packets - 1, "{rx}");
    assert_eq!(rx["stream"]["stopped"], true);
    assert_eq!(check["chunks"], rx["chunks"], "{check}");
    assert_eq!(check["present"], heaps, "{check}");
    assert_eq!(check["wrong_bytes"], 0, "{check}");
    assert_eq!(check["check"]["heaps_checked"], heaps, "{check}");
    assert_eq!(
        check["check"]["bytes_checked"],
        heaps * heap_bytes,
        "{check}"
    );
    // The sink's Gb/s is over the time from its first chunk to its last: the
    // first chunks' bytes arrived at that span's start and are not in it.
    let (gbps, secs) = (
        check["gbps"].as_f64().unwrap(),
        check["seconds"].as_f64().unwrap(),
    );
    let bytes = check["bytes"].as_f64().unwrap();
    assert!(
        bytes > 0.0 && gbps * secs * 1e9 / 8.0 < bytes * (1.0 - 1e-9),
        "{check}"
    );
    rx
}

#[test]
fn telescope_ingest_over_the_mem_wire_loses_nothing_and_every_byte_is_right() {
    let r = util::run_text(
        "telescope-ingest.toml",
        &pipeline("telescope-ingest.toml"),
        Duration::from_secs(120),
    );
    // 1024 timestamps x 4 antennas, 16 packets of 1 KiB per 16 KiB heap.
    let rx = assert_lossless(&r, 4096, 16, 16384);
    // 32 heaps per F-engine per chunk: 32 chunks.
    assert_eq!(rx["chunks"], 32);
    assert_eq!(r.ports["wire"].rx_packets, 4096 * 16 + 1);
    // Every chunk went to the sink and came back.
    assert_eq!(r.rings["recv.chunks"].enqueued, 32);
    assert_eq!(r.rings["recv.free_chunks"].dequeued, 32);
}

#[test]
fn telescope_ingest_over_udp_loopback() {
    let port = util::free_udp_port();
    // Fewer heaps at a modest rate, on a port of our own.
    let text = pipeline("telescope-ingest-udp.toml")
        .replace("47202", &port.to_string())
        .replace("timestamps = 1024", "timestamps = 128")
        .replace("rate = \"1 Gbps\"", "rate = \"100 Mbps\"")
        // Lossless here, so the end-of-stream heap ends the run; the idle
        // fallback must not fire while a loaded machine deschedules the sender.
        .replace("idle_timeout = \"500ms\"", "idle_timeout = \"20s\"");
    let r = util::run_text("ingest-udp.toml", &text, Duration::from_secs(120));
    let rx = assert_lossless(&r, 512, 16, 16384);
    assert_eq!(rx["chunks"], 4);
    assert_eq!(r.ports["in"].rx_packets, 512 * 16 + 1);
}

#[test]
fn impaired_wire_counts_every_lost_heap_and_no_byte_is_wrong() {
    let text = pipeline("telescope-ingest.toml")
        .replace("# loss = 0.001", "loss = 0.001")
        .replace("# reorder = 0.01", "reorder = 0.01")
        .replace("# duplicate = 0.001", "duplicate = 0.001")
        .replace("# seed = 1", "seed = 1")
        .replace("timestamps = 1024", "timestamps = 256");
    let r = util::run_text("impaired.toml", &text, Duration::from_secs(120));
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    let (rx, check) = (detail(&r, "recv"), detail(&r, "check"));
    let wire = &r.ports["wire"];
    let lost = wire.detail["lost"];
    assert!(lost > 0 && wire.detail["duplicated"] > 0, "{wire:?}");
    // Every packet the wire delivered was offered to the chunk stream.
    assert_eq!(rx["packets"], wire.rx_packets);
    let s = &rx["stream"];
    assert!(s["packets_duplicate"].as_u64().unwrap() > 0, "{s}");
    let complete = rx["heaps_complete"].as_u64().unwrap();
    assert!(complete < 1024, "{rx}");
    assert!(rx["heaps_incomplete"].as_u64().unwrap() > 0, "{rx}");
    // Complete heaps are exactly those marked present and checked, all right.
    assert_eq!(check["present"], complete);
    assert_eq!(check["check"]["heaps_checked"], complete);
    assert_eq!(check["check"]["heaps_absent"], 1024 - complete);
    assert_eq!(check["wrong_bytes"], 0, "{check}");
    assert!(rx["fraction_present"].as_f64().unwrap() < 1.0);
    // Accepted packets plus discards by cause reconcile with what was offered.
    let n = |k: &str| s[k].as_u64().unwrap();
    assert_eq!(
        n("packets"),
        n("packets_accepted")
            + n("packets_malformed")
            + n("packets_duplicate")
            + n("packets_unsized")
            + n("packets_inconsistent")
            + n("packets_too_old")
            + n("packets_rejected")
            + n("packets_after_stop")
            + u64::from(s["stopped"] == true),
        "{s}"
    );
}

/// A small geometry: 2 antennas, 4 KiB heaps of 4 packets.
fn small(sink_lcore: u32, n_chunks: u32, mode: &str) -> String {
    let geo = "n_ants = 2\nn_channels_total = 64\nn_channels_per_stream = 4\nn_samples_per_channel = 256\nn_pols = 2\npacket_payload = 1024\nflavour = \"64-40\"\n";
    format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false
[port.wire]
kind = "mem"
ring = 16384
[stage.fsim]
kind = "spead_send"
lcore = 0
tx = "wire"
timestamps = 256
rate = "200 Mbps"
{geo}
[stage.recv]
kind = "spead_recv"
lcore = 0
rx = "wire"
heaps_per_fengine_per_chunk = 8
max_chunks = 2
n_chunks = {n_chunks}
{geo}
[stage.check]
kind = "chunk_sink"
lcore = {sink_lcore}
from = "recv"
{mode}
"#
    )
}

#[test]
fn sink_on_another_lcore_with_no_spare_chunk_stalls_and_loses_nothing() {
    // n_chunks = max_chunks: every move of the window waits for a chunk to
    // come back from the other lcore; the receiver holds its packets meanwhile.
    let r = util::run_text(
        "stall.toml",
        &small(1, 2, "mode = \"check\""),
        Duration::from_secs(120),
    );
    let rx = assert_lossless(&r, 512, 4, 4096);
    assert_eq!(rx["chunks"], 32);
    assert!(rx["stream"]["stalls"].as_u64().unwrap() > 0, "{rx}");
    assert_eq!(rx["packets_held_at_stop"], 0);
}

#[test]
fn write_mode_writes_raw_chunks_and_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chunks");
    let mode = format!("mode = \"write\"\ndir = \"{}\"", out.display());
    let r = util::run_text("write.toml", &small(0, 4, &mode), Duration::from_secs(120));
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    let sink = detail(&r, "check");
    assert_eq!(sink["chunks"], 32);
    assert_eq!(sink["files"], 64);
    // Chunk 3: heaps of timestamps 24..32 (x step) of both antennas, all present.
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("chunk_0000000003.json")).unwrap())
            .unwrap();
    assert_eq!(json["chunk_id"], 3);
    let step = 64 * 2 * 256;
    assert_eq!(json["timestamp"], 3 * 8 * step);
    assert_eq!(json["present_count"], 16);
    assert_eq!(json["present"].as_array().unwrap().len(), 16);
    let raw = std::fs::read(out.join("chunk_0000000003.raw")).unwrap();
    assert_eq!(raw.len(), 16 * 4096);
    // Heap index 5 = time 2, antenna 1: the simulator's payload.
    let ts = (3 * 8 + 2) * step;
    for (i, &b) in raw[5 * 4096..6 * 4096].iter().enumerate() {
        assert_eq!(b, linerate::spead::fsim::payload_byte(1, ts, i as u64));
    }
}

#[test]
fn generic_heaps_sender_reassembles_with_items_and_payload() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("heaps.pcap");
    let text = format!(
        r#"
[port.cap]
kind = "pcap"
write = "{}"
[stage.tx]
kind = "spead_send"
tx = "cap"
source = "heaps"
flavour = "64-40"
heaps = 5
heap_size = "10 KiB"
packet_size = 1000
"#,
        cap.display()
    );
    let r = util::run_text("heaps.toml", &text, Duration::from_secs(60));
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    let tx = detail(&r, "tx");
    assert_eq!(tx["heaps"], 5);
    let packets = util::capture(&cap);
    assert_eq!(packets.len() as u64, tx["packets"].as_u64().unwrap());
    let mut asm = Assembler::new(AssembleConfig::default());
    let mut heaps = Vec::new();
    for p in &packets {
        asm.push(0, p).unwrap();
        while let Some(h) = asm.poll_heap() {
            heaps.push(h);
        }
    }
    assert!(asm.stats().stopped);
    assert_eq!(heaps.len(), 5);
    for (k, h) in heaps.iter().enumerate() {
        assert_eq!(h.cnt, k as u64 + 1);
        let items = h.items();
        let index = items.iter().find(|i| i.id == 0x1000).unwrap();
        assert!(matches!(index.value, ItemValue::Immediate(v) if v == k as u64));
        let data = items.iter().find(|i| i.id == 0x1001).unwrap();
        let ItemValue::Bytes(b) = data.value else {
            panic!("0x1001 is addressed")
        };
        assert_eq!(b.len(), 10240);
        assert!(b.iter().enumerate().all(|(i, &x)| x == (i + k) as u8));
        assert_eq!(h.descriptors().len(), if k == 0 { 2 } else { 0 });
    }
}

#[cfg(feature = "dpdk")]
#[test]
fn telescope_ingest_through_dpdk_net_ring() {
    // Its own process: the EAL starts once per process.
    let dir = tempfile::tempdir().unwrap();
    let text = pipeline("telescope-ingest-dpdk.toml")
        .replace("lcores = \"0-1\"", "lcores = \"0-1\"\npin = false")
        .replace("timestamps = 1024", "timestamps = 256")
        .replace("idle_timeout = \"500ms\"", "idle_timeout = \"20s\"");
    let file = util::write(dir.path(), "ingest-dpdk.toml", &text);
    let r = util::run_json(&["run", "-q"], &file);
    assert_eq!(r["stopped_by"], "finished", "{r}");
    let (tx, rx, check) = (
        &r["stages"]["fsim"]["detail"],
        &r["stages"]["recv"]["detail"],
        &r["stages"]["check"]["detail"],
    );
    assert_eq!(tx["packets"], 1024 * 16 + 1);
    assert_eq!(rx["packets"], 1024 * 16 + 1, "{rx}");
    assert_eq!(rx["packets_not_udp"], 0);
    assert_eq!(rx["heaps_complete"], 1024, "{rx}");
    assert_eq!(rx["fraction_present"], 1.0);
    assert_eq!(check["wrong_bytes"], 0);
    assert_eq!(check["check"]["heaps_checked"], 1024);
    let port = &r["ports"]["loop"];
    assert_eq!(port["detail"]["copied_in"], 0, "built in mbufs: {port}");
    assert_eq!(port["detail"]["mbufs_in_use"], 0, "{port}");
}

#[test]
fn open_ended_sender_ends_with_whole_heaps_and_end_of_stream_when_stopped() {
    // No count: the sender runs until the pipeline stops, completes the heap
    // under way, then sends the end-of-stream heap; nothing is left incomplete.
    let text = small(0, 4, "mode = \"check\"").replace("timestamps = 256\n", "");
    let r = util::run_text("open.toml", &text, Duration::from_millis(300));
    assert_eq!(r.stopped_by, Some(StopReason::Duration));
    let (tx, rx, check) = (detail(&r, "fsim"), detail(&r, "recv"), detail(&r, "check"));
    let heaps = tx["heaps"].as_u64().unwrap();
    assert!(heaps > 0, "{tx}");
    assert_eq!(tx["packets"], heaps * 4 + 1, "{tx}");
    assert_eq!(tx["end_of_stream_sent"], true);
    assert_eq!(rx["ended_by"], "end_of_stream", "{rx}");
    assert_eq!(rx["heaps_complete"], heaps, "{rx}");
    assert_eq!(rx["heaps_incomplete"], 0, "{rx}");
    assert_eq!(check["present"], heaps);
    assert_eq!(check["wrong_bytes"], 0);
}

#[test]
fn plan_describes_the_spead_stages_and_draws_the_chunk_link() {
    let plan = linerate::pipeline::load_str(
        Path::new("telescope-ingest-udp.toml"),
        &pipeline("telescope-ingest-udp.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = plan.to_string();
    assert!(text.contains("spead_send, F-engine simulator, 4 antennas, channels 0..16, 16384-byte heaps in 1120-byte packets, 1024 timestamps, SPEAD-64-48"), "{text}");
    assert!(text.contains("window 4 of 8 chunks"), "{text}");
    assert!(
        text.contains("chunk_sink, checks the chunks of `recv`"),
        "{text}"
    );
    assert!(plan
        .dot()
        .contains("\"recv\" -> \"check\" [label=\"chunks\", style=bold];"));
}

#[test]
fn plain_copy_knob_places_the_same_bytes_and_a_bad_mode_is_refused() {
    // `copy = "plain"` (memcpy instead of non-temporal stores): lossless, every
    // byte checked, as with the default.
    let base = pipeline("telescope-ingest.toml").replace("timestamps = 1024", "timestamps = 256");
    let text = base.replace(
        "kind = \"spead_recv\"\n",
        "kind = \"spead_recv\"\ncopy = \"plain\"\n",
    );
    assert!(text.contains("copy = \"plain\""));
    let r = util::run_text("ingest-plain.toml", &text, Duration::from_secs(120));
    assert_lossless(&r, 1024, 16, 16384);
    // An unknown mode is a check-time error naming the key.
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(
        dir.path(),
        "bad-copy.toml",
        &base.replace(
            "kind = \"spead_recv\"\n",
            "kind = \"spead_recv\"\ncopy = \"fast\"\n",
        ),
    );
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown copy mode `fast`"), "{stderr}");
}

/// The replicated receiver's detail: the receive group, reported by its
/// first replica.
fn group_detail(r: &RunReport, stage: &str) -> Value {
    r.stages[stage].replicas[0]
        .detail
        .as_ref()
        .map_or(Value::Null, |d| d["receive_group"].clone())
}

#[test]
fn telescope_ingest_group_as_shipped_counts_as_one_receiver() {
    let r = util::run_text(
        "telescope-ingest-group.toml",
        &pipeline("telescope-ingest-group.toml"),
        Duration::from_secs(120),
    );
    assert_eq!(r.stopped_by, Some(StopReason::Finished), "{r:?}");
    let recv = &r.stages["recv"];
    assert_eq!(recv.replicas.len(), 2);
    // 4096 heaps of 16 packets, plus an end-of-stream packet per member.
    assert_eq!(recv.packets_in, 4096 * 16 + 2);
    for m in &recv.replicas {
        let d = m.detail.as_ref().unwrap();
        // Each member took its sender replica's two antennas.
        assert_eq!(d["heaps_complete"], 2048, "{d}");
        assert_eq!(d["ended_by"], "end_of_stream", "{d}");
    }
    let g = group_detail(&r, "recv");
    assert_eq!(g["members"], 2, "{g}");
    assert_eq!(g["heaps_complete"], 4096, "{g}");
    assert_eq!(g["heaps_incomplete"], 0, "{g}");
    assert_eq!(g["chunks"], 32, "{g}");
    assert_eq!(g["present"], 4096, "{g}");
    assert_eq!(g["stream"]["packets_too_old"], 0, "{g}");
    let check = detail(&r, "check");
    assert_eq!(check["chunks"], 32, "{check}");
    assert_eq!(check["present"], 4096, "{check}");
    assert_eq!(check["wrong_bytes"], 0, "{check}");
    assert_eq!(check["check"]["heaps_checked"], 4096, "{check}");
}

/// A small ingest into chunk files: `replicas` sender replicas on the mem
/// port's queues, the receiver replicated as well (a receive group) or not.
fn ingest(dir: &Path, replicas: bool, eviction: &str) -> String {
    let geo = "n_ants = 4\nn_channels_total = 64\nn_channels_per_stream = 4\nn_samples_per_channel = 256\nn_pols = 2\npacket_payload = 1024\nflavour = \"64-40\"\n";
    let (queues, send, recv) = if replicas {
        (2, "lcores = \"0-1\"", "lcores = \"0-1\"")
    } else {
        (1, "lcore = 0", "lcore = 0")
    };
    format!(
        r#"
[pipeline]
lcores = "0-1"
pin = false
[port.wire]
kind = "mem"
ring = 32768
queues = {queues}
[stage.fsim]
kind = "spead_send"
{send}
tx = "wire"
timestamps = 96
{geo}
[stage.recv]
kind = "spead_recv"
{recv}
rx = "wire"
heaps_per_fengine_per_chunk = 4
max_chunks = 2
n_chunks = 8
eviction = "{eviction}"
{geo}
[stage.out]
kind = "chunk_sink"
lcore = 1
from = "recv"
mode = "write"
dir = "{}"
"#,
        dir.display()
    )
}

/// Every file in `dir`, by name.
fn files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_receive_group_in_a_pipeline_writes_the_chunks_a_single_receiver_writes() {
    // The same heaps, sent by one simulator into one receiver, and by two
    // simulator replicas (half the antennas each) into a receive group of two
    // members on two lcores: the same chunk files, byte for byte (data and
    // the present maps in the sidecars), and the same counts.
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    let a = util::run_text(
        "single.toml",
        &ingest(&one, false, "lossless"),
        Duration::from_secs(120),
    );
    let b = util::run_text(
        "group.toml",
        &ingest(&two, true, "lossless"),
        Duration::from_secs(120),
    );
    assert_eq!(a.stopped_by, Some(StopReason::Finished), "{a:?}");
    assert_eq!(b.stopped_by, Some(StopReason::Finished), "{b:?}");
    let (fa, fb) = (files(&one), files(&two));
    // 96 timestamps / 4 per chunk = 24 chunks, two files each.
    assert_eq!(fa.len(), 48);
    assert_eq!(fa.keys().collect::<Vec<_>>(), fb.keys().collect::<Vec<_>>());
    for (name, data) in &fa {
        assert!(data == &fb[name], "{name} differs");
    }
    let single = detail(&a, "recv");
    let group = group_detail(&b, "recv");
    for k in [
        "heaps_complete",
        "chunks",
        "present",
        "present_slots",
        "packets_accepted",
        "bytes",
    ] {
        assert_eq!(
            single["stream"][k], group["stream"][k],
            "{k}: {single} vs {group}"
        );
    }
    assert_eq!(detail(&a, "out")["chunks"], detail(&b, "out")["chunks"]);
}

#[test]
fn a_receive_group_on_so_reuseport_sockets_builds_every_chunk() {
    // Two simulator replicas send from two source ports (a sending udp port
    // without `bind`: one ephemeral port per socket); the receiver's three
    // SO_REUSEPORT sockets are a group of three members, and the kernel's
    // hash decides which member gets which sender (at least one gets none,
    // and must not hold the lossless group: it ends by its idle timeout).
    let port = util::free_udp_port();
    let geo = "n_ants = 4\nn_channels_total = 64\nn_channels_per_stream = 4\nn_samples_per_channel = 256\nn_pols = 2\npacket_payload = 1024\n";
    let text = format!(
        r#"
[pipeline]
lcores = "0-2"
pin = false
[port.out]
kind = "udp"
connect = "127.0.0.1:{port}"
queues = 2
[port.in]
kind = "udp"
bind = "127.0.0.1:{port}"
queues = 3
rcvbuf = "16 MiB"
[stage.fsim]
kind = "spead_send"
lcores = "0-1"
tx = "out"
timestamps = 64
rate = "200 Mbps"
{geo}
[stage.recv]
kind = "spead_recv"
lcores = "0-2"
rx = "in"
heaps_per_fengine_per_chunk = 4
max_chunks = 2
n_chunks = 8
eviction = "lossless"
idle_timeout = "300ms"
{geo}
[stage.check]
kind = "chunk_sink"
lcore = 2
from = "recv"
mode = "check"
"#
    );
    let r = util::run_text("udp-group.toml", &text, Duration::from_secs(120));
    assert_eq!(r.stopped_by, Some(StopReason::Finished), "{r:?}");
    let recv = &r.stages["recv"];
    assert_eq!(recv.replicas.len(), 3);
    // The kernel may drop datagrams on a loaded machine: whatever arrived is
    // counted once, by the member that got it, and every chunk is whole or
    // counted absent, never wrong.
    let g = group_detail(&r, "recv");
    let sent = 64 * 4;
    let got = g["heaps_complete"].as_u64().unwrap();
    assert!(got <= sent, "{g}");
    assert_eq!(g["chunks"], 16, "{g}");
    assert_eq!(g["present"], got, "{g}");
    assert_eq!(g["present_slots"], sent, "{g}");
    assert_eq!(g["stream"]["packets_duplicate"], 0, "{g}");
    let check = detail(&r, "check");
    assert_eq!(check["chunks"], 16, "{check}");
    assert_eq!(check["present"], got, "{check}");
    assert_eq!(check["wrong_bytes"], 0, "{check}");
    let per: Vec<u64> = recv.replicas.iter().map(|m| m.packets_in).collect();
    assert_eq!(per.iter().sum::<u64>(), recv.packets_in);
    assert!(per.contains(&0), "two senders over three sockets: {per:?}");
}

#[test]
fn heaps_mode_assembles_generic_heaps_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("heaps");
    let text = format!(
        r#"
[pipeline]
lcores = "0"
pin = false
[port.wire]
kind = "mem"
[stage.tx]
kind = "spead_send"
tx = "wire"
source = "heaps"
flavour = "64-40"
heaps = 5
heap_size = "10 KiB"
packet_size = 1000
[stage.recv]
kind = "spead_recv"
rx = "wire"
mode = "heaps"
plot = "{}"
"#,
        plot.display()
    );
    let r = util::run_text("heaps-mode.toml", &text, Duration::from_secs(60));
    assert_eq!(r.stopped_by, Some(StopReason::Finished), "{r:?}");
    let rx = detail(&r, "recv");
    // Any flavour: the 64-40 heaps are assembled although the stage's
    // (unused) flavour is 64-48; 11 packets each, and the end of stream.
    assert_eq!(rx["mode"], "heaps", "{rx}");
    assert_eq!(rx["packets"], 5 * 11 + 1, "{rx}");
    assert_eq!(rx["heaps_complete"], 5, "{rx}");
    assert_eq!(rx["heaps_evicted"], 0, "{rx}");
    assert_eq!(rx["packets_duplicate"], 0, "{rx}");
    assert_eq!(rx["ended_by"], "end_of_stream", "{rx}");
    assert_eq!(rx["stream"]["stopped"], true, "{rx}");
    assert!(
        rx["stream"]["bytes"].as_u64().unwrap() >= 5 * 10 * 1024,
        "{rx}"
    );
    let svg = std::fs::read_to_string(plot.with_extension("svg")).unwrap();
    assert!(svg.contains("fraction heaps complete") && svg.contains("Gb/s"));
    // A chunk sink cannot take a heaps-mode receiver's chunks: it has none.
    let sink = text.replace("plot = ", "# plot = ")
        + "[stage.sink]\nkind = \"chunk_sink\"\nfrom = \"recv\"\n";
    let plan = linerate::pipeline::load_str(Path::new("h.toml"), &sink).unwrap();
    let e = linerate::pipeline::build::build(&plan)
        .err()
        .expect("a heaps-mode receiver has no chunks");
    assert!(e.to_string().contains("mode = \"heaps\""), "{e}");
}
