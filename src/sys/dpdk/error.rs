//! The error type of the DPDK wrappers.

use std::ffi::CStr;

use crate::sys::ffi::dpdk as ffi;

/// A DPDK call failed; each variant carries DPDK's own reason.
#[derive(Debug, thiserror::Error)]
pub enum DpdkError {
    /// `rte_eal_init` failed.
    #[error(
        "EAL initialisation failed: {reason} (rte_errno {errno}){log}; EAL arguments: [{args}]"
    )]
    EalInit {
        /// `rte_errno` after the call.
        errno: i32,
        /// `rte_strerror(rte_errno)`.
        reason: String,
        /// The EAL's own log lines printed during the failed init, prefixed
        /// with `"; EAL said: "` (empty when it logged nothing).
        log: String,
        /// The arguments passed, space separated.
        args: String,
    },
    /// `rte_eal_init` can run once per process.
    #[error(
        "the EAL can be initialised once per process: it is already {state} with [{existing}], \
         requested [{requested}]"
    )]
    EalOnce {
        /// "initialised" or "failed to initialise (reason)".
        state: String,
        /// The arguments of the first call.
        existing: String,
        /// The arguments of this call.
        requested: String,
    },
    /// An argument or name contained a NUL byte.
    #[error("{what} contains a NUL byte: {value:?}")]
    Nul {
        /// Which argument.
        what: &'static str,
        /// Its value.
        value: String,
    },
    /// No ethdev with this name or PCI address.
    #[error("no DPDK port named {name:?} (probed ports: [{available}]); for a vdev add --vdev=<driver><n>,... to the EAL arguments, for a NIC bind it to vfio-pci and add -a <pci address>")]
    NoSuchPort {
        /// The name looked up.
        name: String,
        /// The names of the probed ports.
        available: String,
    },
    /// A DPDK call returned an error.
    #[error("{op} failed: {reason} (errno {errno})")]
    Call {
        /// The DPDK function and its subject.
        op: String,
        /// The positive errno.
        errno: i32,
        /// `rte_strerror(errno)`.
        reason: String,
    },
    /// A parameter is outside what the device or DPDK accepts.
    #[error("{0}")]
    Invalid(String),
}

/// `rte_strerror(errno)` as a string (DPDK's own messages for its errnos,
/// libc's for the rest).
pub fn strerror(errno: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or per-lcore
    // thread-local buffer holding a NUL-terminated string; we copy it at once.
    unsafe {
        let p = ffi::rte_strerror(errno);
        if p.is_null() {
            return format!("errno {errno}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int through the shim; no preconditions.
    unsafe { ffi::lr_rte_errno() }
}

/// Builds a [`DpdkError::Call`] from a DPDK return code (negative errno) or,
/// when `ret` is -1 and `rte_errno` is set, from `rte_errno`.
pub(crate) fn call_error(op: impl Into<String>, ret: i32) -> DpdkError {
    let errno = if ret == -1 {
        match rte_errno() {
            0 => 1,
            e => e,
        }
    } else {
        -ret
    };
    DpdkError::Call {
        op: op.into(),
        errno,
        reason: strerror(errno),
    }
}

/// `Ok(ret)` when `ret >= 0`, else the error of [`call_error`].
pub(crate) fn check(op: impl FnOnce() -> String, ret: i32) -> Result<i32, DpdkError> {
    if ret < 0 {
        Err(call_error(op(), ret))
    } else {
        Ok(ret)
    }
}
