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

/// Binds a pipeline's hosts to ranks, given the machine each rank runs on
/// (`machines[r]`, the MPI processor name; its length is the number of
/// ranks). Hosts with `rank` come first; then each host with `hostname`, in
/// file order, takes the lowest rank on that machine no host holds yet, so
/// several ranks on one machine are bound in rank order. Ranks no host names
/// are `rankN`. A host mpirun gave no rank is the file's error, naming the
/// key and where mpirun placed the ranks.
pub fn bind_file(p: &crate::pipeline::Pipeline, machines: &[String]) -> Result<Vec<Host>, String> {
    let size = machines.len();
    let mut hosts: Vec<Host> = (0..size)
        .map(|rank| Host {
            name: format!("rank{rank}"),
            rank,
        })
        .collect();
    let mut taken: Vec<Option<&str>> = vec![None; size];
    for h in &p.hosts {
        let Some(rank) = h.rank else { continue };
        if rank >= size {
            return Err(format!(
                "{}: [host.{}] `rank`: rank {rank}, but mpirun started {size} rank{} (0..={}); run with mpirun -np {} or bind fewer hosts",
                p.file.display(),
                h.name,
                if size == 1 { "" } else { "s" },
                size.saturating_sub(1),
                rank + 1
            ));
        }
        hosts[rank].name = h.name.clone();
        taken[rank] = Some(&h.name);
    }
    for h in &p.hosts {
        let (None, Some(want)) = (h.rank, &h.hostname) else {
            continue;
        };
        let there: Vec<usize> = (0..size)
            .filter(|&r| same_machine(&machines[r], want))
            .collect();
        let Some(&rank) = there.iter().find(|&&r| taken[r].is_none()) else {
            let why = if there.is_empty() {
                format!(
                    "mpirun placed no rank on {want:?}; it placed {}: place one there \
                     (mpirun --host {want}) or name one of those machines",
                    placement(machines)
                )
            } else {
                let holders: Vec<&str> = there.iter().filter_map(|&r| taken[r]).collect();
                format!(
                    "{want:?} has {} rank{} ({}), all bound already (to host{} {}); run \
                     more ranks there (mpirun --host {want}:{}) or bind fewer hosts to it",
                    there.len(),
                    if there.len() == 1 { "" } else { "s" },
                    ranks_list(&there),
                    if holders.len() == 1 { "" } else { "s" },
                    holders.join(", "),
                    there.len() + 1
                )
            };
            return Err(format!(
                "{}: [host.{}] `hostname`: {why}",
                p.file.display(),
                h.name
            ));
        };
        hosts[rank].name = h.name.clone();
        taken[rank] = Some(&h.name);
    }
    Ok(hosts)
}

/// Whether the machine MPI names `have` is the one a file names `want`:
/// equal ignoring case, or equal short names when one side is a bare name
/// (`node1` is `node1.cluster.local`).
pub fn same_machine(have: &str, want: &str) -> bool {
    let short = |s: &str| s.split('.').next().unwrap_or(s).to_string();
    have.eq_ignore_ascii_case(want)
        || (!want.contains('.') && short(have).eq_ignore_ascii_case(want))
        || (!have.contains('.') && short(want).eq_ignore_ascii_case(have))
}

/// `vm (ranks 0, 1), node2 (rank 2)`: where mpirun placed the ranks.
fn placement(machines: &[String]) -> String {
    let mut order: Vec<&str> = Vec::new();
    for m in machines {
        if !order.contains(&m.as_str()) {
            order.push(m);
        }
    }
    order
        .iter()
        .map(|m| {
            let ranks: Vec<usize> = (0..machines.len()).filter(|&r| machines[r] == *m).collect();
            format!(
                "{m} (rank{} {})",
                if ranks.len() == 1 { "" } else { "s" },
                ranks_list(&ranks)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn ranks_list(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
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

    /// A file with hosts `a` (`rank = 0` or `hostname`), `b` and `c` bound
    /// as `binds` says (`rank = N` or `hostname = "X"` lines).
    fn file(binds: [&str; 3]) -> crate::pipeline::Pipeline {
        let mut text = String::from("[pipeline]\nlcores = \"0\"\npin = false\n");
        for (h, b) in ["a", "b", "c"].iter().zip(binds) {
            text += &format!("[host.{h}]\n{b}\n");
        }
        text += "[port.out]\nkind = \"udp\"\nhost = \"a\"\nbind = \"127.0.0.1:0\"\n\
                 connect = \"127.0.0.1:9\"\n[port.in]\nkind = \"udp\"\nhost = \"b\"\n\
                 bind = \"127.0.0.1:0\"\n[stage.gen]\nkind = \"generator\"\nhost = \"a\"\n\
                 tx = \"out\"\n[stage.ana]\nkind = \"analyzer\"\nhost = \"b\"\nrx = \"in\"\n";
        crate::pipeline::load_str(std::path::Path::new("h.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .pipeline
    }

    fn on(machines: &[&str]) -> Vec<String> {
        names(machines)
    }

    fn bound(h: &[Host]) -> Vec<&str> {
        h.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn hostnames_take_that_machines_ranks_in_rank_order() {
        let p = file([
            "hostname = \"n2\"",
            "hostname = \"n1\"",
            "hostname = \"n2\"",
        ]);
        let h = bind_file(&p, &on(&["n1", "n2", "n2", "n1"])).unwrap();
        assert_eq!(bound(&h), ["b", "a", "c", "rank3"]);
    }

    #[test]
    fn explicit_ranks_are_bound_first_and_hostnames_skip_them() {
        let p = file(["hostname = \"n1\"", "rank = 0", "hostname = \"n1.lab\""]);
        let h = bind_file(&p, &on(&["n1.lab", "n1.lab", "n1", "x"])).unwrap();
        assert_eq!(bound(&h), ["b", "a", "c", "rank3"]);
    }

    #[test]
    fn a_hostname_without_a_rank_names_the_key_and_the_placement() {
        let p = file(["rank = 0", "hostname = \"gpu7\"", "rank = 1"]);
        let e = bind_file(&p, &on(&["n1", "n1", "n2"])).unwrap_err();
        assert!(
            e.starts_with("h.toml: [host.b] `hostname`: mpirun placed no rank on \"gpu7\""),
            "{e}"
        );
        assert!(e.contains("n1 (ranks 0, 1), n2 (rank 2)"), "{e}");
    }

    #[test]
    fn more_hostname_hosts_than_ranks_there_is_an_error() {
        let p = file(["hostname = \"n1\"", "hostname = \"n1\"", "rank = 2"]);
        let e = bind_file(&p, &on(&["n1", "n2", "n1"])).unwrap_err();
        assert!(
            e.contains("[host.b] `hostname`: \"n1\" has 2 ranks (0, 2)"),
            "{e}"
        );
        assert!(e.contains("to hosts a, c"), "{e}");
        assert!(e.contains("mpirun --host n1:3"), "{e}");
    }

    #[test]
    fn machine_names_match_ignoring_case_and_domain() {
        assert!(same_machine("Node1.lab.example", "node1"));
        assert!(same_machine("node1", "node1.lab"));
        assert!(!same_machine("node1.a", "node1.b"));
        assert!(!same_machine("node10", "node1"));
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
