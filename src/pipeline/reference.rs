//! The key reference: every section, port kind and stage kind with its keys'
//! types, defaults and meanings, rendered from the schema registry
//! ([`sections`], [`port_kinds`], [`stage_kinds`]) as text, markdown or JSON.
//! `linerate keys` prints it; the manual's reference page is its markdown, and
//! a test fails when the two differ, so the reference is never kept by hand.

use super::{port_kinds, sections, stage_kinds, Key, KindDoc};

/// Which part of a pipeline file a kind belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// `[pipeline]`, `[pool]`, `[ring.NAME]`, `[eal]`.
    Section,
    /// `[port.NAME]` with `kind = "..."`.
    Port,
    /// `[stage.NAME]` with `kind = "..."`.
    Stage,
}

impl Group {
    /// The group's name, as a heading and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Group::Section => "section",
            Group::Port => "port",
            Group::Stage => "stage",
        }
    }

    /// How a file writes a section of this group named `name`.
    fn header(self, name: &str) -> String {
        match self {
            Group::Section if name == "ring" => "[ring.NAME]".to_string(),
            Group::Section => format!("[{name}]"),
            Group::Port => format!("[port.NAME] kind = \"{name}\""),
            Group::Stage => format!("[stage.NAME] kind = \"{name}\""),
        }
    }
}

/// Every documented kind, in the order of a pipeline file: sections, ports,
/// stages (each in registry order).
pub fn all() -> Vec<(Group, &'static KindDoc)> {
    let mut v: Vec<(Group, &'static KindDoc)> =
        sections().iter().map(|d| (Group::Section, d)).collect();
    v.extend(port_kinds().map(|d| (Group::Port, d)));
    v.extend(stage_kinds().map(|d| (Group::Stage, d)));
    v
}

/// The kinds named `name` (a section, port kind or stage kind), or an error
/// naming every valid name.
pub fn find(name: &str) -> Result<Vec<(Group, &'static KindDoc)>, String> {
    let all = all();
    let found: Vec<_> = all
        .iter()
        .copied()
        .filter(|(_, d)| d.name == name)
        .collect();
    if found.is_empty() {
        let names: Vec<&str> = all.iter().map(|(_, d)| d.name).collect();
        let hint = super::diag::suggest(name, &names)
            .map(|s| format!(" (did you mean `{s}`?)"))
            .unwrap_or_default();
        return Err(format!(
            "no section, port kind or stage kind `{name}`{hint}\n    valid: {}",
            names.join(", ")
        ));
    }
    Ok(found)
}

/// Plain text: per kind a heading line and an aligned table of its keys.
pub fn text(kinds: &[(Group, &KindDoc)]) -> String {
    let mut out = String::new();
    for (i, (g, d)) in kinds.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!("{} ({}): {}\n", d.name, g.header(d.name), d.doc));
        text_table(&mut out, d.keys);
        if !d.more_keys.is_empty() {
            out.push_str("  and the endpoint's keys:\n");
            text_table(&mut out, d.more_keys);
        }
    }
    out
}

fn text_table(out: &mut String, keys: &[Key]) {
    let w = |f: fn(&Key) -> &str, head: &str| {
        keys.iter()
            .map(|k| f(k).len())
            .chain([head.len()])
            .max()
            .unwrap_or(0)
    };
    let (wn, wt, wd) = (
        w(|k| k.name, "key"),
        w(|k| k.ty, "type"),
        w(|k| k.default, "default"),
    );
    out.push_str(&format!(
        "  {:wn$}  {:wt$}  {:wd$}  meaning\n",
        "key", "type", "default"
    ));
    for k in keys {
        out.push_str(&format!(
            "  {:wn$}  {:wt$}  {:wd$}  {}\n",
            k.name, k.ty, k.default, k.doc
        ));
    }
}

/// Kinds that have a key alike (name, type, default and meaning) in at least
/// this many kinds share it: the page lists it once, in the shared table.
const SHARED_BY: usize = 3;

/// Markdown: the manual's key reference page, whole when `kinds` is [`all`].
/// A key alike in `SHARED_BY` kinds or more is in one shared table; a key
/// alike in two kinds is in the first one's table, and the second links to it;
/// every other key is in its kind's table.
pub fn markdown(kinds: &[(Group, &KindDoc)]) -> String {
    let mut out = String::from(
        "# Pipeline keys\n\n\
         <!-- Generated from the schema registry (src/pipeline/schema/); do not edit. Regenerate:\n     \
         cargo run -- keys --markdown > docs/src/reference/keys.md -->\n\n\
         Every key of every section, port kind and stage kind: its type, its default and what\n\
         it means (`linerate keys [KIND]` prints the same in a terminal). A key several kinds\n\
         have alike is listed once, and the kinds name it. [Pipelines](../pipelines.md) says how\n\
         the pieces fit.\n",
    );
    let every = |d: &KindDoc| {
        d.keys
            .iter()
            .chain(d.more_keys)
            .copied()
            .collect::<Vec<Key>>()
    };
    let holders = |k: &Key| kinds.iter().filter(|(_, d)| every(d).contains(k)).count();
    let mut shared: Vec<Key> = Vec::new();
    for (_, d) in kinds {
        for k in every(d) {
            if !shared.contains(&k) && holders(&k) >= SHARED_BY {
                shared.push(k);
            }
        }
    }
    if !shared.is_empty() {
        out.push_str("\n## Shared keys\n\nEach kind below names the ones it has.\n");
        md_table(&mut out, &shared);
    }
    let mut printed: Vec<(Key, &str)> = Vec::new();
    let mut last = None;
    for (g, d) in kinds {
        if last != Some(*g) {
            out.push_str(&format!(
                "\n## {}\n\n",
                match g {
                    Group::Section => "Sections",
                    Group::Port => "Port kinds",
                    Group::Stage => "Stage kinds",
                }
            ));
            last = Some(*g);
        }
        // Where each of the kind's keys is told: shared, earlier, or here.
        let mut refs = String::new();
        let names = |ks: Vec<&Key>| {
            ks.iter()
                .map(|k| format!("`{}`", k.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let keys = every(d);
        let own_shared: Vec<&Key> = keys.iter().filter(|k| shared.contains(k)).collect();
        if !own_shared.is_empty() {
            refs.push_str(&format!(" [Shared](#shared-keys): {}.", names(own_shared)));
        }
        let mut earlier: Vec<&str> = Vec::new();
        for k in &keys {
            if let Some((_, at)) = printed.iter().find(|(p, _)| p == k) {
                if !earlier.contains(at) {
                    earlier.push(at);
                }
            }
        }
        for at in earlier {
            let ks: Vec<&Key> = printed
                .iter()
                .filter(|(p, a)| *a == at && keys.contains(p))
                .map(|(p, _)| p)
                .collect();
            refs.push_str(&format!(" As in [{at}](#{at}): {}.", names(ks)));
        }
        out.push_str(&format!(
            "### {}\n`{}`: {}.{}\n",
            d.name,
            g.header(d.name),
            d.doc.replace('<', "&lt;"),
            refs
        ));
        let mut fresh = |ks: &[Key]| -> Vec<Key> {
            let v: Vec<Key> = ks
                .iter()
                .filter(|k| !shared.contains(k) && !printed.iter().any(|(p, _)| p == *k))
                .copied()
                .collect();
            printed.extend(v.iter().map(|k| (*k, d.name)));
            v
        };
        let (own, more) = (fresh(d.keys), fresh(d.more_keys));
        if !own.is_empty() {
            md_table(&mut out, &own);
        }
        if !more.is_empty() {
            // A blank line: a text line right after a table would be a row of it.
            out.push_str("\nThe reliable endpoint's keys, in the same section:\n");
            md_table(&mut out, &more);
        }
    }
    out
}

/// One table row: `| `name` | type | default | meaning |`.
fn md_row(k: &Key) -> String {
    // `|` would end the cell; `<` would start an HTML tag (`chunk_<id>.raw`).
    let cell = |s: &str| {
        s.replace('|', "\\|")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    format!(
        "| `{}` | {} | {} | {} |\n",
        k.name,
        cell(k.ty),
        cell(k.default),
        cell(k.doc)
    )
}

fn md_table(out: &mut String, keys: &[Key]) {
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    for k in keys {
        out.push_str(&md_row(k));
    }
}

/// JSON: a list of kinds, each with its group and keys.
pub fn json(kinds: &[(Group, &KindDoc)]) -> serde_json::Value {
    let keys = |ks: &[Key]| {
        ks.iter()
            .map(|k| serde_json::json!({"name": k.name, "type": k.ty, "default": k.default, "meaning": k.doc}))
            .collect::<Vec<_>>()
    };
    serde_json::Value::Array(
        kinds
            .iter()
            .map(|(g, d)| {
                serde_json::json!({
                    "name": d.name,
                    "group": g.name(),
                    "header": g.header(d.name),
                    "doc": d.doc,
                    "keys": keys(d.keys),
                    "more_keys": keys(d.more_keys),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn every_kind_is_there_once_with_keys() {
        let all = all();
        let mut names: Vec<&str> = all.iter().map(|(_, d)| d.name).collect();
        for want in [
            "pipeline",
            "pool",
            "mem",
            "udp",
            "pcap",
            "dpdk",
            "source",
            "generator",
            "reliable_tx",
        ] {
            assert!(names.contains(&want), "{want} missing");
        }
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a name twice");
        assert!(all.iter().all(|(_, d)| !d.keys.is_empty()));
    }

    #[test]
    fn the_renderings_hold_every_key() {
        let all = all();
        let (t, m, j) = (text(&all), markdown(&all), json(&all).to_string());
        for (_, d) in &all {
            for k in d.keys.iter().chain(d.more_keys) {
                assert!(t.contains(k.doc), "text lacks {}.{}", d.name, k.name);
                assert!(
                    m.contains(&format!("| `{}` |", k.name)),
                    "markdown lacks {}.{}",
                    d.name,
                    k.name
                );
                assert!(
                    j.contains(&format!("\"name\":\"{}\"", k.name)),
                    "json lacks {}.{}",
                    d.name,
                    k.name
                );
            }
        }
    }

    #[test]
    fn an_unknown_kind_names_the_valid_ones() {
        let e = find("sourc").unwrap_err();
        assert!(
            e.contains("`sourc` (did you mean `source`?)") && e.contains("mem"),
            "{e}"
        );
        assert_eq!(find("mem").unwrap().len(), 1);
    }
}
