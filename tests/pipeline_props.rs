//! Property tests of the pipeline parser: arbitrary text and arbitrary edits of
//! a valid file give a plan or diagnostics with positions inside the file,
//! never a panic.

use std::path::Path;

use linerate::pipeline::{load_str, LoadError};
use linerate::units::{parse_core_list, Rate};
use proptest::prelude::*;

const VALID: &str = r#"[pipeline]
lcores = "0"
pin = false

[port.wire]
kind = "mem"
capacity = "1 Mpps"
loss = 0.01

[ring.r]
size = 64

[stage.src]
kind = "source"
tx = "wire"
rate = "10 kpps"

[stage.fwd]
kind = "forward"
rx = "wire"
tx = "r"

[stage.sink]
kind = "sink"
rx = "r"
"#;

fn check(text: &str) {
    match load_str(Path::new("p.toml"), text) {
        Ok(_) => {}
        Err(LoadError::Invalid(d)) => {
            let lines = text.lines().count().max(1);
            for diag in &d.0 {
                assert!(
                    diag.line >= 1 && diag.line <= lines + 1,
                    "{diag} (file has {lines} lines)"
                );
                assert!(!diag.message.is_empty());
            }
            assert!(!d.0.is_empty());
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[test]
fn the_valid_file_is_valid() {
    load_str(Path::new("p.toml"), VALID).unwrap();
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,400}") {
        check(&text);
    }

    #[test]
    fn edits_of_a_valid_file_never_panic(
        at in 0usize..VALID.len(),
        cut in 0usize..40,
        insert in "[a-z0-9=\"\\[\\]. \n_-]{0,20}",
    ) {
        let at = (0..=at).rev().find(|&i| VALID.is_char_boundary(i)).unwrap_or(0);
        let end = (at + cut).min(VALID.len());
        let mut text = VALID[..at].to_string();
        text.push_str(&insert);
        text.push_str(&VALID[end..]);
        check(&text);
    }

    #[test]
    fn pps_rates_round_trip(value in 1u64..1_000_000_000) {
        let r: Rate = format!("{value} pps").parse().unwrap();
        prop_assert_eq!(r, Rate::Pps(value as f64));
        let k: Rate = format!("{value} kpps").parse().unwrap();
        prop_assert_eq!(k.to_pps(64.0, None).unwrap(), value as f64 * 1e3);
    }

    #[test]
    fn core_lists_are_sorted_and_distinct(parts in proptest::collection::vec((0usize..64, 0usize..4), 1..6)) {
        let text: Vec<String> = parts.iter().map(|(a, w)| if *w == 0 { a.to_string() } else { format!("{a}-{}", a + w) }).collect();
        let list = parse_core_list(&text.join(",")).unwrap();
        prop_assert!(list.windows(2).all(|w| w[0] < w[1]));
        for (a, w) in parts {
            for c in a..=a + w {
                prop_assert!(list.contains(&c));
            }
        }
    }
}
