"""The conformance suite: one property test per capability-matrix cell (collective x dtype x reduce op).

Hypothesis draws each example here, in the controller; the warm rank pool executes it; the driver
compares every rank's result with the NumPy oracle and the backend's support table.
Run one collective with `-k all_reduce`, one cell with `-k "all_reduce-float32-sum"`.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import strategies as st

from conformance.backends import Profile
from conformance.driver import CaseResult, execute
from conformance.findings import Finding, known_finding
from conformance.harness import reproduce_line, run_property, xfail_known
from conformance.dtypes import DTYPES
from conformance.oracle import REDUCE_OPS
from conformance.plugin import session_of
from conformance.spec import Cell, CollectiveSpec, all_specs
from conformance.strategies import world_sizes


def matrix_cells(profile: Profile | None) -> list[Cell]:
    """Every cell the backend's table says something about; rejected dtypes are tried with one op only."""
    cells = []
    for spec in all_specs().values():
        if spec.family == "control":
            cells.append(Cell(spec.name, None, None))
            continue
        dtypes = profile.dtypes if profile else tuple(DTYPES)
        if spec.dtypes is not None:
            dtypes = tuple(d for d in spec.dtypes if d in dtypes)
        for dtype in dtypes:
            if spec.family == "data":
                cells.append(Cell(spec.name, dtype, None))
                continue
            dtype_rejected = profile is not None and profile.reject(spec.name, dtype, None, "contiguous") is not None
            ops = REDUCE_OPS if spec.ops is None else list(spec.ops)
            for op in (ops[:1] if dtype_rejected else ops):
                cells.append(Cell(spec.name, dtype, op))
    return cells


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" in metafunc.fixturenames:
        state = session_of(metafunc.config)
        cells = matrix_cells(state.profile)
        metafunc.parametrize("cell", cells, ids=[c.id() for c in cells])


@pytest.mark.conformance
def test_collective(cell: Cell, conformance) -> None:  # noqa: ANN001 - fixture from the plugin
    spec = all_specs()[cell.collective]
    missing = spec.requires()
    if missing:
        pytest.skip(f"{cell.collective}: {missing}")
    sizes = conformance.world_sizes(spec)
    known: dict[str, Finding] = {}

    def property_for(drawn_cell: Cell, drawn_sizes: list[int]):  # noqa: ANN202 - a hypothesis property body
        def property_holds(data: st.DataObject) -> None:
            world_size = data.draw(world_sizes(drawn_sizes), label="world_size")
            case = spec.cases(data.draw, world_size, drawn_cell, conformance.profile)
            result = execute(conformance.pool(world_size), spec, case, conformance.profile)
            finding = result.failed and known_finding(conformance.findings_of, cell, result.layout,
                                                      result.outcome, result.detail, torch.__version__)
            if finding:
                known[finding.id] = finding
                result = CaseResult("known", f"{finding.id}: {result.detail}", result.layout)
            conformance.report.record(cell.collective, cell.dtype, cell.op, result.layout, result.outcome,
                                      result.detail)
            if result.failed:
                reproduce = reproduce_line(conformance.backend, conformance.backend_module, cell.id(),
                                           conformance.effort, conformance.config.getoption("--backend-profile"))
                raise AssertionError(f"{result.outcome}: {result.detail}\n  case: {case.summary()}\n"
                                     f"  ranks ran on: {conformance.where()}\n  reproduce: {reproduce}")
        return property_holds

    # the pinned input classes first: where one fails, the failure shows the class that caught it (the main
    # property might have stumbled on some of them by chance, with a case that does not say so)
    shrink = conformance.config.getoption("--shrink")
    for condition in pinned_conditions(spec, cell, conformance.profile):
        condition_sizes = conformance.condition_sizes(condition, sizes)
        if condition_sizes:
            run_property(property_for(dataclasses.replace(cell, condition=condition), condition_sizes),
                         backend=conformance.backend, cell_id=f"{cell.id()}#{condition}", effort=conformance.effort,
                         shrink=shrink, examples=conformance.condition_examples(condition))
    run_property(property_for(cell, sizes), backend=conformance.backend, cell_id=cell.id(),
                 effort=conformance.effort, shrink=shrink)
    xfail_known(known.values(), inherited_from=None if conformance.findings_of == conformance.backend
                else conformance.findings_of)


def pinned_conditions(spec: CollectiveSpec, cell: Cell, profile: Profile | None) -> list[str]:
    """The spec's pinned input classes this cell draws: all of them, unless the table refuses the cell
    outright (its dtype or op, whatever the case): such a case would only be refused."""
    refused = profile is not None and cell.dtype is not None and profile.reject(
        cell.collective, cell.dtype, cell.op, "contiguous") is not None
    return [] if refused else list(spec.conditions)
