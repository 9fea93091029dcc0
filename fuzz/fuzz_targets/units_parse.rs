//! Rates, durations, sizes and core lists parse or fail cleanly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::units::{parse_core_list, parse_duration, parse_size, Rate};

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(r) = s.parse::<Rate>() {
            let _ = r.to_pps(64.0, Some(10e9));
        }
        let _ = parse_duration(s);
        let _ = parse_size(s);
        let _ = parse_core_list(s);
    }
});
