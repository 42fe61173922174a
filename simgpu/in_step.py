"""Is a pool's process group still in step after ranks raised? Else replace the ranks.

A backend that enqueues asynchronously (NCCL) can be left holding a collective that some ranks
launched and others did not; every later call would pair with the wrong collective and fail for no
reason of its own. (The sim backend's strict check rules this out, so callers skip it there.)
"""
from __future__ import annotations

from typing import Any

from simgpu.pool import RankPool, RankPoolError


def in_step_probe(ctx: Any) -> list[int]:
    """Rank side of ensure_in_step: an all_reduce whose answer every rank knows."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([ctx.rank + 1, 7], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t)
    return t.tolist()


def ensure_in_step(pool: RankPool, timeout: float = 15.0) -> None:
    """Run the probe; a pool that answers wrong (or not at all) is closed, so the next call starts fresh ranks."""
    n = pool.world_size
    try:
        outcomes = pool.run(in_step_probe, timeout=timeout)
    except RankPoolError:
        return  # the pool has already been torn down; the next call starts fresh ranks
    if any(not o.ok or o.value != [n * (n + 1) // 2, 7 * n] for o in outcomes):
        pool.close(force=True)
