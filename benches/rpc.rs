//! RPC benchmark driver (`harness = false`).
//!
//! * `rpc serve ...` / `rpc bench ...`: the same arguments as `linerate rpc`, so
//!   scripts can use this binary before the subcommand is wired into `linerate`.
//! * Run by `cargo bench --bench rpc` (no subcommand): starts a server child pinned
//!   to core 0, benches from core 1 at depths 1 and 256 with 32-byte messages,
//!   and prints the report next to the ping-pong baseline.

use clap::Parser;
use linerate::rpc::cli::{self, RpcArgs};
use std::process::Command;

#[derive(Debug, Parser)]
#[command(name = "rpc")]
struct Top {
    #[command(flatten)]
    rpc: RpcArgs,
}

/// Software cost alone: both endpoints in this thread over the in-memory link,
/// one call, poll, reply, poll, poll per round trip (no cache-line transfers).
fn local(ring: u64, depth: u32, rounds: u32) {
    use linerate::rpc::transport::mem::MemLink;
    use linerate::rpc::{Config, Endpoint, Handler, Request};
    struct S(Vec<Request>, u64);
    impl Handler<u64> for S {
        fn on_request(&mut self, r: Request, _: &[u8]) {
            self.0.push(r);
        }
        fn on_response(&mut self, _: u32, _: u64, _: &[u8]) {
            self.1 += 1;
        }
    }
    let c = Config::new(ring);
    let mut a: Endpoint<u64> = Endpoint::new(c, c.local_info()).unwrap();
    let mut b: Endpoint<u64> = Endpoint::new(c, c.local_info()).unwrap();
    let mut link = MemLink::new(c.ring_size as usize);
    let (mut ha, mut hb) = (
        S(Vec::with_capacity(4096), 0),
        S(Vec::with_capacity(4096), 0),
    );
    let msg = [0u8; 32];
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        while a.pending_calls() < depth {
            if a.call(&msg, 32, 0).is_err() {
                break;
            }
        }
        a.poll(&mut link.side(0), &mut ha).unwrap();
        b.poll(&mut link.side(1), &mut hb).unwrap();
        for r in hb.0.drain(..) {
            b.reply(&r, &msg).unwrap();
        }
        b.poll(&mut link.side(1), &mut hb).unwrap();
        a.poll(&mut link.side(0), &mut ha).unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64;
    println!(
        "local (one thread, both sides): ring {ring}: depth {depth}: {:.1} ns per RPC, {:.1} M RPC/s",
        ns / ha.1 as f64,
        ha.1 as f64 / ns * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "local") {
        for ring in [1 << 16, 1 << 20] {
            local(ring, 1, 2_000_000);
            local(ring, 256, 20_000);
        }
        return;
    }
    if args.iter().skip(1).any(|a| a == "serve" || a == "bench") {
        let top = Top::parse_from(args.iter().filter(|a| a.as_str() != "--bench"));
        std::process::exit(cli::run(&top.rpc));
    }
    let name = format!("linerate-rpc-bench-{}", std::process::id());
    let shm = linerate::rpc::transport::shm::default_path(&name);
    let shm = shm.display().to_string();
    let exe = std::env::current_exe().expect("current_exe");
    let mut server = Command::new(exe)
        .args(["serve", "--shm", &shm, "--core", "0"])
        .spawn()
        .expect("spawn server");
    let top = Top::parse_from([
        "rpc",
        "bench",
        "--shm",
        &shm,
        "--core",
        "1",
        "--depth",
        "1,256",
        "--duration",
        "2s",
    ]);
    let code = cli::run(&top.rpc);
    let ok = server.wait().map(|s| s.success()).unwrap_or(false);
    std::process::exit(if code == 0 && ok { 0 } else { 1 });
}
