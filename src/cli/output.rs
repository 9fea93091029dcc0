//! Writing what a command reports where the user asked for it.
//!
//! A path that cannot be written (a missing permission, a file where a
//! directory should be, a full disk) is the user's argument or environment,
//! as a pipeline file that cannot be read is: exit status 2, `cannot write
//! PATH: reason`. Only a report that cannot be encoded is a failure of ours
//! (exit status 1).

use std::path::Path;

use super::Failure;

/// Writes `value` as pretty-printed JSON, ending in a newline, to `path`
/// ("-" is stdout). A regular file is replaced whole.
pub(crate) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Runtime(format!("cannot encode the report: {e}")))?;
    write_file(path, &(text + "\n"))
}

/// [`write_json`] when a path was given (`--json PATH`), else nothing.
pub(crate) fn write_json_if<T: serde::Serialize>(
    path: Option<&Path>,
    value: &T,
) -> Result<(), Failure> {
    path.map_or(Ok(()), |p| write_json(p, value))
}

/// Writes `text` to `path` ("-" is stdout), creating its directory.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    crate::report::write_text(path, text)
        .map_err(|e| Failure::Input(format!("cannot write {}: {e}", path.display())))
}

/// Creates the directory `path` is to be written into, if it names one.
pub(crate) fn create_parent(path: &Path) -> Result<(), Failure> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Input(format!("cannot create {}: {e}", dir.display()))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn an_unwritable_path_is_input_and_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        // A path under a regular file cannot be created.
        let bad = file.join("r.json");
        let e = write_json(&bad, &serde_json::json!({"a": 1})).unwrap_err();
        assert_eq!(e.exit_status(), 2);
        assert!(
            matches!(&e, Failure::Input(m) if m.starts_with(&format!("cannot write {}: ", bad.display()))),
            "{e:?}"
        );
        let e = create_parent(&bad.join("p.svg")).unwrap_err();
        assert_eq!(e.exit_status(), 2);
        let good = dir.path().join("sub/r.json");
        write_json(&good, &serde_json::json!({"a": 1})).unwrap();
        assert_eq!(
            std::fs::read_to_string(&good).unwrap(),
            "{\n  \"a\": 1\n}\n"
        );
    }
}
