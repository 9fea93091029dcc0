//! SPEAD ingest: the codec, a sender, an F-engine simulator, heap reassembly and
//! chunk placement, as spead2 and MeerKAT's katgpucbf do it.
//!
//! Every core here is sans-IO: bytes and the current [`Instant`](crate::time::Instant)
//! go in, packets, heaps, chunks and counters come out. The only sockets live in
//! [`crate::cli::spead`].
//!
//! - [`wire`]: SPEAD version 4 packets (every SPEAD-64-XX flavour), zero-copy views,
//!   owned representations, item descriptors.
//! - [`send`]: heaps cut into packets; end-of-stream heaps; pacing at a rate.
//! - [`fsim`]: an F-engine simulator in katgpucbf's format with a deterministic payload.
//! - [`assemble`]: heap reassembly (reordering, duplicates, loss, several senders).
//! - [`chunk`]: heaps placed straight into large chunks with a `present` map, a
//!   window of chunks and a ring of free chunks.
//! - [`group`]: receive groups (spead2's `ChunkStreamGroup`): members on several lcores
//!   fill the same chunks, with lossy or lossless eviction.
//! - [`check`]: what a consumer does with a chunk: discard, verify, write to files.
//! - [`live`]: the counters the receive stages publish while running (`--metrics`).
//! - [`plot`]: a receive's rate and fraction present over time.
//! - [`stage`]: the `spead_send`, `spead_recv` and `chunk_sink` pipeline stages
//!   binding these cores to ports, rings and chunk links.
#![forbid(unsafe_code)]

pub mod assemble;
pub mod check;
pub mod chunk;
pub mod fsim;
pub mod group;
pub mod live;
pub mod plot;
pub mod send;
pub mod stage;
pub mod wire;
