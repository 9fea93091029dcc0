#!/usr/bin/env python3
"""MLRsearch 1.2.1 on the simulated DUT of linerate (src/search/sim.rs), and the sim's test vectors.

The sim model is implemented here independently of the Rust code (from the issue's formulas),
so `--vectors` pins the Rust implementation (src/search/sim.rs tests) and MLRsearch runs on
the very same devices as linerate's searchers.

Usage:
  search-mlrsearch.py --vectors
  search-mlrsearch.py --sim "ndr=12e6,pdr=12.24e6,plr=0.005,seed=1" [--sim ...] --final 30
"""
import argparse
import json
import math
import sys

M64 = (1 << 64) - 1
G1, G2, G3 = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03, 0x8CB92BA72F3D8DD7


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def u(seed, k, j):
    return (splitmix64((seed * G1 + k * G2 + j * G3) & M64) >> 11) / float(1 << 53)


def parse_model(text):
    m = dict(ndr=12e6, pdr=12.2e6, plr=0.005, jitter=0.0, spike_rate=0.0, spike_len=0.0,
             buffer=0.0, seed=1)
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, value = part.split("=", 1)
        key = key.strip()
        m[key] = int(value) if key == "seed" else float(value)
    return m


def trial(m, k, load, duration):
    """Returns (offered, loss) of trial k at load L for duration D."""
    if m["jitter"] == 0:
        f = 1.0
    else:
        z = math.sqrt(-2.0 * math.log(1.0 - u(m["seed"], k, 1))) * math.cos(
            2.0 * math.pi * u(m["seed"], k, 2))
        f = math.exp(m["jitter"] * z)
    c1, c2 = m["ndr"] * f, m["pdr"] * f
    big_f = c2 * (1.0 - m["plr"])
    if load <= c1:
        r = 0.0
    elif load <= c2:
        r = m["plr"] * (load - c1) / (c2 - c1)
    else:
        r = 1.0 - big_f / load
    offered = math.floor(load * duration)
    loss = max(0.0, math.ceil(r * offered) - m["buffer"])
    if u(m["seed"], k, 0) < 1.0 - (1.0 - m["spike_rate"]) ** duration:
        loss += math.ceil(load * m["spike_len"])
    loss = min(loss, offered)
    return int(offered), int(loss)


VECTOR_MODELS = [
    "ndr=12e6,pdr=12.2e6,plr=0.005,seed=1",
    "ndr=1e6,pdr=1.02e6,plr=0.005,jitter=0.01,seed=2",
    "ndr=5e6,pdr=5.1e6,plr=0.005,jitter=0.02,spike_rate=0.02,spike_len=1e-4,seed=3",
    "ndr=20e6,pdr=20.4e6,plr=0.005,buffer=2e6,seed=4",
    "ndr=10e6,pdr=10.2e6,plr=0.01,jitter=0.05,spike_rate=0.5,spike_len=0.001,buffer=1000,seed=18446744073709551615",
]


def vectors():
    rows = []
    for model in VECTOR_MODELS:
        m = parse_model(model)
        for k in (0, 1, 2, 7, 1000):
            for load, duration in ((m["ndr"] * 0.99, 1.0), (m["ndr"] * 1.005, 5.477),
                                   ((m["ndr"] + m["pdr"]) / 2, 30.0), (m["pdr"] * 1.5, 2.0)):
                offered, loss = trial(m, k, load, duration)
                rows.append((model, k, load, duration, offered, loss))
    for row in rows:
        print('    ("%s", %d, %r, %r, %d, %d),' % row)
    print("splitmix64(0) = %#x, u(1,0,0) = %r" % (splitmix64(0), u(1, 0, 0)))


def run_mlrsearch(model, final, width, plr, min_rate, max_rate, initial, phases):
    from MLRsearch import AbstractMeasurer, Config, MeasurementResult, MultipleLossRatioSearch
    from MLRsearch import SearchGoal

    class SimMeasurer(AbstractMeasurer):
        def __init__(self, m):
            self.m = m
            self.k = 0
            self.trials = []

        def measure(self, intended_duration, intended_load):
            offered, loss = trial(self.m, self.k, intended_load, intended_duration)
            self.k += 1
            self.trials.append((intended_load, intended_duration, offered, loss))
            return MeasurementResult(
                intended_duration=intended_duration,
                intended_load=intended_load,
                offered_count=offered,
                loss_count=loss,
                offered_duration=intended_duration,
                duration_with_overheads=intended_duration,
            )

    # CSIT's conservative goals: one final-duration trial decides (exceed ratio 0).
    goals = [
        SearchGoal(loss_ratio=0.0, exceed_ratio=0.0, relative_width=width,
                   initial_trial_duration=initial, final_trial_duration=final,
                   duration_sum=final, preceding_targets=phases, expansion_coefficient=2,
                   fail_fast=False),
        SearchGoal(loss_ratio=plr, exceed_ratio=0.0, relative_width=width,
                   initial_trial_duration=initial, final_trial_duration=final,
                   duration_sum=final, preceding_targets=phases, expansion_coefficient=2,
                   fail_fast=False),
    ]
    config = Config()
    config.goals = goals
    config.min_load = min_rate
    config.max_load = max_rate
    config.search_duration_max = 1e9
    config.warmup_duration = None
    m = parse_model(model)
    measurer = SimMeasurer(m)
    result = MultipleLossRatioSearch(config=config).search(measurer=measurer,
                                                           debug=lambda _msg: None)
    out = {"trials": len(measurer.trials),
           "trial_list": measurer.trials,
           "trial_duration_sum_s": sum(t[1] for t in measurer.trials),
           "goals": []}
    for goal in goals:
        gr = result[goal]
        out["goals"].append({
            "loss_ratio": goal.loss_ratio,
            "lower_pps": None if gr.relevant_lower_bound is None else float(gr.relevant_lower_bound),
            "upper_pps": None if gr.relevant_upper_bound is None else float(gr.relevant_upper_bound),
        })
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vectors", action="store_true")
    ap.add_argument("--sim", action="append",
                    help="model (repeatable; one JSON line per model)")
    ap.add_argument("--final", type=float, default=30.0)
    ap.add_argument("--initial", type=float, default=1.0)
    ap.add_argument("--width", type=float, default=0.005)
    ap.add_argument("--plr", type=float, default=0.005)
    ap.add_argument("--phases", type=int, default=2)
    ap.add_argument("--min-rate", type=float, default=2 * 10e3)
    ap.add_argument("--max-rate", type=float, default=2 * 14.88e6)
    args = ap.parse_args()
    if args.vectors:
        vectors()
        return 0
    for model in args.sim or ["ndr=12e6,pdr=12.24e6,plr=0.005"]:
        out = run_mlrsearch(model, args.final, args.width, args.plr, args.min_rate,
                            args.max_rate, args.initial, args.phases)
        out["model"] = model
        json.dump(out, sys.stdout)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
