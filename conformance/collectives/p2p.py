"""Point-to-point: send/recv, isend/irecv, batch_isend_irecv.

send_recv: one drawn (src, dst) pair; recv(src=None) must return the sender's rank. Sending to
yourself (world size 1) must raise ValueError "Invalid destination rank".
isend_irecv / batch_isend_irecv: a ring, every member sends to the next and receives from the previous
(batch: both directions at once, one P2POp list), k = 1..3 messages per direction in flight at once,
each with its own tag, the receiver posting its receives in another order than the sender its sends.
Which send a receive gets is the table's p2p_matching rule: "tag" (torch's contract, gloo, backends
without a table: the send with the receive's tag) or "posting order" (ProcessGroupNCCL ignores tags:
the k-th receive from a peer gets the k-th send from it). A backend that follows the other rule
swaps messages and fails.
"""
from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.collectives.common import (draw_frame, draw_layout, expect, guard_outside_views, large, large_inputs,
                                            per_rank)
from conformance.oracle import OK, Verdict, check_exact_copy
from conformance.spec import Case, CollectiveSpec, Reject, register
from conformance.strategies import large_numel, per_rank_values, shapes, values
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
    if large(cell):
        numel = draw(large_numel(case.dtype), label="large numel")
        case.inputs = large_inputs(draw, case, [(numel,)] * world_size, numel)
        return case
    shape = draw(shapes(min_dims=0), label="shape")
    draw_layout(draw, case, shape)
    case.inputs = draw(per_rank_values(case.dtype, shape, world_size), label="inputs")
    return case


@guard_outside_views
def run_pair(ctx: Any, case: Case) -> Any:
    import torch.distributed as dist

    src, dst = case.params["pair"]
    if ctx.rank == src and ctx.rank != dst and case.params["sender_skips"]:
        return None
    if ctx.rank == src:
        t = make(case.inputs[src], case.dtype, case.layout, ctx.device, case.offset)
        dist.send(t, dst=dst)
        return {"sent": True}
    if ctx.rank == dst:
        t = empty(case.inputs[src].shape, case.dtype, case.layout, ctx.device, offset=case.offset)
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


MAX_MESSAGES = 3
REVERSE_TAG = 1000  # batch_isend_irecv: tags of the messages to the previous rank are the forward ones + this


def ring_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell, subgroup=False)
    k = draw(st.integers(1, 2 if large(cell) else MAX_MESSAGES), label="messages per direction")
    # several messages only where they can be told apart: at least one element each
    if large(cell):
        shape: tuple[int, ...] = (draw(large_numel(case.dtype), label="large numel"),)
    else:
        shape = draw(shapes(min_dims=0, min_side=1 if k > 1 else 0), label="shape")
        draw_layout(draw, case, shape)
    tags = draw(st.lists(st.integers(0, 20), min_size=k, max_size=k, unique=True), label="tags")
    send_order = draw(st.permutations(range(k)), label="send order")
    recv_order = draw(st.permutations(range(k)), label="recv order")
    if k > 1 and recv_order == send_order:
        recv_order = recv_order[::-1]  # the receiver posts in another order than the sender
    case.params.update(tags=tags, send_order=list(send_order), recv_order=list(recv_order),
                       matching=profile.p2p_matching if profile is not None else "tag")
    # inputs[r][i]: rank r's message i (tag tags[i]), sent to the next rank (and, batched, to the previous)
    if large(cell):
        flat = large_inputs(draw, case, [shape] * (k * world_size), k * shape[0])
        case.inputs = [flat[r * k:(r + 1) * k] for r in range(world_size)]
        return case
    case.inputs = [draw(st.lists(values(case.dtype, shape), min_size=k, max_size=k), label=f"messages of rank {r}")
                   for r in range(world_size)]
    return case


def _post(case: Case, dist: Any, kind: str, peer: int, tensors: list, tag_shift: int = 0) -> list:
    """The isends (kind "send") or irecvs of one direction, in the case's posting order for that side."""
    order = case.params["send_order" if kind == "send" else "recv_order"]
    fn = dist.isend if kind == "send" else dist.irecv
    return [(fn, tensors[i], peer, case.params["tags"][i] + tag_shift) for i in order]


def _buffers(ctx: Any, case: Case, r: int) -> tuple[list, Any]:
    """This rank's messages as tensors, and a maker of k receive buffers."""
    sends = [make(x, case.dtype, case.layout, ctx.device, case.offset) for x in case.inputs[r]]

    def receives() -> list:
        return [empty(x.shape, case.dtype, case.layout, ctx.device, offset=case.offset) for x in case.inputs[r]]

    return sends, receives


@guard_outside_views
def run_ring(ctx: Any, case: Case) -> Any:
    import torch.distributed as dist

    n, r = case.world_size, ctx.rank
    sends, receives = _buffers(ctx, case, r)
    got = receives()
    posts = _post(case, dist, "send", (r + 1) % n, sends)
    recvs = _post(case, dist, "recv", (r - 1) % n, got)
    # Even ranks send first, odd ranks receive first. The naive order (every rank isend, then irecv)
    # deadlocks on NCCL at 3+ ranks: each first isend creates its pair's communicator and waits for
    # the next rank, which waits for its own next (H200 run 2026-11-22, world 4: all ranks stuck).
    ordered = posts + recvs if r % 2 == 0 else recvs + posts
    works = [fn(t, peer, tag=tag) for fn, t, peer, tag in ordered]
    waited = [w.wait() for w in works]
    return {"from_prev": arrays(got), "waited": waited}


@guard_outside_views
def run_batch(ctx: Any, case: Case) -> Any:
    import torch.distributed as dist

    n, r = case.world_size, ctx.rank
    sends, receives = _buffers(ctx, case, r)
    from_prev, from_next = receives(), receives()
    ops = (_post(case, dist, "send", (r + 1) % n, sends) + _post(case, dist, "recv", (r - 1) % n, from_prev)
           + _post(case, dist, "send", (r - 1) % n, sends, REVERSE_TAG)
           + _post(case, dist, "recv", (r + 1) % n, from_next, REVERSE_TAG))
    works = dist.batch_isend_irecv([dist.P2POp(fn, t, peer, tag=tag) for fn, t, peer, tag in ops])
    waited = [w.wait() for w in works]
    return {"from_prev": arrays(from_prev), "from_next": arrays(from_next), "waited": waited}


def expected_messages(case: Case, sender: int) -> list:
    """What a rank's k receive buffers from `sender` must hold under the case's matching rule."""
    sent = case.inputs[sender]
    if case.params["matching"] == "tag":
        return list(sent)
    got: list = [None] * len(sent)
    for slot, message in zip(case.params["recv_order"], case.params["send_order"]):
        got[slot] = sent[message]  # the p-th posted receive gets the p-th posted send
    return got


def check_ring(case: Case, r: int, out: Any, flavor: str) -> Verdict:
    n = case.world_size
    rule = f"matched by {case.params['matching']}"
    directions = [("from_prev", (r - 1) % n, "previous")]
    if "from_next" in out:  # batch_isend_irecv: both directions
        directions.append(("from_next", (r + 1) % n, "next"))
    for key, sender, name in directions:
        for i, (got, want) in enumerate(zip(out[key], expected_messages(case, sender))):
            tag = case.params["tags"][i] + (REVERSE_TAG if key == "from_next" else 0)
            v = check_exact_copy(got, want, f"receive with tag {tag} from the {name} rank ({rule})")
            if not v.ok:
                return v
    if not all(w is True for w in out["waited"]):
        return Verdict(False, f"Work.wait() returned {out['waited']}, expected True for each")
    return OK


register(CollectiveSpec(
    name="send_recv", family="data", cases=pair_cases, run=run_pair, check=check_pair, expect=expect_pair,
    doc=__doc__, conditions=("large",)))
register(CollectiveSpec(
    name="isend_irecv", family="data", cases=ring_cases, run=run_ring, check=per_rank(check_ring), check_rank=check_ring,
    expect=lambda profile, case: expect(profile, case), min_world=2, doc=__doc__, conditions=("large",)))
register(CollectiveSpec(
    name="batch_isend_irecv", family="data", cases=ring_cases, run=run_batch, check=per_rank(check_ring), check_rank=check_ring,
    expect=lambda profile, case: expect(profile, case), min_world=2, doc=__doc__, conditions=("large",)))
