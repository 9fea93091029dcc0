//! Encapsulations around the generator's Ethernet/IP/UDP frames: an 802.1Q
//! VLAN tag (one id or a range that varies per flow), QinQ (802.1ad outer
//! tag, 802.1Q inner), an MPLS label stack, or VXLAN (outer
//! Ethernet/IPv4/UDP/VXLAN around the inner frame).
//!
//! The frame is built as without encapsulation, `shift` bytes further into
//! the buffer; then a prefix, the encapsulated frame's bytes up to the inner
//! IP header (or, for VXLAN, up to the inner frame's IP header), is copied
//! over its start. Per packet only what varies is patched: the VLAN id of a
//! range, and the VXLAN outer UDP source port (the inner one, for ECMP and
//! RSS spread; the outer UDP checksum is 0, as RFC 7348 recommends over
//! IPv4, so the port costs no checksum update).

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::net::ethernet::{self, ethertype};
use crate::net::stack::{UdpV4, UDP_V4_HEADERS};
use crate::net::{mpls, udp, vlan, vxlan};

/// MPLS labels a generator pushes at most.
pub const MAX_LABELS: usize = crate::net::encap::MAX_LABELS;

/// Largest VLAN id.
pub const MAX_VID: u16 = 4095;
/// Largest MPLS label (20 bits).
pub const MAX_LABEL: u32 = (1 << 20) - 1;
/// Largest VXLAN network identifier (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// VXLAN's outer headers: Ethernet, IPv4, UDP and VXLAN.
pub const VXLAN_OVERHEAD: usize = UDP_V4_HEADERS + vxlan::HEADER_LEN;

/// Bytes of the largest prefix (VXLAN's outer headers and the inner
/// Ethernet header).
const PREFIX_MAX: usize = VXLAN_OVERHEAD + ethernet::HEADER_LEN;
const _: () = assert!(PREFIX_MAX >= ethernet::HEADER_LEN + MAX_LABELS * mpls::HEADER_LEN);

/// A VXLAN tunnel's outer headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vxlan {
    /// The VXLAN network identifier (24 bits).
    pub vni: u32,
    /// Outer IPv4 source (the tunnel's local end).
    pub src: Ipv4Addr,
    /// Outer IPv4 destination (the remote tunnel end).
    pub dst: Ipv4Addr,
    /// Outer UDP destination port.
    pub port: u16,
    /// Outer Ethernet source; the generator's `src_mac` when `None`.
    pub src_mac: Option<[u8; 6]>,
    /// Outer Ethernet destination; the generator's `dst_mac` when `None`.
    pub dst_mac: Option<[u8; 6]>,
}

/// What the generator wraps its frames in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Encap {
    /// Plain Ethernet/IP/UDP.
    #[default]
    None,
    /// One 802.1Q tag; the id is `first + k` for flow offset `k < count`.
    Vlan {
        /// First VLAN id.
        first: u16,
        /// Number of ids (1..=4096).
        count: u16,
    },
    /// An 802.1ad service tag (TPID 0x88a8) around an 802.1Q customer tag.
    QinQ {
        /// Outer (service) VLAN id.
        outer: u16,
        /// Inner (customer) VLAN id.
        inner: u16,
    },
    /// An MPLS label stack, outermost first (1..=[`MAX_LABELS`] labels;
    /// bottom of stack set on the last, TTL 64, traffic class 0).
    Mpls(Vec<u32>),
    /// VXLAN over IPv4.
    Vxlan(Vxlan),
}

impl Encap {
    /// Bytes the encapsulation adds to a frame.
    pub fn overhead(&self) -> usize {
        match self {
            Encap::None => 0,
            Encap::Vlan { .. } => vlan::HEADER_LEN,
            Encap::QinQ { .. } => 2 * vlan::HEADER_LEN,
            Encap::Mpls(l) => l.len() * mpls::HEADER_LEN,
            Encap::Vxlan(_) => VXLAN_OVERHEAD,
        }
    }

    /// VLAN ids the flows take turns over (1 but for a VLAN range).
    pub fn vlans(&self) -> u32 {
        match self {
            Encap::Vlan { count, .. } => u32::from(*count).max(1),
            _ => 1,
        }
    }

    /// Its name in a pipeline file and a description.
    pub fn name(&self) -> &'static str {
        match self {
            Encap::None => "none",
            Encap::Vlan { .. } => "vlan",
            Encap::QinQ { .. } => "qinq",
            Encap::Mpls(_) => "mpls",
            Encap::Vxlan(_) => "vxlan",
        }
    }

    /// Parses a VLAN id `"100"` or range `"100-163"`.
    pub fn parse_vlan(s: &str) -> Result<Encap, String> {
        let bad = || format!("`{s}` is not a VLAN id or range like \"100-163\"");
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        for v in [a, b] {
            if v > u32::from(MAX_VID) {
                return Err(format!(
                    "VLAN id {v} is above {MAX_VID} (an 802.1Q id has 12 bits)"
                ));
            }
        }
        if b < a {
            return Err(bad());
        }
        Ok(Encap::Vlan {
            first: a as u16,
            count: (b - a + 1) as u16,
        })
    }
}

/// An encapsulation's bytes for one frame size, and where its per-packet
/// fields are.
#[derive(Clone)]
pub(super) struct Prefix {
    /// The encapsulated frame's first `len` bytes.
    bytes: [u8; PREFIX_MAX],
    len: usize,
    /// First VLAN id of a range (patched per flow), when there is one.
    vlan_first: Option<u16>,
    /// Whether the outer UDP source port follows the inner one.
    outer_port: bool,
}

/// The generator's MACs and inner EtherType, for a prefix.
pub(super) struct Inner {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub ethertype: u16,
    /// The inner frame's length (no FCS) and first UDP source port.
    pub len: usize,
    pub src_port: u16,
}

impl Prefix {
    /// The prefix of `encap` around an inner frame of `inner`.
    pub(super) fn new(encap: &Encap, inner: &Inner) -> Prefix {
        let mut b = [0u8; PREFIX_MAX];
        let shift = encap.overhead();
        let len = shift + ethernet::HEADER_LEN;
        let mut p = Prefix {
            bytes: b,
            len,
            vlan_first: None,
            outer_port: false,
        };
        let eth = |b: &mut [u8], src, dst, et| {
            ethernet::Repr {
                src_addr: src,
                dst_addr: dst,
                ethertype: et,
            }
            .emit(&mut ethernet::Frame::new_unchecked(b))
        };
        let tag = |b: &mut [u8], vid, et| {
            vlan::Repr {
                vid,
                ethertype: et,
                ..vlan::Repr::default()
            }
            .emit(&mut vlan::Tag::new_unchecked(b))
        };
        let h = ethernet::HEADER_LEN;
        match encap {
            Encap::None => eth(&mut b, inner.src_mac, inner.dst_mac, inner.ethertype),
            Encap::Vlan { first, count } => {
                eth(&mut b, inner.src_mac, inner.dst_mac, ethertype::VLAN);
                tag(&mut b[h..], *first, inner.ethertype);
                p.vlan_first = (*count > 1).then_some(*first);
            }
            Encap::QinQ { outer, inner: vid } => {
                eth(&mut b, inner.src_mac, inner.dst_mac, ethertype::QINQ);
                tag(&mut b[h..], *outer, ethertype::VLAN);
                tag(&mut b[h + vlan::HEADER_LEN..], *vid, inner.ethertype);
            }
            Encap::Mpls(labels) => {
                eth(&mut b, inner.src_mac, inner.dst_mac, ethertype::MPLS);
                for (i, &l) in labels.iter().enumerate() {
                    let at = h + i * mpls::HEADER_LEN;
                    mpls::Entry::new_unchecked(&mut b[at..]).set(l, 0, i + 1 == labels.len(), 64);
                }
            }
            Encap::Vxlan(x) => {
                UdpV4 {
                    src_mac: x.src_mac.unwrap_or(inner.src_mac),
                    dst_mac: x.dst_mac.unwrap_or(inner.dst_mac),
                    src: SocketAddrV4::new(x.src, inner.src_port),
                    dst: SocketAddrV4::new(x.dst, x.port),
                    ttl: 64,
                    payload_len: vxlan::HEADER_LEN + inner.len,
                }
                .emit(&mut b);
                vxlan::Repr { vni: x.vni }
                    .emit(&mut vxlan::Packet::new_unchecked(&mut b[UDP_V4_HEADERS..]));
                eth(
                    &mut b[VXLAN_OVERHEAD..],
                    inner.src_mac,
                    inner.dst_mac,
                    inner.ethertype,
                );
                p.outer_port = true;
            }
        }
        p.bytes = b;
        p
    }

    /// Writes the prefix over the start of `frame` (the inner frame written
    /// `shift` bytes in), with flow offset `vlan` into a VLAN range and the
    /// inner UDP source port `src_port`.
    #[inline(always)]
    pub(super) fn apply(&self, frame: &mut [u8], vlan: u32, src_port: u32) {
        frame[..self.len].copy_from_slice(&self.bytes[..self.len]);
        if let Some(first) = self.vlan_first {
            vlan::Tag::new_unchecked(&mut frame[ethernet::HEADER_LEN..]).set_tci(
                0,
                false,
                first + vlan as u16,
            );
        }
        if self.outer_port {
            let at = ethernet::HEADER_LEN + crate::net::ipv4::HEADER_LEN;
            udp::Packet::new_unchecked(&mut frame[at..at + udp::HEADER_LEN])
                .set_src_port(src_port as u16);
        }
    }
}
