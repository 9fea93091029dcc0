//! Neighbours, as TRex's software stack does them: a port owns IP addresses
//! and answers IPv4 ARP requests and IPv6 neighbour solicitations for them,
//! announces them at start (gratuitous ARP, unsolicited NA), and resolves a
//! gateway's MAC address before traffic starts, so a router under test needs no
//! static neighbour entries and nobody types a MAC address into a file.
//!
//! Layout, as in every protocol folder: [`wire`] (zero-copy views, parse and
//! emit), the sans-IO core [`Neighbour`] here (frames and the time go in,
//! frames come out; no clock, socket or thread inside), and [`bind`], which
//! hooks the core onto a port's queues.
//!
//! The core is off the fast path: a port's receive side checks each frame's
//! ethertype ([`wire::is_diverted`]) and hands only ARP, NDP and non-IP frames
//! to it.

pub mod bind;
pub mod wire;

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::time::Instant;
use wire::{ArpOp, ArpRepr, Body, Frame, NdpRepr, BROADCAST};

/// An address a port owns, with its prefix length (`10.1.0.2/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owned {
    /// The address.
    pub ip: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl Owned {
    /// Parses `ADDRESS/PREFIX` (the prefix is optional: /32 or /128).
    pub fn parse(s: &str) -> Result<Owned, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let ip: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("`{a}` is not an IP address"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("`/{p}` is not a prefix length from 0 to {max}")),
            },
        };
        if ip.is_unspecified() || ip.is_multicast() || ip == IpAddr::V4(Ipv4Addr::BROADCAST) {
            return Err(format!("`{ip}` cannot be a port's own address"));
        }
        Ok(Owned { ip, prefix })
    }

    /// Whether `ip` is on this address's subnet.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32u32),
            IpAddr::V6(a) => (u128::from(a), 128),
        };
        let ((a, fa), (b, fb)) = (bits(self.ip), bits(ip));
        if fa != fb {
            return false;
        }
        let p = u32::from(self.prefix);
        p == 0 || (a ^ b) >> (128 - p) == 0
    }
}

impl std::fmt::Display for Owned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix)
    }
}

/// What a port's neighbour core knows of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The port's MAC address, the one it answers with.
    pub mac: [u8; 6],
    /// The addresses it owns.
    pub addrs: Vec<Owned>,
}

/// What the core counted. Each is a total since the core was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// ARP requests and neighbour solicitations answered (for an owned address).
    pub requests_answered: u64,
    /// ARP requests and solicitations for addresses the port does not own.
    pub requests_ignored: u64,
    /// ARP replies and advertisements seen (ours or not).
    pub replies_seen: u64,
    /// Addresses resolved (a reply to one of our requests).
    pub resolutions: u64,
    /// Frames that are neither IPv4, IPv6 nor ARP, dropped.
    pub non_ip: u64,
    /// ARP and NDP frames that failed to parse, dropped.
    pub malformed: u64,
    /// Other NDP messages (router solicitations and advertisements, redirects), dropped.
    pub ndp_other: u64,
    /// Frames the core queued to send (answers, requests, announcements).
    pub sent: u64,
    /// Frames the core could not queue (its queue of [`OUT_MAX`] was full).
    pub out_dropped: u64,
}

/// Frames the core holds for sending at most; a flood of requests beyond this
/// between two transmit polls is counted and dropped.
pub const OUT_MAX: usize = 64;

/// What became of a frame handed to the core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not the core's: give it to the stage (IPv4, IPv6 other than NDP).
    Pass,
    /// Taken (answered, learned, or counted and dropped).
    Consumed,
}

/// Where a resolution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Never asked for.
    Unknown,
    /// Requests sent, no answer yet.
    Pending {
        /// Requests sent so far.
        attempts: u32,
    },
    /// Answered.
    Resolved([u8; 6]),
    /// Every attempt went unanswered.
    Failed {
        /// Requests sent.
        attempts: u32,
    },
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    target: IpAddr,
    source: IpAddr,
    attempts: u32,
    max_attempts: u32,
    interval: Duration,
    next: Instant,
    failed: bool,
}

/// One port's neighbour state machine (sans-IO).
///
/// Call [`Neighbour::handle_frame`] with every diverted frame,
/// [`Neighbour::handle_timeout`] when [`Neighbour::poll_timeout`] says, and
/// drain [`Neighbour::poll_transmit`] after either and after
/// [`Neighbour::resolve`] or [`Neighbour::announce`].
#[derive(Debug)]
pub struct Neighbour {
    config: Config,
    counters: Counters,
    out: VecDeque<Frame>,
    pending: Vec<Pending>,
    table: Vec<(IpAddr, [u8; 6])>,
}

impl Neighbour {
    /// A core for a port with `config`.
    pub fn new(config: Config) -> Neighbour {
        Neighbour {
            config,
            counters: Counters::default(),
            out: VecDeque::with_capacity(OUT_MAX),
            pending: Vec::new(),
            table: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    fn owns(&self, ip: IpAddr) -> bool {
        self.config.addrs.iter().any(|a| a.ip == ip)
    }

    fn queue(&mut self, f: Frame) {
        if self.out.len() >= OUT_MAX {
            self.counters.out_dropped += 1;
        } else {
            self.counters.sent += 1;
            self.out.push_back(f);
        }
    }

    /// Queues a gratuitous ARP (IPv4) or an unsolicited NA to all nodes (IPv6)
    /// for every owned address, so the link learns (or updates) where they are.
    pub fn announce(&mut self) {
        let mac = self.config.mac;
        for a in self.config.addrs.clone() {
            let body = match a.ip {
                IpAddr::V4(ip) => Body::Arp(ArpRepr {
                    op: ArpOp::Request,
                    sender_mac: mac,
                    sender_ip: ip,
                    target_mac: [0; 6],
                    target_ip: ip,
                }),
                IpAddr::V6(ip) => Body::Ndp {
                    src: ip,
                    dst: ALL_NODES,
                    repr: NdpRepr::Advert {
                        router: false,
                        solicited: false,
                        override_: true,
                        target: ip,
                        target_mac: Some(mac),
                    },
                },
            };
            let eth_dst = match a.ip {
                IpAddr::V4(_) => BROADCAST,
                IpAddr::V6(_) => wire::multicast_mac(ALL_NODES),
            };
            self.queue(Frame {
                eth_dst,
                eth_src: mac,
                body,
            });
        }
    }

    /// Starts resolving `target`, asking from `source` (an address of the same
    /// family): a request now, and again every `interval` until answered or
    /// `attempts` requests went unanswered.
    pub fn resolve(
        &mut self,
        now: Instant,
        target: IpAddr,
        source: IpAddr,
        attempts: u32,
        interval: Duration,
    ) {
        self.pending.retain(|p| p.target != target);
        self.pending.push(Pending {
            target,
            source,
            attempts: 0,
            max_attempts: attempts.max(1),
            interval,
            next: now,
            failed: false,
        });
        self.handle_timeout(now);
    }

    /// Where the resolution of `ip` stands.
    pub fn resolution(&self, ip: IpAddr) -> Resolution {
        if let Some(m) = self.lookup(ip) {
            return Resolution::Resolved(m);
        }
        match self.pending.iter().find(|p| p.target == ip) {
            Some(p) if p.failed => Resolution::Failed {
                attempts: p.attempts,
            },
            Some(p) => Resolution::Pending {
                attempts: p.attempts,
            },
            None => Resolution::Unknown,
        }
    }

    /// The MAC address `ip` resolved to.
    pub fn lookup(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.table.iter().find(|e| e.0 == ip).map(|e| e.1)
    }

    /// When [`Neighbour::handle_timeout`] next has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.pending
            .iter()
            .filter(|p| !p.failed)
            .map(|p| p.next)
            .min()
    }

    /// Sends the requests that are due; marks resolutions whose last request
    /// went unanswered for a whole interval as failed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mac = self.config.mac;
        let mut due = Vec::new();
        for p in self
            .pending
            .iter_mut()
            .filter(|p| !p.failed && p.next <= now)
        {
            if p.attempts >= p.max_attempts {
                p.failed = true;
                continue;
            }
            p.attempts += 1;
            p.next = now + p.interval;
            due.push((p.target, p.source));
        }
        for (target, source) in due {
            let f = match (target, source) {
                (IpAddr::V4(t), IpAddr::V4(s)) => Frame {
                    eth_dst: BROADCAST,
                    eth_src: mac,
                    body: Body::Arp(ArpRepr {
                        op: ArpOp::Request,
                        sender_mac: mac,
                        sender_ip: s,
                        target_mac: [0; 6],
                        target_ip: t,
                    }),
                },
                (IpAddr::V6(t), IpAddr::V6(s)) => {
                    let dst = wire::solicited_node(t);
                    Frame {
                        eth_dst: wire::multicast_mac(dst),
                        eth_src: mac,
                        body: Body::Ndp {
                            src: s,
                            dst,
                            repr: NdpRepr::Solicit {
                                target: t,
                                source_mac: Some(mac),
                            },
                        },
                    }
                }
                // A source of the other family: nothing sensible to send.
                _ => continue,
            };
            self.queue(f);
        }
    }

    /// Takes one frame the port diverted (see [`wire::is_diverted`]).
    pub fn handle_frame(&mut self, frame: &[u8]) -> Verdict {
        let parsed = match Frame::parse(frame) {
            Ok(f) => f,
            Err(wire::Error::NotNeighbour) => {
                return match wire::ethertype(frame) {
                    Some(wire::ETHERTYPE_IPV4) => Verdict::Pass,
                    Some(wire::ETHERTYPE_IPV6) => {
                        if wire::is_diverted(frame) {
                            self.counters.ndp_other += 1;
                            Verdict::Consumed
                        } else {
                            Verdict::Pass
                        }
                    }
                    _ => {
                        self.counters.non_ip += 1;
                        Verdict::Consumed
                    }
                };
            }
            Err(_) => {
                self.counters.malformed += 1;
                return Verdict::Consumed;
            }
        };
        let mac = self.config.mac;
        match parsed.body {
            Body::Arp(a) => match a.op {
                ArpOp::Request => {
                    self.learn_if_pending(IpAddr::V4(a.sender_ip), a.sender_mac);
                    // A gratuitous ARP (sender = target) is news, not a question.
                    if self.owns(IpAddr::V4(a.target_ip)) && a.sender_ip != a.target_ip {
                        self.counters.requests_answered += 1;
                        self.queue(Frame {
                            eth_dst: a.sender_mac,
                            eth_src: mac,
                            body: Body::Arp(ArpRepr {
                                op: ArpOp::Reply,
                                sender_mac: mac,
                                sender_ip: a.target_ip,
                                target_mac: a.sender_mac,
                                target_ip: a.sender_ip,
                            }),
                        });
                    } else {
                        self.counters.requests_ignored += 1;
                    }
                }
                ArpOp::Reply => {
                    self.counters.replies_seen += 1;
                    self.learn_if_pending(IpAddr::V4(a.sender_ip), a.sender_mac);
                }
            },
            Body::Ndp { src, repr, .. } => match repr {
                NdpRepr::Solicit { target, source_mac } => {
                    if let Some(m) = source_mac {
                        self.learn_if_pending(IpAddr::V6(src), m);
                    }
                    if !self.owns(IpAddr::V6(target)) {
                        self.counters.requests_ignored += 1;
                        return Verdict::Consumed;
                    }
                    self.counters.requests_answered += 1;
                    // Duplicate address detection asks from `::`: the answer
                    // goes to all nodes, unsolicited (RFC 4861 7.2.4).
                    let (dst, eth_dst, solicited) = if src.is_unspecified() {
                        (ALL_NODES, wire::multicast_mac(ALL_NODES), false)
                    } else {
                        (src, source_mac.unwrap_or(parsed.eth_src), true)
                    };
                    self.queue(Frame {
                        eth_dst,
                        eth_src: mac,
                        body: Body::Ndp {
                            src: target,
                            dst,
                            repr: NdpRepr::Advert {
                                router: false,
                                solicited,
                                override_: true,
                                target,
                                target_mac: Some(mac),
                            },
                        },
                    });
                }
                NdpRepr::Advert {
                    target, target_mac, ..
                } => {
                    self.counters.replies_seen += 1;
                    self.learn_if_pending(IpAddr::V6(target), target_mac.unwrap_or(parsed.eth_src));
                }
            },
        }
        Verdict::Consumed
    }

    /// Records `ip` at `mac` when we asked for it (or knew it already): the
    /// table holds only what the port resolves, not the whole link.
    fn learn_if_pending(&mut self, ip: IpAddr, mac: [u8; 6]) {
        if let Some(e) = self.table.iter_mut().find(|e| e.0 == ip) {
            e.1 = mac;
            return;
        }
        if let Some(i) = self.pending.iter().position(|p| p.target == ip) {
            self.pending.swap_remove(i);
            self.table.push((ip, mac));
            self.counters.resolutions += 1;
        }
    }

    /// The next frame to send, written into `buf` (at least
    /// [`wire::MAX_EMIT`] bytes); its length.
    #[must_use]
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        let f = self.out.pop_front()?;
        f.emit(buf)
    }

    /// Whether frames wait in [`Neighbour::poll_transmit`].
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }
}

/// ff02::1, all nodes on the link.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

#[cfg(test)]
mod test {
    use super::*;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xaa];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 0xbb];

    fn core() -> Neighbour {
        Neighbour::new(Config {
            mac: MAC,
            addrs: vec![
                Owned::parse("10.1.0.2/24").unwrap(),
                Owned::parse("fd00:1::2/64").unwrap(),
            ],
        })
    }

    fn emit(f: Frame) -> Vec<u8> {
        let mut b = vec![0u8; wire::MAX_EMIT];
        let n = f.emit(&mut b).unwrap();
        b.truncate(n);
        b
    }

    fn arp_request(target: Ipv4Addr) -> Vec<u8> {
        emit(Frame {
            eth_dst: BROADCAST,
            eth_src: PEER,
            body: Body::Arp(ArpRepr {
                op: ArpOp::Request,
                sender_mac: PEER,
                sender_ip: Ipv4Addr::new(10, 1, 0, 1),
                target_mac: [0; 6],
                target_ip: target,
            }),
        })
    }

    fn sent(n: &mut Neighbour) -> Vec<Frame> {
        let mut b = [0u8; wire::MAX_EMIT];
        let mut v = Vec::new();
        while let Some(len) = n.poll_transmit(&mut b) {
            v.push(Frame::parse(&b[..len]).unwrap());
        }
        v
    }

    #[test]
    fn owned_parse_and_contains() {
        let a = Owned::parse("10.1.0.2/24").unwrap();
        assert!(a.contains("10.1.0.200".parse().unwrap()));
        assert!(!a.contains("10.1.1.1".parse().unwrap()));
        assert!(!a.contains("fd00::1".parse().unwrap()));
        assert_eq!(Owned::parse("fd00::1").unwrap().prefix, 128);
        assert!(Owned::parse("10.0.0.1/33").is_err());
        assert!(Owned::parse("0.0.0.0/8").is_err());
        assert!(Owned::parse("ff02::1").is_err());
        assert!(Owned::parse("x/8").is_err());
        assert!(Owned::parse("10.0.0.1/0")
            .unwrap()
            .contains("1.2.3.4".parse().unwrap()));
    }

    #[test]
    fn answers_arp_for_owned_only() {
        let mut n = core();
        assert_eq!(
            n.handle_frame(&arp_request(Ipv4Addr::new(10, 1, 0, 2))),
            Verdict::Consumed
        );
        let out = sent(&mut n);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].eth_dst, PEER);
        assert_eq!(
            out[0].body,
            Body::Arp(ArpRepr {
                op: ArpOp::Reply,
                sender_mac: MAC,
                sender_ip: Ipv4Addr::new(10, 1, 0, 2),
                target_mac: PEER,
                target_ip: Ipv4Addr::new(10, 1, 0, 1),
            })
        );
        n.handle_frame(&arp_request(Ipv4Addr::new(10, 1, 0, 3)));
        assert!(sent(&mut n).is_empty());
        let c = n.counters();
        assert_eq!((c.requests_answered, c.requests_ignored), (1, 1));
    }

    #[test]
    fn answers_ns_and_dad() {
        let mut n = core();
        let target: Ipv6Addr = "fd00:1::2".parse().unwrap();
        let ns = |src: Ipv6Addr, opt| {
            emit(Frame {
                eth_dst: wire::multicast_mac(wire::solicited_node(target)),
                eth_src: PEER,
                body: Body::Ndp {
                    src,
                    dst: wire::solicited_node(target),
                    repr: NdpRepr::Solicit {
                        target,
                        source_mac: opt,
                    },
                },
            })
        };
        n.handle_frame(&ns("fd00:1::1".parse().unwrap(), Some(PEER)));
        let out = sent(&mut n);
        assert_eq!(out[0].eth_dst, PEER);
        assert!(matches!(
            out[0].body,
            Body::Ndp { src, repr: NdpRepr::Advert { solicited: true, override_: true, target_mac: Some(MAC), .. }, .. } if src == target
        ));
        n.handle_frame(&ns(Ipv6Addr::UNSPECIFIED, None));
        let out = sent(&mut n);
        assert!(matches!(
            out[0].body,
            Body::Ndp {
                dst: ALL_NODES,
                repr: NdpRepr::Advert {
                    solicited: false,
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn resolves_with_retries_then_fails() {
        let mut n = core();
        let gw: IpAddr = "10.1.0.1".parse().unwrap();
        let t0 = Instant::from_millis(1);
        let iv = Duration::from_millis(100);
        n.resolve(t0, gw, "10.1.0.2".parse().unwrap(), 3, iv);
        assert_eq!(sent(&mut n).len(), 1);
        assert_eq!(n.resolution(gw), Resolution::Pending { attempts: 1 });
        assert_eq!(n.poll_timeout(), Some(t0 + iv));
        n.handle_timeout(t0 + iv);
        n.handle_timeout(t0 + iv * 2);
        assert_eq!(sent(&mut n).len(), 2);
        n.handle_timeout(t0 + iv * 3);
        assert_eq!(n.resolution(gw), Resolution::Failed { attempts: 3 });
        assert_eq!(n.poll_timeout(), None);
        // An answer, late or not, resolves.
        n.resolve(t0, gw, "10.1.0.2".parse().unwrap(), 3, iv);
        let reply = emit(Frame {
            eth_dst: MAC,
            eth_src: PEER,
            body: Body::Arp(ArpRepr {
                op: ArpOp::Reply,
                sender_mac: PEER,
                sender_ip: Ipv4Addr::new(10, 1, 0, 1),
                target_mac: MAC,
                target_ip: Ipv4Addr::new(10, 1, 0, 2),
            }),
        });
        n.handle_frame(&reply);
        assert_eq!(n.resolution(gw), Resolution::Resolved(PEER));
        assert_eq!(n.counters().resolutions, 1);
    }

    #[test]
    fn resolves_v6_and_ignores_unasked() {
        let mut n = core();
        let gw: Ipv6Addr = "fd00:1::1".parse().unwrap();
        n.resolve(
            Instant::from_millis(1),
            IpAddr::V6(gw),
            "fd00:1::2".parse().unwrap(),
            3,
            Duration::from_millis(10),
        );
        let ns = sent(&mut n);
        assert_eq!(ns[0].eth_dst, [0x33, 0x33, 0xff, 0, 0, 1]);
        let na = |t: Ipv6Addr| {
            emit(Frame {
                eth_dst: MAC,
                eth_src: PEER,
                body: Body::Ndp {
                    src: t,
                    dst: "fd00:1::2".parse().unwrap(),
                    repr: NdpRepr::Advert {
                        router: true,
                        solicited: true,
                        override_: true,
                        target: t,
                        target_mac: Some(PEER),
                    },
                },
            })
        };
        n.handle_frame(&na("fd00:1::9".parse().unwrap()));
        assert_eq!(n.lookup("fd00:1::9".parse().unwrap()), None);
        n.handle_frame(&na(gw));
        assert_eq!(n.lookup(IpAddr::V6(gw)), Some(PEER));
    }

    #[test]
    fn counts_non_ip_malformed_and_passes_ip() {
        let mut n = core();
        use crate::net::ethernet::{ethertype, Frame};
        let mut f = arp_request(Ipv4Addr::new(10, 1, 0, 2));
        Frame::new_unchecked(&mut f[..]).set_ethertype(0x88cc); // LLDP
        assert_eq!(n.handle_frame(&f), Verdict::Consumed);
        let mut f = arp_request(Ipv4Addr::new(10, 1, 0, 2));
        wire::ArpPacket::new_unchecked(&mut f[wire::ETH_LEN..]).set_header(9);
        assert_eq!(n.handle_frame(&f), Verdict::Consumed);
        assert_eq!(n.handle_frame(&f[..20]), Verdict::Consumed);
        Frame::new_unchecked(&mut f[..]).set_ethertype(ethertype::IPV4);
        assert_eq!(n.handle_frame(&f), Verdict::Pass);
        let c = n.counters();
        assert_eq!((c.non_ip, c.malformed, c.sent), (1, 2, 0));
    }

    #[test]
    fn announces_every_address_and_bounds_its_queue() {
        let mut n = core();
        n.announce();
        let out = sent(&mut n);
        assert_eq!(out.len(), 2);
        assert!(matches!(out[0].body, Body::Arp(a) if a.sender_ip == a.target_ip));
        assert!(matches!(out[1].body, Body::Ndp { dst: ALL_NODES, .. }));
        for _ in 0..OUT_MAX + 5 {
            n.handle_frame(&arp_request(Ipv4Addr::new(10, 1, 0, 2)));
        }
        assert_eq!(n.counters().out_dropped, 5);
    }
}
