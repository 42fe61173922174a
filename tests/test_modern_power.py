"""Suite power for the modern families (issue 17 part 5): each deliberately broken variant in
tests/modern_broken.py must fail in the conformance driver (FAIL, or should-work where it raises), and the same case with the real
call must pass, on the simulator.

The cases are drawn by the specs' own strategies (hypothesis `find`), then narrowed to ones where the
breakage shows: several ranks, a scatter_dim other than 0, a block of several non-empty tensors, ...
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import Phase, find, settings
from hypothesis import strategies as st

from conformance.backends import NCCL
from conformance.driver import execute
from conformance.spec import Case, Cell, all_specs
from simgpu.pool import Binding, RankPool
from tests import modern_broken

SEARCH = settings(max_examples=5000, database=None, deadline=None, phases=(Phase.generate,))
WORLD = 3


@pytest.fixture(scope="module")
def pool() -> Any:
    with RankPool(WORLD, Binding("sim"), timeout=60) as p:
        yield p


def drawn(collective: str, dtype: str, op: str | None, condition: Callable[[Case], bool]) -> Case:
    @st.composite
    def cases(draw: Any) -> Case:
        return all_specs()[collective].cases(draw, WORLD, Cell(collective, dtype, op), NCCL)

    return find(cases(), condition, settings=SEARCH)


def caught(pool: RankPool, case: Case, broken: Callable[..., Any]) -> None:
    spec = all_specs()[case.collective]
    assert execute(pool, spec, case, NCCL).outcome == "pass", case.summary()
    result = execute(pool, dataclasses.replace(spec, run=broken), case, NCCL)
    assert result.failed, (result.outcome, result.detail, case.summary())


def _nonzero(arrays: list[np.ndarray]) -> bool:
    """Finite, non-empty, and not all zero: where a wrong answer shows."""
    return all(a.size and np.isfinite(a).all() and np.abs(a).max() > 0 for a in arrays)


def _whole_world(case: Case) -> bool:
    return case.params.get("group_kind") == "pg" and case.group is None


def test_reduce_scatter_that_ignores_scatter_dim_is_caught(pool: RankPool) -> None:
    case = drawn("funcol.reduce_scatter_tensor", "float32", "sum",
                 lambda c: _whole_world(c) and c.params["dim"] != 0 and not c.params["uneven"]
                 and _nonzero(c.inputs))
    caught(pool, case, modern_broken.scatter_along_dim0)


def test_coalesced_block_that_drops_its_last_tensor_is_caught(pool: RankPool) -> None:
    case = drawn("coalesced.all_reduce", "float32", "sum",
                 lambda c: c.group is None and c.params["via"] == "manager" and c.params["mix"] == "none"
                 and len(c.inputs[0]) >= 2 and _nonzero([x[-1] for x in c.inputs]))
    caught(pool, case, modern_broken.block_drops_last)


def test_async_collective_tensor_returned_before_written_is_caught(pool: RankPool) -> None:
    for wait in ("wait_tensor", "first_use"):
        case = drawn("funcol.all_reduce", "float32", "sum",
                     lambda c: _whole_world(c) and c.params["wait"] == wait and _nonzero(c.inputs))
        caught(pool, case, modern_broken.returns_before_written)


def test_all_gather_backward_without_reduce_scatter_is_caught(pool: RankPool) -> None:
    case = drawn("funcol.all_gather_tensor_autograd", "float32", None,
                 lambda c: _whole_world(c) and _nonzero(c.params["grads"]))
    caught(pool, case, modern_broken.gather_grad_not_reduced)


def test_dtensor_partial_max_reduced_as_sum_is_caught(pool: RankPool) -> None:
    case = drawn("dtensor.redistribute", "float32", "max",
                 lambda c: c.params["mesh"] == (WORLD,) and c.params["src"] == [("P", "max")]
                 and c.params["tgt"] == [("R",)] and _nonzero(list(c.params["contrib"].values())))
    caught(pool, case, modern_broken.partial_reduce_ignores_op)
