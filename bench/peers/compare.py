#!/usr/bin/python3
"""dcomm side by side with its peers, in one run, on the same sizes and rank count.

    bench/peers/compare.py [-N ranks] [-c collective] [-r reps] [-e maxbytes] [--peers openmpi,mpich,gloo]
                           [--install] [--png out.png] [--json out.json]

Runs dcomm-bench, OpenMPI and MPICH (bench/peers/mpi_bench.cpp built against each) and Gloo
(bench/peers/gloo_bench.py), whichever are installed (--install apt-installs the missing
ones), float32 sum, every power of two from 8 B, buffers reused by all. Each system runs
`reps` times, alternating, and each size shows its median time: this machine is shared, and
one preemption moves a sub-microsecond mean. Small sizes take 1000 iterations, large 20.
Prints one table with each system's time and busbw and dcomm's time over the best peer's;
--png plots busbw against size, --json keeps every number.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build", "bench")
PASSES = [("8", "1M", "1000", "50"), ("2M", None, "20", "5")]
APT = {"openmpi": ["openmpi-bin", "libopenmpi-dev"], "mpich": ["mpich", "libmpich-dev"], "gloo": ["python3-torch"],
       "png": ["python3-matplotlib"]}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw).stdout


def have(peer):
    return {"openmpi": shutil.which("mpirun.openmpi") and shutil.which("mpicxx.openmpi"),
            "mpich": shutil.which("mpirun.mpich") and shutil.which("mpicxx.mpich"),
            "gloo": subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"],
                                   capture_output=True).returncode == 0}[peer]


def parse_rows(text):
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) < 4:
            continue
        rows[int(f[0])] = float(f[1])
    return rows


def run_dcomm(a, lo, hi, iters, warm, registered=False):
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        sh([os.path.join(BUILD, "dcomm-bench"), a.c, "-N", str(a.N), "-b", lo, "-e", hi, "-f", "2", "-n", iters,
            "-w", warm, "-c", "1", "-J", j.name, "-R", "1" if registered else "0"])
        r = json.load(open(j.name))
    bad = sum(x["wrong"] for x in r["results"])
    if bad:
        sys.exit(f"dcomm-bench reported {bad} wrong elements")
    # MPI_Bcast has one buffer, so broadcast compares dcomm's in-place column; the others
    # compare out of place, as the MPI calls are made.
    in_place = a.c == "broadcast"
    return {x["size"]: x["time_us"] for x in r["results"] if x["in_place"] == in_place}


def run_peer(peer, a, lo, hi, iters, warm):
    args = [a.c, "-b", lo, "-e", hi, "-f", "2", "-n", iters, "-w", warm]
    if peer == "gloo":
        return parse_rows(sh(["/usr/bin/python3", os.path.join(ROOT, "bench/peers/gloo_bench.py"), "-N", str(a.N)] + args))
    exe = os.path.join(BUILD, f"mpi-bench-{peer}")
    if peer == "openmpi":
        return parse_rows(sh(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", str(a.N), exe] + args))
    return parse_rows(sh(["mpirun.mpich", "-np", str(a.N), exe] + args))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=2)
    p.add_argument("-c", default="all_reduce", choices=["all_reduce", "reduce_scatter", "all_gather", "broadcast"])
    p.add_argument("-r", type=int, default=3)
    p.add_argument("-e", default="256M")
    p.add_argument("--peers", default="openmpi,mpich,gloo")
    p.add_argument("--install", action="store_true")
    p.add_argument("--png")
    p.add_argument("--json")
    p.add_argument("--registered", action="store_true",
                   help="also run dcomm with buffers from dcomm::mem_alloc (column dcomm-R, ratio R)")
    a = p.parse_args()
    wanted = [x for x in a.peers.split(",") if x]
    if a.install:
        pkgs = [pkg for peer in wanted if not have(peer) for pkg in APT[peer]]
        if a.png:
            pkgs += APT["png"]
        if pkgs:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + pkgs, check=True,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    peers = [x for x in wanted if have(x)]
    for missing in set(wanted) - set(peers):
        print(f"# {missing}: not installed (use --install)")
    if not os.path.exists(os.path.join(BUILD, "dcomm-bench")):
        sh(["bash", os.path.join(ROOT, "scripts/build.sh")])
    for mpi in ("openmpi", "mpich"):
        if mpi in peers:
            sh([f"mpicxx.{mpi}", "-O2", "-std=c++20", os.path.join(ROOT, "bench/peers/mpi_bench.cpp"), "-o",
                os.path.join(BUILD, f"mpi-bench-{mpi}")])
    systems = ["dcomm"] + (["dcomm-R"] if a.registered else []) + peers
    times = {s: {} for s in systems}
    for _ in range(a.r):
        for lo, hi, iters, warm in PASSES:
            hi = a.e if hi is None or to_bytes(hi) > to_bytes(a.e) else hi
            if to_bytes(lo) > to_bytes(hi):
                continue
            for s in systems:
                if s.startswith("dcomm"):
                    got = run_dcomm(a, lo, hi, iters, warm, registered=s == "dcomm-R")
                else:
                    got = run_peer(s, a, lo, hi, iters, warm)
                for size, t in got.items():
                    times[s].setdefault(size, []).append(t)
    n = a.N
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0}.get(a.c, (n - 1) / n)
    sizes = sorted(set.intersection(*(set(times[s]) for s in systems)))
    med = {s: {z: statistics.median(times[s][z]) for z in sizes} for s in systems}
    busbw = {s: {z: z / med[s][z] / 1e3 * factor for z in sizes} for s in systems}
    print(f"# {a.c}, {n} ranks, float32 sum, median of {a.r} runs; time in us, busbw in GB/s; "
          f"ratio = dcomm time / best peer time (lower is better)")
    head = f"{'size':>9}" + "".join(f" {s + ' us':>12} {'GB/s':>6}" for s in systems) + f" {'best peer':>9} {'ratio':>6}" + (f" {'ratio R':>7}" if a.registered else "")
    print(head)
    for z in sizes:
        best = min(peers, key=lambda s: med[s][z]) if peers else None
        line = f"{human(z):>9}" + "".join(f" {med[s][z]:12.2f} {busbw[s][z]:6.2f}" for s in systems)
        if best:
            line += f" {best:>9} {med['dcomm'][z] / med[best][z]:6.2f}"
            if a.registered:
                line += f" {med['dcomm-R'][z] / med[best][z]:7.2f}"
        print(line)
    if a.json:
        json.dump({"collective": a.c, "ranks": n, "reps": a.r,
                   "systems": {s: [{"size": z, "time_us": med[s][z], "busbw": busbw[s][z]} for z in sizes] for s in systems}},
                  open(a.json, "w"), indent=1)
    if a.png:
        plot(a, systems, sizes, busbw)


def to_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def human(z):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if z >= s and z % s == 0:
            return f"{z // s} {unit}"
    return f"{z} B"


def plot(a, systems, sizes, busbw):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# --png needs python3-matplotlib (use --install)")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in systems:
        ax.plot(sizes, [busbw[s][z] for z in sizes], marker="o", markersize=3, label=s, linewidth=2.5 if s == "dcomm" else 1.2)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(f"{a.c}, {a.N} ranks, float32 sum (median of {a.r})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"# plot written to {a.png}")


if __name__ == "__main__":
    main()
