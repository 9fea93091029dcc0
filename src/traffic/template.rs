//! Ethernet/IPv4/UDP frames built from a template once and patched per packet.
//!
//! For each frame size a template holds the whole frame and the
//! ones'-complement sums of its constant parts; per packet only the flow's
//! addresses and ports and the stamp are written, and both checksums are
//! completed from the precomputed sums (the Internet checksum is a sum, so the
//! variable words are simply added). No allocation, no loop over the payload.

use std::net::Ipv4Addr;

use super::stamp::{Repr as StampRepr, Stamp, LEN as STAMP_LEN};
use crate::rng::SplitMix64;

/// Ethernet + IPv4 + UDP header bytes.
pub const HEADERS: usize = 14 + 20 + 8;
/// Smallest frame (FCS included) that holds headers and stamp.
pub const MIN_FRAME: usize = 64;
/// Largest frame (FCS included).
pub const MAX_FRAME: usize = 9018;
const FCS: usize = 4;

/// A contiguous range of IPv4 addresses, `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRange {
    /// First address.
    pub first: Ipv4Addr,
    /// Number of addresses.
    pub count: u32,
}

impl AddrRange {
    /// Parses `"10.0.0.1"` or `"10.0.0.1-10.0.0.100"`.
    pub fn parse(s: &str) -> Result<AddrRange, String> {
        let bad = || format!("`{s}` is not an IPv4 address or range like \"10.0.0.1-10.0.0.100\"");
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a: Ipv4Addr = a.trim().parse().map_err(|_| bad())?;
        let b: Ipv4Addr = b.trim().parse().map_err(|_| bad())?;
        let (x, y) = (u32::from(a), u32::from(b));
        if y < x {
            return Err(bad());
        }
        Ok(AddrRange {
            first: a,
            count: y - x + 1,
        })
    }

    fn nth(&self, i: u32) -> u32 {
        u32::from(self.first).wrapping_add(i)
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

impl Default for FrameSpec {
    fn default() -> Self {
        FrameSpec {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: AddrRange {
                first: Ipv4Addr::new(10, 0, 0, 1),
                count: 1,
            },
            dst_ip: AddrRange {
                first: Ipv4Addr::new(10, 0, 0, 2),
                count: 1,
            },
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

/// Adds big-endian 16-bit words to a ones'-complement accumulator.
#[inline]
fn sum_words(acc: u32, bytes: &[u8]) -> u32 {
    let mut acc = acc;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        acc += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

#[inline]
fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[inline]
fn add32(acc: u32, v: u32) -> u32 {
    acc + (v >> 16) + (v & 0xffff)
}

/// The Internet checksum of `bytes` (with its checksum field zeroed).
pub fn checksum(bytes: &[u8]) -> u16 {
    !fold(sum_words(0, bytes))
}

struct Template {
    frame: Vec<u8>,
    /// Sum of the IPv4 header without addresses and checksum.
    ip_base: u32,
    /// Sum of UDP pseudo-header and datagram without addresses, ports, stamp, checksum.
    udp_base: u32,
}

impl Template {
    fn new(spec: &FrameSpec, size: usize) -> Template {
        let len = size - FCS;
        let mut f = vec![0u8; len];
        f[0..6].copy_from_slice(&spec.dst_mac);
        f[6..12].copy_from_slice(&spec.src_mac);
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let ip_len = (len - 14) as u16;
        let udp_len = ip_len - 20;
        {
            let ip = &mut f[14..34];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
            ip[6] = 0x40;
            ip[8] = 64;
            ip[9] = 17;
        }
        f[38..40].copy_from_slice(&udp_len.to_be_bytes());
        let ip_base = sum_words(0, &f[14..34]);
        // Pseudo-header: protocol and UDP length; then the UDP length field itself.
        let udp_base = 17 + u32::from(udp_len) * 2;
        Template {
            frame: f,
            ip_base,
            udp_base,
        }
    }
}

/// Writes frames of a [`FrameSpec`] into packet buffers.
pub struct FrameBuilder {
    templates: Vec<Template>,
    /// Template index per slot of the size cycle.
    cycle: Vec<u8>,
    spec: FrameSpec,
    flows: u64,
    rng: SplitMix64,
    /// Round-robin position as mixed-radix digits (destination port, source
    /// port, destination address, source address): stepping it needs no
    /// division, which cost about a third of the generator's time per packet.
    odometer: [u32; 4],
    next_size: usize,
}

impl FrameBuilder {
    /// Builds the templates. Sizes must be within [`MIN_FRAME`]..=[`MAX_FRAME`]
    /// (the pipeline validates this).
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
        FrameBuilder {
            templates: sizes.iter().map(|&s| Template::new(spec, s)).collect(),
            cycle,
            flows: spec.flows().max(1),
            rng: SplitMix64::new(spec.seed),
            spec: spec.clone(),
            odometer: [0; 4],
            next_size: 0,
        }
    }

    /// The size (FCS included) of the next frame [`FrameBuilder::write`] writes.
    pub fn next_frame_len(&self) -> usize {
        self.templates[self.cycle[self.next_size] as usize]
            .frame
            .len()
            + FCS
    }

    /// Writes the next frame into `buf` (which must hold the largest frame) and
    /// returns its length without FCS.
    #[inline]
    pub fn write(&mut self, buf: &mut [u8], stamp: &StampRepr) -> usize {
        let t = &self.templates[self.cycle[self.next_size] as usize];
        self.next_size += 1;
        if self.next_size == self.cycle.len() {
            self.next_size = 0;
        }
        let s = &self.spec;
        let counts = [
            s.dst_port.count,
            s.src_port.count,
            s.dst_ip.count,
            s.src_ip.count,
        ];
        let digits = match s.order {
            FlowOrder::RoundRobin => {
                let d = self.odometer;
                for (digit, &count) in self.odometer.iter_mut().zip(&counts) {
                    *digit += 1;
                    if *digit < count {
                        break;
                    }
                    *digit = 0;
                }
                d
            }
            FlowOrder::Random => {
                // Mixed radix: destination port varies fastest.
                let mut k = self.rng.next_u64() % self.flows;
                let mut d = [0u32; 4];
                for (digit, &count) in d.iter_mut().zip(&counts) {
                    *digit = (k % u64::from(count)) as u32;
                    k /= u64::from(count);
                }
                d
            }
        };
        let dport = s.dst_port.first as u32 + digits[0];
        let sport = s.src_port.first as u32 + digits[1];
        let dip = s.dst_ip.nth(digits[2]);
        let sip = s.src_ip.nth(digits[3]);

        let len = t.frame.len();
        let f = &mut buf[..len];
        f.copy_from_slice(&t.frame);
        f[26..30].copy_from_slice(&sip.to_be_bytes());
        f[30..34].copy_from_slice(&dip.to_be_bytes());
        let ip_sum = !fold(add32(add32(t.ip_base, sip), dip));
        f[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        f[34..36].copy_from_slice(&(sport as u16).to_be_bytes());
        f[36..38].copy_from_slice(&(dport as u16).to_be_bytes());
        stamp.emit(&mut Stamp::new_unchecked(
            &mut f[HEADERS..HEADERS + STAMP_LEN],
        ));
        let mut udp = add32(add32(t.udp_base, sip), dip) + sport + dport;
        udp += stamp.word_sum();
        let mut udp_sum = !fold(udp);
        if udp_sum == 0 {
            udp_sum = 0xffff; // 0 means "no checksum" in UDP over IPv4
        }
        f[40..42].copy_from_slice(&udp_sum.to_be_bytes());
        len
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn verify(frame: &[u8]) {
        assert_eq!(checksum(&frame[14..34]), 0, "IPv4 header checksum");
        let ip = &frame[14..34];
        let udp = &frame[34..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ip[12..20]);
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(udp);
        assert_eq!(checksum(&pseudo), 0, "UDP checksum");
        assert_eq!(u16::from_be_bytes([udp[4], udp[5]]) as usize, udp.len());
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
            seen.insert((buf[33], u16::from_be_bytes([buf[34], buf[35]])));
        }
        assert_eq!(seen.len(), 12);
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
}
