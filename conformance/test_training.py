"""Training-level properties: DistributedDataParallel against one process on the whole batch.

One test per property x dtype (`-k ddp` selects them all, `-k "ddp_no_sync-float32"` one). Hypothesis
draws world size, model, batch (divisible by the world size or not), optimizer, steps and DDP
options here, in the controller; every rank of the session's warm pool trains the case; the float64
NumPy reference (conformance/training/oracle.py) and check.py decide. docs/training-properties.md
states the properties and the tolerances.
"""
from __future__ import annotations

import pytest
from hypothesis import strategies as st

from conformance.harness import reproduce_line, run_property
from conformance.training.driver import execute_training
from conformance.training.properties import PROPERTIES

DTYPES = ("float32", "float64")
CELLS = [(name, dtype) for name in PROPERTIES for dtype in DTYPES]


@pytest.mark.conformance
@pytest.mark.parametrize(("name", "dtype"), CELLS, ids=[f"{n}-{d}" for n, d in CELLS])
def test_training_property(name: str, dtype: str, conformance) -> None:  # noqa: ANN001 - plugin fixture
    prop = PROPERTIES[name]
    sizes = conformance.world_sizes(prop)  # reads .name and .min_world, as of a CollectiveSpec

    def property_holds(data: st.DataObject) -> None:
        world_size = data.draw(st.sampled_from(sizes), label="world_size")
        case = prop.cases(data.draw, world_size, dtype)
        run = execute_training(conformance.pool(world_size), prop, case, conformance.profile)
        conformance.report.record(name, dtype, case.optimizer.name, run.result.layout, run.result.outcome,
                                  run.result.detail)
        if run.result.failed:
            reproduce = reproduce_line(conformance.backend, conformance.backend_module, f"{name}-{dtype}",
                                       conformance.effort, conformance.config.getoption("--backend-profile"))
            raise AssertionError(f"{run.result.outcome}: {prop.doc}\n" + "\n".join(f"  {ln}" for ln in run.lines)
                                 + f"\n  case: {case.summary()}\n  ranks ran on: {conformance.where()}"
                                 f"\n  reproduce: {reproduce}")

    run_property(property_holds, backend=conformance.backend, cell_id=f"training/{name}-{dtype}",
                 effort=conformance.effort, shrink=conformance.config.getoption("--shrink"))
