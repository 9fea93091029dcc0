//! Multi-host runs: which host each MPI rank plays, and (behind the `mpi`
//! feature) the collectives that keep ranks in step without ever hanging.
//!
//! The parts here need no MPI: binding host names to ranks, and the error a
//! collective returns when a peer does not answer in time, naming its host.

pub mod ingest;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "mpi")]
pub mod rpc;
#[cfg(feature = "mpi")]
pub mod trial;
pub mod wire;

use std::fmt;
use std::time::Duration;

/// One host of a run: its name and the rank that plays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The host's name (`[host.NAME]`, or `rankN` when unnamed).
    pub name: String,
    /// The MPI rank that plays it.
    pub rank: usize,
}

/// Binds host names to ranks in order: the first name is rank 0 (the driver).
///
/// More names than ranks is the user's error: the message says how many ranks
/// mpirun started and which names have no rank. Ranks beyond the names get
/// `rankN`, so every rank has a host to name in errors.
pub fn bind(names: &[String], size: usize) -> Result<Vec<Host>, String> {
    if names.len() > size {
        return Err(format!(
            "{} hosts named ({}) but mpirun started {} rank{}; hosts without a rank: {} \
             (run with mpirun -np {} or name fewer hosts)",
            names.len(),
            names.join(", "),
            size,
            if size == 1 { "" } else { "s" },
            names[size..].join(", "),
            names.len()
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for n in names {
        if !seen.insert(n.as_str()) {
            return Err(format!("host {n:?} is named twice"));
        }
    }
    Ok((0..size)
        .map(|rank| Host {
            name: names
                .get(rank)
                .cloned()
                .unwrap_or_else(|| format!("rank{rank}")),
            rank,
        })
        .collect())
}

/// A collective that did not complete: who was waited for, in which step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeout {
    /// The step of the run ("trial start", "results").
    pub step: String,
    /// The hosts that did not answer, as `name (rank N)`.
    pub missing: Vec<String>,
    /// How long this rank waited.
    pub waited: Duration,
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "host{} {} did not answer at {:?} within {:.1} s (dead, hung or unreachable)",
            if self.missing.len() == 1 { "" } else { "s" },
            self.missing.join(", "),
            self.step,
            self.waited.as_secs_f64()
        )
    }
}

impl std::error::Error for Timeout {}

/// Binds a pipeline's hosts to ranks by their `rank` key; ranks no host names
/// are `rankN`. A host whose rank mpirun did not start is the file's error.
pub fn by_rank(p: &crate::pipeline::Pipeline, size: usize) -> Result<Vec<Host>, String> {
    let mut hosts: Vec<Host> = (0..size)
        .map(|rank| Host {
            name: format!("rank{rank}"),
            rank,
        })
        .collect();
    for h in &p.hosts {
        let Some(rank) = h.rank else {
            return Err(format!(
                "{}: [host.{}] `hostname`: binding a host by hostname is not supported yet; give it `rank`",
                p.file.display(),
                h.name
            ));
        };
        if rank >= size {
            return Err(format!(
                "{}: [host.{}] `rank`: rank {rank}, but mpirun started {size} rank{} (0..={}); run with mpirun -np {} or bind fewer hosts",
                p.file.display(),
                h.name,
                if size == 1 { "" } else { "s" },
                size - 1,
                rank + 1
            ));
        }
        hosts[rank].name = h.name.clone();
    }
    Ok(hosts)
}

impl Host {
    /// How errors name the host: `b (rank 1)`.
    pub fn label(&self) -> String {
        format!("{} (rank {})", self.name, self.rank)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn binds_in_order_and_fills_unnamed_ranks() {
        let h = bind(&names(&["a", "b"]), 3).unwrap();
        assert_eq!(
            h[0],
            Host {
                name: "a".into(),
                rank: 0
            }
        );
        assert_eq!(h[1].name, "b");
        assert_eq!(h[2].name, "rank2");
    }

    #[test]
    fn more_hosts_than_ranks_names_the_extra_hosts() {
        let e = bind(&names(&["a", "b", "c"]), 2).unwrap_err();
        assert!(e.contains("hosts without a rank: c"), "{e}");
        assert!(e.contains("mpirun -np 3"), "{e}");
    }

    #[test]
    fn a_host_named_twice_is_an_error() {
        assert!(bind(&names(&["a", "a"]), 2).unwrap_err().contains("twice"));
    }

    #[test]
    fn timeout_names_the_missing_hosts() {
        let t = Timeout {
            step: "trial start".into(),
            missing: vec!["b (rank 1)".into()],
            waited: Duration::from_secs(5),
        };
        let s = t.to_string();
        assert!(
            s.starts_with("host b (rank 1) did not answer at \"trial start\" within 5.0 s"),
            "{s}"
        );
    }
}
