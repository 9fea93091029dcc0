//! Writing what a command reports to a file: the directory is created if it
//! is missing (a fresh checkout has no `results/`), and `-` is stdout. Also
//! the one font every plot draws with.

use std::io;
use std::path::Path;

/// Writes `text` to `path` ("-" for stdout), creating the parent directory.
///
/// A regular file is replaced whole (written beside it, then renamed), so a
/// reader, or a process killed mid-write (mpirun SIGKILLs its ranks a second
/// after passing on a SIGTERM), sees the old report or the new one, never
/// half of one. Anything else (a pipe, `/dev/stdout`) is written in place.
pub fn write_text(path: &Path, text: &str) -> io::Result<()> {
    if path.as_os_str() == "-" {
        println!("{}", text.trim_end_matches('\n'));
        return Ok(());
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir {
        std::fs::create_dir_all(dir)?;
    }
    let special = std::fs::metadata(path).is_ok_and(|m| !m.is_file());
    let Some(name) = path.file_name().filter(|_| !special) else {
        return std::fs::write(path, text);
    };
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.map_or_else(|| Path::new(&tmp_name).to_path_buf(), |d| d.join(&tmp_name));
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

static FONT: &[u8] = include_bytes!("search/fonts/DejaVuSansMono.ttf");

/// Registers the bundled DejaVu Sans Mono as `sans-serif` for `plotters`
/// (once per process), so plots need no system font library.
pub fn register_plot_font() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        for style in [
            plotters::style::FontStyle::Normal,
            plotters::style::FontStyle::Bold,
        ] {
            // The bundled font is valid; a failure would only lose text, not the plot.
            let _ = plotters::style::register_font("sans-serif", style, FONT);
        }
    });
}

#[cfg(test)]
mod test {
    #[test]
    fn a_report_replaces_the_file_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/r.json");
        super::write_text(&path, "first, longer text\n").unwrap();
        super::write_text(&path, "second\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["r.json"]);
        // A device is written in place, not replaced.
        super::write_text(std::path::Path::new("/dev/null"), "x").unwrap();
        assert!(!std::fs::metadata("/dev/null").unwrap().is_file());
    }
}
