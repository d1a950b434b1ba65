"""Runs the dcomm torch backend's checks (backend_checks.py) the ways users start them:
torchrun with 2 and 4 processes, and init_process_group with file:// and tcp:// init methods.
Prints one line per run and exits 1 if any failed.

    /usr/bin/python3 tests/torch/run_checks.py [--quick]
"""
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKS = os.path.join(HERE, "backend_checks.py")
PY = sys.executable


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(n, *args, timeout=600):
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "--max_restarts=0",
           "-r", "1", "-t", "1", "--log_dir", tempfile.mkdtemp(prefix="dcomm-torchrun-"), CHECKS, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


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


def main():
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
