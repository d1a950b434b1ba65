"""PyTorch's own distributed tests (torch.testing._internal.distributed.distributed_test, the
suite torch runs for gloo) on one backend, 2 forked processes each, as a third-party backend runs
them: "dcomm" is added to DistTestCases.backend_feature (plugin, subgroup, ddp) before the
suite is imported, so what stays gated is gated by torch's own name checks.

    dist_suite.py BACKEND OUT.json      run the collective, point-to-point and group tests
                                        (not the DDP, GPU, autograd and profiler ones); write
                                        {test: "ok" | "skip: why" | "fail: why"} to OUT.json

run_checks.py --suite runs it for gloo and for dcomm and compares.
"""
import io
import json
import os
import re
import sys
import tempfile
import unittest

import torch

BACKEND = sys.argv[1] if len(sys.argv) > 1 else os.environ["BACKEND"]
os.environ["BACKEND"] = BACKEND
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="dcomm-suite-"))

import dcomm_torch  # noqa: E402,F401  registers "dcomm"
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

for feature in ("plugin", "subgroup", "ddp"):
    DistTestCases.backend_feature[feature].add("dcomm")

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

# What is left out: DDP (the trainer and backend_checks.py cover it), GPUs, autograd,
# profiler, models and compile; what remains is the collectives, p2p and groups.
LEAVE_OUT = re.compile(r"ddp|cuda|gpu|nccl|profil|sparse|mpi|autograd|sync_bn|batchnorm|post_localSGD|detect|ucc|hpu|"
                       r"DistributedDataParallel|model|grad|compile|static_graph|join|bucket|hook", re.I)


class TestDistBackendForked(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        # Forked, not spawned: a spawned process imports torch again (4 s a test here).
        self._start_processes(torch.multiprocessing.get_context("fork").Process)


def main():
    out = sys.argv[2]
    names = sorted(n for n in dir(TestDistBackendForked) if n.startswith("test_") and not LEAVE_OUT.search(n))
    only = os.environ.get("DCOMM_SUITE_ONLY")
    if only:
        names = [n for n in names if re.search(only, n)]
    results = {}
    for name in names:
        result = unittest.TestResult()
        TestDistBackendForked(name).run(result)
        if result.skipped:
            results[name] = "skip: " + result.skipped[0][1][:200]
        elif result.failures or result.errors:
            tb = (result.failures or result.errors)[0][1]
            results[name] = "fail: " + " | ".join(l.strip() for l in tb.strip().splitlines()[-3:])[:400]
        else:
            results[name] = "ok"
        print(f"{BACKEND} {name}: {results[name][:160]}", flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
