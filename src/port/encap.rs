//! UDP datagrams over a frame port: what lets a stage written for a udp port
//! (the reliable channel, the RPC bench) run on a dpdk port or a mem wire.
//!
//! [`wrap`] puts a thin layer on each queue of an opened port. Its transmit
//! side prepends Ethernet/IPv4/UDP headers to each datagram, in the packet's
//! headroom (no copy), from a template made once: our MAC and address, the
//! peer's MAC (resolved by the caller, before any stage runs) and address.
//! Its receive side keeps only IPv4/UDP frames (VLAN-tagged or not) from the
//! peer's address to ours, strips their headers in place (and any Ethernet
//! padding), and drops everything else, counted (`udp_other_frames`). A frame port's neighbour
//! layer ([`crate::neigh`]) sits beneath, so ARP still reaches it.
//!
//! The UDP checksum is sent as zero (IPv4 allows it: "not computed") and not
//! checked on receipt: the protocols carried here check their own payloads,
//! and a link's FCS covers each hop. The IPv4 header checksum is set and
//! checked. Fragments are not reassembled (they are counted as other frames):
//! datagrams must fit the link's MTU, as the reliable channel's `data_mtu`
//! (1472 bytes) does on a 1500-byte Ethernet.

use std::net::SocketAddrV4;
use std::sync::Arc;

use super::{OpenPort, PortReport, PortStats, RxQueue, TxQueue};
use crate::buf::counter::{CacheAligned, Counter};
use crate::buf::Burst;
use crate::net::stack::{set_udp_v4_payload_len, UdpV4, UDP_V4_HEADERS};
use crate::net::{ipv4, udp_payload, IpVersion};
use crate::time::Instant;

/// Ethernet, IPv4 (no options) and UDP header bytes in front of a datagram.
pub const HEADERS: usize = UDP_V4_HEADERS;

/// The two ends a port's datagrams travel between, with their MAC addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ends {
    /// Our MAC address.
    pub mac: [u8; 6],
    /// Our address: datagrams are sent from it and received at it.
    pub local: SocketAddrV4,
    /// The peer's MAC address (its own, or the next hop's).
    pub peer_mac: [u8; 6],
    /// The peer's address: datagrams go to it and are taken only from it.
    pub peer: SocketAddrV4,
}

impl Ends {
    /// The headers of an empty datagram from `local` to `peer` (don't
    /// fragment, TTL 64): a packet's lengths are patched in by
    /// [`set_udp_v4_payload_len`].
    fn template(&self) -> [u8; HEADERS] {
        let mut h = [0u8; HEADERS];
        UdpV4 {
            src_mac: self.mac,
            dst_mac: self.peer_mac,
            src: self.local,
            dst: self.peer,
            ttl: 64,
            payload_len: 0,
        }
        .emit(&mut h);
        h
    }
}

/// Where a UDP datagram's payload sits in `frame`: `Some((start, len))` when
/// `frame` is an unfragmented IPv4/UDP datagram (VLAN tags allowed) from
/// `from` to `to` with a valid header checksum and lengths that fit the
/// frame. Bounds-checked; never panics.
pub fn payload_of(frame: &[u8], from: &SocketAddrV4, to: &SocketAddrV4) -> Option<(usize, usize)> {
    let v = udp_payload(frame).ok()?;
    if v.version() != IpVersion::V4 {
        return None;
    }
    let ip = ipv4::Packet::new_checked(v.ip()).ok()?;
    if !ip.verify_checksum() || ip.src_addr() != *from.ip() || ip.dst_addr() != *to.ip() {
        return None;
    }
    let u = v.udp();
    if u.src_port() != from.port() || u.dst_port() != to.port() {
        return None;
    }
    let r = v.payload_range();
    Some((r.start, r.len()))
}

/// Counters of one queue's layer (one writer each: the queue's lcore).
#[derive(Debug, Default)]
struct Counters {
    /// Received frames that were not datagrams from the peer to us.
    other: Counter,
    /// Datagrams that could not be sent: no headroom for the headers, or
    /// too long for an IPv4 packet.
    tx_unsent: Counter,
}

/// Wraps every queue of `port` so that it carries UDP datagrams between
/// `ends`; the port's report gains `udp_other_frames` and `udp_tx_unsent`.
pub fn wrap(port: OpenPort, ends: Ends) -> OpenPort {
    let mut all = Vec::new();
    let mut counters = || {
        let c = Arc::new(CacheAligned::<Counters>::default());
        all.push(c.clone());
        c
    };
    let rx = port
        .rx
        .into_iter()
        .map(|inner| {
            Box::new(EncapRx {
                inner,
                ends,
                counters: counters(),
            }) as Box<dyn RxQueue>
        })
        .collect();
    let template = ends.template();
    let tx = port
        .tx
        .into_iter()
        .map(|inner| {
            Box::new(EncapTx {
                inner,
                template,
                counters: counters(),
            }) as Box<dyn TxQueue>
        })
        .collect();
    OpenPort {
        rx,
        tx,
        stats: Arc::new(EncapStats {
            inner: port.stats,
            counters: all,
        }),
        warnings: port.warnings,
    }
}

struct EncapRx {
    inner: Box<dyn RxQueue>,
    ends: Ends,
    counters: Arc<CacheAligned<Counters>>,
}

impl RxQueue for EncapRx {
    #[inline]
    fn rx_burst(&mut self, now: Instant, out: &mut Burst, max: usize) -> usize {
        let start = out.len();
        if self.inner.rx_burst(now, out, max) == 0 {
            return 0;
        }
        let v = out.vec_mut();
        let mut kept = start;
        for i in start..v.len() {
            let Some((at, len)) = payload_of(v[i].data(), &self.ends.peer, &self.ends.local) else {
                continue;
            };
            let p = &mut v[i];
            // Cannot fail: `payload_of` checked both against the data.
            if p.adj(at).is_ok() {
                p.truncate(len);
                v.swap(kept, i);
                kept += 1;
            }
        }
        self.counters.other.add((v.len() - kept) as u64);
        // Dropping the others frees their buffers.
        v.truncate(kept);
        kept - start
    }

    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    fn is_finite(&self) -> bool {
        self.inner.is_finite()
    }
}

struct EncapTx {
    inner: Box<dyn TxQueue>,
    template: [u8; HEADERS],
    counters: Arc<CacheAligned<Counters>>,
}

impl TxQueue for EncapTx {
    #[inline]
    fn tx_burst(&mut self, now: Instant, pkts: &mut Burst) -> usize {
        let v = pkts.vec_mut();
        let before = v.len();
        v.retain_mut(|p| {
            let len = p.len();
            let Ok(ip_len) = u16::try_from(20 + 8 + len) else {
                return false;
            };
            let Ok(h) = p.prepend(HEADERS) else {
                return false;
            };
            h.copy_from_slice(&self.template);
            set_udp_v4_payload_len(h, ip_len - 28);
            true
        });
        self.counters.tx_unsent.add((before - v.len()) as u64);
        let taken = self.inner.tx_burst(now, pkts);
        // What the port did not take goes back to the caller as it came, to
        // be offered again.
        for p in pkts.iter_mut() {
            let _ = p.adj(HEADERS);
        }
        taken
    }

    #[inline]
    fn alloc(&mut self, out: &mut Burst, n: usize) -> Option<usize> {
        self.inner.alloc(out, n)
    }

    fn flush(&mut self, now: Instant) {
        self.inner.flush(now);
    }

    fn finish(&mut self) -> Result<(), super::PortError> {
        self.inner.finish()
    }
}

struct EncapStats {
    inner: Arc<dyn PortStats>,
    counters: Vec<Arc<CacheAligned<Counters>>>,
}

impl PortStats for EncapStats {
    fn report(&self) -> PortReport {
        let mut r = self.inner.report();
        let sum = |f: fn(&Counters) -> u64| self.counters.iter().map(|c| f(c)).sum::<u64>();
        r.detail.insert("udp_other_frames", sum(|c| c.other.get()));
        r.detail.insert("udp_tx_unsent", sum(|c| c.tx_unsent.get()));
        r
    }

    fn in_flight(&self) -> u64 {
        self.inner.in_flight()
    }

    fn mac(&self) -> Option<[u8; 6]> {
        self.inner.mac()
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::buf::{Pool, PoolConfig};
    use crate::port::mem::{self, MemConfig};
    use proptest::prelude::*;

    fn ends() -> (Ends, Ends) {
        let a: SocketAddrV4 = "10.77.0.11:47201".parse().unwrap();
        let b: SocketAddrV4 = "10.77.0.12:47202".parse().unwrap();
        let (ma, mb) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
        (
            Ends {
                mac: ma,
                local: a,
                peer_mac: mb,
                peer: b,
            },
            Ends {
                mac: mb,
                local: b,
                peer_mac: ma,
                peer: a,
            },
        )
    }

    fn pool() -> Pool {
        Pool::new(&PoolConfig {
            name: "encap-test".into(),
            count: 256,
            ..PoolConfig::default()
        })
        .unwrap()
    }

    /// A mem wire's tx side wrapped as `tx_as` (unwrapped when `None`) and
    /// its rx side as `rx_as`.
    fn wire(tx_as: Option<Ends>, rx_as: Option<Ends>) -> (OpenPort, OpenPort) {
        let w = mem::open(&MemConfig::default());
        let half = |rx, tx, ends: Option<Ends>| {
            let p = OpenPort {
                rx,
                tx,
                stats: w.stats.clone(),
                warnings: Vec::new(),
            };
            match ends {
                Some(e) => wrap(p, e),
                None => p,
            }
        };
        (half(Vec::new(), w.tx, tx_as), half(w.rx, Vec::new(), rx_as))
    }

    #[test]
    fn datagrams_cross_a_wire_and_others_are_dropped() {
        let pool = pool();
        let (a, b) = ends();
        let now = crate::time::monotonic_now();
        // a's frames, as they leave.
        let (mut tx, mut raw_rx) = wire(Some(a), None);
        let mut burst = Burst::new();
        for n in [1usize, 7, 1472] {
            let mut p = pool.alloc().unwrap();
            p.set_data(&vec![n as u8; n]).unwrap();
            burst.push(p).unwrap();
        }
        // A packet without headroom for the headers is not sent, counted.
        let bare_pool = Pool::new(&PoolConfig {
            name: "encap-bare".into(),
            count: 4,
            headroom: 0,
            ..PoolConfig::default()
        })
        .unwrap();
        let mut bare = bare_pool.alloc().unwrap();
        bare.set_data(&[1, 2, 3]).unwrap();
        burst.push(bare).unwrap();
        assert_eq!(tx.tx[0].tx_burst(now, &mut burst), 3);
        assert!(burst.is_empty());
        assert_eq!(tx.stats.report().detail["udp_tx_unsent"], 1);
        let mut frames = Burst::new();
        assert_eq!(raw_rx.rx[0].rx_burst(now, &mut frames, 64), 3);
        assert!(frames.iter().all(|f| f.len() > HEADERS));
        // b receives them, with a frame that is no datagram and one sent
        // the wrong way (b to a): those two dropped, counted.
        let mut junk = pool.alloc().unwrap();
        junk.set_data(&[0u8; 60]).unwrap();
        frames.push(junk).unwrap();
        let mut wrong = pool.alloc().unwrap();
        wrong.set_data(&[9u8; 5]).unwrap();
        let (mut tx_b, mut raw_b) = wire(Some(b), None);
        let mut one = Burst::new();
        one.push(wrong).unwrap();
        assert_eq!(tx_b.tx[0].tx_burst(now, &mut one), 1);
        assert_eq!(raw_b.rx[0].rx_burst(now, &mut frames, 64), 1);
        let (mut raw_tx, mut rx) = wire(None, Some(b));
        assert_eq!(raw_tx.tx[0].tx_burst(now, &mut frames), 5);
        let mut got = Burst::new();
        assert_eq!(rx.rx[0].rx_burst(now, &mut got, 64), 3);
        let lens: Vec<usize> = got.iter().map(|p| p.len()).collect();
        assert_eq!(lens, [1, 7, 1472]);
        for p in got.iter() {
            assert!(p.data().iter().all(|&x| x == p.len() as u8));
        }
        assert_eq!(rx.stats.report().detail["udp_other_frames"], 2);
    }

    #[test]
    fn frames_from_elsewhere_are_not_datagrams() {
        use crate::net::{ethernet, ipv4, udp};
        let (a, b) = ends();
        let mut f = vec![0u8; HEADERS + 10];
        f[..HEADERS].copy_from_slice(&a.template());
        set_udp_v4_payload_len(&mut f, 10);
        assert_eq!(payload_of(&f, &a.local, &b.local), Some((HEADERS, 10)));
        // Wrong direction, wrong port, bad checksum, fragment, short frame.
        assert_eq!(payload_of(&f, &b.local, &a.local), None);
        fn ip(g: &mut [u8]) -> ipv4::Packet<&mut [u8]> {
            ipv4::Packet::new_unchecked(&mut g[ethernet::HEADER_LEN..])
        }
        let mut g = f.clone();
        let mut u = udp::Packet::new_unchecked(&mut g[HEADERS - udp::HEADER_LEN..]);
        u.set_dst_port(u.dst_port() ^ 1);
        assert_eq!(payload_of(&g, &a.local, &b.local), None);
        let mut g = f.clone();
        let c = ip(&mut g).checksum();
        ip(&mut g).set_checksum(c ^ 0x0100);
        assert_eq!(payload_of(&g, &a.local, &b.local), None);
        let mut g = f.clone();
        ip(&mut g).set_frag(false, true, 0);
        ip(&mut g).fill_checksum();
        assert_eq!(payload_of(&g, &a.local, &b.local), None);
        assert_eq!(payload_of(&f[..HEADERS - 1], &a.local, &b.local), None);
        // Ethernet padding after the datagram is not payload.
        let mut g = f.clone();
        g.extend_from_slice(&[0xee; 20]);
        assert_eq!(payload_of(&g, &a.local, &b.local), Some((HEADERS, 10)));
    }

    proptest! {
        #[test]
        fn payload_of_never_panics(frame in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (a, b) = ends();
            if let Some((at, len)) = payload_of(&frame, &a.local, &b.local) {
                prop_assert!(at + len <= frame.len());
            }
        }
    }
}
