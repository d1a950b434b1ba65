"""dcomm as a torch.distributed backend.

    import torch.distributed as dist
    import dcomm_torch              # registers the backend "dcomm"
    dist.init_process_group(backend="dcomm")

Every process group made with backend "dcomm" (the default group, new_group) gets its own
dcomm communicator, rendezvoused through the store torch hands it. See docs/pytorch.md.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND", "cuda_enabled"]

BACKEND = "dcomm"
cuda_enabled = bool(_C.cuda)


def _create(store, rank, size, timeout):
    return _C.create_backend(store, rank, size, timeout)


def _create_extended(opts, backend_options):
    """torch 2's creator: a group split from an eagerly initialized dcomm group (new_group,
    new_subgroups, DeviceMesh after init_process_group(device_id=...)) is made from its
    parent's communicator, with no new rendezvous; one made with enable_reconfigure=True waits
    for dist._reconfigure; any other group rendezvouses on its store."""
    if getattr(opts, "enable_reconfigure", False):  # no communicator until dist._reconfigure
        return _C.create_unconfigured(opts.group_rank, opts.group_size, opts.timeout)
    parent = getattr(opts, "split_from", None)
    if isinstance(parent, _C.ProcessGroupDcomm):
        ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
        return parent.split(opts.store, ranks, opts.timeout)
    return _C.create_backend(opts.store, opts.group_rank, opts.group_size, opts.timeout)


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    if _C.torch_major >= 2:
        devices = ["cpu", "cuda"] if cuda_enabled else ["cpu"]
        dist.Backend.register_backend(BACKEND, _create_extended, extended_api=True, devices=devices)
    else:
        dist.Backend.register_backend(BACKEND, _create)


def _shrink_keeps_dcomm():
    """Two things torch 2.15's dist.shrink_group does that a dcomm group must not:
    - it gives the shrunk group a clone of the old group's store, which reconnects to where the
      store was served: under torchrun or init_process_group's env://, rank 0, which may be the
      rank that died (the clone then waits out its timeout). A dcomm group's survivors get a new
      TCPStore served by their rank 0 instead, its address passed on over the new group;
    - it registers the new backend as GLOO for the CPU (NCCL for CUDA) whatever it is, and torch's
      own code then treats it as ProcessGroupGloo (DDP's logger crashes). A dcomm group is
      registered as init_process_group registers a third-party backend: CUSTOM, on every device
      dcomm serves."""
    c10d = dist.distributed_c10d
    original = getattr(c10d, "_create_shrunk_process_group", None)
    if original is None or getattr(original, "_dcomm", False):
        return

    def create(new_backend, remaining_ranks, metadata, is_default_group):
        if isinstance(new_backend, _C.ProcessGroupDcomm):
            lead = new_backend.rank() == 0
            store = dist.TCPStore(new_backend._advertised_host(), 0, new_backend.size(), True,
                                  wait_for_workers=False) if lead else None
            where = new_backend._broadcast_text(f"{store.host}:{store.port}" if lead else "", 0)
            if not lead:
                host, port = where.rsplit(":", 1)
                store = dist.TCPStore(host, int(port), new_backend.size(), False)
            metadata["store"] = store  # also what the group is registered with
        pg = original(new_backend, remaining_ranks, metadata, is_default_group)
        if isinstance(new_backend, _C.ProcessGroupDcomm):
            custom = c10d.ProcessGroup.BackendType.CUSTOM
            for device in ["cpu", "cuda"] if cuda_enabled else ["cpu"]:
                pg._register_backend(torch.device(device), custom, new_backend)
            pg._set_default_backend(custom)
        return pg

    create._dcomm = True
    c10d._create_shrunk_process_group = create


_register()
_shrink_keeps_dcomm()
