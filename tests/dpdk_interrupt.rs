//! A DPDK trial interrupted by SIGTERM (and one by SIGINT): the finished
//! trials are reported, the process exits 143 (130) after closing its ports,
//! and no hugepage file of it is left behind. On hugepages when the machine
//! has them (scripts/setup-hugepages.sh), else with --no-huge (then there are
//! no files to leave, and the rest is still checked).
#![cfg(feature = "dpdk")]

mod util;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn hugetlbfs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect()
}

fn free_2m_pages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Files in any hugetlbfs mount whose name starts with `prefix`.
fn hugepage_files(prefix: &str) -> Vec<String> {
    hugetlbfs_mounts()
        .iter()
        .flat_map(|m| std::fs::read_dir(m).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

#[test]
fn an_interrupted_dpdk_trial_reports_and_leaves_no_hugepage_file() {
    let huge = free_2m_pages() >= 64 && !hugetlbfs_mounts().is_empty();
    if !huge {
        println!("no free hugepages: checking on --no-huge (no files to leave behind)");
    }
    for (sig, code) in [("TERM", 143), ("INT", 130)] {
        let prefix = format!("linerate-int-{}-{sig}", std::process::id());
        let eal = if huge {
            format!("[eal]\nargs = [\"-m\", \"64\", \"--no-pci\", \"-l\", \"0\", \"--no-telemetry\", \"--log-level=lib.eal:error\", \"--vdev=net_ring0\", \"--file-prefix={prefix}\"]\n")
        } else {
            util::eal(&format!("\"--vdev=net_ring0\", \"--file-prefix={prefix}\""))
        };
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[pipeline]\nlcores = \"0-1\"\npin = false\n{eal}[port.l]\nkind = \"dpdk\"\ndevice = \"net_ring0\"\n[stage.gen]\nkind = \"generator\"\ntx = \"l\"\nlcore = 0\n[stage.ana]\nkind = \"analyzer\"\nrx = \"l\"\nlcore = 1\n"
        );
        let file = util::write(dir.path(), "ring.toml", &text);
        let json = dir.path().join("out.json");
        let mut child = util::bin()
            .args([
                "trial",
                "--rate",
                "20 kpps",
                "--duration",
                "300ms",
                "--repeat",
                "100",
            ])
            .arg("--json")
            .arg(&json)
            .arg(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut g = Guard(child);
        // Two finished trials, read on a thread so a stuck child cannot hang us.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut n = 0;
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if l.starts_with("trial ") {
                    n += 1;
                    if n == 2 {
                        let _ = tx.send(());
                    }
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("two trials within 60 s");
        if huge {
            assert!(
                hugepage_files(&prefix).is_empty(),
                "--huge-unlink: no hugepage file exists even while running"
            );
        }
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &g.0.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let start = Instant::now();
        let status = loop {
            if let Some(s) = g.0.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no exit after SIG{sig}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        let _ = std::io::Read::read_to_string(g.0.stderr.as_mut().unwrap(), &mut stderr);
        assert_eq!(status.code(), Some(code), "SIG{sig}: {stderr}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["interrupted"], true);
        let trials = v["trials"].as_array().unwrap();
        assert!(trials.len() >= 2, "{v}");
        for t in trials {
            assert_eq!(t["received"], t["sent"], "{t}");
        }
        assert!(
            hugepage_files(&prefix).is_empty(),
            "hugepage files left behind"
        );
    }
}
