"""Rank-side helpers: turn a drawn Case into tensors with the drawn layout, and results back into arrays.

The controller uses `is_contiguous_layout` (same construction, on CPU) to know before the run
whether a backend that needs contiguous tensors must reject the case.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from conformance.dtypes import DTYPES, to_numpy, to_torch


def make(array: np.ndarray, dtype_name: str, layout: str, device: Any = "cpu"):  # noqa: ANN201
    """A tensor holding `array` as dtype_name, laid out contiguous, transposed (last two dims swapped
    in memory; below 2-D that is contiguous) or strided (every other element of a wider buffer)."""
    import torch

    dtype = DTYPES[dtype_name]
    if layout == "transposed" and array.ndim >= 2:  # last two dims swapped in memory
        base = to_torch(np.array(array.swapaxes(-1, -2), order="C"), dtype).to(device)
        return base.transpose(-1, -2)
    if layout == "strided":
        shape = array.shape if array.ndim else (1,)
        wide = _zeros((*shape[:-1], 2 * shape[-1]), dtype.torch_dtype(), device)
        view = wide[..., ::2]
        view.copy_(to_torch(array.reshape(shape), dtype).to(device))
        return view if array.ndim else view.reshape(())
    return to_torch(array, dtype).to(device)


def _zeros(shape: tuple[int, ...], torch_dtype: Any, device: Any):  # noqa: ANN202
    """torch.zeros; where torch cannot fill this dtype (torch 2.4.1: RuntimeError '"fill_cpu" not
    implemented for 'Float8_e4m3fn''), zero bytes seen as the dtype (one-byte dtypes, i.e. fp8)."""
    import torch

    try:
        return torch.zeros(*shape, dtype=torch_dtype, device=device)
    except RuntimeError:
        if torch.empty((), dtype=torch_dtype).element_size() != 1:
            raise
        return torch.zeros(*shape, dtype=torch.uint8, device=device).view(torch_dtype)


def empty(shape: tuple[int, ...], dtype_name: str, layout: str, device: Any = "cpu", fill: int = 0):  # noqa: ANN201
    """An output tensor of `shape` with the case's layout, filled with a sentinel."""
    carrier = np.full(shape, fill, dtype=DTYPES[dtype_name].carrier)
    return make(carrier, dtype_name, layout, device)


def is_contiguous_layout(shape: tuple[int, ...], dtype_name: str, layout: str) -> bool:
    """Whether torch will see a tensor built by `make` as contiguous (size-0/1 dims make views contiguous)."""
    return bool(make(np.zeros(shape, dtype=DTYPES[dtype_name].carrier), dtype_name, layout).is_contiguous())


def arrays(tensors: Any) -> Any:
    """Tensors (or lists of them) back to carrier arrays for the oracle."""
    if isinstance(tensors, (list, tuple)):
        return [arrays(t) for t in tensors]
    return to_numpy(tensors)


def group_rank(ctx: Any, members: tuple[int, ...]) -> int | None:
    """This rank's index in the case's group, or None when it is not a member."""
    return members.index(ctx.rank) if ctx.rank in members else None


def wait_if_async(work: Any, async_op: bool) -> bool | None:
    """For async_op=True, wait on the Work and return what wait() said (must be True)."""
    if not async_op:
        return None
    return work.wait()
