"""Pieces the collective specs share: drawing the group, root and layout, building ops, the default expectation."""
from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from conformance.backends import Profile
from conformance.oracle import Verdict
from conformance.spec import Case, Cell, Reject
from conformance.strategies import layouts, per_rank_values, premul_factors, shapes, storage_offsets, subgroups
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
    """The parts every collective draws: subgroup, root, async_op, premul factor, storage offset."""
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


def one_tensor_per_rank(*, root: bool) -> Callable[..., Case]:
    """Cases for collectives that take one tensor per member (all_reduce, reduce, broadcast, gather, scatter)."""
    def cases(draw: Draw, world_size: int, cell: Cell, profile: Profile | None) -> Case:
        case = draw_frame(draw, world_size, cell, root=root)
        shape = draw(shapes(min_dims=0), label="shape")
        draw_layout(draw, case, shape)
        case.inputs = draw(per_rank_values(case.dtype, shape, case.size, case.op), label="inputs")
        return case

    return cases


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
