//! L2-L4 headers on the wire, smoltcp-shaped: Ethernet II, 802.1Q/802.1ad
//! (QinQ) tags, IPv4, IPv6, UDP, VXLAN, MPLS and the internet checksum. This
//! is the one home of header code: nothing else in the crate reads or writes
//! a header field at a raw offset.
//!
//! Each header has a zero-copy view over a byte slice, `Packet<T:
//! AsRef<[u8]>>` (`ethernet::Frame`, `vlan::Tag`, `mpls::Entry`), with
//! `new_unchecked`, `new_checked` and `check_len`, accessors and (when `T:
//! AsMut<[u8]>`) setters, and a `Repr` (the header's meaning) with `parse`,
//! `buffer_len` and `emit`. Field positions live in each file's private
//! `field` module.
//!
//! Contract: no function here panics on any input. Once `check_len` (or
//! `new_checked`) returns `Ok`, no accessor of that view panics, whatever the
//! bytes say; a length field that runs past the buffer is clamped by the
//! accessor that uses it (`payload`), and refused by `Repr::parse` and by
//! [`udp_payload`]. Setters and `emit` may panic only on a buffer shorter
//! than the header they write (`Repr::buffer_len`), which is a caller's bug,
//! not an input.
//!
//! [`udp_payload`] walks a whole frame (Ethernet, up to two VLAN tags, IPv4 or
//! IPv6 with its extension headers, UDP) and says where the datagram's
//! payload is or why there is none; every receive path that looks for a UDP
//! payload uses it. [`stack`] writes whole header stacks into templates and
//! patches their lengths per packet. [`encap::walk`] is the walk that also
//! looks through MPLS label stacks and VXLAN tunnels, and says what it passed.

pub mod checksum;
pub mod encap;
pub mod ethernet;
pub mod ipv4;
pub mod ipv6;
pub mod mpls;
pub mod stack;
pub mod udp;
pub mod vlan;
pub mod vxlan;
mod walk;

pub use walk::{udp_payload, IpVersion, UdpView, WhyNot, MAX_TAGS};

/// Why a header view or `Repr` refused its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length field says.
    #[error("truncated header")]
    Truncated,
    /// A field holds a value the header cannot have (a version, a length
    /// shorter than the header itself).
    #[error("malformed header")]
    Malformed,
    /// An IPv4 fragment (not reassembled, never parsed as UDP).
    #[error("IP fragment")]
    Fragment,
    /// A header checksum that does not match.
    #[error("checksum mismatch")]
    Checksum,
}

/// A big-endian u16 at `at` (in bounds: callers checked the length).
#[inline(always)]
fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Writes a big-endian u16 at `at`.
#[inline(always)]
fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Six bytes from `at` as a MAC address.
#[inline(always)]
fn get_mac(b: &[u8], at: usize) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}
