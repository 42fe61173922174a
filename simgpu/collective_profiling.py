"""A simulated group's collectives in the program's profiler, named and shaped as ProcessGroupNCCL's are.

ProcessGroupNCCL opens one asynchronous profiler record per collective (`nccl:all_reduce`,
`nccl:_all_gather_base`, `nccl:send 0->1`, ...) whose inputs are the collective's input tensors, so a
profile shows them with their shapes; PyTorch's own distributed tests count them (distributed_test.py's
`call_dist_op`, `_test_send_recv_nccl`, `_test_ddp_profiling`). SimProcessGroup's collectives are Python,
and the gloo work under them runs where the profiler does not look, so a profile had none. While a
profiler is on, each collective now opens the same record with the same inputs; it is closed from a second
thread once the collective is issued, which makes it asynchronous to the profiler as NCCL's is (NCCL marks
its record async in C++, which Python cannot). Nested records (a *_coalesced call made of single ones)
are left out: NCCL shows the coalesced call once; so is what the simulation runs under the record (its
gloo calls and copies: NCCL shows none). With no profiler on this costs one C++ flag read.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import torch
from torch import Tensor

# simgpu's op names (backend._collective) -> ProcessGroupNCCL's profiling titles
TITLES = {
    "all_reduce": "nccl:all_reduce", "all_reduce_coalesced": "nccl:all_reduce_coalesced",
    "reduce": "nccl:reduce", "broadcast": "nccl:broadcast",
    "all_gather": "nccl:all_gather", "all_gather_into_tensor": "nccl:_all_gather_base",
    "all_gather_into_tensor_coalesced": "nccl:all_gather_into_tensor_coalesced",
    "reduce_scatter": "nccl:reduce_scatter", "reduce_scatter_tensor": "nccl:_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced": "nccl:reduce_scatter_tensor_coalesced",
    "gather": "nccl:gather", "scatter": "nccl:scatter",
    "all_to_all": "nccl:all_to_all", "all_to_all_single": "nccl:all_to_all",
    "barrier": "nccl:all_reduce_barrier",  # an all_reduce of one element, so titled since torch 2.6 (#140785)
}

_local = threading.local()


def _inputs(op: str, args: tuple) -> list[Tensor]:
    """The tensors ProcessGroupNCCL records as a collective's inputs (its `inputs` of the Work)."""
    if op in ("all_reduce", "all_reduce_coalesced", "reduce", "broadcast"):
        return list(args[0]) if args else []
    if op in ("all_gather", "gather", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
              "all_to_all", "reduce_scatter", "scatter", "all_gather_into_tensor_coalesced",
              "reduce_scatter_tensor_coalesced"):
        if len(args) < 2:
            return []
        found = args[1]
        if isinstance(found, Tensor):
            return [found]
        flat = [t for item in found for t in (item if isinstance(item, (list, tuple)) else [item])]
        return [t for t in flat if isinstance(t, Tensor)]
    if op == "barrier":
        return [torch.empty(1)]
    return []


def _close(handle: Any) -> None:
    """End the record from another thread: the profiler then reports it as asynchronous."""
    future: torch.futures.Future = torch.futures.Future()
    done = torch.ops.profiler._call_end_callbacks_on_jit_fut(handle, future)
    closer = threading.Thread(target=future.set_result, args=(None,), name="simgpu-profile-close")
    closer.start()
    closer.join()
    done.wait()


@contextlib.contextmanager
def recorded(title: str, inputs: list[Tensor]) -> Iterator[None]:
    """One NCCL-named profiler record around a collective, if a profiler is on and none is open here."""
    if not torch._C._autograd._profiler_enabled() or getattr(_local, "open", False):
        yield
        return
    handle = torch._C._autograd._record_function_with_args_enter(title, *inputs)
    _local.open = True
    torch._C._autograd._enable_record_function(False)  # the gloo calls and copies under it are not NCCL's
    try:
        yield
    finally:
        torch._C._autograd._enable_record_function(True)
        _local.open = False
        _close(handle)


def collective(op: str, args: tuple) -> contextlib.AbstractContextManager:
    """The record for simgpu's collective `op` called with `args` (nothing for an op NCCL does not name)."""
    title = TITLES.get(op)
    if title is None or not torch._C._autograd._profiler_enabled():
        return contextlib.nullcontext()
    return recorded(title, _inputs(op, args))


def point_to_point(kind: str, rank: int, peer: int, tensors: Any) -> contextlib.AbstractContextManager:
    """`nccl:send 0->1` / `nccl:recv 1<-0`, as ProcessGroupNCCL titles them (group ranks)."""
    if not torch._C._autograd._profiler_enabled():
        return contextlib.nullcontext()
    title = f"nccl:send {rank}->{peer}" if kind == "send" else f"nccl:recv {rank}<-{peer}"
    return recorded(title, [t for t in tensors if isinstance(t, Tensor)] if isinstance(tensors, (list, tuple)) else [])
