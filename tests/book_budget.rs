//! The manual stays short enough to read: every page under docs/src (chapters,
//! design notes and the generated reference pages alike) counts, and the book
//! must stay under [`BUDGET`] lines. When it grows past, the failure names the
//! longest pages: tighten them, or move detail to the API docs.

use std::path::{Path, PathBuf};

/// Lines the whole book may not reach.
const BUDGET: usize = 3_000;

/// Every markdown file under `dir`, at any depth.
fn pages(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(pages(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out
}

/// Pages with their line counts (as `wc -l` counts them), longest first.
fn line_counts(dir: &Path) -> Vec<(usize, String)> {
    let mut counts: Vec<(usize, String)> = pages(dir)
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let name = p.strip_prefix(dir).unwrap().display().to_string();
            (text.matches('\n').count(), name)
        })
        .collect();
    counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    counts
}

/// `Err` naming the total and the longest pages when `counts` reach `budget`.
fn judge(counts: &[(usize, String)], budget: usize) -> Result<usize, String> {
    let total: usize = counts.iter().map(|(n, _)| n).sum();
    if total < budget {
        return Ok(total);
    }
    let longest: Vec<String> = counts
        .iter()
        .take(8)
        .map(|(n, name)| format!("    {n:5}  {name}"))
        .collect();
    Err(format!(
        "the manual (docs/src) has {total} lines, at or over its budget of {budget}; \
         tighten it (no repetition between pages, figures only on the results page). \
         The longest pages:\n{}",
        longest.join("\n")
    ))
}

#[test]
fn the_book_stays_under_its_budget() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src");
    let counts = line_counts(&dir);
    assert!(
        counts.iter().any(|(_, n)| n == "SUMMARY.md") && counts.len() > 10,
        "docs/src holds too few pages: {counts:?}"
    );
    if let Err(e) = judge(&counts, BUDGET) {
        panic!("{e}");
    }
}

#[test]
fn the_judge_names_the_longest_pages() {
    let counts = vec![
        (2_000, "long.md".to_string()),
        (1_000, "short.md".to_string()),
    ];
    let e = judge(&counts, 3_000).unwrap_err();
    assert!(
        e.contains("3000 lines") && e.contains("2000  long.md"),
        "{e}"
    );
    assert_eq!(judge(&counts, 3_001), Ok(3_000));
}
