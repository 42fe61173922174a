"""cudaHostRegister on simulated GPUs: host memory a program pins in place, as torch.cuda._pin_memory_utils does.

DCP's `_create_cpu_state_dict(share_memory=True, pin_memory=True)` (the staging buffers of asynchronous
checkpoints) pins shared-memory tensors in place through `torch.cuda.cudart().cudaHostRegister`; the CUDA
runtime is refused under simulation, so that path failed. Host memory is host memory here: registering a
range only records it, so that `is_pinned()` of a tensor whose data lies in it says True, as CUDA's does.
The runtime's answers are kept: a range registered twice is cudaErrorHostMemoryAlreadyRegistered (712), a
pointer never registered cudaErrorHostMemoryNotRegistered (713), a null pointer or zero size
cudaErrorInvalidValue (1), each raised as torch's wrappers raise them.
"""
from __future__ import annotations

import bisect
import threading
from typing import Any

from simgpu.cuda_sim import import_hooks

INVALID_VALUE, ALREADY_REGISTERED, NOT_REGISTERED = 1, 712, 713

_starts: list[int] = []          # sorted start addresses of the registered ranges
_sizes: dict[int, int] = {}      # start -> size
_lock = threading.Lock()


def _covering(ptr: int) -> int | None:
    """The start of the registered range holding address `ptr`, if any."""
    at = bisect.bisect_right(_starts, ptr) - 1
    if at >= 0 and ptr < _starts[at] + _sizes[_starts[at]]:
        return _starts[at]
    return None


def register(ptr: int, size: int) -> int:
    """cudaHostRegister: 0, or the CUDA error it would return."""
    if ptr == 0 or size <= 0:
        return INVALID_VALUE
    with _lock:
        if _covering(ptr) is not None or _covering(ptr + size - 1) is not None:
            return ALREADY_REGISTERED
        bisect.insort(_starts, ptr)
        _sizes[ptr] = size
    return 0


def unregister(ptr: int) -> int:
    """cudaHostUnregister: the pointer must be a registered range's start."""
    with _lock:
        if ptr not in _sizes:
            return NOT_REGISTERED
        _starts.remove(ptr)
        del _sizes[ptr]
    return 0


def is_registered(ptr: int) -> bool:
    with _lock:
        return _covering(ptr) is not None


def pin_memory(data_ptr: int, size: int) -> None:
    """torch.cuda._pin_memory_utils.pin_memory, its error as torch words it."""
    status = register(int(data_ptr), int(size))
    if status != 0:
        raise RuntimeError(f"Registering memory failed with cudaError: {status}. It's possible that this is an "
                           "asynchronous error raised from a previous cuda operation. Consider launching with "
                           "CUDA_LAUNCH_BLOCKING=1 to debug.")


def unpin_memory(data_ptr: int) -> None:
    """torch.cuda._pin_memory_utils.unpin_memory, its error as torch words it."""
    status = unregister(int(data_ptr))
    if status != 0:
        raise AssertionError(f"Unpinning shared memory failed with error-code: {status}")


def _patch(module: Any) -> None:
    module.pin_memory = pin_memory
    module.unpin_memory = unpin_memory


def install() -> None:
    import_hooks.after_import("torch.cuda._pin_memory_utils", _patch)
