//! Safe-ish wrappers over DPDK (feature `dpdk`): [`eal`] (once-per-process
//! init, thread registration), [`mempool`] (pktmbuf pools), [`mbuf`] (the
//! owned [`mbuf::Mbuf`] handle and allocation-free [`mbuf::Burst`]),
//! [`ethdev`] (ports, queues, link, stats, rx/tx bursts) and [`ring`]
//! (SP/SC rte_ring of mbufs for lcore-to-lcore hops).

pub mod eal;
pub mod error;
pub mod ethdev;
pub mod mbuf;
pub mod mempool;
pub mod ring;

pub use eal::{init, Eal};
pub use error::DpdkError;
pub use ethdev::{EthPort, Link, PortConfig, RxQueue, Stats, TxQueue};
pub use mbuf::{Burst, Mbuf, MAX_BURST};
pub use mempool::{PktmbufPool, PoolConfig};
pub use ring::{mbuf_ring, RingConsumer, RingProducer};
