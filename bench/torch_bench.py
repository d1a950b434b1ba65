#!/usr/bin/python3
"""torch.distributed.all_reduce on float32 CPU tensors, 2 processes, 8 B to 256 MiB: the dcomm
backend (dcomm_torch) side by side with Gloo and with dcomm's native call (dcomm-bench), in one
run; each median of alternating rounds. Prints the table and, with --png, plots busbw.

    /usr/bin/python3 bench/torch_bench.py [--bench build/bench/dcomm-bench] [-N 2] [-r 3] [--png out.png]
                                          [--python PY]

--python: the Python whose torch and dcomm_torch are measured (default Debian's, torch 1.13,
with build/python's dcomm_torch); e.g. the newest torch's venv (scripts/lib/pypi-venvs.sh),
whose dcomm_torch is the one pip installed there.

Columns (microseconds per call, the slowest rank's): bench = dcomm-bench's in-place all_reduce
(its own processes); native = the same group's dcomm communicator called directly inside the
torch processes, alternating with c++ = the backend's allreduce().wait() called from C++ (no
Python binding, no dispatcher); pg = the process group's allreduce([t]).wait() from Python (no
torch.distributed wrapper); dist = torch.distributed.all_reduce(t) with backend "dcomm"; gloo =
dist with Gloo. The backend's overhead is c++ - native (same processes, same buffer, alternating,
so the machine's drift cancels); what torch's own layers add (dist - c++) every backend pays
alike, and is printed beside it.

Goals it reports: dcomm at least 10x faster than Gloo up to 64 KiB and 3x from 1 MiB (dist
against dist); the backend's overhead over the native call at most 3 us + 5%.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


FACTOR = "2"


def torch_run(backend, n, lo, hi, py=PY):
    """{size: [dist us, pg us, c++ us, native us]} (dcomm) or {size: [dist us]} (gloo)."""
    env = dict(os.environ)
    if py == PY:  # Debian's torch: the package CMake built (a venv has its own, from pip)
        env["PYTHONPATH"] = os.path.join(ROOT, "build", "python") + os.pathsep + os.environ.get("PYTHONPATH", "")
    extra = ["--direct"] if backend == "dcomm" else []
    out = subprocess.run([py, os.path.join(HERE, "peers", "gloo_bench.py"), "all_reduce", "-N", str(n), "-b", lo, "-e", hi,
                          "-f", FACTOR, "-n", "0", "-w", "5", "--backend", backend] + extra, capture_output=True, text=True,
                         env=env, check=True).stdout
    rows = [l.split() for l in out.splitlines() if l and l[0].isdigit()]
    return {int(r[0]): [float(r[1])] + [float(x) for x in r[4:]] for r in rows}


def native_run(bench, n, lo, hi, iters):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([bench, "all_reduce", "-N", str(n), "-b", lo, "-e", hi, "-f", FACTOR, "-n", str(iters), "-w", "20",
                        "-c", "0", "-J", f.name], capture_output=True, check=True)
        rows = json.load(open(f.name))["results"]
    return {r["size"]: [r["time_us"]] for r in rows if r["in_place"]}  # torch all_reduce is in place


def human(z):
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if z >= 1 << k:
            return f"{z >> k} {unit}"
    return f"{z} B"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "dcomm-bench"))
    p.add_argument("-N", type=int, default=2)
    p.add_argument("-r", type=int, default=3, help="rounds (median)")
    p.add_argument("--png")
    p.add_argument("--python", default=PY, help="the Python whose torch is measured")
    a = p.parse_args()
    runs = {"bench": [], "dcomm": [], "gloo": []}
    for _ in range(a.r):
        native = native_run(a.bench, a.N, "8", "32K", 20000)
        native.update(native_run(a.bench, a.N, "64K", "4M", 500))
        native.update(native_run(a.bench, a.N, "8M", "256M", 20))
        runs["bench"].append(native)
        runs["dcomm"].append(torch_run("dcomm", a.N, "8", "256M", a.python))
        runs["gloo"].append(torch_run("gloo", a.N, "8", "256M", a.python))
    sizes = sorted(runs["dcomm"][0])
    med = {k: {z: [statistics.median(r[z][i] for r in v if z in r) for i in range(len(v[0][z]))] for z in sizes}
           for k, v in runs.items()}
    nn = a.N
    busbw = lambda z, us: z / us / 1e3 * 2 * (nn - 1) / nn
    version = subprocess.run([a.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True).stdout.strip()
    print(f"# all_reduce, float32 CPU tensors, {a.N} processes, torch {version}, median of {a.r} rounds: us per call, "
          "the slowest rank's")
    print(f"{'size':>9} {'bench':>9} {'native':>9} {'c++':>9} {'pg':>9} {'dist':>9} {'gloo':>10} {'backend+':>9} "
          f"{'budget':>8} {'torch+':>7} {'gloo/dist':>10} {'busbw':>7}")
    bad = []
    for z in sizes:
        (b,), (d, pg, cc, n_), (g,) = med["bench"][z], med["dcomm"][z], med["gloo"][z]
        over, budget, speedup = cc - n_, 3 + 0.05 * n_, g / d
        goal = 10 if z <= 64 << 10 else (3 if z >= 1 << 20 else None)
        if over > budget or (goal and speedup < goal):
            bad.append(human(z))
        print(f"{human(z):>9} {b:9.2f} {n_:9.2f} {cc:9.2f} {pg:9.2f} {d:9.2f} {g:10.2f} {over:9.2f} {budget:8.2f} "
              f"{d - cc:7.2f} {speedup:9.1f}x {busbw(z, d):7.2f}")
    print("# backend+ = c++ - native (the backend's overhead); torch+ = dist - c++ (torch's Python wrapper, binding and "
          "dispatcher, alike for every backend); busbw (GB/s) of dist")
    print(f"# goals (backend overhead <= 3 us + 5%; dist >= 10x Gloo to 64 KiB, >= 3x from 1 MiB): "
          f"{'met at every size' if not bad else 'not met at ' + ', '.join(bad)}")
    if a.png:
        try:
            import matplotlib
        except ImportError:
            sys.exit("# --png needs python3-matplotlib (apt-get install python3-matplotlib)")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        for k, label in (("bench", "dcomm (dcomm-bench)"), ("dcomm", "dcomm via torch.distributed"), ("gloo", "Gloo")):
            ax.plot(sizes, [busbw(z, med[k][z][0]) for z in sizes], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes")
        ax.set_ylabel("busbw (GB/s)")
        ax.set_title(f"all_reduce, float32, {a.N} processes")
        ax.legend()
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(a.png, dpi=110)
        print(f"# plot written to {a.png}")


if __name__ == "__main__":
    main()
