"""GPU leases: which GPUs this pytest process may hand to its rank processes.

Under pytest-xdist every worker runs its own pools, so two workers must never bind ranks to the
same GPU. Each worker gets a disjoint, contiguous slice of the visible GPUs, in the order an outer
CUDA_VISIBLE_DEVICES lists them (a subset or a reordering set around pytest is kept). The pool's
ranks get CUDA_VISIBLE_DEVICES=<lease>, so rank r binds to the r-th leased GPU. GPUs are counted
in a child process (realgpu.probe_gpus): the controller never initialises CUDA.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Sequence

from realgpu import NCCL_SAFE_ENV, probe_gpus


@dataclass(frozen=True)
class Lease:
    """The GPUs one pytest process holds (ids as CUDA_VISIBLE_DEVICES spells them), and whence."""

    gpus: tuple[str, ...]
    visible: tuple[str, ...]
    worker: int = 0
    workers: int = 1
    why_none: str = ""  # why no GPU is visible at all, when none is

    @property
    def held(self) -> int:
        return len(self.gpus)

    def env(self) -> tuple[tuple[str, str], ...]:
        """What every rank of a pool on this lease gets (a Binding's env): its GPUs and NCCL's safe settings."""
        return (("CUDA_VISIBLE_DEVICES", ",".join(self.gpus)), *NCCL_SAFE_ENV.items())

    def describe(self) -> str:
        """Who holds what, in words, e.g. 'xdist worker 2 of 4 holds 1 GPU (2) of 5 visible (0,1,2,3,4)'."""
        if not self.visible:
            return "this machine shows no GPU" + (f" ({self.why_none})" if self.why_none else "")
        who = f"xdist worker {self.worker} of {self.workers}" if self.workers > 1 else "this process"
        held = f"{self.held} GPU{'s' if self.held != 1 else ''}" + (f" ({','.join(self.gpus)})" if self.gpus else "")
        return f"{who} holds {held} of {len(self.visible)} visible ({','.join(self.visible)})"


def lease_slice(visible: Sequence[str], worker: int, workers: int) -> tuple[str, ...]:
    """Worker `worker`'s disjoint slice of `visible`, order kept; the first len % workers slices get one more.

    More workers than GPUs leaves the last workers with none (their GPU tests are skipped).
    """
    if workers < 1 or not 0 <= worker < workers:
        raise ValueError(f"worker index {worker} is not in 0..{workers - 1}")
    base, extra = divmod(len(visible), workers)
    start = worker * base + min(worker, extra)
    return tuple(visible[start:start + base + (1 if worker < extra else 0)])


def visible_ids(outer: str | None, count: int) -> tuple[str, ...]:
    """The ids of the GPUs a child sees: the outer CUDA_VISIBLE_DEVICES cut to `count`, else 0..count-1.

    `count` comes from a child that honoured the same variable, so an entry CUDA skipped (it stops
    at the first invalid one) is not leased.
    """
    if outer is None:
        return tuple(str(i) for i in range(count))
    ids = [part.strip() for part in outer.split(",") if part.strip()]
    return tuple(ids[:count])


def xdist_position(env: Mapping[str, str]) -> tuple[int, int]:
    """(worker index, worker count) from pytest-xdist's variables; (0, 1) outside xdist."""
    name, count = env.get("PYTEST_XDIST_WORKER"), env.get("PYTEST_XDIST_WORKER_COUNT")
    if not name or not count:
        return 0, 1
    try:
        return int(name.lstrip("gw")), int(count)
    except ValueError:
        raise ValueError(f"cannot read the xdist worker from PYTEST_XDIST_WORKER={name!r} "
                         f"PYTEST_XDIST_WORKER_COUNT={count!r}") from None


def worker_lease(env: Mapping[str, str] | None = None) -> Lease:
    """This process's lease, from its environment (the probe runs once per CUDA_VISIBLE_DEVICES value)."""
    env = os.environ if env is None else env
    probe = probe_gpus()
    visible = visible_ids(env.get("CUDA_VISIBLE_DEVICES"), probe.count)
    worker, workers = xdist_position(env)
    return Lease(lease_slice(visible, worker, workers), visible, worker, workers, probe.why_none)


def shortfall(needed: int, lease: Lease) -> str | None:
    """The skip reason when a test needs more GPUs than the lease holds, else None."""
    if needed <= lease.held:
        return None
    return f"needs {needed} GPU{'s' if needed != 1 else ''}; {lease.describe()}"


def require(needed: int) -> Lease:
    """For a test that needs `needed` GPUs: this process's lease, or the test is skipped saying why.

    The reason names how many GPUs the test needed and how many this process (xdist worker) held.
    """
    import pytest

    lease = worker_lease()
    reason = shortfall(needed, lease)
    if reason:
        pytest.skip(reason)
    return lease
