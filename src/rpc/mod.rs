//! copyrpc-style ring RPC with credit flow control.
//!
//! Two endpoints each own a send ring that mirrors the peer's receive ring.
//! `call()` and `reply()` append 32-byte-aligned messages to the local send ring;
//! `poll()` sends each run of batches with one write-with-immediate (the
//! immediate is the batch length / 32) and takes the peer's batches in, in order.
//! Every batch starts with flow metadata that piggy-backs the consumer position
//! and a credit grant, so there are no separate acknowledgements. Credits keep
//! `in_flight + 2R <= C`, which is why `reply()` never finds the ring full.
//!
//! * [`wire`]: message header, flow metadata, batches (zero-copy views).
//! * [`ring`]: send ring with batching and wrap markers; receive cursor.
//! * [`flow`]: the credit accounting and the checks of the peer's claims.
//! * [`endpoint`]: the sans-IO endpoint (call, reply, poll).
//! * [`transport`]: "write with immediate" over shared memory or in process.
//! * [`crate::cli::rpc`]: `linerate rpc serve` / `linerate rpc bench`.
//!
//! The design follows the copyrpc memo (`seeds/002`); see its notes on in-order
//! intake and out-of-order replies.

pub mod bench;
pub mod endpoint;
pub mod flow;
pub mod ring;
pub mod transport;
pub mod wire;

pub use endpoint::{
    CallError, CallErrorKind, Config, Endpoint, Handler, PeerInfo, ReplyError, Request, RpcError,
    Stats,
};
pub use transport::{Transport, TransportError};
