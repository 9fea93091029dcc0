//! Judging what [`diagnose`](super::diagnose) found: one function per area,
//! each turning the report's facts into findings, with a fix for every
//! warning and problem.

use super::{major_minor, stale_prefixes, Finding, Report, Status};

/// Findings in the order they are made (the report sorts them, problems
/// first, keeping this order within a status).
struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, area: &'static str, status: Status, what: String, fix: Option<&str>) {
        self.0.push(Finding {
            area,
            status,
            what,
            fix: fix.map(str::to_string),
        });
    }
}

/// Every area's findings about `r`, problems first.
pub(super) fn judge(r: &Report) -> Vec<Finding> {
    let mut f = Findings(Vec::new());
    hugepages(r, &mut f);
    dpdk(r, &mut f);
    devices(r, &mut f);
    iommu(r, &mut f);
    cpu(r, &mut f);
    rdma(r, &mut f);
    let mut f = f.0;
    f.sort_by_key(|x| match x.status {
        Status::Problem => 0,
        Status::Warn => 1,
        Status::Ok => 2,
        Status::Info => 3,
    });
    f
}

/// Pages reserved and free, files left by dead DPDK processes, mounts.
fn hugepages(r: &Report, f: &mut Findings) {
    let hp = &r.hugepages;
    let mounts = &r.hugetlbfs_mounts;
    let total_kb: u64 = hp.iter().map(|p| p.total * p.size_kb).sum();
    let free_kb: u64 = hp.iter().map(|p| p.free * p.size_kb).sum();
    for p in hp {
        f.add(
            "hugepages",
            Status::Info,
            format!("{} kB pages: {} free of {}", p.size_kb, p.free, p.total),
            None,
        );
    }
    if hp.is_empty() {
        f.add(
            "hugepages",
            Status::Problem,
            "the kernel reports no hugepage sizes (no /sys/kernel/mm/hugepages)".into(),
            Some("use a kernel with CONFIG_HUGETLBFS, or run DPDK with --no-huge -m 512 in the pipeline's [eal] section"),
        );
    } else if total_kb == 0 {
        f.add(
            "hugepages",
            Status::Problem,
            "no hugepages reserved: DPDK needs --no-huge (slower, no physical addresses) until some are".into(),
            Some("sudo scripts/setup-hugepages.sh 1024   (reserves 1024 x 2 MiB and mounts hugetlbfs), or add --no-huge -m 512 to [eal]"),
        );
    } else if free_kb == 0 {
        f.add(
            "hugepages",
            Status::Warn,
            format!("all {} MiB of hugepages are in use", total_kb / 1024),
            Some("stop other DPDK processes, remove stale files under the hugetlbfs mount (rte_* files of dead processes), or reserve more: sudo scripts/setup-hugepages.sh 2048"),
        );
    } else {
        f.add(
            "hugepages",
            Status::Ok,
            format!(
                "{} MiB free of {} MiB reserved",
                free_kb / 1024,
                total_kb / 1024
            ),
            None,
        );
    }
    let stale = &r.stale_hugepage_files;
    if !stale.is_empty() {
        let bytes: u64 = stale.iter().map(|f| f.bytes).sum();
        let globs = stale_prefixes(stale);
        f.add(
            "hugepages",
            if free_kb == 0 { Status::Problem } else { Status::Warn },
            format!(
                "{} hugepage file{} that no process holds keep{} {} MiB reserved ({}): a DPDK process was killed before it cleaned up",
                stale.len(),
                if stale.len() == 1 { "" } else { "s" },
                if stale.len() == 1 { "s" } else { "" },
                bytes / (1024 * 1024),
                globs.join(", ")
            ),
            Some(&format!("rm -f {}", globs.join(" "))),
        );
    }
    if total_kb > 0 && mounts.is_empty() {
        f.add(
            "hugepages",
            Status::Problem,
            "hugepages are reserved but no hugetlbfs is mounted".into(),
            Some("sudo scripts/setup-hugepages.sh   (mounts hugetlbfs at /dev/hugepages), or: sudo mount -t hugetlbfs nodev /dev/hugepages"),
        );
    } else if !mounts.is_empty() {
        f.add(
            "hugepages",
            Status::Ok,
            format!("hugetlbfs mounted at {}", mounts.join(", ")),
            None,
        );
    }
}

/// DPDK installed and linked, its PMD plugins.
fn dpdk(r: &Report, f: &mut Findings) {
    let (pkg, linked) = (&r.dpdk_pkg_version, &r.dpdk_linked_version);
    let (pmd_dirs, pmd_names) = (&r.pmd_dirs, &r.pmds);
    match (&pkg, &linked) {
        (None, None) => f.add(
            "dpdk",
            Status::Problem,
            "DPDK is not installed (pkg-config libdpdk not found)".into(),
            Some("sudo apt-get install -y dpdk dpdk-dev libdpdk-dev, then build with --features dpdk"),
        ),
        _ => {
            if let Some(v) = &pkg {
                let old = major_minor(v).is_some_and(|mm| mm < (22, 11));
                f.add(
                    "dpdk",
                    if old { Status::Problem } else { Status::Ok },
                    format!("libdpdk {v} (pkg-config)"),
                    old.then_some("linerate needs DPDK >= 22.11 (Debian 12's dpdk package or newer)"),
                );
            }
            match &linked {
                Some(v) => f.add("dpdk", Status::Ok, format!("linked: {v}"), None),
                None => f.add(
                    "dpdk",
                    Status::Info,
                    "this linerate binary was built without feature `dpdk`: dpdk ports are unavailable".into(),
                    Some("cargo build --release --features dpdk"),
                ),
            }
        }
    }
    if pmd_dirs.is_empty() {
        if pkg.is_some() || linked.is_some() {
            f.add(
                "dpdk",
                Status::Warn,
                "no DPDK PMD plugin directory (<libdir>/dpdk/pmds-*) found; vdevs such as net_null must then be linked in or loaded with -d".into(),
                Some("sudo apt-get install -y dpdk (Debian ships the PMDs as plugins), or add -d <path/to/librte_net_null.so> to [eal]"),
            );
        }
    } else {
        let nets: Vec<&str> = pmd_names
            .iter()
            .filter(|n| n.starts_with("net_"))
            .map(String::as_str)
            .collect();
        f.add(
            "dpdk",
            Status::Ok,
            format!(
                "{} PMDs in {} ({} net: {})",
                pmd_names.len(),
                pmd_dirs.join(", "),
                nets.len(),
                nets.join(" ")
            ),
            None,
        );
        for want in [
            "net_null",
            "net_ring",
            "net_memif",
            "net_pcap",
            "net_af_packet",
        ] {
            if !pmd_names.iter().any(|n| n == want) {
                f.add(
                    "dpdk",
                    Status::Warn,
                    format!("PMD {want} not found: the {want} vdev is unavailable"),
                    Some("sudo apt-get install -y dpdk (its PMD set includes it)"),
                );
            }
        }
    }
}

/// Network devices and whether any is bound for DPDK.
fn devices(r: &Report, f: &mut Findings) {
    let devs = &r.devices;
    let mut dpdk_bound = 0;
    for d in devs {
        let drv = d.driver.as_deref().unwrap_or("(no driver)");
        if matches!(drv, "vfio-pci" | "uio_pci_generic" | "igb_uio") {
            dpdk_bound += 1;
        }
        f.add(
            "devices",
            Status::Info,
            format!(
                "{} {} driver {drv}",
                d.interface.as_deref().unwrap_or("-"),
                d.pci.as_deref().unwrap_or("(not PCI)"),
            ),
            None,
        );
    }
    let nics = devs.iter().filter(|d| d.pci.is_some()).count();
    if nics > 0 && dpdk_bound == 0 {
        f.add(
            "devices",
            Status::Info,
            format!("{nics} PCI NIC(s), none bound to vfio-pci: DPDK can use them only through PMDs that work with the kernel driver (mlx5, af_packet, af_xdp)"),
            Some("to give a NIC to DPDK: sudo modprobe vfio-pci; sudo dpdk-devbind.py -b vfio-pci <pci address> (the interface leaves the kernel)"),
        );
    }
}

/// IOMMU groups and vfio-pci.
fn iommu(r: &Report, f: &mut Findings) {
    let (iommu_groups, vfio_pci) = (r.iommu_groups, r.vfio_pci);
    if iommu_groups == 0 {
        f.add(
            "iommu",
            Status::Warn,
            "no IOMMU groups: the IOMMU is off, so vfio-pci works only in no-IOMMU mode".into(),
            Some("add intel_iommu=on iommu=pt (or amd_iommu=on) to the kernel command line and reboot; or, for labs only: echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode"),
        );
    } else {
        f.add(
            "iommu",
            Status::Ok,
            format!("{iommu_groups} IOMMU groups"),
            None,
        );
    }
    f.add(
        "iommu",
        if vfio_pci { Status::Ok } else { Status::Info },
        format!(
            "vfio-pci module {}",
            if vfio_pci { "loaded" } else { "not loaded" }
        ),
        (!vfio_pci).then_some("sudo modprobe vfio-pci   (needed only to bind PCI NICs to DPDK)"),
    );
}

/// Isolated and nohz_full cores.
fn cpu(r: &Report, f: &mut Findings) {
    let (isolated, nohz) = (&r.isolated_cpus, &r.nohz_full);
    if isolated.is_empty() {
        f.add(
            "cpu",
            Status::Warn,
            "no isolated cores: lcores share their CPUs with the rest of the system (noisy results)".into(),
            Some("add isolcpus=<cores> nohz_full=<cores> rcu_nocbs=<cores> to the kernel command line and pin lcores there (pipeline lcores = \"...\")"),
        );
    } else {
        f.add(
            "cpu",
            Status::Ok,
            format!("isolated cores: {isolated}"),
            None,
        );
    }
    if !nohz.is_empty() {
        f.add("cpu", Status::Ok, format!("nohz_full cores: {nohz}"), None);
    }
}

/// RDMA devices.
fn rdma(r: &Report, f: &mut Findings) {
    let rdma = &r.rdma_devices;
    if rdma.is_empty() {
        f.add(
            "rdma",
            Status::Info,
            "no RDMA devices (/sys/class/infiniband is empty): ibverbs ports are unavailable".into(),
            Some("an RDMA-capable NIC (e.g. ConnectX with mlx5_ib) and apt-get install ibverbs-providers rdma-core"),
        );
    } else {
        f.add(
            "rdma",
            Status::Ok,
            format!("RDMA devices: {}", rdma.join(", ")),
            None,
        );
    }
}
