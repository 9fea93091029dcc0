//! Fuzzes the SPEAD packet decoder, the owned representation, descriptor parsing,
//! heap reassembly and chunk placement: none may panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::spead::assemble::{AssembleConfig, Assembler};
use linerate::spead::chunk::{ChunkStream, KatgpucbfPlace};
use linerate::spead::wire::{decode, heap_items, Descriptor, Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let _ = decode(data);
    if let Ok(p) = Packet::new_checked(data) {
        if let Ok(r) = Repr::parse(&p) {
            let _ = heap_items(r.flavour, &r.items, p.payload());
        }
    }
    let _ = Descriptor::parse(data);
    let mut a = Assembler::new(AssembleConfig {
        max_heaps: 2,
        max_heap_size: 1 << 16,
    });
    let _ = a.push(0, data);
    a.flush();
    while let Some(h) = a.poll_heap() {
        let _ = h.items();
        let _ = h.descriptors();
    }
    let place = KatgpucbfPlace::new(2, 64, 2, 1024);
    let mut s = ChunkStream::new(place.chunk_config(2, 3), place);
    let _ = s.push_buffer(data);
    s.flush();
});
