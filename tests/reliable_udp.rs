//! Two reliable endpoints over real UDP sockets on loopback, on the real
//! clock, in one thread: the sans-IO core and `driver::pump` on a real port.
//! Loopback rarely drops, so this checks the plumbing (datagram boundaries,
//! real time, nonblocking I/O), not recovery; recovery is tests/reliable.rs.

use linerate::reliable::driver::{pump, DatagramTx};
use linerate::reliable::pattern::{fill, Sink};
use linerate::reliable::{Channel, Config, Endpoint, Event};
use linerate::time::Clock;
use std::net::UdpSocket;

struct UdpTx<'a>(&'a UdpSocket);

impl DatagramTx for UdpTx<'_> {
    fn has_room(&mut self) -> bool {
        true
    }
    fn send(&mut self, bytes: &[u8]) {
        // A full socket buffer is a loss like any other; the protocol recovers.
        let _ = self.0.send(bytes);
    }
}

fn recv_burst(s: &UdpSocket, bufs: &mut [Vec<u8>], lens: &mut Vec<usize>) {
    lens.clear();
    for b in bufs.iter_mut() {
        match s.recv(b) {
            Ok(n) => lens.push(n),
            Err(_) => break,
        }
    }
}

#[test]
fn messages_over_udp_loopback() {
    let sa = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sb = UdpSocket::bind("127.0.0.1:0").unwrap();
    sa.connect(sb.local_addr().unwrap()).unwrap();
    sb.connect(sa.local_addr().unwrap()).unwrap();
    sa.set_nonblocking(true).unwrap();
    sb.set_nonblocking(true).unwrap();
    let cfg = Config::default();
    let mut a = Endpoint::new(cfg.clone());
    let mut b = Endpoint::new(cfg);
    let n = 2000u64;
    let len = 8192;
    let mut msg = Vec::new();
    for i in 0..n {
        fill(i, len, &mut msg);
        a.send(Channel::Data, &msg).unwrap();
    }
    let mut sink = Sink::new(len);
    let clock = Clock::new();
    let mut scratch = vec![0u8; 2048];
    let mut bufs = vec![vec![0u8; 2048]; 32];
    let mut lens = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while sink.next() < n || a.unacked(Channel::Data) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "UDP transfer stuck: {:?} / {:?} / {:?}",
            sink.stats(),
            a.stats(),
            b.stats()
        );
        recv_burst(&sa, &mut bufs, &mut lens);
        let rx = bufs.iter().zip(&lens).map(|(b, &l)| &b[..l]);
        pump(
            &mut a,
            clock.now(),
            rx,
            &mut scratch,
            &mut UdpTx(&sa),
            |e| {
                assert!(!matches!(e, Event::PeerDead));
            },
        );
        recv_burst(&sb, &mut bufs, &mut lens);
        let rx = bufs.iter().zip(&lens).map(|(b, &l)| &b[..l]);
        let mut got = Vec::new();
        pump(
            &mut b,
            clock.now(),
            rx,
            &mut scratch,
            &mut UdpTx(&sb),
            |e| got.push(e),
        );
        for e in got {
            match e {
                Event::Message { data, .. } => {
                    sink.check(&data);
                    b.recycle(data);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let st = sink.stats();
    assert_eq!(st.ok, n, "{st:?}");
    assert_eq!(st.corrupt + st.out_of_order + st.duplicate, 0);
    assert_eq!(b.stats().bad_header, 0);
}
