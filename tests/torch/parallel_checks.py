"""The parallelism people build on torch 2.x, on one backend (dcomm or gloo), one rank of four:
torch2_checks.py parallel BACKEND OUT runs it and saves every result to OUT/BACKEND.RANK.pt;
run_checks.py compares dcomm's files with gloo's (data movement exactly, training to 1e-5).

    FSDP2 (fully_shard) training, 3 steps
    DTensor on a 2x2 DeviceMesh: shard, replicate, redistribute
    tensor parallelism: parallelize_module with ColwiseParallel / RowwiseParallel, forward and backward
    functional collectives eager, and inside torch.compile (aot_eager, inductor)
    DDP with static_graph, the fp16 and bf16 compression hooks, sparse gradients, and join() with
    uneven inputs
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn

import dcomm_torch  # noqa: F401  registers "dcomm"


class MLP(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.up = nn.Linear(16, width)
        self.down = nn.Linear(width, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def batch(rank, step, rows=8):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(rows, 16, generator=g), torch.randn(rows, 16, generator=g)


def fsdp2(out):
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(7)
    model = nn.Sequential(MLP(), MLP())
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    train(model, dist.get_rank(), 3)
    for name, p in model.named_parameters():
        out[f"fsdp2/{name}"] = p.full_tensor().detach().clone()


def dtensor(out, mesh2d):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    torch.manual_seed(11)
    full = torch.randn(8, 6)
    t = distribute_tensor(full, mesh2d, [Shard(0), Replicate()])
    out["dtensor/local_shard"] = t.to_local().clone()
    r = t.redistribute(mesh2d, [Replicate(), Shard(1)])
    out["dtensor/redistributed_local"] = r.to_local().clone()
    out["dtensor/full"] = r.full_tensor().clone()
    s = (t * 2 + 1).sum()  # a reduction across the sharded dim (partial -> replicate)
    out["dtensor/sum"] = s.full_tensor().clone()
    m = distribute_tensor(torch.arange(24.0).reshape(4, 6), mesh2d, [Shard(0), Shard(1)])
    out["dtensor/matmul"] = (m @ distribute_tensor(torch.ones(6, 3), mesh2d, [Replicate(), Replicate()])).full_tensor()


def tensor_parallel(out, tp_mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    torch.manual_seed(13)
    model = MLP(width=8)
    model = parallelize_module(model, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    x, y = batch(0, 0)  # the same input on every rank of the tp group
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    out["tp/loss"] = loss.detach().clone()
    for name, p in model.named_parameters():
        out[f"tp/grad/{name}"] = p.grad.full_tensor().clone()


def functional(out):
    import torch.distributed._functional_collectives as fc
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD

    def f(t):
        a = fc.all_reduce(t, "sum", group)
        b = fc.all_gather_tensor(a * 2, 0, group)
        c = fc.reduce_scatter_tensor(b, "sum", 0, group)
        return a, b, c

    t = torch.arange(8.0) + rank
    out["fc/eager"] = torch.cat([x.flatten() for x in f(t)])
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        got = torch.compile(f, backend=backend, fullgraph=True)(t)
        out[f"fc/{backend}"] = torch.cat([x.flatten() for x in got])
    # the in-place form and a tensor list (all_to_all_single)
    a2a = fc.all_to_all_single(torch.arange(world * 2.0) + 10 * rank, None, None, group)
    out["fc/all_to_all_single"] = a2a * 1  # an op on the result waits for it


def train(model, rank, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(steps):
        x, y = batch(rank, step)
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()


def ddp(out):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.join import Join
    rank = dist.get_rank()
    for tag, hook, static in (("static", None, True), ("fp16", default_hooks.fp16_compress_hook, False),
                              ("bf16", default_hooks.bf16_compress_hook, False)):
        torch.manual_seed(17)
        model = nn.parallel.DistributedDataParallel(MLP(), static_graph=static)
        if hook:
            model.register_comm_hook(None, hook)
        train(model, rank, 3)
        for name, p in model.module.named_parameters():
            out[f"ddp/{tag}/{name}"] = p.detach().clone()
    # Sparse gradients (an embedding with sparse=True): DDP all-reduces them as sparse tensors.
    torch.manual_seed(23)
    emb = nn.parallel.DistributedDataParallel(nn.Embedding(50, 8, sparse=True))
    opt = torch.optim.SGD(emb.parameters(), lr=0.5)
    for step in range(3):
        ids = torch.randint(0, 50, (6,), generator=torch.Generator().manual_seed(rank * 10 + step))
        emb(ids).square().sum().backward()
        opt.step()
        opt.zero_grad()
    out["ddp/sparse/weight"] = emb.module.weight.detach().clone()
    # Uneven inputs: rank r has 2 + r batches; join() shadows the missing all-reduces.
    torch.manual_seed(19)
    model = nn.parallel.DistributedDataParallel(MLP())
    with Join([model]):
        train(model, rank, 2 + rank)
    for name, p in model.module.named_parameters():
        out[f"ddp/join/{name}"] = p.detach().clone()


def main(backend, out_dir, timeout):
    dist.init_process_group(backend, timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 4, "the parallelism checks run on 4 processes"
    from torch.distributed.device_mesh import init_device_mesh
    mesh2d = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    out = {}
    fsdp2(out)
    dtensor(out, mesh2d)
    tensor_parallel(out, mesh2d["tp"])
    functional(out)
    ddp(out)
    torch.save(out, os.path.join(out_dir, f"{backend}.{rank}.pt"))
    print(f"rank {rank}: parallel on {backend}: {len(out)} results", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0
