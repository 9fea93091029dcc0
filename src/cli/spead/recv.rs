//! `linerate spead recv`: heaps or chunks from a UDP socket, counted, checked, plotted.

use super::*;

#[derive(Debug, Serialize)]
struct RecvReport {
    mode: &'static str,
    /// The whole receive, waiting for the sender included.
    secs: f64,
    /// From the first receive burst to the last: the time the packets
    /// arrived in.
    span_s: f64,
    /// Over `span_s` (see [`Arrivals::gbps`]).
    gbps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    heaps: Option<AssembleStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunks: Option<ChunkStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    check: Option<CheckReport>,
}

pub(super) fn recv(a: &RecvArgs) -> Result<i32, Failure> {
    let live = crate::metrics::Live::new("spead_recv");
    let server = a.metrics.start(&live).map_err(|e| match e {
        crate::metrics::MetricsError::Bind { .. } => Failure::Input(e.to_string()),
        crate::metrics::MetricsError::Start { .. } => Failure::Runtime(e.to_string()),
    })?;
    let pool = pool()?;
    let rx = recv_port(a, &pool)?;
    let r = recv_on(rx, &pool, a, &live);
    a.metrics.stop(server);
    r
}

/// How often the receive loop publishes its counters for `--metrics`.
const PUBLISH_EVERY_S: f64 = 0.25;

/// How often the receive loop samples its counters for `--plot`.
const SAMPLE_EVERY_S: f64 = 0.5;

fn heap_sample(t: f64, s: &AssembleStats) -> Sample {
    Sample {
        t,
        bytes: s.bytes,
        good: s.heaps_complete,
        total: s.heaps_complete + s.heaps_evicted + s.heaps_flushed + s.heaps_unsized,
    }
}

fn chunk_sample(t: f64, s: &ChunkStats) -> Sample {
    Sample {
        t,
        bytes: s.bytes,
        good: s.present,
        total: s.present_slots,
    }
}

fn write_plot(a: &RecvArgs, what: &str, samples: &[Sample]) -> Result<(), Failure> {
    let Some(path) = &a.plot else {
        return Ok(());
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    }
    let title = format!("spead recv {}: {what}", a.bind);
    for ext in ["svg", "png"] {
        crate::spead::plot::plot(&title, what, samples, &path.with_extension(ext))
            .map_err(runtime)?;
    }
    Ok(())
}

/// Opens the receiving udp port (spead2's default 8 MiB socket buffer).
pub(super) fn recv_port(a: &RecvArgs, pool: &Pool) -> Result<Box<dyn RxQueue>, Failure> {
    let bind = socket_addr("bind address", &a.bind)?;
    let port = udp_port(
        &UdpConfig {
            bind: Some(bind),
            connect: None,
            multicast: None,
            interface: Ipv4Addr::UNSPECIFIED,
            rcvbuf: Some(8 << 20),
            sndbuf: None,
            queues: 1,
            ..UdpConfig::default()
        },
        pool,
    )?;
    port.rx
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Runtime("the udp port has no receive side".into()))
}

/// Receives on an already bound port (the tests bind first, so no packet
/// is sent before anybody listens): bursts of datagrams with recvmmsg, each
/// offered to the assembler or the chunk stream, the buffers freed in bulk.
/// When the packets arrived, clocked once per receive burst: Gb/s is over
/// the time they arrived in, not over the time spent waiting for the sender
/// to start or for `--duration` to run out after it stopped.
#[derive(Debug, Default)]
struct Arrivals {
    /// The first burst's time (s) and the bytes counted by its end.
    first: Option<(f64, u64)>,
    last: f64,
}

impl Arrivals {
    /// A burst arrived by `now`; `bytes` are counted so far.
    fn note(&mut self, now: f64, bytes: u64) {
        self.first.get_or_insert((now, bytes));
        self.last = now;
    }

    fn span_s(&self) -> f64 {
        self.first.map_or(0.0, |(t, _)| self.last - t)
    }

    /// `bytes` as Gb/s: those counted after the first burst over the span
    /// to the last (the first burst's arrived at the span's start); over the
    /// whole `secs` when everything came in one burst.
    fn gbps(&self, bytes: u64, secs: f64) -> f64 {
        match self.first {
            Some((t, b)) if self.last > t => {
                bytes.saturating_sub(b) as f64 * 8.0 / (self.last - t) / 1e9
            }
            _ => bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
        }
    }
}

pub(super) fn recv_on(
    mut rx: Box<dyn RxQueue>,
    pool: &Pool,
    a: &RecvArgs,
    live: &crate::metrics::Live,
) -> Result<i32, Failure> {
    let limit = match &a.duration {
        Some(d) => Some(parse_duration(d).map_err(input)?),
        None => None,
    };
    if a.sink == SinkArg::Write && a.out.is_none() {
        return Err(Failure::Input("--sink write needs --out DIR".into()));
    }
    let mut cache = pool.cache();
    let mut burst = Burst::new();
    // Receives a burst, sleeping briefly when the socket is empty.
    let mut next_burst = |burst: &mut Burst, clock: &Clock| {
        let n = rx.rx_burst(clock.now(), burst, BURST_MAX);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        n
    };
    let clock = Clock::new();
    let mut arrivals = Arrivals::default();
    let mut last_report = 0.0;
    let mut last_publish = 0.0;
    let mut last_sample = 0.0;
    let mut samples = vec![Sample {
        t: 0.0,
        bytes: 0,
        good: 0,
        total: 0,
    }];
    // Ctrl-C and SIGTERM end the receive as `--duration` does: the summary
    // and the JSON report are still written.
    let interrupt = crate::sys::signals::interrupt_flag();
    let done = |secs: f64| {
        limit.is_some_and(|l| secs >= l.as_secs_f64())
            || interrupt.load(std::sync::atomic::Ordering::Relaxed)
    };
    if !a.chunks {
        let mut asm = Assembler::new(AssembleConfig {
            max_heaps: a.max_heaps,
            ..AssembleConfig::default()
        });
        let published = live.set_spead(SpeadCounters::new("heaps", asm.stats()));
        while !asm.stats().stopped && !done(clock.elapsed().as_secs_f64()) {
            let n = next_burst(&mut burst, &clock);
            for p in burst.iter() {
                let _ = asm.push(0, p.data());
                while let Some(h) = asm.poll_heap() {
                    if a.verbose {
                        print_heap(&h);
                    }
                    asm.recycle(h);
                }
            }
            cache.free_bulk(&mut burst);
            let now = clock.elapsed().as_secs_f64();
            if n > 0 {
                arrivals.note(now, asm.stats().bytes);
            }
            if now - last_publish >= PUBLISH_EVERY_S {
                last_publish = now;
                published.publish(asm.stats(), None);
            }
            if a.plot.is_some() && now - last_sample >= SAMPLE_EVERY_S {
                last_sample = now;
                samples.push(heap_sample(now, asm.stats()));
            }
            if now - last_report >= 1.0 {
                last_report = now;
                let s = asm.stats();
                eprintln!(
                    "{now:.0}s: {} packets, {} heaps complete, {} evicted, {} duplicates",
                    s.packets, s.heaps_complete, s.heaps_evicted, s.packets_duplicate
                );
            }
        }
        asm.flush();
        let secs = clock.elapsed().as_secs_f64();
        let s = asm.stats().clone();
        published.publish(&s, None);
        if a.plot.is_some() {
            samples.push(heap_sample(secs, &s));
            write_plot(a, "heaps complete", &samples)?;
        }
        println!(
            "received {} packets: {} heaps complete, {} unsized, {} evicted, {} flushed incomplete, \
             {} duplicate, {} malformed packets; {:.3} Gb/s",
            s.packets,
            s.heaps_complete,
            s.heaps_unsized,
            s.heaps_evicted,
            s.heaps_flushed,
            s.packets_duplicate,
            s.packets_malformed,
            arrivals.gbps(s.bytes, secs)
        );
        write_json_if(
            a.json.as_deref(),
            &RecvReport {
                mode: "heaps",
                secs,
                span_s: arrivals.span_s(),
                gbps: arrivals.gbps(s.bytes, secs),
                heaps: Some(s),
                chunks: None,
                check: None,
            },
        )?;
        return Ok(0);
    }

    let cfg = a.feng.fsim(a.flavour.flavour());
    cfg.validate().map_err(Failure::Input)?;
    let place = KatgpucbfPlace::for_fsim(&cfg, a.heaps_per_fengine_per_chunk);
    let mut ccfg = place.chunk_config(a.max_chunks, a.n_chunks.max(a.max_chunks));
    ccfg.max_heaps = a.max_heaps.max(cfg.n_ants * 2);
    ccfg.copy = a.copy.mode();
    let mut stream = ChunkStream::new(ccfg, place.clone());
    let published = live.set_spead(SpeadCounters::new("chunks", stream.stats()));
    let mut checker = Checker::new(place.clone(), 100);
    let mut wrong_total = 0u64;
    let mut sink_err = None;
    let mut consume = |stream: &mut ChunkStream<KatgpucbfPlace>, checker: &mut Checker| {
        while let Some(c) = stream.poll_chunk() {
            match a.sink {
                SinkArg::Discard => {}
                SinkArg::Check => {
                    wrong_total += checker.check(&c, |w| {
                        eprintln!(
                            "wrong byte: chunk {} heap {} (feng {}, timestamp {}) offset {}: {:#04x}, expected {:#04x}",
                            w.chunk_id, w.heap_index, w.feng_id, w.timestamp, w.heap_offset, w.got, w.expected
                        )
                    });
                }
                SinkArg::Write => {
                    if let Some(dir) = &a.out {
                        if let Err(e) = write_chunk(dir, stream.place(), &c) {
                            sink_err = Some(e.to_string());
                        }
                    }
                }
            }
            stream.add_free_chunk(c);
        }
    };
    while !stream.stats().stopped && !done(clock.elapsed().as_secs_f64()) {
        let n = next_burst(&mut burst, &clock);
        for p in burst.iter() {
            while let Push::Stall = stream.push(0, p.data()) {
                consume(&mut stream, &mut checker);
            }
            consume(&mut stream, &mut checker);
        }
        cache.free_bulk(&mut burst);
        let now = clock.elapsed().as_secs_f64();
        if n > 0 {
            arrivals.note(now, stream.stats().bytes);
        }
        if now - last_publish >= PUBLISH_EVERY_S {
            last_publish = now;
            let s = stream.stats();
            published.publish(s, Some(s.fraction_present()));
        }
        if a.plot.is_some() && now - last_sample >= SAMPLE_EVERY_S {
            last_sample = now;
            samples.push(chunk_sample(now, stream.stats()));
        }
        if now - last_report >= 1.0 {
            last_report = now;
            let s = stream.stats();
            eprintln!(
                "{now:.0}s: {} packets, {} heaps complete, {} chunks, {:.4} present",
                s.packets,
                s.heaps_complete,
                s.chunks,
                s.fraction_present()
            );
        }
    }
    stream.flush();
    consume(&mut stream, &mut checker);
    let secs = clock.elapsed().as_secs_f64();
    let s = stream.stats().clone();
    published.publish(&s, Some(s.fraction_present()));
    if a.plot.is_some() {
        samples.push(chunk_sample(secs, &s));
        write_plot(a, "heaps present in chunks", &samples)?;
    }
    println!(
        "received {} packets: {} heaps complete, {} incomplete (evicted {}, flushed {}), {} too old, \
         {} rejected; {} chunks, {:.6} present; {:.3} Gb/s",
        s.packets,
        s.heaps_complete,
        s.heaps_incomplete_evicted + s.heaps_incomplete_flushed,
        s.heaps_incomplete_evicted,
        s.heaps_incomplete_flushed,
        s.heaps_too_old,
        s.heaps_rejected,
        s.chunks,
        s.fraction_present(),
        arrivals.gbps(s.bytes, secs)
    );
    if a.sink == SinkArg::Check {
        let r = checker.report();
        println!(
            "checked {} heaps ({} bytes): {} wrong bytes",
            r.heaps_checked, r.bytes_checked, r.wrong_bytes
        );
    }
    write_json_if(
        a.json.as_deref(),
        &RecvReport {
            mode: "chunks",
            secs,
            span_s: arrivals.span_s(),
            gbps: arrivals.gbps(s.bytes, secs),
            heaps: None,
            chunks: Some(s),
            check: (a.sink == SinkArg::Check).then(|| checker.report().clone()),
        },
    )?;
    if let Some(e) = sink_err {
        return Err(Failure::Runtime(format!("writing chunks: {e}")));
    }
    Ok(if wrong_total > 0 { 1 } else { 0 })
}

fn print_heap(h: &crate::spead::assemble::Heap) {
    println!("heap {} (sender {}):", h.cnt, h.sender);
    for d in h.descriptors() {
        println!(
            "  descriptor {:#x} {:?}: {:?} shape {:?} format {:?}",
            d.id, d.name, d.description, d.shape, d.format
        );
    }
    for it in h.items() {
        match it.value {
            ItemValue::Immediate(v) => println!("  item {:#x} = {v}", it.id),
            ItemValue::Bytes(b) => println!("  item {:#x}: {} bytes", it.id, b.len()),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn gbps_is_over_the_time_the_packets_arrived_in() {
        let mut a = Arrivals::default();
        assert_eq!((a.span_s(), a.gbps(0, 10.0)), (0.0, 0.0));
        // A first burst of 1000 bytes at 3 s (after waiting for the sender),
        // then 1000 bytes every 1 ms to 4 s, then nothing until 10 s.
        for k in 0..=1000u64 {
            a.note(3.0 + k as f64 * 1e-3, 1000 * (k + 1));
        }
        assert!((a.span_s() - 1.0).abs() < 1e-9);
        assert!((a.gbps(1_001_000, 10.0) - 0.008).abs() < 1e-9);
        // Everything in one burst: no span, the whole receive.
        let mut one = Arrivals::default();
        one.note(2.0, 500);
        assert_eq!(one.gbps(1000, 2.0), 1000.0 * 8.0 / 2.0 / 1e9);
    }
}
