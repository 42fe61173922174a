"""Hypothesis strategies of the single-process suite: device lists (subsets, permutations, duplicates),
device arguments in their several spellings, tensors with their dtype, layout and device.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from conformance.comm.worker import HOST, TensorSpec
from conformance.strategies import layouts, shapes, values
from conformance.tensors import is_contiguous_layout

Draw = Callable[[st.SearchStrategy[Any]], Any]

# Data movement keeps every dtype; complex travels as its real view (torch.cuda.comm's _handle_complex).
MOVE_DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool",
               "complex64", "float8_e4m3fn"]
# Dtypes whose sums the oracle knows exactly or within a bound, for reductions through comm.
SUM_DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool"]
# Mixed-dtype cases use small integers, which every one of these holds exactly, so casts are exact.
CAST_DTYPES = ["float16", "float32", "float64", "int32", "int64"]


def device_list(draw: Draw, n: int, *, unique: bool, min_size: int = 1, max_size: int | None = None,
                label: str = "devices") -> list[int]:
    """A list of device indices: a permutation of a subset (unique) or any sequence with repeats."""
    if unique:
        size = draw(st.integers(min_size, min(n, max_size or n)), label=f"{label}_count")
        return list(draw(st.permutations(range(n)), label=label))[:size]
    return draw(st.lists(st.integers(0, n - 1), min_size=min_size, max_size=max_size or n + 1), label=label)


def device_form(draw: Draw, index: int) -> Any:
    """How a device argument is spelled: an int, "cuda:i" or torch.device("cuda:i") (see worker.device_arg)."""
    kind = draw(st.sampled_from(["int", "str", "device"]), label="device_form")
    return ("int", index) if kind == "int" else (kind, f"cuda:{index}")


def tensor(draw: Draw, dtype: str, shape: tuple[int, ...], device: int, *, layout: str | None = None,
           small_ints: bool = False, label: str = "tensor") -> TensorSpec:
    """A TensorSpec with drawn values (special floats included) and, unless given, a drawn layout."""
    if layout is None:
        layout = draw(layouts(shape), label=f"{label}_layout")
    if small_ints:
        elements = st.integers(-3, 3) if dtype not in ("uint8", "bool") else st.integers(0, 1)
        array = draw(st.lists(elements, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))), label=label)
        from conformance.dtypes import DTYPES

        return TensorSpec(np.array(array, dtype=DTYPES[dtype].carrier).reshape(shape), dtype, layout, device)
    return TensorSpec(draw(values(dtype, shape), label=label), dtype, layout, device)


def tensor_shape(draw: Draw, min_dims: int = 0, max_dims: int = 3, max_side: int = 5) -> tuple[int, ...]:
    return draw(shapes(min_dims=min_dims, max_dims=max_dims, max_side=max_side), label="shape")


def source_device(draw: Draw, n: int) -> int:
    """Where a source tensor lives: the host or one of the n devices."""
    return draw(st.integers(HOST, n - 1), label="source")


def contiguous(spec: TensorSpec) -> bool:
    """Whether torch sees the spec's tensor as contiguous (size-0/1 views of any layout are)."""
    return is_contiguous_layout(spec.shape, spec.dtype, spec.layout)


def sentinel(shape: tuple[int, ...], dtype: str, device: int, layout: str = "contiguous") -> TensorSpec:
    """An output buffer: zeros of the dtype."""
    from conformance.dtypes import DTYPES

    return TensorSpec(np.zeros(shape, dtype=DTYPES[dtype].carrier), dtype, layout, device)
