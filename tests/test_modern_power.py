"""Suite power for the modern families (issue 17 part 5): each deliberately broken variant in
tests/modern_broken.py must fail in the conformance driver (FAIL, or should-work where it raises), and
the same case with the real call must pass, on the simulator.

The cases are written out (seeded small integers) rather than searched for: each is one where the
breakage shows (several ranks, a scatter_dim other than 0, a block of several tensors, ...).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pytest

from conformance.backends import NCCL
from conformance.driver import execute
from conformance.spec import Case, all_specs
from simgpu.pool import Binding, RankPool
from tests import modern_broken

WORLD = 3


@pytest.fixture(scope="module")
def pool() -> Any:
    with RankPool(WORLD, Binding("sim"), timeout=60) as p:
        yield p


def ints(*shape: int, seed: int = 0) -> np.ndarray:
    """Small non-zero integers as float32: sums and maxima are exact and tell each other apart."""
    rng = np.random.default_rng(seed)
    return (rng.integers(1, 9, size=shape) * rng.choice([-1, 1], size=shape)).astype(np.float32)


def world_case(collective: str, op: str | None, inputs: list, **params: Any) -> Case:
    """A case on the whole world, the group given as a ProcessGroup."""
    return Case(collective, WORLD, "float32", op, inputs=inputs, params={"group_kind": "pg", **params})


def caught(pool: RankPool, case: Case, broken: Callable[..., Any]) -> None:
    spec = all_specs()[case.collective]
    assert execute(pool, spec, case, NCCL).outcome == "pass", case.summary()
    result = execute(pool, dataclasses.replace(spec, run=broken), case, NCCL)
    assert result.failed, (result.outcome, result.detail, case.summary())


def test_reduce_scatter_that_ignores_scatter_dim_is_caught(pool: RankPool) -> None:
    case = world_case("funcol.reduce_scatter_tensor", "sum", [ints(2, 2 * WORLD, seed=r) for r in range(WORLD)],
                      wait="wait_tensor", dim=1, uneven=False)
    caught(pool, case, modern_broken.scatter_along_dim0)


def test_coalesced_block_that_drops_its_last_tensor_is_caught(pool: RankPool) -> None:
    case = Case("coalesced.all_reduce", WORLD, "float32", "sum",
                inputs=[[ints(2, 3, seed=r), ints(4, seed=10 + r), ints(1, 2, seed=20 + r)] for r in range(WORLD)],
                params={"via": "manager", "mix": "none", "dtypes": ["float32"] * 3})
    caught(pool, case, modern_broken.block_drops_last)


@pytest.mark.parametrize("wait", ["wait_tensor", "method", "first_use", "view_use"])
def test_async_collective_tensor_returned_before_written_is_caught(pool: RankPool, wait: str) -> None:
    case = world_case("funcol.all_reduce", "sum", [ints(2, 3, seed=r) for r in range(WORLD)], wait=wait)
    caught(pool, case, modern_broken.returns_before_written)


def test_all_gather_backward_without_reduce_scatter_is_caught(pool: RankPool) -> None:
    case = world_case("funcol.all_gather_tensor_autograd", None, [ints(2, 2, seed=r) for r in range(WORLD)],
                      wait="wait_tensor", dim=1, grads=[ints(2, 2 * WORLD, seed=30 + r) for r in range(WORLD)])
    caught(pool, case, modern_broken.gather_grad_not_reduced)


def test_dtensor_partial_max_reduced_as_sum_is_caught(pool: RankPool) -> None:
    contrib = {(r,): ints(4, 3, seed=r) for r in range(WORLD)}
    case = Case("dtensor.redistribute", WORLD, "float32", "max", inputs=[contrib[(r,)] for r in range(WORLD)],
                params={"mesh": (WORLD,), "shape": (4, 3), "src": [("P", "max")], "tgt": [("R",)],
                        "contrib": contrib, "construct": "from_local"})
    caught(pool, case, modern_broken.partial_reduce_ignores_op)
