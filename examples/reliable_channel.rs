//! The reliable channel as a library: two sans-IO endpoints joined by a link
//! that loses every 20th datagram, driven in virtual time. The sender's
//! messages all arrive, once and in order, and one PUT lands in the
//! receiver's registered region.
//!
//! Run it with `cargo run --example reliable_channel`. The manual's *Reliable
//! channels* chapter includes this file.

use std::collections::VecDeque;
use std::time::Duration;

use linerate::reliable::driver::{pump, DatagramTx};
use linerate::reliable::{Channel, Config, Endpoint, Event};
use linerate::time::Instant;

/// One direction of the link: datagrams in flight, and a loss every `drop_every`.
struct LossyLink {
    queue: VecDeque<Vec<u8>>,
    sent: u64,
    drop_every: u64,
}

impl DatagramTx for LossyLink {
    fn has_room(&mut self) -> bool {
        self.queue.len() < 1024
    }
    fn send(&mut self, bytes: &[u8]) {
        self.sent += 1;
        if self.sent % self.drop_every != 0 {
            self.queue.push_back(bytes.to_vec());
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut alice = Endpoint::new(Config::default()); // Config::usnic() for Open MPI's usnic
    let mut bob = Endpoint::new(Config::default());
    let region = bob.register_region(4096).ok_or("no region")?; // alice may PUT here

    let messages = 200;
    for i in 0..messages {
        alice.send(Channel::Data, format!("message {i}").as_bytes())?;
    }
    alice.put(region, 100, b"written straight into bob's memory")?;

    let mut a_to_b = LossyLink {
        queue: VecDeque::new(),
        sent: 0,
        drop_every: 20,
    };
    let mut b_to_a = LossyLink {
        queue: VecDeque::new(),
        sent: 0,
        drop_every: 20,
    };
    let mut scratch = vec![0u8; 9216]; // holds the larger MTU
    let (mut delivered, mut put_seen) = (Vec::new(), false);
    let mut now = Instant::ZERO;

    // One pass per 10 us of virtual time: what arrived goes in, what is due goes out.
    while delivered.len() < messages || !put_seen {
        let rx: Vec<Vec<u8>> = b_to_a.queue.drain(..).collect();
        pump(
            &mut alice,
            now,
            rx.iter().map(|d| d.as_slice()),
            &mut scratch,
            &mut a_to_b,
            |_| {},
        );
        let rx: Vec<Vec<u8>> = a_to_b.queue.drain(..).collect();
        pump(
            &mut bob,
            now,
            rx.iter().map(|d| d.as_slice()),
            &mut scratch,
            &mut b_to_a,
            |e| match e {
                Event::Message { data, .. } => {
                    delivered.push(String::from_utf8_lossy(&data).into_owned())
                }
                Event::PutReceived { .. } => put_seen = true,
                _ => {}
            },
        );
        now += Duration::from_micros(10);
        if now > Instant::from_millis(10_000) {
            return Err("the transfer did not finish in 10 s of virtual time".into());
        }
    }

    assert!(delivered
        .iter()
        .enumerate()
        .all(|(i, m)| *m == format!("message {i}")));
    let put = &bob.region(region).ok_or("region gone")?[100..134];
    assert_eq!(put, b"written straight into bob's memory");
    println!(
        "{} messages delivered in order after {} of virtual time; {} datagrams sent, {} retransmitted",
        delivered.len(),
        format_args!("{:.1} ms", now.as_secs_f64() * 1e3),
        alice.stats().tx_packets,
        alice.stats().retransmits,
    );
    Ok(())
}
