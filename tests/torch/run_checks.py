"""Runs the dcomm torch backend's checks (backend_checks.py) the ways users start them:
torchrun with 2 and 4 processes, and init_process_group with file:// and tcp:// init methods;
on torch 2.x also torch2_checks.py (hooks, groups, abort, and TORCH_DISTRIBUTED_DEBUG=DETAIL).
Prints one line per run and exits 1 if any failed.

    python tests/torch/run_checks.py [--quick]     the backend matrix (the Python whose torch is tested)
    python tests/torch/run_checks.py --parallel    torch 2.x: FSDP2, DTensor, TP, functional collectives
                                                   and DDP's hooks on dcomm and on gloo, compared
    python tests/torch/run_checks.py --suite       PyTorch's own distributed tests (dist_suite.py) on gloo
                                                   and on dcomm: every test gloo passes must pass on
                                                   dcomm or be gated by torch's name checks
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = os.path.join(HERE, "backend_checks.py")
TORCH2 = os.path.join(HERE, "torch2_checks.py")
PY = sys.executable
TORCH_MAJOR = int(__import__("torch").__version__.split(".")[0])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(n, *args, timeout=600, script=CHECKS, env=None):
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "--max_restarts=0",
           "-r", "1", "-t", "1", "--log_dir", tempfile.mkdtemp(prefix="dcomm-torchrun-"), script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


# Half-precision results differ from gloo's by rounding order (dcomm accumulates fp16 and
# bf16 in fp32; gloo in the half type): bounded by the type's precision. Data movement
# (DTensor, tensor parallelism, functional collectives of small integers) is exact.
TOLERANCE = {"ddp/fp16/": 1e-4, "ddp/bf16/": 1e-3, "dtensor/": 0, "tp/": 0, "fc/": 0}


def compare_parallel(out, world=4):
    import torch
    bad = []
    for r in range(world):
        mine, theirs = torch.load(f"{out}/dcomm.{r}.pt"), torch.load(f"{out}/gloo.{r}.pt")
        if mine.keys() != theirs.keys():
            bad.append(f"rank {r}: results {sorted(set(mine) ^ set(theirs))} on one backend only")
        for k in mine.keys() & theirs.keys():
            a, b = mine[k].double(), theirs[k].double()
            rel = ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item() if a.numel() else 0.0
            tol = next((t for p, t in TOLERANCE.items() if k.startswith(p)), 1e-6)
            if a.shape != b.shape or rel > tol:
                bad.append(f"rank {r}: {k} differs from gloo's by {rel:.2e} (allowed {tol:g})")
    return bad


def parallel_runs():
    out = tempfile.mkdtemp(prefix="dcomm-parallel-")
    t0 = time.time()
    runs = {b: torchrun(4, "parallel", b, out, script=TORCH2) for b in ("dcomm", "gloo")}
    bad = [f"{b}: exit {p.returncode}\n{(p.stdout + p.stderr)[-3000:]}" for b, p in runs.items() if p.returncode]
    bad = bad or compare_parallel(out)
    print(f"{'FAIL' if bad else 'ok  '} FSDP2, DTensor, TP, functional collectives, DDP hooks: dcomm = gloo, "
          f"4 processes ({time.time() - t0:.0f} s)", flush=True)
    for line in bad[:20]:
        print("  " + line)
    return bool(bad)


def dcomm_run(n, *args, timeout=600, script=TORCH2, restarts=0):
    """n ranks under dcomm-run (DCOMM_RUN, else the build's), which keeps the survivors of a killed
    rank running (torchrun's agent would stop them), and starts one again `restarts` times."""
    launcher = os.environ.get("DCOMM_RUN") or os.path.join(HERE, "..", "..", "build", "tools", "dcomm-run")
    cmd = [launcher, "-n", str(n), "--max-restarts", str(restarts), "--", PY, script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def elastic_twin():
    """examples/ddp_trainer/train.py --elastic under dcomm-run, 4 processes, MLP on 6,000 images:
    rank 0 killed at step 5 of epoch 1; the survivors go on (dist.shrink_group) and end within 2
    points of the uninterrupted run's accuracy. Then with --rejoin (dcomm-run --max-restarts 1):
    the survivors reconfigure without rank 0, then with the restarted rank 0, and end as close."""
    script = os.path.join(HERE, "..", "..", "examples", "ddp_trainer", "train.py")
    out = tempfile.mkdtemp(prefix="dcomm-twin-")
    flags = ["--model", "mlp", "--epochs", "2", "--batch", "32", "--train-limit", "6000"]
    kill = ["--elastic", "--kill-rank", "0", "--kill-at", "1:5"]
    whole = dcomm_run(4, *flags, "--out", f"{out}/whole", script=script)
    runs = {"kill": dcomm_run(4, *flags, "--out", f"{out}/kill", *kill, script=script),
            "rejoin": dcomm_run(4, *flags, "--out", f"{out}/rejoin", *kill, "--rejoin", f"{out}/handles",
                                script=script, restarts=1)}
    says = {"kill": "--elastic: lost rank 0; 3 ranks go on from step 5",
            "rejoin": "--rejoin: launch ranks [1, 2, 3, 0] as ranks 0-3; 4 ranks go on from step 5"}

    def accuracy(run):
        rows = open(f"{out}/{run}/metrics.csv").read().split()
        return float(rows[-1].split(",")[2]) if len(rows) > 2 else -1.0
    b = accuracy("whole")
    ok = whole.returncode == 0
    for name, p in runs.items():
        a = accuracy(name)
        ok = ok and p.returncode == 0 and abs(a - b) <= 0.02 and says[name] in p.stdout
        runs["kill"].stdout += f"\n{name}: accuracy {100 * a:.2f}% against {100 * b:.2f}% uninterrupted\n"
    runs["kill"].stdout += runs["rejoin"].stdout
    runs["kill"].returncode = 0 if ok else 1
    return runs["kill"]


def spawn(n, *args, timeout=600):
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n))
        procs.append(subprocess.Popen([PY, CHECKS, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    out, rc = "", 0
    for p in procs:
        o, _ = p.communicate(timeout=timeout)
        out += o
        rc = rc or p.returncode
    return subprocess.CompletedProcess([], rc, out, "")


# Refused by design (docs/pytorch.md): dcomm matches every receive to a named peer.
REFUSED = {"test_send_recv_any_source", "test_send_recv_any_source_torch_profiler",
           "test_send_recv_any_source_autograd_profiler"}


def suite_env():
    """The suite imports expecttest, which Debian's Python lacks: installed once beside the venvs."""
    env = dict(os.environ)
    try:
        import expecttest  # noqa: F401
    except ImportError:
        extra = os.path.join(os.environ.get("DCOMM_VENV_ROOT", "/var/cache/dcomm-venvs"), "py-extras")
        if not os.path.isdir(os.path.join(extra, "expecttest")):
            subprocess.run([PY, "-m", "pip", "install", "-q", "--target", extra, "expecttest"], check=True,
                           capture_output=True)
        env["PYTHONPATH"] = extra + os.pathsep + env.get("PYTHONPATH", "")
    return env


def suite_runs():
    t0 = time.time()
    results, env = {}, suite_env()
    for backend in ("gloo", "dcomm"):
        out = tempfile.mktemp(prefix=f"dcomm-suite-{backend}-", suffix=".json")
        p = subprocess.run([PY, os.path.join(HERE, "dist_suite.py"), backend, out], capture_output=True, text=True,
                           timeout=1500, cwd=tempfile.gettempdir(), env=env)
        if not os.path.exists(out):
            print(f"FAIL PyTorch's distributed tests did not run on {backend}:\n{(p.stdout + p.stderr)[-3000:]}")
            return True
        results[backend] = json.load(open(out))
    gloo, mine = results["gloo"], results["dcomm"]
    passes = sorted(k for k, v in gloo.items() if v == "ok")
    ok = [k for k in passes if mine.get(k) == "ok"]
    gated = [k for k in passes if mine.get(k, "").startswith("skip")]
    refused = [k for k in passes if k in REFUSED and k not in ok]
    failed = [k for k in passes if k not in ok and k not in gated and k not in refused]
    import torch
    print(f"{'FAIL' if failed else 'ok  '} PyTorch's distributed tests, torch {torch.__version__}, 2 processes: of "
          f"{len(gloo)} run, gloo passes {len(passes)}; dcomm passes {len(ok)}, {len(gated)} are gated by name, "
          f"{len(refused)} refused (any source), {len(failed)} fail ({time.time() - t0:.0f} s)", flush=True)
    for k in gated:
        print(f"  gated: {k}: {mine[k][6:120]}")
    for k in refused + failed:
        print(f"  {'refused' if k in refused else 'FAIL'}: {k}: {mine.get(k, 'not run')[:300]}")
    return bool(failed)


def docs_example():
    """docs/pytorch.md's first Python block, as written, under torchrun with 4 processes."""
    import re
    text = open(os.path.join(HERE, "..", "..", "docs", "pytorch.md")).read()
    path = os.path.join(tempfile.mkdtemp(prefix="dcomm-docs-"), "fsdp2_mesh.py")
    with open(path, "w") as f:
        f.write(re.search(r"```python\n(.*?)```", text, re.S).group(1))
    p = torchrun(4, script=path)
    if "step 4: loss" not in p.stdout:
        p.stdout += "\nFAIL: the example printed no 'step 4: loss' line"
    return p


def main():
    if "--suite" in sys.argv:
        sys.exit(1 if suite_runs() else 0)
    if "--parallel" in sys.argv:
        sys.exit(1 if parallel_runs() else 0)
    quick = "--quick" in sys.argv
    runs = [
        ("collectives, 2 processes", lambda: torchrun(2, "collectives")),
        ("collectives, 4 processes", lambda: torchrun(4, "collectives")),
        ("errors, 2 processes", lambda: torchrun(2, "errors")),
        ("subgroups, 4 processes", lambda: torchrun(4, "subgroups")),
        ("init file://, 2 processes", lambda: spawn(2, "init", f"file://{tempfile.mktemp(prefix='dcomm-init-')}")),
        ("init tcp://, 2 processes", lambda: spawn(2, "init", f"tcp://127.0.0.1:{free_port()}")),
        ("DDP against Gloo, 2 processes", lambda: torchrun(2, "ddp")),
        ("DDP against Gloo, 4 processes", lambda: torchrun(4, "ddp")),
    ]
    if TORCH_MAJOR >= 2:
        runs += [
            ("torch 2 hooks, 4 processes", lambda: torchrun(4, "hooks", script=TORCH2)),
            ("split and eager groups, 2-D mesh, 4 processes", lambda: torchrun(4, "groups", script=TORCH2)),
            ("abort() on one rank, 3 processes", lambda: torchrun(3, "abort", script=TORCH2)),
            *([("one-sided windows, 3 processes", lambda: torchrun(3, "window", script=TORCH2)),
               ("one-sided windows over TCP (the wire), 3 processes",
                lambda: torchrun(3, "window", script=TORCH2, env={"DCOMM_TRANSPORT": "tcp"}))]
              if hasattr(__import__("torch").distributed.distributed_c10d, "_new_window") else []),
            ("collectives under TORCH_DISTRIBUTED_DEBUG=DETAIL, 2 processes",
             lambda: torchrun(2, "collectives", env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})),
            ("docs/pytorch.md's FSDP2 + DeviceMesh example, 4 processes", docs_example),
        ]
    if hasattr(__import__("torch").distributed, "shrink_group"):  # torch 2.15
        runs += [
            ("dist.shrink_group past a killed rank 2 of 4 (SHRINK_DEFAULT), DDP after, under dcomm-run",
             lambda: dcomm_run(4, "shrink", "2", "default")),
            ("dist.shrink_group past a killed rank 0 of 3 (SHRINK_ABORT), DDP after, under dcomm-run",
             lambda: dcomm_run(3, "shrink", "0", "abort")),
            ("dist._reconfigure: 4 ranks, rank 0 killed, 3 survivors, the restarted rank 0 joined again, DDP after",
             lambda: dcomm_run(4, "reconfigure", "0", tempfile.mkdtemp(prefix="dcomm-reconf-"), restarts=1)),
            *([("train.py --elastic past a killed rank 0 of 4, and --rejoin of it, accuracy as uninterrupted",
                elastic_twin)] if os.path.isdir("/usr/share/datasets/fashion-mnist") else []),
        ]
    if quick:
        runs = runs[:1]
    failed = 0
    for name, run in runs:
        t0 = time.time()
        p = run()
        bad = p.returncode != 0 or "FAIL" in p.stdout + p.stderr
        failed += bad
        print(f"{'FAIL' if bad else 'ok  '} {name} ({time.time() - t0:.0f} s)", flush=True)
        if bad:
            print((p.stdout + p.stderr)[-6000:])
    # A rank killed mid-training: the survivors raise a RuntimeError naming it, at once.
    out = tempfile.mkdtemp(prefix="dcomm-kill-")
    t0 = time.time()
    os.environ["DCOMM_TORCH_TEST_OUT"] = out
    p = torchrun(3, "kill", "2")
    took = time.time() - t0
    bad = False
    for r in (0, 1):
        path = os.path.join(out, f"kill.{r}")
        if not os.path.exists(path):
            bad = True
            print(f"  survivor {r} wrote nothing")
            continue
        lines = open(path).read().splitlines()
        if float(lines[0]) > 30 or "rank 2" not in "\n".join(lines[1:]):
            bad = True
            print(f"  survivor {r}: {lines[:3]}")
    failed += bad
    print(f"{'FAIL' if bad else 'ok  '} a rank killed mid-training, 3 processes ({took:.0f} s)", flush=True)
    if bad:
        print((p.stdout + p.stderr)[-4000:])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
