//! Writing what a command reports to a file: the directory is created if it
//! is missing (a fresh checkout has no `results/`), and `-` is stdout.

use std::io;
use std::path::Path;

/// Writes `text` to `path` ("-" for stdout), creating the parent directory.
pub fn write_text(path: &Path, text: &str) -> io::Result<()> {
    if path.as_os_str() == "-" {
        println!("{}", text.trim_end_matches('\n'));
        return Ok(());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}
