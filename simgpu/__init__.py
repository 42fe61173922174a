"""simgpu: run multi-GPU PyTorch code on N simulated GPUs (CPU rank processes over gloo).

The rank pool (`simgpu.pool`) is the one process-pool implementation of the project; the
strict "sim" torch.distributed backend (`simgpu.backend`) holds CPU ranks to NCCL's rules.

Importing `simgpu` imports no torch: every Python process of a `simgpu run` loads simgpu's boot
hook, and one that never imports torch (or has none) must pay nothing for it. The pool's names
below load on first use.
"""
from __future__ import annotations

import os
import sys
from typing import Any

if os.environ.get("SIMGPU_GPUS") and "torch" not in sys.modules:
    # Under `simgpu run` the simulation starts when torch is imported, and it needs simgpu's modules:
    # a program that imports simgpu first gets torch (and the simulation) before them.
    import torch  # noqa: F401

__all__ = ["Binding", "RankOutcome", "RankPool", "RankPoolError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from simgpu import pool

        return getattr(pool, name)
    raise AttributeError(f"module 'simgpu' has no attribute {name!r}")
