"""reduce_scatter family: member r ends up with the reduction of every member's r-th piece.

reduce_scatter(output, input_list): output <- (+)_j input_list_j[r]; NCCL handles uneven piece sizes.
reduce_scatter_tensor(out, in) / reduce_scatter_single (2.13): out <- chunk_r((+)_j x_j) along dim 0;
gloo needs in.shape[0] == n * out.shape[0]. In place: `out` may be the input's chunk at the rank's offset.
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.collectives.common import (async_verdict, draw_frame, draw_layout, expect, has_dist, large,
                                            large_inputs, members_only, output, per_rank, reduce_op, tensor)
from conformance.dtypes import DTYPES
from conformance.oracle import Verdict, check_reduction
from conformance.spec import Case, CollectiveSpec, register
from conformance.strategies import large_numel, per_rank_values, shapes
from conformance.tensors import arrays


def list_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    uneven = case.size > 1 and draw(st.booleans(), label="uneven")
    if large(cell):  # every member's input list past 1 MiB: pieces of a share each, uneven where drawn
        numel = draw(large_numel(case.dtype), label="large numel")
        share = -(-numel // case.size) | 1
        rows = [share + (2 * draw(st.integers(0, 3)) if uneven else 0) for _ in range(case.size)]
        case.params["uneven"] = len(set(rows)) > 1
        flat = large_inputs(draw, case, [(r,) for _ in range(case.size) for r in rows], sum(rows))
        case.inputs = [flat[j * case.size:(j + 1) * case.size] for j in range(case.size)]
        return case
    tail = draw(shapes(min_dims=0, max_dims=1), label="trailing shape")
    rows = [draw(st.integers(0, 4)) for _ in range(case.size)] if uneven else [draw(st.integers(0, 4))] * case.size
    case.params["uneven"] = len(set(rows)) > 1
    piece_shapes = [(r, *tail) for r in rows]
    draw_layout(draw, case, *piece_shapes)
    # piece i of every member's input_list is one reduction: its contributions are drawn together (ties)
    pieces = [draw(per_rank_values(case.dtype, s, case.size, case.op), label=f"piece {i}")
              for i, s in enumerate(piece_shapes)]
    case.inputs = [[pieces[i][j] for i in range(case.size)] for j in range(case.size)]  # member j's input_list
    return case


@members_only
def run_list(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    pieces = [tensor(ctx, case, x) for x in case.inputs[me]]
    out = output(ctx, case, case.inputs[me][me].shape)
    work = dist.reduce_scatter(out, pieces, op=reduce_op(case.op, case.params.get("factor")), group=group,
                               async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(out), "waited": waited}


def check_list(case: Case, outputs: list[dict], flavor: str) -> list[Verdict]:
    dtype = DTYPES[case.dtype]
    return [async_verdict(case, out) or check_reduction(out["out"], [case.inputs[j][me] for j in range(case.size)],
                                                         case.op, dtype, flavor, case.params.get("factor"))
            for me, out in enumerate(outputs)]


def tensor_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    if large(cell):  # every member's input past 1 MiB
        out_shape: tuple[int, ...] = (-(-draw(large_numel(case.dtype), label="large numel") // case.size) | 1,)
    else:
        out_shape = draw(shapes(min_dims=1, max_dims=2), label="output shape")
    in_shape = (case.size * out_shape[0], *out_shape[1:])
    case.params["out_shape"] = out_shape
    if large(cell):
        case.inputs = large_inputs(draw, case, [in_shape] * case.size, in_shape[0])
    else:
        draw_layout(draw, case, in_shape, out_shape)
    # in place (NCCL user guide): the output is the input's own chunk at this rank's offset
    case.params["in_place"] = case.layout == "contiguous" and draw(st.booleans(), label="in place")
    if not large(cell):
        case.inputs = draw(per_rank_values(case.dtype, in_shape, case.size, case.op), label="inputs")
    return case


def _run_tensor(fn_name: str) -> Any:
    @members_only
    def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
        import torch.distributed as dist

        t = tensor(ctx, case, case.inputs[me])
        out = output(ctx, case, case.params["out_shape"])
        if case.params["in_place"]:
            rows = out.shape[0]
            out = t[me * rows:(me + 1) * rows]
        work = getattr(dist, fn_name)(out, t, op=reduce_op(case.op, case.params.get("factor")), group=group,
                                      async_op=case.async_op)
        waited = work.wait() if case.async_op else None
        return {"out": arrays(out), "waited": waited}

    run.__name__ = run.__qualname__ = f"run_{fn_name}"
    return run


run_reduce_scatter_tensor = _run_tensor("reduce_scatter_tensor")
run_reduce_scatter_single = _run_tensor("reduce_scatter_single")


def check_tensor(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    rows = case.params["out_shape"][0]
    return async_verdict(case, out) or check_reduction(out["out"], [x[me * rows:(me + 1) * rows] for x in case.inputs],
                                                       case.op, DTYPES[case.dtype], flavor, case.params.get("factor"))



register(CollectiveSpec(
    name="reduce_scatter", family="reduce", cases=list_cases, run=run_list, check=check_list,
    expect=lambda profile, case: expect(profile, case, "uneven" if case.params["uneven"] else ""),
    doc=__doc__, conditions=("large",)))
for _name, _run in (("reduce_scatter_tensor", run_reduce_scatter_tensor),
                    ("reduce_scatter_single", run_reduce_scatter_single)):
    register(CollectiveSpec(
        name=_name, family="reduce", cases=tensor_cases, run=_run, check=per_rank(check_tensor), check_rank=check_tensor,
        expect=lambda profile, case: expect(profile, case), available=has_dist(_name), doc=__doc__,
        conditions=("large",)))
