"""pytest plugin (entry point `simgpu-testing`): run a user's test function on N ranks of the selected backend.

    def step(ctx):                                # module level: every rank imports it by name
        t = torch.ones(2, device=ctx.device)      # ctx.device: the rank's device (single source: RankContext)
        dist.all_reduce(t)
        return t.tolist()

    @pytest.mark.world_size(2, 4)                 # one test per world size: test_x[ws2], test_x[ws4]
    def test_x(ranks):
        assert ranks.run(step) == [[ranks.world_size] * 2] * ranks.world_size

The `ranks` fixture runs on warm pools, one per world size, of the backend --simgpu-backend names
(default sim: the simulator, whose ranks see simulated GPUs: ctx.device is cuda:r). Every rank's value
comes back, or `RanksFailed` with every rank's line; a crash or hang is `RankPoolError` and the next
call gets fresh ranks. See docs/testing-your-code.md.

Installed as a pytest plugin (entry point `simgpu`), it adds to a project's runs only this fixture, the
`world_size` marker and options named --simgpu-*; the conformance suite's options load with the suite.
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pytest

from simgpu import faults as faults_module
from simgpu import reaper, settings
from simgpu.outcomes import RanksFailed, values_or_raise
from simgpu.pool import RankPool, RankPoolError
from simgpu.selection import BackendChoiceError, attached_ranks, binding_for, check_backend

MARKER = "world_size"
DEFAULT_WORLD_SIZE = 2


# ----------------------------------------------------------------------------- shipping the function
@dataclass(frozen=True)
class FunctionRef:
    """Where a rank finds the user's function: module name, qualified name, and the module's file.

    A test module is not always importable by name on a rank (the pool may have started before pytest
    put its directory on sys.path, or pytest imported it with --import-mode=importlib), and pytest
    rewrote its asserts; so the rank loads it from its file, with asserts rewritten the same way.
    """

    module: str
    qualname: str
    file: str | None
    root: str | None  # the sys.path entry the module name resolves from, when there is one
    rewrite: bool  # pytest rewrote the module's asserts in the controller

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> "FunctionRef":
        name = getattr(fn, "__qualname__", None)
        module_name = getattr(fn, "__module__", None)
        if not callable(fn) or not name or not module_name:
            raise TypeError(f"ranks.run(fn): fn must be a module-level function, got {fn!r}")
        if "<locals>" in name or "<lambda>" in name:
            raise TypeError(f"ranks.run(fn): {module_name}.{name} is defined inside a function or is a lambda; "
                            "every rank imports fn by name, so define it at module level")
        module = sys.modules.get(module_name)
        if module_name == "__main__" or module is None or _lookup(module, name) is not fn:
            raise TypeError(f"ranks.run(fn): {module_name}.{name} cannot be imported by name on the ranks; "
                            "define fn at module level in an importable module (a test file is fine)")
        file = getattr(module, "__file__", None)
        loader = type(getattr(module, "__loader__", None)).__name__
        return cls(module_name, name, file, _sys_path_root(module_name, file), loader == "AssertionRewritingHook")


def _lookup(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _sys_path_root(module_name: str, file: str | None) -> str | None:
    """The directory D such that `module_name` is D/<dotted path>.py (or its package's __init__.py)."""
    if not file:
        return None
    parts = os.path.abspath(file)[: -len(".py")].split(os.sep) if file.endswith(".py") else []
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    names = module_name.split(".")
    if len(parts) <= len(names) or parts[-len(names):] != names:
        return None
    return os.sep.join(parts[: -len(names)]) or os.sep


def _call_on_rank(ctx: Any, ref: FunctionRef, args: tuple) -> Any:
    """Runs on each rank (RankPool.run): find the user's function, call fn(ctx, *args)."""
    return _lookup(_module_on_rank(ctx.rank, ref), ref.qualname)(ctx, *args)


def _module_on_rank(rank: int, ref: FunctionRef) -> Any:
    module = sys.modules.get(ref.module)
    if module is not None and (ref.file is None or _same_file(getattr(module, "__file__", None), ref.file)):
        return module
    if ref.root and ref.root not in sys.path:
        sys.path.insert(0, ref.root)
    try:
        if ref.file and (ref.rewrite or module is not None):
            return _load_from_file(ref.module, ref.file, ref.rewrite)
        try:
            return importlib.import_module(ref.module)
        except ModuleNotFoundError:
            if not ref.file:
                raise
            return _load_from_file(ref.module, ref.file, False)
    except Exception as exc:
        raise ImportError(f"simgpu.testing: rank {rank} could not import {ref.module} ({ref.file}) for "
                          f"ranks.run({ref.module}.{ref.qualname}): {type(exc).__name__}: {exc}") from exc


def _same_file(a: str | None, b: str) -> bool:
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


def _load_from_file(name: str, file: str, rewrite: bool) -> Any:
    """Import `file` as module `name` (asserts rewritten as pytest does, so a rank's failure shows values)."""
    parent = name.rpartition(".")[0]
    if parent:
        try:
            importlib.import_module(parent)
        except ImportError:
            pass  # a module pytest named after its folders (importlib mode) need not have real parents
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None:
        raise ImportError(f"no module spec for {file}")
    module = importlib.util.module_from_spec(spec)
    with open(file, "rb") as f:
        source = f.read()
    tree = ast.parse(source, filename=file)
    if rewrite:
        try:
            from _pytest.assertion.rewrite import rewrite_asserts

            rewrite_asserts(tree, source, file, None)
        except Exception:  # noqa: BLE001 - pytest's private API moved: plain asserts still work
            tree = ast.parse(source, filename=file)
    sys.modules[name] = module
    try:
        exec(compile(tree, file, "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


# ----------------------------------------------------------------------------- the fixture's object
class Ranks:
    """Runs functions on every rank of one warm pool; what the `ranks` fixture gives a test."""

    def __init__(self, pool: RankPool):
        self.pool = pool
        self._armed_at: int | None = None  # pool.starts when faults were injected

    @property
    def world_size(self) -> int:
        return self.pool.world_size

    @property
    def backend(self) -> str:
        return self.pool.binding.backend

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> list[Any]:
        """fn(ctx, *args) on every rank: every rank's value (index = rank), or RanksFailed naming each rank.

        Every rank skipping (pytest.skip) skips the test; a crash or hang raises RankPoolError
        (the next call starts fresh ranks). timeout: seconds for this call (default --rank-timeout).
        """
        __tracebackhide__ = True  # the user's test line and every rank's story, not the plumbing between
        ref = FunctionRef.of(fn)
        try:
            outcomes = self.pool.run(_call_on_rank, ref, args, timeout=timeout, label=f"{ref.module}.{ref.qualname}")
            if self.backend != "sim" and any(not o.ok for o in outcomes):
                from simgpu.in_step import ensure_in_step

                ensure_in_step(self.pool)  # an asynchronous backend may be left out of step for the next test
            return values_or_raise(outcomes)
        except (RanksFailed, RankPoolError, pytest.skip.Exception) as exc:
            raise exc.with_traceback(None)  # reported at the test's line (a skip too), not inside simgpu

    def inject(self, *faults: faults_module.Fault) -> list[str]:
        """Arm faults (simgpu.faults.kill(1, at=2), ...) on the ranks they name; disarmed after the test.

        Only the sim backend has fault injection: on any other backend the test is skipped.
        """
        for f in faults:
            if not isinstance(f, faults_module.Fault):
                raise TypeError(f"ranks.inject takes simgpu.faults.Fault objects, got {type(f).__name__}: {f!r}")
            if f.rank >= self.world_size:
                raise ValueError(f"ranks.inject: fault names rank {f.rank} ({f.describe()}), "
                                 f"but the test runs on {self.world_size} ranks")
        if self.backend != "sim":
            pytest.skip(f"fault injection needs the sim backend; this run uses --simgpu-backend={self.backend}")
        armed = values_or_raise(self.pool.run(faults_module.install_on_rank, list(faults)))
        self._armed_at = self.pool.starts
        return [text for per_rank in armed for text in per_rank]

    def disarm(self) -> None:
        """Clear faults that did not fire, so the next test on these warm ranks runs clean."""
        armed_at, self._armed_at = self._armed_at, None
        if armed_at is not None and self.pool.alive and self.pool.starts == armed_at:
            try:
                self.pool.run(faults_module.clear_on_rank)  # fresh ranks (after a crash) have none armed
            except RankPoolError:
                pass  # the pool was torn down: the next test starts fresh ranks, with nothing armed


# ----------------------------------------------------------------------------- options and session
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simgpu", "simgpu: the `ranks` fixture (your test functions on N ranks)")
    group.addoption("--simgpu-backend", default="sim",
                    help="backend the `ranks` fixture's ranks use: sim (default: simulated GPUs held to NCCL's "
                         "rules), gloo, nccl (one real GPU per rank), or a name registered by --simgpu-backend-module")
    group.addoption("--simgpu-backend-module", default=None, metavar="MODULE",
                    help="module every rank imports before init_process_group (it registers --simgpu-backend)")
    group.addoption("--simgpu-rank-timeout", type=float, default=60.0, metavar="SECONDS",
                    help="seconds one ranks.run call may take before the ranks are killed and replaced (default 60)")
    group.addoption("--simgpu-attach", default=None, metavar="HOST:PORT",
                    help="run on ranks started by torchrun (-m simgpu.attach --controller HOST:PORT) instead of "
                         "forking them here; listen on this address (docs/multinode.md)")
    group.addoption("--simgpu-attach-world-size", type=int, default=None, metavar="N",
                    help="with --simgpu-attach: how many ranks torchrun starts (WORLD_SIZE)")
    group.addoption("--simgpu-attach-timeout", type=float, default=300.0, metavar="SECONDS",
                    help="with --simgpu-attach: seconds to wait for torchrun's ranks to connect (default 300)")


class RanksSession:
    """Per-process state of the fixture: the backend, its warm pools (one per world size), a GPU lease.

    Nothing starts until a test asks for `ranks`: a project that never uses the fixture pays nothing.
    """

    def __init__(self, config: pytest.Config):
        self.backend: str = config.getoption("--simgpu-backend")
        self.backend_module: str | None = config.getoption("--simgpu-backend-module")
        self.timeout: float = config.getoption("--simgpu-rank-timeout")
        self._config = config
        self._attached: Any = None
        self.lease: Any = None
        self.pools: dict[int, RankPool] = {}
        self.run_id = reaper.new_run_id()  # marks every rank (SIMGPU_RUN_ID), so close() finds what they started

    def check(self) -> None:
        """Fail the run at start-up, in one line, for a backend that cannot work here, a bad timeout, or
        a bad setting in the environment the ranks will read (SIMGPU_FAULTS, SIMGPU_STRICT_TIMEOUT)."""
        try:
            check_backend(self.backend, self.backend_module, option="--simgpu-backend",
                          local_ranks=self._config.getoption("--simgpu-attach") is None)
            settings.positive_seconds("--simgpu-rank-timeout", self.timeout)
            settings.positive_seconds("--simgpu-attach-timeout", self._config.getoption("--simgpu-attach-timeout"))
            attach_world = self._config.getoption("--simgpu-attach-world-size")
            if attach_world is not None and attach_world < 1:
                raise ValueError(f"--simgpu-attach-world-size must be at least 1, got {attach_world}")
            settings.check_environment()
        except ValueError as exc:  # BackendChoiceError included
            raise pytest.UsageError(str(exc)) from None

    @property
    def attached(self) -> Any:
        """torchrun's ranks when --simgpu-attach is given (their listener starts at first use), else None."""
        address = self._config.getoption("--simgpu-attach")
        if address is not None and self._attached is None:
            try:
                self._attached = attached_ranks(
                    address, self._config.getoption("--simgpu-attach-world-size"),
                    self._config.getoption("--simgpu-attach-timeout"), option="--simgpu-attach",
                    under_xdist=bool(getattr(self._config.option, "numprocesses", None))
                    or hasattr(self._config, "workerinput"))
            except BackendChoiceError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._attached

    def pool(self, size: int) -> RankPool:
        if size not in self.pools:
            if self.backend == "nccl" and self.lease is None and self.attached is None:
                from realgpu.leases import worker_lease

                self.lease = worker_lease()
            binding = binding_for(self.backend, self.backend_module, lease=self.lease, simulated_gpus=True)
            binding = dataclasses.replace(binding, env=(*binding.env, (reaper.RUN_ID_ENV, self.run_id)))
            self.pools[size] = RankPool(size, binding, timeout=self.timeout, source=self.attached)
        return self.pools[size]

    def close(self) -> None:
        """Close every pool, then kill whatever the ranks started that still runs (in a new session or
        double-forked, out of reach of a rank's process group: found by the session's run marker); a rank
        found dead at close (it died after the last answer) is raised after all are closed."""
        failure: RankPoolError | None = None
        for pool in self.pools.values():
            try:
                pool.close()
            except RankPoolError as exc:
                failure = failure or exc
        self.pools.clear()
        if self._attached is not None:
            self._attached.close()
        left = reaper.kill_marked(self.run_id)
        if left:
            sys.stderr.write(f"simgpu: could not kill processes {left} that the ranks started\n")
        if failure is not None:
            raise failure


_SESSION = pytest.StashKey[RanksSession]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*sizes): run the test once per world size (ids [ws<N>]) with the `ranks` fixture "
                   f"bound to that many ranks (default {DEFAULT_WORLD_SIZE})")
    session = RanksSession(config)
    session.check()
    config.stash[_SESSION] = session


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Close the pools; a rank found dead at close fails the run, so a dying last test cannot leave
    an all-passed report. An xdist worker also hands the failure to the controller (workeroutput),
    whose own exit status and report would otherwise never hear of it."""
    state = session.config.stash.get(_SESSION, None)
    if state is not None:
        try:
            state.close()
        except RankPoolError as exc:
            fail_session(session, exc)
    for text in session.config.stash.get(_WORKER_FAILURES, []):
        _report_failure(session, text)


_WORKER_FAILURE = "simgpu_failure_after_last_test"
_WORKER_FAILURES = pytest.StashKey[list]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: a worker that found a rank dead after its last test makes the run fail here too."""
    text = (getattr(node, "workeroutput", None) or {}).get(_WORKER_FAILURE)
    if text:
        worker = getattr(getattr(node, "gateway", None), "id", "?")
        node.config.stash.setdefault(_WORKER_FAILURES, []).append(f"[{worker}] {text}")


def fail_session(session: pytest.Session, exc: BaseException) -> None:
    """Report an error found after the last test (at pool close) and make the run's exit status say so;
    on an xdist worker, hand it to the controller too (pytest_testnodedown there fails the run)."""
    text = f"simgpu: {exc}"
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_WORKER_FAILURE] = "\n".join(filter(None, [workeroutput.get(_WORKER_FAILURE), text]))
    _report_failure(session, text)


def _report_failure(session: pytest.Session, text: str) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "simgpu: a rank failed after the last test's answer", red=True)
        reporter.write_line(text)
    else:
        sys.stderr.write(text + "\n")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    where = metafunc.definition.nodeid
    if "ranks" not in metafunc.fixturenames:
        pytest.fail(f"{where}: @pytest.mark.{MARKER} needs the test to use the `ranks` fixture", pytrace=False)
    sizes = list(marker.args)
    if not sizes or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes):
        pytest.fail(f"{where}: @pytest.mark.{MARKER} takes world sizes as ints >= 1, got {marker.args!r}",
                    pytrace=False)
    metafunc.parametrize("ranks", sizes, indirect=True, ids=[f"ws{n}" for n in sizes])


@pytest.fixture
def ranks(request: pytest.FixtureRequest) -> Iterator[Ranks]:
    """A runner on the session's warm pool of `world_size` ranks (the marker's size, else 2)."""
    size: int = getattr(request, "param", DEFAULT_WORLD_SIZE)
    session = request.config.stash[_SESSION]
    if session.backend == "nccl" and session.attached is None:
        _skip_without_gpus(request.config, session, size)
    runner = Ranks(session.pool(size))
    yield runner
    runner.disarm()
    if runner.pool.alive:
        try:
            runner.pool.check_alive()  # a rank that died after answering fails this test, not the next one
        except RankPoolError as exc:
            raise exc.with_traceback(None)


def _skip_without_gpus(config: pytest.Config, session: RanksSession, world_size: int) -> None:
    """A test needing more GPUs than this process may use (its xdist worker's lease) is skipped,
    saying how many of each."""
    from realgpu.leases import shortfall, worker_lease

    if session.lease is None:
        session.lease = worker_lease()
    reason = shortfall(world_size, session.lease)
    if reason:
        pytest.skip(reason)
