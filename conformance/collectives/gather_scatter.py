"""gather and scatter through a root.

gather(tensor, gather_list, dst): gather_list[j] <- x_j on dst only; gather_list must be given on dst
and must NOT be given elsewhere (ValueError). scatter(tensor, scatter_list, src): tensor <- scatter_list_src[rank].
gather's slot j is member j's whatever the order the members arrive in (the arrival condition: the root
first, the others in a drawn order other than theirs).
"""
from __future__ import annotations

from typing import Any

from conformance.collectives.common import (arrive, async_verdict, expect, members_only, one_tensor_per_rank,
                                            output, per_rank, tensor)
from conformance.oracle import OK, Verdict, check_exact_copy
from conformance.spec import Case, CollectiveSpec, register
from conformance.tensors import arrays


cases = one_tensor_per_rank(root=True)


@members_only
def run_gather(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    t = tensor(ctx, case, case.inputs[me])
    outs = [output(ctx, case, x.shape) for x in case.inputs] if me == case.root else None
    arrive(ctx, case, group, me)
    work = dist.gather(t, outs, dst=case.members[case.root], group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(outs) if outs is not None else None, "waited": waited}


def check_gather(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    bad = async_verdict(case, out)
    if bad is None and me == case.root:
        for j, want in enumerate(case.inputs):
            v = check_exact_copy(out["out"][j], want, f"gather_list[{j}]")
            if not v.ok:
                return v
    return bad or OK


@members_only
def run_scatter(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    t = output(ctx, case, case.inputs[me].shape)
    parts = [tensor(ctx, case, x) for x in case.inputs] if me == case.root else None
    work = dist.scatter(t, parts, src=case.members[case.root], group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(t), "waited": waited}


def check_scatter(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    return async_verdict(case, out) or check_exact_copy(out["out"], case.inputs[me])


register(CollectiveSpec(
    name="gather", family="data", cases=cases, run=run_gather, check=per_rank(check_gather), check_rank=check_gather,
    expect=lambda profile, case: expect(profile, case), doc=__doc__, conditions=("large", "arrival")))
register(CollectiveSpec(
    name="scatter", family="data", cases=cases, run=run_scatter, check=per_rank(check_scatter), check_rank=check_scatter,
    expect=lambda profile, case: expect(profile, case), doc=__doc__, conditions=("large",)))
