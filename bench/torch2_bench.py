"""torch 2.x on dcomm against gloo, in one run: an FSDP2 training step, and out-of-place
collectives on tensors from the backend's allocator (allocate_tensor, dcomm::mem_alloc)
against ordinary tensors and against in place.

    PY bench/torch2_bench.py [-N 2] [-r 5]       PY: a torch 2.x Python with dcomm_torch installed
                                                  (e.g. the venv of scripts/lib/pypi-venvs.sh)

FSDP2 step: a model chosen to be communication-bound: 4 Linear(2048, 2048) layers (64 MiB of
float32 parameters), each its own fully_shard unit, a batch of 4 rows, SGD. A step all-gathers
every layer's parameters (forward, and again in backward) and reduce-scatters its gradients:
~200 MiB moved per rank for ~0.1 GFLOP of arithmetic. Each run is a fresh job of N processes
(dcomm, dcomm with FSDP2's communication buffers from allocate_tensor, and gloo alternate);
a run's time is the median of 5 steps after 2 warm-up steps; the
table gives the median of the runs and their spread (min-max).

Allocator: all_gather_into_tensor of 1, 16 and 64 MiB outputs, out of place with ordinary
tensors, out of place with both tensors from allocate_tensor, and in place (the input a slice
of the output); dcomm takes its single-copy path only when every rank's buffers are in memory
the others can map, which allocate_tensor gives out of place too.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def worker(mode, backend, out):
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import dcomm_torch  # noqa: F401

    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    results = {}
    if mode in ("fsdp2", "fsdp2-alloc"):
        from torch.distributed.fsdp import fully_shard
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(4)])
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        if mode == "fsdp2-alloc":  # FSDP2's communication buffers from the backend's allocate_tensor
            model.set_allocate_memory_from_process_group_for_comm(True)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(4, 2048)
        times = []
        for step in range(7):
            dist.barrier()
            t0 = time.perf_counter()
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        results["step_ms"] = statistics.median(times[2:]) * 1e3
    else:
        pg = dist.distributed_c10d._get_default_group()
        be = pg._get_backend(torch.device("cpu"))
        for mib in (1, 16, 64):
            n = (mib << 20) // 4
            forms = {"ordinary": (torch.ones(n // world), torch.empty(n))}
            if backend == "dcomm":
                a = be.allocate_tensor(n // world, dtype=torch.float32, device=torch.device("cpu"))
                b = be.allocate_tensor(n, dtype=torch.float32, device=torch.device("cpu"))
                a.fill_(1)
                forms["allocate_tensor"] = (a, b)
            whole = torch.empty(n)
            forms["in_place"] = (whole.narrow(0, rank * (n // world), n // world), whole)
            for name, (inp, outp) in forms.items():
                for _ in range(3):
                    dist.all_gather_into_tensor(outp, inp)
                iters = max(5, 2000 // mib)
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    dist.all_gather_into_tensor(outp, inp)
                results[f"{mib}/{name}"] = (time.perf_counter() - t0) / iters * 1e6
    # the slowest rank's
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        with open(out, "w") as f:
            f.write(repr({k: max(g[k] for g in gathered) for k in results}))
    dist.barrier()
    dist.destroy_process_group()


def run(py, n, mode, backend):
    with tempfile.NamedTemporaryFile(suffix=".txt") as f:
        subprocess.run([py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", HERE, "--worker",
                        mode, backend, f.name], check=True, capture_output=True, cwd=tempfile.gettempdir())
        return eval(open(f.name).read())


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(*sys.argv[2:5])
    p = argparse.ArgumentParser()
    p.add_argument("-N", type=int, default=2)
    p.add_argument("-r", type=int, default=5, help="runs of each backend, alternating")
    a = p.parse_args()
    py = sys.executable
    steps = {"dcomm": [], "dcomm+alloc": [], "gloo": []}
    for _ in range(a.r):
        for name in steps:
            backend, _, alloc = name.partition("+")
            steps[name].append(run(py, a.N, "fsdp2-alloc" if alloc else "fsdp2", backend)["step_ms"])
    import torch
    print(f"# FSDP2 step, 4 x Linear(2048, 2048), batch 4, {a.N} processes, torch {torch.__version__}: "
          f"ms per step, median of {a.r} runs (min-max)")
    for b, v in steps.items():
        print(f"{b:>12} {statistics.median(v):9.2f}   ({min(v):.2f}-{max(v):.2f})")
    gloo_ms = statistics.median(steps["gloo"])
    print(f"# dcomm / gloo: {statistics.median(steps['dcomm']) / gloo_ms:.2f}x, with FSDP2's buffers from "
          f"allocate_tensor (set_allocate_memory_from_process_group_for_comm): "
          f"{statistics.median(steps['dcomm+alloc']) / gloo_ms:.2f}x (goal: at most 0.5x)")
    alloc = run(py, a.N, "alloc", "dcomm")
    gloo = run(py, a.N, "alloc", "gloo")
    print(f"# all_gather_into_tensor, {a.N} processes: us per call (output size)")
    print(f"{'size':>7} {'ordinary':>10} {'allocate_tensor':>16} {'in place':>10} {'gloo':>10}")
    for mib in (1, 16, 64):
        print(f"{mib:>4} MiB {alloc[f'{mib}/ordinary']:10.1f} {alloc[f'{mib}/allocate_tensor']:16.1f} "
              f"{alloc[f'{mib}/in_place']:10.1f} {gloo[f'{mib}/ordinary']:10.1f}")


if __name__ == "__main__":
    main()
