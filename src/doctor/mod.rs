//! `linerate doctor`: what this machine has for kernel-bypass I/O and what
//! is missing, each problem with its fix. Reads sysfs and procfs only (plus
//! `pkg-config --modversion libdpdk`, and the names of the files under
//! hugetlbfs mounts), so it runs on a default build; with
//! feature `dpdk` it also reports the linked DPDK's `rte_version()`.
//!
//! Every path is relative to a [`Roots`] value so tests can point the checks
//! at a fake sysfs tree.
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

mod findings;

/// How a finding affects kernel-bypass use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fine.
    Ok,
    /// For information.
    Info,
    /// Works, but not at its best (e.g. no isolated cores).
    Warn,
    /// Blocks a feature until fixed.
    Problem,
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The area: hugepages, dpdk, devices, iommu, cpu, rdma.
    pub area: &'static str,
    /// Status.
    pub status: Status,
    /// What was found.
    pub what: String,
    /// How to fix it (for warn/problem).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// Hugepages of one size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HugepagePool {
    /// Page size in kB.
    pub size_kb: u64,
    /// Pages reserved.
    pub total: u64,
    /// Pages free.
    pub free: u64,
}

/// A network device and its driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetDevice {
    /// Kernel interface name, if bound to a kernel driver.
    pub interface: Option<String>,
    /// PCI address, if a PCI device.
    pub pci: Option<String>,
    /// Driver name (e.g. ixgbe, mlx5_core, vfio-pci), if bound.
    pub driver: Option<String>,
}

/// Everything doctor found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Hugepage pools per size.
    pub hugepages: Vec<HugepagePool>,
    /// hugetlbfs mount points.
    pub hugetlbfs_mounts: Vec<String>,
    /// DPDK version from pkg-config (`libdpdk`), if installed.
    pub dpdk_pkg_version: Option<String>,
    /// DPDK version linked into this binary (feature `dpdk`).
    pub dpdk_linked_version: Option<String>,
    /// PMD directories found.
    pub pmd_dirs: Vec<String>,
    /// PMD names found (e.g. net_null, from librte_net_null.so).
    pub pmds: Vec<String>,
    /// Network devices.
    pub devices: Vec<NetDevice>,
    /// Number of IOMMU groups.
    pub iommu_groups: usize,
    /// vfio-pci loaded.
    pub vfio_pci: bool,
    /// Isolated CPUs (kernel list syntax), empty if none.
    pub isolated_cpus: String,
    /// nohz_full CPUs, empty if none.
    pub nohz_full: String,
    /// RDMA devices under /sys/class/infiniband.
    pub rdma_devices: Vec<String>,
    /// Hugepage files no process holds (left by DPDK processes that died).
    pub stale_hugepage_files: Vec<StaleFile>,
    /// Findings, problems first.
    pub findings: Vec<Finding>,
}

impl Report {
    /// True if any finding is a [`Status::Problem`].
    pub fn has_problems(&self) -> bool {
        self.findings.iter().any(|f| f.status == Status::Problem)
    }
}

/// Where the checks look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// sysfs (`/sys`).
    pub sys: PathBuf,
    /// procfs (`/proc`).
    pub proc: PathBuf,
    /// Library directories holding `dpdk/pmds-*` (`/usr/lib/<triplet>`, ...).
    pub lib_dirs: Vec<PathBuf>,
    /// Ask `pkg-config` for the DPDK version.
    pub run_pkg_config: bool,
}

impl Default for Roots {
    fn default() -> Self {
        let mut lib_dirs = vec![PathBuf::from("/usr/local/lib"), PathBuf::from("/usr/lib")];
        if let Ok(rd) = fs::read_dir("/usr/lib") {
            let mut triplets: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("dpdk").is_dir())
                .collect();
            triplets.sort();
            lib_dirs.extend(triplets);
        }
        Roots {
            sys: PathBuf::from("/sys"),
            proc: PathBuf::from("/proc"),
            lib_dirs,
            run_pkg_config: true,
        }
    }
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn link_name(p: &Path) -> Option<String> {
    fs::read_link(p)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Hugepage pools from `/sys/kernel/mm/hugepages/hugepages-<N>kB`.
pub fn hugepages(roots: &Roots) -> Vec<HugepagePool> {
    let dir = roots.sys.join("kernel/mm/hugepages");
    let mut v: Vec<HugepagePool> = sorted_names(&dir)
        .into_iter()
        .filter_map(|name| {
            let kb = name
                .strip_prefix("hugepages-")?
                .strip_suffix("kB")?
                .parse()
                .ok()?;
            let num = |f: &str| {
                read_trim(&dir.join(&name).join(f))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0)
            };
            Some(HugepagePool {
                size_kb: kb,
                total: num("nr_hugepages"),
                free: num("free_hugepages"),
            })
        })
        .collect();
    v.sort_by_key(|p| p.size_kb);
    v
}

/// A hugepage file under a hugetlbfs mount that no process holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaleFile {
    /// Its path.
    pub path: String,
    /// Bytes of hugepages it keeps reserved.
    pub bytes: u64,
}

/// DPDK's hugepage files (`<prefix>map_<n>`) under the hugetlbfs mounts that no
/// process holds. A running DPDK process keeps a shared `flock` on each file
/// it maps; a process that was killed leaves its files, and their pages stay
/// taken until someone deletes them (DPDK itself only cleans its own prefix).
/// Held files are those `/proc/locks` lists: reading it takes no lock, so the
/// check cannot disturb a DPDK process that is locking its files right now.
pub fn stale_hugepage_files(roots: &Roots, mounts: &[String]) -> Vec<StaleFile> {
    use std::os::unix::fs::MetadataExt;
    let held = locked_files(roots);
    let mut out = Vec::new();
    for m in mounts {
        let Ok(rd) = fs::read_dir(m) else { continue };
        let mut files: Vec<(PathBuf, fs::Metadata)> = rd
            .flatten()
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.contains("map_")))
            .filter_map(|e| Some((e.path(), e.metadata().ok()?)))
            .filter(|(_, md)| md.is_file())
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (p, md) in files {
            let dev = md.dev();
            // dev_t as glibc encodes it: major in bits 8-19 and 32-63, minor in 0-7 and 12-31.
            let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
            let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
            if !held.contains(&(major, minor, md.ino())) {
                out.push(StaleFile {
                    path: p.display().to_string(),
                    bytes: md.len(),
                });
            }
        }
    }
    out
}

/// (major, minor, inode) of every file with a lock in `/proc/locks`
/// (`1: FLOCK ADVISORY READ 4242 00:2d:1234 0 EOF`; waiters, `1: -> ...`,
/// are skipped: the holder's line names the file).
fn locked_files(roots: &Roots) -> std::collections::HashSet<(u64, u64, u64)> {
    fs::read_to_string(roots.proc.join("locks"))
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains("->"))
        .filter_map(|l| {
            let id = l.split_whitespace().nth(5)?;
            let mut f = id.split(':');
            let major = u64::from_str_radix(f.next()?, 16).ok()?;
            let minor = u64::from_str_radix(f.next()?, 16).ok()?;
            let inode = f.next()?.parse().ok()?;
            Some((major, minor, inode))
        })
        .collect()
}

/// The `<prefix>` parts of DPDK hugepage file paths (`<dir>/<prefix>map_<n>`).
fn stale_prefixes(files: &[StaleFile]) -> Vec<String> {
    let mut v: Vec<String> = files
        .iter()
        .filter_map(|f| {
            f.path
                .rsplit_once("map_")
                .map(|(pre, _)| format!("{pre}map_*"))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Mount points of type hugetlbfs (from `/proc/mounts`).
pub fn hugetlbfs_mounts(roots: &Roots) -> Vec<String> {
    fs::read_to_string(roots.proc.join("mounts"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_dev, mnt, ty) = (f.next()?, f.next()?, f.next()?);
            (ty == "hugetlbfs").then(|| mnt.to_string())
        })
        .collect()
}

/// PMD directories (`<lib>/dpdk/pmds-*`) and the PMD names in them.
pub fn pmds(roots: &Roots) -> (Vec<String>, Vec<String>) {
    let mut dirs = Vec::new();
    let mut names = Vec::new();
    for lib in &roots.lib_dirs {
        let d = lib.join("dpdk");
        for sub in sorted_names(&d) {
            if !sub.starts_with("pmds-") {
                continue;
            }
            let pd = d.join(&sub);
            dirs.push(pd.display().to_string());
            for f in sorted_names(&pd) {
                // librte_net_null.so -> net_null (one entry per driver).
                if let Some(n) = f
                    .strip_prefix("librte_")
                    .and_then(|s| s.strip_suffix(".so"))
                {
                    names.push(n.to_string());
                }
            }
        }
    }
    names.sort();
    names.dedup();
    (dirs, names)
}

/// True for a PCI address such as `0000:01:00.0`.
fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
}

/// The PCI device a sysfs device path belongs to (itself, or a parent, as
/// for virtio: `.../0000:00:03.0/virtio0`).
fn pci_ancestor(dev: &Path) -> Option<String> {
    let real = fs::canonicalize(dev).ok()?;
    real.ancestors()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .find(|n| is_pci_address(n))
}

/// Network devices: kernel interfaces with their drivers, and PCI network
/// devices (class 0x02) whatever they are bound to (vfio-pci, a kernel
/// driver, or nothing).
pub fn devices(roots: &Roots) -> Vec<NetDevice> {
    let mut out: Vec<NetDevice> = Vec::new();
    let net = roots.sys.join("class/net");
    for ifname in sorted_names(&net) {
        let dev = net.join(&ifname).join("device");
        if !dev.exists() && fs::symlink_metadata(&dev).is_err() {
            continue; // virtual interface (lo, veth, bridges)
        }
        out.push(NetDevice {
            interface: Some(ifname.clone()),
            pci: pci_ancestor(&dev),
            driver: link_name(&dev.join("driver")),
        });
    }
    let pci = roots.sys.join("bus/pci/devices");
    for addr in sorted_names(&pci) {
        let class = read_trim(&pci.join(&addr).join("class")).unwrap_or_default();
        if !class.starts_with("0x02") {
            continue;
        }
        if out.iter().any(|d| d.pci.as_deref() == Some(addr.as_str())) {
            continue;
        }
        out.push(NetDevice {
            interface: None,
            pci: Some(addr.clone()),
            driver: link_name(&pci.join(&addr).join("driver")),
        });
    }
    out
}

/// RDMA devices under `/sys/class/infiniband`.
pub fn rdma_devices(roots: &Roots) -> Vec<String> {
    sorted_names(&roots.sys.join("class/infiniband"))
}

fn pkg_config_dpdk() -> Option<String> {
    let out = std::process::Command::new("pkg-config")
        .args(["--modversion", "libdpdk"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(feature = "dpdk")]
fn linked_dpdk() -> Option<String> {
    Some(crate::sys::dpdk::eal::version())
}

#[cfg(not(feature = "dpdk"))]
fn linked_dpdk() -> Option<String> {
    None
}

/// `major.minor` of a version string like "22.11.11" or "DPDK 22.11.11".
fn major_minor(v: &str) -> Option<(u32, u32)> {
    let v = v.trim_start_matches("DPDK").trim();
    let mut it = v.split('.');
    Some((it.next()?.parse().ok()?, it.next()?.trim().parse().ok()?))
}

/// Runs every check.
pub fn diagnose(roots: &Roots) -> Report {
    let mounts = hugetlbfs_mounts(roots);
    let (pmd_dirs, pmds) = pmds(roots);
    let nohz_full = read_trim(&roots.sys.join("devices/system/cpu/nohz_full"))
        .filter(|s| s != "(null)")
        .unwrap_or_default();
    let mut report = Report {
        hugepages: hugepages(roots),
        stale_hugepage_files: stale_hugepage_files(roots, &mounts),
        hugetlbfs_mounts: mounts,
        dpdk_pkg_version: if roots.run_pkg_config {
            pkg_config_dpdk()
        } else {
            None
        },
        dpdk_linked_version: linked_dpdk(),
        pmd_dirs,
        pmds,
        devices: devices(roots),
        iommu_groups: sorted_names(&roots.sys.join("kernel/iommu_groups")).len(),
        vfio_pci: roots.sys.join("module/vfio_pci").exists()
            || roots.sys.join("bus/pci/drivers/vfio-pci").exists(),
        isolated_cpus: read_trim(&roots.sys.join("devices/system/cpu/isolated"))
            .unwrap_or_default(),
        nohz_full,
        rdma_devices: rdma_devices(roots),
        findings: Vec::new(),
    };
    report.findings = findings::judge(&report);
    report
}

/// Renders the report for a terminal: one line per finding, fixes indented.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    for f in &r.findings {
        let tag = match f.status {
            Status::Ok => "ok     ",
            Status::Info => "info   ",
            Status::Warn => "WARN   ",
            Status::Problem => "PROBLEM",
        };
        s.push_str(&format!("{tag} {:<9} {}\n", f.area, f.what));
        if let Some(fix) = &f.fix {
            if f.status != Status::Ok {
                s.push_str(&format!("{:17} fix: {fix}\n", ""));
            }
        }
    }
    let problems = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Problem)
        .count();
    let warns = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Warn)
        .count();
    s.push_str(&format!("{problems} problem(s), {warns} warning(s)\n"));
    s
}

#[cfg(test)]
mod test {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, text).expect("write");
    }

    fn fake(root: &Path, hugepages: u64, free: u64, mounted: bool) -> Roots {
        let sys = root.join("sys");
        let proc = root.join("proc");
        write(
            &sys,
            "kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            &format!("{hugepages}\n"),
        );
        write(
            &sys,
            "kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
            &format!("{free}\n"),
        );
        write(
            &sys,
            "kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
            "0\n",
        );
        write(
            &sys,
            "kernel/mm/hugepages/hugepages-1048576kB/free_hugepages",
            "0\n",
        );
        write(&sys, "devices/system/cpu/isolated", "\n");
        // The hugetlbfs mount is a directory of the fake tree, so the stale
        // file check never looks at this machine's real /dev/hugepages.
        let huge = root.join("hugepages");
        fs::create_dir_all(&huge).expect("mkdir");
        let mounts = if mounted {
            format!(
                "proc /proc proc rw 0 0\nnodev {} hugetlbfs rw,pagesize=2M 0 0\n",
                huge.display()
            )
        } else {
            "proc /proc proc rw 0 0\n".to_string()
        };
        write(&proc, "mounts", &mounts);
        let lib = root.join("lib");
        for f in [
            "librte_net_null.so",
            "librte_net_null.so.23",
            "librte_net_ring.so",
            "librte_bus_vdev.so",
        ] {
            write(&lib, &format!("dpdk/pmds-23.0/{f}"), "");
        }
        // A PCI NIC bound to vfio-pci, and one interface on a kernel driver.
        write(&sys, "bus/pci/devices/0000:01:00.0/class", "0x020000\n");
        fs::create_dir_all(sys.join("bus/pci/drivers/vfio-pci")).expect("mkdir");
        std::os::unix::fs::symlink(
            sys.join("bus/pci/drivers/vfio-pci"),
            sys.join("bus/pci/devices/0000:01:00.0/driver"),
        )
        .expect("symlink");
        fs::create_dir_all(sys.join("devices/pci0000:00/0000:02:00.0")).expect("mkdir");
        fs::create_dir_all(sys.join("bus/pci/drivers/ixgbe")).expect("mkdir");
        std::os::unix::fs::symlink(
            sys.join("bus/pci/drivers/ixgbe"),
            sys.join("devices/pci0000:00/0000:02:00.0/driver"),
        )
        .expect("symlink");
        fs::create_dir_all(sys.join("class/net/eth1")).expect("mkdir");
        std::os::unix::fs::symlink(
            sys.join("devices/pci0000:00/0000:02:00.0"),
            sys.join("class/net/eth1/device"),
        )
        .expect("symlink");
        fs::create_dir_all(sys.join("class/net/lo")).expect("mkdir");
        Roots {
            sys,
            proc,
            lib_dirs: vec![lib],
            run_pkg_config: false,
        }
    }

    #[test]
    fn finds_hugepage_files_no_process_holds() {
        let dir = tempfile::tempdir().expect("tempdir");
        let roots = fake(dir.path(), 1024, 0, true);
        let huge = dir.path().join("hugepages");
        fs::write(huge.join("bench-tp-42map_0"), vec![0u8; 4096]).expect("write");
        fs::write(huge.join("bench-tp-42map_1"), vec![0u8; 4096]).expect("write");
        fs::write(huge.join("linerate-7map_0"), b"x").expect("write");
        fs::write(huge.join("notes.txt"), b"x").expect("write");
        // A live process holds its file, as DPDK does: /proc/locks says so.
        let md = fs::metadata(huge.join("linerate-7map_0")).expect("stat");
        let dev = std::os::unix::fs::MetadataExt::dev(&md);
        let ino = std::os::unix::fs::MetadataExt::ino(&md);
        let (major, minor) = (
            ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
            (dev & 0xff) | ((dev >> 12) & !0xff),
        );
        let locks = format!(
            "1: FLOCK  ADVISORY  READ 4242 {major:02x}:{minor:02x}:{ino} 0 EOF\n1: -> FLOCK  ADVISORY  WRITE 4243 00:00:1 0 EOF\n"
        );
        write(&roots.proc, "locks", &locks);
        let r = diagnose(&roots);
        let paths: Vec<&str> = r
            .stale_hugepage_files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(paths.len(), 2, "{paths:?}");
        assert!(paths.iter().all(|p| p.contains("bench-tp-42map_")));
        assert_eq!(
            r.stale_hugepage_files.iter().map(|f| f.bytes).sum::<u64>(),
            8192
        );
        let f = r
            .findings
            .iter()
            .find(|f| f.what.contains("no process holds"))
            .expect("a finding");
        assert_eq!(f.status, Status::Problem, "no page free: it blocks DPDK");
        let glob = format!("{}/bench-tp-42map_*", huge.display());
        assert_eq!(f.fix.as_deref(), Some(format!("rm -f {glob}").as_str()));
        write(&roots.proc, "locks", "");
        assert_eq!(diagnose(&roots).stale_hugepage_files.len(), 3);
    }

    #[test]
    fn reads_a_fake_sysfs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let roots = fake(dir.path(), 1024, 1000, true);
        let r = diagnose(&roots);
        assert_eq!(
            r.hugepages,
            vec![
                HugepagePool {
                    size_kb: 2048,
                    total: 1024,
                    free: 1000
                },
                HugepagePool {
                    size_kb: 1_048_576,
                    total: 0,
                    free: 0
                },
            ]
        );
        assert_eq!(
            r.hugetlbfs_mounts,
            vec![dir.path().join("hugepages").display().to_string()]
        );
        assert!(r.stale_hugepage_files.is_empty());
        assert_eq!(r.pmds, vec!["bus_vdev", "net_null", "net_ring"]);
        assert_eq!(
            r.devices,
            vec![
                NetDevice {
                    interface: Some("eth1".into()),
                    pci: Some("0000:02:00.0".into()),
                    driver: Some("ixgbe".into()),
                },
                NetDevice {
                    interface: None,
                    pci: Some("0000:01:00.0".into()),
                    driver: Some("vfio-pci".into()),
                },
            ]
        );
        assert!(r.vfio_pci);
        assert_eq!(r.iommu_groups, 0);
        assert!(r
            .findings
            .iter()
            .any(|f| f.area == "hugepages" && f.status == Status::Ok));
        assert!(r
            .findings
            .iter()
            .any(|f| f.area == "iommu" && f.status == Status::Warn));
        assert!(r
            .findings
            .iter()
            .any(|f| f.what.contains("net_memif not found")));
        let json = serde_json::to_string(&r).expect("json");
        assert!(json.contains("\"size_kb\":2048"), "{json}");
        let text = render(&r);
        assert!(text.contains("fix: "), "{text}");
    }

    #[test]
    fn no_hugepages_and_no_mount_are_problems_with_fixes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = diagnose(&fake(dir.path(), 0, 0, false));
        let p: Vec<&Finding> = r
            .findings
            .iter()
            .filter(|f| f.status == Status::Problem)
            .collect();
        assert!(r.has_problems());
        assert!(
            p.iter().any(|f| f
                .fix
                .as_deref()
                .is_some_and(|x| x.contains("setup-hugepages.sh"))),
            "{p:?}"
        );
        assert_eq!(r.findings[0].status, Status::Problem, "problems come first");

        let dir = tempfile::tempdir().expect("tempdir");
        let r = diagnose(&fake(dir.path(), 512, 512, false));
        assert!(r
            .findings
            .iter()
            .any(|f| f.status == Status::Problem && f.what.contains("no hugetlbfs is mounted")));

        let dir = tempfile::tempdir().expect("tempdir");
        let r = diagnose(&fake(dir.path(), 512, 0, true));
        assert!(r
            .findings
            .iter()
            .any(|f| f.status == Status::Warn && f.what.contains("in use")));
    }

    #[test]
    fn pci_addresses() {
        assert!(is_pci_address("0000:01:00.0"));
        assert!(!is_pci_address("virtio0"));
        assert!(!is_pci_address("0000:01:00"));
    }

    #[test]
    fn version_parsing() {
        assert_eq!(major_minor("22.11.11"), Some((22, 11)));
        assert_eq!(major_minor("DPDK 23.11.0"), Some((23, 11)));
        assert_eq!(major_minor("garbage"), None);
    }

    #[test]
    fn the_real_machine_reports_every_area() {
        let r = diagnose(&Roots::default());
        println!("{}", render(&r));
        for area in ["hugepages", "dpdk", "iommu", "cpu", "rdma"] {
            assert!(
                r.findings.iter().any(|f| f.area == area),
                "no {area} finding"
            );
        }
        for f in &r.findings {
            if matches!(f.status, Status::Warn | Status::Problem) {
                assert!(
                    f.fix.is_some(),
                    "a {:?} without a fix: {}",
                    f.status,
                    f.what
                );
            }
        }
    }
}
