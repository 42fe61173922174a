"""Hypothesis strategies for the inputs that matter: odd and zero sizes, every dtype, special values,
full-mantissa floats and sums at rounding ties, tensors past 1 MiB per rank, non-contiguous layouts,
views at a storage offset, every root, uneven splits, subgroups in any order.

Arrays hypothesis cannot draw element by element (full-mantissa values, ties across ranks, megabytes)
are built by NumPy from a drawn seed: hypothesis still chooses (and shrinks) the seed.
Everything here runs in the controller (the pytest process); ranks only see the drawn Case.
"""
from __future__ import annotations

import math

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


SEEDS = st.integers(0, 2**32 - 1)
# Exponents of full-mantissa draws: moderate magnitudes, sums of a few stay finite; for ties, half an ulp
# of the smallest drawn value is still a normal number (2**(e - p) >= tiny).
EXPONENTS = {"float16": (-3, 9), "bfloat16": (-8, 9), "float32": (-8, 9), "float64": (-8, 9),
             "complex64": (-8, 9), "float8_e4m3fn": (-2, 6), "float8_e5m2": (-6, 9)}


def precision(dtype: DType) -> int:
    """p: significand bits of a floating dtype, the implicit one included (u = 2**-p)."""
    return round(-math.log2(dtype.unit_roundoff))


def _mantissas(rng: np.random.Generator, dtype: DType, size: int, low: int, high: int) -> np.ndarray:
    """Signed values 2**e * (1 + m / 2**(p-1)) with every fraction bit m drawn, e in [low, high] (float64)."""
    p = precision(dtype)
    fraction = rng.integers(0, 2 ** (p - 1), size, dtype=np.int64) / 2.0 ** (p - 1)
    exponent = rng.integers(low, high + 1, size)
    return rng.choice([-1.0, 1.0], size) * np.ldexp(1.0 + fraction, exponent)


def _as_dtype(values64: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    if dtype.kind == "complex":
        half = values64.size // 2
        return (values64[:half] + 1j * values64[half:]).astype(np.complex64).reshape(shape)
    return representable(values64.reshape(shape), dtype)


def full_mantissa(dtype_name: str, shape: tuple[int, ...], op: str | None, seed: int) -> np.ndarray:
    """Values with every mantissa bit drawn (a quarter of them zeros of either sign), so that sums and
    products round: small integers and halves add up exactly and hide a backend that rounds wrong.
    PRODUCT: magnitudes in [0.5, 2), half of them powers of two (exact factors)."""
    dtype = DTYPES[dtype_name]
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape)) * (2 if dtype.kind == "complex" else 1)
    if op == "product":
        drawn = _mantissas(rng, dtype, size, -1, 0)
        powers = rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], size)
        drawn = np.where(rng.random(size) < 0.5, powers, drawn)
    else:
        drawn = _mantissas(rng, dtype, size, *EXPONENTS[dtype_name])
    zeros = rng.random(size) < 0.25
    drawn = np.where(zeros, rng.choice([-0.0, 0.0], size), drawn)
    return _as_dtype(drawn, dtype, shape)


def tied_contributions(dtype_name: str, shape: tuple[int, ...], n: int, seed: int) -> list[np.ndarray]:
    """n contributions whose sum sits exactly halfway between two neighbours of the dtype, at every element:
    one rank holds s (full mantissa), another half an ulp of s (either sign), the others zeros of either sign.
    Every order of summation rounds once, at the tie: round-half-to-even is the one right answer."""
    dtype = DTYPES[dtype_name]
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape)) * (2 if dtype.kind == "complex" else 1)
    s = _mantissas(rng, dtype, size, *EXPONENTS[dtype_name])
    half_ulp = np.ldexp(1.0, np.frexp(s)[1] - 1 - precision(dtype)) * rng.choice([-1.0, 1.0], size)
    parts = np.where(rng.random((n, size)) < 0.5, -0.0, 0.0)
    holder = rng.integers(0, n, size)
    parts[holder, np.arange(size)] = s
    if n > 1:
        other = (holder + rng.integers(1, n, size)) % n
        parts[other, np.arange(size)] = half_ulp
    return [_as_dtype(part, dtype, shape) for part in parts]


MIB = 1 << 20


def large_numel(dtype_name: str) -> st.SearchStrategy[int]:
    """Elements of a tensor past 1 MiB of the dtype: 1 to 3 whole MiB and an odd number of elements more,
    so that every backend's last chunk (NCCL's steps and channels, gloo's ring segments) is a partial one."""
    itemsize = max(1, DTYPES[dtype_name].bits // 8)
    return st.tuples(st.sampled_from([1, 1, 2, 3]), st.integers(0, 2047)).map(
        lambda t: t[0] * MIB // itemsize + 2 * t[1] + 1)


def large_arrays(dtype_name: str, shapes_: list[tuple[int, ...]], op: str | None, seed: int) -> list[np.ndarray]:
    """Arrays of the given shapes for large cases, built from one seed: integers over the whole range for
    integer dtypes; small integers for floats (sums exact, cheap to check, every element told apart);
    PRODUCT: +-1 and +-2 (products of a few stay exact)."""
    dtype = DTYPES[dtype_name]
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes_:
        if dtype.kind == "bool":
            out.append(rng.random(shape) < 0.5)
        elif dtype.kind in ("int", "uint"):
            info = np.iinfo(dtype.carrier)
            out.append(rng.integers(info.min, info.max, shape, dtype=dtype.carrier, endpoint=True))
        else:
            pool = [-2.0, -1.0, 1.0, 2.0] if op == "product" else np.arange(-8.0, 9.0)
            drawn = rng.choice(pool, shape)
            if dtype.kind == "complex":
                drawn = drawn + 1j * rng.choice(pool, shape)
            out.append(drawn.astype(np.complex64) if dtype.kind == "complex" else representable(drawn, dtype))
    return out


def large_values(dtype_name: str, shapes_: list[tuple[int, ...]], op: str | None = None
                 ) -> st.SearchStrategy[list[np.ndarray]]:
    """One array per shape, past 1 MiB each in a large case (large_arrays, from a drawn seed)."""
    return SEEDS.map(lambda seed: large_arrays(dtype_name, shapes_, op, seed))


def values(dtype_name: str, shape: tuple[int, ...], op: str | None = None) -> st.SearchStrategy[np.ndarray]:
    """An array of `shape` whose values `dtype_name` represents exactly (carried as its carrier dtype):
    floats are hypothesis's elements (specials, edges, moderate values) or, as often, full-mantissa values."""
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
        drawn = hnp.arrays(np.complex64, shape, elements=st.builds(complex, parts, parts))
        return st.one_of(drawn, SEEDS.map(lambda seed: full_mantissa(dtype_name, shape, op, seed)))
    elements = _float_elements(dtype, op)
    carrier = np.float16 if dtype.name == "float16" else np.float64 if dtype.name == "float64" else np.float32
    drawn = hnp.arrays(carrier, shape, elements=elements).map(lambda a: representable(a, dtype))
    return st.one_of(drawn, SEEDS.map(lambda seed: full_mantissa(dtype_name, shape, op, seed)))


def per_rank_values(dtype_name: str, shape: tuple[int, ...], n: int, op: str | None = None
                    ) -> st.SearchStrategy[list[np.ndarray]]:
    """n contributions of `shape`: drawn independently or, for a floating SUM, as often a sum at a rounding
    tie at every element (tied_contributions)."""
    independent = st.lists(values(dtype_name, shape, op), min_size=n, max_size=n)
    if op == "sum" and DTYPES[dtype_name].is_float:
        return st.one_of(independent, SEEDS.map(lambda seed: tied_contributions(dtype_name, shape, n, seed)))
    return independent


def world_sizes(sizes: list[int]) -> st.SearchStrategy[int]:
    """One of `sizes`, the larger half as often as all of them together: subgroups whose ranks are not
    0..k-1 need three ranks or more, so three examples in four have them (one rank and two stay drawn)."""
    return st.one_of(st.sampled_from(sizes), st.sampled_from(sizes[len(sizes) // 2:]))


def subgroups(world_size: int, min_size: int = 1) -> st.SearchStrategy[tuple[int, ...] | None]:
    """None (the default group) or a strict subset of ranks for new_group, listed in any order; from three
    ranks on, most subsets have several members and are not ranks 0..k-1. So group rank j (the j-th
    smallest global rank) often differs from global rank j and from position j of the list given."""
    if world_size < 2 or min_size >= world_size:
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
