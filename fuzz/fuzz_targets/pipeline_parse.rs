//! Any text given as a pipeline file yields a plan or diagnostics, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = linerate::pipeline::load_str(std::path::Path::new("fuzz.toml"), text);
    }
});
