//! System bindings: DPDK (feature `dpdk`) and rdma-core ibverbs (feature
//! `ibverbs`), generated in `build.rs`, with thin safe-ish wrappers, and the
//! signal handler and kernel interface and AF_PACKET socket counters (always). This is the only
//! place in linerate with `unsafe` besides ports and buffers; each block says
//! why it holds in a `// SAFETY:` comment. The default build has only the
//! signal handler and those counters.

pub mod ffi;
pub mod netdev;
pub mod netns;
pub mod packet_socket;
pub mod signals;

#[cfg(feature = "dpdk")]
pub mod dpdk;

#[cfg(feature = "ibverbs")]
pub mod ibverbs;
