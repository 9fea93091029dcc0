//! linerate: a kernel-bypass packet pipeline.
//!
//! Poll-mode lcore stages, declared in plain pipeline files, move packets between
//! ports (DPDK, ibverbs raw queues, kernel UDP, pcap, an in-memory wire). Protocol
//! cores (traffic, latency, search, spead, reliable, rpc) are sans-IO state
//! machines: time and bytes are passed in, packets and actions come out.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod cli;
pub mod spead;
pub mod time;
pub mod units;
