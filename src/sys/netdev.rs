//! A kernel network interface's own counters, from sysfs.
//!
//! DPDK devices backed by a kernel interface (net_af_xdp, net_af_packet,
//! net_tap) receive through it, and the kernel counts frames it dropped there
//! in the interface's `rx_dropped`: for net_af_xdp on a veth, every frame the
//! XDP program could not hand to our socket (its ring full); the PMD's
//! `imissed` misses those. They are our receiver's drops, not the device
//! under test's.

use std::io;
use std::path::{Path, PathBuf};

/// The sysfs directory (`/sys/class/net/NAME`) of the interface with index
/// `ifindex` in this network namespace, if there is one.
pub fn sysfs_dir(ifindex: u32) -> Option<PathBuf> {
    sysfs_dir_in(Path::new("/sys/class/net"), ifindex)
}

fn sysfs_dir_in(root: &Path, ifindex: u32) -> Option<PathBuf> {
    std::fs::read_dir(root).ok()?.flatten().find_map(|e| {
        let dir = e.path();
        let index = std::fs::read_to_string(dir.join("ifindex")).ok()?;
        (index.trim().parse::<u32>().ok()? == ifindex).then_some(dir)
    })
}

/// One counter of an interface (`statistics/NAME` under its sysfs directory).
pub fn counter(dir: &Path, name: &str) -> io::Result<u64> {
    let text = std::fs::read_to_string(dir.join("statistics").join(name))?;
    text.trim().parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}/statistics/{name}: {e}", dir.display()),
        )
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn finds_an_interface_by_index_and_reads_its_counter() {
        let root = tempfile::tempdir().unwrap();
        for (name, index, dropped) in [("lo", "1\n", "0\n"), ("veth0", "7\n", "42\n")] {
            let d = root.path().join(name);
            std::fs::create_dir_all(d.join("statistics")).unwrap();
            std::fs::write(d.join("ifindex"), index).unwrap();
            std::fs::write(d.join("statistics/rx_dropped"), dropped).unwrap();
        }
        let d = sysfs_dir_in(root.path(), 7).unwrap();
        assert!(d.ends_with("veth0"));
        assert_eq!(counter(&d, "rx_dropped").unwrap(), 42);
        assert!(counter(&d, "rx_missing").is_err());
        assert!(sysfs_dir_in(root.path(), 9).is_none());
        std::fs::write(d.join("statistics/rx_dropped"), "many").unwrap();
        assert!(counter(&d, "rx_dropped").is_err());
    }

    #[test]
    fn loopback_is_found_here() {
        // Every namespace has `lo`; where sysfs is mounted it has a counter.
        if let Some(d) = sysfs_dir(1) {
            assert!(counter(&d, "rx_dropped").is_ok());
        }
    }
}
