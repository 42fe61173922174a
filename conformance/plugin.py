"""The conformance suite's pytest plugin: the --backend option, warm rank pools, hypothesis profiles,
and the capability report at the end of the run.

Loaded by conformance/conftest.py, so only `pytest conformance ...` sees these options; a project that
installs simgpu gets only the `ranks` fixture's --simgpu-* options (simgpu.testing).
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

import pytest

from conformance.backends import BUILTIN, TABLES, Profile, findings_backend, profile_for
from conformance.report import CapabilityReport
from conformance.spec import CONDITION_MIN_MEMBERS, CollectiveSpec
from simgpu.pool import Binding, RankPool, RankPoolError
from simgpu.selection import BackendChoiceError, attached_ranks, binding_for, check_backend

PROFILES = {"ci": 4, "dev": 15, "thorough": 150}  # hypothesis examples per matrix cell
# Input classes each profile reaches in every cell that has them, in a property of their own (not left to
# the main property's chance draws): examples per cell and profile (docs/conformance-inputs.md).
CONDITIONS = {
    "large": {"ci": 1, "dev": 2, "thorough": 10},      # tensors past 1 MiB per rank, odd remainders
    "arrival": {"ci": 1, "dev": 1, "thorough": 3},     # members reach gather / gather_object in a drawn order
    "latecomer": {"ci": 1, "dev": 1, "thorough": 3},   # barrier: each member in turn arrives last
}
DEFAULT_MAX_WORLD = 4
REPORT_KEY = "simgpu_capability_records"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simgpu", "multi-GPU conformance (simgpu)")
    group.addoption("--backend", default="sim",
                    help="torch.distributed backend to test: sim (default: CPU simulator held to NCCL's rules), "
                         "gloo, nccl, or any name registered with torch.distributed.Backend.register_backend")
    group.addoption("--backend-module", default=None, metavar="MODULE",
                    help="module every rank imports before init_process_group (it registers --backend)")
    group.addoption("--backend-profile", default=None, choices=sorted(TABLES),
                    help="the support table a registered backend claims (its module may claim one instead, "
                         "with conformance.backends.hold_to): combinations the table supports must work, and "
                         "the confirmed defects of its base (gloo's, NCCL's) are reported as that base's findings")
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
    group.addoption("--attach", default=None, metavar="HOST:PORT",
                    help="use ranks started by torchrun (-m simgpu.attach --controller HOST:PORT) instead of "
                         "forking them here; listen on this address (docs/multinode.md)")
    group.addoption("--attach-world-size", type=int, default=None, metavar="N",
                    help="with --attach: how many ranks torchrun starts (WORLD_SIZE); the only world size drawn")
    group.addoption("--attach-timeout", type=float, default=300.0,
                    help="with --attach: seconds to wait for torchrun's ranks to connect (default 300)")
    group.addoption("--predict", default=None, metavar="MACHINE",
                    help="sim backend: have the ranks record the collectives they run and print their predicted "
                         "GPU communication time on this machine (a simgpu.cost_model preset, e.g. h200-nvlink4) "
                         "at the end (docs/cost-model.md)")


class ConformanceSession:
    """Per-process state: the backend under test, its table, warm pools per world size, the report.

    nccl: the pools bind ranks to this process's GPU lease (realgpu.leases), so xdist workers never
    share a GPU and the largest world drawn is what the lease holds. --attach: the ranks come from
    torchrun (simgpu.attach) and the one world size drawn is theirs.
    """

    def __init__(self, config: pytest.Config):
        self.config = config
        self.backend: str = config.getoption("--backend")
        self.backend_module: str | None = config.getoption("--backend-module")
        if self.backend_module:  # it may declare its table (backends.hold_to); imported once by check_backend
            importlib.import_module(self.backend_module)
        try:
            self.profile: Profile | None = profile_for(self.backend, config.getoption("--backend-profile"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.findings_of = findings_backend(self.backend, self.profile)
        self.effort = _effort(config)
        self.timeout = config.getoption("--rank-timeout")
        self.pools: dict[int, RankPool] = {}
        self.attached: Any = _attached_ranks(config)
        self.lease: Any = None
        if self.attached is not None:
            self.max_world: int = config.getoption("--attach-world-size")
        else:
            given = config.getoption("--max-world-size")
            max_world = DEFAULT_MAX_WORLD if given is None else given
            if not 1 <= max_world <= 8:
                raise pytest.UsageError(f"--max-world-size must be between 1 and 8, got {max_world}")
            if self.backend == "nccl":
                from realgpu.leases import worker_lease

                self.lease = worker_lease()
                max_world = min(max_world, self.lease.held)
            self.max_world = max_world
        table = self.profile.description if self.profile else "no table: support is probed per combination"
        if self.profile is not None and self.backend not in BUILTIN:
            table = f"{table}, the {self.profile.name} table it claims; {self.profile.base or 'no'} findings apply"
        self.report = CapabilityReport(self.backend, table)
        self.predict, self.predict_dir, self._own_predict_dir = _predict_setup(config)

    @property
    def examples(self) -> int:
        return PROFILES[self.effort]

    def condition_examples(self, condition: str) -> int:
        """Examples of a pinned input class per cell under this profile (CONDITIONS)."""
        return CONDITIONS[condition][self.effort]

    def condition_sizes(self, condition: str, sizes: list[int]) -> list[int]:
        """The world sizes that can hold a pinned input class (none: the class is not drawn here)."""
        return [n for n in sizes if n >= CONDITION_MIN_MEMBERS.get(condition, 1)]

    def world_sizes(self, spec: CollectiveSpec) -> list[int]:
        """The world sizes to draw for a collective; skips the test when this process cannot run it."""
        if self.attached is not None:
            if spec.min_world > self.max_world:
                pytest.skip(f"{spec.name} needs at least {spec.min_world} ranks; the attached world has {self.max_world}")
            return [self.max_world]
        if self.lease is not None:
            from realgpu.leases import shortfall

            reason = shortfall(spec.min_world, self.lease)
            if reason:
                pytest.skip(reason)
        return list(range(spec.min_world, self.max_world + 1)) or [spec.min_world]

    def binding(self) -> Binding:
        return binding_for(self.backend, self.backend_module, lease=self.lease, env=self.predict_env())

    def predict_env(self) -> tuple[tuple[str, str], ...]:
        """--predict: what makes the sim ranks record their collectives (simgpu.comm_log)."""
        if not self.predict:
            return ()
        from simgpu import comm_log

        return ((comm_log.ENV_MACHINE, self.predict), (comm_log.ENV_DIR, self.predict_dir))

    def pool(self, world_size: int) -> RankPool:
        if world_size not in self.pools:
            self.pools[world_size] = RankPool(world_size, self.binding(), timeout=self.timeout, source=self.attached)
        return self.pools[world_size]

    def where(self) -> str:
        """Where the ranks ran, in one line (torch, CUDA, NCCL, driver, device: known on the ranks only,
        so asked of rank 0 of a pool that has started), for the report and every failure message."""
        if not self.report.environment:
            from realgpu.environment import rank_environment

            for pool in self.pools.values():
                if pool.alive:
                    try:
                        first = pool.run(rank_environment)[0]
                    except RankPoolError:  # a pool that broke says nothing; the next one will
                        continue
                    if first.ok:
                        self.learned_environment(first.value)
                        break
        return self.report.where()

    def learned_environment(self, env: dict) -> None:
        """Keep the first environment a rank or worker reported (see realgpu.environment)."""
        if not self.report.environment:
            self.report.environment = {k: v for k, v in env.items() if k not in ("world_size", "host")}

    def close(self) -> None:
        """Close every pool (all of them, even if one reports a rank that died), then re-raise the first error."""
        errors = []
        for pool in self.pools.values():
            try:
                pool.close()
            except RankPoolError as exc:
                errors.append(exc)
        self.pools.clear()
        if self.attached is not None:
            self.attached.close()
        if errors:
            raise errors[0]


def _attached_ranks(config: pytest.Config) -> Any:
    """The listener for torchrun's ranks (simgpu.attach) when --attach is given, else None."""
    address = config.getoption("--attach")
    if address is None:
        return None
    try:
        return attached_ranks(address, config.getoption("--attach-world-size"), config.getoption("--attach-timeout"),
                              option="--attach", under_xdist=bool(getattr(config.option, "numprocesses", None))
                              or hasattr(config, "workerinput"))
    except BackendChoiceError as exc:
        raise pytest.UsageError(str(exc)) from None


def _predict_setup(config: pytest.Config) -> tuple[str | None, str, bool]:
    """--predict: (machine, the folder the ranks write to, whether this process made it). xdist workers
    share the controller's folder through the environment they inherit."""
    name = config.getoption("--predict", None)
    if not name:
        return None, "", False
    from simgpu import comm_log, cost_model

    try:
        cost_model.machine(name)
    except cost_model.UnknownMachine as exc:
        raise pytest.UsageError(f"--predict: {exc}") from None
    folder = os.environ.get(comm_log.ENV_DIR)
    if folder and os.path.isdir(folder):
        return name, folder, False
    import tempfile

    folder = tempfile.mkdtemp(prefix="simgpu-predict-")
    os.environ[comm_log.ENV_DIR] = folder  # inherited by xdist workers started after this
    return name, folder, True


def _effort(config: pytest.Config) -> str:
    chosen = config.getoption("--conformance-profile") or os.environ.get("SIMGPU_PROFILE") or "ci"
    if chosen not in PROFILES:
        raise pytest.UsageError(f"unknown conformance profile {chosen!r} (from $SIMGPU_PROFILE); "
                                f"choose one of {', '.join(sorted(PROFILES))}")
    return chosen


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance: a conformance property test (one matrix cell)")
    try:
        check_backend(config.getoption("--backend"), config.getoption("--backend-module"),
                      local_ranks=config.getoption("--attach") is None)
    except BackendChoiceError as exc:
        raise pytest.UsageError(str(exc)) from None
    _check_settings(config)
    session = ConformanceSession(config)
    config.stash[_SESSION] = session
    _register_hypothesis_profiles()
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistReportMerger(session), "simgpu-xdist-merger")


def _check_settings(config: pytest.Config) -> None:
    """--rank-timeout and the environment the ranks will read: wrong values stop the run here, in one line."""
    from simgpu import settings

    try:
        settings.positive_seconds("--rank-timeout", config.getoption("--rank-timeout"))
        settings.check_environment()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


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
    try:
        state.close()
    except RankPoolError as exc:
        from simgpu.testing import fail_session

        fail_session(session, exc)
    if hasattr(session.config, "workeroutput"):  # an xdist worker: ship records to the controller
        session.config.workeroutput[REPORT_KEY] = state.report.to_transport()


class _XdistReportMerger:
    def __init__(self, state: ConformanceSession):
        self.state = state

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        sent = getattr(node, "workeroutput", {}).get(REPORT_KEY)
        if sent:
            self.state.report.merge_transport(sent)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Keep the report files current, so a run cut off by a time limit still leaves its matrix."""
    state = item.config.stash.get(_SESSION, None)
    if state is None or not item.get_closest_marker("conformance"):
        return
    state.where()  # learn where the ranks run while they are up (xdist workers send it with their records)
    if not hasattr(item.config, "workeroutput"):
        state.report.write(Path(item.config.getoption("--report-dir")))


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is not None and state.predict and not hasattr(config, "workeroutput"):
        _predicted_time_section(terminalreporter, state)
    if state is None or not state.report.counts or hasattr(config, "workeroutput"):
        return
    terminalreporter.section(f"capability matrix ({state.effort} profile)")
    for line in state.report.terminal_lines():
        terminalreporter.write_line(line)
    paths = state.report.write(Path(config.getoption("--report-dir")))
    terminalreporter.write_line("report: " + ", ".join(str(p) for p in paths))


def _predicted_time_section(terminalreporter: Any, state: ConformanceSession) -> None:
    """--predict: the sim ranks' recorded collectives, priced by the cost model (ranks closed by now)."""
    import shutil

    from simgpu import comm_log

    terminalreporter.section("predicted GPU communication time")
    for line in comm_log.summary_lines(comm_log.read_logs(state.predict_dir), state.predict):
        terminalreporter.write_line(line)
    if state.backend != "sim":
        terminalreporter.write_line(f"(only the sim backend records its collectives; --backend is {state.backend})")
    if state._own_predict_dir:
        shutil.rmtree(state.predict_dir, ignore_errors=True)
