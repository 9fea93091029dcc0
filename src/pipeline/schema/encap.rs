//! The generator's encapsulation keys (`vlan`, `qinq`, `mpls`, `vxlan`) and
//! the analyzer's (`expect`, `vxlan_port`, `encap_ids`): their keys, how they
//! read, and the frame sizes an encapsulation leaves room for.

use std::ops::Range;

use toml::de::DeValue;

use super::super::diag::Sink;
use super::super::table::{as_int, Span, Table};
use super::common::mac;
use super::Key;
use crate::traffic::analyzer::{EncapKind, EncapSpec, DEFAULT_ENCAP_IDS, MAX_ENCAP_IDS};
use crate::traffic::template::{
    Encap, FrameSpec, Sizes, Vxlan, MAX_FRAME, MAX_LABEL, MAX_LABELS, MAX_VID, MAX_VNI, MIN_FRAME,
    MIN_FRAME_V6,
};

/// The generator's encapsulation keys.
pub(super) const VLAN: Key = Key::new(
    "vlan",
    "integer 0..=4095 or range \"100-163\"",
    "none",
    "an 802.1Q tag; a range varies the id per flow like the address ranges",
);
/// `qinq`.
pub(super) const QINQ: Key = Key::new(
    "qinq",
    "[outer, inner] VLAN ids",
    "none",
    "an 802.1ad tag (TPID 0x88a8) around an 802.1Q tag",
);
/// `mpls`.
pub(super) const MPLS: Key = Key::new(
    "mpls",
    "list of 1..=8 labels 0..=1048575",
    "none",
    "an MPLS label stack, outermost first (bottom of stack on the last, TTL 64)",
);
/// `vxlan`.
pub(super) const VXLAN: Key = Key::new(
    "vxlan",
    "table { vni, src, dst, port, src_mac, dst_mac }",
    "none",
    "outer Ethernet/IPv4/UDP/VXLAN around the frame: vni 0..=16777215, IPv4 tunnel ends, port 4789, outer MACs default to the generator's",
);

/// The analyzer's encapsulation keys.
pub(super) const EXPECT: Key = Key::new(
    "expect",
    "\"none\", \"vlan\", \"qinq\", \"mpls\" or \"vxlan\"",
    "\"none\"",
    "the encapsulation stamped frames arrive in; others count as `unexpected_encap`",
);
/// `vxlan_port`.
pub(super) const VXLAN_PORT: Key = Key::new(
    "vxlan_port",
    "integer 1..=65535",
    "4789",
    "the UDP port VXLAN is decapsulated on",
);
/// `encap_ids`.
pub(super) const ENCAP_IDS: Key = Key::new(
    "encap_ids",
    "integer 1..=1024",
    "64",
    "distinct VLAN ids, VNIs or outer labels counted one by one; more count as `other`",
);

const VXLAN_EXAMPLE: &str =
    "vxlan = { vni = 100, src = \"192.168.0.1\", dst = \"192.168.0.2\", port = 4789 }";

/// An integer in `range` from a raw value, or an error at `span`.
fn int_at(
    sink: &mut Sink<'_>,
    t: &Table<'_, '_>,
    key: &str,
    v: &DeValue<'_>,
    span: Span,
    range: Range<i64>,
    what: &str,
) -> Option<u32> {
    match as_int(v) {
        Some(i) if range.contains(&i) => Some(i as u32),
        Some(i) => {
            sink.error(
                span,
                &t.path,
                Some(key),
                format!("{what} {i} is out of range"),
                Some(format!("{what}s from {} to {}", range.start, range.end - 1)),
            );
            None
        }
        None => {
            sink.error(
                span,
                &t.path,
                Some(key),
                format!("expected an integer {what}"),
                None,
            );
            None
        }
    }
}

/// A list of integers in `range` (`what` each), of a length in `lens`.
fn int_list(
    t: &mut Table<'_, '_>,
    sink: &mut Sink<'_>,
    key: &str,
    range: Range<i64>,
    what: &str,
    lens: Range<usize>,
    help: &str,
) -> Option<Vec<u32>> {
    t.mark_used(key);
    let span = t.span_of(key);
    let Some(DeValue::Array(a)) = t.raw(key) else {
        sink.error(
            span,
            &t.path,
            Some(key),
            format!("expected a list of {what}s"),
            Some(help.into()),
        );
        return None;
    };
    if !lens.contains(&a.len()) {
        sink.error(
            span,
            &t.path,
            Some(key),
            format!("`{key}` takes {help}, not {} value(s)", a.len()),
            None,
        );
        return None;
    }
    let mut out = Vec::new();
    for v in a.iter() {
        out.push(int_at(
            sink,
            t,
            key,
            v.get_ref(),
            v.span(),
            range.clone(),
            what,
        )?);
    }
    Some(out)
}

/// The generator's encapsulation: at most one of its keys.
pub(super) fn generator(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Encap {
    let given: Vec<&str> = ["vlan", "qinq", "mpls", "vxlan"]
        .into_iter()
        .filter(|k| t.has(k))
        .collect();
    for k in given.iter().skip(1) {
        sink.error(
            t.span_of(k),
            &t.path,
            Some(k),
            format!("`{k}` and `{}` both wrap the frames", given[0]),
            Some("one encapsulation per generator".into()),
        );
        t.mark_used(k);
    }
    let max_vid = i64::from(MAX_VID) + 1;
    match given.first().copied() {
        None => Encap::None,
        Some("vlan") => {
            let text = match t.raw("vlan") {
                Some(DeValue::Integer(_)) => {
                    t.int(sink, "vlan", 0..max_vid).map(|(i, _)| i.to_string())
                }
                _ => t.string(sink, "vlan").map(|x| x.0),
            };
            match text.map(|s| Encap::parse_vlan(&s)) {
                Some(Ok(e)) => e,
                Some(Err(e)) => {
                    sink.error(t.span_of("vlan"), &t.path, Some("vlan"), e, None);
                    Encap::None
                }
                None => Encap::None,
            }
        }
        Some("qinq") => {
            let help = "two VLAN ids, [outer, inner]";
            match int_list(t, sink, "qinq", 0..max_vid, "VLAN id", 2..3, help).as_deref() {
                Some(&[outer, inner]) => Encap::QinQ {
                    outer: outer as u16,
                    inner: inner as u16,
                },
                _ => Encap::None,
            }
        }
        Some("mpls") => {
            let help = format!("1 to {MAX_LABELS} labels, outermost first");
            let range = 0..i64::from(MAX_LABEL) + 1;
            int_list(
                t,
                sink,
                "mpls",
                range,
                "MPLS label",
                1..MAX_LABELS + 1,
                &help,
            )
            .map_or(Encap::None, Encap::Mpls)
        }
        Some(_) => vxlan(t, sink).map_or(Encap::None, Encap::Vxlan),
    }
}

/// The `vxlan` table.
fn vxlan(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> Option<Vxlan> {
    t.mark_used("vxlan");
    let span = t.span_of("vxlan");
    let Some(DeValue::Table(map)) = t.raw("vxlan") else {
        sink.error(
            span,
            &t.path,
            Some("vxlan"),
            "expected a table",
            Some(VXLAN_EXAMPLE.into()),
        );
        return None;
    };
    let mut v = Table::new(format!("{}.vxlan", t.path), span, map);
    let vni = match v.raw("vni") {
        None => {
            sink.error(
                v.span.clone(),
                &v.path,
                Some("vni"),
                "a vxlan table needs `vni`",
                Some(VXLAN_EXAMPLE.into()),
            );
            None
        }
        Some(raw) => {
            v.mark_used("vni");
            let range = 0..i64::from(MAX_VNI) + 1;
            int_at(sink, &v, "vni", raw, v.span_of("vni"), range, "VNI")
        }
    };
    let mut addr = |v: &mut Table<'_, '_>, key: &str| -> Option<std::net::Ipv4Addr> {
        let (s, span) = v.required_string(sink, key, VXLAN_EXAMPLE)?;
        match s.parse() {
            Ok(a) => Some(a),
            Err(_) => {
                sink.error(
                    span,
                    &v.path,
                    Some(key),
                    format!("`{s}` is not an IPv4 address"),
                    Some("VXLAN's outer header is IPv4 here, like \"192.168.0.1\"".into()),
                );
                None
            }
        }
    };
    let src = addr(&mut v, "src");
    let dst = addr(&mut v, "dst");
    let port = v
        .int(sink, "port", 1..65536)
        .map_or(4789, |(p, _)| p as u16);
    let src_mac = v
        .has("src_mac")
        .then(|| mac(&mut v, sink, "src_mac", [0; 6]));
    let dst_mac = v
        .has("dst_mac")
        .then(|| mac(&mut v, sink, "dst_mac", [0; 6]));
    v.finish(sink, "a vxlan table", VXLAN_KEYS);
    Some(Vxlan {
        vni: vni?,
        src: src?,
        dst: dst?,
        port,
        src_mac,
        dst_mac,
    })
}

const VXLAN_KEYS: &[Key] = &[
    Key::new("vni", "integer 0..=16777215", "required", "the VNI"),
    Key::new("src", "IPv4 address", "required", "outer source"),
    Key::new("dst", "IPv4 address", "required", "outer destination"),
    Key::new("port", "integer", "4789", "outer UDP destination port"),
    Key::new(
        "src_mac",
        "MAC address",
        "the generator's",
        "outer source MAC",
    ),
    Key::new(
        "dst_mac",
        "MAC address",
        "the generator's",
        "outer destination MAC",
    ),
];

/// The frame sizes `frames` can carry with its encapsulation: a size given
/// too small for the headers and stamp is an error at its key; the default
/// size and IMIX take the smallest frame that fits instead of 64 (or 84).
pub(super) fn sizes(t: &Table<'_, '_>, sink: &mut Sink<'_>, frames: &mut FrameSpec) {
    if frames.encap == Encap::None {
        return;
    }
    let min = frames.min_frame();
    let family = if frames.is_v6() {
        MIN_FRAME_V6
    } else {
        MIN_FRAME
    };
    let what = format!(
        "{} ({} bytes), {}/UDP headers and the stamp",
        frames.encap.name(),
        frames.encap.overhead(),
        if frames.is_v6() { "IPv6" } else { "IPv4" }
    );
    let hint = Some(format!(
        "frames from {min} to {MAX_FRAME} bytes (FCS included) with this encapsulation"
    ));
    // The family's own minimum is reported by the family check.
    let too_small = |s: usize| s < min && s >= family;
    match &mut frames.sizes {
        Sizes::Fixed(f) if !t.has("frame") => *f = (*f).max(min),
        Sizes::Fixed(f) if too_small(*f) => sink.error(
            t.span_of("frame"),
            &t.path,
            Some("frame"),
            format!("a {f}-byte frame is too small for the {what}"),
            hint,
        ),
        Sizes::Imix(v) if !t.has("imix") => {
            for (s, _) in v.iter_mut() {
                *s = (*s).max(min);
            }
        }
        Sizes::Imix(v) => {
            if let Some((f, _)) = v.iter().find(|x| too_small(x.0)) {
                sink.error(
                    t.span_of("imix"),
                    &t.path,
                    Some("imix"),
                    format!("a {f}-byte frame is too small for the {what}"),
                    hint,
                );
            }
        }
        Sizes::Fixed(_) => {}
    }
}

/// The analyzer's encapsulation settings.
pub(super) fn analyzer(t: &mut Table<'_, '_>, sink: &mut Sink<'_>) -> EncapSpec {
    let expect = t
        .choice(
            sink,
            "expect",
            "encapsulation",
            &[
                ("none", EncapKind::None),
                ("vlan", EncapKind::Vlan),
                ("qinq", EncapKind::QinQ),
                ("mpls", EncapKind::Mpls),
                ("vxlan", EncapKind::Vxlan),
            ],
            "\"none\", \"vlan\", \"qinq\", \"mpls\" or \"vxlan\"",
        )
        .unwrap_or(EncapKind::None);
    EncapSpec {
        expect,
        vxlan_port: t
            .int(sink, "vxlan_port", 1..65536)
            .map_or(crate::net::vxlan::PORT, |(p, _)| p as u16),
        ids: t
            .int(sink, "encap_ids", 1..MAX_ENCAP_IDS as i64 + 1)
            .map_or(DEFAULT_ENCAP_IDS, |(n, _)| n as usize),
    }
}
