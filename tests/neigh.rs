//! Neighbour resolution and answering: the core's replies checked by an
//! independent parser (etherparse), requests for other addresses unanswered,
//! malformed frames counted and dropped on a real port binding, the parser
//! never panicking (proptest), and a generator resolving its gateway on a mem
//! wire before a trial, or failing with an error naming the address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant as StdInstant};

use etherparse::{ArpHardwareId, ArpOperation, EtherType, NetSlice, SlicedPacket, TransportSlice};
use linerate::buf::{Burst, Pool, PoolConfig};
use linerate::neigh::wire::{self, Body, Frame, NdpRepr};
use linerate::neigh::{bind, Config, Neighbour, Owned};
use linerate::port::mem::{self, MemConfig};
use proptest::prelude::*;

mod util;

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xaa];
const PEER: [u8; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x56];

fn core() -> Neighbour {
    Neighbour::new(Config {
        mac: MAC,
        addrs: vec![
            Owned::parse("10.2.0.2/24").unwrap(),
            Owned::parse("fd00:2::2/64").unwrap(),
        ],
    })
}

/// An ARP request built by etherparse.
fn etherparse_arp_request(target: Ipv4Addr) -> Vec<u8> {
    let arp = etherparse::ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        ArpOperation::REQUEST,
        &PEER,
        &[10, 2, 0, 1],
        &[0; 6],
        &target.octets(),
    )
    .unwrap();
    let mut out = Vec::new();
    etherparse::PacketBuilder::ethernet2(PEER, [0xff; 6])
        .arp(arp)
        .write(&mut out)
        .unwrap();
    out.resize(60, 0);
    out
}

fn transmitted(n: &mut Neighbour) -> Vec<Vec<u8>> {
    let mut buf = [0u8; wire::MAX_EMIT];
    let mut v = Vec::new();
    while let Some(len) = n.poll_transmit(&mut buf) {
        v.push(buf[..len].to_vec());
    }
    v
}

#[test]
fn arp_request_for_an_owned_address_gets_a_reply_etherparse_accepts() {
    let mut n = core();
    n.handle_frame(&etherparse_arp_request(Ipv4Addr::new(10, 2, 0, 2)));
    let out = transmitted(&mut n);
    assert_eq!(out.len(), 1);
    let p = SlicedPacket::from_ethernet(&out[0]).unwrap();
    let Some(etherparse::LinkSlice::Ethernet2(eth)) = &p.link else {
        panic!("no Ethernet header: {p:?}")
    };
    assert_eq!(eth.destination(), PEER);
    assert_eq!(eth.source(), MAC);
    let Some(NetSlice::Arp(arp)) = &p.net else {
        panic!("not ARP: {p:?}")
    };
    assert_eq!(arp.hw_addr_type(), ArpHardwareId::ETHERNET);
    assert_eq!(arp.proto_addr_type(), EtherType::IPV4);
    assert_eq!(arp.operation(), ArpOperation::REPLY);
    assert_eq!(arp.sender_hw_addr(), &MAC);
    assert_eq!(arp.sender_protocol_addr(), &[10, 2, 0, 2]);
    assert_eq!(arp.target_hw_addr(), &PEER);
    assert_eq!(arp.target_protocol_addr(), &[10, 2, 0, 1]);
    assert_eq!(n.counters().requests_answered, 1);
}

#[test]
fn requests_for_other_addresses_get_no_reply() {
    let mut n = core();
    for t in [
        Ipv4Addr::new(10, 2, 0, 3),
        Ipv4Addr::new(10, 2, 0, 1),
        Ipv4Addr::new(192, 168, 0, 2),
    ] {
        n.handle_frame(&etherparse_arp_request(t));
    }
    let ns = Frame {
        eth_dst: [0x33, 0x33, 0xff, 0, 0, 3],
        eth_src: PEER,
        body: Body::Ndp {
            src: "fd00:2::1".parse().unwrap(),
            dst: wire::solicited_node("fd00:2::3".parse().unwrap()),
            repr: NdpRepr::Solicit {
                target: "fd00:2::3".parse().unwrap(),
                source_mac: Some(PEER),
            },
        },
    };
    let mut b = [0u8; wire::MAX_EMIT];
    let len = ns.emit(&mut b).unwrap();
    n.handle_frame(&b[..len]);
    assert!(transmitted(&mut n).is_empty());
    assert_eq!(n.counters().requests_ignored, 4);
    assert_eq!(n.counters().requests_answered, 0);
}

#[test]
fn neighbour_solicitation_gets_an_advertisement_etherparse_accepts() {
    let mut n = core();
    let target: Ipv6Addr = "fd00:2::2".parse().unwrap();
    let src: Ipv6Addr = "fd00:2::1".parse().unwrap();
    let ns = Frame {
        eth_dst: wire::multicast_mac(wire::solicited_node(target)),
        eth_src: PEER,
        body: Body::Ndp {
            src,
            dst: wire::solicited_node(target),
            repr: NdpRepr::Solicit {
                target,
                source_mac: Some(PEER),
            },
        },
    };
    let mut b = [0u8; wire::MAX_EMIT];
    let len = ns.emit(&mut b).unwrap();
    // etherparse agrees our solicitation is well formed, checksum included.
    let p = SlicedPacket::from_ethernet(&b[..len]).unwrap();
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("not ICMPv6: {p:?}")
    };
    assert!(icmp.is_checksum_valid(src.octets(), wire::solicited_node(target).octets()));
    n.handle_frame(&b[..len]);
    let out = transmitted(&mut n);
    assert_eq!(out.len(), 1);
    let p = SlicedPacket::from_ethernet(&out[0]).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("not IPv6: {p:?}")
    };
    let h = ip.header();
    assert_eq!(h.hop_limit(), 255);
    assert_eq!(h.source_addr(), target);
    assert_eq!(h.destination_addr(), src);
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("not ICMPv6: {p:?}")
    };
    assert!(icmp.is_checksum_valid(target.octets(), src.octets()));
    let etherparse::Icmpv6Type::NeighborAdvertisement(na) = icmp.icmp_type() else {
        panic!("not an NA: {:?}", icmp.icmp_type())
    };
    assert!(na.solicited && na.r#override && !na.router);
    // Target address, then the target link-layer address option (type 2).
    let body = icmp.payload();
    assert_eq!(&body[..16], &target.octets());
    assert_eq!(
        &body[16..24],
        &[2, 1, MAC[0], MAC[1], MAC[2], MAC[3], MAC[4], MAC[5]]
    );
}

/// A mem wire that owns 10.2.0.2: frames sent on its transmit side come back
/// on its receive side, through the neighbour binding.
fn wrapped_wire() -> (
    linerate::port::OpenPort,
    std::sync::Arc<bind::NeighPort>,
    Pool,
) {
    let pool = Pool::new(&PoolConfig::default()).unwrap();
    let port = mem::open(&MemConfig::default());
    let (port, shared) = bind::wrap(
        port,
        Config {
            mac: MAC,
            addrs: vec![Owned::parse("10.2.0.2/24").unwrap()],
        },
        pool.clone(),
    );
    (port, shared, pool)
}

fn send(port: &mut linerate::port::OpenPort, pool: &Pool, frames: &[Vec<u8>]) {
    let mut b = Burst::new();
    for f in frames {
        let mut p = pool.alloc().unwrap();
        p.set_data(f).unwrap();
        b.push(p).unwrap();
    }
    let now = linerate::time::monotonic_now();
    assert_eq!(port.tx[0].tx_burst(now, &mut b), frames.len());
}

fn receive(port: &mut linerate::port::OpenPort) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = Burst::new();
    let now = linerate::time::monotonic_now();
    while port.rx[0].rx_burst(now, &mut b, 64) > 0 {
        out.extend(b.iter().map(|p| p.data().to_vec()));
        b.clear();
    }
    out
}

#[test]
fn malformed_and_non_ip_frames_are_counted_and_dropped_ip_passes() {
    let (mut port, _shared, pool) = wrapped_wire();
    // The announcement (gratuitous ARP) goes out with the first burst and
    // comes back: consumed, never delivered.
    let mut ipv4 = vec![0u8; 60];
    ipv4[12..14].copy_from_slice(&[0x08, 0x00]);
    ipv4[14] = 0x45;
    let mut bad_op = etherparse_arp_request(Ipv4Addr::new(10, 2, 0, 2));
    bad_op[21] = 7;
    let mut bad_hlen = etherparse_arp_request(Ipv4Addr::new(10, 2, 0, 2));
    bad_hlen[18] = 16;
    let truncated = etherparse_arp_request(Ipv4Addr::new(10, 2, 0, 2))[..30].to_vec();
    let mut lldp = vec![0u8; 60];
    lldp[12..14].copy_from_slice(&[0x88, 0xcc]);
    send(
        &mut port,
        &pool,
        &[
            ipv4.clone(),
            bad_op,
            bad_hlen,
            truncated,
            lldp,
            vec![1, 2, 3],
        ],
    );
    let got = receive(&mut port);
    assert_eq!(got, vec![ipv4], "only the IPv4 frame reaches the stage");
    let r = port.stats.report();
    assert_eq!(r.detail["neigh_malformed"], 4, "{r:?}");
    assert_eq!(r.detail["non_ip_frames"], 1, "{r:?}");
    assert_eq!(r.detail["neigh_requests_answered"], 0, "{r:?}");
}

#[test]
fn a_request_through_the_port_is_answered_through_the_port() {
    let (mut port, _shared, pool) = wrapped_wire();
    send(
        &mut port,
        &pool,
        &[etherparse_arp_request(Ipv4Addr::new(10, 2, 0, 2))],
    );
    assert!(receive(&mut port).is_empty());
    // The answer leaves with the next transmit burst (here a flush) and, on
    // this looped wire, comes back as a reply the port sees.
    port.tx[0].flush(linerate::time::monotonic_now());
    assert!(receive(&mut port).is_empty());
    let r = port.stats.report();
    assert_eq!(r.detail["neigh_requests_answered"], 1, "{r:?}");
    assert!(r.detail["neigh_replies_seen"] >= 1, "{r:?}");
}

fn trial_pipeline(gateway: &str, owned: &str) -> String {
    format!(
        r#"
[pipeline]
name = "gw"
lcores = "0-1"
[port.w]
kind = "mem"
ip = ["{owned}", "10.9.0.2/24"]
[stage.gen]
kind = "generator"
lcore = 1
tx = "w"
gateway = "{gateway}"
src_ip = "10.9.0.2"
dst_ip = "10.9.0.3"
[stage.ana]
kind = "analyzer"
lcore = 0
rx = "w"
"#
    )
}

#[test]
fn generator_resolves_its_gateway_before_the_first_trial() {
    // The wire owns the gateway's address itself: the request loops back,
    // the port answers it, the answer loops back and resolves.
    let plan = linerate::pipeline::load_str(
        Path::new("gw.toml"),
        &trial_pipeline("10.9.0.1", "10.9.0.1/24"),
    )
    .unwrap();
    // A drain of 1 s, not 200 ms: the analyzer's lcore shares the machine
    // with this file's property tests, and what it has not read by the end
    // of the drain counts as lost.
    let options = linerate::trial::TrialOptions {
        drain: Duration::from_secs(1),
        ..Default::default()
    };
    let mut runner = linerate::trial::TrialRunner::start(&plan, options).unwrap();
    let stop = AtomicBool::new(false);
    let r = runner
        .trial(2_000.0, Duration::from_millis(300), &stop, &mut |_, _| {})
        .unwrap();
    // Whatever a busy machine let the generator send arrives, stamped.
    assert!(r.sent > 0, "{r:?}");
    assert_eq!(r.received, r.sent, "{r:?}");
    assert!(r.latency_ns.samples > 0);
    assert_ne!(r.limited_by, Some(linerate::trial::LimitedBy::Dut));
    let w = &runner.built().ports[0].1.report();
    assert_eq!(w.detail["neigh_resolutions"], 1, "{w:?}");
    assert!(w.detail["neigh_requests_answered"] >= 1, "{w:?}");
}

/// Runs `linerate ARGS FILE` on pipeline `text`, which must fail at run
/// time (exit 1) within `limit` (its attempts are bounded: no hang): stderr.
fn fails_within(text: &str, args: &[&str], limit: Duration) -> String {
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(dir.path(), "p.toml", text);
    let t0 = StdInstant::now();
    let out = util::bin().args(args).arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(t0.elapsed() < limit, "took {:?}: {err}", t0.elapsed());
    err
}

#[test]
fn an_unanswered_gateway_fails_naming_the_address() {
    // Five attempts 300 ms apart, then the error.
    let err = fails_within(
        &trial_pipeline("10.9.0.77", "10.9.0.1/24"),
        &["trial", "--rate", "1 kpps", "--duration", "0.1s"],
        Duration::from_secs(30),
    );
    assert!(err.contains("gateway 10.9.0.77 did not answer"), "{err}");
    assert!(err.contains("[stage.gen]"), "{err}");
}

#[test]
fn gateway_keys_are_checked() {
    let base = trial_pipeline("10.9.0.1", "10.9.0.1/24");
    let gw = "gateway = \"10.9.0.1\"";
    for (from, to, want) in [
        (
            gw,
            "gateway = \"10.9.0.1\"\ndst_mac = \"02:00:00:00:00:09\"",
            "`dst_mac` and `gateway`",
        ),
        (gw, "gateway = \"fd00::1\"", "the gateway is IPv6"),
        (gw, "gateway = \"router\"", "not an IP address"),
        ("\"10.9.0.1/24\"", "\"10.9.0.1/40\"", "prefix length"),
        ("\"10.9.0.1/24\"", "\"10.9.0.2/24\"", "listed twice"),
    ] {
        rejected(&base.replace(from, to), want);
    }
}

/// The error loading pipeline `text` fails with, which must name `want`.
fn rejected(text: &str, want: &str) -> String {
    let e = linerate::pipeline::load_str(Path::new("x.toml"), text)
        .err()
        .unwrap_or_else(|| panic!("accepted: {text}"))
        .to_string();
    assert!(e.contains(want), "{want:?} not in {e}");
    e
}

/// A receive queue that delivers `frames` once; a transmit queue that keeps
/// what it is given.
struct Scripted {
    frames: Vec<Vec<u8>>,
    pool: Pool,
}

impl linerate::port::RxQueue for Scripted {
    fn rx_burst(&mut self, _: linerate::time::Instant, out: &mut Burst, max: usize) -> usize {
        let mut n = 0;
        while n < max.min(out.room()) && !self.frames.is_empty() {
            let mut p = self.pool.alloc().unwrap();
            p.set_data(&self.frames.remove(0)).unwrap();
            out.push(p).unwrap();
            n += 1;
        }
        n
    }
}

struct Recorded(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

impl linerate::port::TxQueue for Recorded {
    fn tx_burst(&mut self, _: linerate::time::Instant, pkts: &mut Burst) -> usize {
        let n = pkts.len();
        let mut sent = self.0.lock().unwrap();
        sent.extend(pkts.drain().map(|p| p.data().to_vec()));
        n
    }
}

/// A peer that resolves us while we resolve it: our resolution ends on its
/// request (we learn its address from it), and our answer must leave before
/// the call returns, since nothing may poll the port for a while after (a
/// rank waiting in MPI), or the peer never resolves us.
#[test]
fn a_resolution_that_learns_from_the_peers_request_answers_it_before_returning() {
    let pool = Pool::new(&PoolConfig {
        name: "scripted".into(),
        count: 64,
        ..PoolConfig::default()
    })
    .unwrap();
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let port = linerate::port::OpenPort {
        rx: vec![Box::new(Scripted {
            frames: vec![etherparse_arp_request(Ipv4Addr::new(10, 2, 0, 2))],
            pool: pool.clone(),
        })],
        tx: vec![Box::new(Recorded(sent.clone()))],
        stats: std::sync::Arc::new(()),
        warnings: Vec::new(),
    };
    let (mut port, shared) = bind::wrap(
        port,
        Config {
            mac: MAC,
            addrs: vec![Owned::parse("10.2.0.2/24").unwrap()],
        },
        pool,
    );
    let (rx, tx) = (&mut port.rx[0], &mut port.tx[0]);
    let mac = bind::resolve(
        &shared,
        rx.as_mut(),
        tx.as_mut(),
        IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 2, 0, 2)),
        bind::Lookup::Peer(bind::PEER_RESOLVE_TIMEOUT),
    )
    .unwrap();
    assert_eq!(mac, PEER);
    let replies = sent
        .lock()
        .unwrap()
        .iter()
        .filter_map(|f| Frame::parse(f).ok())
        .filter(|f| {
            matches!(f.body, Body::Arp(a) if a.op == wire::ArpOp::Reply
                && a.target_ip == Ipv4Addr::new(10, 2, 0, 1) && a.target_mac == PEER)
        })
        .count();
    assert_eq!(replies, 1, "{:?}", sent.lock().unwrap());
}

/// The keys of a mem port that carries UDP datagrams 10.9.0.1:5000 <->
/// 10.9.0.3:5001.
const DGRAM: &str =
    "ip = \"10.9.0.1/24\"\nudp_bind = \"10.9.0.1:5000\"\nudp_connect = \"10.9.0.3:5001\"";

/// A reliable sender on a mem port that carries UDP datagrams to a peer.
fn datagram_pipeline(port_keys: &str) -> String {
    format!(
        r#"
[pipeline]
name = "dgram"
lcores = "0"
[port.w]
kind = "mem"
{port_keys}
[stage.tx]
kind = "reliable_tx"
rx = "w"
tx = "w"
messages = 10
size = "1 KiB"
"#
    )
}

#[test]
fn udp_datagram_keys_are_checked() {
    let plan =
        linerate::pipeline::load_str(Path::new("x.toml"), &datagram_pipeline(DGRAM)).unwrap();
    assert!(plan
        .to_string()
        .contains("carries UDP datagrams 10.9.0.1:5000 <-> 10.9.0.3:5001"));
    for (keys, want) in [
        (
            "ip = \"10.9.0.1/24\"\nudp_bind = \"10.9.0.1:5000\"".to_string(),
            "`udp_bind` needs `udp_connect`",
        ),
        (
            "udp_bind = \"10.9.0.1:5000\"\nudp_connect = \"10.9.0.3:5001\"".to_string(),
            "`udp_bind` needs `ip`",
        ),
        (
            DGRAM.replace(
                "udp_bind = \"10.9.0.1:5000\"",
                "udp_bind = \"10.9.0.2:5000\"",
            ),
            "10.9.0.2 is not one of the port's addresses",
        ),
        (
            DGRAM.replace("10.9.0.3:5001", "10.8.0.3:5001"),
            "10.8.0.3 is not another address on 10.9.0.1/24",
        ),
        (
            DGRAM.replace("10.9.0.3:5001", "[fd00::3]:5001"),
            "not an IPv4 address with a port",
        ),
        (
            DGRAM.replace("10.9.0.1:5000", "10.9.0.1"),
            "not an IPv4 address with a port",
        ),
    ] {
        let e = rejected(&datagram_pipeline(&keys), want);
        assert!(e.contains("port.w"), "{e}");
    }
    // `resolve_timeout`: a duration in range, on a port with a peer.
    let plan = linerate::pipeline::load_str(
        Path::new("x.toml"),
        &datagram_pipeline(&format!("{DGRAM}\nresolve_timeout = \"1.5s\"")),
    )
    .unwrap();
    assert!(
        plan.to_string().contains("(peer resolved within 1.5s)"),
        "{plan}"
    );
    for (value, want) in [
        ("\"soon\"", "resolve_timeout"),
        ("\"0s\"", "`resolve_timeout` 0ns is out of range"),
        ("\"2h\"", "`resolve_timeout` 7200s is out of range"),
        ("[1]", "resolve_timeout"),
    ] {
        rejected(
            &datagram_pipeline(&format!("{DGRAM}\nresolve_timeout = {value}")),
            want,
        );
    }
    rejected(
        &datagram_pipeline("ip = \"10.9.0.1/24\"\nresolve_timeout = \"1s\""),
        "`resolve_timeout` is how long `udp_connect` is resolved: it needs `udp_connect`",
    );
    // On the command line: bad input, exit 2, naming the key.
    let dir = tempfile::tempdir().unwrap();
    let f = util::write(
        dir.path(),
        "bad.toml",
        &datagram_pipeline(&format!("{DGRAM}\nresolve_timeout = \"-1s\"")),
    );
    let out = util::bin().arg("check").arg(&f).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("resolve_timeout"), "{err}");
}

#[test]
fn peer_lookups_wait_what_they_are_given() {
    use bind::{Lookup, RESOLVE_ATTEMPTS, RESOLVE_INTERVAL};
    assert_eq!(Lookup::Gateway.attempts(), RESOLVE_ATTEMPTS);
    // The default: thirty requests, 300 ms apart.
    assert_eq!(Lookup::Peer(bind::PEER_RESOLVE_TIMEOUT).attempts(), 30);
    // Rounded up, so the wait is never shorter than asked; at least one.
    assert_eq!(Lookup::Peer(RESOLVE_INTERVAL * 5).attempts(), 5);
    assert_eq!(
        Lookup::Peer(RESOLVE_INTERVAL * 5 + Duration::from_nanos(1)).attempts(),
        6
    );
    assert_eq!(Lookup::Peer(Duration::from_millis(1)).attempts(), 1);
    assert_eq!(Lookup::Peer(Duration::ZERO).attempts(), 1);
    assert_eq!(Lookup::Peer(Duration::MAX).attempts(), u32::MAX);
}

#[test]
fn a_datagram_peer_that_never_answers_fails_naming_it() {
    // `resolve_timeout` = 1.5 s: five attempts 300 ms apart, then the error.
    let err = fails_within(
        &datagram_pipeline(&format!("{DGRAM}\nresolve_timeout = \"1.5s\"")),
        &["run", "--duration", "5s"],
        Duration::from_secs(60),
    );
    assert!(err.contains("[port.w]"), "{err}");
    // `resolve_timeout` set how many requests went out (1.5 s / 300 ms),
    // and the error says so, with the key that sets it.
    assert!(
        err.contains(
            "peer 10.9.0.3 did not answer: 5 ARP requests from 10.9.0.1 went unanswered over 1.5s"
        ),
        "{err}"
    );
    assert!(err.contains("`resolve_timeout` = \"1.5s\""), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes: parsing and the core never panic, and a frame that parses
    /// is one the fast path diverts.
    #[test]
    fn parser_and_core_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), arp in any::<bool>()) {
        let mut f = bytes;
        if arp && f.len() >= 14 {
            f[12] = 0x08;
            f[13] = 0x06;
        }
        if let Ok(parsed) = Frame::parse(&f) {
            prop_assert!(wire::is_diverted(&f));
            let mut b = [0u8; wire::MAX_EMIT];
            let n = parsed.emit(&mut b).unwrap();
            prop_assert_eq!(Frame::parse(&b[..n]), Ok(parsed));
        }
        let mut n = core();
        let _ = n.handle_frame(&f);
        let mut b = [0u8; wire::MAX_EMIT];
        while n.poll_transmit(&mut b).is_some() {}
    }

    /// Every ARP and NDP message emits and parses back to itself.
    #[test]
    fn emit_then_parse_round_trips(
        op in any::<bool>(), a in any::<[u8; 6]>(), b in any::<[u8; 6]>(),
        sip in any::<u32>(), tip in any::<u32>(), v6 in any::<bool>(),
        s6 in any::<u128>(), t6 in any::<u128>(), flags in any::<[bool; 3]>(), opt in any::<bool>(),
    ) {
        let unicast = |mut m: [u8; 6]| { m[0] &= 0xfe; m };
        let body = if v6 {
            let (src, target) = (Ipv6Addr::from(s6 & !(0xff << 120)), Ipv6Addr::from(t6 & !(0xff << 120)));
            let repr = if op {
                NdpRepr::Solicit { target, source_mac: opt.then_some(a) }
            } else {
                NdpRepr::Advert { router: flags[0], solicited: flags[1], override_: flags[2], target, target_mac: opt.then_some(a) }
            };
            Body::Ndp { src, dst: wire::solicited_node(target), repr }
        } else {
            Body::Arp(wire::ArpRepr {
                op: if op { wire::ArpOp::Request } else { wire::ArpOp::Reply },
                sender_mac: unicast(a), sender_ip: Ipv4Addr::from(sip),
                target_mac: b, target_ip: Ipv4Addr::from(tip),
            })
        };
        let f = Frame { eth_dst: b, eth_src: unicast(a), body };
        let mut buf = [0u8; wire::MAX_EMIT];
        let n = f.emit(&mut buf).unwrap();
        prop_assert_eq!(n, f.buffer_len());
        prop_assert_eq!(Frame::parse(&buf[..n]), Ok(f));
        prop_assert!(wire::is_diverted(&buf[..n]));
    }
}

#[test]
fn owned_addresses_display_and_match() {
    let a = Owned::parse("fd00:2::2/64").unwrap();
    assert_eq!(a.to_string(), "fd00:2::2/64");
    assert!(a.contains(IpAddr::V6("fd00:2::ffff".parse().unwrap())));
}

/// The transmit queue the receive side adopts holds the shared core, which
/// holds it: when the port's report goes, so must the queue, or the device
/// stays open (and a pipeline opened again in the same process cannot have it).
#[test]
fn an_adopted_transmit_queue_goes_with_the_port() {
    let (mut port, shared, _pool) = wrapped_wire();
    shared.adopt_tx(port.tx.remove(0));
    let weak = std::sync::Arc::downgrade(&shared);
    drop(shared);
    assert!(weak.upgrade().is_some(), "the port still holds its core");
    drop(port);
    assert!(
        weak.upgrade().is_none(),
        "the adopted queue kept the neighbour core (and its device) alive"
    );
}
