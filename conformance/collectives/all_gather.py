"""all_gather family: every member ends up with every member's tensor.

all_gather(tensor_list, tensor): tensor_list[j] <- x_j; NCCL accepts uneven sizes, gloo needs equal.
all_gather_into_tensor(out, in) / all_gather_single (2.13): out = cat_j x_j along dim 0; NCCL checks
numel only (a stacked (n, ...) output works too), gloo needs the dim-0 concatenated shape. In place:
`in` may be the output's slot at the rank's offset.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from conformance.collectives.common import (async_verdict, draw_frame, draw_layout, expect, has_dist, large,
                                            large_inputs, members_only, output, per_rank, tensor)
from conformance.oracle import Verdict, check_exact_copy
from conformance.spec import Case, CollectiveSpec, register
from conformance.strategies import large_numel, shapes, values
from conformance.tensors import arrays


def list_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    uneven = case.size > 1 and draw(st.booleans(), label="uneven")
    if large(cell):  # every member's tensor past 1 MiB, uneven by a few elements where drawn
        numel = draw(large_numel(case.dtype), label="large numel")
        rows = [numel + (2 * draw(st.integers(0, 3)) if uneven else 0) for _ in range(case.size)]
        case.params["uneven"] = len(set(rows)) > 1
        case.inputs = large_inputs(draw, case, [(r,) for r in rows], min(rows))
        return case
    tail = draw(shapes(min_dims=0, max_dims=1), label="trailing shape")
    rows = [draw(st.integers(0, 4)) for _ in range(case.size)] if uneven else [draw(st.integers(0, 4))] * case.size
    case.params["uneven"] = len(set(rows)) > 1
    in_shapes = [(r, *tail) for r in rows]
    draw_layout(draw, case, *in_shapes)
    case.inputs = [draw(values(case.dtype, s), label=f"input {j}") for j, s in enumerate(in_shapes)]
    return case


@members_only
def run_list(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    outs = [output(ctx, case, x.shape) for x in case.inputs]
    t = tensor(ctx, case, case.inputs[me])
    work = dist.all_gather(outs, t, group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(outs), "waited": waited}


def check_list(case: Case, outputs: list[dict], flavor: str) -> list[Verdict]:
    verdicts = []
    for out in outputs:
        bad = async_verdict(case, out)
        for j, (got, want) in enumerate(zip(out["out"], case.inputs)):
            bad = bad or _failed(check_exact_copy(got, want, f"tensor_list[{j}]"))
        verdicts.append(bad or Verdict(True))
    return verdicts


def _failed(verdict: Verdict) -> Verdict | None:
    return None if verdict.ok else verdict


def tensor_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    if large(cell):
        numel = draw(large_numel(case.dtype), label="large numel")
        shape: tuple[int, ...] = (numel,)
    else:
        shape = draw(shapes(min_dims=1, max_dims=2), label="input shape")
    case.params["stacked"] = case.size > 1 and draw(st.booleans(), label="stacked output")
    out_shape = (case.size, *shape) if case.params["stacked"] else (case.size * shape[0], *shape[1:])
    case.params["out_shape"] = out_shape
    if large(cell):
        case.inputs = large_inputs(draw, case, [shape] * case.size, shape[0])
    else:
        draw_layout(draw, case, shape, out_shape)
    # in place (NCCL user guide): the input is the output's own slot at this rank's offset
    case.params["in_place"] = case.layout == "contiguous" and draw(st.booleans(), label="in place")
    if not large(cell):
        case.inputs = [draw(values(case.dtype, shape), label=f"input {j}") for j in range(case.size)]
    return case


def _run_into_tensor(fn_name: str) -> Any:
    @members_only
    def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
        import torch.distributed as dist

        out = output(ctx, case, case.params["out_shape"])
        t = tensor(ctx, case, case.inputs[me])
        if case.params["in_place"]:
            rows = t.shape[0]
            slot = out[me] if case.params["stacked"] else out[me * rows:(me + 1) * rows]
            slot.copy_(t)
            t = slot
        work = getattr(dist, fn_name)(out, t, group=group, async_op=case.async_op)
        waited = work.wait() if case.async_op else None
        return {"out": arrays(out), "waited": waited}

    run.__name__ = run.__qualname__ = f"run_{fn_name}"
    return run


run_all_gather_into_tensor = _run_into_tensor("all_gather_into_tensor")
run_all_gather_single = _run_into_tensor("all_gather_single")


def check_tensor(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    return async_verdict(case, out) or check_exact_copy(out["out"], np.concatenate(case.inputs).reshape(case.params["out_shape"]))



register(CollectiveSpec(
    name="all_gather", family="data", cases=list_cases, run=run_list, check=check_list,
    expect=lambda profile, case: expect(profile, case, "uneven" if case.params["uneven"] else ""),
    doc=__doc__, conditions=("large",)))
for _name, _run in (("all_gather_into_tensor", run_all_gather_into_tensor),
                    ("all_gather_single", run_all_gather_single)):
    register(CollectiveSpec(
        name=_name, family="data", cases=tensor_cases, run=_run, check=per_rank(check_tensor), check_rank=check_tensor,
        expect=lambda profile, case: expect(profile, case, "stacked_output" if case.params["stacked"] else ""),
        available=has_dist(_name), doc=__doc__, conditions=("large",)))
