"""coalesced.batch_isend_irecv: one batch_isend_irecv per rank holding sends and receives to and from any set
of peers, each message with its own shape (zero-size included) and, drawn, its own dtype (float32 next
to the cell's), in an order drawn per rank. Every rank sends at least to the next rank (so every rank
takes part). Oracle: what rank i receives from j is exactly what j sent to i; every Work waits True.
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.oracle import OK, Verdict, check_exact_copy
from conformance.spec import Case, Cell, CollectiveSpec, Reject, register
from conformance.strategies import shapes, values
from conformance.tensors import arrays, empty, make


def cases(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = Case(cell.collective, world_size, cell.dtype)
    n = world_size
    messages = {}
    # a refused dtype everywhere, or the refusal would hit some ranks only (NCCL: a hang)
    refused = profile is not None and profile.reject("batch_isend_irecv", cell.dtype, None,
                                                     "contiguous") is not None
    choices = [cell.dtype] if refused else [cell.dtype, cell.dtype, "float32"]
    for i in range(n):
        for j in range(n):
            if i != j and (j == (i + 1) % n or draw(st.booleans(), label=f"{i}->{j}")):
                dtype = draw(st.sampled_from(choices), label=f"dtype {i}->{j}")
                shape = draw(shapes(min_dims=0, max_side=4), label=f"shape {i}->{j}")
                messages[(i, j)] = (dtype, draw(values(dtype, shape), label=f"message {i}->{j}"))
    case.params["messages"] = messages
    case.params["order"] = [draw(st.permutations([k for k in messages if r in k]), label=f"order {r}")
                            for r in range(n)]
    return case


def run(ctx: Any, case: Case) -> dict:
    import torch.distributed as dist

    r, ops, received = ctx.rank, [], {}
    for src, dst in case.params["order"][r]:
        dtype, array = case.params["messages"][(src, dst)]
        if src == r:
            ops.append(dist.P2POp(dist.isend, make(array, dtype, "contiguous", ctx.device), dst))
        else:
            received[src] = empty(array.shape, dtype, "contiguous", ctx.device)
            ops.append(dist.P2POp(dist.irecv, received[src], src))
    waited = [w.wait() for w in dist.batch_isend_irecv(ops)]
    return {"received": {src: arrays(t) for src, t in received.items()}, "waited": waited}


def check_rank(case: Case, r: int, out: dict, flavor: str) -> Verdict:
    if not all(w is True for w in out["waited"]):
        return Verdict(False, f"Work.wait() returned {out['waited']}, expected True for each")
    for (src, dst), (_, array) in case.params["messages"].items():
        if dst == r:
            verdict = check_exact_copy(out["received"].get(src), array, f"message from rank {src}")
            if not verdict.ok:
                return verdict
    return OK


def check(case: Case, outputs: list, flavor: str) -> list[Verdict]:
    return [check_rank(case, r, out, flavor) for r, out in enumerate(outputs)]


def expect(profile: Any, case: Case) -> Reject | None:
    if profile is None:
        return None
    dtypes = sorted({d for d, _ in case.params["messages"].values()})
    return Reject.any_of([x for x in (profile.reject("batch_isend_irecv", d, None, "contiguous") for d in dtypes)
                          if x is not None])


register(CollectiveSpec(
    name="coalesced.batch_isend_irecv", family="data", cases=cases, run=run, check=check, check_rank=check_rank,
    expect=expect, min_world=2, doc=__doc__, dtypes=("float32", "int64", "int16")))
