//! Ethernet/IPv4/UDP and Ethernet/IPv6/UDP frames built from a template once
//! and patched per packet.
//!
//! For each frame size a template holds the whole frame and the
//! ones'-complement sums of its constant parts; per packet only the flow's
//! addresses and ports and the stamp are written, and the checksums are
//! completed from the precomputed sums (the Internet checksum is a sum, so the
//! variable words are simply added). No allocation, no loop over the payload.
//!
//! The address family follows the addresses: IPv6 addresses give IPv6 frames
//! (40-byte header, no header checksum, a UDP checksum over the IPv6
//! pseudo-header, which IPv6 makes mandatory: a computed 0 is sent as
//! 0xffff). An IPv6 frame needs [`MIN_FRAME_V6`] bytes to carry the stamp.
//!
//! An [`Encap`] (VLAN, QinQ, MPLS, VXLAN) wraps the frame: see `encap.rs`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};

mod encap;
pub use encap::{Encap, Vxlan, MAX_LABEL, MAX_LABELS, MAX_VID, MAX_VNI, VXLAN_OVERHEAD};
use encap::{Inner, Prefix};

use super::stamp::{self, Repr as StampRepr, Stamp, LEN as STAMP_LEN};
use crate::net::checksum::{add128, add32, add_bytes, fold};
use crate::net::stack::{UdpV4, UDP_V4_HEADERS, UDP_V6_HEADERS};
use crate::net::{ethernet, ipv4, ipv6, udp};
use crate::rng::SplitMix64;

/// Ethernet + IPv4 + UDP header bytes.
pub const HEADERS: usize = UDP_V4_HEADERS;
/// Ethernet + IPv6 + UDP header bytes.
pub const HEADERS_V6: usize = UDP_V6_HEADERS;
/// Where the IP header starts.
const IP_AT: usize = ethernet::HEADER_LEN;
/// Where the UDP header starts in an IPv4 frame.
const UDP_AT: usize = HEADERS - udp::HEADER_LEN;
/// Where the UDP header starts in an IPv6 frame.
const UDP_AT_V6: usize = HEADERS_V6 - udp::HEADER_LEN;
/// Smallest frame (FCS included) that holds headers and stamp.
pub const MIN_FRAME: usize = 64;
/// Smallest IPv6 frame (FCS included) that holds headers and stamp.
pub const MIN_FRAME_V6: usize = HEADERS_V6 + STAMP_LEN + FCS;
/// Largest frame (FCS included).
pub const MAX_FRAME: usize = 9018;
const FCS: usize = 4;

/// A contiguous range of IPv4 or IPv6 addresses, `first..=last` (at most
/// 2^32 of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRange {
    /// First address.
    pub first: IpAddr,
    /// Number of addresses.
    pub count: u32,
}

impl AddrRange {
    /// One IPv4 address.
    pub const fn v4(a: Ipv4Addr) -> AddrRange {
        AddrRange {
            first: IpAddr::V4(a),
            count: 1,
        }
    }

    /// One IPv6 address.
    pub const fn v6(a: Ipv6Addr) -> AddrRange {
        AddrRange {
            first: IpAddr::V6(a),
            count: 1,
        }
    }

    /// The `count` addresses from the `skip`-th on (a replica's slice; the
    /// caller keeps `skip + count` within this range).
    pub fn slice(&self, skip: u32, count: u32) -> AddrRange {
        let first = match self.first {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a).wrapping_add(skip))),
            IpAddr::V6(a) => {
                IpAddr::V6(Ipv6Addr::from(u128::from(a).wrapping_add(u128::from(skip))))
            }
        };
        AddrRange { first, count }
    }

    /// Parses `"10.0.0.1"`, `"10.0.0.1-10.0.0.100"`, `"fd00::1"` or
    /// `"fd00::1-fd00::ff"` (both ends of one family).
    pub fn parse(s: &str) -> Result<AddrRange, String> {
        let bad = || {
            format!(
                "`{s}` is not an address or range like \"10.0.0.1-10.0.0.100\" or \"fd00::1-fd00::ff\""
            )
        };
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a: IpAddr = a.trim().parse().map_err(|_| bad())?;
        let b: IpAddr = b.trim().parse().map_err(|_| bad())?;
        let (x, y) = match (a, b) {
            (IpAddr::V4(x), IpAddr::V4(y)) => (u128::from(u32::from(x)), u128::from(u32::from(y))),
            (IpAddr::V6(x), IpAddr::V6(y)) => (u128::from(x), u128::from(y)),
            _ => return Err(format!("`{s}` mixes an IPv4 and an IPv6 address")),
        };
        if y < x {
            return Err(bad());
        }
        let count = u32::try_from(y - x + 1)
            .map_err(|_| format!("`{s}` spans more than 2^32 addresses"))?;
        Ok(AddrRange { first: a, count })
    }

    /// Whether the range is IPv6.
    pub fn is_v6(&self) -> bool {
        self.first.is_ipv6()
    }

    /// The first address as a number; an IPv4 address in an IPv6 frame is
    /// IPv4-mapped (`::ffff:a.b.c.d`).
    fn base(&self, v6: bool) -> u128 {
        match self.first {
            IpAddr::V4(a) if v6 => u128::from(a.to_ipv6_mapped()),
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        }
    }
}

/// A contiguous range of UDP ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub first: u16,
    /// Number of ports.
    pub count: u32,
}

impl PortRange {
    /// Parses `"1024"` or `"1024-2047"`.
    pub fn parse(s: &str) -> Result<PortRange, String> {
        let bad = || format!("`{s}` is not a UDP port or range like \"1024-2047\"");
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a: u16 = a.trim().parse().map_err(|_| bad())?;
        let b: u16 = b.trim().parse().map_err(|_| bad())?;
        if b < a {
            return Err(bad());
        }
        Ok(PortRange {
            first: a,
            count: u32::from(b - a) + 1,
        })
    }
}

/// How flows are chosen packet by packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowOrder {
    /// Flow k, k+1, ... in turn.
    #[default]
    RoundRobin,
    /// A seeded random flow per packet.
    Random,
}

/// Frame sizes: one, or an IMIX of several with integer weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sizes {
    /// Every frame this size (FCS included).
    Fixed(usize),
    /// Sizes and their weights, interleaved in a fixed cycle.
    Imix(Vec<(usize, u32)>),
}

impl Sizes {
    /// The default IMIX: 7:4:1 of 64/570/1518.
    pub fn default_imix() -> Sizes {
        Sizes::Imix(vec![(64, 7), (570, 4), (1518, 1)])
    }

    /// Average frame size (FCS included), for rate conversion.
    pub fn average(&self) -> f64 {
        match self {
            Sizes::Fixed(s) => *s as f64,
            Sizes::Imix(v) => {
                let w: u64 = v.iter().map(|x| u64::from(x.1)).sum();
                v.iter().map(|x| x.0 as f64 * f64::from(x.1)).sum::<f64>() / w as f64
            }
        }
    }

    /// The largest frame.
    pub fn max(&self) -> usize {
        match self {
            Sizes::Fixed(s) => *s,
            Sizes::Imix(v) => v.iter().map(|x| x.0).max().unwrap_or(MIN_FRAME),
        }
    }
}

/// What the generator sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSpec {
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source addresses.
    pub src_ip: AddrRange,
    /// Destination addresses.
    pub dst_ip: AddrRange,
    /// Source ports.
    pub src_port: PortRange,
    /// Destination ports.
    pub dst_port: PortRange,
    /// Flow order.
    pub order: FlowOrder,
    /// Frame sizes.
    pub sizes: Sizes,
    /// Seed for random flow choice.
    pub seed: u64,
    /// What the frames are wrapped in.
    pub encap: Encap,
}

/// The default IPv6 source address (a unique local address, as 10.0.0.1 is
/// a private IPv4 one).
pub const DEFAULT_SRC_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
/// The default IPv6 destination address.
pub const DEFAULT_DST_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

impl Default for FrameSpec {
    fn default() -> Self {
        FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: AddrRange::v4(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: AddrRange::v4(Ipv4Addr::new(10, 0, 0, 2)),
            src_port: PortRange {
                first: 1024,
                count: 1,
            },
            dst_port: PortRange {
                first: 1024,
                count: 1,
            },
            order: FlowOrder::RoundRobin,
            sizes: Sizes::Fixed(64),
            seed: 1,
            encap: Encap::None,
        }
    }
}

impl FrameSpec {
    /// Whether the frames are IPv6 (the source addresses are; the pipeline
    /// checks both ranges are of one family).
    pub fn is_v6(&self) -> bool {
        self.src_ip.is_v6()
    }

    /// The smallest frame of this family and encapsulation that carries
    /// the stamp.
    pub fn min_frame(&self) -> usize {
        self.encap.overhead()
            + if self.is_v6() {
                MIN_FRAME_V6
            } else {
                MIN_FRAME
            }
    }

    /// Number of distinct flows (the product of the four ranges and a VLAN
    /// range).
    pub fn flows(&self) -> u64 {
        [
            self.encap.vlans(),
            self.src_ip.count,
            self.dst_ip.count,
            self.src_port.count,
            self.dst_port.count,
        ]
        .iter()
        .map(|&c| u64::from(c))
        .product()
    }
}

/// The Internet checksum of `bytes` (with its checksum field zeroed).
pub use crate::net::checksum::checksum;

/// Bytes of a frame's head that every IPv4 packet patches: headers and stamp
/// (60) rounded up to a whole 64-byte copy.
const HEAD: usize = 64;
const _: () = assert!(HEADERS + STAMP_LEN <= HEAD && MIN_FRAME - FCS <= HEAD);

struct Template {
    frame: Vec<u8>,
    /// The frame's first [`HEAD`] bytes, zero-padded: copied as one fixed-size
    /// block, so the per-packet copy and patches compile to plain stores
    /// without a `memmove` call or bounds checks.
    head: [u8; HEAD],
    /// Sum of the IPv4 header without addresses and checksum (0 for IPv6).
    ip_base: u32,
    /// Sum of UDP pseudo-header and datagram without addresses, ports, stamp, checksum.
    udp_base: u32,
    /// IPv4: the UDP sum of everything in `head` but the words a packet
    /// writes itself (the stamp's sequence and flags, and the flow's
    /// addresses and ports unless there is one flow), set per burst by
    /// [`FrameBuilder::begin_burst`].
    burst_sum: u32,
}

/// The first [`HEAD`] bytes of a frame, zero-padded.
fn head_of(frame: &[u8]) -> [u8; HEAD] {
    let mut h = [0u8; HEAD];
    let n = frame.len().min(HEAD);
    h[..n].copy_from_slice(&frame[..n]);
    h
}

impl Template {
    /// The template of `size`-byte frames (FCS and encapsulation included),
    /// and the encapsulation's prefix for it.
    fn new(spec: &FrameSpec, size: usize) -> (Template, Prefix) {
        let size = size.saturating_sub(spec.encap.overhead());
        let t = if spec.is_v6() {
            Template::new_v6(spec, size.max(MIN_FRAME_V6))
        } else {
            Template::new_v4(spec, size.max(MIN_FRAME))
        };
        let prefix = Prefix::new(
            &spec.encap,
            &Inner {
                src_mac: spec.src_mac,
                dst_mac: spec.dst_mac,
                ethertype: if spec.is_v6() {
                    ethernet::ethertype::IPV6
                } else {
                    ethernet::ethertype::IPV4
                },
                len: t.frame.len(),
                src_port: spec.src_port.first,
            },
        );
        (t, prefix)
    }

    fn new_v4(spec: &FrameSpec, size: usize) -> Template {
        let len = size - FCS;
        let mut f = vec![0u8; len];
        // Addresses, ports and both checksums are the packet's: zero here.
        UdpV4 {
            src_mac: spec.src_mac,
            dst_mac: spec.dst_mac,
            src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            dst: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            ttl: 64,
            payload_len: len - HEADERS,
        }
        .emit(&mut f);
        let mut ip = ipv4::Packet::new_unchecked(&mut f[IP_AT..UDP_AT]);
        ip.set_checksum(0);
        let ip_base = add_bytes(0, ip.into_inner());
        // Pseudo-header: protocol and UDP length; then the UDP length field itself.
        let udp_len = (len - UDP_AT) as u16;
        let udp_base = u32::from(ipv4::protocol::UDP) + u32::from(udp_len) * 2;
        Template {
            head: head_of(&f),
            frame: f,
            ip_base,
            udp_base,
            burst_sum: udp_base,
        }
    }

    /// Ethernet/IPv6/UDP: version 6, traffic class and flow label 0, payload
    /// length, next header UDP, hop limit 64; addresses, ports, stamp and UDP
    /// checksum are written per packet.
    fn new_v6(spec: &FrameSpec, size: usize) -> Template {
        let len = size - FCS;
        let mut f = vec![0u8; len];
        let udp_len = (len - UDP_AT_V6) as u16;
        ethernet::Repr {
            src_addr: spec.src_mac,
            dst_addr: spec.dst_mac,
            ethertype: ethernet::ethertype::IPV6,
        }
        .emit(&mut ethernet::Frame::new_unchecked(&mut f[..]));
        ipv6::Repr {
            src_addr: Ipv6Addr::UNSPECIFIED,
            dst_addr: Ipv6Addr::UNSPECIFIED,
            next_header: ipv4::protocol::UDP,
            payload_len: usize::from(udp_len),
            hop_limit: 64,
        }
        .emit(&mut ipv6::Packet::new_unchecked(&mut f[IP_AT..]));
        udp::Repr {
            src_port: 0,
            dst_port: 0,
            payload_len: usize::from(udp_len) - udp::HEADER_LEN,
        }
        .emit(&mut udp::Packet::new_unchecked(&mut f[UDP_AT_V6..]));
        // Pseudo-header: upper-layer length (32 bits, high half 0) and next
        // header; then the UDP length field itself.
        let udp_base = u32::from(ipv4::protocol::UDP) + u32::from(udp_len) * 2;
        Template {
            head: head_of(&f),
            frame: f,
            ip_base: 0,
            udp_base,
            burst_sum: udp_base,
        }
    }
}

/// Writes frames of a [`FrameSpec`] into packet buffers.
pub struct FrameBuilder {
    templates: Vec<Template>,
    /// The encapsulation's bytes per template (kept apart, so the plain
    /// path's templates are no larger).
    prefixes: Vec<Prefix>,
    /// Template index per slot of the size cycle.
    cycle: Vec<u8>,
    spec: FrameSpec,
    /// IPv6 frames.
    v6: bool,
    /// First source and destination address as numbers (IPv4 in the low 32 bits).
    src_base: u128,
    dst_base: u128,
    /// IPv6: the checksum sum of both first addresses' words, so a packet adds
    /// only its address offsets (see [`add128`]).
    addr_sum: u32,
    flows: u64,
    rng: SplitMix64,
    /// Sizes of the four flow fields: destination port, source port,
    /// destination address, source address (the first varies fastest, after
    /// the VLAN id of a range).
    counts: [u32; 4],
    /// Round-robin: the next flow's offset in each field (an odometer, so a
    /// packet costs compares, not divisions).
    pos: [u32; 4],
    /// VLAN ids of a range, and the next flow's offset into it.
    vlans: u32,
    vlan_pos: u32,
    next_size: usize,
    /// One IPv4 flow: its addresses, ports and IP checksum are in every
    /// template's head from the start, and a packet writes only its stamp's
    /// sequence and flags and the UDP checksum.
    one_flow_v4: bool,
    /// One IPv4 flow of one size, not encapsulated: the inlined path.
    fast: bool,
    /// Bytes the encapsulation adds in front of the frame.
    shift: usize,
    /// The stamp of the burst being written (sequence and flags per packet).
    stamp: StampRepr,
}

impl FrameBuilder {
    /// Builds the templates. Sizes must be within [`FrameSpec::min_frame`]..=
    /// [`MAX_FRAME`] (the pipeline validates this; smaller sizes are raised to
    /// the minimum). The family is the source addresses' (an IPv4 destination
    /// with IPv6 sources is sent IPv4-mapped).
    pub fn new(spec: &FrameSpec) -> FrameBuilder {
        let (sizes, cycle) = match &spec.sizes {
            Sizes::Fixed(s) => (vec![*s], vec![0u8]),
            Sizes::Imix(v) => {
                // Interleave: each slot takes the size furthest behind its share.
                let total: u32 = v.iter().map(|x| x.1).sum();
                let mut given = vec![0u32; v.len()];
                let mut cycle = Vec::with_capacity(total as usize);
                for slot in 1..=total {
                    let (i, _) = v
                        .iter()
                        .enumerate()
                        .map(|(i, x)| {
                            (
                                i,
                                f64::from(x.1) * f64::from(slot) / f64::from(total)
                                    - f64::from(given[i]),
                            )
                        })
                        .fold((0, f64::MIN), |best, c| if c.1 > best.1 { c } else { best });
                    given[i] += 1;
                    cycle.push(i as u8);
                }
                (v.iter().map(|x| x.0).collect(), cycle)
            }
        };
        let (templates, prefixes) = sizes.iter().map(|&s| Template::new(spec, s)).unzip();
        let mut b = FrameBuilder {
            templates,
            prefixes,
            cycle,
            flows: spec.flows().max(1),
            rng: SplitMix64::new(spec.seed),
            v6: spec.is_v6(),
            src_base: spec.src_ip.base(spec.is_v6()),
            dst_base: spec.dst_ip.base(spec.is_v6()),
            addr_sum: u32::from(fold(add128(
                add128(0, spec.src_ip.base(spec.is_v6())),
                spec.dst_ip.base(spec.is_v6()),
            ))),
            counts: [
                spec.dst_port.count.max(1),
                spec.src_port.count.max(1),
                spec.dst_ip.count.max(1),
                spec.src_ip.count.max(1),
            ],
            pos: [0; 4],
            vlans: spec.encap.vlans(),
            vlan_pos: 0,
            spec: spec.clone(),
            next_size: 0,
            one_flow_v4: false,
            fast: false,
            shift: spec.encap.overhead(),
            stamp: StampRepr::default(),
        };
        if !b.v6 && b.flows == 1 {
            let (sip, dip) = (b.src_base as u32, b.dst_base as u32);
            let (sport, dport) = (
                u32::from(spec.src_port.first),
                u32::from(spec.dst_port.first),
            );
            for t in &mut b.templates {
                patch_flow_v4(t.ip_base, &mut t.head, (sip, dip), sport, dport);
                t.udp_base = add32(add32(t.udp_base, sip), dip) + sport + dport;
            }
            b.one_flow_v4 = true;
        }
        b.fast = b.one_flow_v4 && b.templates.len() == 1 && b.shift == 0;
        b.begin_burst(&StampRepr::default());
        b
    }

    /// The size (FCS included) of the next frame [`FrameBuilder::write`] writes.
    pub fn next_frame_len(&self) -> usize {
        self.templates[self.cycle[self.next_size] as usize]
            .frame
            .len()
            + self.shift
            + FCS
    }

    /// Writes the next frame into `buf` (which must hold the largest frame) and
    /// returns its length without FCS. A burst of frames whose stamps differ
    /// only in sequence and flags is cheaper written with
    /// [`FrameBuilder::begin_burst`] and [`FrameBuilder::write_next`].
    pub fn write(&mut self, buf: &mut [u8], stamp: &StampRepr) -> usize {
        self.begin_burst(stamp);
        self.write_next(buf, stamp.seq, stamp.flags)
    }

    /// Fixes the stamp fields that stay the same for a burst (stream, transmit
    /// time, epoch): they are written once into each template's head and
    /// summed once, so a packet costs a 64-byte copy and a few stores.
    pub fn begin_burst(&mut self, stamp: &StampRepr) {
        self.stamp = *stamp;
        if self.v6 {
            return;
        }
        let fixed = StampRepr {
            seq: 0,
            flags: 0,
            ..*stamp
        };
        let sum = fixed.word_sum();
        for t in &mut self.templates {
            fixed.emit(&mut Stamp::new_unchecked(stamp_of(&mut t.head)));
            t.burst_sum = t.udp_base + sum;
        }
    }

    /// Writes the next frame of the burst begun with
    /// [`FrameBuilder::begin_burst`], stamped with sequence `seq` and `flags`,
    /// into `buf` (which must hold the largest frame); returns its length
    /// without FCS.
    #[inline(always)]
    pub fn write_next(&mut self, buf: &mut [u8], seq: u64, flags: u8) -> usize {
        // One IPv4 flow of one size, inlined into the caller's loop: a
        // 64-byte copy and three stores.
        if self.fast {
            return write_v4(&self.templates[0], buf, None, seq, flags);
        }
        self.write_next_any(buf, seq, flags)
    }

    /// [`FrameBuilder::write_next`] for every other spec: several sizes,
    /// several flows, IPv6; encapsulated frames take a path of their own
    /// ([`FrameBuilder::write_encap`]), so this one stays as it was.
    fn write_next_any(&mut self, buf: &mut [u8], seq: u64, flags: u8) -> usize {
        if self.shift > 0 {
            return self.write_encap(buf, seq, flags);
        }
        let t = &self.templates[self.cycle[self.next_size] as usize];
        self.next_size += 1;
        if self.next_size == self.cycle.len() {
            self.next_size = 0;
        }
        if self.one_flow_v4 {
            return write_v4(t, buf, None, seq, flags);
        }
        // Flow k in mixed radix over the four fields, destination port fastest.
        let [dpo, spo, di, si] = match self.spec.order {
            FlowOrder::RoundRobin => {
                let cur = self.pos;
                for (p, &c) in self.pos.iter_mut().zip(&self.counts) {
                    *p += 1;
                    if *p < c {
                        break;
                    }
                    *p = 0;
                }
                cur
            }
            FlowOrder::Random => {
                let mut k = self.rng.next_u64() % self.flows;
                let mut out = [0u32; 4];
                for (o, &c) in out.iter_mut().zip(&self.counts) {
                    *o = (k % u64::from(c)) as u32;
                    k /= u64::from(c);
                }
                out
            }
        };
        let s = &self.spec;
        let dport = u32::from(s.dst_port.first) + dpo;
        let sport = u32::from(s.src_port.first) + spo;
        if self.v6 {
            let sip = self.src_base.wrapping_add(u128::from(si));
            let dip = self.dst_base.wrapping_add(u128::from(di));
            // Adding an offset to an address adds its words to the sum:
            // carries between words are end-around carries (see add128).
            let addr_sum = add32(add32(self.addr_sum, si), di);
            let stamp = StampRepr {
                seq,
                flags,
                ..self.stamp
            };
            return write_v6(t, buf, &stamp, (sip, dip, addr_sum), sport, dport);
        }
        let dip = (self.dst_base as u32).wrapping_add(di);
        let sip = (self.src_base as u32).wrapping_add(si);
        write_v4(t, buf, Some(((sip, dip), sport, dport)), seq, flags)
    }

    /// The next encapsulated frame's flow: its offsets into the VLAN range,
    /// destination port, source port, destination and source address; in
    /// mixed radix, VLAN id fastest.
    #[inline(always)]
    fn next_flow(&mut self) -> [u32; 5] {
        match self.spec.order {
            FlowOrder::RoundRobin => {
                let [dpo, spo, di, si] = self.pos;
                let vo = self.vlan_pos;
                self.vlan_pos += 1;
                if self.vlan_pos == self.vlans {
                    self.vlan_pos = 0;
                    for (p, &c) in self.pos.iter_mut().zip(&self.counts) {
                        *p += 1;
                        if *p < c {
                            break;
                        }
                        *p = 0;
                    }
                }
                [vo, dpo, spo, di, si]
            }
            FlowOrder::Random => {
                let mut k = self.rng.next_u64() % self.flows;
                let mut out = [0u32; 5];
                out[0] = (k % u64::from(self.vlans)) as u32;
                k /= u64::from(self.vlans);
                for (o, &c) in out[1..].iter_mut().zip(&self.counts) {
                    *o = (k % u64::from(c)) as u32;
                    k /= u64::from(c);
                }
                out
            }
        }
    }

    /// An encapsulated frame of the next flow and size: the frame written
    /// `shift` bytes in, and the encapsulation's prefix put in front.
    fn write_encap(&mut self, buf: &mut [u8], seq: u64, flags: u8) -> usize {
        let i = self.cycle[self.next_size] as usize;
        self.next_size += 1;
        if self.next_size == self.cycle.len() {
            self.next_size = 0;
        }
        let shift = self.shift;
        if self.one_flow_v4 {
            let t = &self.templates[i];
            let len = write_v4(t, &mut buf[shift..], None, seq, flags);
            self.prefixes[i].apply(buf, 0, u32::from(self.spec.src_port.first));
            return len + shift;
        }
        let [vo, dpo, spo, di, si] = self.next_flow();
        let t = &self.templates[i];
        let s = &self.spec;
        let dport = u32::from(s.dst_port.first) + dpo;
        let sport = u32::from(s.src_port.first) + spo;
        if self.v6 {
            let sip = self.src_base.wrapping_add(u128::from(si));
            let dip = self.dst_base.wrapping_add(u128::from(di));
            // Adding an offset to an address adds its words to the sum:
            // carries between words are end-around carries (see add128).
            let addr_sum = add32(add32(self.addr_sum, si), di);
            let stamp = StampRepr {
                seq,
                flags,
                ..self.stamp
            };
            let inner = &mut buf[shift..];
            let len = write_v6(t, inner, &stamp, (sip, dip, addr_sum), sport, dport);
            self.prefixes[i].apply(buf, vo, sport);
            return len + shift;
        }
        let dip = (self.dst_base as u32).wrapping_add(di);
        let sip = (self.src_base as u32).wrapping_add(si);
        let flow = Some(((sip, dip), sport, dport));
        let len = write_v4(t, &mut buf[shift..], flow, seq, flags);
        self.prefixes[i].apply(buf, vo, sport);
        len + shift
    }
}

/// The stamp's bytes in a template head.
#[inline(always)]
fn stamp_of(head: &mut [u8; HEAD]) -> &mut [u8; STAMP_LEN] {
    let (_, rest) = head.split_at_mut(HEADERS);
    rest.first_chunk_mut::<STAMP_LEN>()
        .expect("the stamp fits the head")
}

/// An IPv4 frame: the template head (stamp fixed for the burst), the flow's
/// fields when they vary, the sequence and flags, the UDP checksum, and the
/// payload beyond the head for frames longer than it. All offsets are
/// constants into a fixed-size array (no bounds checks), and the checksum is
/// summed from the values, never read back from the bytes just written (a
/// store-forwarding stall).
#[inline(always)]
fn write_v4(
    t: &Template,
    buf: &mut [u8],
    flow: Option<((u32, u32), u32, u32)>,
    seq: u64,
    flags: u8,
) -> usize {
    let len = t.frame.len();
    let mut udp = t.burst_sum + stamp::seq_flags_sum(seq, flags);
    let fill = |head: &mut [u8; HEAD], udp: &mut u32| {
        *head = t.head;
        if let Some(((sip, dip), sport, dport)) = flow {
            patch_flow_v4(t.ip_base, head, (sip, dip), sport, dport);
            *udp = add32(add32(*udp, sip), dip) + sport + dport;
        }
        let mut st = Stamp::new_unchecked(stamp_of(head));
        st.set_seq(seq);
        st.set_flags(flags);
        let mut udp_sum = !fold(*udp);
        if udp_sum == 0 {
            udp_sum = 0xffff; // 0 means "no checksum" in UDP over IPv4
        }
        udp::Packet::new_unchecked(&mut head[UDP_AT..]).set_checksum(udp_sum);
    };
    match buf.first_chunk_mut::<HEAD>() {
        Some(head) => {
            fill(head, &mut udp);
            if len > HEAD {
                buf[HEAD..len].copy_from_slice(&t.frame[HEAD..]);
            }
        }
        None => {
            // A buffer of exactly the frame's 60..63 bytes: fill a copy.
            let mut head = [0u8; HEAD];
            fill(&mut head, &mut udp);
            buf[..len].copy_from_slice(&head[..len]);
        }
    }
    len
}

/// Writes an IPv4 flow's addresses, ports and header checksum into a head.
#[inline(always)]
fn patch_flow_v4(ip_base: u32, f: &mut [u8; HEAD], (sip, dip): (u32, u32), sport: u32, dport: u32) {
    let (ip, rest) = f[IP_AT..].split_at_mut(ipv4::HEADER_LEN);
    let mut ip = ipv4::Packet::new_unchecked(ip);
    ip.set_src_addr(Ipv4Addr::from_bits(sip));
    ip.set_dst_addr(Ipv4Addr::from_bits(dip));
    ip.set_checksum(!fold(add32(add32(ip_base, sip), dip)));
    let mut udp = udp::Packet::new_unchecked(rest);
    udp.set_src_port(sport as u16);
    udp.set_dst_port(dport as u16);
}

/// The IPv6 half of [`FrameBuilder::write`]: addresses, ports, stamp, and the
/// UDP checksum over the pseudo-header (no IP header checksum in IPv6).
#[inline]
fn write_v6(
    t: &Template,
    buf: &mut [u8],
    stamp: &StampRepr,
    (sip, dip, addr_sum): (u128, u128, u32),
    sport: u32,
    dport: u32,
) -> usize {
    let len = t.frame.len();
    let f = &mut buf[..len];
    f.copy_from_slice(&t.frame);
    let mut ip = ipv6::Packet::new_unchecked(&mut f[IP_AT..]);
    ip.set_src_bits(sip);
    ip.set_dst_bits(dip);
    let mut u = udp::Packet::new_unchecked(&mut f[UDP_AT_V6..]);
    u.set_src_port(sport as u16);
    u.set_dst_port(dport as u16);
    stamp.emit(&mut Stamp::new_unchecked(
        &mut f[HEADERS_V6..HEADERS_V6 + STAMP_LEN],
    ));
    let mut udp = t.udp_base + addr_sum + sport + dport;
    udp += stamp.word_sum();
    let mut udp_sum = !fold(udp);
    if udp_sum == 0 {
        udp_sum = 0xffff; // a computed 0 is sent as all ones (RFC 8200 8.1)
    }
    udp::Packet::new_unchecked(&mut f[UDP_AT_V6..]).set_checksum(udp_sum);
    len
}

#[cfg(test)]
mod test;
