"""Every cell of the matrix reaches the input classes of issue 20, through the same strategies the suite
draws with (the collectives' `cases` and strategies.world_sizes), and draws them often (each in at least
one example in twelve), not only sometimes:

  offset    tensors that are views at a storage offset into a larger buffer, contiguous and not, and
            in place (all_gather_into_tensor / reduce_scatter_tensor and their _single forms)
  shifted   subgroups whose global ranks are not 0..k-1, with the root (rooted collectives) at a
            group rank that differs from its global rank
  unsorted  subgroups passed to new_group out of order (group rank j is still the j-th smallest)
  tags      point-to-point with several tagged messages per pair, posted in different orders

`find` stops at the first example that has shown every class the cell needs (NoSuchExample if the
strategies never get there); the frequency tests sample the strategies as the ci profile would.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from conformance.backends import GLOO, NCCL
from conformance.spec import Case, Cell, all_specs
from conformance.strategies import world_sizes
from conformance.tensors import make
from conformance.test_collectives import matrix_cells
from tests.tiers import first_then_full

SEARCH = settings(max_examples=2000, database=None, deadline=None, phases=(Phase.generate,))
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter", "broadcast_object_list", "gather_object",
                    "scatter_object_list"})
IN_PLACE = frozenset({"all_gather_into_tensor", "all_gather_single", "reduce_scatter_tensor", "reduce_scatter_single"})
P2P_TAGGED = frozenset({"isend_irecv", "batch_isend_irecv"})
NO_TENSORS = frozenset({"barrier", "broadcast_object_list", "all_gather_object", "gather_object",
                        "scatter_object_list"})
NO_SUBGROUPS = frozenset({"send_recv", "isend_irecv", "batch_isend_irecv"})


def cases(cell: Cell, profile=NCCL) -> st.SearchStrategy[Case]:  # noqa: ANN001
    spec = all_specs()[cell.collective]
    sizes = list(range(spec.min_world, 5))

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        return spec.cases(draw, draw(world_sizes(sizes)), cell, profile)

    return draw_case()


def classes(case: Case) -> set[str]:
    """The input classes this drawn case holds."""
    held = set()
    if case.offset > 0:
        held.add("offset")
        if case.layout != "contiguous":
            held.add("offset non-contiguous")
        if case.params.get("in_place"):
            held.add("offset in place")
    if case.group is not None and list(case.members) != list(range(case.size)):
        if case.collective not in ROOTED or case.members[case.root] != case.root:
            held.add("shifted")
    if case.group is not None and list(case.group) != list(case.members):
        held.add("unsorted")
    if len(case.params.get("tags", ())) > 1 and case.params["send_order"] != case.params["recv_order"]:
        held.add("tags")
    return held


def needed(collective: str) -> set[str]:
    """The classes a cell of this collective must reach."""
    need = set()
    if collective not in NO_TENSORS:
        need |= {"offset", "offset non-contiguous"}
    if collective in IN_PLACE:
        need.add("offset in place")
    if collective not in NO_SUBGROUPS:
        need |= {"shifted", "unsorted"}
    if collective in P2P_TAGGED:
        need.add("tags")
    return need


def _cells() -> list:
    """Every (collective, dtype) of the c10d matrix, with its first op: no class is drawn from the op
    (draw_frame, draw_layout, subgroups, storage_offsets and the p2p orders never see it), only the values
    are. Nor is a class drawn from the dtype, so a collective's first dtype runs by default and the others
    with --full. The families named family.collective (functional collectives, coalesced calls, DTensor:
    docs/modern-collectives.md) draw their own inputs and are not held to these classes yet."""
    first: dict[tuple[str, str | None], Cell] = {}
    for c in matrix_cells(NCCL):
        if "." not in c.collective and needed(c.collective):
            first.setdefault((c.collective, c.dtype), c)
    by_collective: dict[str, list[Cell]] = {}
    for cell in first.values():
        by_collective.setdefault(cell.collective, []).append(cell)
    return [param for cells in by_collective.values() for param in first_then_full(cells, [c.id() for c in cells])]


@pytest.mark.parametrize("cell", _cells())
def test_every_cell_reaches_its_input_classes(cell: Cell) -> None:
    need, seen = needed(cell.collective), set()

    def all_seen(case: Case) -> bool:
        seen.update(classes(case) & need)
        return seen == need

    find(cases(cell), all_seen, settings=SEARCH)
    assert seen == need


def test_gloo_cells_reach_the_classes_too() -> None:
    """gloo's table changes some draws (all_to_all pieces); the classes are still there."""
    for collective in ("all_to_all", "all_to_all_single", "isend_irecv", "gather"):
        cell = Cell(collective, "float32", None)
        need, seen = needed(collective), set()
        find(cases(cell, GLOO), lambda c, n=need, s=seen: bool(s.update(classes(c) & n)) or s == n, settings=SEARCH)
        assert seen == need, collective


FREQUENT = settings(max_examples=300, database=None, deadline=None)


@pytest.mark.parametrize("collective,dtype,op", [
    ("broadcast", "float32", None), ("reduce", "int32", "sum"), ("gather", "int8", None),
    ("scatter", "float16", None), ("all_gather", "bool", None), ("all_to_all", "int64", None),
    ("reduce_scatter_tensor", "float32", "max"), ("all_gather_object", None, None),
    ("isend_irecv", "float64", None), ("batch_isend_irecv", "int32", None)])
def test_classes_are_drawn_often(collective: str, dtype: str | None, op: str | None) -> None:
    """Each class turns up in at least one example in twelve (ci draws 4 per cell, over 700 cells)."""
    counts: dict[str, int] = {}
    total = [0]
    need = needed(collective) - {"offset non-contiguous", "offset in place"}

    @FREQUENT
    @given(cases(Cell(collective, dtype, op)))
    def sample(case: Case) -> None:
        total[0] += 1
        for name in classes(case):
            counts[name] = counts.get(name, 0) + 1

    sample()
    for name in need:
        assert counts.get(name, 0) >= total[0] / 12, (collective, name, counts, total)


@given(st.data())
@settings(max_examples=100, database=None, deadline=None)
def test_offset_views_hold_the_values_and_are_really_offset(data: st.DataObject) -> None:
    """make(..., offset) is a view at that storage offset with the drawn values, whatever the layout."""
    case = data.draw(cases(Cell("all_reduce", "float32", "sum")))
    for x in case.inputs:
        t = make(x, case.dtype, case.layout, offset=case.offset)
        assert t.storage_offset() == case.offset
        assert np.array_equal(t.numpy(), x, equal_nan=True)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("dtype", ["float32", "bool", "complex64", "float8_e5m2"])
def test_guard_sees_writes_outside_the_view_and_only_those(layout: str, dtype: str) -> None:
    """The rank-side sentinel check: writing the view is fine; a write before it, after it or (strided)
    between its elements is reported, on any dtype."""
    import torch

    from conformance.tensors import guarded, outside_view_damage

    x = np.ones((2, 3), dtype=np.bool_) if dtype == "bool" else np.arange(6, dtype=np.float32).reshape(2, 3)
    guarded()
    t = make(x, dtype, layout, offset=5)
    t.copy_(torch.zeros_like(t))
    assert outside_view_damage() == []

    def storage_of(view: torch.Tensor) -> torch.Tensor:
        return view.as_strided((view.untyped_storage().nbytes() // view.element_size(),), (1,), 0)

    spots = {"before the view": 0, "in the view's gaps or after it": -1}
    if layout == "strided":
        spots["in the view's gaps or after it (gap)"] = 5 + 1  # between the first two elements
    for where, index in spots.items():
        guarded()
        t = make(x, dtype, layout, offset=5)
        storage_of(t)[index] = storage_of(t)[5]  # the view's first element, copied outside it
        damage = outside_view_damage()
        assert len(damage) == 1 and where.split(" (")[0] in damage[0], (where, damage)
