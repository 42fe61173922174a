"""reduce: dst's tensor <- (+)_r x_r. Other ranks' tensors are unspecified (gloo overwrites them
with partial results, pytorch#76527; NCCL leaves them unchanged), so the oracle checks dst only."""
from __future__ import annotations

from typing import Any

from conformance.collectives.common import (async_verdict, expect, members_only, one_tensor_per_rank, per_rank,
                                            reduce_op, tensor)
from conformance.dtypes import DTYPES
from conformance.oracle import OK, Verdict, check_reduction
from conformance.spec import Case, CollectiveSpec, register
from conformance.tensors import arrays


cases = one_tensor_per_rank(root=True)


@members_only
def run(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    t = tensor(ctx, case, case.inputs[me])
    work = dist.reduce(t, dst=case.members[case.root], op=reduce_op(case.op, case.params.get("factor")),
                       group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(t), "waited": waited}


def check_rank(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    bad = async_verdict(case, out)
    if bad is None and me == case.root:
        bad = check_reduction(out["out"], case.inputs, case.op, DTYPES[case.dtype], flavor, case.params.get("factor"))
    return bad or OK


SPEC = register(CollectiveSpec(
    name="reduce", family="reduce", cases=cases, run=run, check=per_rank(check_rank), check_rank=check_rank,
    expect=lambda profile, case: expect(profile, case), doc=__doc__, conditions=("large",)))
