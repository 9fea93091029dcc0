//! A kind is its own file and one registry line, and the planner, the
//! builder and the runtime know none: the architecture chapter's worked
//! example ("Adding a stage kind", the `drop_every` stage) kept honest.

mod util;

use std::path::{Path, PathBuf};
use std::time::Duration;

use linerate::runtime::run::StopReason;

const PIPELINE: &str = r#"
[pipeline]
lcores = "0"
pin = false

[ring.a]
[ring.b]

[stage.src]
kind = "source"
tx = "a"
count = 1000

[stage.drop]
kind = "drop_every"
rx = "a"
tx = "b"
every = 10

[stage.rx]
kind = "sink"
rx = "b"
"#;

/// The example kind checks, plans, builds and runs like any other.
#[test]
fn the_example_kind_checks_plans_builds_and_runs() {
    let plan = linerate::pipeline::load_str(Path::new("drop.toml"), PIPELINE).unwrap();
    assert!(plan.to_string().contains("drop_every 10, burst"), "{plan}");
    let r = util::run_text("drop.toml", PIPELINE, Duration::from_secs(30));
    assert_eq!(r.stopped_by, Some(StopReason::Finished));
    let drop = &r.stages["drop"];
    assert_eq!((drop.packets_in, drop.packets_out), (1000, 900));
    assert_eq!(drop.dropped, 100);
    assert_eq!(r.stages["rx"].packets_in, 900);
    // Its keys are checked like every kind's.
    let bad = PIPELINE.replace("every = 10", "evry = 10");
    let e = linerate::pipeline::load_str(Path::new("drop.toml"), &bad)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("drop.toml:") && e.contains("`every` is required") && e.contains("evry"),
        "{e}"
    );
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

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

/// A file's text without its comments (`//` to the end of the line, outside
/// strings), so prose may name what code may not.
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let (mut in_str, mut escaped, mut prev) = (false, false, ' ');
        let mut cut = line.len();
        for (i, c) in line.char_indices() {
            if in_str {
                match c {
                    _ if escaped => escaped = false,
                    '\\' => escaped = true,
                    '"' => in_str = false,
                    _ => {}
                }
            } else if c == '"' && prev != '\'' {
                in_str = true;
            } else if c == '/' && prev == '/' {
                cut = i - 1;
                break;
            }
            prev = c;
        }
        out += &line[..cut];
        out.push('\n');
    }
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap().display().to_string()
}

/// The example kind is named by its own file and by one registry line, and
/// nowhere else in the source.
#[test]
fn a_new_stage_kind_is_its_file_and_one_registry_line() {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut naming = Vec::new();
    for f in &files {
        let code = code_of(f);
        let lines = code
            .lines()
            .filter(|l| l.contains("drop_every") || l.contains("DropEvery"))
            .count();
        if lines > 0 {
            naming.push((rel(f), lines));
        }
    }
    naming.sort();
    let own = "src/pipeline/schema/drop_every.rs";
    let registry = "src/pipeline/schema/mod.rs";
    assert_eq!(naming.len(), 2, "files naming the kind: {naming:?}");
    assert_eq!(naming[0].0, own, "{naming:?}");
    assert_eq!(naming[1], (registry.to_string(), 1), "{naming:?}");
}

/// The planner, the replica expansion, the host split, the builder and the
/// runtime name no kind: no `StageKind::X` or `PortKind::X` variant, no kind
/// name as a string literal (`#[cfg(feature = "...")]` aside).
#[test]
fn the_planner_builder_and_runtime_name_no_kind() {
    let mut files: Vec<PathBuf> = ["plan.rs", "replica.rs", "host_part.rs", "build.rs"]
        .iter()
        .map(|f| root().join("src/pipeline").join(f))
        .collect();
    rust_files(&root().join("src/runtime"), &mut files);
    let kinds: Vec<&str> = linerate::pipeline::stage_kinds()
        .chain(linerate::pipeline::port_kinds())
        .map(|d| d.name)
        .collect();
    assert!(kinds.contains(&"drop_every") && kinds.contains(&"mem"));
    let mut found = Vec::new();
    for f in &files {
        let code = code_of(f);
        for (n, line) in code.lines().enumerate() {
            let line = line.replace("feature = \"", "feature=");
            for enum_ in ["StageKind::", "PortKind::"] {
                if let Some(i) = line.find(enum_) {
                    let next = line[i + enum_.len()..].chars().next();
                    if next.is_some_and(|c| c.is_ascii_uppercase()) {
                        found.push(format!("{}:{}: {}", rel(f), n + 1, line.trim()));
                    }
                }
            }
            for k in &kinds {
                if line.contains(&format!("\"{k}\"")) {
                    found.push(format!("{}:{}: {}", rel(f), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "kinds named:\n{}", found.join("\n"));
}
