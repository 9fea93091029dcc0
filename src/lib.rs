//! linerate: a kernel-bypass packet pipeline.
//!
//! Poll-mode lcore stages, declared in plain pipeline files, move packets between
//! ports (DPDK, ibverbs raw queues, kernel UDP, pcap, an in-memory wire). Protocol
//! cores (traffic, latency, search, spead, reliable, rpc) are sans-IO state
//! machines: time and bytes are passed in, packets and actions come out.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
// `unsafe` only where memory or FFI needs it, each block with a SAFETY note,
// allowed module by module: buf::{pool, ring, copy, region, shared}, port::{udp, dpdk}
// (socket options and device calls), sys (the DPDK and ibverbs bindings),
// time (clock_gettime) and rpc::transport::shm (the shared-memory region).
#![deny(unsafe_code)]

pub mod buf;
pub mod cli;
pub mod doctor;
pub mod hosts;
pub mod latency;
pub mod metrics;
pub mod neigh;
pub mod net;
pub mod pace;
pub mod pipeline;
pub mod plot;
pub mod port;
pub mod reliable;
pub mod report;
pub mod rng;
pub mod rpc;
pub mod runtime;
pub mod search;
pub mod spead;
pub mod suite;
#[allow(unsafe_code)]
pub mod sys;
#[allow(unsafe_code)]
pub mod time;
pub mod traffic;
pub mod trial;
pub mod units;
