"""The examples of docs/testing-your-code.md, runnable as they stand: `pytest examples -n 2`."""
import os

import pytest
import torch
import torch.distributed as dist

from simgpu import RankPoolError, faults
from simgpu.outcomes import RanksFailed


# --- one test per world size -------------------------------------------------------------------
def shard_sum(ctx, n):
    """Each rank sums its slice of range(n); the all_reduce gives every rank the total."""
    lo, hi = ctx.rank * n // ctx.world_size, (ctx.rank + 1) * n // ctx.world_size
    t = torch.tensor([float(sum(range(lo, hi)))], device=ctx.device)
    dist.all_reduce(t)
    return t.item()


@pytest.mark.world_size(1, 2, 3, 4)
def test_shards_cover_the_range(ranks):
    assert ranks.run(shard_sum, 100) == [4950.0] * ranks.world_size


# --- checks on the ranks, and a skip decided there ---------------------------------------------
def broadcast_from_zero(ctx):
    t = torch.full((3,), 7.0 if ctx.rank == 0 else -1.0, device=ctx.device)
    dist.broadcast(t, src=0)
    assert t.tolist() == [7.0, 7.0, 7.0]  # checked on every rank; a failure names its rank


def test_broadcast_reaches_every_rank(ranks):  # no marker: 2 ranks
    ranks.run(broadcast_from_zero)


def swap_with_partner(ctx):
    if ctx.world_size % 2:
        pytest.skip("ranks pair up: needs an even world size")
    partner = ctx.rank ^ 1
    mine, theirs = torch.tensor([float(ctx.rank)]), torch.zeros(1)
    ops = [dist.P2POp(dist.isend, mine, partner), dist.P2POp(dist.irecv, theirs, partner)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return theirs.item()


@pytest.mark.world_size(2, 3, 4)
def test_partners_swap(ranks):  # [ws3] is skipped: every rank skipped
    assert ranks.run(swap_with_partner) == [float(r ^ 1) for r in range(ranks.world_size)]


# --- strictness: mismatched collectives fail at once on every rank ---------------------------
def mismatched(ctx):
    t = torch.ones(2, device=ctx.device)
    if ctx.rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)


def test_mismatch_fails_on_every_rank(ranks):
    if ranks.backend != "sim":
        pytest.skip("only the sim backend checks that ranks agree (NCCL would hang)")
    with pytest.raises(RanksFailed) as err:
        ranks.run(mismatched)
    assert [o.error_type for o in err.value.outcomes] == ["simgpu.strict.CollectiveMismatch"] * 2


# --- fault injection: lose rank 1 mid-training ---------------------------------------------
def train_steps(ctx, steps):
    for _ in range(steps):
        dist.all_reduce(torch.ones(4, device=ctx.device))
    return os.getpid()


def test_losing_rank_1_is_reported(ranks):
    ranks.inject(faults.kill(1, at=2))  # sim backend only (skipped elsewhere); disarmed after the test
    with pytest.raises(RankPoolError) as err:
        ranks.run(train_steps, 3)
    assert err.value.kind == "crash" and err.value.cause_ranks == [1]
    assert len(set(ranks.run(train_steps, 3))) == 2  # fresh ranks, nothing armed
