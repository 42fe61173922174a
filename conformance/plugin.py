"""pytest plugin (entry point `simgpu`): the --backend option, warm rank pools, hypothesis profiles,
and the capability report at the end of the run. Loaded wherever the package is installed.
"""
from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from conformance.backends import BUILTIN_BACKENDS, Profile, profile_for
from conformance.report import CapabilityReport
from simgpu.pool import Binding, RankPool

PROFILES = {"ci": 4, "dev": 15, "thorough": 150}  # hypothesis examples per matrix cell
DEFAULT_MAX_WORLD = 4
REPORT_KEY = "simgpu_capability_records"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simgpu", "multi-GPU conformance (simgpu)")
    group.addoption("--backend", default="sim",
                    help="torch.distributed backend to test: sim (default: CPU simulator held to NCCL's rules), "
                         "gloo, nccl, or any name registered with torch.distributed.Backend.register_backend")
    group.addoption("--backend-module", default=None, metavar="MODULE",
                    help="module every rank imports before init_process_group (it registers --backend)")
    group.addoption("--max-world-size", type=int, default=None,
                    help=f"largest world size to draw (default {DEFAULT_MAX_WORLD}, at most 8)")
    group.addoption("--conformance-profile", default=None, choices=sorted(PROFILES),
                    help="hypothesis effort: ci (fast, the default), dev, thorough (nightly). "
                         "Default: $SIMGPU_PROFILE, else ci")
    group.addoption("--report-dir", default="reports", help="where the capability report (.md, .json) goes")
    group.addoption("--rank-timeout", type=float, default=60.0,
                    help="seconds one call into the ranks may take before the pool is killed and replaced")
    group.addoption("--shrink", action="store_true", default=False,
                    help="let hypothesis shrink failing examples on real hardware too (off by default for every "
                         "backend but sim and gloo: shrinking one NCCL cell can run thousands of examples)")


class ConformanceSession:
    """Per-process state: the backend under test, its table, warm pools per world size, the report."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.backend: str = config.getoption("--backend")
        self.backend_module: str | None = config.getoption("--backend-module")
        self.profile: Profile | None = profile_for(self.backend)
        max_world = config.getoption("--max-world-size") or DEFAULT_MAX_WORLD
        if not 1 <= max_world <= 8:
            raise pytest.UsageError(f"--max-world-size must be between 1 and 8, got {max_world}")
        self.max_world = max_world
        self.effort = _effort(config)
        self.timeout = config.getoption("--rank-timeout")
        self.pools: dict[int, RankPool] = {}
        table = self.profile.description if self.profile else "no table: support is probed per combination"
        self.report = CapabilityReport(self.backend, table)

    @property
    def examples(self) -> int:
        return PROFILES[self.effort]

    def binding(self) -> Binding:
        device = "cuda" if self.backend == "nccl" else "cpu"
        return Binding(self.backend, self.backend_module, device)

    def pool(self, world_size: int) -> RankPool:
        if world_size not in self.pools:
            self.pools[world_size] = RankPool(world_size, self.binding(), timeout=self.timeout)
        return self.pools[world_size]

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()


def _effort(config: pytest.Config) -> str:
    chosen = config.getoption("--conformance-profile") or os.environ.get("SIMGPU_PROFILE") or "ci"
    if chosen not in PROFILES:
        raise pytest.UsageError(f"unknown conformance profile {chosen!r} (from $SIMGPU_PROFILE); "
                                f"choose one of {', '.join(sorted(PROFILES))}")
    return chosen


def check_backend(backend: str, backend_module: str | None) -> None:
    """Fail at start-up, in one line, for a backend name that cannot work here."""
    if backend_module:
        try:
            importlib.import_module(backend_module)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
            raise pytest.UsageError(f"--backend-module {backend_module!r} failed to import: "
                                    f"{type(exc).__name__}: {exc}") from None
    if backend in BUILTIN_BACKENDS:
        if backend == "nccl":
            from realgpu import require_gpus

            require_gpus(2)
        return
    import torch.distributed as dist

    registered = [b for b in dist.Backend.backend_list if b != "undefined"]
    if backend.upper() not in dist.Backend._plugins and backend.lower() not in registered:
        hint = "" if backend_module else " (name the module that registers it with --backend-module)"
        raise pytest.UsageError(
            f"unknown backend {backend!r}{hint}; choose one of: "
            + ", ".join(sorted(set(BUILTIN_BACKENDS) | set(registered))))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance: a conformance property test (one matrix cell)")
    session = ConformanceSession(config)
    config.stash[_SESSION] = session
    if _runs_conformance(config):
        check_backend(session.backend, session.backend_module)
    _register_hypothesis_profiles()
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistReportMerger(session), "simgpu-xdist-merger")


def _runs_conformance(config: pytest.Config) -> bool:
    args = [str(a) for a in config.args]
    return any("conformance" in a for a in args) or config.getoption("--backend") != "sim"


_SESSION = pytest.StashKey[ConformanceSession]()


def _register_hypothesis_profiles() -> None:
    from hypothesis import HealthCheck, settings

    for name, examples in PROFILES.items():
        settings.register_profile(
            f"simgpu-{name}", max_examples=examples, deadline=None, print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                   HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])


def session_of(config: pytest.Config) -> ConformanceSession:
    return config.stash[_SESSION]


@pytest.fixture(scope="session")
def conformance(pytestconfig: pytest.Config) -> ConformanceSession:
    """The backend under test, its support table, the warm pools and the capability report."""
    return session_of(pytestconfig)


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_SESSION, None)
    if state is None:
        return
    state.close()
    if hasattr(session.config, "workeroutput"):  # an xdist worker: ship records to the controller
        session.config.workeroutput[REPORT_KEY] = json.dumps(state.report.to_records())


class _XdistReportMerger:
    def __init__(self, state: ConformanceSession):
        self.state = state

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        records = getattr(node, "workeroutput", {}).get(REPORT_KEY)
        if records:
            self.state.report.merge_records(json.loads(records))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Keep the report files current, so a run cut off by a time limit still leaves its matrix."""
    state = item.config.stash.get(_SESSION, None)
    if state is not None and item.get_closest_marker("conformance") and not hasattr(item.config, "workeroutput"):
        state.report.write(Path(item.config.getoption("--report-dir")))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None or not state.report.counts or hasattr(config, "workeroutput"):
        return
    terminalreporter.section(f"capability matrix ({state.effort} profile)")
    for line in state.report.terminal_lines():
        terminalreporter.write_line(line)
    paths = state.report.write(Path(config.getoption("--report-dir")))
    terminalreporter.write_line("report: " + ", ".join(str(p) for p in paths))
