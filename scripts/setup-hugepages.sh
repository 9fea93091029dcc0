#!/usr/bin/env bash
# Reserve 2 MiB hugepages and mount hugetlbfs for DPDK. Idempotent: running it
# again with the same count changes nothing. Says what it did and how to undo.
#
#   sudo scripts/setup-hugepages.sh [COUNT] [MOUNTPOINT]
#     COUNT       number of 2 MiB pages to reserve (default 1024 = 2 GiB)
#     MOUNTPOINT  where hugetlbfs should be mounted (default /dev/hugepages,
#                 or /mnt/huge if /dev/hugepages cannot be created)
#
# The reservation does not survive a reboot; for that add
# `vm.nr_hugepages = COUNT` to /etc/sysctl.d/ or `hugepages=COUNT` to the
# kernel command line.
set -euo pipefail

count="${1:-1024}"
mnt="${2:-/dev/hugepages}"
sysdir=/sys/kernel/mm/hugepages/hugepages-2048kB

if ! [[ "$count" =~ ^[0-9]+$ ]]; then
    echo "setup-hugepages: COUNT must be a non-negative integer, got '$count'" >&2
    exit 2
fi
if [[ ! -d "$sysdir" ]]; then
    echo "setup-hugepages: this kernel has no 2 MiB hugepages ($sysdir missing)" >&2
    echo "  use --no-huge -m 512 in the pipeline's [eal] section instead" >&2
    exit 1
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "setup-hugepages: needs root (try: sudo $0 $*)" >&2
    exit 1
fi

before=$(cat "$sysdir/nr_hugepages")
if [[ "$before" -eq "$count" ]]; then
    echo "hugepages: already $count x 2 MiB reserved (nothing changed)"
else
    echo "$count" > "$sysdir/nr_hugepages"
    after=$(cat "$sysdir/nr_hugepages")
    echo "hugepages: reserved 2 MiB pages: $before -> $after (requested $count)"
    if [[ "$after" -lt "$count" ]]; then
        echo "  warning: the kernel could reserve only $after (memory fragmented or too small);" \
             "try again after freeing memory, or reserve at boot (hugepages=$count)" >&2
    fi
    echo "  undo: echo $before | sudo tee $sysdir/nr_hugepages"
fi

if grep -qs " hugetlbfs " /proc/mounts && awk '$3 == "hugetlbfs" {print $2}' /proc/mounts | grep -qx "$mnt"; then
    echo "hugetlbfs: already mounted at $mnt (nothing changed)"
else
    existing=$(awk '$3 == "hugetlbfs" {print $2}' /proc/mounts | head -n1)
    if [[ -n "$existing" && $# -lt 2 ]]; then
        echo "hugetlbfs: already mounted at $existing (nothing changed)"
        mnt="$existing"
    else
        if ! mkdir -p "$mnt" 2>/dev/null; then
            mnt=/mnt/huge
            mkdir -p "$mnt"
        fi
        mount -t hugetlbfs -o pagesize=2M nodev "$mnt"
        echo "hugetlbfs: mounted at $mnt"
        echo "  undo: sudo umount $mnt"
    fi
fi

free=$(cat "$sysdir/free_hugepages")
echo "now: $(cat "$sysdir/nr_hugepages") x 2 MiB reserved, $free free; DPDK finds them via $mnt (or pass --huge-dir=$mnt in [eal])"
echo "check with: linerate doctor"
