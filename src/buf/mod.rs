//! Packet buffers: pools carved from one memory region, the packet handle that
//! stages pass around, bursts, and the single-producer/single-consumer ring that
//! links stages, and the single-writer counters that ports and stages keep.
//!
//! Ownership is the whole design: a [`Packet`] has exactly one owner, and dropping
//! it returns its buffer to its pool. Lcores keep a [`PoolCache`] so that
//! allocation and bulk frees touch shared state once per burst, not per packet
//! (the DPDK mempool-cache idea). The unsafe code of the crate's buffer handling
//! lives in this module (`pool.rs`, `ring.rs`, `copy.rs`, `shared_chunk.rs`), each block with its `SAFETY` note.

mod burst;
#[allow(unsafe_code)]
pub mod copy;
pub mod counter;
#[allow(unsafe_code)]
mod pool;
#[allow(unsafe_code)]
mod region;
#[allow(unsafe_code)]
mod ring;
#[allow(unsafe_code)]
pub mod shared_chunk;

pub use burst::{Burst, BURST_MAX};
pub use pool::{BufError, Packet, Pool, PoolCache, PoolConfig, PoolError, PoolStats};
pub use region::HugepageMode;
pub use ring::{ring, Consumer, Producer, RingStats, RingStatsHandle};
