"""torch 2.x only: what c10d::Backend offers beyond the collectives, and the parallelism people
build on it, one rank of a check (tests/torch/run_checks.py starts the ranks under torchrun).

    torch2_checks.py hooks              sequence numbers, timeouts, errors, hooks, waitForPendingWorks,
                                        time estimation, mem allocator, sparse all_reduce, any-source
    torch2_checks.py groups             eager init, split_group, new_group / new_subgroups / DeviceMesh
                                        made by splitting the parent; what each group costs
    torch2_checks.py abort              abort(): every rank's call ends, abort hooks run, getError
    torch2_checks.py window             one-sided windows (torch 2.15): put, signal, wait_signal around
                                        the ring, map_remote_tensor of allocate_tensor memory
    torch2_checks.py shrink VICTIM default|abort   under dcomm-run: VICTIM killed mid-all_reduce, then
                                        dist.shrink_group, an all_reduce and a DDP step on the survivors
    torch2_checks.py reconfigure VICTIM DIR   under dcomm-run --max-restarts 1: groups made with
                                        enable_reconfigure and dist._reconfigure (handles swapped
                                        through files in DIR): 4 ranks, VICTIM killed, the 3 survivors
                                        (a set of handles), the restarted VICTIM joined again (4), DDP
    torch2_checks.py parallel BACKEND OUT   FSDP2, DTensor on a 2-D mesh, tensor parallelism, functional
                                        collectives (eager, aot_eager, inductor), DDP static_graph,
                                        comm hooks and join(); every result saved to OUT for the
                                        runner to compare dcomm's against gloo's

Each rank prints "FAIL ..." lines for what went wrong and exits 1 if anything did.
"""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import dcomm_torch  # registers "dcomm"
from backend_checks import check, fail, failures  # one failure list and format for every check

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "ddp_trainer"))
from train import Members  # noqa: E402  (the trainer's exchange of reconfigure handles)


def raises(fn, words, what):
    try:
        fn()
    except (RuntimeError, NotImplementedError) as e:
        msg = str(e)
        check(all(w in msg for w in words), f"{what}: the error does not say {words}: {msg[:300]}")
        return
    fail(f"{what}: no error")


def backend_of(group=None):
    return (group or dist.distributed_c10d._get_default_group())._get_backend(torch.device("cpu"))


# ---- hooks ------------------------------------------------------------------------------------


def check_hooks():
    rank, world = dist.get_rank(), dist.get_world_size()
    be = backend_of()
    check(isinstance(be, dcomm_torch._C.ProcessGroupDcomm), f"the cpu backend is {type(be)}")
    # Sequence numbers: in step on every rank, one per call, also on each Work.
    s0 = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
    w = dist.all_reduce(torch.ones(4), async_op=True)
    w.wait()
    s1 = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
    check(s1 == s0 + 1, f"sequence number went {s0} -> {s1} over one call")
    check(w._get_sequence_number() == s1, f"the Work's sequence number {w._get_sequence_number()} != {s1}")
    seqs = [None] * world
    dist.all_gather_object(seqs, s1)
    check(len(set(seqs)) == 1, f"sequence numbers differ between ranks: {seqs}")
    check(w._get_duration() >= 0, "Work._get_duration")
    # all_gather_object on a subgroup needs the sequence numbers (torch's own test of it).
    sub = dist.new_group(list(range(0, world, 2)))
    if rank % 2 == 0:
        objs = [None] * len(range(0, world, 2))
        dist.all_gather_object(objs, {"rank": rank}, group=sub)
        check([o["rank"] for o in objs] == list(range(0, world, 2)), f"all_gather_object on a subgroup: {objs}")
    # Timeouts: set_timeout and the ephemeral extension reach each Work.
    be.set_timeout(datetime.timedelta(seconds=77))
    w = dist.all_reduce(torch.ones(2), async_op=True)
    w.wait()
    check(abs(w.timeout.total_seconds() - 77) < 1e-6, f"timeout after set_timeout(77 s): {w.timeout}")
    be._add_ephemeral_timeout(datetime.timedelta(seconds=5))
    w = dist.all_reduce(torch.ones(2), async_op=True)
    check(abs(w.timeout.total_seconds() - 82) < 1e-6, f"timeout with a 5 s extension: {w.timeout}")
    w.wait()
    w = dist.all_reduce(torch.ones(2), async_op=True)
    w.wait()
    check(abs(w.timeout.total_seconds() - 77) < 1e-6, f"the extension outlived its first call: {w.timeout}")
    raises(lambda: be.set_timeout(datetime.timedelta(seconds=0)), ["setTimeout", "positive"], "set_timeout(0)")
    be.set_timeout(datetime.timedelta(seconds=120))
    check(be.get_error() == dist.distributed_c10d.ErrorType.SUCCESS if hasattr(dist.distributed_c10d, "ErrorType")
          else str(be.get_error()).endswith("SUCCESS"), f"get_error on a healthy group: {be.get_error()}")
    # Completion hooks: the C++ one (key and duration of every call), and torch's on-completion.
    for work_key, hook_key, ms in dcomm_torch._C._completion_hook_probe(be, torch.ones(16), 5):
        check(work_key == hook_key and work_key > 0 and ms >= 0, f"completion hook saw ({hook_key}, {ms}) for {work_key}")
    check(be.supports_completion_hooks and be.supports_abort_hooks, "supports_*_hooks")
    infos = []
    pg = dist.distributed_c10d._get_default_group()
    pg._register_on_completion_hook(lambda info: infos.append((info.op_type, info.seq)))
    dist.all_reduce(torch.ones(3))
    dist.broadcast(torch.ones(3), src=0)
    check([str(i[0]).split(".")[-1] for i in infos][-2:] == ["ALLREDUCE", "BROADCAST"], f"on-completion hook: {infos}")
    # waitForPendingWorks: every queued call has ended when it returns.
    works = [dist.all_reduce(torch.ones(1 << 20), async_op=True) for _ in range(3)]
    pg._wait_for_pending_works()
    check(all(x.is_completed() for x in works), "_wait_for_pending_works returned with calls in flight")
    # Time estimation: calls are predicted, not run (the tensor keeps its value).
    t = torch.full((1 << 20,), 1.0)
    with dist._time_estimator() as est:
        dist.all_reduce(t)
        dist.all_gather_into_tensor(torch.empty(world << 20), t)
    check(torch.equal(t, torch.full((1 << 20,), 1.0)), "a call inside _time_estimator ran")
    with dist._time_estimator() as small:
        dist.all_reduce(torch.ones(16))
    check(est.estimated_time > small.estimated_time > 0, f"estimates {est.estimated_time} / {small.estimated_time} us")
    # Tensors in dcomm's shareable memory: usable by every collective, in and out of place.
    check(be.supports_tensor_alloc(torch.device("cpu")), "supports_tensor_alloc(cpu)")
    a = be.allocate_tensor(1 << 16, dtype=torch.float32, device=torch.device("cpu"))
    b = be.allocate_tensor(world << 16, dtype=torch.float32, device=torch.device("cpu"))
    check(a.shape == (1 << 16,) and a.dtype == torch.float32, f"allocate_tensor: {a.shape} {a.dtype}")
    a.fill_(rank + 1)
    dist.all_gather_into_tensor(b, a)
    check(torch.equal(b, torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(1 << 16)),
          "all_gather_into_tensor on allocate_tensor memory")
    dist.all_reduce(a)
    check(torch.equal(a, torch.full((1 << 16,), float(world * (world + 1) // 2))), "all_reduce on allocate_tensor memory")
    del a, b
    # Sparse all_reduce (DDP's sparse gradients): the sum, coalesced, as Gloo's.
    gloo = dist.new_group(backend="gloo")
    idx = torch.tensor([[rank, (rank + 1) % 5, 4]])
    vals = torch.tensor([[1.0, 2.0], [3.0, 4.0], [float(rank), 1.0]])
    mine = torch.sparse_coo_tensor(idx, vals, (6, 2))
    theirs = torch.sparse_coo_tensor(idx, vals, (6, 2))
    dist.all_reduce(mine)
    dist.all_reduce(theirs, group=gloo)
    check(torch.equal(mine.to_dense(), theirs.to_dense()), f"sparse all_reduce: {mine.to_dense()} != Gloo's")
    raises(lambda: dist.all_reduce(torch.sparse_coo_tensor(idx, vals, (6, 2)), op=dist.ReduceOp.MAX),
           ["sparse", "SUM"], "sparse MAX")
    # gather into one tensor, and the `_single` names torch 2.15 gives the tensor forms.
    for root in range(world):
        flat = torch.full((world * 3,), -1.0)
        dist.gather_into_tensor(torch.full((3,), float(rank)), flat if rank == root else None, dst=root)
        if rank == root:
            check(torch.equal(flat, torch.arange(world, dtype=torch.float32).repeat_interleave(3)),
                  f"gather_into_tensor root {root}: {flat}")
    ag = torch.empty(world * 2)
    dist.all_gather_single(ag, torch.full((2,), float(rank)))
    check(torch.equal(ag, torch.arange(world, dtype=torch.float32).repeat_interleave(2)), f"all_gather_single: {ag}")
    rs = torch.empty(2)
    dist.reduce_scatter_single(rs, torch.arange(world * 2, dtype=torch.float32) + rank)
    want = (torch.arange(world * 2, dtype=torch.float32) * world + sum(range(world)))[rank * 2:rank * 2 + 2]
    check(torch.equal(rs, want), f"reduce_scatter_single: {rs} != {want}")
    # Receive from any source: refused, naming what to do.
    if world > 1:
        raises(lambda: dist.recv(torch.zeros(2)), ["any source", "src="], "recv without src")
    dist.barrier()


# ---- one-sided windows (torch 2.15) ------------------------------------------------------------


def check_window():
    rank, world = dist.get_rank(), dist.get_world_size()
    c10d = dist.distributed_c10d
    check(c10d._supports_window(), "the dcomm group does not say it supports windows")
    right, left = (rank + 1) % world, (rank - 1) % world
    # A window over memory from the backend's allocator: peers can map it.
    be = backend_of()
    buf = be.allocate_tensor(4096, dtype=torch.float32, device=torch.device("cpu"))
    buf.fill_(-1.0)
    win = c10d._new_window(buf)
    for rnd in range(3):
        # Into the right neighbour's window at element 1000 * rnd, then a signal; wait for the left's.
        win.put(torch.full((1000,), float(rank * 10 + rnd)), right, 1000 * rnd, False)
        win.signal(right, False)
        win.wait_signal(left, False)
        got = buf[1000 * rnd:1000 * (rnd + 1)]
        check(torch.equal(got, torch.full((1000,), float(left * 10 + rnd))),
              f"round {rnd}: window holds {got[:3].tolist()}..., want {left * 10 + rnd}")
    check(buf[3000].item() == -1.0, "a put ran past its 1000 elements")
    # async: the Work completes; map_remote_tensor sees the right neighbour's window.
    w = win.put(torch.full((96,), float(100 + rank)), right, 4000, True)
    w.wait()
    win.signal(right, True).wait()
    win.wait_signal(left, True).wait()
    check(buf[4000].item() == float(100 + left), f"async put: {buf[4000].item()}")
    if os.environ.get("DCOMM_TRANSPORT") == "tcp":  # puts went over the wire: nothing to map
        raises(lambda: win.map_remote_tensor(right), ["reached over TCP"], "map_remote_tensor over TCP")
    else:
        theirs = win.map_remote_tensor(right)
        check(theirs.shape == (4096,) and theirs[4000].item() == float(100 + rank),
              f"map_remote_tensor({right}): {tuple(theirs.shape)} "
              f"{theirs[4000].item() if theirs.numel() > 4000 else None}")
    check(str(win.get_attr(right).access_type).endswith("UNIFIED"), f"get_attr: {win.get_attr(right).access_type}")
    raises(lambda: win.put(torch.ones(10), right, 4090, False), ["past rank"], "a put past the window")
    raises(lambda: win.put(torch.ones(10, dtype=torch.float64), right, 0, False), ["Double", "Float"],
           "a put of another dtype")
    dist.barrier()
    win.tensor_deregister()
    raises(lambda: win.put(torch.ones(1), right, 0, False), ["tensor_register"], "a put after tensor_deregister")
    # A window over ordinary memory: puts go by cross-memory attach (or the wire); its peers
    # cannot be mapped.
    plain = torch.zeros(64)
    win2 = c10d._new_window()
    win2.tensor_register(plain)
    win2.put(torch.full((64,), float(rank + 1)), right, 0, False)
    win2.signal(right, False)
    win2.wait_signal(left, False)
    check(torch.equal(plain, torch.full((64,), float(left + 1))), f"heap window: {plain[:3].tolist()}")
    if world > 1:
        raises(lambda: win2.map_remote_tensor(right), ["cannot be mapped"], "map_remote_tensor of heap memory")
    dist.barrier()


# ---- groups -----------------------------------------------------------------------------------


def resources():
    """This process's open fds, threads, and shared-memory files it maps (and their MiB)."""
    shm = {}
    for line in open("/proc/self/maps"):
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/dev/shm/"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            shm[parts[5]] = shm.get(parts[5], 0) + hi - lo
    return (len(os.listdir("/proc/self/fd")), threading.active_count(), len(os.listdir("/proc/self/task")),
            len(shm), sum(shm.values()) >> 20)


def check_groups():
    rank, world = dist.get_rank(), dist.get_world_size()
    check(dist.distributed_c10d._get_default_group().bound_device_id == torch.device("cpu", 0), "eager init: no device bound")
    before = resources()
    # split_group: the parent's communicator split; every rank calls it.
    halves = [list(range(0, world // 2)), list(range(world // 2, world))]
    g = dist.split_group(split_ranks=halves)
    mine = halves[0] if rank in halves[0] else halves[1]
    t = torch.full((5,), float(rank))
    dist.all_reduce(t, group=g)
    check(torch.equal(t, torch.full((5,), float(sum(mine)))), f"split_group all_reduce {mine}: {t}")
    # new_group with the parent bound to a device: made by split (non-members split with no color).
    odd = dist.new_group([r for r in range(world) if r % 2])
    if rank % 2:
        t = torch.full((3,), 1.0)
        dist.all_reduce(t, group=odd)
        check(torch.equal(t, torch.full((3,), float(world // 2))), f"new_group (split) all_reduce: {t}")
        check(isinstance(backend_of(odd), dcomm_torch._C.ProcessGroupDcomm), "new_group's backend")
    sub, _ = dist.new_subgroups(group_size=2)
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, group=sub)
    base = rank - rank % 2
    check(torch.equal(t, torch.full((2,), float(2 * base + 1))), f"new_subgroups all_reduce: {t}")
    # A 2-D DeviceMesh: its row and column groups.
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
    for dim in ("dp", "tp"):
        grp = mesh.get_group(dim)
        t = torch.full((4,), float(rank))
        dist.all_reduce(t, group=grp)
        members = dist.get_process_group_ranks(grp)
        check(torch.equal(t, torch.full((4,), float(sum(members)))), f"DeviceMesh {dim} group {members}: {t}")
    after = resources()
    if rank == 0:
        print(f"groups: before fds={before[0]} threads={before[2]} shm files={before[3]} ({before[4]} MiB); after "
              f"split_group, new_subgroups and a 2-D mesh (4 groups with rank 0): fds={after[0]} threads={after[2]} "
              f"shm files={after[3]} ({after[4]} MiB)", flush=True)
    store = dist.distributed_c10d._get_default_store()
    check(store is not None, "default store")
    dist.barrier()


def check_abort():
    """Rank 1 aborts while the others are in an all_reduce: every rank's call ends, naming it."""
    rank = dist.get_rank()
    be = backend_of()
    ran = []
    pg = dist.distributed_c10d._get_default_group()
    pg.register_abort_hook(7, lambda: ran.append(1)) if hasattr(pg, "register_abort_hook") else \
        be.register_abort_hook(7, lambda: ran.append(1))
    dist.all_reduce(torch.ones(4))
    t0 = time.time()
    if rank == 1:
        time.sleep(0.5)
        be.abort()
        check(ran == [1], f"abort hooks ran {len(ran)} times on the aborting rank")
    else:
        try:
            dist.all_reduce(torch.ones(4))
            fail("all_reduce went on after rank 1 aborted")
        except RuntimeError as e:
            took = time.time() - t0
            check("abort" in str(e) and "rank 1" in str(e), f"the error does not name the abort: {e}")
            check(took < 20, f"the abort took {took:.1f} s to arrive")
        check(ran == [1], f"abort hooks ran {len(ran)} times on a survivor")
    check(str(be.get_error()).split(".")[-1] in ("REMOTE_ERROR", "COMM_ERROR"), f"get_error after abort: {be.get_error()}")
    raises(lambda: dist.all_reduce(torch.ones(4)), ["abort"], "a call after abort")
    print(f"rank {rank}: abort: {len(failures)} failures", flush=True)
    os._exit(1 if failures else 0)


def lose_mid_all_reduce(rank, victim):
    """Rank `victim` kills itself (SIGKILL) while every rank loops on all_reduce; the others' loop
    ends with an error that names it."""
    import signal
    if rank == victim:
        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    try:
        while True:
            dist.all_reduce(torch.ones(1 << 16))
    except RuntimeError as e:
        check(f"rank {victim}" in str(e), f"the error does not name rank {victim}: {str(e)[:300]}")


def ddp_step_agrees(model, rank, what):
    """DDP made over the default group (rank 0's parameters to all) takes a step on each rank's own
    batch: the parameters must then be equal on every rank."""
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp(torch.full((2, 8), float(rank))).sum().backward()
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    mine = torch.cat([p.detach().flatten() for p in ddp.parameters()])
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(every, mine)
    check(all(torch.equal(every[0], t) for t in every), f"{what}: parameters differ after a step")


def check_shrink(victim, flags):
    """Run under dcomm-run (the survivors go on): rank `victim` is killed with SIGKILL during an
    all_reduce; every survivor's call raises naming it, lost_ranks() says which, dist.shrink_group
    (SHRINK_DEFAULT or SHRINK_ABORT) makes the survivors' group the default one, ranks renumbered;
    an all_reduce sums exactly on it, and DDP rebuilt over it takes a step with the same result on
    every survivor (the parameters carry over; the gradients are averaged over the survivors)."""
    from torch.distributed.distributed_c10d import SHRINK_ABORT, SHRINK_DEFAULT
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(8, 4)  # the same initial parameters on every rank
    x = torch.ones(1 << 16)
    for _ in range(3):
        dist.all_reduce(x)
    lose_mid_all_reduce(rank, victim)
    lost = backend_of().lost_ranks(within_s=5)
    check(lost == [victim], f"lost_ranks() is {lost}, not [{victim}]")
    group = dist.shrink_group(lost, shrink_flags=SHRINK_ABORT if flags == "abort" else SHRINK_DEFAULT)
    survivors = [r for r in range(n) if r != victim]
    check(dist.get_world_size() == n - 1 and dist.get_rank() == survivors.index(rank),
          f"after the shrink: rank {dist.get_rank()} of {dist.get_world_size()}")
    y = torch.full((1000,), float(rank + 1))
    dist.all_reduce(y, group=group)
    check(y[999].item() == sum(r + 1 for r in survivors), f"the survivors' all_reduce gave {y[999].item()}")
    ddp_step_agrees(model, rank, "DDP over the survivors")
    print(f"rank {rank}: shrink past rank {victim} ({flags}): {len(failures)} failures", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


def check_reconfigure(victim, folder):
    """Run under dcomm-run --max-restarts 1, 4 ranks. Every process makes its default group with
    enable_reconfigure=True (no communicator until dist._reconfigure; a call before it is refused),
    and the members swap handles through files. Generation 0: all 4 (a list: ranks by launch rank).
    VICTIM is killed mid-all_reduce; generation 1: the 3 survivors (a set: ranks by the handles'
    order); generation 2: the survivors and the process dcomm-run started in VICTIM's place. Each
    generation sums exactly; DDP made after generation 2 (its parameters from rank 0) takes a step
    with the same result on every rank. A stale uuid and a list without this process are refused."""
    launch, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    restarted = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("dcomm", store=dist.HashStore(), rank=launch, world_size=n, timeout=timeout,
                            enable_reconfigure=True)
    check(dist.distributed_c10d._supports_reconfigure(), "the dcomm group does not support reconfigure")
    raises(lambda: dist.all_reduce(torch.ones(2)), ["enable_reconfigure", "reconfigure"], "a call before reconfigure")
    peers = Members(folder, launch)  # the trainer's out-of-band exchange of handles, through files
    handle = peers.handle
    survivors = [r for r in range(n) if r != victim]

    def summed(members):
        y = torch.full((1000,), float(launch + 1))
        dist.all_reduce(y)
        check(y[999].item() == sum(r + 1 for r in members), f"{len(members)} members summed {y[999].item()}")

    if not restarted:
        handles = peers.exchange(0, list(range(n)))
        raises(lambda: dist.distributed_c10d._reconfigure(uuid=7, handles=handles[:launch] + handles[launch + 1:]),
               ["handle", "not among"], "a reconfigure without this process's handle")
        dist.distributed_c10d._reconfigure(uuid=0, handles=handles).wait()
        check((dist.get_rank(), dist.get_world_size()) == (launch, n),
              f"generation 0: rank {dist.get_rank()} of {dist.get_world_size()}")
        summed(list(range(n)))
        lose_mid_all_reduce(launch, victim)
        handles = peers.exchange(1, survivors)
        dist.distributed_c10d._reconfigure(uuid=1, handles=set(handles)).wait()
        check((dist.get_rank(), dist.get_world_size()) == (sorted(handles).index(handle), n - 1),
              f"generation 1: rank {dist.get_rank()} of {dist.get_world_size()}")
        summed(survivors)
        raises(lambda: dist.distributed_c10d._reconfigure(uuid=1, handles=handles), ["uuid 1", "used already"],
               "a reconfigure with a used uuid")
    handles = peers.exchange(2, list(range(n)))
    dist.distributed_c10d._reconfigure(uuid=2, handles=handles).wait()
    check((dist.get_rank(), dist.get_world_size()) == (launch, n),
          f"generation 2: rank {dist.get_rank()} of {dist.get_world_size()}")
    summed(list(range(n)))
    torch.manual_seed(launch)  # different initial parameters: DDP hands rank 0's to all
    ddp_step_agrees(nn.Linear(8, 4), launch, "DDP after the rejoin")
    print(f"rank {launch}{' (restarted)' if restarted else ''}: reconfigure past rank {victim}: "
          f"{len(failures)} failures", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


def main():
    what = sys.argv[1]
    if what == "reconfigure":
        check_reconfigure(int(sys.argv[2]), sys.argv[3])
    timeout = datetime.timedelta(seconds=int(os.environ.get("DCOMM_TORCH_TEST_TIMEOUT_S", "120")))
    if what == "parallel":
        import parallel_checks
        sys.exit(parallel_checks.main(sys.argv[2], sys.argv[3], timeout))
    eager = {"device_id": torch.device("cpu", 0)} if what == "groups" else {}
    dist.init_process_group("dcomm", timeout=timeout, **eager)
    if what == "hooks":
        check_hooks()
    elif what == "groups":
        check_groups()
    elif what == "abort":
        check_abort()
    elif what == "window":
        check_window()
    elif what == "shrink":
        check_shrink(int(sys.argv[2]), sys.argv[3])
    print(f"rank {dist.get_rank()}: {what}: {len(failures)} failures", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
