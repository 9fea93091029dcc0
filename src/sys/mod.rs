//! Kernel-bypass system bindings: DPDK (feature `dpdk`) and rdma-core
//! ibverbs (feature `ibverbs`), generated in `build.rs`, with thin safe-ish
//! wrappers. This is the only place in linerate with `unsafe`; each block says
//! why it holds in a `// SAFETY:` comment. The default build compiles it out.

pub mod ffi;

#[cfg(feature = "dpdk")]
pub mod dpdk;

#[cfg(feature = "ibverbs")]
pub mod ibverbs;
