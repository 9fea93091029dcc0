//! One host's part of a multi-host plan: what a rank builds under mpirun.

use std::collections::BTreeMap;

use super::schema::MessageEnd;
use super::Plan;

impl Plan {
    /// Whether a port or stage placed on `host` (its `host` key) belongs to
    /// host `name`: one without a key belongs to the only host there is.
    fn on(&self, host: &Option<String>, name: &str) -> bool {
        match host {
            Some(h) => h == name,
            None => self.pipeline.hosts.len() <= 1,
        }
    }

    /// Host `name`'s part: its ports and stages, the rings between its
    /// stages and the lcores that poll them. Validation already made sure a
    /// stage uses only its own host's ports, so the part is a plan of its own.
    pub fn part(&self, name: &str) -> Plan {
        let mut p = self.clone();
        let mine: Vec<String> = p
            .pipeline
            .stages
            .iter()
            .filter(|s| self.on(&s.host, name))
            .map(|s| s.name.clone())
            .collect();
        let has = |s: &String| mine.contains(s);
        p.pipeline.stages.retain(|s| has(&s.name));
        p.pipeline.ports.retain(|x| self.on(&x.host, name));
        p.ports
            .retain(|u| p.pipeline.ports.iter().any(|x| x.name == u.name));
        p.rings.retain(|r| has(&r.producer) && has(&r.consumer));
        p.pipeline
            .rings
            .retain(|r| p.rings.iter().any(|u| u.name == r.name));
        for l in &mut p.lcores {
            l.stages.retain(has);
        }
        p.lcores.retain(|l| !l.stages.is_empty());
        // The host's own EAL arguments (its devices) follow the common ones.
        if let Some(h) = self.pipeline.hosts.iter().find(|h| h.name == name) {
            p.pipeline.eal.extend(h.eal.iter().cloned());
        }
        p
    }

    /// The host each generator stream is sent from (stream id to host name),
    /// for telling which latencies cross hosts. Streams of a file without
    /// hosts map to no host.
    pub fn stream_hosts(&self) -> BTreeMap<u16, Option<String>> {
        self.pipeline
            .stages
            .iter()
            .filter_map(|s| Some((s.kind.config().stream()?, s.host.clone())))
            .collect()
    }

    /// Reliable receivers whose messages were stamped on another host, as
    /// stage name to (its host, the hosts that send): a `reliable_rx` on a
    /// host with no `reliable_tx` of its own. Their delivery latency compares
    /// two hosts' clocks.
    pub fn reliable_across_hosts(&self) -> BTreeMap<String, (String, Vec<String>)> {
        let on = |end: MessageEnd| {
            self.pipeline
                .stages
                .iter()
                .filter(move |s| s.kind.config().message_end() == Some(end))
                .filter_map(|s| Some((s.name.clone(), s.host.clone()?)))
        };
        let senders: Vec<String> = on(MessageEnd::Sends).map(|(_, h)| h).collect();
        on(MessageEnd::Receives)
            .filter(|(_, h)| !senders.contains(h))
            .map(|(name, h)| {
                let mut from = senders.clone();
                from.sort();
                from.dedup();
                (name, (h, from))
            })
            .collect()
    }

    /// The shares of a trial's rate of every generator of the file, on every
    /// host (a part's generators get `share / total` of the rate).
    pub fn generator_shares(&self) -> f64 {
        self.pipeline
            .stages
            .iter()
            .filter_map(|s| Some(s.kind.config().trial_load()?.share))
            .sum()
    }
}
