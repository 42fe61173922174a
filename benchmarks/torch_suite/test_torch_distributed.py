"""PyTorch's own distributed tests (torch/testing/_internal/distributed/distributed_test.py, shipped in
every torch wheel) driven as pytorch's test/distributed/test_distributed_spawn.py drives them.

Run under simulated GPUs with the NCCL backend (see benchmarks/torch_suite/run.py):

    BACKEND=nccl WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) simgpu run --gpus 2 python -m pytest \\
        benchmarks/torch_suite/test_torch_distributed.py -k "test_all_reduce"
"""
import os
import sys

import torch
import torch.distributed as dist

if not dist.is_available():
    sys.exit(0)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False

BACKEND = os.environ["BACKEND"]

if BACKEND in ("gloo", "nccl"):

    class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self) -> None:
            super().setUp()
            self._spawn_processes()
            torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
