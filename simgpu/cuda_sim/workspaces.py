"""The memory CUDA's math libraries take on a GPU, charged to simulated GPUs as the real ones are charged.

On a real GPU, the first cuBLAS call of a (cuBLAS handle, stream) pair allocates that pair's workspace
from PyTorch's caching allocator and keeps it for the life of the handle (aten/src/ATen/cuda/
CublasHandlePool.cpp): CUBLAS_WORKSPACE_CONFIG's size, by default ":4096:8" (32 MiB) on Hopper, the GPU
simgpu simulates. cuBLASLt calls (addmm with a bias epilogue, as nn.Linear's forward makes) take a
workspace of their own, CUBLASLT_WORKSPACE_SIZE KiB (1024 by default). Handles are per thread, and the
autograd engine runs a GPU's backward ops on a thread of its own, so a training step holds two of each:
on an H200 a program's peak `max_memory_allocated` is 65 MiB above its tensors'
(benchmarks/cuda_references/allocator_probe.py, recorded in tests/cuda_reference/). Those 65 MiB are
most of a small program's peak, so the allocator model (memory.py) is charged them here.

Handles come from a per-GPU pool: a thread takes one on its first cuBLAS call and gives it back when it
ends, and the next new thread takes it again, workspaces and all (nn.DataParallel's replica threads of
each step reuse the last step's). The autograd engine's work on a GPU, which runs on the calling thread
under simulation, is charged to one engine thread per GPU, as on CUDA.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any

import torch

from simgpu.cuda_sim import devices, memory_history

aten = torch.ops.aten
_KIB = 1024
HOPPER_CUBLAS_CONFIG = ":4096:8"       # CublasHandlePool.cpp's default for sm_90 and later
DEFAULT_CUBLASLT_KIB = 1024            # CUBLASLT_WORKSPACE_SIZE's default

# aten ops whose CUDA kernels get a cuBLAS handle (and so its workspace) for their stream
CUBLAS_OPS = frozenset({aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.addbmm, aten.mv, aten.addmv,
                        aten.dot, aten.vdot, aten._addmm_activation, aten._scaled_mm, aten._int_mm})
_ALWAYS_LT = frozenset({aten._addmm_activation, aten._scaled_mm})
_LT_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16})


def cublas_workspace_bytes() -> int:
    """CUBLAS_WORKSPACE_CONFIG's total (':SIZE_KIB:COUNT' pairs), as torch parses it; Hopper's default."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG") or HOPPER_CUBLAS_CONFIG
    pairs = re.findall(r":(\d+):(\d+)", config)
    if not pairs:
        pairs = re.findall(r":(\d+):(\d+)", HOPPER_CUBLAS_CONFIG)
    return sum(int(size) * int(count) for size, count in pairs) * _KIB


def cublaslt_workspace_bytes() -> int:
    """CUBLASLT_WORKSPACE_SIZE (KiB), 1024 by default."""
    text = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    return (int(text) if text.isdigit() else DEFAULT_CUBLASLT_KIB) * _KIB


def uses_cublaslt(packet: object, args: tuple, kwargs: dict) -> bool:
    """Whether CUDA's addmm takes the cuBLASLt path (Blas.cpp: a 1-D bias added once to a 2-D product)."""
    if packet in _ALWAYS_LT:
        return True
    if packet is not aten.addmm or len(args) < 3:
        return False
    bias, mat1, mat2 = args[:3]
    beta = kwargs.get("beta", args[3] if len(args) > 3 else 1)
    return (isinstance(bias, torch.Tensor) and bias.dim() == 1 and bias.dtype in _LT_DTYPES and beta == 1
            and mat1.dim() == 2 and mat1.size(0) > 1 and mat2.size(0) > 1 and mat2.size(1) > 1)


_held: dict[tuple, object] = {}   # (kind, handle, GPU, stream) -> the workspace's block
_handles: dict[tuple[Any, int], int] = {}     # (thread, GPU) -> the cuBLAS handle it holds
_returned: dict[int, list[int]] = {}          # GPU -> handles whose threads ended
_made: dict[int, int] = {}                    # GPU -> handles made so far
_lock = threading.Lock()
_ENGINE = "autograd engine"


def _handle(index: int) -> int:
    """The handle of GPU `index` that the calling thread holds: its own, or one a finished thread gave back."""
    # the Thread object, not its identifier, which the OS hands to the next thread while this one's entry stays
    thread = _ENGINE if torch._C._current_autograd_node() is not None else threading.current_thread()
    handle = _handles.get((thread, index))
    if handle is None:
        for key in [key for key in _handles if key[0] is not _ENGINE and not key[0].is_alive()]:
            _returned.setdefault(key[1], []).append(_handles.pop(key))
        free = _returned.get(index)
        if free:
            handle = free.pop()
        else:
            handle = _made[index] = _made.get(index, 0) + 1
        _handles[(thread, index)] = handle
    return handle


_charged = threading.local()  # .done: what this thread has been charged already (a set of _charged_key's)


def _charged_key(index: int, stream: int, lt: bool) -> tuple:
    """A charge the calling thread (or the autograd engine's work on it) has made: once made it stays made
    (workspaces are kept), so its next calls skip the lock, the handle and the environment."""
    return (torch._C._current_autograd_node() is not None, index, stream, lt)


def charge(packet: object, index: int, args: tuple, kwargs: dict) -> None:
    """Charge GPU `index` the workspaces that `packet`'s CUDA kernel would allocate on its first call from
    this thread and stream (once; they are kept, as torch keeps them)."""
    stream = devices.stream_key(index)
    lt = uses_cublaslt(packet, args, kwargs)
    done = getattr(_charged, "done", None)
    if done is None:
        done = _charged.done = set()
    known = _charged_key(index, stream, lt)
    if known in done:  # every call after a thread's first on this GPU and stream: nothing new to charge
        return
    wanted = [("cublas", cublas_workspace_bytes())]
    if lt:
        wanted.append(("cublaslt", cublaslt_workspace_bytes()))
    with _lock:
        handle = _handle(index)
        for kind, nbytes in wanted:
            key = (kind, handle, index, stream)
            if key not in _held:
                recorder = memory_history.recorder
                memory = devices.memory_of(index)
                # kept for good (traced, if recording: an allocation with no free, as on CUDA)
                _held[key] = memory.allocate(nbytes, stream) if recorder is None else recorder.allocate(memory, nbytes, stream)
    done.add(known)
