"""Pieces the collective specs share: drawing the group, root and layout, building ops, the default expectation."""
from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from conformance.backends import Profile
from conformance.dtypes import DTYPES
from conformance.oracle import Verdict
from conformance.spec import CONDITION_MIN_MEMBERS, Case, Cell, Reject
from conformance.strategies import (large_numel, large_values, layouts, per_rank_values, premul_factors, shapes,
                                    storage_offsets, subgroups)
from conformance.tensors import empty, guarded, is_contiguous_layout, make, outside_view_damage

Draw = Callable[[st.SearchStrategy[Any]], Any]


def reduce_op(name: str, factor: float | None = None) -> Any:
    """torch.distributed.ReduceOp for a name; premul_sum needs its factor (NCCL's _make_nccl_premul_sum)."""
    import torch.distributed as dist

    if name == "premul_sum":
        return dist._make_nccl_premul_sum(factor)
    return getattr(dist.ReduceOp, {"product": "PRODUCT"}.get(name, name.upper()))


def draw_frame(draw: Draw, world_size: int, cell: Cell, *, subgroup: bool = True, root: bool = False,
               min_group: int = 1, offset: bool = True) -> Case:
    """The parts every collective draws: subgroup, root, async_op, premul factor, storage offset. A pinned
    input class that needs several members (cell.condition) gets groups of that many."""
    min_group = max(min_group, CONDITION_MIN_MEMBERS.get(cell.condition or "", 1))
    group = draw(subgroups(world_size, min_group), label="group") if subgroup else None
    case = Case(cell.collective, world_size, cell.dtype, cell.op, group=group)
    if offset:
        case.offset = draw(storage_offsets(), label="storage offset")
    if root:
        case.root = draw(st.integers(0, case.size - 1), label="root")
    case.async_op = draw(st.booleans(), label="async_op")
    if cell.op == "premul_sum":
        case.params["factor"] = draw(premul_factors(), label="premul_factor")
    return case


def draw_layout(draw: Draw, case: Case, *tensor_shapes: tuple[int, ...]) -> str:
    """Draw a layout; keep a non-contiguous one only if every tensor of the case really is non-contiguous.

    Zero-size and size-1 views are contiguous to torch; a case that mixed them would have some ranks
    pass the contiguity check and others fail it (on NCCL: a hang), which says nothing about the backend.
    """
    layout = draw(layouts(tensor_shapes[0] if tensor_shapes else ()), label="layout")
    if layout != "contiguous" and any(is_contiguous_layout(s, case.dtype, layout) for s in tensor_shapes):
        layout = "contiguous"
    case.layout = layout
    return layout


def expect(profile: Profile, case: Case, *features: str) -> Reject | None:
    """The default support question: dtype, reduce op, layout, then collective-specific features."""
    empty = bool(case.inputs) and all(getattr(x, "size", 1) == 0 for x in case.inputs)
    return profile.reject(case.collective, case.dtype, case.op, case.layout, frozenset(f for f in features if f),
                          size=case.size, empty=empty)


def tensor(ctx: Any, case: Case, array: Any) -> Any:
    """Rank side: `array` as a tensor of the case's dtype, layout and storage offset on this rank's device."""
    return make(array, case.dtype, case.layout, ctx.device, case.offset)


def output(ctx: Any, case: Case, shape: tuple[int, ...]) -> Any:
    """Rank side: an output tensor like `tensor`, holding the sentinel 0 in the view."""
    return empty(shape, case.dtype, case.layout, ctx.device, offset=case.offset)


def guard_outside_views(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Rank-side decorator: a dict result gets "outside_view", what the call changed in the buffers around
    the views built at a storage offset (the driver fails the example if any rank reports some)."""
    import functools

    @functools.wraps(fn)
    def run(*args: Any) -> Any:
        guarded()
        try:
            result = fn(*args)
        finally:
            damage = outside_view_damage()
        if damage and isinstance(result, dict):
            result["outside_view"] = damage
        return result

    return run


def members_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Rank-side decorator: ranks outside the case's group still create the group (collective) and return None.
    Members get their group rank (see Case.members) and the outside-the-view guard."""
    import functools

    guarded_fn = guard_outside_views(fn)

    @functools.wraps(fn)
    def run(ctx: Any, case: Case) -> Any:
        group = ctx.group(case.group)
        if ctx.rank not in case.members:
            return None
        return guarded_fn(ctx, case, group, case.members.index(ctx.rank))

    return run


def has_dist(name: str) -> Callable[[], bool]:
    """Availability test for a torch.distributed function that only newer torch versions have."""
    def available() -> bool:
        import torch.distributed as dist

        return hasattr(dist, name)

    return available


ARRIVAL_STEP = 0.05  # seconds between two members' arrivals in the arrival condition


def large(cell: Cell) -> bool:
    """The pinned large condition: tensors past 1 MiB per rank (strategies.large_numel)."""
    return cell.condition == "large"


def large_inputs(draw: Draw, case: Case, tensor_shapes: list[tuple[int, ...]], per_rank_numel: int) -> list[Any]:
    """Arrays of these shapes for a large case (one drawn seed), contiguous; the case records the bytes each
    rank's tensors hold (params["bytes_per_rank"])."""
    case.layout = "contiguous"
    case.params["bytes_per_rank"] = per_rank_numel * max(1, DTYPES[case.dtype].bits // 8)
    return draw(large_values(case.dtype, tensor_shapes, case.op), label="large inputs")


def draw_arrival(draw: Draw, case: Case) -> None:
    """The arrival condition: the root arrives first, the other members one after another in a drawn order
    that is not their group-rank order (params["arrival"]: each member's delay, ARRIVAL_STEP apart); a
    backend that fills a root's slots in arrival order, not by rank, fails."""
    others = [j for j in range(case.size) if j != case.root]
    order = list(draw(st.permutations(others), label="arrival order"))
    if order == sorted(order):
        order.reverse()
    delays = [0.0] * case.size
    for k, member in enumerate(order):
        delays[member] = ARRIVAL_STEP * (k + 1)
    case.params["arrival"] = delays


def arrive(ctx: Any, case: Case, group: Any, me: int) -> None:
    """Rank side, the arrival condition: line the members up (an all_reduce of one element: ranks of a pool
    that has just started may be a hundred milliseconds apart), then wait this member's delay. Without the
    condition, return at once."""
    delays = case.params.get("arrival")
    if delays:
        import time

        import torch
        import torch.distributed as dist

        dist.all_reduce(torch.zeros(1, device=ctx.device), group=group)
        time.sleep(delays[me])


def one_tensor_per_rank(*, root: bool) -> Callable[..., Case]:
    """Cases for collectives that take one tensor per member (all_reduce, reduce, broadcast, gather, scatter)."""
    def cases(draw: Draw, world_size: int, cell: Cell, profile: Profile | None) -> Case:
        case = draw_frame(draw, world_size, cell, root=root)
        if large(cell):
            numel = draw(large_numel(case.dtype), label="large numel")
            case.inputs = large_inputs(draw, case, [(numel,)] * case.size, numel)
            return case
        if cell.condition == "arrival":  # contiguous, a few elements: data every table moves
            draw_arrival(draw, case)
            shape: tuple[int, ...] = (draw(st.integers(3, 7), label="elements"),)
        else:
            shape = draw(shapes(min_dims=0), label="shape")
            draw_layout(draw, case, shape)
        case.inputs = draw(per_rank_values(case.dtype, shape, case.size, case.op), label="inputs")
        if cell.condition == "arrival":  # members told apart: member j's first three elements are j's bits
            case.inputs = [_stamped(x, j) for j, x in enumerate(case.inputs)]
        return case

    return cases


def _stamped(array: Any, member: int) -> Any:
    """A copy of a 1-D array whose first three elements hold the bits of `member` (0 and 1: every dtype has them)."""
    import numpy as np

    out = np.array(array, copy=True)
    out[:3] = [(member >> bit) & 1 for bit in range(3)]
    return out


def per_rank(check_rank: Callable[[Case, int, Any, str], Verdict]) -> Callable[[Case, list, str], list[Verdict]]:
    """A spec's whole check from its one-rank check: every member's verdict, in group-rank order."""
    def check(case: Case, outputs: list, flavor: str) -> list[Verdict]:
        return [check_rank(case, me, out, flavor) for me, out in enumerate(outputs)]

    return check


def async_verdict(case: Case, out: dict) -> Verdict | None:
    """async_op=True: Work.wait() must have returned True."""
    if case.async_op and out.get("waited") is not True:
        return Verdict(False, f"Work.wait() returned {out.get('waited')!r}, expected True")
    return None
