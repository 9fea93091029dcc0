//! The MPI glue: one `Ranks` per process, and collectives with a deadline.
//!
//! MPI's blocking collectives wait forever for a dead peer, and a started
//! collective cannot be cancelled. So every step here is nonblocking
//! point-to-point traffic with rank 0 (each rank checks in, rank 0 answers
//! everyone), tested in a loop against a deadline: rank 0 knows exactly which
//! hosts have not checked in and names them. On a timeout the rank prints the
//! error and aborts the MPI job (`MPI_Abort`), which is the only way to release
//! requests MPI still owns; mpirun then ends every rank and exits non-zero.
//! The cost is two messages per rank per step at rank 0: linear in ranks,
//! which is fine for steps taken once per trial.

use std::time::{Duration, Instant};

use std::cell::RefCell;

use mpi::request::{scope, Request, Scope, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use super::{bind, Host, Timeout};

/// Tag of a rank's message to rank 0.
const UP: i32 = 16;
/// Tag of rank 0's answer.
const DOWN: i32 = 17;
/// How long the polling loop sleeps between tests: short next to any
/// timeout, long enough not to spin a shared core.
const POLL: Duration = Duration::from_micros(200);
/// Tag of a heartbeat (see [`Ranks::watch`]).
const BEAT: i32 = 18;
/// A heartbeat's payload: only its arrival counts.
static BEAT_WORD: [u64; 1] = [0];
/// How often a watched rank sends a heartbeat, at most (a quarter of the
/// timeout when that is shorter).
const BEAT_PERIOD: Duration = Duration::from_secs(1);
/// How often a watched rank looks for heartbeats: enough to name a silent
/// peer close to its timeout, few enough MPI calls not to matter.
const BEAT_CHECK: Duration = Duration::from_millis(50);
/// Tag of a note that the run is over early (see [`Ranks::tell_stop`]).
const STOP_NOTE: i32 = 19;
/// Room for a machine name in the start-up exchange, in words (256 bytes,
/// Open MPI's MPI_MAX_PROCESSOR_NAME).
const NAME_WORDS: usize = 32;

/// Why MPI could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// MPI was already initialised in this process.
    #[error("MPI is already initialised in this process")]
    Again,
    /// The hosts do not fit the ranks (bad input, exit 2).
    #[error("{0}")]
    Hosts(String),
}

/// This process's place in the MPI job.
pub struct Ranks {
    // Finalises MPI when dropped; kept for that.
    _universe: mpi::environment::Universe,
    world: SimpleCommunicator,
    hosts: Vec<Host>,
    machines: Vec<String>,
    live: RefCell<Liveness>,
}

/// Heartbeats during a long step (see [`Ranks::watch`]).
struct Liveness {
    /// The step being watched and how long a peer may stay silent.
    watch: Option<(String, Duration)>,
    /// When each rank was last heard from (or the watch began).
    seen: Vec<Instant>,
    /// Heartbeats sent and not yet complete (small messages complete as
    /// soon as the transport has them).
    sends: Vec<Request<'static, [u64], StaticScope>>,
    next_beat: Instant,
    next_check: Instant,
}

impl std::fmt::Debug for Ranks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranks").field("hosts", &self.hosts).finish()
    }
}

impl Ranks {
    /// Initialises MPI (a lone process outside mpirun is a job of one rank)
    /// and binds `names` to ranks in order.
    pub fn init(names: &[String], timeout: Duration) -> Result<Ranks, InitError> {
        Ranks::init_with(timeout, |machines| bind(names, machines.len()))
    }

    /// Initialises MPI, learns which machine every rank runs on (one
    /// exchange, within `timeout`) and binds hosts with `hosts`, given those
    /// machine names by rank: one host per rank, by rank. Every rank gets the
    /// same names, so a binding error is the same on every rank.
    pub fn init_with(
        timeout: Duration,
        hosts: impl FnOnce(&[String]) -> Result<Vec<Host>, String>,
    ) -> Result<Ranks, InitError> {
        let universe = mpi::initialize().ok_or(InitError::Again)?;
        let world = universe.world();
        let size = world.size() as usize;
        let mut ranks = Ranks {
            _universe: universe,
            world,
            // Until bound, errors name ranks by number.
            hosts: (0..size)
                .map(|rank| Host {
                    name: format!("rank{rank}"),
                    rank,
                })
                .collect(),
            machines: Vec::new(),
            live: RefCell::new(Liveness {
                watch: None,
                seen: vec![Instant::now(); size],
                sends: Vec::new(),
                next_beat: Instant::now(),
                next_check: Instant::now(),
            }),
        };
        ranks.machines = ranks.gather_machines(timeout);
        ranks.hosts = hosts(&ranks.machines).map_err(InitError::Hosts)?;
        Ok(ranks)
    }

    /// Every rank's machine name (MPI processor name), by rank, on every
    /// rank: fixed-size rows, so one exchange does it.
    fn gather_machines(&self, timeout: Duration) -> Vec<String> {
        let name = self.processor_name();
        let bytes = &name.as_bytes()[..name.len().min(8 * NAME_WORDS)];
        let mut mine = vec![0u64; 1 + NAME_WORDS];
        mine[0] = bytes.len() as u64;
        for (w, chunk) in mine[1..].iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        let size = self.hosts.len();
        let (all, _) = self.exchange(
            "machine names",
            timeout,
            &mine,
            size * (1 + NAME_WORDS),
            |rows| rows.concat(),
        );
        all.chunks(1 + NAME_WORDS)
            .map(|row| {
                let len = (row[0] as usize).min(8 * NAME_WORDS);
                let mut b: Vec<u8> = row[1..].iter().flat_map(|w| w.to_le_bytes()).collect();
                b.truncate(len);
                String::from_utf8_lossy(&b).into_owned()
            })
            .collect()
    }

    /// The machine every rank runs on (MPI processor name), by rank.
    pub fn machines(&self) -> &[String] {
        &self.machines
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// How many ranks the job has.
    pub fn size(&self) -> usize {
        self.hosts.len()
    }

    /// Every host, by rank.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The host this rank plays.
    pub fn host(&self) -> &Host {
        &self.hosts[self.rank()]
    }

    /// Whether this rank drives the run (rank 0).
    pub fn is_driver(&self) -> bool {
        self.rank() == 0
    }

    /// The name MPI gives this rank's machine.
    pub fn processor_name(&self) -> String {
        mpi::environment::processor_name().unwrap_or_else(|_| "?".into())
    }

    /// Ends the whole job: prints `err` (naming the hosts) and aborts through
    /// mpirun, which stops every rank and exits non-zero.
    pub fn abort(&self, err: &dyn std::fmt::Display) -> ! {
        // One write, so it does not interleave with other ranks' output.
        let line = format!("error: {}: {err}\n", self.host().label());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        self.world.abort(1)
    }

    /// The core step: every rank sends `mine` (all ranks the same length) to
    /// rank 0; rank 0 computes an answer of `reply_len` words from all of
    /// them (by rank, its own first) and sends it to every rank. Returns the
    /// answer everywhere and, on rank 0, what every rank sent.
    ///
    /// Rank 0 waits `timeout` for the others; the others wait twice that for
    /// rank 0, so that when a peer is missing rank 0 names it first.
    pub fn exchange(
        &self,
        step: &str,
        timeout: Duration,
        mine: &[u64],
        reply_len: usize,
        answer: impl FnOnce(&[Vec<u64>]) -> Vec<u64>,
    ) -> (Vec<u64>, Option<Vec<Vec<u64>>>) {
        let start = Instant::now();
        if self.is_driver() {
            let mut all = vec![mine.to_vec(); self.size()];
            scope(|sc| {
                let reqs = all[1..]
                    .iter_mut()
                    .enumerate()
                    .map(|(i, buf)| {
                        let peer = i + 1;
                        let p = self.world.process_at_rank(peer as i32);
                        (
                            peer,
                            p.immediate_receive_into_with_tag(sc, &mut buf[..], UP),
                        )
                    })
                    .collect();
                self.settle(step, reqs, start + timeout, start);
            });
            let reply = answer(&all);
            assert_eq!(reply.len(), reply_len, "answer length of step {step:?}");
            scope(|sc| {
                let reqs = (1..self.size())
                    .map(|peer| {
                        let p = self.world.process_at_rank(peer as i32);
                        (peer, p.immediate_send_with_tag(sc, &reply[..], DOWN))
                    })
                    .collect();
                self.settle(step, reqs, start + timeout, start);
            });
            (reply, Some(all))
        } else {
            let deadline = start + 2 * timeout;
            let root = self.world.process_at_rank(0);
            let mut reply = vec![0u64; reply_len];
            scope(|sc| {
                let reqs = vec![(0, root.immediate_send_with_tag(sc, mine, UP))];
                self.settle(step, reqs, deadline, start);
            });
            scope(|sc| {
                let reqs = vec![(
                    0,
                    root.immediate_receive_into_with_tag(sc, &mut reply[..], DOWN),
                )];
                self.settle(step, reqs, deadline, start);
            });
            (reply, None)
        }
    }

    /// Every rank waits until all have reached `step`.
    pub fn barrier(&self, step: &str, timeout: Duration) {
        self.exchange(step, timeout, &[], 0, |_| Vec::new());
    }

    /// Rank 0's `words` reach every rank (the others' input is ignored but
    /// must have the same length).
    pub fn broadcast(&self, step: &str, timeout: Duration, words: &mut [u64]) {
        let (reply, _) = self.exchange(step, timeout, &[], words.len(), |all| {
            let _ = all;
            words.to_vec()
        });
        words.copy_from_slice(&reply);
    }

    /// Rank 0 gets every rank's `words` (by rank); the others get `None`.
    pub fn gather(&self, step: &str, timeout: Duration, words: &[u64]) -> Option<Vec<Vec<u64>>> {
        self.exchange(step, timeout, words, 0, |_| Vec::new()).1
    }

    /// The exact element-wise sum of every rank's `counts`, on every rank, and
    /// on rank 0 each rank's own (for per-host sections). A sum past `u64`
    /// saturates; counts of packets and bytes never get there.
    pub fn sum(
        &self,
        step: &str,
        timeout: Duration,
        counts: &[u64],
    ) -> (Vec<u64>, Option<Vec<Vec<u64>>>) {
        self.exchange(step, timeout, counts, counts.len(), |all| {
            sum_exact(all, counts.len())
        })
    }

    /// Rank 0 gets every rank's `bytes` (by rank, any lengths); the others
    /// get `None`. Two steps: the longest length, then the bytes padded to it.
    pub fn gather_bytes(
        &self,
        step: &str,
        timeout: Duration,
        bytes: &[u8],
    ) -> Option<Vec<Vec<u8>>> {
        let (longest, _) = self.exchange(
            &format!("{step} (sizes)"),
            timeout,
            &[bytes.len() as u64],
            1,
            |all| vec![all.iter().map(|r| r[0]).max().unwrap_or(0)],
        );
        let words = (longest[0] as usize).div_ceil(8);
        let mut mine = vec![0u64; 1 + words];
        mine[0] = bytes.len() as u64;
        for (w, chunk) in mine[1..].iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        let rows = self.gather(step, timeout, &mine)?;
        Some(
            rows.iter()
                .map(|r| {
                    let len = (r[0] as usize).min(8 * words);
                    let mut out: Vec<u8> = r[1..].iter().flat_map(|w| w.to_le_bytes()).collect();
                    out.truncate(len);
                    out
                })
                .collect(),
        )
    }

    /// Enters host `name`'s network namespace, if it names one (`netns`);
    /// called after MPI init, so MPI's own links stay in the namespace
    /// mpirun started the rank in. A failure ends the job naming the key.
    pub fn enter_netns(&self, netns: Option<&str>) {
        if let Some(ns) = netns {
            if let Err(e) = crate::sys::netns::enter(ns) {
                self.abort(&format!("[host.{}] `netns`: {e}", self.host().name));
            }
        }
    }

    /// Prints a line naming this rank's host (`b (rank 1): MSG`), in one
    /// write so it does not interleave with other ranks' lines.
    pub fn say(&self, msg: &str) {
        let line = format!("{}: {msg}\n", self.host().label());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }

    /// Announces this rank on stderr: `rank R host H pid P on MACHINE`, one
    /// write, so a test (or a person) can find a rank's process.
    pub fn announce(&self) {
        let line = format!(
            "rank {} host {} pid {} on {}\n",
            self.rank(),
            self.host().name,
            std::process::id(),
            self.processor_name()
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }

    /// Starts watching for a silent peer during `step`, a long wait (a
    /// trial's traffic): from now on, every call to [`Ranks::beat`] sends this
    /// rank's heartbeat about once a second (rank 0 to every rank, the others
    /// to rank 0) and ends the job naming a peer not heard from for
    /// `timeout`: a rank that hangs mid-trial is named within about
    /// `timeout`, not after the trial. Rank 0 watches every rank; the others
    /// watch rank 0. Collective steps beat while they wait.
    pub fn watch(&self, step: &str, timeout: Duration) {
        let now = Instant::now();
        let mut l = self.live.borrow_mut();
        l.watch = Some((step.to_string(), timeout));
        l.seen.iter_mut().for_each(|t| *t = now);
        // The first heartbeat a period from now: nothing of MPI's competes
        // with the generators' first packets.
        l.next_beat = now + BEAT_PERIOD.min(timeout / 4);
        l.next_check = now + BEAT_CHECK;
    }

    /// Ends the watch (the long wait is over; steps have their own timeouts).
    pub fn unwatch(&self) {
        self.live.borrow_mut().watch = None;
        self.beat_drain();
    }

    /// During a watch: sends this rank's heartbeat when one is due, takes
    /// the peers' and ends the job if a watched peer has been silent too
    /// long. Cheap between checks (a clock read); call it often, from the
    /// control thread (MPI is not called from any other).
    pub fn beat(&self) {
        let now = Instant::now();
        let mut l = self.live.borrow_mut();
        let Some((step, timeout)) = l.watch.clone() else {
            return;
        };
        if now < l.next_check {
            return;
        }
        l.next_check = now + BEAT_CHECK;
        l.sends = std::mem::take(&mut l.sends)
            .into_iter()
            .filter_map(|r| r.test().err())
            .collect();
        if now >= l.next_beat {
            l.next_beat = now + BEAT_PERIOD.min(timeout / 4);
            // A peer that takes nothing (hung) leaves its heartbeats
            // incomplete: stop adding to them, it is about to be named.
            if l.sends.len() < 4 * self.size() {
                let peers: Vec<usize> = if self.is_driver() {
                    (1..self.size()).collect()
                } else {
                    vec![0]
                };
                for p in peers {
                    let dest = self.world.process_at_rank(p as i32);
                    l.sends
                        .push(dest.immediate_send_with_tag(StaticScope, &BEAT_WORD[..], BEAT));
                }
            }
        }
        drop(l);
        self.beat_drain();
        let l = self.live.borrow();
        let silent: Vec<(usize, Duration)> = (0..self.size())
            .filter(|&p| p != self.rank() && (self.is_driver() || p == 0))
            .map(|p| (p, now.saturating_duration_since(l.seen[p])))
            .filter(|(_, d)| *d > timeout)
            .collect();
        drop(l);
        if let Some(longest) = silent.iter().map(|(_, d)| *d).max() {
            self.abort(&Timeout {
                step: format!("{step} (heartbeat)"),
                missing: silent.iter().map(|(p, _)| self.hosts[*p].label()).collect(),
                waited: longest,
            });
        }
    }

    /// Tells the other ranks this rank's run ended early (interrupted):
    /// rank 0 tells every rank, the others tell rank 0, which passes it on
    /// when its own run has ended. Never waits; see [`Ranks::stop_told`].
    pub fn tell_stop(&self) {
        let peers: Vec<usize> = if self.is_driver() {
            (1..self.size()).collect()
        } else {
            vec![0]
        };
        let mut l = self.live.borrow_mut();
        for p in peers {
            let dest = self.world.process_at_rank(p as i32);
            l.sends
                .push(dest.immediate_send_with_tag(StaticScope, &BEAT_WORD[..], STOP_NOTE));
        }
    }

    /// Whether another rank has told this one to stop (a poll, never waits).
    pub fn stop_told(&self) -> bool {
        let mut told = false;
        while let Some((msg, _)) = self
            .world
            .any_process()
            .immediate_matched_probe_with_tag(STOP_NOTE)
        {
            let mut word = [0u64; 1];
            msg.matched_receive_into(&mut word[..]);
            told = true;
        }
        told
    }

    /// Takes every heartbeat that has arrived, noting when each rank was
    /// last heard from.
    fn beat_drain(&self) {
        let now = Instant::now();
        while let Some((msg, status)) = self
            .world
            .any_process()
            .immediate_matched_probe_with_tag(BEAT)
        {
            let mut word = [0u64; 1];
            msg.matched_receive_into(&mut word[..]);
            if let Some(t) = self
                .live
                .borrow_mut()
                .seen
                .get_mut(status.source_rank() as usize)
            {
                *t = now;
            }
        }
    }

    /// Tests `reqs` until all complete; past `deadline`, aborts the job
    /// naming the hosts whose requests are still open.
    fn settle<'a, Sc: Scope<'a>>(
        &self,
        step: &str,
        mut reqs: Vec<(usize, Request<'a, [u64], Sc>)>,
        deadline: Instant,
        start: Instant,
    ) {
        let mut spins = 0;
        loop {
            reqs = reqs
                .into_iter()
                .filter_map(|(peer, r)| r.test().err().map(|r| (peer, r)))
                .collect();
            if reqs.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                let mut missing: Vec<String> = reqs
                    .iter()
                    .map(|(peer, _)| self.hosts[*peer].label())
                    .collect();
                missing.dedup();
                self.abort(&Timeout {
                    step: step.to_string(),
                    missing,
                    waited: start.elapsed(),
                });
            }
            self.beat();
            // A few yields first: a step whose peers are already there
            // completes in microseconds (the clock-offset probe relies on
            // it); then sleeps, so a long wait does not spin a shared core.
            if spins < 64 {
                spins += 1;
                std::thread::yield_now();
            } else {
                std::thread::sleep(POLL);
            }
        }
    }
}

impl Drop for Ranks {
    /// Completes the last heartbeats before MPI is finalised (they complete
    /// as soon as the transport has them); one a dead peer never took is
    /// left to MPI, as an incomplete request may not be dropped.
    fn drop(&mut self) {
        self.beat_drain();
        self.stop_told();
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut sends = std::mem::take(&mut self.live.get_mut().sends);
        while !sends.is_empty() && Instant::now() < deadline {
            sends = sends.into_iter().filter_map(|r| r.test().err()).collect();
            self.beat_drain();
            self.stop_told();
            std::thread::yield_now();
        }
        for r in sends {
            std::mem::forget(r);
        }
    }
}

/// Element-wise sum of equal-length rows, saturating.
fn sum_exact(rows: &[Vec<u64>], len: usize) -> Vec<u64> {
    let mut out = vec![0u64; len];
    for row in rows {
        for (o, v) in out.iter_mut().zip(row) {
            *o = o.saturating_add(*v);
        }
    }
    out
}

#[cfg(test)]
mod test {
    #[test]
    fn sums_are_exact() {
        let rows = vec![vec![1, u64::MAX - 5], vec![2, 3], vec![4, 0]];
        assert_eq!(super::sum_exact(&rows, 2), vec![7, u64::MAX - 2]);
    }
}
