//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod kernel_dut;

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use linerate::pipeline::build::build;
use linerate::runtime::run::{run, RunOptions, RunReport};

/// Something a test needs from outside is missing (`what`: what, and how to
/// get it): a failure under `LINERATE_REQUIRE_PEERS=1`, where every test must
/// run, else a printed skip. The caller then returns.
pub fn missing(what: &str) {
    assert!(
        std::env::var("LINERATE_REQUIRE_PEERS").as_deref() != Ok("1"),
        "required (LINERATE_REQUIRE_PEERS=1) but missing: {what}"
    );
    eprintln!("skipped: missing {what}");
}

/// Loads, builds and runs a pipeline given as text, for at most `limit`.
pub fn run_text(name: &str, text: &str, limit: Duration) -> RunReport {
    let plan =
        linerate::pipeline::load_str(Path::new(name), text).unwrap_or_else(|e| panic!("{e}"));
    let built = build(&plan).unwrap_or_else(|e| panic!("{e}"));
    let stop = AtomicBool::new(false);
    run(
        built,
        RunOptions {
            duration: Some(limit),
            interrupt: &stop,
            drain_timeout: Duration::from_secs(2),
            drain_quiet: linerate::runtime::run::DRAIN_QUIET,
            on_tick: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The `linerate` binary.
pub fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_linerate"))
}

/// A UDP port on loopback that was free when picked and that no other call
/// in this process returns.
///
/// Not `bind(":0")` and close: that hands out a port of the kernel's
/// ephemeral range, which the kernel may give to any other socket (a parallel
/// test's `bind(":0")`, a `connect` without `bind`) before the test's pipeline
/// binds it, and two calls in a row may even return the same port ("Address
/// already in use" once in a full run). These ports lie below the ephemeral
/// range, so the kernel never hands them out by itself; a process-wide counter
/// keeps the threads of one test binary apart and a per-process offset keeps
/// two binaries running at once mostly apart (a port found taken is skipped).
pub fn free_udp_port() -> u16 {
    free_port(|p| std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok())
}

/// As [`free_udp_port`], for a TCP listener.
pub fn free_tcp_port() -> u16 {
    free_port(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
}

fn free_port(free: impl Fn(u16) -> bool) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    // The ephemeral range starts at 32768 by default; respect a lower setting.
    let high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&lo| lo > LOW + 1_000)
        .unwrap_or(32_768)
        .min(32_768);
    let span = high - LOW;
    let offset = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let i = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (offset + i) % span) as u16;
        if free(port) {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{high}");
}

/// Writes a file in `dir` and returns its path.
pub fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Runs the binary with `args` and `--json` on `file`; returns the JSON.
pub fn run_json(args: &[&str], file: &Path) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = bin()
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// An `[eal]` section with `--no-huge` and the given extra arguments.
pub fn eal(extra: &str) -> String {
    format!("[eal]\nargs = [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"-l\", \"0\", \"--no-telemetry\", \"--log-level=lib.eal:error\", {extra}]\n")
}

/// The packets of a pcap file.
pub fn capture(path: &Path) -> Vec<Vec<u8>> {
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// A capture of `count` generated IMIX frames, recorded at a steady 5 kpps, so
/// replaying it at its recorded pace does not burst (a 1024-slot memif ring
/// then absorbs a peer that loses its core for 200 ms on a busy machine).
pub fn record(dir: &Path, count: u32) -> std::path::PathBuf {
    let cap = dir.join("gen.pcap");
    let text = format!(
        "[pipeline]\npin = false\n[port.cap]\nkind = \"pcap\"\nwrite = \"{}\"\n[stage.gen]\nkind = \"generator\"\ntx = \"cap\"\ncount = {count}\nframe = \"imix\"\nrate = \"5 kpps\"\nmax_lag = \"1s\"\n",
        cap.display()
    );
    run_text("rec.toml", &text, Duration::from_secs(30));
    cap
}

/// Checks an Ethernet/IPv4/UDP frame with an independent parser (etherparse):
/// IPv4 header checksum, UDP checksum and UDP length. Returns the IPv4 source
/// address, the UDP destination port and the UDP payload. `n` names the frame
/// in failure messages.
pub fn check_udp_v4(frame: &[u8], n: usize) -> ([u8; 4], u16, &[u8]) {
    let sliced = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
    let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else {
        panic!("frame {n} is not IPv4")
    };
    let header = ip.header().to_header();
    assert_eq!(
        header.header_checksum,
        header.calc_header_checksum(),
        "IPv4 checksum of frame {n}"
    );
    let Some(etherparse::TransportSlice::Udp(udp)) = sliced.transport else {
        panic!("frame {n} is not UDP")
    };
    let uh = udp.to_header();
    assert_eq!(
        uh.checksum,
        uh.calc_checksum_ipv4(&header, udp.payload()).unwrap(),
        "UDP checksum of frame {n}"
    );
    assert_eq!(
        usize::from(uh.length),
        udp.slice().len(),
        "UDP length of frame {n}"
    );
    (header.source, uh.destination_port, udp.payload())
}

/// Runs one of `scripts/`' summary scripts (`script`, e.g. `"rpc-summary.py"`)
/// over `dir` with `args` after it, asserts it succeeded, and returns its
/// stdout and the `summary.json` it wrote into `dir`.
pub fn summary_script(script: &str, dir: &Path, args: &[&str]) -> (String, serde_json::Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(script);
    let out = std::process::Command::new("python3")
        .arg(&path)
        .arg(dir)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        serde_json::from_str(&json).unwrap(),
    )
}

/// The page `html` as headless Chromium draws it (1300 x 1600), as RGB
/// pixels; None (a skip, said) when Chromium is not installed. The
/// screenshot and Chromium's profile go into `dir`.
pub fn screenshot(html: &Path, dir: &Path) -> Option<Vec<[u8; 3]>> {
    use std::process::{Command, Stdio};
    use std::time::Instant;
    let Some(chromium) = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    }) else {
        missing("chromium (Debian's `chromium` package, which scripts/test installs)");
        return None;
    };
    let png_path = dir.join("screenshot.png");
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1300,1600",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", png_path.display()))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish the screenshot in 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium: {status}");
    let decoder = png::Decoder::new(std::fs::File::open(&png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bpp = info.line_size / info.width as usize;
    assert!(bpp >= 3, "{info:?}");
    Some(
        buf[..info.buffer_size()]
            .chunks(bpp)
            .map(|p| [p[0], p[1], p[2]])
            .collect(),
    )
}
