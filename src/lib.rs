//! linerate: a kernel-bypass packet pipeline.
//!
//! Poll-mode lcore stages, declared in plain pipeline files, move packets between
//! ports (DPDK, ibverbs raw queues, kernel UDP, pcap, an in-memory wire). Protocol
//! cores (traffic, latency, search, spead, reliable, rpc) are sans-IO state
//! machines: time and bytes are passed in, packets and actions come out.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod buf;
pub mod cli;
pub mod doctor;
pub mod latency;
pub mod neigh;
pub mod pipeline;
pub mod port;
pub mod reliable;
pub mod report;
pub mod rng;
pub mod rpc;
pub mod runtime;
pub mod search;
pub mod spead;
#[cfg(any(feature = "dpdk", feature = "ibverbs"))]
pub mod sys;
pub mod time;
pub mod traffic;
pub mod units;
