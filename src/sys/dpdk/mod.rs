//! Safe-ish wrappers over DPDK (feature `dpdk`): [`eal`] (once-per-process
//! init, thread registration), [`mempool`] (pktmbuf pools), [`mbuf`] (the
//! owned [`mbuf::Mbuf`] handle and allocation-free [`mbuf::Burst`]),
//! and [`ethdev`] (ports, queues, link, stats, rx/tx bursts).

pub mod eal;
pub mod error;
pub mod ethdev;
pub mod mbuf;
pub mod mempool;

pub use eal::{init, Eal};
pub use error::DpdkError;
pub use ethdev::{EthPort, Link, PortConfig, RxQueue, Stats, TxQueue};
pub use mbuf::{Burst, Mbuf, MAX_BURST};
pub use mempool::{PktmbufPool, PoolConfig};
