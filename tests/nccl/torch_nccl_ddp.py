"""torch's own NCCL process group on dcomm's libnccl.so.2 (issue 38; the GPU check's step
torch_nccl_ddp): under torchrun, every rank on CUDA device 0 (dcomm allows two ranks on one GPU,
NCCL does not), with dcomm's library preloaded (LD_PRELOAD) in place of the wheel's. Checks
that the loaded libnccl is dcomm's, then one DDP step of a small model whose gradients are
averaged by ProcessGroupNCCL: every rank ends with the same parameters, equal to a step taken
on one process from the mean of the ranks' gradients. Prints one line per rank; exit 1 on a
mismatch."""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def loaded_nccl():
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libnccl" in line})


def main():
    dist.init_process_group("nccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    want = os.environ.get("LD_PRELOAD", "")
    libs = loaded_nccl()
    ours = bool(want) and any(os.path.realpath(p) == os.path.realpath(want) for p in libs)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    start = [p.detach().clone() for p in model.parameters()]
    ddp = DDP(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(16, 32, generator=g).cuda(), torch.randn(16, 4, generator=g).cuda()
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    opt.step()
    torch.cuda.synchronize()

    # The reference: the same step on one process from the mean of every rank's gradient.
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    with torch.no_grad():
        for p, s in zip(ref.parameters(), start):
            p.copy_(s)
    grads = [torch.zeros_like(p) for p in ref.parameters()]
    for r in range(size):
        gr = torch.Generator().manual_seed(100 + r)
        xr, yr = torch.randn(16, 32, generator=gr).cuda(), torch.randn(16, 4, generator=gr).cuda()
        ref.zero_grad()
        torch.nn.functional.mse_loss(ref(xr), yr).backward()
        for acc, p in zip(grads, ref.parameters()):
            acc += p.grad / size
    with torch.no_grad():
        for p, gm in zip(ref.parameters(), grads):
            p -= 0.1 * gm
    err = max((a - b).abs().max().item() for a, b in zip(model.parameters(), ref.parameters()))
    ok = ours and err < 1e-5
    print(f"rank {rank}/{size}: libnccl {libs} dcomm's={ours} nccl version {torch.cuda.nccl.version()} "
          f"max |ddp - reference| {err:.2e}: {'ok' if ok else 'FAIL'}", flush=True)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
