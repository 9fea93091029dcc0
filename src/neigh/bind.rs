//! Binds a port's neighbour core to its queues.
//!
//! Every receive queue of a port that owns addresses is wrapped. When the
//! stage reading it parses every frame anyway (an analyzer), it offers the
//! frames it does not recognise ([`RxQueue::offer`]) and the wrapper costs one
//! branch per burst. For other stages, after each burst one ethertype check per
//! frame ([`wire::is_diverted`]) finds the rare ARP, NDP and non-IP frames;
//! only then does the cold path lock the core, hand them over and take them
//! out of the burst. Transmit queue 0 is wrapped too:
//! before each burst it reads one flag, and when the core has frames waiting
//! (answers, requests, announcements) sends them first. When no stage owns
//! that queue (the analyzer's port of a one-way trial), the receive side sends
//! them itself through it.
//!
//! The core sits behind a mutex that only the cold path and the once-a-second
//! counter readers take.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::buf::{Burst, Pool};
use crate::port::{OpenPort, PortReport, PortStats, RxQueue, TxQueue};
use crate::time::{Clock, Instant};

use super::{wire, Config, Neighbour, Resolution};

/// How many requests a gateway resolution sends before giving up.
pub const RESOLVE_ATTEMPTS: u32 = 5;
/// How long a peer's resolution (`udp_connect`) waits by default
/// (`resolve_timeout`): the peer may be a process starting at the same time
/// as this one, still opening its port.
pub const PEER_RESOLVE_TIMEOUT: Duration = Duration::from_secs(9);
/// The wait between two requests of a resolution.
pub const RESOLVE_INTERVAL: Duration = Duration::from_millis(300);

/// Whom a resolution asks for, which sets how long it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// A generator's `gateway`: [`RESOLVE_ATTEMPTS`] requests.
    Gateway,
    /// A port's `udp_connect` peer, waited for this long in all (at least
    /// one request; as many as fit, [`RESOLVE_INTERVAL`] apart, rounded up).
    Peer(Duration),
}

impl Lookup {
    /// How many requests it sends before giving up.
    pub fn attempts(self) -> u32 {
        match self {
            Lookup::Gateway => RESOLVE_ATTEMPTS,
            Lookup::Peer(total) => {
                let n = total.as_nanos().div_ceil(RESOLVE_INTERVAL.as_nanos());
                u32::try_from(n).unwrap_or(u32::MAX).max(1)
            }
        }
    }

    fn role(self) -> &'static str {
        match self {
            Lookup::Gateway => "gateway",
            Lookup::Peer(_) => "peer",
        }
    }
}

/// A port's neighbour core and what its wrapped queues share.
pub struct NeighPort {
    core: Mutex<Neighbour>,
    /// Set when the core has frames to send; the one thing the fast path reads.
    pending_tx: AtomicBool,
    /// Transmit queue 0 when no stage took it.
    orphan: Mutex<Option<Box<dyn TxQueue>>>,
    pool: Pool,
}

impl NeighPort {
    fn core(&self) -> MutexGuard<'_, Neighbour> {
        // A panic on another thread while holding the core leaves plain data
        // behind; keep using it.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The port's neighbour configuration.
    pub fn config(&self) -> Config {
        self.core().config().clone()
    }

    /// The core's counters.
    pub fn counters(&self) -> super::Counters {
        self.core().counters()
    }

    /// Hands transmit queue 0 to the receive side, when no stage owns it.
    pub fn adopt_tx(&self, tx: Box<dyn TxQueue>) {
        *self.orphan.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
    }

    /// Sends what the core holds through the adopted transmit queue, if any
    /// and if no one else is doing it.
    fn kick_orphan(&self, now: Instant) {
        if let Ok(mut g) = self.orphan.try_lock() {
            if let Some(tx) = g.as_mut() {
                tx.flush(now);
            }
        }
    }

    /// Writes the core's waiting frames into packets of the pool and sends
    /// them on `tx`; frames the queue refuses are dropped (the peer asks again).
    #[cold]
    fn drain_into(&self, now: Instant, tx: &mut dyn TxQueue, burst: &mut Burst) {
        self.pending_tx.store(false, Ordering::Relaxed);
        let mut buf = [0u8; wire::MAX_EMIT];
        {
            let mut core = self.core();
            while burst.room() > 0 {
                let Some(n) = core.poll_transmit(&mut buf) else {
                    break;
                };
                let Some(mut p) = self.pool.alloc() else {
                    break;
                };
                if p.set_data(&buf[..n]).is_ok() {
                    let _ = burst.push(p);
                }
            }
            if core.has_transmit() {
                self.pending_tx.store(true, Ordering::Relaxed);
            }
        }
        if !burst.is_empty() {
            tx.tx_burst(now, burst);
            burst.clear();
        }
    }
}

/// Wraps a freshly opened port whose owner gave it addresses: its receive
/// queues divert neighbour frames to the core, its transmit queue 0 sends the
/// core's frames, its report gains the core's counters. The core's
/// announcements (gratuitous ARP, unsolicited NA) wait for the first flush of
/// transmit queue 0.
pub fn wrap(port: OpenPort, config: Config, pool: Pool) -> (OpenPort, Arc<NeighPort>) {
    let mut core = Neighbour::new(config);
    core.announce();
    let shared = Arc::new(NeighPort {
        core: Mutex::new(core),
        pending_tx: AtomicBool::new(true),
        orphan: Mutex::new(None),
        pool,
    });
    let rx = port
        .rx
        .into_iter()
        .map(|inner| {
            Box::new(NeighRx {
                inner,
                shared: shared.clone(),
                inspected: false,
            }) as Box<dyn RxQueue>
        })
        .collect();
    let tx = port
        .tx
        .into_iter()
        .enumerate()
        .map(|(i, inner)| {
            if i == 0 {
                Box::new(NeighTx {
                    inner,
                    shared: shared.clone(),
                    burst: Burst::new(),
                }) as Box<dyn TxQueue>
            } else {
                inner
            }
        })
        .collect();
    let stats = Arc::new(NeighStats {
        inner: port.stats,
        shared: shared.clone(),
    });
    (
        OpenPort {
            rx,
            tx,
            stats,
            warnings: port.warnings,
        },
        shared,
    )
}

struct NeighRx {
    inner: Box<dyn RxQueue>,
    shared: Arc<NeighPort>,
    /// The stage parses every frame and offers us the ones it does not
    /// recognise: no per-frame check here.
    inspected: bool,
}

impl NeighRx {
    /// Takes the diverted frames out of `out[start..]`; returns how many stay.
    #[cold]
    #[inline(never)]
    fn divert(&mut self, now: Instant, out: &mut Burst, start: usize) -> usize {
        let v = out.vec_mut();
        let mut kept = start;
        {
            let mut core = self.shared.core();
            for i in start..v.len() {
                let keep = !wire::is_diverted(v[i].data())
                    || core.handle_frame(v[i].data()) == super::Verdict::Pass;
                if keep {
                    v.swap(kept, i);
                    kept += 1;
                }
            }
            if core.has_transmit() {
                self.shared.pending_tx.store(true, Ordering::Relaxed);
            }
        }
        // Dropping the diverted packets frees their buffers.
        v.truncate(kept);
        if self.shared.pending_tx.load(Ordering::Relaxed) {
            self.shared.kick_orphan(now);
        }
        kept - start
    }
}

impl RxQueue for NeighRx {
    #[inline]
    fn rx_burst(&mut self, now: Instant, out: &mut Burst, max: usize) -> usize {
        let start = out.len();
        let got = self.inner.rx_burst(now, out, max);
        if got == 0
            || self.inspected
            || !out.as_slice()[start..]
                .iter()
                .any(|p| wire::is_diverted(p.data()))
        {
            return got;
        }
        self.divert(now, out, start)
    }

    fn set_inspected(&mut self) {
        self.inspected = true;
    }

    #[cold]
    fn offer(&mut self, now: Instant, frame: &[u8]) -> bool {
        if !wire::is_diverted(frame) {
            return false;
        }
        let consumed = {
            let mut core = self.shared.core();
            let v = core.handle_frame(frame);
            if core.has_transmit() {
                self.shared.pending_tx.store(true, Ordering::Relaxed);
            }
            v == super::Verdict::Consumed
        };
        if self.shared.pending_tx.load(Ordering::Relaxed) {
            self.shared.kick_orphan(now);
        }
        consumed
    }

    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    fn is_finite(&self) -> bool {
        self.inner.is_finite()
    }
    // `mbuf_native` stays false: a forward stage on a port with addresses
    // takes the packet path, where the frames can be looked at.
}

struct NeighTx {
    inner: Box<dyn TxQueue>,
    shared: Arc<NeighPort>,
    burst: Burst,
}

impl NeighTx {
    #[inline]
    fn drain(&mut self, now: Instant) {
        if self.shared.pending_tx.load(Ordering::Relaxed) {
            self.shared
                .drain_into(now, self.inner.as_mut(), &mut self.burst);
        }
    }
}

impl TxQueue for NeighTx {
    #[inline]
    fn tx_burst(&mut self, now: Instant, pkts: &mut Burst) -> usize {
        self.drain(now);
        self.inner.tx_burst(now, pkts)
    }

    #[inline]
    fn alloc(&mut self, out: &mut Burst, n: usize) -> Option<usize> {
        self.inner.alloc(out, n)
    }

    fn flush(&mut self, now: Instant) {
        self.drain(now);
        self.inner.flush(now);
    }

    fn finish(&mut self) -> Result<(), crate::port::PortError> {
        self.inner.finish()
    }

    #[cfg(feature = "dpdk")]
    fn mbuf_native(&self) -> bool {
        self.inner.mbuf_native()
    }

    #[cfg(feature = "dpdk")]
    fn mbuf_pool(&self) -> Option<&crate::sys::dpdk::PktmbufPool> {
        self.inner.mbuf_pool()
    }

    #[cfg(feature = "dpdk")]
    #[inline]
    fn tx_mbufs(&mut self, burst: &mut crate::sys::dpdk::Burst, bytes: u64) -> Option<usize> {
        if self.shared.pending_tx.load(Ordering::Relaxed) {
            let now = crate::time::monotonic_now();
            self.shared
                .drain_into(now, self.inner.as_mut(), &mut self.burst);
        }
        self.inner.tx_mbufs(burst, bytes)
    }
}

struct NeighStats {
    inner: Arc<dyn PortStats>,
    shared: Arc<NeighPort>,
}

impl Drop for NeighStats {
    /// The port's report goes when the pipeline does: the adopted transmit
    /// queue goes with it. It holds the shared core that holds it, a cycle
    /// that would otherwise keep the device (and its pool) open after the
    /// pipeline is gone, so a pipeline opened again could not have it.
    fn drop(&mut self) {
        self.shared
            .orphan
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }
}

impl PortStats for NeighStats {
    fn report(&self) -> PortReport {
        let mut r = self.inner.report();
        let c = self.shared.counters();
        for (k, v) in [
            ("neigh_requests_answered", c.requests_answered),
            ("neigh_requests_ignored", c.requests_ignored),
            ("neigh_replies_seen", c.replies_seen),
            ("neigh_resolutions", c.resolutions),
            ("neigh_malformed", c.malformed),
            ("neigh_ndp_other", c.ndp_other),
            ("neigh_sent", c.sent),
            ("neigh_out_dropped", c.out_dropped),
            ("non_ip_frames", c.non_ip),
        ] {
            r.detail.insert(k, v);
        }
        r
    }

    fn in_flight(&self) -> u64 {
        self.inner.in_flight()
    }

    fn mac(&self) -> Option<[u8; 6]> {
        self.inner.mac()
    }
}

/// Resolves `target` from `source` on a wrapped port, before any stage runs:
/// sends a request every [`RESOLVE_INTERVAL`], as many as `lookup` allows,
/// polling `rx` (the port's wrapped queue 0) for the answer and sending
/// through `tx` (its wrapped queue 0). Frames other than the answer are
/// dropped. The error says what was asked, how often and for how long.
pub fn resolve(
    shared: &NeighPort,
    rx: &mut dyn RxQueue,
    tx: &mut dyn TxQueue,
    target: IpAddr,
    source: IpAddr,
    lookup: Lookup,
) -> Result<[u8; 6], String> {
    let (attempts, role) = (lookup.attempts(), lookup.role());
    let clock = Clock::new();
    shared
        .core()
        .resolve(clock.now(), target, source, attempts, RESOLVE_INTERVAL);
    shared.pending_tx.store(true, Ordering::Relaxed);
    let mut burst = Burst::new();
    loop {
        let now = clock.now();
        tx.flush(now);
        while rx.rx_burst(now, &mut burst, crate::buf::BURST_MAX) > 0 {
            burst.clear();
        }
        let state = {
            let mut core = shared.core();
            core.handle_timeout(now);
            if core.has_transmit() {
                shared.pending_tx.store(true, Ordering::Relaxed);
            }
            core.resolution(target)
        };
        match state {
            Resolution::Resolved(mac) => {
                // The peer's request that told us its address may have been
                // answered only now, and nothing may poll this port for a
                // while (a rank waits in MPI for the other): send the answer
                // before going, or the peer never resolves us.
                tx.flush(clock.now());
                return Ok(mac);
            }
            Resolution::Failed { attempts } => {
                let what = if target.is_ipv4() {
                    "ARP requests"
                } else {
                    "neighbour solicitations"
                };
                return Err(format!(
                    "{role} {target} did not answer: {attempts} {what} from {source} went unanswered over {:.1?}; \
                     is the device up, and is {target} its address on this link?",
                    RESOLVE_INTERVAL * attempts
                ));
            }
            Resolution::Pending { .. } | Resolution::Unknown => {
                std::thread::sleep(Duration::from_millis(1))
            }
        }
    }
}
