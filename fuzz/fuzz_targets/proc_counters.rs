//! Fuzzes the parsers of kernel text linerate reads to count our receiver's
//! drops: `/proc/net/packet` rows and `/proc/self/fd` link targets. Nothing may
//! panic; a row that names an interface must yield its inode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::sys::packet_socket::{inodes_on, socket_inode};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for ifindex in [0, 1, 7, u32::MAX] {
        let inodes = inodes_on(&text, ifindex);
        assert!(inodes.len() <= text.lines().count());
    }
    for line in text.lines() {
        let _ = socket_inode(line);
    }
});
