//! Fuzzes the neighbour (ARP/NDP) parser and the core's receive path.
//!
//! The input is split into frames at 0xFE markers. Each is parsed on its own
//! (a frame that parses must re-emit to one that parses to the same value, and
//! be one the fast path diverts), then fed to a core that owns IPv4 and IPv6
//! addresses and is resolving a gateway of each family, so the answer, learn
//! and resolve paths are all reachable. Nothing may panic, and every frame the
//! core queues must parse.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use linerate::neigh::wire::{self, Frame};
use linerate::neigh::{Config, Neighbour, Owned};
use linerate::time::Instant;

fuzz_target!(|data: &[u8]| {
    let mut n = Neighbour::new(Config {
        mac: [2, 0, 0, 0, 0, 2],
        addrs: vec![
            Owned::parse("10.1.0.2/24").unwrap(),
            Owned::parse("fd00:1::2/64").unwrap(),
        ],
    });
    let now = Instant::from_millis(1);
    let iv = Duration::from_millis(10);
    n.resolve(now, "10.1.0.1".parse().unwrap(), "10.1.0.2".parse().unwrap(), 3, iv);
    n.resolve(now, "fd00:1::1".parse().unwrap(), "fd00:1::2".parse().unwrap(), 3, iv);
    n.announce();
    let mut buf = [0u8; wire::MAX_EMIT];
    for frame in data.split(|&b| b == 0xfe) {
        if let Ok(f) = Frame::parse(frame) {
            assert!(wire::is_diverted(frame));
            let len = f.emit(&mut buf).expect("emit buffer too short");
            assert_eq!(Frame::parse(&buf[..len]), Ok(f));
        }
        let _ = n.handle_frame(frame);
        while let Some(len) = n.poll_transmit(&mut buf) {
            Frame::parse(&buf[..len]).expect("the core sent a frame it cannot parse");
        }
    }
    n.handle_timeout(now + iv * 5);
    let _ = n.poll_timeout();
});
