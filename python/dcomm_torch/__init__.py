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
    parent's communicator, with no new rendezvous; any other group rendezvouses on its store."""
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


_register()
