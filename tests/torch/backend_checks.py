"""The dcomm torch backend, one rank of a check (tests/torch/run_checks.py starts the ranks).

    backend_checks.py collectives        every collective x dtype x op, against Gloo and a reference
    backend_checks.py subgroups          new_group of odd shapes; ranks outside never block
    backend_checks.py init METHOD        init_process_group(init_method=METHOD) (file://, tcp://)
    backend_checks.py ddp                DDP on dcomm and on Gloo from one seed: equal parameters
    backend_checks.py kill VICTIM        a rank dies mid-training: the others raise naming it
    backend_checks.py errors             what cannot be carried is a clear RuntimeError
    backend_checks.py gpu                CUDA tensors (torch 2.x, every rank on GPU 0): collectives,
                                         stream order, futures, and DDP against Gloo on the CPU

Each rank prints "FAIL ..." lines for what went wrong and exits 1 if anything did.
"""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import dcomm_torch  # registers "dcomm"

failures = []
gloo_compared = 0


def fail(what):
    failures.append(what)
    print(f"FAIL rank {dist.get_rank() if dist.is_initialized() else '?'}: {what}", flush=True)


def check(cond, what):
    if not cond:
        fail(what)


# torch 1.x names the tensor forms with a leading underscore.
ALL_GATHER_INTO_TENSOR = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
REDUCE_SCATTER_TENSOR = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32, torch.int64,
          torch.bool]
OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "product": dist.ReduceOp.PRODUCT}


def values(rank, n, dtype, op):
    """Inputs whose reduction is exact in any order: small integers (1 and 2 for products)."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + rank) % 3 == 0)
    if op == "product":
        v = torch.where((i + rank) % 3 == 0, 2, 1)
    else:
        v = (rank * 7 + i * 3) % 11
        if dtype not in (torch.uint8,):
            v = v - 5
    return v.to(dtype)


def reference(world, n, dtype, op):
    """The reduction of every rank's values, computed here in float64 (or logically for bool)."""
    vals = [values(r, n, dtype, op) for r in range(world)]
    if dtype == torch.bool:
        stack = torch.stack(vals)
        if op in ("sum", "max"):
            return stack.any(0)
        return stack.all(0)  # product, min
    stack = torch.stack([v.to(torch.float64) for v in vals])
    if op == "sum":
        out = stack.sum(0)
    elif op == "avg":
        if dtype.is_floating_point:  # the sum (exact), divided in the accumulator type: float32 below float64
            acc = torch.float64 if dtype == torch.float64 else torch.float32
            out = stack.sum(0).to(acc) / world
        else:
            out = torch.trunc(stack.sum(0) / world)  # integer average truncates, as NCCL
    elif op == "min":
        out = stack.min(0).values
    elif op == "max":
        out = stack.max(0).values
    else:
        out = stack.prod(0)
    if dtype == torch.uint8 or dtype == torch.int8:
        return out.to(torch.int64).to(dtype)  # wraps as the 8-bit arithmetic does
    return out.to(dtype)


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def try_gloo(fn):
    """Gloo's result, or None where Gloo cannot (AVG, bool, some dtypes)."""
    try:
        return fn()
    except (RuntimeError, ValueError):
        return None


def check_collectives(gloo):
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 37  # no world size divides it
    for dtype in DTYPES:
        for name, op in OPS.items():
            if dtype == torch.bool and name == "avg":
                continue
            tag = f"all_reduce {dtype} {name}"
            t = values(rank, n, dtype, name)
            dist.all_reduce(t, op=op)
            want = reference(world, n, dtype, name)
            check(same(t, want), f"{tag}: {t.tolist()[:6]} != {want.tolist()[:6]}")
            g = values(rank, n, dtype, name)
            if try_gloo(lambda: dist.all_reduce(g, op=op, group=gloo) or True):
                global gloo_compared
                gloo_compared += 1
                check(same(t, g), f"{tag}: differs from Gloo's {g.tolist()[:6]}")
            # reduce to every root in turn
            root = (DTYPES.index(dtype) + list(OPS).index(name)) % world
            t = values(rank, n, dtype, name)
            dist.reduce(t, dst=root, op=op)
            if rank == root:
                check(same(t, want), f"reduce {dtype} {name} root {root}")
        # premul_sum: torch 2.x exposes it for floating point
        if dtype.is_floating_point and hasattr(dist, "_make_nccl_premul_sum"):
            t = values(rank, n, dtype, "sum")
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
            check(same(t, (reference(world, n, torch.float64, "sum") * 2).to(dtype)), f"premul_sum {dtype}")
        # copies: broadcast from each root, all_gather, all_to_all, gather, scatter
        for root in range(world):
            t = values(rank, n, dtype, "sum") if rank == root else torch.zeros(n, dtype=dtype)
            dist.broadcast(t, src=root)
            check(same(t, values(root, n, dtype, "sum")), f"broadcast {dtype} root {root}")
        outs = [torch.zeros(n, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, values(rank, n, dtype, "sum"))
        check(all(same(outs[r], values(r, n, dtype, "sum")) for r in range(world)), f"all_gather {dtype}")
        flat = torch.zeros(world * n, dtype=dtype)
        ALL_GATHER_INTO_TENSOR(flat, values(rank, n, dtype, "sum"))
        check(same(flat, torch.cat([values(r, n, dtype, "sum") for r in range(world)])), f"all_gather_into_tensor {dtype}")
        if dtype != torch.bool:
            ins = [values(rank * world + r, n, dtype, "sum") for r in range(world)]
            out = torch.zeros(n, dtype=dtype)
            dist.reduce_scatter(out, ins)
            want = sum(values(s * world + rank, n, dtype, "sum").to(torch.float64) for s in range(world))
            check(same(out, want.to(torch.int64).to(dtype) if not dtype.is_floating_point else want.to(dtype)),
                  f"reduce_scatter {dtype}")
            inp = torch.cat(ins)
            out2 = torch.zeros(n, dtype=dtype)
            REDUCE_SCATTER_TENSOR(out2, inp)
            check(same(out2, out), f"reduce_scatter_tensor {dtype}")
        ins = [torch.full((3,), rank * 10 + r).to(dtype) for r in range(world)]
        outs = [torch.zeros(3, dtype=dtype) for _ in range(world)]
        dist.all_to_all(outs, ins)
        check(all(same(outs[r], torch.full((3,), r * 10 + rank).to(dtype)) for r in range(world)), f"all_to_all {dtype}")
    # The same calls on Gloo's group, the outputs compared (float32: every call Gloo has).
    def both(call):
        global gloo_compared
        mine, theirs = call(None), try_gloo(lambda: call(gloo))
        if theirs is not None:
            gloo_compared += 1
            check(all(same(a, b) for a, b in zip(mine, theirs)), f"{call.__name__}: differs from Gloo's")

    def c_broadcast(g):
        t = values(rank, n, torch.float32, "sum")
        dist.broadcast(t, src=world - 1, group=g)
        return [t]

    def c_all_gather(g):
        outs = [torch.zeros(n) for _ in range(world)]
        dist.all_gather(outs, values(rank, n, torch.float32, "sum"), group=g)
        return outs

    def c_reduce_scatter(g):
        out = torch.zeros(n)
        dist.reduce_scatter(out, [values(rank + r, n, torch.float32, "sum") for r in range(world)], group=g)
        return [out]

    def c_all_to_all_single(g):
        out = torch.zeros(world * 3)
        dist.all_to_all_single(out, torch.arange(world * 3, dtype=torch.float32) * (rank + 1), group=g)
        return [out]

    def c_gather(g):
        lst = [torch.zeros(4) for _ in range(world)] if rank == 0 else None
        dist.gather(torch.full((4,), float(rank)), gather_list=lst, dst=0, group=g)
        return lst or []

    def c_scatter(g):
        out = torch.zeros(4)
        dist.scatter(out, [torch.full((4,), float(r)) for r in range(world)] if rank == 0 else None, src=0, group=g)
        return [out]

    for call in (c_broadcast, c_all_gather, c_reduce_scatter, c_all_to_all_single, c_gather, c_scatter):
        both(call)
    # all_to_all_single, equal and unequal splits (rank r sends r + p + 1 rows to rank p)
    inp = torch.arange(world * 4, dtype=torch.float32) + 100 * rank
    out = torch.zeros(world * 4)
    dist.all_to_all_single(out, inp)
    check(same(out, torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 100 * p for p in range(world)])),
          "all_to_all_single equal")
    in_splits = [rank + p + 1 for p in range(world)]
    out_splits = [p + rank + 1 for p in range(world)]
    inp = torch.cat([torch.full((in_splits[p], 2), float(rank * 100 + p)) for p in range(world)])
    out = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
    want = torch.cat([torch.full((out_splits[p], 2), float(p * 100 + rank)) for p in range(world)])
    check(same(out, want), "all_to_all_single unequal")
    # gather and scatter to each root
    for root in range(world):
        lst = [torch.zeros(5) for _ in range(world)] if rank == root else None
        dist.gather(torch.full((5,), float(rank)), gather_list=lst, dst=root)
        if rank == root:
            check(all(same(lst[r], torch.full((5,), float(r))) for r in range(world)), f"gather root {root}")
        out = torch.zeros(5)
        dist.scatter(out, [torch.full((5,), float(r + 50)) for r in range(world)] if rank == root else None, src=root)
        check(same(out, torch.full((5,), float(rank + 50))), f"scatter root {root}")
    # all_reduce_coalesced
    ts = [torch.full((k + 1,), float(rank + k)) for k in range(4)]
    dist.all_reduce_coalesced(ts)
    check(all(same(ts[k], torch.full((k + 1,), float(sum(r + k for r in range(world))))) for k in range(4)),
          "all_reduce_coalesced")
    # non-contiguous tensors: copied in and back
    m = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (rank + 1)
    dist.all_reduce(m)
    check(same(m, torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * sum(range(1, world + 1))), "non-contiguous")
    # point to point, with tags; isend/irecv around the ring; batch_isend_irecv
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if world > 1:
        r_buf = torch.zeros(1000)
        reqs = [dist.isend(torch.full((1000,), float(rank)), nxt, tag=7), dist.irecv(r_buf, prv, tag=7)]
        for q in reqs:
            q.wait()
        check(same(r_buf, torch.full((1000,), float(prv))), "isend/irecv ring")
        big_in, big_out = torch.full((300000,), float(rank)), torch.zeros(300000)
        ops = [dist.P2POp(dist.isend, big_in, nxt), dist.P2POp(dist.irecv, big_out, prv)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        check(same(big_out, torch.full((300000,), float(prv))), "batch_isend_irecv 1.2 MB")
        if rank == 0:
            dist.send(torch.tensor([1.0, 2.0]), 1, tag=3)
        elif rank == 1:
            x = torch.zeros(2)
            dist.recv(x, 0, tag=3)
            check(same(x, torch.tensor([1.0, 2.0])), "send/recv tag 3")
    # Work objects: asynchronous, waitable with a timeout, futures
    big = torch.ones(1 << 20)
    w = dist.all_reduce(big, async_op=True)
    check(w.wait(timeout=datetime.timedelta(seconds=60)), "wait(timeout)")
    check(w.is_completed() and w.is_success(), "is_completed/is_success")  # (torch 1.13 cannot show exception() in Python)
    check(same(big, torch.full((1 << 20,), float(world))), "async all_reduce")
    fut = dist.all_reduce(torch.ones(8), async_op=True).get_future()
    res = fut.then(lambda f: f.value()[0] * 2).wait()
    check(same(res, torch.full((8,), 2.0 * world)), "get_future().then")
    dist.barrier()
    pg = dist.distributed_c10d._get_default_group()
    if hasattr(pg, "monitored_barrier"):
        try:
            pg.monitored_barrier(datetime.timedelta(seconds=60))
        except RuntimeError as e:
            fail(f"monitored_barrier: {e}")


def check_errors():
    rank = dist.get_rank()

    def raises(fn, words, what):
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            check(all(w in msg for w in words), f"{what}: the error does not say {words}: {msg[:200]}")
            return
        fail(f"{what}: no error")

    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)), ["all_reduce", "Short"], "int16 all_reduce")
    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND), ["all_reduce", "BAND"], "BAND")
    raises(lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG), ["AVG", "boolean"], "bool AVG")
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1]]), torch.tensor([1.0, 2.0]), (4,))
    if int(torch.__version__.split(".")[0]) < 2:  # torch 2.x: summed (torch2_checks.py hooks)
        raises(lambda: dist.all_reduce(sparse), ["all_reduce", "Sparse"], "sparse all_reduce")
    # Nothing was sent: the group still works, and int16 still travels where no arithmetic is needed.
    t = torch.full((4,), rank, dtype=torch.int16)
    dist.broadcast(t, src=0)
    check(same(t, torch.zeros(4, dtype=torch.int16)), "int16 broadcast after the errors")
    x = torch.ones(3)
    dist.all_reduce(x)
    check(same(x, torch.full((3,), float(dist.get_world_size()))), "all_reduce after the errors")


def check_subgroups():
    rank, world = dist.get_rank(), dist.get_world_size()
    shapes = [[0, world - 1], list(range(1, world)), [world - 1], list(range(world))[::-1]]
    groups = [dist.new_group(ranks=s) for s in shapes]  # every rank makes every group, as torch requires
    for shape, g in zip(shapes, groups):
        if rank not in shape:
            continue  # outside: nothing to do, nothing to wait for
        t = torch.full((9,), float(rank))
        dist.all_reduce(t, group=g)
        check(same(t, torch.full((9,), float(sum(shape)))), f"all_reduce in group {shape}")
        b = torch.full((4,), float(rank))
        dist.broadcast(b, src=shape[0], group=g)
        check(same(b, torch.full((4,), float(shape[0]))), f"broadcast in group {shape}")
    # The last rank alone in its group works at once, while the others carry on elsewhere.
    dist.barrier()


class Net(nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)
        self.spare = nn.Linear(32, 4) if unused else None

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def train(group, find_unused=False, accumulate=1, steps=20, device="cpu"):
    torch.manual_seed(1234)
    model = Net(unused=find_unused).to(device)
    ids = [torch.device(device).index] if torch.device(device).type == "cuda" else None
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids, process_group=group,
                                              find_unused_parameters=find_unused)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    rank = dist.get_rank()
    gen = torch.Generator().manual_seed(99 + rank)
    for step in range(steps):
        for micro in range(accumulate):
            x = torch.randn(8, 16, generator=gen).to(device)
            y = torch.randn(8, 4, generator=gen).to(device)
            last = micro == accumulate - 1
            ctx = ddp.no_sync() if not last else _null()
            with ctx:
                loss = ((ddp(x) - y) ** 2).mean()
                loss.backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().cpu().clone() for p in model.parameters()]


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def check_ddp(gloo):
    for find_unused, accumulate in ((False, 1), (True, 1), (False, 2)):
        mine = train(None, find_unused, accumulate)
        theirs = train(gloo, find_unused, accumulate)
        for k, (a, b) in enumerate(zip(mine, theirs)):
            rel = ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
            check(rel <= 1e-6, f"DDP find_unused={find_unused} accumulate={accumulate}: parameter {k} differs from Gloo's by {rel:.2e}")


def check_gpu(gloo):
    if not (dcomm_torch.cuda_enabled and torch.cuda.is_available()):
        fail(f"gpu: no CUDA path (dcomm_torch built with CUDA: {dcomm_torch.cuda_enabled}, "
             f"torch sees a GPU: {torch.cuda.is_available()})")
        return
    dev = torch.device("cuda", 0)  # every rank on the one GPU of the check
    torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rank, n = dist.get_rank(), dist.get_world_size()
    total = n * (n + 1) / 2
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.float64):
        t = torch.full((1 << 20,), rank + 1, dtype=dtype, device=dev)
        dist.all_reduce(t)
        check(torch.equal(t.cpu(), torch.full((1 << 20,), total, dtype=dtype)), f"gpu all_reduce {dtype}")
    # Stream order: written by a kernel on the current stream just before the call, read after wait().
    t = torch.empty(1 << 22, device=dev)
    t.fill_(rank + 1)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    t.mul_(2)
    check(torch.equal(t.cpu(), torch.full((1 << 22,), 2 * total)), "gpu all_reduce ordered on the streams")
    fut = dist.all_reduce(torch.full((1000,), 1.0, device=dev), async_op=True).get_future()
    got = fut.then(lambda f: f.value()[0] * 3).wait()
    check(torch.equal(got.cpu(), torch.full((1000,), 3.0 * n)), "gpu future then()")
    b = torch.full((4096,), float(rank), device=dev)
    dist.broadcast(b, src=n - 1)
    check(torch.equal(b.cpu(), torch.full((4096,), float(n - 1))), "gpu broadcast")
    ag = torch.empty(4096 * n, device=dev)
    dist.all_gather_into_tensor(ag, torch.full((4096,), float(rank), device=dev))
    check(torch.equal(ag.cpu(), torch.arange(n).repeat_interleave(4096).float()), "gpu all_gather_into_tensor")
    rs = torch.empty(4096, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(4096 * n, dtype=torch.float32, device=dev))
    want = torch.arange(4096 * n, dtype=torch.float32)[rank * 4096:(rank + 1) * 4096] * n
    check(torch.equal(rs.cpu(), want), "gpu reduce_scatter_tensor")
    if n > 1:
        peer_to, peer_from = (rank + 1) % n, (rank - 1) % n
        out = torch.empty(5000, device=dev)
        ops = [dist.P2POp(dist.isend, torch.full((5000,), float(rank), device=dev), peer_to),
               dist.P2POp(dist.irecv, out, peer_from)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        check(torch.equal(out.cpu(), torch.full((5000,), float(peer_from))), "gpu batch_isend_irecv")
    # Coalesced calls on CUDA tensors (one device group, launched by _end_coalescing): the
    # copies out of the group's temporaries must follow its kernels, and the temporaries
    # outlive them, or the outputs keep their inputs' values.
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [torch.full((1000 + 7 * i,), float(rank + 1 + i), device=dev) for i in range(3)]
    with _coalescing_manager(device=dev, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        check(torch.equal(t.cpu(), torch.full((1000 + 7 * i,), total + n * i)), f"gpu _coalescing_manager all_reduce {i}")
    outs = [torch.full((3000,), -1.0, device=dev) for _ in range(n)]
    rs = torch.full((3000,), -1.0, device=dev)
    dist.distributed_c10d._get_default_group()._start_coalescing(dev)
    w1 = dist.all_gather(outs, torch.full((3000,), float(rank), device=dev), async_op=True)
    w2 = dist.reduce_scatter(rs, [torch.full((3000,), float(rank + p), device=dev) for p in range(n)], async_op=True)
    dist.distributed_c10d._get_default_group()._end_coalescing(dev).wait()
    for w in (w1, w2):
        if w is not None:
            w.wait()
    for p in range(n):
        check(torch.equal(outs[p].cpu(), torch.full((3000,), float(p))), f"gpu coalesced all_gather (list) from {p}")
    check(torch.equal(rs.cpu(), torch.full((3000,), float(sum(range(n)) + n * rank))), "gpu coalesced reduce_scatter (list)")
    # DDP on the GPU against Gloo on the CPU, from one seed.
    for find_unused, accumulate in ((False, 1), (False, 2)):
        mine = train(None, find_unused, accumulate, steps=5, device="cuda:0")
        theirs = train(gloo, find_unused, accumulate, steps=5)
        for k, (a, b) in enumerate(zip(mine, theirs)):
            rel = ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()
            check(rel <= 1e-5, f"gpu DDP accumulate={accumulate}: parameter {k} differs from Gloo's on the CPU by {rel:.2e}")


def check_kill(victim):
    rank = dist.get_rank()
    out = os.environ.get("DCOMM_TORCH_TEST_OUT", "/tmp") + f"/kill.{rank}"
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    t0 = None
    try:
        for step in range(1000000):
            if step == 5:
                t0 = time.time()
                if rank == victim:
                    os.kill(os.getpid(), signal.SIGKILL)
            loss = ddp(torch.randn(8, 16)).sum()
            loss.backward()
            opt.step()
        fail("training went on after a rank died")
    except RuntimeError as e:
        took = time.time() - (t0 or time.time())
        with open(out, "w") as f:
            f.write(f"{took:.3f}\n{e}\n")
        print(f"rank {rank} raised after {took:.2f} s: {str(e)[:300]}", flush=True)
        check(f"rank {victim}" in str(e), f"the error does not name rank {victim}: {e}")
    os._exit(0 if not failures else 1)  # the dead rank's group cannot be torn down politely


def main():
    what = sys.argv[1]
    timeout = datetime.timedelta(seconds=int(os.environ.get("DCOMM_TORCH_TEST_TIMEOUT_S", "120")))
    if what == "init":
        dist.init_process_group("dcomm", init_method=sys.argv[2], rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)
    else:
        dist.init_process_group("dcomm", timeout=timeout)
    check(dist.get_backend() == "dcomm", f"the backend is {dist.get_backend()}")
    gloo = dist.new_group(backend="gloo") if what in ("collectives", "ddp", "gpu") else None
    if what in ("collectives", "init"):
        check_collectives(gloo)
    elif what == "subgroups":
        check_subgroups()
    elif what == "ddp":
        check_ddp(gloo)
    elif what == "kill":
        check_kill(int(sys.argv[2]))
    elif what == "errors":
        check_errors()
    elif what == "gpu":
        check_gpu(gloo)
    print(f"rank {dist.get_rank()}: {what}: {len(failures)} failures ({gloo_compared} results also equal to Gloo's)",
          flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
