//! The DPDK Environment Abstraction Layer: once-per-process initialisation
//! from plain argument strings, thread registration, cleanup.
//!
//! DPDK allows `rte_eal_init` to run once per process (even after
//! `rte_eal_cleanup`, or after a failed attempt, it cannot run again). So
//! [`init`] runs it at most once: the first call decides, later calls with
//! the same arguments get the same [`Eal`] handle, and calls with different
//! arguments (or after a failure) return [`DpdkError::EalOnce`]. Every
//! wrapper that needs a live EAL takes `&Eal`, which proves initialisation.

use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};
use std::sync::Mutex;

use super::error::{rte_errno, strerror, DpdkError};
use crate::sys::ffi::dpdk as ffi;

/// Proof that the EAL is initialised in this process. Obtained from [`init`];
/// lives for the rest of the process.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
}

enum State {
    Ready(&'static Eal),
    Failed { args: Vec<String>, error: String },
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

extern "C" {
    // From rte_log.h; declared here with libc's FILE (bindgen's FILE type is a
    // distinct Rust type). A null stream restores the default (stderr/syslog).
    fn rte_openlog_stream(f: *mut libc::FILE) -> c_int;
}

/// Initialises the EAL with `args` (without a program name: `linerate` is
/// prepended as argv\[0\]), e.g. `["-l", "0", "--no-huge", "-m", "256",
/// "--vdev=net_null0"]`, exactly as the pipeline's `[eal]` section lists them.
///
/// Runs `rte_eal_init` once per process; see the module doc. On failure the
/// error carries `rte_strerror(rte_errno)` and the EAL's own log lines from
/// the attempt (e.g. "EAL: Cannot get hugepage information.").
pub fn init<S: AsRef<str>>(args: &[S]) -> Result<&'static Eal, DpdkError> {
    let requested: Vec<String> = args.iter().map(|s| s.as_ref().to_string()).collect();
    let mut state = STATE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match &*state {
        Some(State::Ready(eal)) if eal.args == requested => return Ok(eal),
        Some(State::Ready(eal)) => {
            return Err(DpdkError::EalOnce {
                state: "initialised".into(),
                existing: eal.args.join(" "),
                requested: requested.join(" "),
            })
        }
        Some(State::Failed { args, error }) => {
            return Err(DpdkError::EalOnce {
                state: format!("failed to initialise ({error})"),
                existing: args.join(" "),
                requested: requested.join(" "),
            })
        }
        None => {}
    }
    let mut cargs = Vec::with_capacity(requested.len() + 1);
    cargs.push(CString::new("linerate").map_err(|_| DpdkError::Nul {
        what: "program name",
        value: "linerate".into(),
    })?);
    for a in &requested {
        cargs.push(CString::new(a.as_str()).map_err(|_| DpdkError::Nul {
            what: "EAL argument",
            value: a.clone(),
        })?);
    }
    // The EAL may keep pointers into argv (and permutes it): leak the strings
    // and the array; this happens once per process.
    let argv: &'static mut [*mut c_char] = Vec::leak(
        cargs
            .into_iter()
            .map(CString::into_raw)
            .chain(std::iter::once(std::ptr::null_mut()))
            .collect(),
    );
    let argc = (argv.len() - 1) as c_int;

    let capture = LogCapture::start();
    // SAFETY: argv is a NUL-terminated array of argc valid, leaked C strings
    // followed by a null pointer, as C's main() would pass; the STATE mutex is
    // held, so no other thread of ours calls rte_eal_init concurrently, and it
    // has not run before in this process (STATE was None).
    let ret = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
    let errno = rte_errno();
    let log = capture.finish(ret < 0);
    if ret < 0 {
        let reason = strerror(errno);
        let err = DpdkError::EalInit {
            errno,
            reason: reason.clone(),
            log: if log.is_empty() {
                String::new()
            } else {
                format!("; EAL said: {log}")
            },
            args: requested.join(" "),
        };
        *state = Some(State::Failed {
            args: requested,
            error: reason,
        });
        return Err(err);
    }
    let eal: &'static Eal = Box::leak(Box::new(Eal { args: requested }));
    *state = Some(State::Ready(eal));
    Ok(eal)
}

/// Redirects the EAL log into memory during `rte_eal_init`, so a failure can
/// quote the EAL's own words; on success the captured lines are forwarded to
/// stderr as the EAL would have printed them.
struct LogCapture {
    stream: *mut libc::FILE,
    buf: *mut c_char,
    len: libc::size_t,
}

impl LogCapture {
    /// Leaked on purpose (once per process): the stream is never closed, see
    /// finish(), so the out-pointers it writes must stay valid forever.
    fn start() -> &'static mut LogCapture {
        let cap = Box::leak(Box::new(LogCapture {
            stream: std::ptr::null_mut(),
            buf: std::ptr::null_mut(),
            len: 0,
        }));
        // SAFETY: open_memstream stores into the two out-pointers, which live
        // in the leaked (address-stable, never freed) struct.
        let stream = unsafe { libc::open_memstream(&mut cap.buf, &mut cap.len) };
        if !stream.is_null() {
            cap.stream = stream;
            // SAFETY: stream is a valid FILE*; the EAL only writes to it.
            unsafe { rte_openlog_stream(stream) };
        }
        cap
    }

    /// Restores the default log stream and returns the captured lines (the
    /// last few, joined with " | ") when `failed`; otherwise forwards them.
    fn finish(&mut self, failed: bool) -> String {
        if self.stream.is_null() {
            return String::new();
        }
        // SAFETY: restoring the default stream (null) is always valid. Then
        // fflush makes buf/len describe everything written so far. The
        // stream is deliberately not closed: an EAL thread started by init
        // could have fetched it just before the switch (once per process).
        let text = unsafe {
            rte_openlog_stream(std::ptr::null_mut());
            libc::fflush(self.stream);
            if self.buf.is_null() {
                String::new()
            } else {
                let bytes = std::slice::from_raw_parts(self.buf.cast::<u8>(), self.len);
                String::from_utf8_lossy(bytes).into_owned()
            }
        };
        if !failed {
            eprint!("{text}");
            return String::new();
        }
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let start = lines.len().saturating_sub(6);
        lines[start..].join(" | ")
    }
}

impl Eal {
    /// The arguments the EAL was initialised with.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// The DPDK version string, e.g. "DPDK 22.11.11".
    pub fn version(&self) -> String {
        version()
    }

    /// The number of EAL lcores (`-l`).
    pub fn lcore_count(&self) -> u32 {
        // SAFETY: the EAL is initialised (self exists); a plain query.
        unsafe { ffi::rte_lcore_count() }
    }

    /// The main lcore's id.
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: the EAL is initialised; a plain query.
        unsafe { ffi::rte_get_main_lcore() }
    }

    /// Tears the EAL down (`rte_eal_cleanup`).
    ///
    /// # Safety
    /// No DPDK object (pool, mbuf, port, queue, registered thread) may be
    /// used after this, by any thread, and the EAL cannot be initialised
    /// again in this process; every `&Eal` becomes a dangling proof.
    pub unsafe fn cleanup(&self) -> Result<(), DpdkError> {
        // SAFETY: the caller guarantees nothing uses DPDK afterwards.
        let ret = unsafe { ffi::rte_eal_cleanup() };
        super::error::check(|| "rte_eal_cleanup".into(), ret).map(|_| ())
    }
}

/// The DPDK version string (`rte_version()`); needs no EAL.
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    unsafe {
        CStr::from_ptr(ffi::rte_version())
            .to_string_lossy()
            .into_owned()
    }
}

/// The calling thread's lcore id: `Some` on EAL lcores and registered
/// threads, `None` on other threads (their mempool caches are bypassed).
pub fn lcore_id() -> Option<u32> {
    // SAFETY: reads a thread-local through the shim.
    let id = unsafe { ffi::lr_rte_lcore_id() };
    (id != ffi::LCORE_ID_ANY).then_some(id)
}

/// Whether the EAL runs on hugepages (false with `--no-huge`, where DPDK's
/// memory is 4 KiB pages).
pub fn has_hugepages() -> bool {
    // SAFETY: reads the EAL's configuration; valid once it is initialised,
    // and callers hold an `Eal` (a port being opened).
    unsafe { ffi::rte_eal_has_hugepages() != 0 }
}

/// The NUMA socket of the calling thread (`rte_socket_id()`).
pub fn socket_id() -> i32 {
    // SAFETY: reads a thread-local; valid on any thread.
    unsafe { ffi::rte_socket_id() as i32 }
}

/// A thread registered with the EAL ([`register_thread`]); unregisters on
/// drop. Not `Send`: the registration belongs to the thread that made it.
#[derive(Debug)]
pub struct ThreadRegistration {
    lcore: u32,
    registered_here: bool,
    _not_send: PhantomData<*const ()>,
}

impl ThreadRegistration {
    /// The lcore id the thread now has.
    pub fn lcore_id(&self) -> u32 {
        self.lcore
    }
}

/// Gives the calling (non-EAL) thread an lcore id with `rte_thread_register`,
/// so mempool per-lcore caches and other per-lcore state work on it. On an
/// EAL lcore (or an already registered thread) it changes nothing. Lcores
/// running DPDK stages in linerate's runtime call this first.
pub fn register_thread(_eal: &Eal) -> Result<ThreadRegistration, DpdkError> {
    if let Some(lcore) = lcore_id() {
        return Ok(ThreadRegistration {
            lcore,
            registered_here: false,
            _not_send: PhantomData,
        });
    }
    // SAFETY: the EAL is initialised (_eal); registers the calling thread.
    let ret = unsafe { ffi::rte_thread_register() };
    if ret < 0 {
        return Err(DpdkError::Call {
            op: "rte_thread_register (all RTE_MAX_LCORE lcore ids in use?)".into(),
            errno: rte_errno(),
            reason: strerror(rte_errno()),
        });
    }
    Ok(ThreadRegistration {
        lcore: lcore_id().unwrap_or(u32::MAX),
        registered_here: true,
        _not_send: PhantomData,
    })
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        if self.registered_here {
            // SAFETY: this thread registered itself (the guard is !Send, so we
            // are on that thread); unregistering releases its lcore id.
            unsafe { ffi::rte_thread_unregister() };
        }
    }
}

/// Lets the calling thread run on any of `cores` (the EAL pins the main
/// thread to its first lcore; threads started from it inherit that).
/// Failures are ignored: the thread keeps the affinity it had.
pub fn set_affinity(cores: &[usize]) {
    if cores.is_empty() {
        return;
    }
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cores {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is below CPU_SETSIZE, so the bit is inside `set`.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the
    // size we pass.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}
