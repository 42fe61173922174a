"""realgpu: the same harness on real GPUs (NCCL, one rank process per GPU).

The rank pool (simgpu.pool) binds rank r to the r-th visible GPU when its Binding says
device="cuda"; realgpu.leases gives each pytest(-xdist) process its own GPUs and the NCCL
settings every rank gets. The controller never initialises CUDA: GPUs are counted in a child.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass

NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

_PROBE = """
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "count": 0, "error": None}
try:
    info["count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


@dataclass(frozen=True)
class GpuProbe:
    """What a child process with this environment sees: how many GPUs, and in words why none."""

    count: int
    why_none: str = ""


@functools.lru_cache(maxsize=None)
def _probe_cached(visible: str | None) -> GpuProbe:
    env = {**os.environ, **NCCL_SAFE_ENV}
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=env)
    except (subprocess.SubprocessError, OSError) as exc:
        return GpuProbe(0, f"the GPU probe (a child importing torch) failed: {type(exc).__name__}: {exc}")
    try:
        info = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        said = (out.stderr.strip().splitlines() or ["no output"])[-1][:300]
        return GpuProbe(0, f"the GPU probe ({sys.executable} -c 'import torch ...') exited {out.returncode}: {said}")
    count = int(info["count"])
    if count:
        return GpuProbe(count)
    if info["cuda"] is None:
        return GpuProbe(0, f"torch {info['torch']} is a CPU-only build")
    if visible is not None and not visible.strip():
        return GpuProbe(0, "CUDA_VISIBLE_DEVICES is empty")
    if info["error"]:
        return GpuProbe(0, info["error"].splitlines()[0][:200])
    return GpuProbe(0, "torch.cuda.is_available() is False (no driver or no device)")


def probe_gpus() -> GpuProbe:
    """GPUs visible to a child process, counted without initialising CUDA in this (controller) process."""
    return _probe_cached(os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_gpu_count() -> int:
    """How many GPUs a rank process started from here would see (0 without CUDA)."""
    return probe_gpus().count


def require_gpus(minimum: int) -> int:
    """Stop the run in one line when this machine cannot run the nccl backend."""
    import pytest

    probe = probe_gpus()
    if probe.count < minimum:
        why = f" ({probe.why_none})" if probe.why_none else ""
        raise pytest.UsageError(f"--backend=nccl needs at least {minimum} CUDA GPUs; "
                                f"this machine has {probe.count}{why}")
    return probe.count
