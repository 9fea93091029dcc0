//! The ibverbs port through the binary, without RDMA hardware: its keys are
//! validated with spanned diagnostics (exit 2), and running a pipeline that
//! uses it fails with exit status 1 and an error naming what is missing (no
//! device, no provider for the kernel's devices, or the device names that do
//! exist). The port's burst logic is tested against a software queue pair
//! model in `src/port/ibverbs.rs`.
#![cfg(feature = "ibverbs")]

mod util;

use std::path::Path;

fn pipeline_file() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines/ibverbs-recv.toml")
}

#[test]
fn the_receive_pipeline_checks() {
    let out = util::bin()
        .arg("check")
        .arg(pipeline_file())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("nic (ibverbs): device (first), port 1, rx flow 02:00:00:00:00:02 10.0.0.2 udp 7148, 4096 buffers"),
        "{stdout}"
    );
}

#[test]
fn run_without_a_device_exits_1_naming_what_is_missing() {
    let names = linerate::sys::ibverbs::device_names().expect("ibv_get_device_list");
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(pipeline_file()).unwrap().replace(
        "# device = \"mlx5_0\"",
        "device = \"linerate-no-such-device\"",
    );
    let file = util::write(dir.path(), "ibv.toml", &text);
    let out = util::bin()
        .args(["run", "--duration", "1s", "--quiet"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("ibv.toml: [port.nic]"), "{stderr}");
    let kernel = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| d.count())
        .unwrap_or(0);
    if !names.is_empty() {
        // A machine with RDMA devices: the bogus name is refused, listing them.
        assert!(
            stderr.contains("no RDMA device named `linerate-no-such-device`"),
            "{stderr}"
        );
        assert!(stderr.contains(&names[0]), "{stderr}");
    } else if kernel > 0 {
        assert!(
            stderr.contains("but libibverbs found none of them"),
            "{stderr}"
        );
    } else {
        assert!(
            stderr.contains(
                "no RDMA device: libibverbs lists none and /sys/class/infiniband has none"
            ),
            "{stderr}"
        );
        assert!(
            stderr.contains("libibverbs providers installed:")
                || stderr.contains("no libibverbs provider is installed"),
            "{stderr}"
        );
    }
    println!("exercised: {}", stderr.trim());
}

#[test]
fn bad_keys_are_spanned_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let file = util::write(
        dir.path(),
        "bad-ibv.toml",
        r#"[pipeline]
lcores = "0"
[port.nic]
kind = "ibverbs"
dst_port = 7148
rx_depth = 1024
buffers = 2048
inline = 900
buffer_size = "40 KiB"
dst_mac = "02:00:00:00:00"
ib_prt = 1
[stage.s]
kind = "sink"
rx = "nic"
"#,
    );
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for want in [
        "bad-ibv.toml:8:10: [port.nic] `inline`: 900 is out of range",
        "bad-ibv.toml:9:15: [port.nic] `buffer_size`: 40960 bytes is out of range",
        "bad-ibv.toml:7:11: [port.nic] `buffers`: 2048 receive buffers do not fit a receive queue of 1024",
        "bad-ibv.toml:10:11: [port.nic] `dst_mac`: `02:00:00:00:00` is not a MAC address",
        "bad-ibv.toml:11:1: [port.nic] `ib_prt`: unknown key for an ibverbs port (did you mean `ib_port`?)",
    ] {
        assert!(stderr.contains(want), "missing `{want}` in:\n{stderr}");
    }

    // A port without a flow rule cannot feed a receiving stage.
    let file = util::write(
        dir.path(),
        "tx-only.toml",
        "[pipeline]\nlcores = \"0\"\n[port.nic]\nkind = \"ibverbs\"\n[stage.s]\nkind = \"sink\"\nrx = \"nic\"\n",
    );
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("an ibverbs port receives only with `dst_mac`"),
        "{stderr}"
    );
    // dst_ip / dst_port need dst_mac.
    let file = util::write(
        dir.path(),
        "no-mac.toml",
        "[pipeline]\nlcores = \"0\"\n[port.nic]\nkind = \"ibverbs\"\ndst_ip = \"10.0.0.2\"\n[stage.s]\nkind = \"source\"\ntx = \"nic\"\n",
    );
    let out = util::bin().arg("check").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no-mac.toml:5:10: [port.nic] `dst_ip`: `dst_ip` narrows the receive flow rule, which needs `dst_mac`"),
        "{stderr}"
    );
}
