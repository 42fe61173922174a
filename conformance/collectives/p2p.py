"""Point-to-point: send/recv, isend/irecv, batch_isend_irecv.

send_recv: one drawn (src, dst) pair; recv(src=None) must return the sender's rank. Sending to
yourself (world size 1) must raise ValueError "Invalid destination rank".
isend_irecv / batch_isend_irecv: a ring, every member sends to the next and receives from the previous
(batch: both directions at once, one P2POp list).
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.collectives.common import draw_frame, draw_layout, expect, per_rank
from conformance.oracle import OK, Verdict, check_exact_copy
from conformance.spec import Case, CollectiveSpec, Reject, register
from conformance.strategies import per_rank_values, shapes
from conformance.tensors import arrays, empty, make


def pair_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, subgroup=False)
    src = draw(st.integers(0, world_size - 1), label="src")
    others = [r for r in range(world_size) if r != src] or [src]
    case.params["pair"] = (src, draw(st.sampled_from(others), label="dst"))
    case.params["any_source"] = draw(st.booleans(), label="recv(src=None)")
    # NCCL has no receive-from-any-source: the receiver must raise at once, so the sender stays out
    case.params["sender_skips"] = case.params["any_source"] and _any_source_rejected(profile)
    case.params["participants"] = tuple(sorted(set(case.params["pair"])))
    if case.params["sender_skips"]:
        case.params["participants"] = (case.params["pair"][1],)
    case.async_op = False
    shape = draw(shapes(min_dims=0), label="shape")
    draw_layout(draw, case, shape)
    case.inputs = draw(per_rank_values(case.dtype, shape, world_size), label="inputs")
    return case


def run_pair(ctx: Any, case: Case) -> Any:
    import torch.distributed as dist

    src, dst = case.params["pair"]
    if ctx.rank == src and ctx.rank != dst and case.params["sender_skips"]:
        return None
    if ctx.rank == src:
        dist.send(make(case.inputs[src], case.dtype, case.layout, ctx.device), dst=dst)
        return None
    if ctx.rank == dst:
        t = empty(case.inputs[src].shape, case.dtype, case.layout, ctx.device)
        sender = dist.recv(t, src=None if case.params["any_source"] else src)
        return {"out": arrays(t), "sender": sender}
    return None


def check_pair(case: Case, outputs: list[Any], flavor: str) -> list[Verdict]:
    """outputs are the participants' (src, dst), in rank order."""
    src, dst = case.params["pair"]
    out = outputs[case.participants.index(dst)]
    verdicts = [OK] * len(outputs)
    if out["sender"] != src:
        verdict = Verdict(False, f"recv returned sender {out['sender']!r}, expected {src}")
    else:
        verdict = check_exact_copy(out["out"], case.inputs[src])
    verdicts[case.participants.index(dst)] = verdict
    return verdicts


def _any_source_rejected(profile: Any) -> bool:
    return profile is not None and not profile.recv_any_source


def expect_pair(profile: Any, case: Case) -> Reject | None:
    src, dst = case.params["pair"]
    if src == dst:
        return Reject(("ValueError",), r"Invalid destination rank", "send to self")
    found = [expect(profile, case)]
    if case.params["any_source"] and _any_source_rejected(profile):
        found.append(Reject(("NotImplementedError", "RuntimeError"), r"recvAnysource",
                            "ProcessGroupNCCL does not support recvAnysource"))
    return Reject.any_of([r for r in found if r is not None])


def ring_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, subgroup=False)
    shape = draw(shapes(min_dims=0), label="shape")
    draw_layout(draw, case, shape)
    case.inputs = draw(per_rank_values(case.dtype, shape, world_size), label="inputs")
    return case


def run_ring(ctx: Any, case: Case) -> Any:
    import torch.distributed as dist

    n, r = case.world_size, ctx.rank
    send = make(case.inputs[r], case.dtype, case.layout, ctx.device)
    got = empty(case.inputs[(r - 1) % n].shape, case.dtype, case.layout, ctx.device)
    # Even ranks send first, odd ranks receive first. The naive order (every rank isend, then irecv)
    # deadlocks on NCCL at 3+ ranks: each first isend creates its pair's communicator and waits for
    # the next rank, which waits for its own next (H200 run 2026-11-22, world 4: all ranks stuck).
    if r % 2 == 0:
        works = [dist.isend(send, (r + 1) % n), dist.irecv(got, (r - 1) % n)]
    else:
        works = [dist.irecv(got, (r - 1) % n), dist.isend(send, (r + 1) % n)]
    waited = [w.wait() for w in works]
    return {"from_prev": arrays(got), "waited": waited}


def run_batch(ctx: Any, case: Case) -> Any:
    import torch.distributed as dist

    n, r = case.world_size, ctx.rank
    send = make(case.inputs[r], case.dtype, case.layout, ctx.device)
    from_prev = empty(case.inputs[(r - 1) % n].shape, case.dtype, case.layout, ctx.device)
    from_next = empty(case.inputs[(r + 1) % n].shape, case.dtype, case.layout, ctx.device)
    ops = [dist.P2POp(dist.isend, send, (r + 1) % n), dist.P2POp(dist.irecv, from_prev, (r - 1) % n),
           dist.P2POp(dist.isend, send, (r - 1) % n), dist.P2POp(dist.irecv, from_next, (r + 1) % n)]
    waited = [w.wait() for w in dist.batch_isend_irecv(ops)]
    return {"from_prev": arrays(from_prev), "from_next": arrays(from_next), "waited": waited}


def check_ring(case: Case, r: int, out: Any, flavor: str) -> Verdict:
    n = case.world_size
    v = check_exact_copy(out["from_prev"], case.inputs[(r - 1) % n], "from previous rank")
    if v.ok and "from_next" in out:
        v = check_exact_copy(out["from_next"], case.inputs[(r + 1) % n], "from next rank")
    if v.ok and not all(w is True for w in out["waited"]):
        v = Verdict(False, f"Work.wait() returned {out['waited']}, expected True for each")
    return v


register(CollectiveSpec(
    name="send_recv", family="data", cases=pair_cases, run=run_pair, check=check_pair, expect=expect_pair,
    doc=__doc__))
register(CollectiveSpec(
    name="isend_irecv", family="data", cases=ring_cases, run=run_ring, check=per_rank(check_ring), check_rank=check_ring,
    expect=lambda profile, case: expect(profile, case), min_world=2, doc=__doc__))
register(CollectiveSpec(
    name="batch_isend_irecv", family="data", cases=ring_cases, run=run_batch, check=per_rank(check_ring), check_rank=check_ring,
    expect=lambda profile, case: expect(profile, case), min_world=2, doc=__doc__))
