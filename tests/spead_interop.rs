//! Interoperability with spead2 4.5 (the peer and compatibility reference).
//!
//! spead2 runs from a Python venv: `$LINERATE_VENV`, or `<crate>/.venv`. When it is
//! absent each test prints that it was skipped and passes, unless
//! `LINERATE_REQUIRE_PEERS=1`, which makes the absence a failure.
//!
//! - spead2 sends heaps (SPEAD-64-40 and 64-48, immediate and addressed items,
//!   descriptors, several packets per heap) over UDP loopback; linerate's
//!   assembler receives identical items, payloads and descriptors.
//! - linerate sends; spead2 receives identical items and descriptors.
//! - The F-engine simulator's packets (with losses and a too-old heap) go through
//!   spead2's `ChunkRingStream` with a C place callback (compiled here with `cc`,
//!   loaded through ctypes) and through linerate's chunk stream: same chunks, same
//!   `present` maps, same bytes.

use std::io::{BufRead, BufReader, Read};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as StdInstant};

use linerate::spead::assemble::{AssembleConfig, Assembler, Heap};
use linerate::spead::chunk::{Chunk, ChunkStream, KatgpucbfPlace, Push};
use linerate::spead::fsim::{Fsim, FsimConfig};
use linerate::spead::send::{Pacer, Packetizer, SendHeap};
use linerate::spead::wire::{Descriptor, Flavour, ItemValue};
use linerate::time::Instant;

mod util;

fn venv_python() -> Option<PathBuf> {
    let venv = std::env::var_os("LINERATE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let py = venv.join("bin").join("python");
    let ok = Command::new(&py)
        .args(["-c", "import spead2, numpy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(py)
}

/// The venv's python with spead2, or `None` (skip) when absent and not required.
fn peer(test: &str) -> Option<PathBuf> {
    match venv_python() {
        Some(p) => Some(p),
        None if std::env::var("LINERATE_REQUIRE_PEERS").as_deref() == Ok("1") => panic!(
            "{test}: spead2 is required (LINERATE_REQUIRE_PEERS=1) but no venv with spead2 \
             and numpy was found at $LINERATE_VENV or <crate>/.venv; \
             create it with: python3 -m venv .venv && .venv/bin/pip install spead2==4.5.* numpy"
        ),
        None => {
            eprintln!("{test}: skipped: spead2 not found ($LINERATE_VENV or <crate>/.venv)");
            None
        }
    }
}

fn write_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// How long a peer process may take before it is killed and the test fails.
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Waits for `child` (reading its output meanwhile, from `stdout` if the caller
/// already took it), killing it and failing if it outlives [`PEER_TIMEOUT`];
/// returns what it printed.
fn wait_ok_from(mut child: Child, stdout: Option<Box<dyn Read + Send>>, what: &str) -> String {
    let out = stdout
        .or_else(|| {
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>)
        })
        .map(read_all);
    let err = child.stderr.take().map(read_all);
    let deadline = StdInstant::now() + PEER_TIMEOUT;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if StdInstant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out.map(|t| t.join().unwrap()).unwrap_or_default();
    let err = err.map(|t| t.join().unwrap()).unwrap_or_default();
    match status {
        Some(st) => assert!(st.success(), "{what} failed: {err}"),
        None => panic!("{what} did not finish within {PEER_TIMEOUT:?}, killed; stderr: {err}"),
    }
    out
}

fn wait_ok(child: Child, what: &str) -> String {
    wait_ok_from(child, None, what)
}

/// Heap k's addressed bytes, in every direction.
fn data_of(k: u64) -> Vec<u8> {
    (0..(1000 + 37 * k))
        .map(|i| ((k * 7 + i) % 256) as u8)
        .collect()
}

const N_HEAPS: u64 = 12;

const SPEAD2_SEND: &str = r#"
import os, sys, numpy as np, spead2, spead2.send
port, bits, max_packet, n = (int(x) for x in sys.argv[1:5])
flavour = spead2.Flavour(4, 64, bits, 0)
config = spead2.send.StreamConfig(max_packet_size=max_packet, rate=20e6)
stream = spead2.send.UdpStream(spead2.ThreadPool(), [("127.0.0.1", port)], config)
ig = spead2.send.ItemGroup(flavour=flavour)
ig.add_item(0x1000, "imm", "an immediate", shape=(), format=[("u", bits)])
ig.add_item(0x1001, "data", "addressed bytes", shape=(None,), format=[("u", 8)])
for k in range(n):
    ig["imm"].value = 1000 + k
    ig["data"].value = np.array([(k * 7 + i) % 256 for i in range(1000 + 37 * k)], np.uint8)
    stream.send_heap(ig.get_heap())
stream.send_heap(ig.get_end())
sys.stdout.flush()
os._exit(0)
"#;

fn check_received_heap(h: &Heap, k: u64) {
    let items = h.items();
    let imm = items.iter().find(|i| i.id == 0x1000).expect("item 0x1000");
    assert_eq!(imm.value, ItemValue::Immediate(1000 + k), "heap {k}");
    let data = items.iter().find(|i| i.id == 0x1001).expect("item 0x1001");
    assert_eq!(data.value, ItemValue::Bytes(&data_of(k)), "heap {k}");
}

#[test]
fn spead2_sends_linerate_receives() {
    let Some(py) = peer("spead2_sends_linerate_receives") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(dir.path(), "send.py", SPEAD2_SEND);
    for (flavour, bits) in [(Flavour::SPEAD_64_40, 40), (Flavour::SPEAD_64_48, 48)] {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let child = Command::new(&py)
            .env("OPENBLAS_NUM_THREADS", "1")
            .arg(&script)
            .args([
                port.to_string(),
                bits.to_string(),
                "512".into(),
                N_HEAPS.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut asm = Assembler::new(AssembleConfig::default());
        let mut heaps = Vec::new();
        let mut buf = vec![0u8; 65536];
        let deadline = StdInstant::now() + Duration::from_secs(60);
        let mut packets = 0;
        while !asm.stats().stopped && StdInstant::now() < deadline {
            if let Ok(n) = sock.recv(&mut buf) {
                packets += 1;
                asm.push(0, &buf[..n]).unwrap();
                while let Some(h) = asm.poll_heap() {
                    heaps.push(h);
                }
            }
        }
        wait_ok(child, "spead2 sender");
        assert!(asm.stats().stopped, "no end-of-stream heap from spead2");
        assert!(packets > 3 * N_HEAPS, "heaps should span several packets");
        assert_eq!(heaps.len() as u64, N_HEAPS, "stats {:?}", asm.stats());
        for (k, h) in heaps.iter().enumerate() {
            assert_eq!(h.flavour, flavour);
            check_received_heap(h, k as u64);
        }
        let d = heaps[0].descriptors();
        assert_eq!(d.len(), 2);
        let imm = d.iter().find(|d| d.id == 0x1000).unwrap();
        assert_eq!(imm.name, "imm");
        assert_eq!(imm.description, "an immediate");
        assert_eq!(imm.format, vec![(b'u', bits)]);
        assert!(imm.shape.is_empty());
        let data = d.iter().find(|d| d.id == 0x1001).unwrap();
        assert_eq!(data.name, "data");
        assert_eq!(data.shape, vec![None]);
        assert_eq!(data.format, vec![(b'u', 8)]);
        let s = asm.stats();
        assert_eq!(
            (s.packets_duplicate, s.heaps_evicted, s.packets_malformed),
            (0, 0, 0)
        );
    }
}

const SPEAD2_RECV: &str = r#"
import os, sys, json, spead2, spead2.recv
port = int(sys.argv[1])
stream = spead2.recv.Stream(spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=4))
stream.add_udp_reader(port, bind_hostname="127.0.0.1", buffer_size=4 << 20)
print("ready", flush=True)
out = []
for heap in stream:
    items = []
    for it in heap.get_items():
        items.append({"id": it.id, "immediate": bool(it.is_immediate),
                      "value": it.immediate_value if it.is_immediate else None,
                      "bytes": bytes(it).hex()})
    descs = [{"id": d.id, "name": d.name.decode(), "description": d.description.decode(),
              "shape": [(-1 if s is None else s) for s in d.shape],
              "format": [[c, b] for c, b in d.format]} for d in heap.get_descriptors()]
    out.append({"cnt": heap.cnt, "items": items, "descriptors": descs})
print(json.dumps(out), flush=True)
os._exit(0)
"#;

#[test]
fn linerate_sends_spead2_receives() {
    let Some(py) = peer("linerate_sends_spead2_receives") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(dir.path(), "recv.py", SPEAD2_RECV);
    for (flavour, bits) in [(Flavour::SPEAD_64_40, 40u64), (Flavour::SPEAD_64_48, 48)] {
        let port = util::free_udp_port();
        let mut child = Command::new(&py)
            .env("OPENBLAS_NUM_THREADS", "1")
            .arg(&script)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "spead2 receiver did not start");

        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(("127.0.0.1", port)).unwrap();
        let descs = [
            Descriptor {
                id: 0x1000,
                name: "imm".into(),
                description: "an immediate".into(),
                shape: vec![],
                format: vec![(b'u', bits)],
                dtype: String::new(),
            },
            Descriptor {
                id: 0x1001,
                name: "data".into(),
                description: "addressed bytes".into(),
                shape: vec![None],
                format: vec![(b'u', 8)],
                dtype: String::new(),
            },
        ];
        let mut heaps = Vec::new();
        for k in 0..N_HEAPS {
            let mut h = SendHeap::new(k + 1);
            if k == 0 {
                for d in &descs {
                    h = h.descriptor(flavour, d).unwrap();
                }
            }
            heaps.push(h.immediate(0x1000, 1000 + k).bytes(0x1001, data_of(k)));
        }
        heaps.push(SendHeap::end_of_stream(N_HEAPS + 1));
        let start = StdInstant::now();
        let mut pacer = Pacer::new(100e6, Instant::ZERO, 0);
        let mut buf = vec![0u8; 400];
        let mut packets = 0;
        for h in &heaps {
            let (ptrs, payload) = h.layout(flavour).unwrap();
            let mut pk = Packetizer::new(flavour, h.cnt, &ptrs, &payload, 400).unwrap();
            while let Some(r) = pk.next_packet(&mut buf) {
                let n = r.unwrap();
                loop {
                    let now = Instant::from_nanos(start.elapsed().as_nanos() as u64);
                    match pacer.poll(now, n) {
                        Ok(()) => break,
                        Err(due) => std::thread::sleep(Duration::from_nanos(
                            due.as_nanos().saturating_sub(now.as_nanos()),
                        )),
                    }
                }
                sock.send(&buf[..n]).unwrap();
                packets += 1;
            }
        }
        assert!(packets > 3 * N_HEAPS);
        let rest = wait_ok_from(child, Some(Box::new(out)), "spead2 receiver");
        let got: serde_json::Value = serde_json::from_str(rest.trim()).unwrap();
        let got = got.as_array().unwrap();
        assert_eq!(got.len() as u64, N_HEAPS, "heaps spead2 received: {rest}");
        for (k, h) in got.iter().enumerate() {
            let k = k as u64;
            assert_eq!(h["cnt"], k + 1);
            let items = h["items"].as_array().unwrap();
            let imm = items.iter().find(|i| i["id"] == 0x1000).unwrap();
            assert_eq!(imm["immediate"], true);
            assert_eq!(imm["value"], 1000 + k);
            let data = items.iter().find(|i| i["id"] == 0x1001).unwrap();
            assert_eq!(data["immediate"], false);
            let hex: String = data_of(k).iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(data["bytes"], hex.as_str());
            let d = h["descriptors"].as_array().unwrap();
            if k == 0 {
                assert_eq!(d.len(), 2);
                let d0 = d.iter().find(|d| d["id"] == 0x1000).unwrap();
                assert_eq!(d0["name"], "imm");
                assert_eq!(d0["description"], "an immediate");
                assert_eq!(d0["format"], serde_json::json!([["u", bits]]));
                let d1 = d.iter().find(|d| d["id"] == 0x1001).unwrap();
                assert_eq!(d1["shape"], serde_json::json!([-1]));
            } else {
                assert!(d.is_empty());
            }
        }
    }
}

const PLACE_C: &str = r#"
#include <stddef.h>
#include <stdint.h>
/* The leading fields of spead2::recv::chunk_place_data (spead2 4.x). */
struct place_data {
    const uint8_t *packet;
    size_t packet_size;
    const int64_t *items;
    int64_t chunk_id;
    size_t heap_index;
    size_t heap_offset;
    uint64_t *batch_stats;
};
/* katgpucbf's placement. user: n_ants, heap_bytes, heaps_per_fengine_per_chunk, timestamp_step. */
void place(void *data, size_t size, void *user)
{
    struct place_data *d = (struct place_data *) data;
    const int64_t *p = (const int64_t *) user;
    int64_t ts = d->items[0], feng = d->items[1], len = d->items[2];
    (void) size;
    if (ts < 0 || feng < 0 || feng >= p[0] || len != p[1] || ts % p[3] != 0)
        return;
    int64_t heap_no = ts / p[3];
    d->chunk_id = heap_no / p[2];
    d->heap_index = (size_t) ((heap_no % p[2]) * p[0] + feng);
    d->heap_offset = d->heap_index * (size_t) p[1];
}
"#;

const SPEAD2_CHUNKS: &str = r#"
import os, sys, json, ctypes, struct, numpy as np, spead2, spead2.recv
so, packets, out, n_ants, heap_bytes, hpfc, step, max_chunks, n_chunks = sys.argv[1:10]
n_ants, heap_bytes, hpfc, step, max_chunks, n_chunks = (int(x) for x in (n_ants, heap_bytes, hpfc, step, max_chunks, n_chunks))
lib = ctypes.CDLL(so)
params = (ctypes.c_int64 * 4)(n_ants, heap_bytes, hpfc, step)
name = b"void (void *, size_t, void *)"
new = ctypes.pythonapi.PyCapsule_New
new.restype = ctypes.py_object
new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
set_ctx = ctypes.pythonapi.PyCapsule_SetContext
set_ctx.argtypes = [ctypes.py_object, ctypes.c_void_p]
cap = new(ctypes.cast(lib.place, ctypes.c_void_p).value, name, None)
set_ctx(cap, ctypes.cast(params, ctypes.c_void_p))
place = (cap, params, name, lib)
heaps_per_chunk = hpfc * n_ants
chunk_config = spead2.recv.ChunkStreamConfig(
    items=[0x1600, 0x4101, spead2.HEAP_LENGTH_ID], max_chunks=max_chunks, place=place)
data_ring = spead2.recv.ChunkRingbuffer(n_chunks)
free_ring = spead2.recv.ChunkRingbuffer(n_chunks)
stream = spead2.recv.ChunkRingStream(
    spead2.ThreadPool(), spead2.recv.StreamConfig(max_heaps=2 * n_ants), chunk_config, data_ring, free_ring)
for _ in range(n_chunks):
    stream.add_free_chunk(spead2.recv.Chunk(
        present=np.zeros(heaps_per_chunk, np.uint8), data=np.zeros(heaps_per_chunk * heap_bytes, np.uint8)))
buf = open(packets, "rb").read()
stream.add_buffer_reader(buf)
with open(out, "wb") as f:
    for chunk in data_ring:
        present = bytes(np.asarray(chunk.present))
        data = bytes(np.asarray(chunk.data))
        f.write(struct.pack("<qI", chunk.chunk_id, len(present)) + present)
        f.write(struct.pack("<Q", len(data)) + data)
        stream.add_free_chunk(chunk)
# The data ring ends when the reader does, but the worker may still be
# folding its last batch into the counters: stop the stream before reading them.
stream.stop()
stats = stream.stats
print(json.dumps({k: stats[k] for k in ["heaps", "too_old_heaps", "rejected_heaps", "incomplete_heaps_evicted", "incomplete_heaps_flushed", "packets"]}), flush=True)
os._exit(0)
"#;

fn read_spead2_chunks(path: &Path) -> Vec<Chunk> {
    let b = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut out = Vec::new();
    let take = |at: &mut usize, n: usize| {
        let s = &b[*at..*at + n];
        *at += n;
        s
    };
    while at < b.len() {
        let id = i64::from_le_bytes(take(&mut at, 8).try_into().unwrap());
        let np = u32::from_le_bytes(take(&mut at, 4).try_into().unwrap()) as usize;
        let present = take(&mut at, np).to_vec();
        let nd = u64::from_le_bytes(take(&mut at, 8).try_into().unwrap()) as usize;
        let data = take(&mut at, nd).to_vec();
        out.push(Chunk {
            chunk_id: id,
            data: data.into(),
            present,
        });
    }
    out
}

#[test]
fn fsim_chunks_match_spead2_chunk_ring_stream() {
    let Some(py) = peer("fsim_chunks_match_spead2_chunk_ring_stream") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let c_src = write_script(dir.path(), "place.c", PLACE_C);
    let so = dir.path().join("place.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(&cc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c_src)
        .status()
        .expect("a C compiler (cc) to build the place callback");
    assert!(st.success(), "compiling the place callback failed");

    let hpfc = 2u64;
    let mut cfg = FsimConfig {
        n_ants: 4,
        n_channels_total: 256,
        n_channels_per_stream: 8,
        n_samples_per_channel: 64,
        packet_payload: 512,
        ..FsimConfig::default()
    };
    // Start five chunks in, so the window's first jump is exercised too.
    cfg.first_timestamp = 5 * hpfc * cfg.timestamp_step();
    let per_heap = cfg.packets_per_heap();
    assert_eq!(per_heap, 4);
    let (buf, ends) = Fsim::new(cfg.clone()).unwrap().packets_buffer(12).unwrap();
    // Lose a first packet, a middle and a last packet of three heaps.
    let lost = [0usize, 4 * 5 + 2, 4 * 17 + 3];
    let mut packets = Vec::new();
    let mut start = 0;
    for (i, &e) in ends.iter().enumerate() {
        if !lost.contains(&i) {
            packets.extend_from_slice(&buf[start..e]);
        }
        start = e;
    }
    // A too-old heap at the end: antenna 1's first heap again.
    packets.extend_from_slice(&buf[ends[per_heap - 1]..ends[2 * per_heap - 1]]);
    let pkt_path = dir.path().join("packets.bin");
    std::fs::write(&pkt_path, &packets).unwrap();

    let place = KatgpucbfPlace::for_fsim(&cfg, hpfc);
    let (max_chunks, n_chunks) = (2usize, 4usize);
    let script = write_script(dir.path(), "chunks.py", SPEAD2_CHUNKS);
    let out_path = dir.path().join("chunks.bin");
    let child = Command::new(&py)
        .env("OPENBLAS_NUM_THREADS", "1")
        .arg(&script)
        .arg(&so)
        .arg(&pkt_path)
        .arg(&out_path)
        .args(
            [
                place.n_ants,
                place.heap_bytes,
                hpfc,
                place.timestamp_step,
                max_chunks as u64,
                n_chunks as u64,
            ]
            .map(|x| x.to_string()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stats_text = wait_ok(child, "spead2 ChunkRingStream");
    let theirs = read_spead2_chunks(&out_path);
    let their_stats: serde_json::Value = serde_json::from_str(stats_text.trim()).unwrap();

    let mut s = ChunkStream::new(place.chunk_config(max_chunks, n_chunks), place.clone());
    let mut ours = Vec::new();
    let mut at = 0;
    while at < packets.len() {
        let (used, last) = s.push_buffer(&packets[at..]);
        at += used;
        while let Some(c) = s.poll_chunk() {
            ours.push(c.clone());
            s.add_free_chunk(c);
        }
        assert_ne!(last, Push::Stopped);
    }
    s.flush();
    while let Some(c) = s.poll_chunk() {
        ours.push(c);
    }

    let ids = |v: &[Chunk]| v.iter().map(|c| c.chunk_id).collect::<Vec<_>>();
    assert_eq!(
        ids(&ours),
        ids(&theirs),
        "chunk ids; spead2 stats {their_stats}"
    );
    assert_eq!(ids(&ours), (4..=10).collect::<Vec<i64>>());
    let hb = place.heap_bytes as usize;
    let mut present = 0;
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!(a.present, b.present, "present map of chunk {}", a.chunk_id);
        for (i, &p) in a.present.iter().enumerate() {
            if p != 0 {
                present += 1;
                assert!(
                    a.data[i * hb..(i + 1) * hb] == b.data[i * hb..(i + 1) * hb],
                    "heap {i} of chunk {}",
                    a.chunk_id
                );
            }
        }
    }
    assert_eq!(present, 12 * 4 - 3);
    assert_eq!(s.stats().heaps_too_old, 1);
    assert_eq!(their_stats["too_old_heaps"], 1);
    assert_eq!(s.stats().heaps_complete, 12 * 4 - 3);
    assert_eq!(
        s.stats().heaps_incomplete_flushed + s.stats().heaps_incomplete_evicted,
        3
    );
}
