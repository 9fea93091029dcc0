//! Fuzzes the decoding of a trial part sent by another rank (`hosts::wire`):
//! no input may panic, in decoding or in adding decoded parts up; a decoded
//! part encodes and decodes to the same totals.
#![no_main]

use std::collections::BTreeSet;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use linerate::hosts::wire::{decode, encode};
use linerate::trial::assemble;

fuzz_target!(|data: &[u8]| {
    let Ok(part) = decode(data) else {
        return;
    };
    let none = BTreeSet::new();
    let d = Duration::from_secs(1);
    let a = assemble(1, 1e6, d, std::slice::from_ref(&part), &none);
    let again = decode(&encode(&part)).expect("an encoded part decodes");
    let b = assemble(1, 1e6, d, &[again], &none);
    assert_eq!((a.offered, a.sent, a.received), (b.offered, b.sent, b.received));
    let _ = assemble(1, 1e6, d, &[part.clone(), part], &none);
});
