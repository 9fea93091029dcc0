//! What the analyzer expects stamped frames to arrive in, and its counts per
//! VLAN id, QinQ pair, outer MPLS label or VNI: a fixed-size table of the
//! first distinct ids plus an `other` count, so memory is bounded and a
//! packet allocates nothing.

use std::collections::BTreeMap;

use crate::net::encap::Encap;

/// Distinct ids an analyzer counts one by one by default.
pub const DEFAULT_ENCAP_IDS: usize = 64;
/// The most distinct ids an analyzer may be asked to count one by one.
pub const MAX_ENCAP_IDS: usize = 1024;

/// An encapsulation, as the analyzer tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EncapKind {
    /// Plain Ethernet/IP/UDP.
    #[default]
    None,
    /// One VLAN tag (counted per VLAN id).
    Vlan,
    /// Two VLAN tags (counted per outer.inner pair).
    QinQ,
    /// An MPLS label stack (counted per outer label).
    Mpls,
    /// VXLAN (counted per VNI).
    Vxlan,
}

impl EncapKind {
    /// The kind of what a walk passed, and the id it is counted by: VXLAN
    /// over anything else, then MPLS, then the tags.
    #[inline]
    pub fn of(e: &Encap) -> (EncapKind, u32) {
        if let Some(vni) = e.vni {
            (EncapKind::Vxlan, vni)
        } else if e.labels > 0 {
            (EncapKind::Mpls, e.label)
        } else if e.tags == 2 {
            let [o, i] = e.vids;
            (EncapKind::QinQ, u32::from(o) << 12 | u32::from(i))
        } else if e.tags == 1 {
            (EncapKind::Vlan, u32::from(e.vids[0]))
        } else {
            (EncapKind::None, 0)
        }
    }

    /// An id as a JSON key: `"vlan 100"`, `"qinq 100.200"`, `"label 16"`,
    /// `"vni 5000"`.
    pub fn label(self, id: u32) -> String {
        match self {
            EncapKind::None => "none".into(),
            EncapKind::Vlan => format!("vlan {id}"),
            EncapKind::QinQ => format!("qinq {}.{}", id >> 12, id & 0xfff),
            EncapKind::Mpls => format!("label {id}"),
            EncapKind::Vxlan => format!("vni {id}"),
        }
    }
}

/// An analyzer's encapsulation settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncapSpec {
    /// What stamped frames arrive in.
    pub expect: EncapKind,
    /// The UDP port VXLAN is decapsulated on.
    pub vxlan_port: u16,
    /// Distinct ids counted one by one.
    pub ids: usize,
}

impl Default for EncapSpec {
    fn default() -> Self {
        EncapSpec {
            expect: EncapKind::None,
            vxlan_port: crate::net::vxlan::PORT,
            ids: DEFAULT_ENCAP_IDS,
        }
    }
}

const EMPTY: u32 = u32::MAX;

/// Counts per id: open addressing over a power-of-two table at most half
/// full, filled by the first `limit` distinct ids; later ones count as
/// `other`.
#[derive(Debug, Clone)]
pub struct IdCounts {
    keys: Box<[u32]>,
    counts: Box<[u64]>,
    used: usize,
    limit: usize,
    /// Packets of ids beyond the first `limit`.
    pub other: u64,
}

impl IdCounts {
    /// A table for `limit` distinct ids.
    pub fn new(limit: usize) -> IdCounts {
        let slots = (2 * limit.max(1)).next_power_of_two();
        IdCounts {
            keys: vec![EMPTY; slots].into_boxed_slice(),
            counts: vec![0; slots].into_boxed_slice(),
            used: 0,
            limit: limit.max(1),
            other: 0,
        }
    }

    /// Counts one packet of `id` (ids are below 2^24).
    #[inline]
    pub fn count(&mut self, id: u32) {
        let mask = self.keys.len() - 1;
        let mut i = (id.wrapping_mul(0x9e37_79b1) >> 8) as usize & mask;
        loop {
            let k = self.keys[i];
            if k == id {
                self.counts[i] += 1;
                return;
            }
            if k == EMPTY {
                if self.used == self.limit {
                    self.other += 1;
                    return;
                }
                self.keys[i] = id;
                self.counts[i] = 1;
                self.used += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// The ids counted and their counts, by id.
    pub fn ids(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = self
            .keys
            .iter()
            .zip(self.counts.iter())
            .filter(|(k, _)| **k != EMPTY)
            .map(|(k, c)| (*k, *c))
            .collect();
        v.sort_unstable();
        v
    }

    /// Clears for a new trial (in place).
    pub fn reset(&mut self) {
        self.keys.fill(EMPTY);
        self.counts.fill(0);
        self.used = 0;
        self.other = 0;
    }
}

/// An analyzer's encapsulation counts in a report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncapReport {
    /// Packets of this trial per id (`"vlan 100"`, `"qinq 100.200"`,
    /// `"label 16"`, `"vni 5000"`), for the expected encapsulation.
    pub by_id: BTreeMap<String, u64>,
    /// Packets of ids beyond the first ones the table holds.
    pub other_ids: u64,
    /// Stamped packets of this trial in another encapsulation than the one
    /// expected: not received, counted here.
    pub unexpected_encap: u64,
}

impl EncapReport {
    /// Adds another analyzer's counts.
    pub fn add(&mut self, o: &EncapReport) {
        for (k, v) in &o.by_id {
            let e = self.by_id.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
        self.other_ids = self.other_ids.saturating_add(o.other_ids);
        self.unexpected_encap = self.unexpected_encap.saturating_add(o.unexpected_encap);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn the_first_ids_are_counted_and_the_rest_are_other() {
        let mut c = IdCounts::new(3);
        for id in [5, 7, 5, 9, 11, 5, 12, 7] {
            c.count(id);
        }
        assert_eq!(c.ids(), vec![(5, 3), (7, 2), (9, 1)]);
        assert_eq!(c.other, 2);
        c.reset();
        assert!(c.ids().is_empty());
        c.count(0xff_ffff);
        assert_eq!(c.ids(), vec![(0xff_ffff, 1)]);
    }

    #[test]
    fn kinds_and_labels() {
        let e = Encap {
            tags: 2,
            vids: [100, 200],
            ..Encap::default()
        };
        let (k, id) = EncapKind::of(&e);
        assert_eq!((k, k.label(id).as_str()), (EncapKind::QinQ, "qinq 100.200"));
        let vx = Encap {
            vni: Some(5000),
            ..e
        };
        assert_eq!(EncapKind::of(&vx), (EncapKind::Vxlan, 5000));
        assert_eq!(EncapKind::of(&Encap::default()).0, EncapKind::None);
    }
}
