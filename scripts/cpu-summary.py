#!/usr/bin/env python3
"""Summary of `scripts/bench-cpu`: the CPU-dependent targets and their verdicts.

    scripts/cpu-summary.py DIR      (reads DIR/lscpu.txt, DIR/NAME.txt,
                                     DIR/NAME.skipped, DIR/rpc-summary.json;
                                     writes DIR/summary.json)

Each benchmark script ends with table rows of one shape,
`| what | linerate A | PEER B | ratio R (target >= T) |` (or `<= T`), and the
verdict is read from the ratio and the target the row states, so the target
lives in one place, the script that measures it. The RPC targets come from
`scripts/rpc-summary.py`'s summary.json: the target's rule (depth-1 p50 over
the two-line ping-pong, medians over all runs) and, beside it, every regime
the runs landed in, judged apart (a shared VM's two cores may share a cache
in one run and not in the next). A benchmark that could not run is listed as
not measured, with its reason; it is never counted as met.
"""
import json
import re
import sys
from pathlib import Path

# The benchmarks bench-cpu runs, in its order, and the targets each must
# yield (a missing row is "not measured").
EXPECTED = {
    "dpdk-no-huge": ["DPDK forwarding", "DPDK generator"],
    "dpdk-huge": ["DPDK forwarding", "DPDK generator"],
    "ring": ["ring hop"],
    "spead": ["SPEAD reassembly, 1 KiB", "SPEAD reassembly, 64 KiB"],
    "encap": ["DPDK generator, one VLAN tag", "DPDK generator, VXLAN", "DPDK analyzer, one VLAN tag"],
}
ROW = re.compile(
    r"^\|\s*(?P<what>[^|]+?)\s*\|(?P<cells>.*)\|\s*ratio\s+(?P<ratio>[0-9.]+)\s+"
    r"\(target\s+(?P<op>>=|<=)\s+(?P<target>[0-9.]+)\)\s*\|\s*$"
)


def rows(text):
    """The target rows of one benchmark's output."""
    found = []
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if not m:
            continue
        ratio, target = float(m["ratio"]), float(m["target"])
        met = ratio >= target if m["op"] == ">=" else ratio <= target
        cells = [c.strip() for c in m["cells"].split("|") if c.strip()]
        found.append({
            "what": m["what"],
            "measured": f"{ratio:.2f}x ({', '.join(cells)})",
            "value": ratio,
            "target": f"{m['op']} {m['target']}x",
            "met": met,
        })
    return found


def rpc_targets(s):
    """The RPC targets from rpc-summary.py's summary.json."""
    out = [{
        "what": f"RPC depth-1 p50 / two-line ping-pong, median of {s['runs']} runs",
        "measured": f"{s['ratio_median']:.2f}x (per run {', '.join(f'{r:.2f}' for r in s['ratio_per_run'])})",
        "value": s["ratio_median"],
        "target": "<= 1.5x",
        "met": bool(s["met_median"]),
    }]
    for name, r in sorted(s.get("regimes", {}).items()):
        if name == "mixed" or not r.get("runs"):
            continue
        echo = ""
        if r.get("echo_p50_ns") is not None:
            echo = f", echo {r['echo_p50_ns']:.0f} ns, endpoint +{r['endpoint_over_echo_ns']:.0f} ns"
        out.append({
            "what": f"  the same, {name} regime only ({r['runs']} run{'s' if r['runs'] != 1 else ''})",
            "measured": f"{r['ratio_p50']:.2f}x ({r['depth1_p50_ns']:.0f} vs {r['two_line_p50_ns']:.0f} ns{echo})",
            "value": r["ratio_p50"],
            "target": "<= 1.5x",
            "met": bool(r["met"]),
            "regime": name,
        })
    out.append({
        "what": "RPC depth 256",
        "measured": f"{s['depth256_rpc_per_sec'] / 1e6:.1f} M RPC/s",
        "value": s["depth256_rpc_per_sec"],
        "target": ">= 10 M RPC/s",
        "met": bool(s["met_depth256"]),
    })
    return out


def lscpu_field(text, key):
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if k.strip() == key:
            return v.strip()
    return "unknown"


def main():
    if len(sys.argv) != 2:
        print("usage: cpu-summary.py DIR", file=sys.stderr)
        return 2
    d = Path(sys.argv[1])
    try:
        cpu = (d / "lscpu.txt").read_text()
    except OSError as e:
        print(f"cpu-summary: {e}", file=sys.stderr)
        return 2
    targets, missing = [], []

    def skipped(name):
        p = d / f"{name}.skipped"
        return p.read_text().strip() if p.exists() else None

    for name, wanted in EXPECTED.items():
        why = skipped(name)
        got = [] if why else rows((d / f"{name}.txt").read_text()) if (d / f"{name}.txt").exists() else []
        for t in got:
            t["source"] = name
        targets += got
        for w in wanted:
            if not any(t["what"].startswith(w) for t in got):
                missing.append({"what": f"{w} ({name})", "why": why or "the benchmark printed no row for it"})
    why = skipped("rpc")
    got = []
    if not why:
        try:
            got = rpc_targets(json.loads((d / "rpc-summary.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError) as e:
            why = f"no usable RPC summary ({type(e).__name__}: {e})"
    for t in got:
        t["source"] = "rpc"
    targets += got
    if not got:
        for w in ("RPC depth 1", "RPC depth 256"):
            missing.append({"what": f"{w} (rpc)", "why": why or "no RPC summary"})

    model, vendor = lscpu_field(cpu, "Model name"), lscpu_field(cpu, "Vendor ID")
    print(f"CPU: {model} ({vendor}), {lscpu_field(cpu, 'CPU(s)')} CPUs")
    width = max([len(t["what"]) for t in targets] + [len(m["what"]) for m in missing] + [6])
    print(f"{'target':{width}}  {'met':4}  {'wanted':14}  measured")
    for t in targets:
        print(f"{t['what']:{width}}  {'yes' if t['met'] else 'NO':4}  {t['target']:14}  {t['measured']}")
    for m in missing:
        print(f"{m['what']:{width}}  {'-':4}  {'':14}  not measured: {m['why']}")
    # The per-regime rows are a reading beside the target's rule, not targets
    # of their own: the count is over the rule's rows.
    judged = [t for t in targets if "regime" not in t]
    met = sum(t["met"] for t in judged)
    regimes_missed = [t["regime"] for t in targets if "regime" in t and not t["met"]]
    print(f"CPU TARGETS: {met} of {len(judged)} measured targets met, {len(missing)} not measured"
          f"{'' if missing or met < len(judged) else '; all met'}"
          + (f"; RPC regimes judged apart that miss: {', '.join(regimes_missed)}" if regimes_missed else ""))
    summary = {
        "cpu_model": model,
        "cpu_vendor": vendor,
        "targets": targets,
        "not_measured": missing,
        "met": met,
        "measured": len(judged),
        "all_met": not missing and met == len(judged),
        "rpc_regimes_missed": regimes_missed,
    }
    (d / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
