//! What the analyzer reads from the wire (Ethernet/IPv4 or IPv6/UDP frames and
//! the stamp in them) and the generator's address and port ranges parse or
//! fail cleanly, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::traffic::analyzer::{stamped, udp_payload};
use linerate::traffic::stamp::{Repr, Stamp};
use linerate::traffic::template::{AddrRange, Encap, PortRange};

fuzz_target!(|data: &[u8]| {
    if let Some((_, _, s)) = stamped(data, 4789) {
        let _ = Repr::parse(&s);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Encap::parse_vlan(s);
    }
    if let Some(payload) = udp_payload(data) {
        if let Ok(s) = Stamp::new_checked(payload) {
            let _ = Repr::parse(&s);
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(r) = AddrRange::parse(s) {
            let _ = (r.is_v6(), r.count);
        }
        let _ = PortRange::parse(s);
    }
});
