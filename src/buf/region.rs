//! The memory region a pool is carved from: anonymous memory, or a file on a
//! hugetlbfs mount (2 MiB pages) when the pipeline asks for hugepages.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapMut, MmapOptions};

use super::PoolError;

/// Whether a pool's region is backed by hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HugepageMode {
    /// Anonymous memory with normal pages.
    #[default]
    Off,
    /// Hugepages when a hugetlbfs mount has room, anonymous memory otherwise.
    Auto,
    /// Hugepages or an error.
    Required,
}

const HUGEPAGE: usize = 2 << 20;

/// A mapped region and how it is backed.
pub(super) struct Region {
    pub(super) map: MmapMut,
    pub(super) hugepages: bool,
}

/// The first hugetlbfs mount with the default (2 MiB) page size, from /proc/mounts.
pub(crate) fn hugetlbfs_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut f = line.split_whitespace();
        let (_dev, dir, fstype, opts) = (f.next()?, f.next()?, f.next()?, f.next()?);
        let two_mib = !opts.contains("pagesize=") || opts.contains("pagesize=2M");
        (fstype == "hugetlbfs" && two_mib).then(|| PathBuf::from(dir))
    })
}

fn map_hugetlbfs(len: usize) -> Result<Region, PoolError> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = hugetlbfs_mount().ok_or(PoolError::NoHugetlbfs)?;
    let len = len.div_ceil(HUGEPAGE) * HUGEPAGE;
    let path = dir.join(format!(
        "linerate-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| PoolError::Hugepages(format!("cannot create {}: {e}", path.display())))?;
    // The mapping keeps the pages; the name is not needed once mapped.
    let _ = std::fs::remove_file(&path);
    file.set_len(len as u64)
        .map_err(|e| PoolError::Hugepages(format!("cannot size {}: {e}", path.display())))?;
    // SAFETY: the file was created by us with create_new and unlinked at once, so no
    // other process or thread can truncate or write it behind the mapping.
    let map = unsafe { MmapOptions::new().len(len).populate().map_mut(&file) }.map_err(|e| {
        PoolError::Hugepages(format!(
            "cannot map {len} bytes of hugepages under {}: {e} (free hugepages: {})",
            dir.display(),
            free_hugepages().map_or("unknown".into(), |n| n.to_string())
        ))
    })?;
    Ok(Region {
        map,
        hugepages: true,
    })
}

fn free_hugepages() -> Option<u64> {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Maps `len` bytes as asked, touching every page so that no page fault lands on
/// the hot path later.
pub(super) fn map(len: usize, mode: HugepageMode) -> Result<Region, PoolError> {
    let region = match mode {
        HugepageMode::Off => None,
        HugepageMode::Auto => map_hugetlbfs(len).ok(),
        HugepageMode::Required => Some(map_hugetlbfs(len)?),
    };
    let mut region = match region {
        Some(r) => r,
        None => Region {
            map: MmapMut::map_anon(len).map_err(|e| PoolError::Map(len, e.to_string()))?,
            hugepages: false,
        },
    };
    for page in region.map.chunks_mut(4096) {
        page[0] = 0;
    }
    Ok(region)
}
