"""all_reduce: in place, tensor <- (+)_r x_r on every member rank."""
from __future__ import annotations

from typing import Any

from conformance.collectives.common import draw_frame, draw_layout, expect, members_only, reduce_op
from conformance.dtypes import DTYPES
from conformance.oracle import Verdict, check_reduction
from conformance.spec import Case, CollectiveSpec, register
from conformance.strategies import per_rank_values, shapes
from conformance.tensors import arrays, make


def cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    shape = draw(shapes(min_dims=0), label="shape")
    draw_layout(draw, case, shape)
    case.inputs = draw(per_rank_values(case.dtype, shape, case.size, case.op), label="inputs")
    return case


@members_only
def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    t = make(case.inputs[me], case.dtype, case.layout, ctx.device)
    work = dist.all_reduce(t, op=reduce_op(case.op, case.params.get("factor")), group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(t), "waited": waited}


def check(case: Case, outputs: list[dict], flavor: str) -> list[Verdict]:
    dtype = DTYPES[case.dtype]
    return [async_verdict(case, out) or check_reduction(out["out"], case.inputs, case.op, dtype, flavor,
                                                         case.params.get("factor"))
            for out in outputs]


def async_verdict(case: Case, out: dict) -> Verdict | None:
    """async_op=True: Work.wait() must have returned True."""
    if case.async_op and out.get("waited") is not True:
        return Verdict(False, f"Work.wait() returned {out.get('waited')!r}, expected True")
    return None


SPEC = register(CollectiveSpec(
    name="all_reduce", family="reduce", cases=cases, run=run, check=check,
    expect=lambda profile, case: expect(profile, case),
    busbw_factor=lambda n: 2 * (n - 1) / n, doc=__doc__))
