"""Hypothesis strategies for the inputs that matter: odd and zero sizes, every dtype, special values,
non-contiguous layouts, views at a storage offset, every root, uneven splits, subgroups in any order.

Everything here runs in the controller (the pytest process); ranks only see the drawn Case.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from conformance.dtypes import DTYPES, DType, representable

LAYOUTS = ("contiguous", "transposed", "strided")


@st.composite
def shapes(draw: st.DrawFn, min_dims: int = 1, max_dims: int = 2, max_side: int = 7,
           min_side: int = 0) -> tuple[int, ...]:
    """Shapes with zero-size and odd sides; 2-D ones allow transposed layouts."""
    return draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side))


def layouts(shape: tuple[int, ...]) -> st.SearchStrategy[str]:
    """Contiguous, or a non-contiguous view: transposed (2-D and up) or every other element (strided)."""
    options = ["contiguous", "strided"]
    if len(shape) >= 2:
        options.append("transposed")
    return st.sampled_from(options)


def _float_elements(dtype: DType, op: str | None) -> st.SearchStrategy[float]:
    """Moderate values mostly, with zeros of both signs, huge values, subnormals, inf and NaN."""
    if op == "product":
        magnitude = st.floats(0.25, 2.0)
        return st.one_of(st.just(0.0), st.tuples(magnitude, st.booleans()).map(lambda t: -t[0] if t[1] else t[0]))
    width = 16 if dtype.name == "float16" else 64 if dtype.name == "float64" else 32
    limit = dtype.max_finite / 4
    moderate = st.floats(-1000.0, 1000.0, width=width) if dtype.bits > 8 else st.floats(-100.0, 100.0, width=32)
    edge = st.sampled_from([0.0, -0.0, 1.0, -1.0, limit, -limit, dtype.tiny, -dtype.tiny / 2 if dtype.bits > 8 else 0.5])
    specials = st.sampled_from([float("nan"), float("inf"), float("-inf")])
    return st.one_of(moderate, moderate, moderate, edge, specials)


def values(dtype_name: str, shape: tuple[int, ...], op: str | None = None) -> st.SearchStrategy[np.ndarray]:
    """An array of `shape` whose values `dtype_name` represents exactly (carried as its carrier dtype)."""
    dtype = DTYPES[dtype_name]
    if dtype.kind == "bool":  # the background is True half the time: several ranks' Trues meet in a reduction
        return hnp.arrays(np.bool_, shape, elements=st.booleans(), fill=st.booleans())
    if dtype.kind in ("int", "uint"):
        info = np.iinfo(dtype.carrier)
        elements = st.integers(int(info.min), int(info.max))
        if op == "product":
            elements = st.integers(max(int(info.min), -5), min(int(info.max), 5)) | elements
        return hnp.arrays(dtype.carrier, shape, elements=elements)
    if dtype.kind == "complex":
        parts = _float_elements(DTYPES["float32"], op)
        return hnp.arrays(np.complex64, shape, elements=st.builds(complex, parts, parts))
    elements = _float_elements(dtype, op)
    carrier = np.float16 if dtype.name == "float16" else np.float64 if dtype.name == "float64" else np.float32
    return hnp.arrays(carrier, shape, elements=elements).map(lambda a: representable(a, dtype))


def per_rank_values(dtype_name: str, shape: tuple[int, ...], n: int, op: str | None = None
                    ) -> st.SearchStrategy[list[np.ndarray]]:
    return st.lists(values(dtype_name, shape, op), min_size=n, max_size=n)


def world_sizes(sizes: list[int]) -> st.SearchStrategy[int]:
    """One of `sizes`, the larger half as often as all of them together: subgroups whose ranks are not
    0..k-1 need three ranks or more, so three examples in four have them (one rank and two stay drawn)."""
    return st.one_of(st.sampled_from(sizes), st.sampled_from(sizes[len(sizes) // 2:]))


def subgroups(world_size: int, min_size: int = 1) -> st.SearchStrategy[tuple[int, ...] | None]:
    """None (the default group) or a strict subset of ranks for new_group, listed in any order; from three
    ranks on, most subsets have several members and are not ranks 0..k-1. So group rank j (the j-th
    smallest global rank) often differs from global rank j and from position j of the list given."""
    if world_size < 2:
        return st.none()
    ranks = st.integers(0, world_size - 1)
    subsets = st.sets(ranks, min_size=min_size, max_size=world_size - 1)
    if world_size >= 3:  # mostly several members, not ranks 0..k-1 (some group rank != global rank)
        shifted = st.sets(ranks, min_size=max(2, min_size), max_size=world_size - 1).filter(
            lambda s: s != set(range(len(s))))
        subsets = st.one_of(subsets, shifted, shifted)
    return st.one_of(st.none(), subsets.flatmap(_out_of_order))


def _out_of_order(members: set[int]) -> st.SearchStrategy[tuple[int, ...]]:
    """The members in a random order, an ascending draw reversed half the time (mostly out of order)."""
    return st.tuples(st.permutations(sorted(members)), st.booleans()).map(
        lambda drawn: tuple(drawn[0][::-1] if drawn[1] and list(drawn[0]) == sorted(drawn[0]) else drawn[0]))


def storage_offsets() -> st.SearchStrategy[int]:
    """0 (tensors at the start of their storage) or a view that many elements into a larger buffer."""
    return st.sampled_from([0, 1, 5])


@st.composite
def split_sizes(draw: st.DrawFn, parts: int, max_each: int = 4, uneven: bool = True) -> list[int]:
    """Sizes of `parts` pieces, zeros and unequal pieces included."""
    if not uneven:
        each = draw(st.integers(0, max_each))
        return [each] * parts
    return draw(st.lists(st.integers(0, max_each), min_size=parts, max_size=parts))


def premul_factors() -> st.SearchStrategy[float]:
    return st.sampled_from([0.5, 2.0, -1.0, 0.25, 3.0])
