"""The hypothesis strategies really reach the edge cases the suite promises (conformance/strategies.py and
the collectives' `cases`): zero and odd sizes, non-contiguous layouts, uneven splits, subgroups, every
root, special float values; and every drawn value survives the trip into a torch tensor unchanged.

`find` searches for an example with a property (it fails with NoSuchExample if the strategy never
produces one); `given` checks a property over many draws.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from conformance.backends import GLOO, NCCL
from conformance.dtypes import DTYPES, representable, to_numpy, to_torch
from conformance.spec import Cell, all_specs
from conformance.strategies import layouts, per_rank_values, precision, shapes, split_sizes, subgroups, values
from conformance.tensors import empty, is_contiguous_layout, make
from tests.tiers import first_then_full

# no shrinking: the first example with the property is proof enough (and much faster)
SEARCH = settings(max_examples=3000, database=None, deadline=None, phases=(Phase.generate,))
MANY = settings(max_examples=150, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FLOATS = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"]


def found(strategy: st.SearchStrategy, condition) -> object:  # noqa: ANN001
    return find(strategy, condition, settings=SEARCH)


@st.composite
def drawn_case(draw, collective: str, dtype: str | None, op: str | None = None, profile=NCCL,  # noqa: ANN001
               world_sizes: tuple[int, ...] = (1, 2, 3, 4)):
    world_size = draw(st.sampled_from(world_sizes))
    return all_specs()[collective].cases(draw, world_size, Cell(collective, dtype, op), profile)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape and values, NaN where NaN, and the same sign on every zero."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    ra, rb = (np.stack([a.real, a.imag]), np.stack([b.real, b.imag])) if a.dtype.kind == "c" else (a, b)
    nan_a, nan_b = np.isnan(ra), np.isnan(rb)
    return bool((nan_a == nan_b).all() and (ra[~nan_a] == rb[~nan_b]).all()
                and (np.signbit(ra[~nan_a]) == np.signbit(rb[~nan_b])).all())


# ----------------------------------------------------------------------------- shapes
def test_shapes_reach_scalar_zero_size_and_odd_sides() -> None:
    assert found(shapes(min_dims=0), lambda s: s == ()) == ()
    assert 0 in found(shapes(), lambda s: 0 in s)
    assert 0 in found(shapes(min_dims=2), lambda s: len(s) == 2 and s[0] > 1 and s[1] == 0)
    odd = found(shapes(), lambda s: any(side % 2 == 1 and side > 1 for side in s))
    assert any(side % 2 == 1 and side > 1 for side in odd)
    assert found(shapes(), lambda s: len(s) == 2 and min(s) >= 2 and s[0] != s[1])  # transposable, not square


@given(shapes(min_dims=0, max_dims=2, max_side=7))
@settings(MANY)
def test_shapes_stay_in_bounds(shape: tuple[int, ...]) -> None:
    assert len(shape) <= 2 and all(0 <= side <= 7 for side in shape)


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("layout", ["transposed", "strided"])
def test_drawn_layout_builds_a_non_contiguous_tensor(layout: str) -> None:
    case = found(drawn_case("all_reduce", "float32", "sum"), lambda c: c.layout == layout)
    for x in case.inputs:
        t = make(x, case.dtype, case.layout)
        assert not t.is_contiguous(), (layout, x.shape)
        assert same_bits(to_numpy(t), x)


@given(st.data())
@settings(MANY)
def test_non_contiguous_layout_is_kept_only_when_a_tensor_is_non_contiguous(data: st.DataObject) -> None:
    """draw_layout: a non-contiguous layout means some tensor of the case really is non-contiguous."""
    collective = data.draw(st.sampled_from(["all_reduce", "broadcast", "all_gather"]))
    case = data.draw(drawn_case(collective, "int32", "sum" if collective == "all_reduce" else None))
    tensors = [make(x, case.dtype, case.layout) for x in case.inputs]
    if case.layout == "contiguous":
        assert all(t.is_contiguous() for t in tensors)
    else:
        assert any(not t.is_contiguous() for t in tensors)
        assert any(not is_contiguous_layout(x.shape, case.dtype, case.layout) for x in case.inputs)


@given(shapes(min_dims=0, max_dims=2).flatmap(lambda s: st.tuples(st.just(s), layouts(s))))
@settings(MANY)
def test_layouts_offer_transposed_only_in_2d(drawn: tuple) -> None:
    shape, layout = drawn
    assert layout in ("contiguous", "strided") or (layout == "transposed" and len(shape) == 2)


def test_layouts_reach_every_option() -> None:
    assert found(layouts((3, 4)), lambda layout: layout == "transposed") == "transposed"
    assert found(layouts((3, 4)), lambda layout: layout == "contiguous") == "contiguous"
    assert found(layouts(()), lambda layout: layout == "strided") == "strided"


@given(st.data())
@settings(MANY)
def test_make_reproduces_values_in_every_layout(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(sorted(DTYPES)), label="dtype")
    shape = data.draw(shapes(min_dims=0, max_dims=2), label="shape")
    layout = data.draw(layouts(shape), label="layout")  # what the suite draws (transposed only in 2-D)
    array = data.draw(values(dtype, shape), label="values")
    t = make(array, dtype, layout)
    assert tuple(t.shape) == array.shape  # (array.shape vs the drawn shape: test_values_keep_the_drawn_shape)
    assert t.dtype == DTYPES[dtype].torch_dtype()
    assert same_bits(to_numpy(t), array)
    assert t.is_contiguous() == is_contiguous_layout(array.shape, dtype, layout)
    if layout != "contiguous" and len(shape) == 2 and min(shape) >= 2:
        assert not t.is_contiguous()  # a true view: transposed or every other element
    sentinel = empty(array.shape, dtype, layout, fill=1)
    assert tuple(sentinel.shape) == array.shape and sentinel.is_contiguous() == t.is_contiguous()
    assert (to_numpy(sentinel) == 1).all()


# ----------------------------------------------------------------------------- values


_LOW = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


@pytest.mark.parametrize("dtype,shape", [
    pytest.param(d, shape)
    for d in sorted(DTYPES) for shape in [(), (0,), (3,), (2, 0), (3, 2)]])
def test_values_keep_the_drawn_shape(dtype: str, shape: tuple[int, ...]) -> None:
    @given(values(dtype, shape))
    @settings(max_examples=5, database=None, deadline=None)
    def drawn(array: np.ndarray) -> None:
        assert array.shape == shape
        assert array.dtype == np.dtype(DTYPES[dtype].carrier)

    drawn()


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_values_reach_specials(dtype: str) -> None:
    strategy = values(dtype, (4,))
    assert np.isnan(found(strategy, lambda a: np.isnan(a).any())).any()
    neg_zero = found(strategy, lambda a: ((a == 0) & np.signbit(a)).any())
    assert ((neg_zero == 0) & np.signbit(neg_zero)).any()
    assert found(strategy, lambda a: ((a == 0) & ~np.signbit(a)).any()) is not None
    if dtype != "float8_e4m3fn":  # e4m3fn has no infinity (inf becomes NaN on the way in)
        assert np.isposinf(found(strategy, lambda a: np.isposinf(a).any())).any()
        assert np.isneginf(found(strategy, lambda a: np.isneginf(a).any())).any()
    if DTYPES[dtype].bits > 8:  # subnormals (below the smallest normal, not zero)
        tiny = DTYPES[dtype].tiny
        assert found(strategy, lambda a: ((np.abs(a) < tiny) & (a != 0)).any()) is not None
    big = found(strategy, lambda a: (np.abs(a[np.isfinite(a)]) >= DTYPES[dtype].max_finite / 4).any())
    assert np.isfinite(big).any()


def test_complex_values_reach_specials_per_component() -> None:
    strategy = values("complex64", (3,))
    assert found(strategy, lambda a: np.isnan(a.imag).any() and not np.isnan(a.real).all()) is not None
    assert found(strategy, lambda a: ((a.imag == 0) & np.signbit(a.imag)).any()) is not None
    assert found(strategy, lambda a: np.isinf(a.real).any()) is not None


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64", "uint64"])
def test_integer_values_reach_both_limits(dtype: str) -> None:
    info = np.iinfo(DTYPES[dtype].carrier)
    strategy = values(dtype, (3,))
    assert (found(strategy, lambda a: (a == info.min).any()) == info.min).any()
    assert (found(strategy, lambda a: (a == info.max).any()) == info.max).any()


def test_bool_values_reach_both() -> None:
    assert found(values("bool", (3,)), lambda a: a.any() and not a.all()) is not None


@given(st.data())
@settings(MANY)
def test_low_precision_values_are_exactly_representable(data: st.DataObject) -> None:
    """bf16/fp8 (carried as float32) and float16 values survive carrier -> torch dtype -> carrier bit for bit."""
    dtype = data.draw(st.sampled_from(FLOATS + ["complex64"]), label="dtype")
    shape = data.draw(shapes(min_dims=1, max_dims=1, max_side=8), label="shape")
    op = data.draw(st.sampled_from([None, "product"]), label="op")
    array = data.draw(values(dtype, shape, op), label="values")
    assert array.dtype == np.dtype(DTYPES[dtype].carrier)
    back = to_numpy(to_torch(array, DTYPES[dtype]))
    assert same_bits(back, array)


# ----------------------------------------------------------------------------- subgroups and roots
def test_subgroups_reach_default_singletons_and_every_size() -> None:
    assert find(subgroups(4), lambda g: g is None, settings=SEARCH) is None
    for size in (1, 2, 3):
        group = found(subgroups(4), lambda g, k=size: g is not None and len(g) == k)
        assert len(group) == size
    assert found(subgroups(4), lambda g: g is not None and 3 in g and 0 not in g) is not None
    with pytest.raises(NoSuchExample):  # a world of one has no strict subgroup
        find(subgroups(1), lambda g: g is not None, settings=SEARCH)


@given(st.integers(3, 8).flatmap(lambda n: st.tuples(st.just(n), subgroups(n, min_size=2))))
@settings(MANY)
def test_subgroups_are_strict_subsets_without_repeats(drawn: tuple) -> None:
    world, group = drawn
    if group is not None:
        assert len(set(group)) == len(group)
        assert 2 <= len(group) < world and all(0 <= r < world for r in group)


def test_subgroups_reach_unsorted_and_non_prefix_ranks() -> None:
    group = found(subgroups(4, min_size=2), lambda g: g is not None and list(g) != sorted(g))
    assert list(group) != sorted(group)
    group = found(subgroups(4, min_size=3), lambda g: g is not None and 0 not in g and list(g) != sorted(g))
    assert sorted(group) == [1, 2, 3]


def test_collective_cases_use_subgroups() -> None:
    case = found(drawn_case("all_reduce", "float32", "sum", world_sizes=(4,)),
                 lambda c: c.group is not None and len(c.group) == 2)
    assert case.size == 2 and len(case.inputs) == 2 and case.members == tuple(sorted(case.group))
    assert found(drawn_case("all_reduce", "float32", "sum"), lambda c: c.async_op).async_op
    assert not found(drawn_case("all_reduce", "float32", "sum"), lambda c: not c.async_op).async_op


@pytest.mark.parametrize("collective", ["broadcast", "reduce", "gather", "scatter"])
def test_every_root_is_reachable(collective: str) -> None:
    op = "sum" if collective == "reduce" else None
    for root in range(4):
        case = found(drawn_case(collective, "float32", op, world_sizes=(4,)),
                     lambda c, r=root: c.group is None and c.root == r)
        assert case.root == root and case.size == 4
    # in a subgroup the root is a group rank: the last member of a 3-rank group is reachable too
    case = found(drawn_case(collective, "float32", op, world_sizes=(4,)),
                 lambda c: c.group is not None and len(c.group) == 3 and c.root == 2)
    assert case.members[case.root] == sorted(case.group)[2]  # group rank 2: the largest global rank


@given(st.data())
@settings(MANY)
def test_roots_are_group_ranks(data: st.DataObject) -> None:
    case = data.draw(drawn_case("broadcast", "int8"))
    assert 0 <= case.root < case.size and len(case.inputs) == case.size


# ----------------------------------------------------------------------------- uneven splits
def test_split_sizes_reach_zero_and_unequal() -> None:
    sizes = found(split_sizes(4), lambda s: 0 in s and len(set(s)) >= 3)
    assert len(sizes) == 4 and 0 in sizes and len(set(sizes)) >= 3
    with pytest.raises(NoSuchExample):
        find(split_sizes(3, uneven=False), lambda s: len(set(s)) > 1, settings=SEARCH)


def _is_diagonal_pattern(m: list[list[int]]) -> bool:
    n = len(m)
    k = min(min(row) for row in m)
    return all(m[i][j] == k + (1 if (i + j) % n == 0 else 0) for i in range(n) for j in range(n))


def test_all_to_all_single_reaches_random_uneven_matrices() -> None:
    case = found(drawn_case("all_to_all_single", "float32", profile=NCCL, world_sizes=(3,)),
                 lambda c: c.size == 3 and any(0 in row for row in c.params["rows"])
                 and len({x for row in c.params["rows"] for x in row}) >= 3
                 and not _is_diagonal_pattern(c.params["rows"]))
    m = case.params["rows"]
    assert not case.params["default_splits"]
    # the inputs really have the drawn sizes: rank i sends sum(m[i]) rows
    assert [x.shape[0] for x in case.inputs] == [sum(row) for row in m]
    assert [s[0] for s in case.params["out_shapes"]] == [sum(m[i][j] for i in range(3)) for j in range(3)]


def test_all_to_all_single_default_splits_only_when_even() -> None:
    case = found(drawn_case("all_to_all_single", "float32", world_sizes=(2, 3)),
                 lambda c: c.params["default_splits"])
    assert len({x for row in case.params["rows"] for x in row}) == 1

    @given(drawn_case("all_to_all_single", "int32", world_sizes=(2, 3, 4)))
    @settings(MANY)
    def never_default_when_uneven(c) -> None:  # noqa: ANN001
        if len({x for row in c.params["rows"] for x in row}) > 1:
            assert not c.params["default_splits"]

    never_default_when_uneven()


@given(drawn_case("all_to_all", "float32", profile=GLOO, world_sizes=(2, 3, 4)))
@settings(MANY)
def test_all_to_all_uneven_for_gloo_is_uneven_on_every_rank(case) -> None:  # noqa: ANN001
    """Where the table rejects uneven pieces, every rank's row and column must be uneven (so every rank raises)."""
    m = case.params["rows"]
    n = case.size
    if case.params["uneven"] and n > 1:
        assert all(len(set(m[i])) > 1 for i in range(n))
        assert all(len({m[i][j] for i in range(n)}) > 1 for j in range(n))
    assert [[x.shape[0] for x in row] for row in case.inputs] == m


def test_all_to_all_reaches_uneven_for_gloo_and_nccl() -> None:
    for profile in (GLOO, NCCL):
        case = found(drawn_case("all_to_all", "float32", profile=profile, world_sizes=(3,)),
                     lambda c: c.size == 3 and c.params["uneven"])
        assert len({x.shape[0] for row in case.inputs for x in row}) > 1


def test_all_gather_reaches_uneven_sizes_with_empty_pieces() -> None:
    case = found(drawn_case("all_gather", "float32", profile=GLOO, world_sizes=(3, 4)),
                 lambda c: c.params["uneven"] and any(x.shape[0] == 0 for x in c.inputs))
    rows = [x.shape[0] for x in case.inputs]
    assert 0 in rows and len(set(rows)) > 1


@given(drawn_case("all_gather", "int8"))
@settings(MANY)
def test_all_gather_uneven_flag_matches_the_inputs(case) -> None:  # noqa: ANN001
    assert case.params["uneven"] == (len({x.shape for x in case.inputs}) > 1)


# ----------------------------------------------------------------------------- pinned input classes (issue 32)
LARGE_COLLECTIVES = sorted(name for name, spec in all_specs().items() if "large" in spec.conditions)
FEW = settings(max_examples=4, database=None, deadline=None, phases=(Phase.generate,),
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _numel(x) -> int:  # noqa: ANN001 - an array or a (nested) list of them: one rank's tensors
    return int(x.size) if isinstance(x, np.ndarray) else sum(_numel(y) for y in x)


def test_every_collective_with_tensors_draws_large_cases() -> None:
    """Every c10d collective that moves tensors has the large class (the modern families draw their own)."""
    assert set(LARGE_COLLECTIVES) >= {"all_reduce", "reduce", "broadcast", "gather", "scatter", "all_gather",
                                      "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                                      "all_to_all", "all_to_all_single", "send_recv", "isend_irecv",
                                      "batch_isend_irecv"}


@pytest.mark.parametrize("collective", LARGE_COLLECTIVES)
@pytest.mark.parametrize("dtype", first_then_full(["int8", "bfloat16", "float64"], ["int8", "bfloat16", "float64"]))
def test_large_cases_reach_past_one_mib_per_rank_with_odd_remainders(collective: str, dtype: str) -> None:
    """Every rank's tensors hold more than 1 MiB (each element counted at the dtype's size, not the
    carrier's), some tensor ends in a partial chunk of any power-of-two chunk size from 4 KiB up (NCCL's
    steps and channels, gloo's segments), and the values are exact in the dtype."""
    spec = all_specs()[collective]
    op = "sum" if spec.family == "reduce" else None
    itemsize = DTYPES[dtype].bits // 8

    @given(st.data())
    @FEW
    def check(data: st.DataObject) -> None:
        world = data.draw(st.integers(spec.min_world, 4))
        case = spec.cases(data.draw, world, Cell(collective, dtype, op, "large"), NCCL)
        per_rank = [_numel(x) * itemsize for x in case.inputs]
        assert min(per_rank) > 1 << 20, per_rank
        assert case.params["bytes_per_rank"] > 1 << 20 and case.layout == "contiguous"
        arrays = [a for x in case.inputs for a in (x if isinstance(x, list) else [x])]
        assert any(a.size * itemsize % 4096 for a in arrays)  # a partial last chunk
        for a in arrays[:2]:
            assert same_bits(np.asarray(representable(a, DTYPES[dtype])), np.asarray(a))

    check()


def test_the_main_property_stays_small() -> None:
    """Large tensors are the pinned class's alone: the main property's draws stay small (the budget)."""
    @given(drawn_case("all_reduce", "int8", "sum"))
    @settings(MANY)
    def small(case) -> None:  # noqa: ANN001
        assert "bytes_per_rank" not in case.params and max(x.size for x in case.inputs) <= 49

    small()


def _odd_last_bit(a: np.ndarray, dtype: str) -> bool:
    """Some element's significand uses its last bit: a value with every mantissa bit drawn."""
    d = DTYPES[dtype]
    p = precision(d)
    parts = np.stack([a.real, a.imag]).ravel() if np.iscomplexobj(a) else np.asarray(a, np.float64).ravel()
    parts = parts[np.isfinite(parts) & (np.abs(parts) >= d.tiny)].astype(np.float64)
    mantissa, _ = np.frexp(parts)
    significand = np.ldexp(np.abs(mantissa), p)  # an integer in [2**(p-1), 2**p)
    return bool((significand % 2 == 1).any())


@pytest.mark.parametrize("dtype", FLOATS + ["complex64"])
def test_values_reach_full_mantissas(dtype: str) -> None:
    a = found(values(dtype, (16,)), lambda x: _odd_last_bit(x, dtype))
    assert _odd_last_bit(a, dtype)


@pytest.mark.parametrize("dtype", FLOATS + ["complex64"])
def test_sums_reach_a_rounding_tie_at_every_element(dtype: str) -> None:
    """per_rank_values for SUM draws contributions whose exact sum lies halfway between two neighbours of
    the dtype at every element: at most two non-zero terms, and the sum not representable."""
    d = DTYPES[dtype]

    def tie_everywhere(xs: list) -> bool:
        real = [np.stack([x.real, x.imag]).ravel().astype(np.float64) if np.iscomplexobj(x)
                else np.asarray(x, np.float64).ravel() for x in xs]
        stack = np.stack(real)
        exact = stack.sum(axis=0)
        rounded = representable(exact, DTYPES["float32"] if dtype == "complex64" else d).astype(np.float64)
        return bool(((stack != 0).sum(axis=0) == 2).all() and (rounded != exact).all())

    found(per_rank_values(dtype, (5,), 3, "sum"), tie_everywhere)


@given(st.data())
@settings(MANY)
def test_arrival_cases_have_the_root_first_and_the_others_out_of_rank_order(data: st.DataObject) -> None:
    collective = data.draw(st.sampled_from(["gather", "gather_object"]))
    spec = all_specs()[collective]
    cell = Cell(collective, "float32" if collective == "gather" else None, None, "arrival")
    case = spec.cases(data.draw, data.draw(st.integers(3, 4)), cell, NCCL)
    delays = case.params["arrival"]
    assert case.size >= 3 and delays[case.root] == 0.0
    others = sorted((d, j) for j, d in enumerate(delays) if j != case.root)
    order = [j for _, j in others]
    assert len({d for d, _ in others}) == len(others) and order != sorted(order)
    told_apart = case.inputs if collective == "gather" else case.params["objects"]
    assert len({repr(x.tolist() if hasattr(x, "tolist") else x) for x in told_apart}) == case.size


@given(st.data())
@settings(MANY)
def test_latecomer_cases_make_every_member_last_once(data: st.DataObject) -> None:
    spec = all_specs()["barrier"]
    case = spec.cases(data.draw, data.draw(st.integers(2, 4)), Cell("barrier", None, None, "latecomer"), NCCL)
    late = [max(range(case.size), key=lambda j: r[j]) for r in case.params["rounds"]]
    assert case.size >= 2 and sorted(late) == list(range(case.size))
    assert all(sorted(r)[-2] == 0.0 < max(r) for r in case.params["rounds"])  # one latecomer per round
