//! copyrpc-style ring RPC as a library: a client and a server endpoint over the
//! in-process link (`rpc::transport::mem`), one thread driving both. The same
//! endpoints run over shared memory between processes (`transport::shm`, as
//! `linerate rpc serve` / `bench` do), over the reliable channel's PUT, or over
//! ibverbs RC; only the transport changes.
//!
//! Run it with `cargo run --example rpc_ring`. The manual's *RPC* chapter
//! includes this file.

use linerate::rpc::transport::mem::MemLink;
use linerate::rpc::{Config, Endpoint, Handler, Request};

/// The server answers every request at once, during the `poll` that takes it
/// in: the response is the request's bytes reversed.
struct Server {
    answer: Vec<u8>,
}

impl Handler<()> for Server {
    fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
        self.answer.clear();
        self.answer.extend(payload.iter().rev());
        Some(&self.answer)
    }
    fn on_request(&mut self, _req: Request, _payload: &[u8]) {
        unreachable!("every request is answered in `answer`")
    }
    fn on_response(&mut self, _call_id: u32, _user: (), _payload: &[u8]) {}
}

/// The client remembers each call's number (its `user` value) and checks the answer.
struct Client {
    answered: u32,
}

impl Handler<u32> for Client {
    fn on_request(&mut self, _req: Request, _payload: &[u8]) {}
    fn on_response(&mut self, _call_id: u32, n: u32, payload: &[u8]) {
        let want: Vec<u8> = format!("call {n}").bytes().rev().collect();
        assert_eq!(payload, want.as_slice(), "the answer to call {n}");
        self.answered += 1;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ring = 64 * 1024;
    let config = Config::new(ring);
    // Each side publishes its info record out of band (the shm transport has
    // publish_info/peer_info for it); both sides use the same config here.
    let mut client: Endpoint<u32> = Endpoint::new(config, config.local_info())?;
    let mut server: Endpoint<()> = Endpoint::new(config, config.local_info())?;
    let mut link = MemLink::new(ring as usize);
    let (mut c, mut s) = (Client { answered: 0 }, Server { answer: Vec::new() });

    let calls = 1000;
    let mut next = 0;
    for _round in 0..100_000 {
        // Keep up to 32 calls in flight; a full ring or no credit is retried after a poll.
        while next < calls && next - c.answered < 32 {
            match client.call(format!("call {next}").as_bytes(), 64, next) {
                Ok(_call_id) => next += 1,
                Err(_retry_after_poll) => break,
            }
        }
        client.poll(&mut link.side(0), &mut c)?; // sends the calls, takes responses in
        server.poll(&mut link.side(1), &mut s)?; // takes calls in, answers, sends
        if c.answered == calls {
            println!("{calls} calls answered; client stats: {:?}", client.stats());
            return Ok(());
        }
    }
    Err(format!("only {} of {calls} calls answered", c.answered).into())
}
