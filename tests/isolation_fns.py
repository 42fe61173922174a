"""Rank functions of tests/test_isolation.py: well-formed and ill-formed calls (importable by name).

Each returns or raises the same way on fresh ranks; the tests check that a warm pool keeps it so.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def all_reduce_token(ctx: Any, token: float) -> float:
    """Well-formed: every rank all-reduces `token`."""
    t = torch.full((1,), float(token))
    dist.all_reduce(t)
    return t.item()


def ring_exchange(ctx: Any) -> int:
    """Well-formed: each rank sends its rank to the next and receives the previous one's (one batch)."""
    n = ctx.world_size
    out, into = torch.tensor([float(ctx.rank)]), torch.zeros(1)
    ops = [dist.P2POp(dist.isend, out, (ctx.rank + 1) % n), dist.P2POp(dist.irecv, into, (ctx.rank - 1) % n)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return int(into.item())


def all_issue_never_wait(ctx: Any) -> str:
    """Well-formed enough: every rank issues the same asynchronous all_reduce and returns without waiting
    (it ends on its own, as on NCCL)."""
    ctx.scratch["unwaited"] = dist.all_reduce(torch.ones(2), async_op=True)
    return "issued"


def one_rank_async(ctx: Any, rank: int) -> str:
    """Ill-formed: only `rank` issues an asynchronous all_reduce, and nobody waits (issue 28, item 2)."""
    if ctx.rank == rank:
        ctx.scratch["leak"] = dist.all_reduce(torch.full((1,), 100.0), async_op=True)  # leak-site
    return "returned"


def unmatched_isend(ctx: Any, src: int, dst: int) -> str:
    """Ill-formed: `src` sends to `dst`, which never receives."""
    if ctx.rank == src:
        ctx.scratch["leak"] = dist.isend(torch.full((1,), 7.0), dst)
    return "returned"


def mismatch(ctx: Any) -> None:
    """Ill-formed: rank 0 all-reduces while the others broadcast (every rank raises CollectiveMismatch)."""
    t = torch.ones(2)
    if ctx.rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)


def raise_on(ctx: Any, rank: int) -> str:
    """Ill-formed on one rank: it raises before any collective; the others return."""
    if ctx.rank == rank:
        raise RuntimeError(f"rank {rank} gives up")
    return "returned"


def quiet_hang(ctx: Any, rank: int) -> float:
    """`rank` sleeps (no collective, no error) while the others wait in an all_reduce."""
    import time

    if ctx.rank == rank:
        time.sleep(3600)
    return all_reduce_token(ctx, 1.0)


def return_early(ctx: Any, rank: int) -> float | None:
    """`rank` returns at once while the others wait in an all_reduce it never joins."""
    return None if ctx.rank == rank else all_reduce_token(ctx, 1.0)


def both_send_first(ctx: Any, numel: int) -> float:
    """Both ranks of a pair `send` before they `recv` (blocking): each send waits for a recv that comes
    only after the peer's own send."""
    peer = 1 - ctx.rank
    dist.send(torch.full((numel,), float(ctx.rank)), peer)  # send-first-site
    got = torch.zeros(numel)
    dist.recv(got, peer)
    return got[0].item()


def send_then_recv_paired(ctx: Any, numel: int) -> float:
    """The same pair, rank 1 receiving first: fine everywhere."""
    peer, got = 1 - ctx.rank, torch.zeros(numel)
    if ctx.rank == 0:
        dist.send(torch.full((numel,), 0.0), peer)
        dist.recv(got, peer)
    else:
        dist.recv(got, peer)
        dist.send(torch.full((numel,), 1.0), peer)
    return got[0].item()
