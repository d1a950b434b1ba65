#!/usr/bin/python3
"""Fits dcomm-sim --local's CPU model (the wake-up after a wait, a step's processor time) to
measured times.

    bench/peers/compare.py -N 8 -r 3 --peers '' --algos ring,recursive_doubling,rabenseifner,tree,double_tree \\
        -e 32M --json measured.json
    bench/peers/fit_sim.py measured.json [other.json ...] [--wake 0.5,1,2] [--step-cpu 0.1,0.3,1]

For every (wake-up, step) pair of the grid, runs dcomm-sim --local N and compares, per size and
algorithm, its time over the ring's with the measured one (compare.py --sim's comparison);
prints how many fall within 25%, best pairs first. The pairs are ranked on the first file; the
others (separate compare.py runs) tell whether the fit holds beyond the data it was made on.
"""
import argparse
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import human, sim_errors, sim_predictions  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("json", nargs="+", help="compare.py --json files (ranked on the first, checked on the others)")
    p.add_argument("--wake", default="0.25,0.5,1,1.5,2,3,4")
    p.add_argument("--step-cpu", default="0.05,0.1,0.2,0.3,0.5,0.8,1.2")
    p.add_argument("--top", type=int, default=8)
    a = p.parse_args()
    runs = []
    for path in a.json:
        j = json.load(open(path))
        runs.append({s: {r["size"]: r["time_us"] for r in rows} for s, rows in j["systems"].items()})
    n = json.load(open(a.json[0]))["ranks"]
    grid = []
    for wake, step in itertools.product(map(float, a.wake.split(",")), map(float, a.step_cpu.split(","))):
        pred = sim_predictions(n, ["--wake", str(wake), "--step-cpu", str(step)])
        counts = []
        for med in runs:
            cells = [pr / mr - 1 for row in sim_errors(pred, med, sorted(pred)).values() for pr, mr in row.values()]
            counts.append((sum(abs(e) <= 0.25 for e in cells), len(cells)))
        grid.append((counts, wake, step, sim_errors(pred, runs[0], sorted(pred))))
    grid.sort(key=lambda g: (-g[0][0][0], -sum(c for c, _ in g[0])))
    print(f"# {n} ranks: predictions within 25% of each measurement ({', '.join(a.json)}), by wake-up and step")
    for counts, wake, step, _ in grid[: a.top]:
        print(f"--wake {wake:<5} --step-cpu {step:<5} " + "  ".join(f"{c}/{t}" for c, t in counts))
    _, wake, step, rows = grid[0]
    algos = sorted({x for row in rows.values() for x in row})
    print(f"# best: --wake {wake} --step-cpu {step}; predicted / measured over the ring's, first measurement:")
    print(f"{'size':>9}" + "".join(f" {x:>19}" for x in algos))
    for z, row in rows.items():
        print(f"{human(z):>9}" + "".join(f" {row[x][0] / row[x][1] - 1:+19.0%}" if x in row else f" {'-':>19}"
                                          for x in algos))


if __name__ == "__main__":
    main()
