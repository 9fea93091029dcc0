//! Fuzzes the RPC batch parser and the endpoint's intake: arbitrary bytes as a
//! batch, arbitrary bytes plus immediates from a peer into a fresh endpoint, and
//! arbitrary bytes as the ibverbs transport's out-of-band info record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate::rpc::transport::mem::MemLink;
use linerate::rpc::transport::verbs::VerbsInfo;
use linerate::rpc::wire::Batch;
use linerate::rpc::{Config, Endpoint, Handler, Request};

struct Sink;

impl Handler<u8> for Sink {
    /// Answers requests with an odd first byte during intake (the fast path);
    /// the others go to `on_request`.
    fn answer(&mut self, _req: Request, payload: &[u8]) -> Option<&[u8]> {
        (payload.first().is_some_and(|b| b % 2 == 1)).then_some(&[0xab; 16][..])
    }
    fn on_request(&mut self, _req: Request, payload: &[u8]) {
        std::hint::black_box(payload);
    }
    fn on_response(&mut self, _call_id: u32, _user: u8, payload: &[u8]) {
        std::hint::black_box(payload);
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = VerbsInfo::decode(data) {
        assert_eq!(VerbsInfo::decode(&info.encode()), Ok(info));
    }
    if let Ok(batch) = Batch::new_checked(data) {
        assert!(batch.len() <= data.len());
        for m in batch.messages() {
            std::hint::black_box(m.payload());
        }
    }
    // As a peer's write: the first byte picks the immediate, the rest is ring data.
    let Some((&imm, bytes)) = data.split_first() else {
        return;
    };
    let ring = 1024u64;
    let c = Config::new(ring);
    let mut ep: Endpoint<u8> = Endpoint::new(c, c.local_info()).unwrap();
    let _ = ep.call(b"fuzz", 8, 1);
    let mut link = MemLink::new(ring as usize);
    let _ = ep.poll(&mut link.side(0), &mut Sink);
    let bytes = &bytes[..bytes.len().min(ring as usize)];
    let _ = link.inject(0, 0, bytes, u32::from(imm));
    let _ = ep.poll(&mut link.side(0), &mut Sink);
});
