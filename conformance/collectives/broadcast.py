"""broadcast: tensor <- x_src on every member rank."""
from __future__ import annotations

from typing import Any

from conformance.collectives.common import (async_verdict, expect, members_only, one_tensor_per_rank, per_rank,
                                            tensor)
from conformance.oracle import Verdict, check_exact_copy
from conformance.spec import Case, CollectiveSpec, register
from conformance.tensors import arrays


cases = one_tensor_per_rank(root=True)


@members_only
def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    t = tensor(ctx, case, case.inputs[me])
    work = dist.broadcast(t, src=case.members[case.root], group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(t), "waited": waited}


def check_rank(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    return async_verdict(case, out) or check_exact_copy(out["out"], case.inputs[case.root])


SPEC = register(CollectiveSpec(
    name="broadcast", family="data", cases=cases, run=run, check=per_rank(check_rank), check_rank=check_rank,
    expect=lambda profile, case: expect(profile, case), doc=__doc__, conditions=("large",)))
