//! One poll-loop pass of an endpoint over a datagram port: the whole glue a
//! pipeline stage needs, independent of the port (mem wire, UDP, DPDK).
//!
//! ```text
//! loop {                                   // the stage's poll()
//!     let now = clock.now();
//!     let rx = port.rx_burst(&mut bufs);   // byte datagrams in
//!     pump(&mut ep, now, rx.iter().map(|p| p.data()), &mut scratch, &mut tx_burst, |e| sink(e));
//!     tx_burst.flush();                    // byte datagrams out
//! }
//! ```

use super::endpoint::{Endpoint, Event};
use crate::time::Instant;

/// Where datagrams go: a port's TX burst, a simulated link, a test vector.
pub trait DatagramTx {
    /// Another datagram can be taken now.
    fn has_room(&mut self) -> bool;
    /// Takes one datagram (only called after `has_room` returned `true`).
    fn send(&mut self, bytes: &[u8]);
}

impl DatagramTx for Vec<Vec<u8>> {
    fn has_room(&mut self) -> bool {
        true
    }
    fn send(&mut self, bytes: &[u8]) {
        self.push(bytes.to_vec());
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Datagrams fed to the endpoint.
    pub received: usize,
    /// Datagrams sent.
    pub sent: usize,
    /// The TX side ran out of room while the endpoint still had something to send.
    pub blocked: bool,
}

/// Runs one pass in the documented order: every received datagram into
/// [`Endpoint::on_packet`], [`Endpoint::handle_timeout`], [`Endpoint::poll_transmit`]
/// while `tx` has room, then every event to `events`. `scratch` must hold the
/// larger MTU. Afterwards, [`Endpoint::poll_timeout`] says when to come back
/// (the stage may simply come back on its next poll).
pub fn pump<'a>(
    ep: &mut Endpoint,
    now: Instant,
    rx: impl IntoIterator<Item = &'a [u8]>,
    scratch: &mut [u8],
    tx: &mut impl DatagramTx,
    mut events: impl FnMut(Event),
) -> Pass {
    let mut pass = Pass::default();
    for p in rx {
        ep.on_packet(p, now);
        pass.received += 1;
    }
    ep.handle_timeout(now);
    loop {
        if !tx.has_room() {
            pass.blocked = true;
            break;
        }
        match ep.poll_transmit(now, scratch) {
            Some(n) => {
                tx.send(&scratch[..n]);
                pass.sent += 1;
            }
            None => break,
        }
    }
    while let Some(e) = ep.poll_event() {
        events(e);
    }
    pass
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::reliable::{Channel, Config};

    #[test]
    fn two_endpoints_over_vectors() {
        let mut a = Endpoint::new(Config::default());
        let mut b = Endpoint::new(Config::default());
        a.send(Channel::Data, &[7u8; 5000]).unwrap();
        let mut scratch = vec![0u8; 2048];
        let mut ab: Vec<Vec<u8>> = Vec::new();
        let mut ba: Vec<Vec<u8>> = Vec::new();
        let mut got = Vec::new();
        let mut t = Instant::ZERO;
        for _ in 0..10 {
            let inbound = core::mem::take(&mut ba);
            pump(
                &mut a,
                t,
                inbound.iter().map(|v| &v[..]),
                &mut scratch,
                &mut ab,
                |_| {},
            );
            let inbound = core::mem::take(&mut ab);
            pump(
                &mut b,
                t,
                inbound.iter().map(|v| &v[..]),
                &mut scratch,
                &mut ba,
                |e| got.push(e),
            );
            t += core::time::Duration::from_micros(100);
        }
        assert_eq!(
            got,
            vec![Event::Message {
                channel: Channel::Data,
                data: vec![7u8; 5000]
            }]
        );
        assert_eq!(a.unacked(Channel::Data), 0);
    }
}
