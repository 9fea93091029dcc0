//! The text says what is true now: README.md, the manual and the comments in
//! src/, tests/, benches/, examples/ and scripts/ name no development round
//! (the word session or round and its number), no private tool, no issue
//! number, no branch and no path of one machine. This test greps for those
//! and fails naming each `file:line`. Its own patterns and fixtures are
//! assembled from pieces, so this file is checked like every other.

use std::path::{Path, PathBuf};

/// The files whose text is checked: README.md and every text file under the
/// listed directories.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.join("README.md")];
    let mut dirs: Vec<PathBuf> = ["docs", "src", "tests", "benches", "examples", "scripts"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for p in entries.flatten().map(|e| e.path()) {
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The character after the number that starts at `lower[num..]`.
fn after_number(lower: &str, num: usize) -> Option<char> {
    lower[num..].chars().find(|c| !c.is_ascii_digit())
}

/// Whether `lower[at..]` starts with `word` as a whole word (no letter, digit,
/// `_` or `-` just before it).
fn word_at(lower: &str, at: usize) -> bool {
    lower[..at]
        .chars()
        .next_back()
        .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '-'))
}

/// `word` (plural allowed), a space and a digit, as a whole word: a session
/// or round and its number, or a range of them. A counter printed as a round
/// number and a colon is output, not history, and is let through when
/// `colon_ok`.
fn numbered(lower: &str, word: &str, colon_ok: bool) -> bool {
    let mut from = 0;
    while let Some(i) = lower[from..].find(word) {
        let at = from + i;
        from = at + word.len();
        if !word_at(lower, at) {
            continue;
        }
        let mut rest = &lower[at + word.len()..];
        rest = rest.strip_prefix('s').unwrap_or(rest);
        let Some(rest) = rest.strip_prefix(' ') else {
            continue;
        };
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        if !rest.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let num = lower.len() - rest.len();
        if colon_ok && after_number(lower, num) == Some(':') {
            continue;
        }
        return true;
    }
    false
}

/// What in `line` names history, if anything.
fn offence(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    if numbered(&lower, "session", false) {
        return Some("a development session");
    }
    if numbered(&lower, "round", true) {
        return Some("a development round");
    }
    if numbered(&lower, "issue", false) || numbered(&lower, "helper", false) {
        return Some("an issue or helper number");
    }
    if lower.contains(concat!("lr-", "bench")) {
        return Some("a private tool");
    }
    if lower.contains(concat!("branch", " `")) {
        return Some("a branch");
    }
    if [
        concat!("/wo", "rk/"),
        concat!("/ro", "ot/"),
        concat!("/ho", "me/"),
    ]
    .iter()
    .any(|p| lower.contains(p))
    {
        return Some("a path of one machine");
    }
    None
}

/// Every offending line under `root`, as `file:line: what: text`.
fn offences(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for file in files(root) {
        let rel = file.strip_prefix(root).unwrap_or(&file);
        // Binary files (fonts, captures) hold no prose.
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = offence(line) {
                found.push(format!(
                    "{}:{}: {what}: {}",
                    rel.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn the_text_names_no_round_issue_tool_branch_or_machine_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let found = offences(root);
    assert!(
        found.is_empty(),
        "{} line(s) carry history; say what is true now instead:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_patterns_catch_history_and_let_the_product_through() {
    // Each history line is assembled, so the fixture does not read as one.
    for bad in [
        format!("Session {} made the sink 3x cheaper", 8),
        format!("while tuning in sessions {}-3", 1),
        format!("as measured in round {} of the work", 4),
        format!("is being built (issue {})", 21),
        format!("(spead2's issue #{})", 122),
        format!("measured it ({} `rpccodec`)", "branch"),
        format!("LINERATE_VENV=/{}/main/.venv", "work"),
        format!("run alone (the dev VM used its {}-bench lock)", "lr"),
    ] {
        assert!(offence(&bad).is_some(), "{bad:?} passes");
    }
    for good in [
        "cargo bench -- --rounds 3".to_string(),
        format!("round {}: fwd linerate testpmd", 1),
        "a round trip of 191 ns".to_string(),
        "one branch per burst".to_string(),
        "helpers shared by the tests".to_string(),
    ] {
        assert_eq!(offence(&good), None, "{good:?} is flagged");
    }
}
