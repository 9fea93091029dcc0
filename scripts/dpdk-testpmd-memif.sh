#!/usr/bin/env bash
# Start dpdk-testpmd as the external peer of a linerate dpdk port over
# net_memif: testpmd is the memif *server* on SOCKET and loops every packet
# it receives back out of the same port.
#
#   scripts/dpdk-testpmd-memif.sh SOCKET [MODE] [LCORES]
#     SOCKET  memif control socket path (a file path, not abstract)
#     MODE    testpmd forwarding mode: io (default; packets return unchanged)
#             or macswap (source/destination MACs swapped)
#     LCORES  testpmd EAL lcores (default 0-1: main + one forwarding lcore)
#
# linerate's side then uses the EAL argument
#   --vdev=net_memif0,role=client,socket=SOCKET,socket-abstract=no
# Runs in the foreground until Enter on stdin (or SIGINT/SIGTERM); needs no
# hugepages (--no-huge). The test tests/dpdk_memif_testpmd.rs starts it.
set -euo pipefail

sock="${1:?usage: $0 SOCKET [io|macswap] [LCORES]}"
mode="${2:-io}"
lcores="${3:-0-1}"
case "$mode" in
    io|macswap) ;;
    *) echo "dpdk-testpmd-memif: MODE must be io or macswap, got '$mode'" >&2; exit 2 ;;
esac
if ! command -v dpdk-testpmd >/dev/null; then
    echo "dpdk-testpmd-memif: dpdk-testpmd not found; install it: apt-get install -y dpdk" >&2
    exit 1
fi
rm -f "$sock"
exec dpdk-testpmd -l "$lcores" --no-huge -m 512 --no-pci --no-telemetry \
    --file-prefix="linerate-testpmd-$$" \
    --vdev="net_memif0,role=server,socket=$sock,socket-abstract=no" \
    -- --forward-mode="$mode" --auto-start --rxq=1 --txq=1 --nb-cores=1 \
    --total-num-mbufs=8192 --no-mlockall
