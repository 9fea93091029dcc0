#!/usr/bin/env python3
"""Summary of `scripts/bench-rpc`'s runs: medians over all runs, and per regime.

    scripts/rpc-summary.py DIR RUNS     (reads DIR/run-1.json .. DIR/run-RUNS.json,
                                         writes DIR/summary.json)

On a shared VM the two pinned cores may share a cache in one run and not in
the next (here: a two-line ping-pong of 100-130 ns against 450-500 ns). The
depth-1 ratio differs between the two, so a median over a mix of them says
which regime most runs landed in, not whether the code met its target. Each
run is put in a regime by its own two-line ping-pong p50 and depth-1 p50 (and
its shm echo p50 when it measured one): all under 1.6x the lowest of the runs
is `fast`, all over is `slow`, a mix (the placement changed between them) is
`mixed`, and so is a run any of whose measurements changed rate inside it (its median
1 ms window under 0.6 of its best one); mixed runs are left out of the
per-regime figures. When no steady run is slow they are all `one`: the split
is relative to the fastest run and says nothing about absolute speed.

Runs that measured the transport echo (the shm transport alone carrying the
depth-1 batches, `rpc bench`'s `shm echo` line) add, per regime, the echo's
p50 and what the endpoint adds over it (depth-1 p50 minus the echo's, median
over the regime's runs): the round trip split into the floor, the transport's
share and the endpoint's.

The SUMMARY line keeps the target's definition (the median over all runs); the
REGIMES line gives each regime's median ratio and its verdict, and says
whether every regime judged (those with a steady run) meets the target.
"""
import json
import statistics
import sys

TARGET = 1.5  # depth-1 p50 / two-line ping-pong p50
RATE_TARGET = 10e6  # RPC/s at depth 256
SPLIT = 1.6  # a run more than this over the fastest is in the other regime
STEADY = 0.6  # median 1 ms window over the best one, below which the rate changed inside


def depth(run, d):
    return next(x for x in run["depths"] if x["depth"] == d)


def steady(part):
    """Whether a measurement kept one rate: its median 1 ms window at least
    STEADY of its best (a regime change inside it leaves the median far
    below the best windows of the faster regime)."""
    w = part["windows"]
    return w["median_per_sec"] >= STEADY * w["max_per_sec"]


def classify(runs):
    """'fast', 'slow' or 'mixed' per run (see the module doc)."""
    two = [r["pingpong_two_lines"]["rtt"]["p50_ns"] for r in runs]
    d1 = [depth(r, 1)["latency"]["p50_ns"] for r in runs]
    echo = [r["transport_echo"]["rtt"]["p50_ns"] if r.get("transport_echo") else None for r in runs]
    t0, d0 = min(two), min(d1)
    e0 = min((e for e in echo if e is not None), default=None)
    out = []
    for r, t, d, e in zip(runs, two, d1, echo):
        fast = {t < SPLIT * t0, d < SPLIT * d0}
        parts = [r["pingpong_two_lines"], depth(r, 1)]
        if e is not None:
            # The echo runs between the two: its regime must be theirs too.
            fast.add(e < SPLIT * e0)
            parts.append(r["transport_echo"])
        if not all(steady(p) for p in parts):
            out.append("mixed")
            continue
        out.append("mixed" if len(fast) > 1 else "fast" if True in fast else "slow")
    if "slow" not in out:
        out = ["one" if g == "fast" else g for g in out]
    return out


def regime_figures(runs, regimes):
    """Per regime: runs, two-line and depth-1 p50 medians, ratio medians (of p50s, of means)."""
    figs = {}
    for name in ("one", "fast", "slow", "mixed"):
        sel = [r for r, g in zip(runs, regimes) if g == name]
        if not sel:
            continue
        two = [r["pingpong_two_lines"]["rtt"]["p50_ns"] for r in sel]
        d1 = [depth(r, 1)["latency"]["p50_ns"] for r in sel]
        ratios = [d / t for d, t in zip(d1, two)]
        means = [depth(r, 1)["mean_rtt_ns"] / r["pingpong_two_lines"]["mean_rtt_ns"] for r in sel]
        echoes = [(depth(r, 1)["latency"]["p50_ns"], r["transport_echo"]["rtt"]["p50_ns"], t)
                  for r, t in zip(sel, two) if r.get("transport_echo")]
        figs[name] = {
            "runs": len(sel),
            "echo_runs": len(echoes),
            "echo_p50_ns": statistics.median([e for _, e, _ in echoes]) if echoes else None,
            "echo_vs_two_line": statistics.median([e / t for _, e, t in echoes]) if echoes else None,
            "endpoint_over_echo_ns": statistics.median([d - e for d, e, _ in echoes]) if echoes else None,
            "two_line_p50_ns": statistics.median(two),
            "depth1_p50_ns": statistics.median(d1),
            "ratio_p50": statistics.median(ratios),
            "ratio_means": statistics.median(means),
            "ratios": ratios,
            "met": statistics.median(ratios) <= TARGET,
        }
    return figs


def main():
    if len(sys.argv) != 3:
        print("usage: rpc-summary.py DIR RUNS", file=sys.stderr)
        sys.exit(2)
    out, n = sys.argv[1], int(sys.argv[2])
    try:
        runs = [json.load(open(f"{out}/run-{i}.json")) for i in range(1, n + 1)]
    except (OSError, ValueError) as e:
        print(f"rpc-summary: cannot read the runs in {out}: {e}", file=sys.stderr)
        sys.exit(1)
    med = statistics.median
    pp_p50 = [r["pingpong"]["rtt"]["p50_ns"] for r in runs]
    pp_best = [r["pingpong"]["windows"]["max_per_sec"] for r in runs]
    print(f"\nmedians over {n} runs (machine shared with other builds: noisy)")
    print(f"  ping-pong      RTT p50 {med(pp_p50):7.0f} ns   best 1 ms window {med(pp_best)/1e6:6.2f} M round trips/s   (one line both sides write)")
    pp2_p50 = [r["pingpong_two_lines"]["rtt"]["p50_ns"] for r in runs]
    print(f"  2-line p-p     RTT p50 {med(pp2_p50):7.0f} ns   ({med([a / b for a, b in zip(pp2_p50, pp_p50)]):.2f}x ping-pong; each side writes its own line,"
          " the floor of any write into the peer's memory)")
    with_echo = [r for r in runs if r.get("transport_echo")]
    if with_echo:
        e50 = [r["transport_echo"]["rtt"]["p50_ns"] for r in with_echo]
        e_vs = [r["transport_echo"]["rtt"]["p50_ns"] / r["pingpong_two_lines"]["rtt"]["p50_ns"] for r in with_echo]
        print(f"  shm echo       RTT p50 {med(e50):7.0f} ns   ({med(e_vs):.2f}x the 2-line ping-pong; the transport alone carrying"
              f" the depth-1 batches, {len(with_echo)} of {n} runs)")
    for d in (1, 256):
        xs = [depth(r, d) for r in runs]
        p50 = med([x["latency"]["p50_ns"] for x in xs])
        ratio = med([x["latency"]["p50_ns"] / r["pingpong"]["rtt"]["p50_ns"] for x, r in zip(xs, runs)])
        print(f"  depth {d:3d}      RPC/s overall {med([x['rpc_per_sec'] for x in xs])/1e6:6.2f} M"
              f"   1 ms windows: median {med([x['windows']['median_per_sec'] for x in xs])/1e6:6.2f} M"
              f", p90 {med([x['windows']['p90_per_sec'] for x in xs])/1e6:6.2f} M"
              f", best {med([x['windows']['max_per_sec'] for x in xs])/1e6:6.2f} M"
              f"   latency p50 {p50:7.0f} ns ({ratio:.2f}x ping-pong p50)")
    d1 = [depth(r, 1) for r in runs]
    best_ratio = med([r["pingpong"]["windows"]["max_per_sec"] / x["windows"]["max_per_sec"] for x, r in zip(d1, runs)])
    r1 = med([x["latency"]["p50_ns"] / r["pingpong"]["rtt"]["p50_ns"] for x, r in zip(d1, runs)])
    per_run2 = [x["latency"]["p50_ns"] / r["pingpong_two_lines"]["rtt"]["p50_ns"] for x, r in zip(d1, runs)]
    r2 = med(per_run2)
    regimes = classify(runs)
    print(f"  depth-1 round trip vs ping-pong: {r1:.2f}x (p50 latency), {best_ratio:.2f}x (best-window rates); "
          f"vs the 2-line ping-pong: {r2:.2f}x (per run {', '.join(f'{x:.2f} {g}' for x, g in zip(per_run2, regimes))})")
    d256 = med([depth(r, 256)["rpc_per_sec"] for r in runs])
    figs = regime_figures(runs, regimes)
    for name, f in figs.items():
        print(f"  {name:5} regime: {f['runs']} run(s), 2-line p50 {f['two_line_p50_ns']:5.0f} ns, depth-1 p50 {f['depth1_p50_ns']:5.0f} ns:"
              f" {f['ratio_p50']:.2f}x (ratio of means {f['ratio_means']:.2f}x)"
              + (f"; shm echo p50 {f['echo_p50_ns']:5.0f} ns ({f['echo_vs_two_line']:.2f}x 2-line),"
                 f" endpoint {f['endpoint_over_echo_ns']:+.0f} ns over the echo" if f["echo_runs"] else ""))
    # The target as it is defined: the median over all runs.
    print(f"SUMMARY: depth-1 p50 {r2:.2f}x the 2-line ping-pong (target <= {TARGET}x: {'MET' if r2 <= TARGET else 'NOT MET'}; "
          f"runs {min(per_run2):.2f}-{max(per_run2):.2f}x; {r1:.2f}x the one-line ping-pong); "
          f"depth 256 {d256/1e6:.2f} M RPC/s (target >= 10 M: {'MET' if d256 >= RATE_TARGET else 'NOT MET'})")
    judged = {k: v for k, v in figs.items() if k != "mixed"}
    every = bool(judged) and all(v["met"] for v in judged.values())
    parts = [f"{k} {v['ratio_p50']:.2f}x ({v['runs']} run{'s' if v['runs'] > 1 else ''}) {'MET' if v['met'] else 'NOT MET'}"
             for k, v in judged.items()]
    mixed = figs.get("mixed", {}).get("runs", 0)
    print(f"REGIMES: {'; '.join(parts) or 'no run in a single regime'}"
          f"{f'; {mixed} mixed run(s) left out' if mixed else ''}"
          f"; every regime judged ({', '.join(judged) or 'none'}) meets the target: {'yes' if every else 'no'}")
    with open(f"{out}/summary.json", "w") as fh:
        json.dump({
            "runs": n,
            "regime_per_run": regimes,
            "ratio_per_run": per_run2,
            "ratio_median": r2,
            "met_median": r2 <= TARGET,
            "regimes": figs,
            "met_every_regime": every,
            "depth256_rpc_per_sec": d256,
            "met_depth256": d256 >= RATE_TARGET,
        }, fh, indent=2)


if __name__ == "__main__":
    main()
