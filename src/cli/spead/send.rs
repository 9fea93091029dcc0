//! `linerate spead send`: heaps paced onto a UDP socket.

use super::*;

#[derive(Debug, Serialize)]
struct SendReport {
    heaps: u64,
    packets: u64,
    bytes: u64,
    /// Packets the kernel refused because nobody listened at the destination
    /// yet (an ICMP port unreachable came back): counted, not fatal.
    refused: u64,
    secs: f64,
    gbps: f64,
    pps: f64,
}

fn bits_per_second(rate: &str, packet: usize) -> Result<f64, Failure> {
    let r: Rate = rate.parse().map_err(input)?;
    Ok(match r {
        Rate::Pps(p) => p * packet as f64 * 8.0,
        Rate::L2Bps(b) | Rate::L1Bps(b) => b,
        Rate::Percent(_) => {
            return Err(Failure::Input(
                "a percentage rate needs a port line rate; give Gbps or pps".into(),
            ))
        }
    })
}

pub(super) fn send(a: &SendArgs) -> Result<(), Failure> {
    let flavour = a.flavour.flavour();
    let packet = parse_size(&a.packet).map_err(input)? as usize;
    if packet > MAX_DATAGRAM {
        return Err(Failure::Input(format!(
            "--packet {packet} is above the {MAX_DATAGRAM}-byte datagrams this command sends"
        )));
    }
    let dest = socket_addr("destination", &a.dest)?;
    let pool = pool()?;
    let port = udp_port(
        &UdpConfig {
            bind: None,
            connect: Some(dest),
            multicast: None,
            interface: Ipv4Addr::UNSPECIFIED,
            rcvbuf: None,
            sndbuf: Some(4 << 20),
            queues: 1,
            ..UdpConfig::default()
        },
        &pool,
    )?;
    let stats = port.stats.clone();
    let Some(mut tx) = port.tx.into_iter().next() else {
        return Err(Failure::Runtime("the udp port has no transmit side".into()));
    };
    let mut cache = pool.cache();
    let mut burst = Burst::new();
    let clock = Clock::new();
    let bps = bits_per_second(&a.rate, packet)?;
    let mut pacer = Pacer::new(bps, clock.now(), 100_000);
    let mut report = SendReport {
        heaps: 0,
        packets: 0,
        bytes: 0,
        refused: 0,
        secs: 0.0,
        gbps: 0.0,
        pps: 0.0,
    };
    let mut buf = vec![0u8; packet.max(2048)];
    // Sends the burst with sendmmsg, waiting while the socket buffer is full.
    // A datagram refused because nobody listens yet is dropped and counted by
    // the port.
    let flush = |tx: &mut Box<dyn TxQueue>, burst: &mut Burst| {
        while !burst.is_empty() {
            if tx.tx_burst(clock.now(), burst) == 0 {
                std::thread::yield_now();
            }
        }
    };
    let mut emit = |data: &[u8], report: &mut SendReport| -> Result<(), Failure> {
        if bps > 0.0 {
            while let Err(due) = pacer.poll(clock.now(), data.len()) {
                // Waiting for the pacer: send what is batched first.
                flush(&mut tx, &mut burst);
                let wait = due.as_nanos().saturating_sub(clock.now().as_nanos());
                if wait > 50_000 {
                    std::thread::sleep(Duration::from_nanos(wait - 20_000));
                } else {
                    std::hint::spin_loop();
                }
            }
        }
        let mut pkt = match cache.alloc() {
            Some(p) => p,
            None => {
                flush(&mut tx, &mut burst);
                cache
                    .alloc()
                    .ok_or_else(|| Failure::Runtime("no packet buffer left".into()))?
            }
        };
        pkt.set_data(data).map_err(runtime)?;
        let _ = burst.push(pkt);
        if burst.room() == 0 {
            flush(&mut tx, &mut burst);
        }
        report.packets += 1;
        report.bytes += data.len() as u64;
        Ok(())
    };
    let mut next_cnt = 1;
    if a.fsim {
        let mut cfg = a.feng.fsim(flavour);
        cfg.rate_gbps = bps / 1e9;
        if cfg.max_packet() > packet {
            return Err(Failure::Input(format!(
                "F-engine packets are {} bytes, more than --packet {packet}",
                cfg.max_packet()
            )));
        }
        let mut sim = Fsim::new(cfg.clone()).map_err(Failure::Input)?;
        let total = a.heaps * cfg.n_ants as u64 * cfg.packets_per_heap() as u64;
        for _ in 0..total {
            let (n, _) = sim.next_packet(&mut buf).map_err(runtime)?;
            emit(&buf[..n], &mut report)?;
        }
        report.heaps = a.heaps * cfg.n_ants as u64;
        next_cnt = a.heaps * cfg.n_ants as u64;
    } else {
        let size = parse_size(&a.heap_size).map_err(input)? as usize;
        for k in 0..a.heaps {
            let mut h = SendHeap::new(next_cnt);
            if k == 0 {
                for d in generic_descriptors(flavour) {
                    h = h.descriptor(flavour, &d).map_err(runtime)?;
                }
            }
            let data: Vec<u8> = (0..size).map(|i| (i as u64 + k) as u8).collect();
            let h = h.immediate(0x1000, k).bytes(0x1001, data);
            let (ptrs, payload) = h.layout(flavour).map_err(runtime)?;
            let mut pk = Packetizer::new(flavour, h.cnt, &ptrs, &payload, packet).map_err(input)?;
            while let Some(r) = pk.next_packet(&mut buf) {
                let n = r.map_err(runtime)?;
                emit(&buf[..n], &mut report)?;
            }
            report.heaps += 1;
            next_cnt += 1;
        }
    }
    if !a.no_stop {
        let h = SendHeap::end_of_stream(next_cnt & flavour.max_value());
        let (ptrs, payload) = h.layout(flavour).map_err(runtime)?;
        let mut pk = Packetizer::new(flavour, h.cnt, &ptrs, &payload, packet).map_err(input)?;
        while let Some(r) = pk.next_packet(&mut buf) {
            let n = r.map_err(runtime)?;
            emit(&buf[..n], &mut report)?;
        }
    }
    // The last datagrams (emit sends only full bursts or before waiting).
    flush(&mut tx, &mut burst);
    report.refused = stats.report().dropped;
    report.secs = clock.elapsed().as_secs_f64();
    report.gbps = report.bytes as f64 * 8.0 / report.secs.max(1e-9) / 1e9;
    report.pps = report.packets as f64 / report.secs.max(1e-9);
    println!(
        "sent {} heaps, {} packets, {} bytes in {:.3} s: {:.3} Gb/s, {:.0} packets/s",
        report.heaps, report.packets, report.bytes, report.secs, report.gbps, report.pps
    );
    write_json_if(a.json.as_deref(), &report)
}
