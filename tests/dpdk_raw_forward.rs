//! The raw-mbuf forward path (a forward stage between two dpdk queues moves
//! mbuf pointers with no `Packet` around them, as testpmd's io mode does):
//! IMIX frames from a capture are copied into mbufs on net_ring0, forwarded
//! raw from net_ring0 to net_ring1 (each ring PMD feeds its own rx), and
//! written back to a capture: every frame returns, intact and in order, and
//! every counter on the way agrees.
#![cfg(feature = "dpdk")]

mod util;

#[test]
fn raw_forward_between_dpdk_ports_keeps_every_byte() {
    // Under --no-huge the ring ports' mbufs are packed by default.
    raw_forward("", 1);
}

#[test]
fn raw_forward_with_classic_mbufs_keeps_every_byte() {
    raw_forward("mbuf_layout = \"classic\"\n", 0);
}

#[test]
fn raw_forward_with_packed_mbufs_asked_for_keeps_every_byte() {
    raw_forward("mbuf_layout = \"packed\"\n", 1);
}

/// Forwards the capture through net_ring0 -> net_ring1 with `layout` in both
/// ring ports' tables; `packed` is the layout the ports must report.
fn raw_forward(layout: &str, packed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let cap = util::record(dir.path(), 3000);
    let back = dir.path().join("back.pcap");
    let text = format!(
        "[pipeline]\nlcores = \"0\"\npin = false\n{}\
         [port.a]\nkind = \"dpdk\"\ndevice = \"net_ring0\"\n{layout}\
         [port.b]\nkind = \"dpdk\"\ndevice = \"net_ring1\"\n{layout}\
         [port.src]\nkind = \"pcap\"\nread = \"{}\"\n\
         [port.dst]\nkind = \"pcap\"\nwrite = \"{}\"\n\
         [stage.out]\nkind = \"forward\"\nlcore = 0\nrx = \"b\"\ntx = \"dst\"\n\
         [stage.mid]\nkind = \"forward\"\nlcore = 0\nrx = \"a\"\ntx = \"b\"\n\
         [stage.in]\nkind = \"forward\"\nlcore = 0\nrx = \"src\"\ntx = \"a\"\nburst = 16\n",
        util::eal("\"--vdev=net_ring0\", \"--vdev=net_ring1\""),
        cap.display(),
        back.display()
    );
    let file = util::write(dir.path(), "raw.toml", &text);
    let r = util::run_json(&["run", "-q", "--duration", "20s"], &file);
    let sent = util::capture(&cap);
    let got = util::capture(&back);
    assert_eq!(sent.len(), 3000);
    assert_eq!(got.len(), sent.len(), "every frame comes back: {r}");
    assert_eq!(got, sent, "intact and in order");
    let bytes: u64 = sent.iter().map(|f| f.len() as u64).sum();
    let mid = &r["stages"]["mid"];
    assert_eq!(mid["packets_in"], 3000, "{r}");
    assert_eq!(mid["packets_out"], 3000, "{r}");
    assert_eq!(mid["bytes_in"], bytes, "{r}");
    assert_eq!(mid["bytes_out"], bytes, "{r}");
    assert_eq!(mid["dropped"], 0, "{r}");
    for p in ["a", "b"] {
        let port = &r["ports"][p];
        assert_eq!(port["rx_packets"], 3000, "{p}: {r}");
        assert_eq!(port["tx_packets"], 3000, "{p}: {r}");
        assert_eq!(port["rx_bytes"], bytes, "{p}: {r}");
        assert_eq!(port["tx_bytes"], bytes, "{p}: {r}");
        assert_eq!(port["detail"]["mbufs_packed"], packed, "{p}: {r}");
    }
    assert_eq!(r["ports"]["a"]["detail"]["copied_in"], 3000, "{r}");
    assert_eq!(
        r["ports"]["b"]["detail"]["copied_in"], 0,
        "the raw path copies nothing: {r}"
    );
}
