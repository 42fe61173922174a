"""Single-process multi-GPU conformance: torch.cuda.comm, torch.cuda.nccl, nn.DataParallel, model parallel.

One test per cell: test_comm[<api>-<option group>], test_nccl[<function>-<dtype>-<raw op>] (both in
TestComm, so `-k comm` selects them), test_single_process_training[<kind>-<dtype>]. Hypothesis draws each
example here; the single-process worker (conformance/single_process.py) runs it on real GPUs (--backend=nccl) or on
simulated ones (--backend=sim); the results are judged here and recorded in the capability report.
"""
from __future__ import annotations

from typing import Any, Iterator

import pytest
import torch
from hypothesis import strategies as st

from conformance.comm.cells import SPCell, cells
from conformance.comm.checks import judge
from conformance.comm.worker import run_cases
from conformance.findings import Finding, known_finding
from conformance.single_process import BACKENDS, DeviceSetup, SingleProcessWorker
from conformance.spec import Cell
from conformance.harness import reproduce_line, run_property, xfail_known
from realgpu.environment import process_environment

FAILING = ("FAIL", "should-work", "broken")
TESTS = {"test_comm": "comm", "test_nccl": "nccl", "test_single_process_training": "training"}  # test -> cells


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "sp_cell" in metafunc.fixturenames:
        chosen = cells(TESTS[metafunc.function.__name__])
        metafunc.parametrize("sp_cell", chosen, ids=[c.id() for c in chosen])


@pytest.fixture(scope="session")
def sp_worker(conformance: Any) -> Iterator[SingleProcessWorker]:
    """The worker that owns this process's GPUs (simulated on --backend=sim), started once per session."""
    if conformance.backend not in BACKENDS:
        pytest.skip(f"single-process multi-GPU APIs need GPUs: --backend=sim (simulated) or nccl, "
                    f"not {conformance.backend}")
    if getattr(conformance, "attached", None) is not None:
        pytest.skip("single-process multi-GPU APIs run on this host's GPUs, not on attached ranks")
    env, devices = _devices(conformance)
    if devices < 1:
        pytest.skip("no GPU for the single-process worker")
    worker = SingleProcessWorker(DeviceSetup(conformance.backend, devices), env, timeout=conformance.timeout)
    where = worker.call(process_environment, conformance.backend)
    if where.ok:
        conformance.learned_environment(where.value)
    yield worker
    worker.close()


def _devices(conformance: Any) -> tuple[tuple[tuple[str, str], ...], int]:
    """The worker's environment and how many GPUs it gets: --max-world-size simulated ones, or the real
    GPUs this process holds (its xdist lease, else every visible one), NCCL's safe settings included."""
    if conformance.backend == "sim":
        return (), conformance.max_world
    from realgpu import NCCL_SAFE_ENV, visible_gpu_count

    lease = getattr(conformance, "lease", None)
    if lease is not None:
        return lease.env(), min(conformance.max_world, lease.held)
    return tuple(NCCL_SAFE_ENV.items()), min(conformance.max_world, visible_gpu_count())


class TestComm:
    @pytest.mark.conformance
    def test_comm(self, sp_cell: SPCell, conformance: Any, sp_worker: SingleProcessWorker) -> None:
        check_cell("test_comm", sp_cell, conformance, sp_worker)

    @pytest.mark.conformance
    def test_nccl(self, sp_cell: SPCell, conformance: Any, sp_worker: SingleProcessWorker) -> None:
        check_cell("test_nccl", sp_cell, conformance, sp_worker)


class TestSingleProcessTraining:
    @pytest.mark.conformance
    def test_single_process_training(self, sp_cell: SPCell, conformance: Any, sp_worker: SingleProcessWorker) -> None:
        check_cell("test_single_process_training", sp_cell, conformance, sp_worker)


def check_cell(test: str, cell: SPCell, conformance: Any, worker: SingleProcessWorker) -> None:
    """The property of one cell: every drawn case does what its expectation says, on the worker's GPUs."""
    n = worker.setup.devices
    if n < cell.min_devices:
        pytest.skip(f"{cell.id()} needs {cell.min_devices} GPUs; the worker has {n}")
    report_cell = Cell(cell.api, cell.dtype, cell.op)
    known: dict[str, Finding] = {}

    def record(variant: str, outcome: str, detail: str) -> None:
        conformance.report.record(cell.api, cell.dtype, cell.op, variant, outcome, detail)

    def property_holds(data: st.DataObject) -> None:
        cases = cell.draw(data.draw, n, cell)
        reply = worker.call(run_cases, cell.run, cases)
        if not reply.ok:
            outcome = "broken" if reply.broken else "FAIL"
            for case in cases:
                record(case.variant, outcome, reply.broken or f"harness error in the worker: {reply.error}")
            raise AssertionError(f"{outcome}: {reply.broken or reply.error}\n  cases: "
                                 + "\n    ".join(case.summary() for case in cases)
                                 + f"\n  ran on: {conformance.where()}")
        failures = []
        for case, result in zip(cases, reply.value):
            outcome, detail = judge(case, result, cell.check)
            finding = outcome in FAILING and known_finding(conformance.backend, report_cell, case.variant, outcome,
                                                           detail, torch.__version__)
            if finding:
                known[finding.id] = finding
                outcome, detail = "known", f"{finding.id}: {detail}"
            record(case.variant, outcome, detail)
            if outcome in FAILING:
                failures.append(f"{outcome}: {detail}\n  case: {case.summary()}")
        if failures:
            reproduce = reproduce_line(conformance.backend, None, f"{test}[{cell.id()}]", conformance.effort)
            raise AssertionError("\n".join(failures) + f"\n  ran on: {conformance.where()}"
                                 f"\n  reproduce: {reproduce}")

    run_property(property_holds, backend=conformance.backend, cell_id=f"{test}/{cell.id()}",
                 effort=conformance.effort, shrink=conformance.config.getoption("--shrink"))
    xfail_known(known.values())
