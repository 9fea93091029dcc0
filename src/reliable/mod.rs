//! usnic-style sequenced reliable channels over any unreliable port.
//!
//! A sans-IO [`Endpoint`] turns messages and PUTs into sequenced segments on
//! two channels (priority and data), retransmits what the peer does not
//! acknowledge, and delivers what it receives exactly once, in order per
//! channel by default. See [`endpoint`] for the calling order, [`wire`] for the
//! segment format, and [`Config::usnic`] for Open MPI's usnic defaults.
#![forbid(unsafe_code)]

pub mod compare;
pub mod driver;
pub mod endpoint;
pub mod pattern;
pub mod reassembly;
pub mod rtt;
pub mod seq;
pub mod sim;
pub mod stage;
pub mod timer_wheel;
pub mod wire;

pub use endpoint::{Config, DeadReason, Endpoint, Event, SendError, Stats};
pub use reassembly::RegionId;
pub use wire::Channel;
