"""broadcast: tensor <- x_src on every member rank."""
from __future__ import annotations

from typing import Any

from conformance.collectives.all_reduce import async_verdict
from conformance.collectives.common import draw_frame, draw_layout, expect, members_only
from conformance.oracle import Verdict, check_exact_copy
from conformance.spec import Case, CollectiveSpec, register
from conformance.strategies import per_rank_values, shapes
from conformance.tensors import arrays, make


def cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, root=True)
    shape = draw(shapes(min_dims=0), label="shape")
    draw_layout(draw, case, shape)
    case.inputs = draw(per_rank_values(case.dtype, shape, case.size), label="inputs")
    return case


@members_only
def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    t = make(case.inputs[me], case.dtype, case.layout, ctx.device)
    work = dist.broadcast(t, src=case.members[case.root], group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(t), "waited": waited}


def check(case: Case, outputs: list[dict], flavor: str) -> list[Verdict]:
    return [async_verdict(case, out) or check_exact_copy(out["out"], case.inputs[case.root]) for out in outputs]


SPEC = register(CollectiveSpec(
    name="broadcast", family="data", cases=cases, run=run, check=check,
    expect=lambda profile, case: expect(profile, case), busbw_factor=lambda n: 1.0, doc=__doc__))
