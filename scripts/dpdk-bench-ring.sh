#!/usr/bin/env bash
# Two-lcore hop against single-lcore forwarding on a net_null pair with the
# sys::dpdk wrappers (benches/dpdk_fwd.rs): modes `one` (rx+tx on lcore 1),
# `ring` (rx on lcore 1 -> SP/SC rte_ring -> tx on a registered thread on
# CPU 0) and `ring-noreg` (that thread not registered: its mbuf frees bypass
# the mempool lcore cache). Alternating rounds; prints medians and ratios.
#
#   scripts/dpdk-bench-ring.sh [ROUNDS] [SECS] [huge]
set -euo pipefail
rounds="${1:-5}"
secs="${2:-3}"
[[ "${3:-}" == huge ]] && export LINERATE_BENCH_HUGE=1
export LINERATE_BENCH_SECS="$secs"
cd "$(dirname "$0")/.."
cargo build --release --features dpdk --bench dpdk_fwd >/dev/null 2>&1
bin=$(ls -t target/release/deps/dpdk_fwd-* | grep -v '\.d$' | head -n1)
declare -A res
modes=(one ring ring-noreg)
for ((i = 0; i < rounds; i++)); do
    for ((k = 0; k < ${#modes[@]}; k++)); do
        m=${modes[$(( (k + i) % ${#modes[@]} ))]}
        v=$(LINERATE_BENCH_MODE=$m "$bin" | grep -o "tx_pps=[0-9]*" | cut -d= -f2)
        res[$m]="${res[$m]:-} $v"
        echo "round $i $m tx_pps=$v"
    done
done
med() { printf '%s\n' $@ | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
one=$(med ${res[one]})
for m in "${modes[@]}"; do
    v=$(med ${res[$m]})
    echo "median $m $v pps, ratio to one $(awk -v a="$v" -v b="$one" 'BEGIN{printf "%.3f", a/b}')"
done
