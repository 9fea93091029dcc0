//! Pools on hugepages: used when asked for and available, a clear error when
//! required and missing, anonymous memory under "auto" otherwise.

mod util;

use std::time::Duration;

fn hugetlbfs_with_room(pages: u64) -> bool {
    let mounted = std::fs::read_to_string("/proc/mounts")
        .is_ok_and(|m| m.lines().any(|l| l.contains(" hugetlbfs ")));
    let free: u64 =
        std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
    mounted && free >= pages
}

fn pipeline(mode: &str) -> String {
    format!(
        r#"
[pipeline]
pin = false
[pool]
buffers = 4096
size = 2048
hugepages = {mode}
[port.w]
kind = "mem"
[stage.src]
kind = "source"
tx = "w"
count = 10000
[stage.rx]
kind = "sink"
rx = "w"
"#
    )
}

#[test]
fn pool_on_hugepages_when_asked() {
    // 4096 x 2 KiB = 8 MiB = 4 hugepages.
    if hugetlbfs_with_room(4) {
        let r = util::run_text("huge.toml", &pipeline("true"), Duration::from_secs(30));
        assert!(r.pool.hugepages, "the pool should be on hugepages");
        assert_eq!(r.stages["rx"].packets_in, 10_000);
    } else {
        eprintln!("no hugetlbfs mount with 4 free 2 MiB pages: checking the error and the fallback instead");
        let r = util::run_text("auto.toml", &pipeline("\"auto\""), Duration::from_secs(30));
        assert!(!r.pool.hugepages);
        assert_eq!(r.stages["rx"].packets_in, 10_000);
        let dir = tempfile::tempdir().unwrap();
        let file = util::write(dir.path(), "need.toml", &pipeline("true"));
        let out = util::bin().args(["run", "-q"]).arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("setup-hugepages.sh"));
    }
}
