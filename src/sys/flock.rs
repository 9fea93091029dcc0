//! Advisory whole-file locks (`flock(2)`). A DPDK process holds a shared lock
//! on every hugepage file it maps and deletes, at start, the files of its own
//! prefix that nobody locks; `linerate doctor` uses the same test to find the
//! files a killed process of another prefix left behind.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Whether some open file description holds a lock on `file`: tries an
/// exclusive lock without blocking and, if it is granted, releases it at once.
pub fn is_locked(file: &File) -> io::Result<bool> {
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a valid open descriptor for as long as `file` is
    // borrowed; flock only reads it and has no memory arguments.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        // SAFETY: as above; releases the lock just taken.
        unsafe { libc::flock(fd, libc::LOCK_UN) };
        return Ok(false);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(true)
    } else {
        Err(e)
    }
}

/// Takes a shared lock on `file`, held until the file is closed (as DPDK
/// does for each hugepage file it maps).
pub fn lock_shared(file: &File) -> io::Result<()> {
    // SAFETY: as in is_locked.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn a_shared_lock_is_seen_from_another_open() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"x").unwrap();
        let probe = File::open(&p).unwrap();
        assert!(!is_locked(&probe).unwrap());
        assert!(
            !is_locked(&probe).unwrap(),
            "the probe released its own lock"
        );
        let holder = File::open(&p).unwrap();
        lock_shared(&holder).unwrap();
        assert!(is_locked(&probe).unwrap());
        drop(holder);
        assert!(!is_locked(&probe).unwrap(), "closing releases it");
    }
}
