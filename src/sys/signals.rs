//! SIGINT and SIGTERM, handled alike: the first sets a flag that runs, trials
//! and searches poll to stop what they are doing and still write what they
//! finished; the second exits at once (status 128 + the signal), for a user
//! or a job scheduler that will not wait.
//!
//! The handler only touches atomics and calls `_exit`, both async-signal-safe.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Once;

static FLAG: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicI32 = AtomicI32::new(0);
static INSTALL: Once = Once::new();

extern "C" fn on_signal(sig: libc::c_int) {
    if SIGNAL
        .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
        .is_err()
    {
        // SAFETY: `_exit` is async-signal-safe and ends the process without
        // running anything else.
        unsafe { libc::_exit(128 + sig) };
    }
    FLAG.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGINT and SIGTERM (once) and returns the flag
/// the first of them sets.
pub fn interrupt_flag() -> &'static AtomicBool {
    INSTALL.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: a zeroed sigaction is a valid empty one; the handler
            // has the signature `sa_handler` expects and is async-signal-safe.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    });
    &FLAG
}

/// Sets the flag as a signal would, without one: what polls it stops and
/// reports as if interrupted (a run across hosts whose other host was
/// interrupted). [`received`] still says no signal came.
pub fn interrupt_without_signal() {
    FLAG.store(true, Ordering::SeqCst);
}

/// The signal that set the flag, if one did.
pub fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The exit status for an interrupted command: 130 for SIGINT, 143 for
/// SIGTERM (128 + the signal, as a shell reports it).
pub fn exit_status() -> Option<u8> {
    received().map(|s| (128 + s).clamp(0, 255) as u8)
}

/// The name of the signal received, for reports.
pub fn name() -> Option<&'static str> {
    received().map(|s| match s {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    })
}
