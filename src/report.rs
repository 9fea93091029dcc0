//! Writing what a command reports to a file: the directory is created if it
//! is missing (a fresh checkout has no `results/`), and `-` is stdout. Also
//! the one font every plot draws with.

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
