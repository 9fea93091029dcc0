//! Fuzzes the receive check of a frame port that carries UDP datagrams
//! (`linerate::port::encap::payload_of`): nothing may panic, and a frame
//! it accepts has its payload inside the frame. The first 12 bytes pick the
//! two addresses, so matching frames are reachable.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use libfuzzer_sys::fuzz_target;
use linerate::port::encap::{payload_of, HEADERS};

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let addr = |b: &[u8]| {
        SocketAddrV4::new(
            Ipv4Addr::new(b[0], b[1], b[2], b[3]),
            u16::from_be_bytes([b[4], b[5]]),
        )
    };
    let (from, to) = (addr(&data[..6]), addr(&data[6..12]));
    let frame = &data[12..];
    if let Some((at, len)) = payload_of(frame, &from, &to) {
        assert!(at >= HEADERS && at + len <= frame.len());
    }
});
