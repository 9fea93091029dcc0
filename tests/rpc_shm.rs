//! Two real processes over shared memory. The test binary re-executes itself
//! (`std::env::current_exe()`) with `LINERATE_RPC_ROLE` selecting the server
//! role, so no extra binary is needed (hence `harness = false`).

use linerate::cli::rpc::{self as cli, BenchArgs, ServeArgs};
use linerate::rpc::transport::shm::ShmTransport;
use linerate::rpc::{Config, Endpoint, Handler, Request};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const ROLE: &str = "LINERATE_RPC_ROLE";
const SHM: &str = "LINERATE_RPC_SHM";
const RING: u64 = 4096;

fn response_for(req: &[u8], max: usize) -> Vec<u8> {
    let mut v: Vec<u8> = req.iter().rev().map(|b| b ^ 0x5a).collect();
    v.truncate(max);
    v
}

struct Inbox(Vec<(Request, Vec<u8>)>);

impl Handler<()> for Inbox {
    fn on_request(&mut self, req: Request, payload: &[u8]) {
        self.0.push((req, payload.to_vec()));
    }
    fn on_response(&mut self, _: u32, _: (), _: &[u8]) {}
}

/// The child: answers every request with its payload reversed and xored,
/// truncated to the allowance, until control word 0 says done.
fn echo_server(path: &Path) -> Result<(), String> {
    let mut t = ShmTransport::create(path, RING).map_err(|e| e.to_string())?;
    let config = Config::new(RING);
    t.publish_info(&config.local_info());
    let start = Instant::now();
    let peer = loop {
        if let Some(p) = t.peer_info() {
            break p;
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err("no client".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut ep: Endpoint<()> = Endpoint::new(config, peer).map_err(|e| e.to_string())?;
    let mut inbox = Inbox(Vec::new());
    let mut served = 0u64;
    while t.control(0).load(Ordering::Acquire) == 0 {
        ep.poll(&mut t, &mut inbox).map_err(|e| e.to_string())?;
        // Answer in reverse order of arrival: replies out of order.
        while let Some((req, payload)) = inbox.0.pop() {
            let resp = response_for(&payload, req.max_response() as usize);
            ep.reply(&req, &resp).map_err(|e| e.to_string())?;
            served += 1;
        }
        if start.elapsed() > Duration::from_secs(120) {
            return Err("client never finished".into());
        }
        std::thread::yield_now();
    }
    t.control(1).store(served, Ordering::Release);
    t.control(0).store(2, Ordering::Release);
    Ok(())
}

struct Client {
    answered: u64,
    errors: Vec<String>,
    expected: std::collections::HashMap<u32, Vec<u8>>,
}

impl Handler<u32> for Client {
    fn on_request(&mut self, _: Request, _: &[u8]) {
        self.errors.push("server sent a request".into());
    }
    fn on_response(&mut self, call_id: u32, tag: u32, payload: &[u8]) {
        match self.expected.remove(&tag) {
            Some(e) if e == payload => self.answered += 1,
            Some(_) => self
                .errors
                .push(format!("call {call_id} (tag {tag}): wrong response")),
            None => self
                .errors
                .push(format!("call {call_id}: unexpected tag {tag}")),
        }
    }
}

fn spawn(role: &str, path: &Path) -> Child {
    Command::new(std::env::current_exe().expect("current_exe"))
        .env(ROLE, role)
        .env(SHM, path)
        .spawn()
        .expect("spawn the server role")
}

fn wait(mut child: Child, limit: Duration) -> bool {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn open(path: &Path) -> ShmTransport {
    let start = Instant::now();
    loop {
        match ShmTransport::open(path) {
            Ok(t) => return t,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(60), "{e}");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Many calls of pseudo-random sizes and depths through a small ring (many
/// wraps, credit running out and coming back), every response checked.
fn echo_two_processes(dir: &Path) {
    let path = dir.join("echo");
    let child = spawn("echo", &path);
    let mut t = open(&path);
    let config = Config::new(RING);
    t.publish_info(&config.local_info());
    let start = Instant::now();
    let peer = loop {
        if let Some(p) = t.peer_info() {
            break p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "server info never came"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let mut ep: Endpoint<u32> = Endpoint::new(config, peer).unwrap();
    let mut c = Client {
        answered: 0,
        errors: Vec::new(),
        expected: Default::default(),
    };
    let total = 20_000u32;
    let mut tag = 0u32;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while c.answered < u64::from(total) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "stalled at {}",
            c.answered
        );
        ep.poll(&mut t, &mut c).unwrap();
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        let depth = 1 + (x >> 40) as u32 % 48;
        while tag < total && ep.pending_calls() < depth {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % (u64::from(ep.max_payload()) + 1)) as usize;
            let allow = (x >> 24) as u32 % (ep.max_response_allowance() + 1);
            let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ tag) as u8).collect();
            match ep.call(&payload, allow, tag) {
                Ok(_) => {
                    let max = (linerate::rpc::wire::padded_message_size(allow) - 12) as usize;
                    c.expected.insert(tag, response_for(&payload, max));
                    tag += 1;
                }
                Err(e) => {
                    assert!(e.kind.is_retryable(), "{:?}", e.kind);
                    break;
                }
            }
        }
    }
    assert_eq!(ep.pending_calls(), 0);
    assert!(ep.stats().wraps > 0, "the ring never wrapped");
    t.control(0).store(1, Ordering::Release);
    assert!(wait(child, Duration::from_secs(30)), "server failed");
    assert_eq!(t.control(0).load(Ordering::Acquire), 2);
    assert_eq!(t.control(1).load(Ordering::Acquire), u64::from(total));
    println!(
        "echo: {total} calls over {RING}-byte rings, {} wraps, {} writes",
        ep.stats().wraps,
        ep.stats().writes
    );
}

/// `rpc serve` and `rpc bench` as two processes, briefly. With
/// `echo_blocked`, a directory where the echo region would go keeps the
/// server from making it: the bench must leave the echo out and measure
/// the rest.
fn cli_two_processes(dir: &Path, echo_blocked: bool) {
    let path = dir.join(if echo_blocked { "cli-blocked" } else { "cli" });
    let blocker = dir.join("cli-blocked-echo");
    if echo_blocked {
        std::fs::create_dir(&blocker).expect("blocker dir");
    }
    let child = spawn("serve", &path);
    let args = BenchArgs {
        transport: cli::BenchTransport::Shm,
        ring: 1 << 16,
        loss: 0.0,
        server_core: None,
        shm: Some(path.clone()),
        depth: vec![1, 8],
        msg_size: 32,
        resp_size: 32,
        duration: Duration::from_millis(300),
        pingpong: Duration::from_millis(100),
        core: None,
        timeout: Duration::from_secs(60),
        client: None,
        server: None,
        client_netns: None,
        server_netns: None,
        client_device: None,
        server_device: None,
        eal: String::new(),
        json: None,
    };
    let report = cli::bench(&args).expect("bench").expect("a report");
    assert!(wait(child, Duration::from_secs(30)), "serve failed");
    let pp = report.pingpong.as_ref().expect("ping-pong measured");
    assert!(pp.rtt.count > 0 && pp.mean_rtt_ns > 0.0);
    let pp2 = report
        .pingpong_two_lines
        .as_ref()
        .expect("two-line ping-pong measured");
    assert!(pp2.rtt.count > 0 && pp2.mean_rtt_ns > 0.0);
    if echo_blocked {
        assert!(report.transport_echo.is_none());
        assert!(report
            .depths
            .iter()
            .all(|d| d.p50_over_transport_echo_ns.is_none() && d.rpcs > 0));
        assert!(blocker.is_dir(), "serve left what it did not make");
        return;
    }
    // The transport echo ran over the server's second region (each answer's
    // sequence checked), and depth 1 (only) says what the endpoint adds.
    let echo = report
        .transport_echo
        .as_ref()
        .expect("transport echo measured");
    assert!(echo.rtt.count > 0 && echo.mean_rtt_ns > 0.0);
    let over: Vec<_> = report
        .depths
        .iter()
        .map(|d| d.p50_over_transport_echo_ns)
        .collect();
    assert_eq!(
        over,
        vec![
            Some(report.depths[0].latency.p50_ns as i64 - echo.rtt.p50_ns as i64),
            None
        ]
    );
    assert!(
        !path.with_file_name("cli-echo").exists(),
        "serve removes the echo region"
    );
    assert_eq!(report.depths.len(), 2);
    for d in &report.depths {
        assert!(d.rpcs > 0, "{d:?}");
        assert_eq!(d.latency.count, d.rpcs);
        assert!(d.rpc_per_sec > 0.0 && d.rtt_vs_pingpong.is_some());
        assert!(d.p50_vs_two_line_pingpong_p50.is_some_and(|r| r > 0.0));
    }
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["depths"][1]["depth"], 8);
    assert!(
        json["pingpong_two_lines"]["rtt"]["p50_ns"]
            .as_u64()
            .unwrap()
            > 0
    );
    println!(
        "cli: {:?}",
        report
            .depths
            .iter()
            .map(|d| d.rpc_per_sec as u64)
            .collect::<Vec<_>>()
    );
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        let path = PathBuf::from(std::env::var_os(SHM).expect("LINERATE_RPC_SHM"));
        let r = match role.as_str() {
            "echo" => echo_server(&path),
            "serve" => cli::serve(&ServeArgs {
                shm: Some(path),
                ring: 1 << 16,
                comp_slots: 16,
                token_line: true,
                core: None,
                timeout: Duration::from_secs(60),
                reply_later: false,
            })
            .map(|_| ())
            .map_err(|(_, m)| m),
            other => Err(format!("unknown role {other}")),
        };
        if let Err(e) = r {
            eprintln!("server role failed: {e}");
            std::process::exit(1);
        }
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    echo_two_processes(dir.path());
    println!("test echo_two_processes ... ok");
    cli_two_processes(dir.path(), false);
    println!("test cli_two_processes ... ok");
    cli_two_processes(dir.path(), true);
    println!("test cli_two_processes_without_the_echo_region ... ok");
}
