//! What the SPEAD receive-group benchmarks share (`spead_group`,
//! `spead_handoff`; `spead_chunks` takes its `single` mode from here): the F-engine simulator's single-packet 1 KiB heaps
//! (64 antennas, 32 heaps per antenna per chunk), katgpucbf's placement
//! shifted by whole stretches of timestamps, a lossless group of 24 chunks
//! (members keep 4), and members started on their own pinned cores at once.

// Each benchmark uses part of this.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use linerate::spead::chunk::{KatgpucbfPlace, Place, PlaceInput, Placement};
use linerate::spead::fsim::FsimConfig;
use linerate::spead::group::{ChunkGroup, Eviction, Member};

/// The simulator's configuration: 1 KiB heaps in one packet each.
pub fn cfg() -> FsimConfig {
    FsimConfig {
        n_ants: 64,
        n_channels_total: 4096,
        n_channels_per_stream: 1,
        n_samples_per_channel: 256,
        n_pols: 2,
        packet_payload: 1024,
        ..FsimConfig::default()
    }
}

/// Heaps per antenna per chunk.
pub const HEAPS_PER_CHUNK: u64 = 32;
/// Timestamps in one stretch of packets (32 chunks).
pub const N_TS: u64 = 1024;
/// Chunks in one stretch.
pub const CHUNKS_PER_PASS: i64 = (N_TS / HEAPS_PER_CHUNK) as i64;

/// katgpucbf's placement, shifted by whole stretches: pass `p` over the same
/// packets lands in fresh chunks, as later timestamps would.
#[derive(Clone)]
pub struct Shifted {
    inner: KatgpucbfPlace,
    /// Chunks added to every placement.
    pub shift: i64,
}

impl Place for Shifted {
    fn item_ids(&self) -> &[u64] {
        self.inner.item_ids()
    }
    #[inline]
    fn place(&mut self, input: &PlaceInput<'_>) -> Option<Placement> {
        let mut p = self.inner.place(input)?;
        p.chunk_id += self.shift;
        Some(p)
    }
}

/// A lossless group (members keep 4 chunks, 24 in all unless `LR_CHUNKS`) whose members get
/// `batch` chunks per take of its lock (0: the group's default), and `n`
/// members of it.
pub fn group(batch: usize, n: usize) -> (ChunkGroup, Vec<Member<Shifted>>) {
    let inner = KatgpucbfPlace::for_fsim(&cfg(), HEAPS_PER_CHUNK);
    // `LR_CHUNKS` in the environment: the group's chunks (a diagnostic: more
    // let the consumer nap longer without a member stalling).
    let chunks = std::env::var("LR_CHUNKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let mut cc = inner.chunk_config(4, chunks);
    if std::env::var_os("LR_PLAIN").is_some() {
        cc.copy = linerate::buf::copy::CopyMode::Plain;
    }
    let eviction = if std::env::var_os("LR_LOSSY").is_some() {
        Eviction::Lossy
    } else {
        Eviction::Lossless
    };
    let group = if batch == 0 {
        ChunkGroup::new(cc, eviction)
    } else {
        ChunkGroup::with_batch(cc, eviction, batch)
    }
    .expect("group");
    let place = Shifted { inner, shift: 0 };
    let members = (0..n)
        .map(|_| group.member(place.clone()).expect("member"))
        .collect();
    (group, members)
}

/// Member threads, each pinned to core `k % cores` and set up (its input
/// copied, its pages touched) before the clock starts.
pub struct Members<T> {
    threads: Vec<JoinHandle<T>>,
    ready: Arc<AtomicUsize>,
    go: Arc<AtomicBool>,
}

impl<T: Send + 'static> Members<T> {
    /// Spawns `body(k, member, input)` per member, after `setup(k)` made its
    /// input on its own thread.
    pub fn spawn<I: 'static>(
        members: Vec<Member<Shifted>>,
        setup: impl Fn(usize) -> I + Send + Sync + 'static,
        body: impl Fn(usize, Member<Shifted>, I) -> T + Send + Sync + 'static,
    ) -> Members<T> {
        let ready = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let (setup, body) = (Arc::new(setup), Arc::new(body));
        let threads = members
            .into_iter()
            .enumerate()
            .map(|(k, m)| {
                let (ready, go) = (ready.clone(), go.clone());
                let (setup, body) = (setup.clone(), body.clone());
                let core = cores.get(k % cores.len().max(1)).copied();
                std::thread::spawn(move || {
                    if let Some(c) = core {
                        core_affinity::set_for_current(c);
                    }
                    let input = setup(k);
                    ready.fetch_add(1, Ordering::AcqRel);
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    body(k, m, input)
                })
            })
            .collect();
        Members { threads, ready, go }
    }

    /// Starts every member at once, once all are set up; the start time.
    pub fn go(&self) -> Instant {
        while self.ready.load(Ordering::Acquire) < self.threads.len() {
            std::thread::yield_now();
        }
        let t = Instant::now();
        self.go.store(true, Ordering::Release);
        t
    }

    /// Whether every member returned.
    pub fn done(&self) -> bool {
        self.threads.iter().all(|t| t.is_finished())
    }

    /// What each member returned.
    pub fn join(self) -> Vec<T> {
        self.threads
            .into_iter()
            .map(|t| t.join().expect("member"))
            .collect()
    }
}

/// The median.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
