//! Runs every command example in README.md and the manual (`docs/src/**/*.md`)
//! and checks its output, so that an example that stops working fails CI.
//!
//! The markdown is parsed with pulldown-cmark; what a fenced block's info string
//! says decides what happens to it:
//!
//! - ```` ```console ````: every `$ linerate ...` line is run (a trailing `\`
//!   continues a command), and the lines after it, up to the next `$`, are its
//!   expected stdout. Attributes after `console`, separated by spaces:
//!   - none: the output must match exactly (trailing spaces and blank lines
//!     aside); a `[..]` in a line matches any text, a line `...` any lines;
//!   - `shape`: for output that changes from run to run. Numbers match any
//!     number, `key=N` counters may come and go (a summary prints the nonzero
//!     ones), and so may the lines that held only such counters; a line `...`
//!     matches any lines (a verdict printed only on loss); everything else
//!     must match. The counts must also reconcile (see [`reconcile_text`]);
//!   - `json`: stdout must be JSON holding every key of the expected JSON (at
//!     every depth; the values may differ), and its counts must reconcile;
//!   - `stderr`: match stderr instead of stdout;
//!   - `exit=N`: the exit status (default 0).
//! - ```` ```sh ````, ```` ```bash ````, ```` ```shell ````: not run. A block
//!   that holds a linerate, cargo or scripts/ command must say why in its
//!   info string: ```` ```sh norun REASON ```` (`norun`, then the reason, e.g.
//!   `sh norun needs root and network namespaces`).
//! - Any other block (toml, json, text, rust, ...) is left alone; a block
//!   without a language must not hold a `linerate` command.
//!
//! Each block runs in a fresh temporary directory in which `pipelines` and
//! `docs` point at the repository's, so paths are as in the repository and
//! files a command writes do not land in the tree. A command gets 120 s.
//! A command that appears several times is run once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};

/// The info-string word of a shell block that is not run; the reason follows.
const NOT_RUN: &str = "norun";
const TIMEOUT: Duration = Duration::from_secs(120);

/// One fenced code block.
struct Block {
    file: PathBuf,
    line: usize,
    info: String,
    text: String,
}

/// The markdown files whose examples are checked.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs/src")];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "md") {
                files.push(p);
            }
        }
    }
    files
}

fn blocks(file: &Path) -> Vec<Block> {
    let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    for (event, range) in Parser::new(&src).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let info = match kind {
                    CodeBlockKind::Fenced(i) => i.to_string(),
                    CodeBlockKind::Indented => continue,
                };
                let line = src[..range.start].lines().count() + 1;
                current = Some(Block {
                    file: file.to_path_buf(),
                    line,
                    info,
                    text: String::new(),
                });
            }
            Event::Text(t) => {
                if let Some(b) = current.as_mut() {
                    b.text.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => out.extend(current.take()),
            _ => {}
        }
    }
    out
}

/// A command and the output the block expects of it.
struct Example {
    command: String,
    expected: String,
}

fn examples(text: &str) -> Result<Vec<Example>, String> {
    let mut out: Vec<Example> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            let mut command = cmd.to_string();
            while command.ends_with('\\') {
                command.pop();
                let next = lines
                    .next()
                    .ok_or("a `\\` continues past the block's end")?;
                command.push(' ');
                command.push_str(next.trim());
            }
            out.push(Example {
                command,
                expected: String::new(),
            });
        } else if let Some(ex) = out.last_mut() {
            ex.expected.push_str(line);
            ex.expected.push('\n');
        } else {
            return Err(format!("output before the first `$ ` command: {line:?}"));
        }
    }
    if out.is_empty() {
        return Err("a console block without a `$ ` command".into());
    }
    Ok(out)
}

/// What a run gave.
#[derive(Clone)]
struct Outcome {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `command` (`linerate ARGS...`, no shell) in `dir`, with a timeout.
fn run(command: &str, dir: &Path) -> Result<Outcome, String> {
    let argv = shlex::split(command).ok_or_else(|| format!("cannot split {command:?}"))?;
    let (prog, args) = argv.split_first().ok_or("an empty command")?;
    if prog != "linerate" {
        return Err(format!("only `linerate` commands are run, not `{prog}`"));
    }
    let out_path = dir.join(".stdout");
    let err_path = dir.join(".stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).map_err(|e| e.to_string())?)
        .stderr(std::fs::File::create(&err_path).map_err(|e| e.to_string())?)
        .spawn()
        .map_err(|e| format!("cannot start linerate: {e}"))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {TIMEOUT:?}; killed"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ok(Outcome {
        status: status.code(),
        stdout: read(&out_path),
        stderr: read(&err_path),
    })
}

/// Lines without trailing spaces, and without trailing blank lines.
fn tidy(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(|l| l.trim_end().to_string()).collect();
    while v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// One line against a pattern in which `[..]` matches any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !line.starts_with(first) || line.len() < first.len() + last.len() || !line.ends_with(last) {
        return false;
    }
    let mut rest = &line[first.len()..line.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    true
}

/// Lines against patterns in which a line `...` matches any number of lines.
fn lines_match(pattern: &[String], lines: &[String]) -> bool {
    match pattern.split_first() {
        None => lines.is_empty(),
        Some((p, rest)) if p == "..." => (0..=lines.len()).any(|k| lines_match(rest, &lines[k..])),
        Some((p, rest)) => {
            lines.first().is_some_and(|l| line_matches(p, l)) && lines_match(rest, &lines[1..])
        }
    }
}

/// The shape of text output: numbers become `#` (a list of numbers one `#`),
/// `key=N` counters and lines that held nothing else are dropped, and runs of
/// spaces become one.
fn shape(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in s.lines() {
        let mut words = Vec::new();
        for w in line.split_whitespace() {
            if let Some((k, v)) = w.split_once('=') {
                if !k.is_empty() && !v.is_empty() && number_word(v) {
                    continue;
                }
            }
            // A rate's prefix follows its size (`432 kpps`, `1.4 Mpps`, `1.0 MB/s`).
            let w = match w.strip_prefix(['k', 'K', 'M', 'G']) {
                Some(unit @ ("pps" | "bps" | "B/s")) => unit,
                _ => w,
            };
            words.push(hash_numbers(w));
        }
        // A detail line (`  gen:` once its counters are gone) comes and goes.
        if words.is_empty()
            || (words.len() == 1 && words[0].ends_with(':') && line.starts_with("  "))
        {
            continue;
        }
        // A list of numbers (`[0, 1, 2]`) is one `#`, however long.
        let mut joined = words.join(" ");
        while joined.contains("#, #") {
            joined = joined.replace("#, #", "#");
        }
        out.push(joined);
    }
    out
}

fn number_word(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_digit() || ".,%e-+".contains(c))
}

fn hash_numbers(w: &str) -> String {
    let c: Vec<char> = w.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < c.len() {
        if c[i].is_ascii_digit() {
            // Digits, with `.` or `,` between digits (`1.42`, `9,817,814`).
            i += 1;
            while i < c.len()
                && (c[i].is_ascii_digit()
                    || ((c[i] == '.' || c[i] == ',')
                        && c.get(i + 1).is_some_and(char::is_ascii_digit)))
            {
                i += 1;
            }
            out.push('#');
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Counts in a `linerate run` summary that must reconcile: for each mem port,
/// `tx + duplicated = rx + lost + queue_dropped + overflow + in_flight`, and
/// `dropped` is the sum of the drops by cause.
fn reconcile_text(out: &str) -> Result<(), String> {
    let mut in_ports = false;
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"port") && words.get(1) == Some(&"kind") {
            in_ports = true;
            continue;
        }
        if !in_ports || words.len() < 5 || words[1] != "mem" {
            continue;
        }
        let num = |w: &str| {
            w.parse::<u64>()
                .map_err(|_| format!("not a count: {w:?} in {line:?}"))
        };
        let (rx, tx, dropped) = (num(words[2])?, num(words[3])?, num(words[4])?);
        let mut detail: HashMap<&str, u64> = HashMap::new();
        for w in &words[5..] {
            if let Some((k, v)) = w.split_once('=') {
                detail.insert(k, num(v)?);
            }
        }
        let d = |k: &str| detail.get(k).copied().unwrap_or(0);
        let causes = d("lost") + d("queue_dropped") + d("overflow");
        if tx + d("duplicated") != rx + causes + d("in_flight") {
            return Err(format!("port counts do not reconcile: {line:?}"));
        }
        if dropped != causes {
            return Err(format!("`dropped` is not the sum of its causes: {line:?}"));
        }
    }
    Ok(())
}

/// Counts in a JSON report that must reconcile, at any depth: a trial's
/// `offered = received + lost` and `offered = sent + unsent`, and a mem port's
/// `tx + duplicated = rx + lost + queue_dropped + overflow + in_flight`.
fn reconcile_json(v: &serde_json::Value) -> Result<(), String> {
    match v {
        serde_json::Value::Array(a) => a.iter().try_for_each(reconcile_json),
        serde_json::Value::Object(o) => {
            let n = |k: &str| o.get(k).and_then(|x| x.as_u64());
            if let (Some(off), Some(rec), Some(lost)) = (n("offered"), n("received"), n("lost")) {
                if off != rec + lost {
                    return Err(format!("offered {off} != received {rec} + lost {lost}"));
                }
            }
            if let (Some(off), Some(sent), Some(unsent)) = (n("offered"), n("sent"), n("unsent")) {
                if off != sent + unsent {
                    return Err(format!("offered {off} != sent {sent} + unsent {unsent}"));
                }
            }
            // A mem port's counters in a run or trial report.
            if let (Some(tx), Some(rx), Some(d)) =
                (n("tx_packets"), n("rx_packets"), o.get("detail"))
            {
                let c = |k: &str| d.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
                if o.get("kind").and_then(|k| k.as_str()) == Some("mem")
                    && tx + c("duplicated")
                        != rx + c("lost") + c("queue_dropped") + c("overflow") + c("in_flight")
                {
                    return Err(format!("mem port counts do not reconcile: {v}"));
                }
            }
            o.values().try_for_each(reconcile_json)
        }
        _ => Ok(()),
    }
}

/// Every key of `expected`, at every depth, is in `actual` (arrays: each
/// expected element against the actual element at the same place).
fn keys_present(
    expected: &serde_json::Value,
    actual: &serde_json::Value,
    path: &str,
) -> Result<(), String> {
    use serde_json::Value;
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => e.iter().try_for_each(|(k, ev)| match a.get(k) {
            Some(av) => keys_present(ev, av, &format!("{path}.{k}")),
            None => Err(format!("key `{path}.{k}` missing")),
        }),
        (Value::Array(e), Value::Array(a)) => e
            .iter()
            .zip(a.iter())
            .enumerate()
            .try_for_each(|(i, (ev, av))| keys_present(ev, av, &format!("{path}[{i}]"))),
        (Value::Object(_), _) => Err(format!("`{path}` is not an object")),
        (Value::Array(_), _) => Err(format!("`{path}` is not an array")),
        _ => Ok(()),
    }
}

fn check(ex: &Example, attrs: &[&str], out: &Outcome) -> Result<(), String> {
    let want_status = attrs
        .iter()
        .find_map(|a| a.strip_prefix("exit="))
        .map(|s| {
            s.parse::<i32>()
                .map_err(|_| format!("bad attribute exit={s}"))
        })
        .transpose()?
        .unwrap_or(0);
    let show = || format!("--- stdout:\n{}--- stderr:\n{}", out.stdout, out.stderr);
    if out.status != Some(want_status) {
        return Err(format!(
            "exit status {:?}, the example says {want_status}\n{}",
            out.status,
            show()
        ));
    }
    let actual = if attrs.contains(&"stderr") {
        &out.stderr
    } else {
        &out.stdout
    };
    if attrs.contains(&"json") {
        let e: serde_json::Value =
            serde_json::from_str(&ex.expected).map_err(|e| format!("the example's JSON: {e}"))?;
        let a: serde_json::Value = serde_json::from_str(actual)
            .map_err(|e| format!("the output is not JSON: {e}\n{}", show()))?;
        keys_present(&e, &a, "")?;
        return reconcile_json(&a);
    }
    if attrs.contains(&"shape") {
        let (e, a) = (shape(&ex.expected), shape(actual));
        if !lines_match(&e, &a) {
            return Err(format!(
                "the output's shape differs\n--- expected shape:\n{}\n--- actual shape:\n{}\n{}",
                e.join("\n"),
                a.join("\n"),
                show()
            ));
        }
        return reconcile_text(actual);
    }
    if !lines_match(&tidy(&ex.expected), &tidy(actual)) {
        return Err(format!(
            "the output differs\n--- expected:\n{}{}",
            ex.expected,
            show()
        ));
    }
    Ok(())
}

/// A `sh` block that holds a command must say why it is not run: its info
/// string is `sh norun REASON`.
fn check_not_run(b: &Block) -> Result<(), String> {
    let runs_something = b.text.lines().any(|l| {
        let l = l.trim_start();
        !l.starts_with('#')
            && (l.contains("linerate ") || l.starts_with("cargo ") || l.contains("scripts/"))
    });
    let words: Vec<&str> = b.info.split_whitespace().collect();
    let says_why = words.get(1) == Some(&NOT_RUN) && words.len() > 2;
    if words.get(1) == Some(&NOT_RUN) && !says_why {
        return Err(format!(
            "`{}`: say why the block is not run after `{NOT_RUN}`",
            b.info
        ));
    }
    if runs_something && !says_why {
        return Err(format!(
            "a `{}` block with a command: make it a `console` block the tests run, or say why not in its info string: `{} {NOT_RUN} REASON`",
            b.info, words[0]
        ));
    }
    Ok(())
}

#[test]
fn every_example_runs_and_its_output_matches() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut cache: HashMap<String, Outcome> = HashMap::new();
    let (mut ran, mut not_run) = (0, 0);
    for file in doc_files(root) {
        for b in blocks(&file) {
            let rel = b
                .file
                .strip_prefix(root)
                .unwrap_or(&b.file)
                .display()
                .to_string();
            let at = format!("{rel}:{}", b.line);
            let words: Vec<&str> = b.info.split_whitespace().collect();
            let result = match words.first().copied() {
                Some("console") => examples(&b.text).and_then(|exs| {
                    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                    for name in ["pipelines", "docs"] {
                        std::os::unix::fs::symlink(root.join(name), dir.path().join(name))
                            .map_err(|e| e.to_string())?;
                    }
                    exs.iter().try_for_each(|ex| {
                        let out = match cache.get(&ex.command) {
                            Some(o) => o.clone(),
                            None => {
                                eprintln!("doc example {at}: $ {}", ex.command);
                                let o = run(&ex.command, dir.path())?;
                                cache.insert(ex.command.clone(), o.clone());
                                o
                            }
                        };
                        ran += 1;
                        check(ex, &words[1..], &out).map_err(|e| format!("$ {}\n{e}", ex.command))
                    })
                }),
                Some("sh" | "bash" | "shell") => {
                    not_run += 1;
                    check_not_run(&b)
                }
                None if b.text.lines().any(|l| l.trim_start().starts_with("linerate ")) => {
                    Err("a block without a language holds a linerate command: mark it `console` or `sh`".into())
                }
                _ => Ok(()),
            };
            if let Err(e) = result {
                failures.push(format!("{at}: {e}"));
            }
        }
    }
    eprintln!(
        "doc examples: {ran} commands checked, {not_run} shell blocks not run (each says why)"
    );
    assert!(ran > 0, "no console example found");
    assert!(
        failures.is_empty(),
        "{} doc example(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Relative links in `file` whose target does not exist.
fn broken_links(file: &Path) -> Vec<String> {
    let src = std::fs::read_to_string(file).unwrap_or_default();
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut broken = Vec::new();
    for event in Parser::new(&src) {
        let dest = match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => dest_url,
            _ => continue,
        };
        let path = dest.split('#').next().unwrap_or("");
        if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
            continue;
        }
        if !dir.join(path).exists() {
            broken.push(format!(
                "{}: a link to `{dest}`, which does not exist",
                file.display()
            ));
        }
    }
    broken
}

#[test]
fn every_relative_link_points_at_a_file_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let broken: Vec<String> = doc_files(root)
        .iter()
        .flat_map(|f| broken_links(f))
        .collect();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_matchers_match_what_they_should_and_nothing_else() {
    let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(line_matches("a [..] c", "a b b c"));
    assert!(!line_matches("a [..] c", "a b b d"));
    assert!(lines_match(
        &v(&["x", "...", "z"]),
        &v(&["x", "y", "y", "z"])
    ));
    assert!(!lines_match(&v(&["x", "...", "z"]), &v(&["x", "y"])));
    assert_eq!(
        shape("rx  1.42 Mpps  13.3%  lost=9800 overflow=3\n  gen: late=5\n"),
        v(&["rx # pps #%"])
    );
    assert_eq!(shape("cores [0, 1, 2]"), shape("cores [0]"));
    assert_ne!(shape("stopped by finished"), shape("stopped by duration"));
    assert!(
        reconcile_text("port kind rx tx dropped detail\ndut mem 7 10 3 lost=1 overflow=2\n")
            .is_ok()
    );
    assert!(reconcile_text("port kind rx tx dropped detail\ndut mem 7 10 3 lost=1\n").is_err());
    let j = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
    assert!(reconcile_json(&j(r#"{"offered": 10, "received": 7, "lost": 3}"#)).is_ok());
    assert!(reconcile_json(&j(r#"[{"offered": 10, "received": 7, "lost": 2}]"#)).is_err());
    assert!(keys_present(
        &j(r#"{"a": {"b": 1}}"#),
        &j(r#"{"a": {"b": 2, "c": 3}}"#),
        ""
    )
    .is_ok());
    assert!(keys_present(&j(r#"{"a": {"b": 1}}"#), &j(r#"{"a": {"c": 3}}"#), "").is_err());
}

/// A reference page equals what `linerate ARGS` prints now; else the message
/// says what changed (`source`) and how to regenerate the page.
fn assert_generated(page: &str, args: &[&str], source: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join(page)).unwrap_or_default();
    let out = Command::new(env!("CARGO_BIN_EXE_linerate"))
        .args(args)
        .output()
        .unwrap();
    let command = args.join(" ");
    assert!(
        out.status.success(),
        "linerate {command} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    if text != generated {
        let first = text
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b);
        panic!(
            "{page} differs from `linerate {command}` (first at line {}): {source} changed. \
             Regenerate the page:\n    cargo run -- {command} > {page}",
            first.map_or_else(|| "the end".to_string(), |i| (i + 1).to_string())
        );
    }
}

#[test]
fn the_key_reference_page_is_the_registry() {
    assert_generated(
        "docs/src/reference/keys.md",
        &["keys", "--markdown"],
        "the registry",
    );
}

#[test]
fn the_command_reference_page_is_the_command_line() {
    assert_generated(
        "docs/src/reference/commands.md",
        &["man", "--markdown"],
        "the command line",
    );
}

#[test]
fn a_shell_block_with_a_command_says_why_it_is_not_run() {
    let block = |info: &str, text: &str| Block {
        file: PathBuf::from("x.md"),
        line: 1,
        info: info.into(),
        text: text.into(),
    };
    assert!(check_not_run(&block("sh", "linerate run p.toml\n")).is_err());
    assert!(check_not_run(&block("sh norun", "linerate run p.toml\n")).is_err());
    assert!(check_not_run(&block("sh norun needs root", "sudo linerate run p.toml\n")).is_ok());
    assert!(check_not_run(&block("sh", "# a comment only\n")).is_ok());
}
