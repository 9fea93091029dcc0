//! `[host.NAME]`: one machine (or network namespace) of a multi-host run, and
//! the `host = "NAME"` key by which ports and stages say where they run.

use toml::de::DeTable;

use super::super::diag::Sink;
use super::super::table::{Span, Table};
use super::{Key, PortSpec, StageSpec};

/// The clock a host stamps packets with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostClock {
    /// The host's own monotonic clock: latency only within the host.
    Monotonic,
    /// CLOCK_TAI, disciplined by PTP (phc2sys): comparable across hosts.
    Tai,
}

/// A host as declared.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Its name (`[host.NAME]`).
    pub name: String,
    /// The MPI rank that plays it.
    pub rank: Option<usize>,
    /// Or the machine name mpirun placed a rank on.
    pub hostname: Option<String>,
    /// The network namespace the rank enters before opening ports.
    pub netns: Option<String>,
    /// Its packet clock.
    pub clock: HostClock,
    /// EAL arguments of this host only, after `[eal] args` (its devices:
    /// `--vdev=net_af_packet0,iface=eth1`, `-a 0000:01:00.0`).
    pub eal: Vec<String>,
    pub(crate) rank_span: Span,
}

pub(super) const HOST_KEYS: &[Key] = &[
    Key::new(
        "rank",
        "integer 0..=4095",
        "none",
        "the MPI rank that plays this host (this or `hostname`)",
    ),
    Key::new(
        "hostname",
        "string",
        "none",
        "the machine (MPI processor name) of the rank that plays this host: the lowest rank there no other host holds (this or `rank`)",
    ),
    Key::new(
        "netns",
        "string",
        "none",
        "a network namespace the rank enters (setns) before opening ports",
    ),
    Key::new(
        "clock",
        "\"monotonic\" or \"tai\"",
        "\"monotonic\"",
        "\"tai\" on every host (PTP-synchronised) allows one-way latency across hosts",
    ),
    Key::new(
        "eal",
        "array of strings",
        "none",
        "DPDK EAL arguments of this host only, added after `[eal] args`: its own devices (`--vdev=net_af_packet0,iface=eth1`, `-a 0000:01:00.0`)",
    ),
];

pub(super) fn parse_host(
    sink: &mut Sink<'_>,
    name: &str,
    span: Span,
    map: &DeTable<'_>,
) -> HostSpec {
    let mut t = Table::new(format!("host.{name}"), span.clone(), map);
    let rank = t.int(sink, "rank", 0..4096).map(|(r, _)| r as usize);
    let rank_span = t.span_of("rank");
    let hostname = t.string(sink, "hostname").map(|s| s.0);
    if rank.is_none() && hostname.is_none() && !t.has("rank") {
        sink.error(
            span.clone(),
            &t.path,
            Some("rank"),
            "a host needs `rank` or `hostname`",
            Some(
                "rank = 0 (the MPI rank), or hostname = \"node1\" (where mpirun placed a rank)"
                    .into(),
            ),
        );
    }
    if let (Some(r), Some(n)) = (rank, &hostname) {
        sink.error(
            t.span_of("hostname"),
            &t.path,
            Some("hostname"),
            format!("give `rank` or `hostname`, not both (rank = {r}, hostname = {n:?})"),
            Some(
                "rank = N binds the host to that rank wherever it runs; hostname = \"X\" to \
                 a rank mpirun placed on X"
                    .into(),
            ),
        );
    }
    let netns = t.string(sink, "netns").map(|s| s.0);
    let clock = t
        .choice(
            sink,
            "clock",
            "clock",
            &[("monotonic", HostClock::Monotonic), ("tai", HostClock::Tai)],
            "\"monotonic\" or \"tai\"",
        )
        .unwrap_or(HostClock::Monotonic);
    t.mark_used("eal");
    // Strings only: anything else in the array, or no array, is one error.
    let eal = match t.raw("eal") {
        None => Some(Vec::new()),
        Some(toml::de::DeValue::Array(a)) => a
            .iter()
            .map(|x| match x.get_ref() {
                toml::de::DeValue::String(s) => Some(s.to_string()),
                _ => None,
            })
            .collect(),
        Some(_) => None,
    };
    let eal = eal.unwrap_or_else(|| {
        sink.error(
            t.span_of("eal"),
            &t.path,
            Some("eal"),
            "expected an array of strings",
            Some("EAL arguments as strings, like [\"--vdev=net_af_packet0,iface=eth1\"]".into()),
        );
        Vec::new()
    });
    if !eal.is_empty() && !cfg!(feature = "dpdk") {
        sink.error(
            t.span_of("eal"),
            &t.path,
            Some("eal"),
            "`eal` is for dpdk ports, which this build does not have (build with `--features dpdk`)",
            None,
        );
    }
    t.finish(sink, "[host.NAME]", HOST_KEYS);
    HostSpec {
        name: name.to_string(),
        rank,
        hostname,
        netns,
        clock,
        eal,
        rank_span,
    }
}

/// Checks the hosts against each other and that every port and stage runs on
/// a declared host (the only host, when there is one), with its ports on the
/// same host. Without hosts, no `host` key may appear.
pub(super) fn bind(
    sink: &mut Sink<'_>,
    hosts: &[HostSpec],
    ports: &mut [PortSpec],
    stages: &mut [StageSpec],
) {
    for (i, h) in hosts.iter().enumerate() {
        if let Some(r) = h.rank {
            if let Some(other) = hosts[..i].iter().find(|o| o.rank == Some(r)) {
                sink.error(
                    h.rank_span.clone(),
                    &format!("host.{}", h.name),
                    Some("rank"),
                    format!("rank {r} already plays host `{}`", other.name),
                    Some("one host per rank".into()),
                );
            }
        }
    }
    let valid: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
    let resolve =
        |sink: &mut Sink<'_>, section: String, host: &mut Option<String>, span: Span| match (
            host.as_deref(),
            hosts,
        ) {
            (None, []) => {}
            (None, [only]) => *host = Some(only.name.clone()),
            (None, _) => sink.error(
                span,
                &section,
                Some("host"),
                "`host` is required here: the file has several hosts",
                Some(format!("one of {}", valid.join(", "))),
            ),
            (Some(h), []) => sink.error(
                span,
                &section,
                Some("host"),
                format!("host `{h}` is not declared: the file has no [host.NAME] section"),
                Some("add [host.NAME] with `rank`, or drop `host`".into()),
            ),
            (Some(h), _) if !valid.contains(&h) => sink.error(
                span,
                &section,
                Some("host"),
                format!("unknown host `{h}`"),
                Some(format!("one of {}", valid.join(", "))),
            ),
            _ => {}
        };
    for p in ports.iter_mut() {
        resolve(
            sink,
            format!("port.{}", p.name),
            &mut p.host,
            p.host_span.clone(),
        );
    }
    for s in stages.iter_mut() {
        resolve(
            sink,
            format!("stage.{}", s.name),
            &mut s.host,
            s.span.clone(),
        );
    }
    for s in stages.iter() {
        for (port, span) in [(&s.rx, &s.rx_span), (&s.tx, &s.tx_span)] {
            let Some(p) = port
                .as_ref()
                .and_then(|n| ports.iter().find(|p| &p.name == n))
            else {
                continue;
            };
            let known = |h: &Option<String>| h.as_deref().is_some_and(|h| valid.contains(&h));
            if known(&p.host) && known(&s.host) && p.host != s.host {
                sink.error(
                    span.clone(),
                    &format!("stage.{}", s.name),
                    None,
                    format!(
                        "port `{}` is on host `{}` but stage `{}` runs on host `{}`",
                        p.name,
                        p.host.as_deref().unwrap_or_default(),
                        s.name,
                        s.host.as_deref().unwrap_or_default()
                    ),
                    Some("a stage opens ports on its own host; hosts meet through a link between two ports (udp, dpdk)".into()),
                );
            }
        }
    }
}

#[cfg(test)]
mod test {
    use std::path::Path;

    const TWO: &str = r#"
[pipeline]
lcores = "0"
pin = false
[host.a]
rank = 0
netns = "x-a"
clock = "tai"
[host.b]
rank = 1
[port.out]
kind = "mem"
host = "a"
[port.in]
kind = "mem"
host = "b"
[stage.gen]
kind = "generator"
host = "a"
tx = "out"
[stage.ana]
kind = "analyzer"
host = "b"
rx = "in"
"#;

    fn check(src: &str) -> Result<String, String> {
        crate::pipeline::load_str(Path::new("h.toml"), src)
            .map(|p| p.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_plan_lists_each_hosts_part() {
        let plan = check(TWO).unwrap();
        assert!(
            plan.contains("a: rank 0, netns x-a, clock tai; stages gen; ports out"),
            "{plan}"
        );
        assert!(
            plan.contains("b: rank 1, clock monotonic; stages ana; ports in"),
            "{plan}"
        );
    }

    /// A host's own EAL arguments follow `[eal] args` in its part only.
    #[cfg(feature = "dpdk")]
    #[test]
    fn a_hosts_eal_arguments_join_its_part_only() {
        let src = TWO.replace(
            "[host.a]\nrank = 0",
            "[eal]\nargs = [\"--no-huge\"]\n[host.a]\nrank = 0\neal = [\"--vdev=net_null0\"]",
        );
        let plan = crate::pipeline::load_str(Path::new("h.toml"), &src).unwrap();
        assert_eq!(
            plan.part("a").pipeline.eal,
            ["--no-huge", "--vdev=net_null0"]
        );
        assert_eq!(plan.part("b").pipeline.eal, ["--no-huge"]);
        assert!(plan.to_string().contains("eal += --vdev=net_null0"));
        // Not an array, or an array of something else: the same error.
        for bad in [
            "eal = \"--vdev=net_null0\"",
            "eal = [\"--vdev=net_null0\", 1]",
        ] {
            let e = check(&src.replace("eal = [\"--vdev=net_null0\"]", bad)).unwrap_err();
            assert!(
                e.contains("[host.a] `eal`: expected an array of strings"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn host_errors_name_the_key() {
        let e = check(&TWO.replace("host = \"b\"\nrx", "host = \"c\"\nrx")).unwrap_err();
        assert!(e.contains("[stage.ana] `host`: unknown host `c`"), "{e}");
        let e = check(&TWO.replace("[host.b]\nrank = 1", "[host.b]\nrank = 0")).unwrap_err();
        assert!(
            e.contains("[host.b] `rank`: rank 0 already plays host `a`"),
            "{e}"
        );
        let e = check(&TWO.replace(
            "[stage.ana]\nkind = \"analyzer\"\nhost = \"b\"",
            "[stage.ana]\nkind = \"analyzer\"\nhost = \"a\"",
        ))
        .unwrap_err();
        assert!(
            e.contains("port `in` is on host `b` but stage `ana` runs on host `a`"),
            "{e}"
        );
        let e = check(&TWO.replace(
            "[stage.gen]\nkind = \"generator\"\nhost = \"a\"",
            "[stage.gen]\nkind = \"generator\"",
        ))
        .unwrap_err();
        assert!(
            e.contains("[stage.gen] `host`: `host` is required here"),
            "{e}"
        );
        let e = check(&TWO.replace("[host.b]\nrank = 1", "[host.b]\nnetns = \"n\"")).unwrap_err();
        assert!(e.contains("a host needs `rank` or `hostname`"), "{e}");
        let e = check(&TWO.replace(
            "[host.b]\nrank = 1",
            "[host.b]\nrank = 1\nhostname = \"n1\"",
        ))
        .unwrap_err();
        assert!(
            e.contains("[host.b] `hostname`: give `rank` or `hostname`, not both"),
            "{e}"
        );
        let e = check(&TWO.replace("clock = \"tai\"", "clock = \"gps\"")).unwrap_err();
        assert!(e.contains("unknown clock `gps`"), "{e}");
    }

    #[test]
    fn host_without_host_sections_is_an_error_and_one_host_is_the_default() {
        let one = "[pipeline]\nlcores = \"0\"\npin = false\n[port.p]\nkind = \"mem\"\nhost = \"a\"\n[stage.s]\nkind = \"sink\"\nrx = \"p\"\n";
        let e = check(one).unwrap_err();
        assert!(e.contains("the file has no [host.NAME] section"), "{e}");
        let plan = check(&format!("{one}[host.a]\nrank = 0\n")).unwrap();
        assert!(
            plan.contains("a: rank 0, clock monotonic; stages s; ports p"),
            "{plan}"
        );
    }
}
