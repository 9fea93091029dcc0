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
//! Long on purpose: IPv4 and IPv6 frames, flows and sizes are one template, and
//! its checksum and layout tests (a third of the file) are read with it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddrV4};

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
        }
    }
}

impl FrameSpec {
    /// Whether the frames are IPv6 (the source addresses are; the pipeline
    /// checks both ranges are of one family).
    pub fn is_v6(&self) -> bool {
        self.src_ip.is_v6()
    }

    /// The smallest frame of this family that carries the stamp.
    pub fn min_frame(&self) -> usize {
        if self.is_v6() {
            MIN_FRAME_V6
        } else {
            MIN_FRAME
        }
    }

    /// Number of distinct flows (the product of the four ranges).
    pub fn flows(&self) -> u64 {
        [
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
    fn new(spec: &FrameSpec, size: usize) -> Template {
        if spec.is_v6() {
            return Template::new_v6(spec, size.max(MIN_FRAME_V6));
        }
        let len = size.max(MIN_FRAME) - FCS;
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
    /// destination address, source address (the first varies fastest).
    counts: [u32; 4],
    /// Round-robin: the next flow's offset in each field (an odometer, so a
    /// packet costs compares, not divisions).
    pos: [u32; 4],
    next_size: usize,
    /// One IPv4 flow: its addresses, ports and IP checksum are in every
    /// template's head from the start, and a packet writes only its stamp's
    /// sequence and flags and the UDP checksum.
    one_flow_v4: bool,
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
        let mut b = FrameBuilder {
            templates: sizes.iter().map(|&s| Template::new(spec, s)).collect(),
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
            spec: spec.clone(),
            next_size: 0,
            one_flow_v4: false,
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
        b.begin_burst(&StampRepr::default());
        b
    }

    /// The size (FCS included) of the next frame [`FrameBuilder::write`] writes.
    pub fn next_frame_len(&self) -> usize {
        self.templates[self.cycle[self.next_size] as usize]
            .frame
            .len()
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
        if self.one_flow_v4 && self.templates.len() == 1 {
            return write_v4(&self.templates[0], buf, None, seq, flags);
        }
        self.write_next_any(buf, seq, flags)
    }

    /// [`FrameBuilder::write_next`] for every other spec: several sizes,
    /// several flows, IPv6.
    fn write_next_any(&mut self, buf: &mut [u8], seq: u64, flags: u8) -> usize {
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
mod test {
    use super::*;

    use crate::net::checksum::{finish, pseudo_header_v4, pseudo_header_v6};

    /// The IPv4 and UDP views of a frame the builder wrote.
    fn v4(frame: &[u8]) -> (ipv4::Packet<&[u8]>, udp::Packet<&[u8]>) {
        (
            ipv4::Packet::new_checked(&frame[IP_AT..]).unwrap(),
            udp::Packet::new_checked(&frame[UDP_AT..]).unwrap(),
        )
    }

    fn verify(frame: &[u8]) {
        let (ip, udp) = v4(frame);
        assert!(ip.verify_checksum(), "IPv4 header checksum");
        let datagram = &frame[UDP_AT..];
        let pseudo = pseudo_header_v4(ip.src_addr(), ip.dst_addr(), 17, datagram.len() as u16);
        assert_eq!(finish(add_bytes(pseudo, datagram)), 0, "UDP checksum");
        assert_eq!(usize::from(udp.len()), datagram.len());
    }

    #[test]
    fn checksums_are_correct_for_every_flow_and_size() {
        let spec = FrameSpec {
            src_ip: AddrRange::parse("10.0.0.1-10.0.0.3").unwrap(),
            dst_ip: AddrRange::parse("192.168.255.250-192.168.255.255").unwrap(),
            src_port: PortRange::parse("65530-65535").unwrap(),
            dst_port: PortRange::parse("1-2").unwrap(),
            sizes: Sizes::Imix(vec![(64, 3), (65, 1), (1518, 2), (9018, 1)]),
            ..FrameSpec::default()
        };
        let mut b = FrameBuilder::new(&spec);
        let mut buf = vec![0u8; 9014];
        for seq in 0..500u64 {
            let st = StampRepr {
                stream: 3,
                seq: seq * 0x0123_4567_89ab,
                tx_ns: seq * 7_777_777,
                epoch: seq as u8,
                flags: 1,
            };
            let n = b.write(&mut buf, &st);
            verify(&buf[..n]);
            let r = StampRepr::parse(&Stamp::new_unchecked(&buf[HEADERS..n])).unwrap();
            assert_eq!(r.seq, st.seq);
        }
    }

    #[test]
    fn flows_cover_the_product_round_robin() {
        let spec = FrameSpec {
            src_port: PortRange::parse("100-103").unwrap(),
            dst_ip: AddrRange::parse("10.1.0.0-10.1.0.2").unwrap(),
            ..FrameSpec::default()
        };
        assert_eq!(spec.flows(), 12);
        let mut b = FrameBuilder::new(&spec);
        let mut buf = vec![0u8; 60];
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..12 {
            b.write(&mut buf, &StampRepr::default());
            let (ip, udp) = v4(&buf);
            seen.insert((ip.dst_addr().octets()[3], udp.src_port()));
        }
        assert_eq!(seen.len(), 12);
    }

    #[test]
    fn round_robin_is_the_mixed_radix_order() {
        let spec = FrameSpec {
            src_ip: AddrRange::parse("10.0.0.1-10.0.0.3").unwrap(),
            dst_ip: AddrRange::parse("10.1.0.0-10.1.0.1").unwrap(),
            src_port: PortRange::parse("100-104").unwrap(),
            dst_port: PortRange::parse("7-9").unwrap(),
            ..FrameSpec::default()
        };
        let flows = spec.flows();
        assert_eq!(flows, 90);
        let mut b = FrameBuilder::new(&spec);
        let mut buf = vec![0u8; 60];
        for n in 0..3 * flows {
            b.write(&mut buf, &StampRepr::default());
            let k = n % flows;
            let want = (
                1 + (k / 3 / 5 / 2) % 3,
                (k / 3 / 5) % 2,
                100 + (k / 3) % 5,
                7 + k % 3,
            );
            let (ip, udp) = v4(&buf);
            let got = (
                u64::from(ip.src_addr().octets()[3]),
                u64::from(ip.dst_addr().octets()[3]),
                u64::from(udp.src_port()),
                u64::from(udp.dst_port()),
            );
            assert_eq!(got, want, "packet {n}");
        }
    }

    #[test]
    fn imix_cycle_has_the_weights_interleaved() {
        let b = FrameBuilder::new(&FrameSpec {
            sizes: Sizes::default_imix(),
            ..FrameSpec::default()
        });
        assert_eq!(b.cycle.len(), 12);
        let count = |i| b.cycle.iter().filter(|&&c| c == i).count();
        assert_eq!((count(0), count(1), count(2)), (7, 4, 1));
        assert!(b
            .cycle
            .windows(3)
            .all(|w| !(w[0] == w[1] && w[1] == w[2] && w[0] != 0)));
        assert!((Sizes::default_imix().average() - 353.83).abs() < 0.01);
    }

    fn verify_v6(frame: &[u8]) {
        let eth = ethernet::Frame::new_checked(frame).unwrap();
        assert_eq!(eth.ethertype(), ethernet::ethertype::IPV6);
        let ip = ipv6::Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(ip.version(), 6);
        assert_eq!(ip.next_header(), 17, "next header UDP");
        let datagram = &frame[UDP_AT_V6..];
        let udp = udp::Packet::new_checked(datagram).unwrap();
        assert_eq!(usize::from(ip.payload_len()), datagram.len());
        assert_eq!(usize::from(udp.len()), datagram.len());
        let pseudo = pseudo_header_v6(ip.src_addr(), ip.dst_addr(), 17, datagram.len() as u32);
        assert_eq!(
            finish(add_bytes(pseudo, datagram)),
            0,
            "UDP checksum over the IPv6 pseudo-header"
        );
        assert_ne!(udp.checksum(), 0, "IPv6 UDP checksums are mandatory");
    }

    #[test]
    fn ipv6_checksums_are_correct_for_every_flow_and_size() {
        let spec = FrameSpec {
            // Crosses a 32-bit boundary of the address.
            src_ip: AddrRange::parse("fd00::ffff:fffe-fd00::1:0:1").unwrap(),
            dst_ip: AddrRange::parse(
                "2001:db8:ffff:ffff:ffff:ffff:ffff:fffd-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            )
            .unwrap(),
            src_port: PortRange::parse("65534-65535").unwrap(),
            dst_port: PortRange::parse("1-3").unwrap(),
            sizes: Sizes::Imix(vec![(84, 3), (85, 1), (1518, 2), (9018, 1)]),
            ..FrameSpec::default()
        };
        assert!(spec.is_v6());
        assert_eq!(spec.src_ip.count, 4);
        assert_eq!(spec.flows(), 4 * 3 * 2 * 3);
        let mut b = FrameBuilder::new(&spec);
        let mut buf = vec![0u8; 9014];
        let mut srcs = std::collections::BTreeSet::new();
        for seq in 0..2000u64 {
            let st = StampRepr {
                stream: 9,
                seq: seq.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                tx_ns: seq * 1_234_567,
                epoch: seq as u8,
                flags: (seq & 1) as u8,
            };
            let n = b.write(&mut buf, &st);
            verify_v6(&buf[..n]);
            srcs.insert(
                ipv6::Packet::new_checked(&buf[IP_AT..])
                    .unwrap()
                    .src_addr()
                    .to_bits(),
            );
            let r = StampRepr::parse(&Stamp::new_unchecked(&buf[HEADERS_V6..n])).unwrap();
            assert_eq!(r.seq, st.seq);
        }
        let first = u128::from("fd00::ffff:fffe".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            srcs.into_iter().collect::<Vec<_>>(),
            (0..4).map(|i| first + i).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_zero_ipv6_udp_checksum_is_sent_as_all_ones() {
        // Find a sequence number whose frame sums to 0, then check it is sent
        // as 0xffff and still verifies.
        let spec = FrameSpec {
            src_ip: AddrRange::v6(DEFAULT_SRC_V6),
            dst_ip: AddrRange::v6(DEFAULT_DST_V6),
            sizes: Sizes::Fixed(MIN_FRAME_V6),
            ..FrameSpec::default()
        };
        let mut b = FrameBuilder::new(&spec);
        let mut buf = [0u8; 80];
        let st = |seq| StampRepr {
            seq,
            ..StampRepr::default()
        };
        let n = b.write(&mut buf, &st(0));
        assert_eq!(n, 80);
        let sum = udp::Packet::new_checked(&buf[UDP_AT_V6..])
            .unwrap()
            .checksum();
        // The checksum is the complement of the other words' sum: adding
        // `sum` to the low word of the sequence number brings it to 0xffff,
        // i.e. a computed checksum of 0.
        let n = b.write(&mut buf, &st(u64::from(sum)));
        verify_v6(&buf[..n]);
        assert_eq!(
            udp::Packet::new_checked(&buf[UDP_AT_V6..])
                .unwrap()
                .checksum(),
            0xffff
        );
    }

    /// An IPv4 frame built the slow, obvious way: every header written
    /// whole, both checksums summed over the bytes.
    fn reference_v4(
        spec: &FrameSpec,
        len: usize,
        flow: (SocketAddrV4, SocketAddrV4),
        st: &StampRepr,
    ) -> Vec<u8> {
        let mut f = vec![0u8; len];
        UdpV4 {
            src_mac: spec.src_mac,
            dst_mac: spec.dst_mac,
            src: flow.0,
            dst: flow.1,
            ttl: 64,
            payload_len: len - HEADERS,
        }
        .emit(&mut f);
        st.emit(&mut Stamp::new_unchecked(
            &mut f[HEADERS..HEADERS + STAMP_LEN],
        ));
        let pseudo = pseudo_header_v4(*flow.0.ip(), *flow.1.ip(), 17, (len - UDP_AT) as u16);
        udp::Packet::new_unchecked(&mut f[UDP_AT..]).fill_checksum(pseudo);
        f
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// Bursts written with `begin_burst`/`write_next` (the one-flow fast
        /// path and the general one, into roomy and exact buffers) are byte
        /// for byte the frames built naively, and their flows stay in range.
        #[test]
        fn burst_frames_equal_naively_built_ones(
            flows in proptest::sample::select(vec![(1u32, 1u32), (1, 3), (5, 2)]),
            sizes in proptest::sample::select(vec![
                Sizes::Fixed(64), Sizes::Fixed(67), Sizes::Fixed(1518),
                Sizes::Imix(vec![(64, 2), (65, 1), (130, 1)]),
            ]),
            random in proptest::bool::ANY,
            stamps in proptest::collection::vec(
                (proptest::num::u64::ANY, proptest::num::u64::ANY, proptest::num::u16::ANY, proptest::num::u8::ANY, 1usize..40),
                1..6,
            ),
            exact in proptest::bool::ANY,
        ) {
            let spec = FrameSpec {
                src_ip: AddrRange { count: flows.0, ..AddrRange::v4(Ipv4Addr::new(10, 255, 255, 254)) },
                dst_port: PortRange { first: 65535 - flows.1 as u16 + 1, count: flows.1 },
                order: if random { FlowOrder::Random } else { FlowOrder::RoundRobin },
                sizes,
                ..FrameSpec::default()
            };
            let mut b = FrameBuilder::new(&spec);
            proptest::prop_assert_eq!(b.one_flow_v4, flows == (1, 1));
            for (seq, tx_ns, stream, epoch, n) in stamps {
                let first = StampRepr { stream, seq, tx_ns, epoch, flags: 0 };
                b.begin_burst(&first);
                for i in 0..n {
                    let len = b.next_frame_len() - FCS;
                    let mut buf = vec![0xa5u8; if exact { len } else { 2048 }];
                    let st = StampRepr { seq: seq.wrapping_add(i as u64), flags: (i + 1 == n) as u8, ..first };
                    proptest::prop_assert_eq!(b.write_next(&mut buf, st.seq, st.flags), len);
                    let (ip, udp) = v4(&buf[..len]);
                    let flow = (
                        SocketAddrV4::new(ip.src_addr(), udp.src_port()),
                        SocketAddrV4::new(ip.dst_addr(), udp.dst_port()),
                    );
                    let (src, dport) = (ip.src_addr().to_bits(), udp.dst_port());
                    proptest::prop_assert!(src.wrapping_sub(0x0aff_fffe) < flows.0);
                    proptest::prop_assert!(dport > 65535 - flows.1 as u16);
                    proptest::prop_assert_eq!(&buf[..len], &reference_v4(&spec, len, flow, &st)[..]);
                }
            }
        }
    }

    #[test]
    fn address_ranges_parse_both_families() {
        let r = AddrRange::parse("fd00::1-fd00::100").unwrap();
        assert!(r.is_v6());
        assert_eq!(r.count, 256);
        assert_eq!(AddrRange::parse(" 10.0.0.1 - 10.0.0.1 ").unwrap().count, 1);
        assert!(AddrRange::parse("10.0.0.1-fd00::1")
            .unwrap_err()
            .contains("mixes an IPv4 and an IPv6 address"));
        assert!(AddrRange::parse("fd00::-fd01::")
            .unwrap_err()
            .contains("more than 2^32"));
        assert!(AddrRange::parse("fd00::2-fd00::1").is_err());
        assert!(AddrRange::parse("fd00::g").is_err());
        let full = AddrRange::parse("::1-::ffff:ffff").unwrap();
        assert_eq!(full.count, u32::MAX);
    }

    #[test]
    fn small_sizes_are_raised_to_the_family_minimum_and_v4_destinations_mapped() {
        let spec = FrameSpec {
            src_ip: AddrRange::v6(DEFAULT_SRC_V6),
            sizes: Sizes::Fixed(64),
            ..FrameSpec::default()
        };
        assert_eq!(spec.min_frame(), MIN_FRAME_V6);
        let mut b = FrameBuilder::new(&spec);
        assert_eq!(b.next_frame_len(), MIN_FRAME_V6);
        let mut buf = [0u8; 80];
        b.write(&mut buf, &StampRepr::default());
        verify_v6(&buf);
        let dst = ipv6::Packet::new_checked(&buf[IP_AT..]).unwrap().dst_addr();
        assert_eq!(dst, "::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap());
    }
}
