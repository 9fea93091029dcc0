//! The RPC over ibverbs RC without hardware: opening the transport with no
//! RDMA device fails with an error naming what is missing. Where a device
//! exists, two transports on it are connected to each other (loopback) and
//! run calls; that part has not run on the machine this was written on (no
//! RDMA device, no rxe module).
#![cfg(feature = "ibverbs")]

use linerate::rpc::transport::verbs::{VerbsConfig, VerbsInfo, VerbsTransport};
use linerate::rpc::{Config, Endpoint, Handler, Request, TransportError};
use linerate::sys::ibverbs;

#[derive(Default)]
struct H {
    requests: Vec<Request>,
    responses: Vec<(u32, u32, Vec<u8>)>,
}

impl Handler<u32> for H {
    fn on_request(&mut self, req: Request, _payload: &[u8]) {
        self.requests.push(req);
    }
    fn on_response(&mut self, call_id: u32, user: u32, payload: &[u8]) {
        self.responses.push((call_id, user, payload.to_vec()));
    }
}

#[test]
fn verbs_transport_without_a_device_is_a_clear_error() {
    let names = ibverbs::device_names().expect("ibv_get_device_list");
    let config = Config::new(1 << 16);
    if names.is_empty() {
        let err = VerbsTransport::open(&VerbsConfig::default(), config.local_info()).unwrap_err();
        let TransportError::Failed(text) = &err else {
            panic!("{err:?}");
        };
        assert!(text.starts_with("rpc over ibverbs RC: "), "{text}");
        assert!(text.contains("no RDMA device found"), "{text}");
        assert!(text.contains("/sys/class/infiniband"), "{text}");
        assert!(text.contains("shm transport"), "{text}");
        println!("exercised: no RDMA device present; VerbsTransport::open -> {text}");
        return;
    }
    // Loopback on the first device: two queue pairs connected to each other.
    let cfg = VerbsConfig::default();
    let mut a = VerbsTransport::open(&cfg, config.local_info()).unwrap();
    let mut b = VerbsTransport::open(&cfg, config.local_info()).unwrap();
    // The records go through their byte encoding, as out of band.
    let ia = VerbsInfo::decode(&a.info().encode()).unwrap();
    let ib = VerbsInfo::decode(&b.info().encode()).unwrap();
    a.connect(ib).unwrap();
    b.connect(ia).unwrap();
    let mut ea: Endpoint<u32> = Endpoint::new(config, ib.rpc).unwrap();
    let mut eb: Endpoint<u32> = Endpoint::new(config, ia.rpc).unwrap();
    let (mut ha, mut hb) = (H::default(), H::default());
    for i in 0..1000u32 {
        ea.call(&i.to_le_bytes(), 8, i).unwrap();
        ea.poll(&mut a, &mut ha).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while ha.responses.len() <= i as usize {
            assert!(std::time::Instant::now() < deadline, "no response to {i}");
            eb.poll(&mut b, &mut hb).unwrap();
            for r in hb.requests.drain(..) {
                eb.reply(&r, &[i as u8; 8]).unwrap();
            }
            eb.poll(&mut b, &mut hb).unwrap();
            ea.poll(&mut a, &mut ha).unwrap();
        }
        assert_eq!(ha.responses[i as usize].1, i);
        assert_eq!(ha.responses[i as usize].2, vec![i as u8; 8]);
    }
    println!("exercised: RPC loopback over RC on {}", names[0]);
}
