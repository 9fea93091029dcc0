#!/usr/bin/env bash
# Single-lcore net_null forwarding, side by side and alternating: the
# sys::dpdk wrapper loop (benches/dpdk_fwd.rs) against dpdk-testpmd
# --forward-mode=io, same EAL memory arguments, burst 32, one forwarding
# lcore each (testpmd also needs its main lcore, so it runs on -l 0-1 with
# forwarding on lcore 1; ours runs on -l 1). Both count rx packets over both
# ports per second. Prints each run, the medians and the ratio.
#
#   scripts/dpdk-bench-fwd.sh [ROUNDS] [SECS] [huge]
set -euo pipefail
rounds="${1:-5}"
secs="${2:-3}"
huge="${3:-}"
cd "$(dirname "$0")/.."
cargo build --release --features dpdk --bench dpdk_fwd >/dev/null 2>&1 || \
    cargo bench --features dpdk --bench dpdk_fwd --no-run
bin=$(ls -t target/release/deps/dpdk_fwd-* | grep -v '\.d$' | head -n1)
if [[ "$huge" == huge ]]; then mem=(-m 256 --huge-unlink); export LINERATE_BENCH_HUGE=1; else mem=(--no-huge -m 256); fi
export LINERATE_BENCH_SECS="$secs"

testpmd_pps() {
    local out
    out=$( { echo start; sleep "$secs"; echo stop; sleep 0.5; echo quit; } | \
        dpdk-testpmd -l 0-1 "${mem[@]}" --no-pci --no-telemetry --file-prefix="linerate-tp-$$" \
        --vdev=net_null0 --vdev=net_null1 --log-level=lib.eal:error -- \
        -i --forward-mode=io --burst=32 --nb-cores=1 --total-num-mbufs=16383 --no-mlockall 2>&1)
    local rx
    rx=$(echo "$out" | grep -A2 "Accumulated forward statistics" | grep -o "RX-packets: [0-9]*" | grep -o "[0-9]*")
    echo $(( rx / secs ))
}

ours=(); theirs=()
for ((i = 0; i < rounds; i++)); do
    for who in $([[ $((i % 2)) -eq 0 ]] && echo "ours testpmd" || echo "testpmd ours"); do
        if [[ $who == ours ]]; then
            v=$("$bin" | grep -o "rx_pps_total=[0-9]*" | cut -d= -f2)
            ours+=("$v"); echo "round $i linerate-wrappers rx_pps_total=$v"
        else
            v=$(testpmd_pps)
            theirs+=("$v"); echo "round $i testpmd-io       rx_pps_total=$v"
        fi
    done
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mo=$(med "${ours[@]}"); mt=$(med "${theirs[@]}")
echo "median linerate-wrappers $mo pps, testpmd-io $mt pps, ratio $(awk -v a="$mo" -v b="$mt" 'BEGIN{printf "%.3f", a/b}') (${huge:-no-huge})"
