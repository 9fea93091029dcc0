//! Every file in pipelines/ passes `linerate check`.

mod util;

#[test]
fn every_pipeline_file_checks() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        // Pipelines for feature-gated ports are checked in builds with the feature
        // (by their ports' kinds: `kernel-dut.toml` is a dpdk pipeline too).
        let uses = |kind: &str| text.contains(&format!("kind = \"{kind}\""));
        if ((name.contains("dpdk") || uses("dpdk")) && !cfg!(feature = "dpdk"))
            || ((name.starts_with("ibverbs") || uses("ibverbs")) && !cfg!(feature = "ibverbs"))
        {
            continue;
        }
        let out = util::bin().arg("check").arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked > 0);
}
