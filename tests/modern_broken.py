"""Deliberately BROKEN versions of the modern collectives, for tests/test_modern_power.py.

Each is a rank-side run function: it patches torch on the rank for one call of a conformance spec's
own run, then restores it. The conformance suite must call every one of them wrong.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from conformance.spec import Case


@contextlib.contextmanager
def patched(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """owner.name replaced by make(original) for the duration."""
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def _spec_run(case: Case) -> Callable[..., Any]:
    from conformance.spec import all_specs

    return all_specs()[case.collective].run


def scatter_along_dim0(ctx: Any, case: Case) -> Any:
    """reduce_scatter_tensor that scatters along dim 0 whatever scatter_dim says."""
    import torch.distributed._functional_collectives as fc

    def make(original: Any) -> Any:
        return lambda x, op, scatter_dim, group, tag="": original(x, op, 0, group, tag)

    with patched(fc, "reduce_scatter_tensor", make), patched(fc, "reduce_scatter_single", make):
        return _spec_run(case)(ctx, case)


def block_drops_last(ctx: Any, case: Case) -> Any:
    """A _coalescing_manager whose block loses its last collective."""
    from torch.distributed import distributed_c10d as c10d

    def make(original: Any) -> Any:
        @contextlib.contextmanager
        def manager(group: Any = None, device: Any = None, async_ops: bool = False) -> Iterator[Any]:
            with original(group, device, async_ops) as cm:
                yield cm
                ops = c10d._world.pg_coalesce_state.get(group or c10d._get_default_group())
                if ops and len(ops) > 1:
                    ops.pop()
        return manager

    with patched(c10d, "_coalescing_manager", make):
        return _spec_run(case)(ctx, case)


def returns_before_written(ctx: Any, case: Case) -> Any:
    """A functional all_reduce whose AsyncCollectiveTensor holds the buffer as it was before the
    collective wrote it (the collective itself still runs, so the ranks stay in step)."""
    import torch.distributed._functional_collectives as fc

    def make(original: Any) -> Any:
        def all_reduce(x: Any, op: str, group: Any, tag: str = "") -> Any:
            stale = x.clone()
            fc.wait_tensor(original(x, op, group, tag))
            return fc.AsyncCollectiveTensor(stale)
        return all_reduce

    with patched(fc, "all_reduce", make):
        return _spec_run(case)(ctx, case)


def gather_grad_not_reduced(ctx: Any, case: Case) -> Any:
    """all_gather_tensor_autograd whose backward keeps this rank's own slice of its own gradient
    (no reduce_scatter): the classic missing-collective-in-backward bug. World group only."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    class LocalOnly(torch.autograd.Function):
        @staticmethod
        def forward(ctx_: Any, x: Any, dim: int, group: Any) -> Any:  # noqa: ANN401
            ctx_.dim = dim
            return fc.wait_tensor(fc.all_gather_tensor(x.detach(), dim, group))

        @staticmethod
        def backward(ctx_: Any, grad: Any) -> Any:  # noqa: ANN401
            n, r = dist.get_world_size(), dist.get_rank()
            return grad.chunk(n, ctx_.dim)[r].contiguous(), None, None

    def make(original: Any) -> Any:
        return lambda x, dim, group, tag="": LocalOnly.apply(x, dim, group)

    with patched(fc, "all_gather_tensor_autograd", make), patched(fc, "all_gather_single_autograd", make):
        return _spec_run(case)(ctx, case)


def partial_reduce_ignores_op(ctx: Any, case: Case) -> Any:
    """Functional all_reduce that always sums: DTensor's Partial(max) then reduces wrong."""
    import torch.distributed._functional_collectives as fc

    def make(original: Any) -> Any:
        return lambda x, op, group, tag="": original(x, "sum", group, tag)

    with patched(fc, "all_reduce", make):
        return _spec_run(case)(ctx, case)
