"""realgpu: the same harness on real GPUs (NCCL, one rank process per GPU).

Thin for now: the rank pool (simgpu.pool) already binds rank r to the r-th visible GPU when its
Binding says device="cuda"; GPU leases, NCCL settings and benchmarks come with the nccl issue.
"""
from __future__ import annotations

import os
import subprocess
import sys

NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def visible_gpu_count() -> int:
    """GPUs visible to a child process, counted without initialising CUDA in this (controller) process."""
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             env={**os.environ, **NCCL_SAFE_ENV})
        return int(out.stdout.strip() or 0)
    except (subprocess.SubprocessError, ValueError):
        return 0


def require_gpus(minimum: int) -> int:
    """Stop the run in one line when this machine cannot run the nccl backend."""
    import pytest

    count = visible_gpu_count()
    if count < minimum:
        raise pytest.UsageError(f"--backend=nccl needs at least {minimum} CUDA GPUs; this machine has {count}")
    return count
