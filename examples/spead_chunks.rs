//! SPEAD ingest as a library: the F-engine simulator's packets, one of them
//! lost, placed into katgpucbf-layout chunks with a `present` map, and every
//! byte of every present heap checked against the simulator's payload. No
//! socket: the same cores run behind the `spead_recv` stage on any port.
//!
//! Run it with `cargo run --example spead_chunks`. The manual's *SPEAD ingest*
//! chapter includes this file.

use linerate::spead::check::Checker;
use linerate::spead::chunk::{ChunkStream, KatgpucbfPlace, Push};
use linerate::spead::fsim::{Fsim, FsimConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // MeerKAT's format: 4 antennas, SPEAD-64-48, 1 KiB of payload per packet.
    let cfg = FsimConfig::default();
    let packets_per_heap = cfg.packets_per_heap();
    // A chunk holds 2 timestamps of every antenna; a window of 2 live chunks, 8 in all.
    let place = KatgpucbfPlace::for_fsim(&cfg, 2);
    let mut stream = ChunkStream::new(place.chunk_config(2, 8), place.clone());

    // 8 timestamps x 4 antennas, back to back in one buffer, as a socket would give them.
    let (buf, ends) = Fsim::new(cfg)?.packets_buffer(8)?;
    let mut start = 0;
    for (i, &end) in ends.iter().enumerate() {
        if i != 5 * packets_per_heap {
            // From sender 0; the first packet of heap 5 is "lost".
            let push = stream.push(0, &buf[start..end]);
            assert_eq!(push, Push::Accepted, "packet {i}");
        }
        start = end;
    }
    stream.flush(); // the end of the stream: hand every chunk over

    let mut checker = Checker::new(place, 16);
    let mut wrong = 0;
    while let Some(chunk) = stream.poll_chunk() {
        wrong += checker.check(&chunk, |w| eprintln!("wrong byte: {w:?}"));
        println!(
            "chunk {}: {} of {} heaps present",
            chunk.chunk_id,
            chunk.present_count(),
            chunk.present.len()
        );
        stream.add_free_chunk(chunk); // back to the free ring, so memory stays bounded
    }
    let st = stream.stats();
    println!(
        "{} heaps complete, {} incomplete (the lost packet's), {} wrong bytes",
        st.heaps_complete,
        st.heaps_incomplete_flushed + st.heaps_incomplete_evicted,
        wrong
    );
    assert_eq!(st.heaps_complete, 31);
    assert_eq!(wrong, 0);
    Ok(())
}
