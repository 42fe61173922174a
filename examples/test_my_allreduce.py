"""A user's test on 4 simulated ranks (the README's example): `pytest examples/test_my_allreduce.py`."""
import pytest
import torch
import torch.distributed as dist


def allreduce_on_rank(ctx):  # runs on every rank; module level, so each rank can import it
    t = torch.full((2,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(t)
    return t.tolist()


@pytest.mark.world_size(4)
def test_allreduce_sums_every_rank(ranks):
    assert ranks.run(allreduce_on_rank) == [[10.0, 10.0]] * 4
