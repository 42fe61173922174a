"""The conformance suite: one property test per capability-matrix cell (collective x dtype x reduce op).

Hypothesis draws each example here, in the controller; the warm rank pool executes it; the driver
compares every rank's result with the NumPy oracle and the backend's support table.
Run one collective with `-k all_reduce`, one cell with `-k "all_reduce-float32-sum"`.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from conformance.backends import Profile
from conformance.driver import CaseResult, execute
from conformance.findings import Finding, known_finding
from conformance.dtypes import DTYPES
from conformance.oracle import REDUCE_OPS
from conformance.plugin import session_of
from conformance.spec import Cell, all_specs
from conformance.strategies import world_sizes


def matrix_cells(profile: Profile | None) -> list[Cell]:
    """Every cell the backend's table says something about; rejected dtypes are tried with one op only."""
    cells = []
    for spec in all_specs().values():
        if spec.family == "control":
            cells.append(Cell(spec.name, None, None))
            continue
        dtypes = profile.dtypes if profile else tuple(DTYPES)
        for dtype in dtypes:
            if spec.family == "data":
                cells.append(Cell(spec.name, dtype, None))
                continue
            dtype_rejected = profile is not None and profile.reject(spec.name, dtype, None, "contiguous") is not None
            for op in (["sum"] if dtype_rejected else REDUCE_OPS):
                cells.append(Cell(spec.name, dtype, op))
    return cells


# Backends whose examples are cheap enough to shrink: everything else is real hardware, where one failing
# cell shrank through thousands of examples (GPU run 2: a cell blew a 10-minute budget). --shrink turns
# shrinking back on there.
SHRINKING_BACKENDS = ("sim", "gloo")


def hypothesis_settings(backend: str, effort: str, shrink: bool) -> settings:
    """The cell's hypothesis settings: the effort profile, without the shrink phase on real hardware."""
    base = settings.get_profile(f"simgpu-{effort}")
    if shrink or backend in SHRINKING_BACKENDS:
        return base
    return settings(base, phases=tuple(p for p in base.phases if p != Phase.shrink))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" in metafunc.fixturenames:
        state = session_of(metafunc.config)
        cells = matrix_cells(state.profile)
        metafunc.parametrize("cell", cells, ids=[c.id() for c in cells])


@pytest.mark.conformance
def test_collective(cell: Cell, conformance) -> None:  # noqa: ANN001 - fixture from the plugin
    spec = all_specs()[cell.collective]
    sizes = conformance.world_sizes(spec)
    known: dict[str, Finding] = {}

    @hypothesis_settings(conformance.backend, conformance.effort, conformance.config.getoption("--shrink"))
    @given(data=st.data())
    def property_holds(data: st.DataObject) -> None:
        world_size = data.draw(world_sizes(sizes), label="world_size")
        case = spec.cases(data.draw, world_size, cell, conformance.profile)
        result = execute(conformance.pool(world_size), spec, case, conformance.profile)
        finding = result.failed and known_finding(conformance.backend, cell, result.layout,
                                                  result.outcome, result.detail, torch.__version__)
        if finding:
            known[finding.id] = finding
            result = CaseResult("known", f"{finding.id}: {result.detail}", result.layout)
        conformance.report.record(cell.collective, cell.dtype, cell.op, result.layout, result.outcome, result.detail)
        if result.failed:
            module = f" --backend-module={conformance.backend_module}" if conformance.backend_module else ""
            reproduce = (f"pytest conformance --backend={conformance.backend}{module} -k '{cell.id()}'"
                         f" --conformance-profile={conformance.effort}")
            raise AssertionError(f"{result.outcome}: {result.detail}\n  case: {case.summary()}\n"
                                 f"  ranks ran on: {conformance.where()}\n"
                                 f"  reproduce: {reproduce} (hypothesis prints the seed / @reproduce_failure below)")

    property_holds()
    if known:
        pytest.xfail("; ".join(f"known finding {f.id}: {f.summary}" for f in known.values()))
