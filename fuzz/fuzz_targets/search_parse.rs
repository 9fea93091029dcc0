//! Fuzzes the search's text parsers: `--sim` models, `--goal` specs and measurer JSON output.
//! None may panic; a parsed model or count must be consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::search::goal::parse_goal;
use linerate::search::measurer::parse_counts;
use linerate::search::SimModel;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(m) = text.parse::<SimModel>() {
        assert!(m.ndr > 0.0 && m.pdr >= m.ndr);
        let (offered, loss) = m.trial(0, m.ndr, 1.0);
        assert!(loss <= offered);
    }
    let _ = parse_goal(text, 0.005, 0);
    if let Ok(c) = parse_counts(text, text) {
        assert!(c.received <= c.offered);
    }
});
