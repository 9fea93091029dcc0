//! Imports run down the floors: the runtime, the ports, the buffers and the
//! system bindings never reach up into the pipeline, the protocols, the
//! searcher, the hosts or the command line.

use std::path::{Path, PathBuf};

const LOW: &[&str] = &["src/runtime", "src/port", "src/buf", "src/sys"];
const HIGH: &[&str] = &[
    "pipeline", "traffic", "spead", "reliable", "rpc", "search", "hosts", "cli",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text without `//` comments (doc comments too), so prose may name
/// what code may not import.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if l[..i].matches('"').count() % 2 == 0 => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn low_floors_import_nothing_above_them() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for d in LOW {
        rust_files(&root.join(d), &mut files);
    }
    assert!(files.len() > 10, "{files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        for (n, line) in code.lines().enumerate() {
            for m in HIGH {
                let path = format!("crate::{m}");
                let hit = line.match_indices(&path).any(|(i, _)| {
                    let after = line[i + path.len()..].chars().next();
                    !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if hit {
                    let f = f.strip_prefix(&root).unwrap().display();
                    bad.push(format!("{f}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(bad.is_empty(), "imports from above:\n{}", bad.join("\n"));
}

/// The checker sees what it must: a line that imports from above is caught.
#[test]
fn the_check_can_fail() {
    let code = code_of("use crate::pipeline::Plan; // crate::cli\n// crate::traffic");
    assert!(code.contains("crate::pipeline") && !code.contains("crate::cli"));
    assert!(!code.contains("crate::traffic"));
}
