"""Rank-side helpers: turn a drawn Case into tensors with the drawn layout, and results back into arrays.

The controller uses `is_contiguous_layout` (same construction, on CPU) to know before the run
whether a backend that needs contiguous tensors must reject the case.

A case with `offset` > 0 builds every tensor as a view into a larger buffer, starting `offset`
elements in (storage_offset > 0) and followed by a tail: a backend that reads or writes at the start
of the storage instead of at the view gets the wrong values. Every byte of the buffer outside the view
(head, tail and a strided view's gaps) holds SENTINEL_BYTE; `guarded()` / `outside_view_damage()`
tell whether the call changed any of them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from conformance.dtypes import DTYPES, to_numpy, to_torch


SENTINEL_BYTE = 0xA5   # every byte of a buffer outside its view; an invalid bool, an odd float
TAIL_ELEMENTS = 3      # sentinel elements after the view's span

# Rank side: (buffer, which of its elements the view covers, the buffer's bytes when made) of every
# tensor `make` built at an offset since the last `guarded()` (None: not recording).
_GUARDS: list[tuple[Any, Any, Any]] | None = None


def make(array: np.ndarray, dtype_name: str, layout: str, device: Any = "cpu", offset: int = 0):  # noqa: ANN201
    """A tensor holding `array` as dtype_name, laid out contiguous, transposed (last two dims swapped
    in memory; below 2-D that is contiguous) or strided (every other element of a wider buffer);
    offset > 0: the same view `offset` elements into a larger sentinel-filled buffer."""
    t = _make_at_start(array, dtype_name, layout, device)
    return _at_offset(t, offset) if offset > 0 else t


def _at_offset(t: Any, offset: int) -> Any:
    """The same sizes and strides as t, `offset` elements into a fresh buffer of sentinel bytes."""
    import torch

    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else 0
    length = offset + span + TAIL_ELEMENTS
    raw = torch.full((length * t.element_size(),), SENTINEL_BYTE, dtype=torch.uint8, device=t.device)
    buffer = raw.view(t.dtype)
    view = buffer.as_strided(t.shape, t.stride(), offset)
    view.copy_(t)
    if _GUARDS is not None:
        covered = torch.zeros(length, dtype=torch.bool, device=t.device)
        covered.as_strided(t.shape, t.stride(), offset).fill_(True)
        _GUARDS.append((buffer, covered, raw.clone()))
    return view


def guarded() -> None:
    """Start recording the buffers `make` builds at an offset (rank side, before a collective)."""
    global _GUARDS
    _GUARDS = []


def outside_view_damage() -> list[str]:
    """What changed outside the views made since `guarded()`, one line per damaged buffer; stops recording."""
    global _GUARDS
    guards, _GUARDS = _GUARDS or [], None
    damage = []
    for k, (buffer, covered, before) in enumerate(guards):
        size = buffer.element_size()
        now = buffer.view(-1).view(before.dtype).reshape(-1, size).cpu()
        was = before.reshape(-1, size).cpu()
        changed = ((now != was).any(dim=1) & ~covered.cpu()).nonzero().flatten().tolist()
        if changed:
            start = int(covered.nonzero()[0]) if covered.any() else len(covered)
            where = "before the view" if changed[0] < start else "in the view's gaps or after it"
            damage.append(f"tensor {k} ({buffer.dtype}): {len(changed)} element(s) of the buffer outside the view "
                          f"changed, first at storage element {changed[0]} ({where})")
    return damage


def _make_at_start(array: np.ndarray, dtype_name: str, layout: str, device: Any):  # noqa: ANN202
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


def empty(shape: tuple[int, ...], dtype_name: str, layout: str, device: Any = "cpu", fill: int = 0,
          offset: int = 0):  # noqa: ANN201
    """An output tensor of `shape` with the case's layout (and storage offset), filled with a sentinel."""
    carrier = np.full(shape, fill, dtype=DTYPES[dtype_name].carrier)
    return make(carrier, dtype_name, layout, device, offset)


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
