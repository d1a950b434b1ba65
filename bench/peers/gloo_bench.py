#!/usr/bin/python3
"""Gloo (PyTorch's CPU backend) measured like dcomm-bench: float32 sum, buffers allocated once
and reused, mean time per iteration of the slowest rank, nccl-tests' busbw factors.

    gloo_bench.py [all_reduce|reduce_scatter|all_gather|broadcast|reduce|all_to_all] -N ranks -b min -e max -f factor -n iters -w warmup
                  [--backend gloo|dcomm]

--backend dcomm measures the dcomm torch backend (dcomm_torch) the same way, through
torch.distributed. -n 0: as many iterations as fill about 0.3 s at each size.

Starts its own ranks (torch.multiprocessing) over TCP loopback, or joins one rank of a job
when RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT are set (torchrun, or network namespaces).
Prints: size_bytes time_us algbw_GBps busbw_GBps, one line per size (rank 0).
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def timed(op, args):
    """Mean microseconds per call, the slowest rank's, after args.w warm-up calls; args.n == 0
    calibrates the count to fill ~0.3 s (the same count on every rank)."""
    for _ in range(args.w):
        op()
    iters = args.n
    if iters == 0:
        t0 = time.perf_counter()
        for _ in range(3):
            op()
        probe = slowest((time.perf_counter() - t0) / 3)
        iters = int(min(20000, max(5, 0.3 / max(probe, 1e-7))))
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        op()
    return slowest((time.perf_counter() - t0) / iters * 1e6), iters


def slowest(us):
    t = torch.tensor([us], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def run(rank, size, args):
    if args.backend == "dcomm":
        global dcomm_torch
        import dcomm_torch  # registers the backend
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, rank=rank, world_size=size)
    n = size
    big = torch.ones(args.max_bytes // 4 * max(1, n) + 16, dtype=torch.float32)
    out = torch.zeros_like(big)
    factor = {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0}.get(args.coll, (n - 1) / n)
    if rank == 0:
        print(f"# gloo-bench {args.coll}, {n} ranks, backend {args.backend} (torch {torch.__version__})\n"
              "# size_bytes time_us algbw_GBps busbw_GBps")
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = max(nbytes // 4, 1)
        per = max(count // n, 1)
        if args.coll == "all_reduce":
            t = big[:count]
            op = lambda: dist.all_reduce(t)
            shown = count * 4
        elif args.coll == "broadcast":
            t = big[:count]
            op = lambda: dist.broadcast(t, 0)
            shown = count * 4
        elif args.coll == "reduce":
            t = big[:count]
            op = lambda: dist.reduce(t, 0)
            shown = count * 4
        elif args.coll == "all_to_all":
            inp, outp = big[: per * n], out[: per * n]
            op = lambda: dist.all_to_all_single(outp, inp)
            shown = per * n * 4
        elif args.coll == "all_gather":
            inp = big[:per]
            outs = list(out[: per * n].chunk(n))
            op = lambda: dist.all_gather(outs, inp)
            shown = per * n * 4
        else:  # reduce_scatter: Gloo has none in torch 1.13; all_reduce + take the block is what users do
            t = big[: per * n]
            op = lambda: dist.all_reduce(t)
            shown = per * n * 4
        us, iters = timed(op, args)
        extra = ""
        if args.direct and args.coll == "all_reduce":  # the process group's own call: no torch.distributed wrapper
            pg, opts = dist.distributed_c10d._get_default_group(), dist.AllreduceOptions()
            extra = f" {timed(lambda: pg.allreduce([t], opts).wait(), args)[0]:.3f}"
            if args.backend == "dcomm":
                # The backend's allreduce called from C++ (no Python binding, no dispatcher), and the
                # same group's dcomm communicator called directly, alternately: medians of 3 each.
                backend = pg._get_backend(torch.device("cpu")) if hasattr(pg, "_get_backend") else pg
                pairs = []
                for _ in range(3):
                    got = []
                    for fn in (dcomm_torch._C._allreduce_call_us, dcomm_torch._C._native_all_reduce_us):
                        dist.barrier()
                        got.append(slowest(fn(backend, t, max(1, iters // 3))))
                    pairs.append(got)
                extra += "".join(f" {sorted(p[i] for p in pairs)[1]:.3f}" for i in range(2))
        if rank == 0:
            algbw = shown / us / 1e3
            print(f"{shown} {us:.3f} {algbw:.3f} {algbw * factor:.3f}{extra}", flush=True)
        nbytes = int(nbytes * args.f)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("coll", nargs="?", default="all_reduce")
    p.add_argument("-N", type=int, default=2)
    p.add_argument("-b", dest="min_bytes", type=parse_size, default=8)
    p.add_argument("-e", dest="max_bytes", type=parse_size, default=256 << 20)
    p.add_argument("-f", type=float, default=4)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("--backend", default="gloo", choices=["gloo", "dcomm"])
    p.add_argument("--direct", action="store_true",
                   help="all_reduce: also time the process group's own allreduce().wait() (5th column) and, "
                        "with --backend dcomm, the backend's allreduce().wait() called from C++ (6th) and its "
                        "communicator's all_reduce called directly (7th)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.spawn(run, args=(args.N, args), nprocs=args.N)


if __name__ == "__main__":
    main()
