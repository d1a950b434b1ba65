#!/usr/bin/python3
"""The Python twin of ddp_trainer: the same data, models, sampling and optimizer with torch's own
DistributedDataParallel, on the dcomm torch backend (or Gloo, to compare).

    torchrun --nproc-per-node 2 examples/ddp_trainer/train.py [--model cnn|mlp] [--epochs N]
             [--batch B] [--accum K] [--lr X] [--bucket-mb X] [--backend dcomm|gloo] [--out DIR]
             [--steps N] [--train-limit N]
    dcomm-run -n 4 -- python examples/ddp_trainer/train.py --elastic [...]   (torch 2.15)
    dcomm-run -n 4 --max-restarts 1 -- python examples/ddp_trainer/train.py --elastic --rejoin DIR

--elastic does what the C++ trainer's does (elastic.hpp): when a rank dies, the survivors
dist.shrink_group past it, rebuild DDP over the new group and redo the step it interrupted, with
the same global batch split over them; nothing is reloaded. With --rejoin DIR the group is made
with enable_reconfigure and every change of members is a dist._reconfigure, the members swapping
their handles through files in DIR: the survivors reconfigure without the dead, then with the
process dcomm-run started in its place, which takes rank 0's position, parameters and momentum.

Needs dcomm_torch importable (PYTHONPATH=build/python, or pip install ./python). Writes
OUT/metrics.csv with the C++ trainer's columns (exposed communication is not measured here).
"""
import argparse
import contextlib
import gzip
import os
import signal
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def load(data, split):
    def idx(path, dims):
        raw = gzip.open(path).read()
        magic = int.from_bytes(raw[:4], "big")
        if magic != 0x800 | dims:
            raise SystemExit(f"train.py: {path}: wrong magic number {magic}")
        shape = [int.from_bytes(raw[4 + 4 * d: 8 + 4 * d], "big") for d in range(dims)]
        body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims)
        if body.size != int(np.prod(shape)):
            raise SystemExit(f"train.py: {path}: truncated")
        return body.reshape(shape)
    images = idx(f"{data}/{split}-images-idx3-ubyte.gz", 3)
    labels = idx(f"{data}/{split}-labels-idx1-ubyte.gz", 1)
    x = (torch.from_numpy(images.copy()).float().div_(255).sub_(0.2860).div_(0.3530)).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.c(F.relu(self.b(F.relu(self.a(x.flatten(1))))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1)
        self.f1, self.f2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.f2(F.relu(self.f1(x.flatten(1))))


def global_order(n, size, seed, epoch):
    """torch's DistributedSampler's permutation for `size` ranks before it deals it out (rank r takes
    positions r, r + size, ...): shuffled from seed + epoch, padded from its start to a multiple."""
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    order = torch.randperm(n, generator=g)
    total = -(-n // size) * size
    return torch.cat([order, order[:total - n]])


class Members:
    """--rejoin DIR: who is in the group, by launch rank in rank order, and the reconfigure
    generations. Each change of members swaps the members' handles through files in DIR (the
    out-of-band exchange torch leaves to the caller) and calls dist._reconfigure."""

    def __init__(self, folder, launch_rank):
        from torch.distributed.distributed_c10d import _get_reconfigure_handle
        self.folder, self.launch, self.generation, self.members = folder, launch_rank, -1, []
        self.handle = _get_reconfigure_handle()

    def path(self, name):
        return os.path.join(self.folder, name)

    def publish(self, name, text):  # whole or not at all
        with open(self.path(name) + ".tmp", "w") as f:
            f.write(text)
        os.rename(self.path(name) + ".tmp", self.path(name))

    def wait_for(self, name, within=60):
        until = time.time() + within
        while not os.path.exists(self.path(name)):
            if time.time() > until:
                raise RuntimeError(f"--rejoin: {self.path(name)} did not appear within {within} s")
            time.sleep(0.01)
        return open(self.path(name)).read()

    def exchange(self, generation, members):
        """This process's handle out, the members' handles (by launch rank, in `members`' order) in."""
        self.publish(f"gen{generation}.{self.launch}", self.handle)
        return [self.wait_for(f"gen{generation}.{r}") for r in members]

    def reconfigure(self, generation, members):
        from torch.distributed.distributed_c10d import _reconfigure
        _reconfigure(uuid=generation, handles=self.exchange(generation, members)).wait()
        self.generation, self.members = generation, list(members)


def lost_ranks(error):
    """The ranks of the default group whose processes died (waiting up to 5 s for the backend to
    see it); re-raises `error` when none did."""
    from torch.distributed.distributed_c10d import _get_default_group
    lost = _get_default_group()._get_backend(torch.device("cpu")).lost_ranks(within_s=5)
    if not lost:
        raise error
    return lost


def share_state(module, opt, root, position=None):
    """Every rank takes root's parameters and momentum (and position: epoch and step)."""
    if position is not None:
        dist.broadcast(position, root)
    with torch.no_grad():
        for p in module.parameters():
            dist.broadcast(p.data, root)
            buf = opt.state[p].get("momentum_buffer") if p in opt.state else None
            have = torch.tensor([int(buf is not None)])
            dist.broadcast(have, root)
            if have.item():
                if buf is None:
                    buf = opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
                dist.broadcast(buf, root)
            elif p in opt.state:
                opt.state[p].pop("momentum_buffer", None)


def recover(model, opt, step, error, bucket_mb, members=None):
    """After step `step` failed (a rank died): shrink past the dead (or, with --rejoin, reconfigure
    without them), take the parameters and momentum of the survivor that applied the fewest steps,
    rebuild DDP; returns (model, the step to redo)."""
    from torch.distributed.distributed_c10d import SHRINK_ABORT
    t0 = time.perf_counter()
    lost = lost_ranks(error)
    t1 = time.perf_counter()
    if members:
        members.reconfigure(members.generation + 1, [r for i, r in enumerate(members.members) if i not in lost])
    else:
        dist.shrink_group(lost, shrink_flags=SHRINK_ABORT)
    t2 = time.perf_counter()
    applied = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(applied, torch.tensor([step]))
    root = min(range(len(applied)), key=lambda r: (applied[r].item(), r))
    module = model.module
    share_state(module, opt, root)
    redo = applied[root].item()
    if dist.get_rank() == 0:
        print(f"--elastic: lost rank {','.join(map(str, lost))}; {dist.get_world_size()} ranks go on from step "
              f"{redo} (lost_ranks {1e3 * (t1 - t0):.1f} ms, {'reconfigure' if members else 'shrink_group'} "
              f"{1e3 * (t2 - t1):.1f} ms)", flush=True)
    return nn.parallel.DistributedDataParallel(module, bucket_cap_mb=bucket_mb), redo


def grow_back(module, opt, members, epoch, step, launch_size):
    """--rejoin, on the survivors after recover(): their rank 0 names the next generation and its
    members in DIR/rejoin (the survivors in their order, then the missing launch ranks); the
    processes started in the dead ranks' places (main) and the survivors reconfigure over them,
    and all take rank 0's position and state."""
    generation = members.generation + 1
    order = members.members + [r for r in range(launch_size) if r not in members.members]
    lead = dist.get_rank() == 0
    if lead:
        members.publish("rejoin", " ".join(map(str, [generation, *order])))
    t0 = time.perf_counter()
    members.reconfigure(generation, order)
    if lead:
        os.remove(members.path("rejoin"))  # a later restart waits for a new one
        print(f"--rejoin: launch ranks {order} as ranks 0-{len(order) - 1}; {len(order)} ranks go on from step "
              f"{step} ({1e3 * (time.perf_counter() - t0):.1f} ms)", flush=True)
    share_state(module, opt, 0, torch.tensor([epoch, step]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--model", default="cnn", choices=["cnn", "mlp"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64, help="per rank")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--bucket-mb", type=float, default=25)
    p.add_argument("--backend", default="dcomm", choices=["dcomm", "gloo"])
    p.add_argument("--out", default="ddp_trainer_py_out")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="at most this many steps per epoch (0: the whole shard)")
    p.add_argument("--train-limit", type=int, default=0, help="only the first N training images (0: all)")
    p.add_argument("--elastic", action="store_true", help="go on past a rank that dies (torch 2.15, backend dcomm)")
    p.add_argument("--rejoin", metavar="DIR", help="with --elastic: a restarted rank joins again (dist._reconfigure)")
    p.add_argument("--kill-rank", type=int, default=-1, help="tests: this rank kills itself (SIGKILL) ...")
    p.add_argument("--kill-at", default="1:5", help="... at step S of epoch E (E:S)")
    a = p.parse_args()
    if a.backend == "dcomm":
        import dcomm_torch  # noqa: F401  (registers "dcomm")
    torch.set_num_threads(1)
    first_rank, first_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    joined, members = False, None
    if a.rejoin:  # every change of members is a reconfigure (Members)
        os.makedirs(a.rejoin, exist_ok=True)
        dist.init_process_group(a.backend, store=dist.HashStore(), rank=first_rank, world_size=first_size,
                                enable_reconfigure=True)
        members = Members(a.rejoin, first_rank)
        joined = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
        if joined:  # started again in a dead rank's place: the survivors' next generation
            generation, *order = map(int, members.wait_for("rejoin").split())
            members.reconfigure(generation, order)
        else:
            members.reconfigure(0, range(first_size))
    else:
        dist.init_process_group(a.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    train_x, train_y = load(a.data, "train")
    if a.train_limit:
        train_x, train_y = train_x[:a.train_limit], train_y[:a.train_limit]
    test_x, test_y = load(a.data, "t10k")
    torch.manual_seed(a.seed)
    module = Mlp() if a.model == "mlp" else Cnn()
    opt = torch.optim.SGD(module.parameters(), lr=a.lr, momentum=a.momentum)
    position = torch.tensor([1, 0])  # epoch, step: where a process that joins starts
    if joined:  # as the survivors in grow_back, before DDP
        share_state(module, opt, 0, position)
    model = nn.parallel.DistributedDataParallel(module, bucket_cap_mb=a.bucket_mb)
    sampler = torch.utils.data.DistributedSampler(range(len(train_x)), num_replicas=size, rank=rank, seed=a.seed)
    steps = len(sampler) // (a.batch * a.accum)
    global_micro = a.batch * first_size  # a micro-batch's samples over all ranks, however many are left
    kill_epoch, kill_step = (int(x) for x in a.kill_at.split(":"))
    if a.steps:
        steps = min(steps, a.steps)
    csv = None  # rank 0's; after rank 0 died (--elastic) the survivors' rank 0 takes the file over
    if rank == 0 and not joined:
        os.makedirs(a.out, exist_ok=True)
        csv = open(os.path.join(a.out, "metrics.csv"), "w")
        csv.write("epoch,loss,test_accuracy,samples_per_s,exposed_comm_share,step_ms\n")
        csv.flush()
        print(f"# train.py: {a.model}, {size} ranks, backend {a.backend}, batch {a.batch} x {a.accum}, {steps} steps per epoch")
    for epoch in range(position[0].item(), a.epochs + 1):
        sampler.set_epoch(epoch)
        order = global_order(len(train_x), first_size, a.seed, epoch)
        t0, loss_sum = time.perf_counter(), 0.0
        model.train()
        s = position[1].item() if joined and epoch == position[0].item() else 0
        while s < steps:
            if first_rank == a.kill_rank and not joined and (epoch, s) == (kill_epoch, kill_step):
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                step_loss = 0.0
                for k in range(a.accum):
                    # Positions base .. base + global_micro of the epoch's order, every size-th
                    # from this rank: the sampler's shard while no rank is lost.
                    base = (s * a.accum + k) * global_micro
                    b = order[base + rank:base + global_micro:size]
                    weight = len(b) * size / global_micro  # 1 while every rank takes a.batch samples
                    with model.no_sync() if k < a.accum - 1 else contextlib.nullcontext():
                        loss = F.cross_entropy(model(train_x[b]), train_y[b]) * weight / a.accum
                        loss.backward()
                    step_loss += loss.item()
                opt.step()
                opt.zero_grad()
            except RuntimeError as e:
                if not a.elastic:
                    raise
                opt.zero_grad()
                model, s = recover(model, opt, s, e, a.bucket_mb, members)
                if members:
                    grow_back(model.module, opt, members, epoch, s, first_size)
                    model = nn.parallel.DistributedDataParallel(model.module, bucket_cap_mb=a.bucket_mb)
                rank, size = dist.get_rank(), dist.get_world_size()
                continue
            loss_sum += step_loss
            s += 1
            if rank == 0 and s % max(1, steps // 4) == 0:
                print(f"  epoch {epoch}  step {s}/{steps}  loss {loss_sum / s:.4f}", flush=True)
        took = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            mine = torch.arange(rank, len(test_x), size)
            correct = sum(int((model.module(test_x[mine[i:i + 1000]]).argmax(1) == test_y[mine[i:i + 1000]]).sum())
                          for i in range(0, len(mine), 1000))
        figs = torch.tensor([loss_sum / max(1, steps), float(correct), float(len(mine)), took], dtype=torch.float64)
        dist.all_reduce(figs)
        if rank == 0:
            csv = csv or open(os.path.join(a.out, "metrics.csv"), "a")
            loss, acc = figs[0].item() / size, figs[1].item() / figs[2].item()
            sps = steps * a.batch * a.accum * size / (figs[3].item() / size)
            print(f"epoch {epoch}  loss {loss:.4f}  test accuracy {100 * acc:.2f}%  {sps:.0f} samples/s")
            csv.write(f"{epoch},{loss:.6f},{acc:.6f},{sps:.1f},,{1e3 * figs[3].item() / size / max(1, steps):.4f}\n")
            csv.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
