//! Neighbour-discovery frames on the wire, smoltcp style: IPv4 ARP (RFC 826)
//! and the IPv6 neighbour solicitation / advertisement of NDP (RFC 4861), each
//! inside its Ethernet frame.
//!
//! ```text
//! Ethernet  0..6 dst  6..12 src  12..14 ethertype (0x0806 ARP, 0x86DD IPv6)
//! ARP      14..16 htype (1)  16..18 ptype (0x0800)  18 hlen (6)  19 plen (4)
//!          20..22 oper (1 request, 2 reply)  22..28 sha  28..32 spa  32..38 tha  38..42 tpa
//! IPv6     14..54 header: next header 58 (ICMPv6), hop limit 255
//! ICMPv6   54 type (135 NS, 136 NA)  55 code (0)  56..58 checksum
//!          58..62 flags (NA: R 0x80, S 0x40, O 0x20)  62..78 target address
//!          78..   options: type, length in units of 8 bytes, value
//!                 (1 source link-layer address, 2 target link-layer address)
//! ```
//!
//! Contract: once [`ArpPacket::new_checked`] or [`NdpPacket::new_checked`]
//! returns `Ok`, no accessor panics; [`Frame::parse`] validates every field a
//! reply depends on and returns an error, never a panic, on any input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use thiserror::Error;

use crate::net::checksum::{add_bytes, finish, pseudo_header_v6};
use crate::net::{ethernet, ipv4, ipv6};

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = ethernet::ethertype::IPV4;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = ethernet::ethertype::ARP;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = ethernet::ethertype::IPV6;
/// Length of the Ethernet header.
pub const ETH_LEN: usize = ethernet::HEADER_LEN;
/// Length of an IPv4-over-Ethernet ARP packet.
pub const ARP_LEN: usize = 28;
/// Length of the IPv6 header.
pub const IPV6_LEN: usize = ipv6::HEADER_LEN;
/// IPv6 next-header value of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = ipv4::protocol::ICMPV6;
/// ICMPv6 type of a router solicitation (the first NDP type).
pub const ICMPV6_ROUTER_SOLICIT: u8 = 133;
/// ICMPv6 type of a neighbour solicitation.
pub const ICMPV6_NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a neighbour advertisement.
pub const ICMPV6_NEIGHBOR_ADVERT: u8 = 136;
/// ICMPv6 type of a redirect (the last NDP type).
pub const ICMPV6_REDIRECT: u8 = 137;
/// Bytes of an NS or NA without options.
pub const NDP_LEN: usize = 24;
/// Smallest Ethernet frame without its FCS; shorter frames are padded.
pub const MIN_FRAME: usize = 60;
/// Longest frame [`Frame::emit`] writes (an NA with one option).
pub const MAX_EMIT: usize = ETH_LEN + IPV6_LEN + NDP_LEN + 8;
/// The broadcast MAC address.
pub const BROADCAST: [u8; 6] = [0xff; 6];

mod field {
    pub type Field = core::ops::Range<usize>;
    // ARP, relative to its start.
    pub const HTYPE: Field = 0..2;
    pub const PTYPE: Field = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Field = 6..8;
    pub const SHA: Field = 8..14;
    pub const SPA: Field = 14..18;
    pub const THA: Field = 18..24;
    pub const TPA: Field = 24..28;
    // NS/NA, relative to the ICMPv6 message.
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Field = 2..4;
    pub const FLAGS: usize = 4;
    pub const TARGET: Field = 8..24;
    pub const OPTIONS: usize = 24;
}

/// Why a frame was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Error {
    /// Shorter than its headers.
    #[error("frame truncated")]
    Truncated,
    /// Neither ARP nor an NDP neighbour message.
    #[error("not a neighbour-discovery frame")]
    NotNeighbour,
    /// ARP for something other than IPv4 over Ethernet.
    #[error("ARP for another hardware or protocol type")]
    ArpType,
    /// An ARP operation other than request or reply.
    #[error("unknown ARP operation")]
    ArpOp,
    /// An NDP message whose hop limit is not 255 (it crossed a router).
    #[error("NDP hop limit is not 255")]
    HopLimit,
    /// An ICMPv6 code other than 0.
    #[error("NDP code is not 0")]
    Code,
    /// The ICMPv6 checksum does not match.
    #[error("ICMPv6 checksum mismatch")]
    Checksum,
    /// An option of length 0, or one running past the message.
    #[error("malformed NDP option")]
    Option,
    /// A multicast target address, or a multicast sender.
    #[error("invalid address")]
    Address,
}

fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn mac(b: &[u8]) -> [u8; 6] {
    let mut m = [0; 6];
    m.copy_from_slice(&b[..6]);
    m
}

/// The ethertype of a frame, if it has an Ethernet header.
#[inline]
pub fn ethertype(frame: &[u8]) -> Option<u16> {
    ethernet::Frame::new_checked(frame)
        .ok()
        .map(|f| f.ethertype())
}

/// An ARP packet (after the Ethernet header), a zero-copy view.
#[derive(Debug, Clone, Copy)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// A view without checking the length; accessors may panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        ArpPacket { buffer }
    }

    /// A view whose accessors cannot panic.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Whether the buffer holds a whole IPv4-over-Ethernet ARP packet.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < ARP_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Hardware type (1: Ethernet).
    pub fn htype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::HTYPE.start)
    }
    /// Protocol type (0x0800: IPv4).
    pub fn ptype(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PTYPE.start)
    }
    /// Hardware address length.
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    /// Protocol address length.
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    /// Operation (1 request, 2 reply).
    pub fn oper(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::OPER.start)
    }
    /// Sender hardware address.
    pub fn sha(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::SHA])
    }
    /// Sender protocol address.
    pub fn spa(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
    /// Target hardware address.
    pub fn tha(&self) -> [u8; 6] {
        mac(&self.buffer.as_ref()[field::THA])
    }
    /// Target protocol address.
    pub fn tpa(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::TPA];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    fn put(&mut self, f: field::Field, v: &[u8]) {
        self.buffer.as_mut()[f].copy_from_slice(v);
    }
    /// Sets every fixed field for IPv4 over Ethernet and the operation.
    pub fn set_header(&mut self, oper: u16) {
        self.put(field::HTYPE, &1u16.to_be_bytes());
        self.put(field::PTYPE, &ETHERTYPE_IPV4.to_be_bytes());
        let b = self.buffer.as_mut();
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
        self.put(field::OPER, &oper.to_be_bytes());
    }
    /// Sets the sender addresses.
    pub fn set_sender(&mut self, mac: [u8; 6], ip: Ipv4Addr) {
        self.put(field::SHA, &mac);
        self.put(field::SPA, &ip.octets());
    }
    /// Sets the target addresses.
    pub fn set_target(&mut self, mac: [u8; 6], ip: Ipv4Addr) {
        self.put(field::THA, &mac);
        self.put(field::TPA, &ip.octets());
    }
}

/// ARP operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOp {
    /// Who has `target_ip`?
    Request,
    /// `sender_ip` is at `sender_mac`.
    Reply,
}

/// An ARP packet's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware address.
    pub sender_mac: [u8; 6],
    /// Sender IPv4 address.
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (zero in a request).
    pub target_mac: [u8; 6],
    /// Target IPv4 address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Validates a checked view.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<ArpRepr, Error> {
        if p.htype() != 1 || p.ptype() != ETHERTYPE_IPV4 || p.hlen() != 6 || p.plen() != 4 {
            return Err(Error::ArpType);
        }
        let op = match p.oper() {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            _ => return Err(Error::ArpOp),
        };
        let sender_mac = p.sha();
        if sender_mac[0] & 1 != 0 {
            return Err(Error::Address);
        }
        Ok(ArpRepr {
            op,
            sender_mac,
            sender_ip: p.spa(),
            target_mac: p.tha(),
            target_ip: p.tpa(),
        })
    }

    /// Bytes [`ArpRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        ARP_LEN
    }

    /// Writes the packet into a view of at least [`ARP_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        p.set_header(match self.op {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        });
        p.set_sender(self.sender_mac, self.sender_ip);
        p.set_target(self.target_mac, self.target_ip);
    }
}

/// An NS or NA message (the ICMPv6 part), a zero-copy view.
#[derive(Debug, Clone, Copy)]
pub struct NdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NdpPacket<T> {
    /// A view without checking the length; accessors may panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        NdpPacket { buffer }
    }

    /// A view whose accessors cannot panic.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Whether the buffer holds the fixed part of an NS/NA.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < NDP_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// ICMPv6 type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// ICMPv6 code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    /// ICMPv6 checksum.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// The NA flags byte (router 0x80, solicited 0x40, override 0x20).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Target address.
    pub fn target(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::TARGET]);
        Ipv6Addr::from(a)
    }
    /// The options, as written.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..]
    }
    /// The first link-layer address option of `kind` (1 source, 2 target).
    pub fn link_layer_option(&self, kind: u8) -> Result<Option<[u8; 6]>, Error> {
        let mut o = self.options();
        let mut found = None;
        while !o.is_empty() {
            if o.len() < 2 || o[1] == 0 || o.len() < usize::from(o[1]) * 8 {
                return Err(Error::Option);
            }
            let len = usize::from(o[1]) * 8;
            if o[0] == kind && found.is_none() {
                // Ethernet: one 8-byte unit, type, length, 6 address bytes.
                if len != 8 {
                    return Err(Error::Option);
                }
                found = Some(mac(&o[2..8]));
            }
            o = &o[len..];
        }
        Ok(found)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> NdpPacket<T> {
    /// Sets type, code, flags and target, zeroing the reserved bytes and the
    /// checksum.
    pub fn set_header(&mut self, msg_type: u8, flags: u8, target: Ipv6Addr) {
        let b = self.buffer.as_mut();
        b[field::TYPE] = msg_type;
        b[field::CODE] = 0;
        b[field::CHECKSUM].fill(0);
        b[field::FLAGS] = flags;
        b[field::FLAGS + 1..field::TARGET.start].fill(0);
        b[field::TARGET].copy_from_slice(&target.octets());
    }
    /// Writes one link-layer address option at the start of the options.
    pub fn set_link_layer_option(&mut self, kind: u8, mac: [u8; 6]) {
        let b = &mut self.buffer.as_mut()[field::OPTIONS..field::OPTIONS + 8];
        b[0] = kind;
        b[1] = 1;
        b[2..8].copy_from_slice(&mac);
    }
    /// Sets the checksum field.
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
}

/// The ICMPv6 checksum of `msg` between `src` and `dst` (RFC 8200 section
/// 8.1); 0 when `msg` carries a correct checksum.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let pseudo = pseudo_header_v6(src, dst, NEXT_HEADER_ICMPV6, msg.len() as u32);
    finish(add_bytes(pseudo, msg))
}

/// NDP neighbour messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NdpRepr {
    /// Neighbour solicitation: who has `target`?
    Solicit {
        /// The address asked about.
        target: Ipv6Addr,
        /// The asker's link-layer address (absent in duplicate address detection).
        source_mac: Option<[u8; 6]>,
    },
    /// Neighbour advertisement: `target` is at `target_mac`.
    Advert {
        /// Router flag.
        router: bool,
        /// Solicited flag (an answer to an NS).
        solicited: bool,
        /// Override flag.
        override_: bool,
        /// The address advertised.
        target: Ipv6Addr,
        /// Its link-layer address.
        target_mac: Option<[u8; 6]>,
    },
}

impl NdpRepr {
    /// Validates a checked view carried between `src` and `dst`.
    pub fn parse<T: AsRef<[u8]>>(
        p: &NdpPacket<T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) -> Result<NdpRepr, Error> {
        if p.code() != 0 {
            return Err(Error::Code);
        }
        if icmpv6_checksum(src, dst, p.buffer.as_ref()) != 0 {
            return Err(Error::Checksum);
        }
        let target = p.target();
        if target.is_multicast() || src.is_multicast() {
            return Err(Error::Address);
        }
        match p.msg_type() {
            ICMPV6_NEIGHBOR_SOLICIT => Ok(NdpRepr::Solicit {
                target,
                source_mac: p.link_layer_option(1)?,
            }),
            ICMPV6_NEIGHBOR_ADVERT => {
                let f = p.flags();
                Ok(NdpRepr::Advert {
                    router: f & 0x80 != 0,
                    solicited: f & 0x40 != 0,
                    override_: f & 0x20 != 0,
                    target,
                    target_mac: p.link_layer_option(2)?,
                })
            }
            _ => Err(Error::NotNeighbour),
        }
    }

    /// Bytes [`NdpRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let has_option = match self {
            NdpRepr::Solicit { source_mac, .. } => source_mac.is_some(),
            NdpRepr::Advert { target_mac, .. } => target_mac.is_some(),
        };
        NDP_LEN + if has_option { 8 } else { 0 }
    }

    /// Writes the message, checksum included, into a view of at least
    /// [`NdpRepr::buffer_len`] bytes (and no more: the checksum covers the
    /// whole view).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut NdpPacket<T>,
        src: Ipv6Addr,
        dst: Ipv6Addr,
    ) {
        match *self {
            NdpRepr::Solicit { target, source_mac } => {
                p.set_header(ICMPV6_NEIGHBOR_SOLICIT, 0, target);
                if let Some(m) = source_mac {
                    p.set_link_layer_option(1, m);
                }
            }
            NdpRepr::Advert {
                router,
                solicited,
                override_,
                target,
                target_mac,
            } => {
                let flags =
                    u8::from(router) << 7 | u8::from(solicited) << 6 | u8::from(override_) << 5;
                p.set_header(ICMPV6_NEIGHBOR_ADVERT, flags, target);
                if let Some(m) = target_mac {
                    p.set_link_layer_option(2, m);
                }
            }
        }
        let c = icmpv6_checksum(src, dst, p.buffer.as_ref());
        p.set_checksum(c);
    }
}

/// A neighbour-discovery frame's meaning, Ethernet header included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Ethernet destination.
    pub eth_dst: [u8; 6],
    /// Ethernet source.
    pub eth_src: [u8; 6],
    /// The message.
    pub body: Body,
}

/// What a neighbour-discovery frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// An ARP packet.
    Arp(ArpRepr),
    /// An NS or NA with the addresses of its IPv6 header.
    Ndp {
        /// IPv6 source.
        src: Ipv6Addr,
        /// IPv6 destination.
        dst: Ipv6Addr,
        /// The message.
        repr: NdpRepr,
    },
}

impl Frame {
    /// Parses an Ethernet frame holding ARP or an NDP NS/NA; anything else is
    /// [`Error::NotNeighbour`].
    pub fn parse(frame: &[u8]) -> Result<Frame, Error> {
        let eth = ethernet::Frame::new_checked(frame).map_err(|_| Error::Truncated)?;
        let (eth_dst, eth_src) = (eth.dst_addr(), eth.src_addr());
        let rest = eth.payload();
        let body = match eth.ethertype() {
            ETHERTYPE_ARP => Body::Arp(ArpRepr::parse(&ArpPacket::new_checked(rest)?)?),
            ETHERTYPE_IPV6 => {
                let ip = ipv6::Packet::new_checked(rest).map_err(|_| Error::Truncated)?;
                if ip.version() != 6 || ip.next_header() != NEXT_HEADER_ICMPV6 {
                    return Err(Error::NotNeighbour);
                }
                // Ethernet pads short frames: the payload length says where
                // the message ends.
                if IPV6_LEN + usize::from(ip.payload_len()) > rest.len() {
                    return Err(Error::Truncated);
                }
                let msg = ip.payload();
                match msg.first() {
                    Some(&ICMPV6_NEIGHBOR_SOLICIT | &ICMPV6_NEIGHBOR_ADVERT) => {}
                    _ => return Err(Error::NotNeighbour),
                }
                if ip.hop_limit() != 255 {
                    return Err(Error::HopLimit);
                }
                let (src, dst) = (ip.src_addr(), ip.dst_addr());
                let repr = NdpRepr::parse(&NdpPacket::new_checked(msg)?, src, dst)?;
                Body::Ndp { src, dst, repr }
            }
            _ => return Err(Error::NotNeighbour),
        };
        Ok(Frame {
            eth_dst,
            eth_src,
            body,
        })
    }

    /// Bytes [`Frame::emit`] writes (padded to [`MIN_FRAME`]).
    pub fn buffer_len(&self) -> usize {
        let n = ETH_LEN
            + match &self.body {
                Body::Arp(a) => a.buffer_len(),
                Body::Ndp { repr, .. } => IPV6_LEN + repr.buffer_len(),
            };
        n.max(MIN_FRAME)
    }

    /// Writes the frame into `buf`; returns its length, or `None` when `buf`
    /// is shorter than [`Frame::buffer_len`].
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let n = self.buffer_len();
        let buf = buf.get_mut(..n)?;
        buf.fill(0);
        let ethertype = match &self.body {
            Body::Arp(_) => ETHERTYPE_ARP,
            Body::Ndp { .. } => ETHERTYPE_IPV6,
        };
        let mut eth = ethernet::Frame::new_unchecked(&mut buf[..]);
        ethernet::Repr {
            src_addr: self.eth_src,
            dst_addr: self.eth_dst,
            ethertype,
        }
        .emit(&mut eth);
        let rest = eth.payload_mut();
        match &self.body {
            Body::Arp(a) => a.emit(&mut ArpPacket::new_unchecked(rest)),
            Body::Ndp { src, dst, repr } => {
                let len = repr.buffer_len();
                ipv6::Repr {
                    src_addr: *src,
                    dst_addr: *dst,
                    next_header: NEXT_HEADER_ICMPV6,
                    payload_len: len,
                    hop_limit: 255,
                }
                .emit(&mut ipv6::Packet::new_unchecked(&mut rest[..]));
                repr.emit(
                    &mut NdpPacket::new_unchecked(&mut rest[IPV6_LEN..IPV6_LEN + len]),
                    *src,
                    *dst,
                );
            }
        }
        Some(n)
    }

    /// The IP address this frame tells the link about, if it says where an
    /// address is (a request's or solicitation's sender, a reply's or
    /// advertisement's target).
    pub fn announced(&self) -> Option<(IpAddr, [u8; 6])> {
        match &self.body {
            Body::Arp(a) => Some((IpAddr::V4(a.sender_ip), a.sender_mac)),
            Body::Ndp {
                repr: NdpRepr::Advert {
                    target, target_mac, ..
                },
                ..
            } => Some((IpAddr::V6(*target), (*target_mac)?)),
            Body::Ndp {
                src,
                repr: NdpRepr::Solicit { source_mac, .. },
                ..
            } => Some((IpAddr::V6(*src), (*source_mac)?)),
        }
    }
}

/// The solicited-node multicast address of `a` (ff02::1:ffXX:XXXX).
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::new(
        0xff02,
        0,
        0,
        0,
        0,
        1,
        0xff00 | u16::from(o[13]),
        u16::from_be_bytes([o[14], o[15]]),
    )
}

/// The Ethernet multicast address of an IPv6 multicast address (33:33 and its
/// low 32 bits, RFC 2464).
pub fn multicast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// What the fast path must hand to the neighbour core: anything but IPv4 and
/// IPv6 (ARP and non-IP frames), and IPv6 NDP messages (ICMPv6 types 133 to
/// 137 right after the IPv6 header). One two-byte load and compare per IPv4
/// frame; IPv6 frames add two loads in the same cache line.
#[inline(always)]
pub fn is_diverted(frame: &[u8]) -> bool {
    let Ok(eth) = ethernet::Frame::new_checked(frame) else {
        return true;
    };
    match eth.ethertype() {
        ETHERTYPE_IPV4 => false,
        ETHERTYPE_IPV6 => {
            let rest = eth.payload();
            ipv6::Packet::new_checked(rest).is_ok_and(|ip| {
                ip.next_header() == NEXT_HEADER_ICMPV6
                    && rest
                        .get(IPV6_LEN)
                        .is_some_and(|t| (ICMPV6_ROUTER_SOLICIT..=ICMPV6_REDIRECT).contains(t))
            })
        }
        _ => true,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // A real ARP request (who has 10.1.0.1? tell 10.1.0.2), padded.
    static ARP_REQUEST: [u8; 60] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x06, // eth
        0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, // htype ptype hlen plen oper
        0x02, 0, 0, 0, 0, 0x01, 10, 1, 0, 2, // sha spa
        0, 0, 0, 0, 0, 0, 10, 1, 0, 1, // tha tpa
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding
    ];

    #[test]
    fn deconstruct_arp() {
        let p = ArpPacket::new_checked(&ARP_REQUEST[ETH_LEN..]).unwrap();
        assert_eq!(p.htype(), 1);
        assert_eq!(p.ptype(), ETHERTYPE_IPV4);
        assert_eq!(p.oper(), 1);
        assert_eq!(p.sha(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.spa(), Ipv4Addr::new(10, 1, 0, 2));
        assert_eq!(p.tpa(), Ipv4Addr::new(10, 1, 0, 1));
    }

    #[test]
    fn construct_and_parse_arp() {
        let f = Frame::parse(&ARP_REQUEST).unwrap();
        let mut out = [0u8; 64];
        let n = f.emit(&mut out).unwrap();
        assert_eq!(&out[..n], &ARP_REQUEST[..]);
        assert_eq!(
            f.announced(),
            Some((IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)), [2, 0, 0, 0, 0, 1]))
        );
    }

    #[test]
    fn truncated_and_wrong_types() {
        assert_eq!(Frame::parse(&ARP_REQUEST[..13]), Err(Error::Truncated));
        assert_eq!(Frame::parse(&ARP_REQUEST[..41]), Err(Error::Truncated));
        let mut f = ARP_REQUEST;
        f[ETH_LEN + field::OPER.end - 1] = 3;
        assert_eq!(Frame::parse(&f), Err(Error::ArpOp));
        let mut f = ARP_REQUEST;
        f[ETH_LEN + field::HLEN] = 8;
        assert_eq!(Frame::parse(&f), Err(Error::ArpType));
        let mut f = ARP_REQUEST;
        ethernet::Frame::new_unchecked(&mut f[..]).set_ethertype(ETHERTYPE_IPV4);
        assert_eq!(Frame::parse(&f), Err(Error::NotNeighbour));
    }

    fn ns() -> Frame {
        let src: Ipv6Addr = "fd00:1::2".parse().unwrap();
        let target: Ipv6Addr = "fd00:1::1".parse().unwrap();
        let dst = solicited_node(target);
        Frame {
            eth_dst: multicast_mac(dst),
            eth_src: [2, 0, 0, 0, 0, 1],
            body: Body::Ndp {
                src,
                dst,
                repr: NdpRepr::Solicit {
                    target,
                    source_mac: Some([2, 0, 0, 0, 0, 1]),
                },
            },
        }
    }

    #[test]
    fn ndp_round_trip_and_checksum() {
        let f = ns();
        let mut out = [0u8; MAX_EMIT];
        let n = f.emit(&mut out).unwrap();
        assert_eq!(n, ETH_LEN + IPV6_LEN + NDP_LEN + 8);
        assert_eq!(&out[..6], &[0x33, 0x33, 0xff, 0, 0, 1]);
        assert_eq!(Frame::parse(&out[..n]), Ok(f));
        let mut bad = out;
        bad[ETH_LEN + IPV6_LEN + 10] ^= 1;
        assert_eq!(Frame::parse(&bad[..n]), Err(Error::Checksum));
        let mut bad = out;
        bad[ETH_LEN + 7] = 64;
        assert_eq!(Frame::parse(&bad[..n]), Err(Error::HopLimit));
        // An option of length zero would loop forever if not rejected.
        let mut bad = out;
        bad[ETH_LEN + IPV6_LEN + NDP_LEN + 1] = 0;
        let (s, d) = match f.body {
            Body::Ndp { src, dst, .. } => (src, dst),
            Body::Arp(_) => unreachable!(),
        };
        let msg = &mut bad[ETH_LEN + IPV6_LEN..n];
        msg[2..4].fill(0);
        let c = icmpv6_checksum(s, d, msg);
        msg[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(Frame::parse(&bad[..n]), Err(Error::Option));
    }

    #[test]
    fn diverted_frames() {
        let mut ip4 = [0u8; 60];
        ip4[12] = 0x08;
        assert!(!is_diverted(&ip4));
        assert!(is_diverted(&ARP_REQUEST));
        assert!(is_diverted(&[0u8; 10]));
        let mut out = [0u8; MAX_EMIT];
        let n = ns().emit(&mut out).unwrap();
        assert!(is_diverted(&out[..n]));
        // IPv6 UDP is not diverted.
        out[ETH_LEN + 6] = 17;
        assert!(!is_diverted(&out[..n]));
        // An IPv6 header cut short is left to the consumer.
        assert!(!is_diverted(&out[..40]));
    }
}
