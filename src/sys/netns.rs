//! Network namespaces: a rank of a multi-host run enters its host's namespace
//! (`ip netns add NAME`, so /run/netns/NAME) after MPI is up, so MPI's own
//! traffic stays in the namespace it started in.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Moves the calling thread into network namespace `name` (threads it starts
/// afterwards inherit it).
pub fn enter(name: &str) -> io::Result<()> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a network namespace name"),
        ));
    }
    let path = format!("/run/netns/{name}");
    let f = File::open(&path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{path}: {e} (create it with `ip netns add {name}`)"),
        )
    })?;
    // SAFETY: setns on a valid, open namespace file descriptor; it only
    // changes this thread's namespace and reports failure through errno.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns({path}): {e}")));
    }
    Ok(())
}

/// The calling thread's network namespace, as its inode number.
pub fn current() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/thread-self/ns/net")?.ino())
}
