//! The kernel's counters of the AF_PACKET sockets this process holds.
//!
//! DPDK's `net_af_packet` receives through a socket ring (PACKET_RX_RING). When
//! the ring is full, the kernel drops the frame and counts it in the socket's
//! `PACKET_STATISTICS` (`tp_drops`), which the PMD does not read: its
//! `imissed` stays 0 (DPDK 22.11 and later). Those are our receiver's drops,
//! not the device under test's, so the dpdk port reads them here.
//!
//! The PMD's sockets are found by interface: `/proc/net/packet` lists every
//! packet socket of the network namespace with its interface index and inode,
//! `/proc/self/fd` says which inodes are ours.

use std::io;
use std::os::fd::RawFd;

/// One AF_PACKET socket of this process (a file descriptor someone else owns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketSocket {
    fd: RawFd,
    inode: u64,
}

/// The inodes of the packet sockets bound to `ifindex`, from the text of
/// `/proc/net/packet` (`sk RefCnt Type Proto Iface R Rmem User Inode`).
/// Lines that do not parse are skipped.
pub fn inodes_on(proc_net_packet: &str, ifindex: u32) -> Vec<u64> {
    proc_net_packet
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let iface: u32 = f.get(4)?.parse().ok()?;
            let inode: u64 = f.get(8)?.parse().ok()?;
            (iface == ifindex).then_some(inode)
        })
        .collect()
}

/// The inode of a `/proc/self/fd` link target such as `socket:[1234]`.
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

fn fd_inode(fd: RawFd) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    socket_inode(link.to_str()?)
}

/// This process's packet sockets bound to the interface `ifindex`.
pub fn sockets_on(ifindex: u32) -> io::Result<Vec<PacketSocket>> {
    let table = std::fs::read_to_string("/proc/net/packet")?;
    let wanted = inodes_on(&table, ifindex);
    let mut out = Vec::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(inode) = fd_inode(fd).filter(|i| wanted.contains(i)) {
            out.push(PacketSocket { fd, inode });
        }
    }
    out.sort_by_key(|s| s.fd);
    Ok(out)
}

impl PacketSocket {
    /// Frames the kernel dropped since the last call because the socket's
    /// receive ring (or buffer) was full. Reading resets the kernel's
    /// counters, so each drop is returned once. 0 when the descriptor no
    /// longer refers to this socket (the PMD closed it when the port stopped).
    pub fn take_drops(&self) -> io::Result<u64> {
        // The descriptor is the PMD's: make sure it is still the same socket
        // before asking it anything (a closed number may have been reused).
        if fd_inode(self.fd) != Some(self.inode) {
            return Ok(0);
        }
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes and `len` holds the size
        // of `st`; the kernel writes at most `len` bytes. The descriptor is an
        // open packet socket (checked just above); a stale one fails cleanly.
        let ret = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(st.tp_drops))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    const TABLE: &str = "\
sk               RefCnt Type Proto  Iface R Rmem   User   Inode
ffff8a0c5e2f6000 3      3    0003   7     1 0      0      51234
ffff8a0c5e2f7000 3      3    0003   8     1 0      0      51240
ffff8a0c5e2f8000 3      3    0003   7     1 0      0      51301
garbage line
";

    #[test]
    fn inodes_by_interface() {
        assert_eq!(inodes_on(TABLE, 7), vec![51234, 51301]);
        assert_eq!(inodes_on(TABLE, 8), vec![51240]);
        assert!(inodes_on(TABLE, 9).is_empty());
        assert!(inodes_on("", 7).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn rows_give_back_their_inodes(
            rows in proptest::collection::vec((0u32..16, proptest::num::u64::ANY), 0..8),
            noise in ".*",
            want in 0u32..16,
        ) {
            let mut text = String::from(TABLE.lines().next().unwrap());
            for (iface, inode) in &rows {
                text.push_str(&format!("\nffff8a0c5e2f6000 3 3 0003 {iface} 1 0 0 {inode}"));
                text.push('\n');
                text.push_str(&noise.replace('\n', " "));
            }
            let expect: Vec<u64> =
                rows.iter().filter(|r| r.0 == want).map(|r| r.1).collect();
            let got = inodes_on(&text, want);
            // The noise lines may add rows of their own, never remove ours.
            proptest::prop_assert!(expect.iter().all(|i| got.contains(i)));
        }

        #[test]
        fn any_text_is_parsed_without_panic(text in ".*", ifindex in proptest::num::u32::ANY) {
            let _ = inodes_on(&text, ifindex);
            let _ = socket_inode(&text);
        }

        #[test]
        fn socket_links_round_trip(inode in proptest::num::u64::ANY) {
            proptest::prop_assert_eq!(socket_inode(&format!("socket:[{inode}]")), Some(inode));
        }
    }

    #[test]
    fn socket_links() {
        assert_eq!(socket_inode("socket:[51234]"), Some(51234));
        assert_eq!(socket_inode("pipe:[51234]"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
    }

    #[test]
    fn no_sockets_on_an_unused_interface() {
        // No packet socket of ours is bound to an index no interface has.
        if let Ok(s) = sockets_on(u32::MAX) {
            assert!(s.is_empty());
        }
    }

    #[test]
    fn a_socket_of_ours_is_found_and_read() {
        // Needs CAP_NET_RAW; without it there is nothing to find. Protocol 0:
        // the socket receives nothing, it only has to be listed.
        // SAFETY: plain socket(2) call; the descriptor is closed below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if fd < 0 {
            eprintln!("skipped: no CAP_NET_RAW");
            return;
        }
        // SAFETY: a NUL-terminated name.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        // SAFETY: sockaddr_ll is plain data; zero is a valid start.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_ifindex = lo as i32;
        // SAFETY: `sa` is a valid sockaddr_ll of the size given.
        let bound = unsafe {
            libc::bind(
                fd,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        let found = sockets_on(lo).unwrap();
        let mine = found.iter().find(|s| s.fd == fd).cloned();
        let open_read = mine.as_ref().map(|s| s.take_drops());
        // SAFETY: fd is ours and open.
        unsafe { libc::close(fd) };
        assert_eq!(bound, 0, "bind to lo");
        let mine = mine.expect("our packet socket listed on lo");
        assert_eq!(open_read.unwrap().unwrap(), 0);
        // Closed: the descriptor no longer names the socket, so nothing is read.
        assert_eq!(mine.take_drops().unwrap(), 0);
    }
}
