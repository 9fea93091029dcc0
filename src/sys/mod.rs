//! System bindings: DPDK (feature `dpdk`) and rdma-core ibverbs (feature
//! `ibverbs`), generated in `build.rs`, with thin safe-ish wrappers; and
//! `flock`, which `linerate doctor` needs in every build. With ports and
//! buffers, this is where linerate's `unsafe` lives; each block says why it
//! holds in a `// SAFETY:` comment.

pub mod ffi;
pub mod flock;

#[cfg(feature = "dpdk")]
pub mod dpdk;

#[cfg(feature = "ibverbs")]
pub mod ibverbs;
