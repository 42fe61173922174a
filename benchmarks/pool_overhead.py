#!/usr/bin/env python
"""Per-case overhead of spawn-per-case (MultiProcessTestCase) against the warm RankPool.

Why: the project's design is "a warm pool, never a spawn per test", on the grounds that a spawn
costs seconds per case and a small collective in a live group well under 10 ms. This script measures both in one run, on the same machine, with the same case (one 4 KB
float32 all_reduce whose result is checked), so the claim can be re-checked after every change.

    python benchmarks/pool_overhead.py [--ranks 2 4] [--cases 200] [--spawn-cases 3]
                                       [--backend gloo] [--json PATH]

1. spawn per case: N fresh interpreters (multiprocessing "spawn", as MultiProcessTestCase uses),
   each importing torch, rendezvous through a FileStore in a temporary directory (no port),
   init_process_group("gloo"), one all_reduce, destroy_process_group, exit; the controller waits
   on the process sentinels (no 0.1 s polling, so the baseline gets its best case).
2. warm pool: one RankPool per world size, started once (start-up reported on its own), then
   `--cases` calls of pool.run(pool_allreduce, case), each checked against the exact sum.

Exit status: 0 all cases passed, 1 a case failed (wrong value, error, crash, timeout, leftover
process), 2 bad arguments or the backend is unavailable.
"""
from __future__ import annotations

import argparse
import array
import ctypes
import importlib
import json
import math
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Sequence

# The rank functions must be importable by module name from the fork server and from spawned
# interpreters, whichever way this file was started (script path or -m).
REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

MODULE_NAME = "benchmarks.pool_overhead"
NUMEL = 1024  # 4 KB of float32
INIT_TIMEOUT_S = 60.0


class CaseFailure(Exception):
    """One benchmark case did not produce the right answer; the run must exit non-zero."""


# --------------------------------------------------------------------------- the case itself
def expected_sum(world_size: int, case: int) -> list[float]:
    """What every rank must hold after the all_reduce: sum over ranks of contribution(rank, case).

    The case number is folded in so that a stale or cached result from an earlier call fails.
    Every value is an integer below 2**24, so float32 sums are exact and compared with ==.
    """
    offset = case % 1000
    ranks_sum = world_size * (world_size + 1) // 2
    return [float((i + 1) * ranks_sum + world_size * offset) for i in range(NUMEL)]


def _contribution(rank: int, case: int) -> Any:
    """Rank r contributes (r + 1) * [1, 2, ..., NUMEL] + case % 1000 (runs on a rank)."""
    import torch

    return torch.arange(1, NUMEL + 1, dtype=torch.float32) * (rank + 1) + float(case % 1000)


def check_result(raw: Any, world_size: int, case: int) -> str | None:
    """None if raw (float32 bytes) is the exact expected sum, else a description of the mismatch."""
    if not isinstance(raw, (bytes, bytearray)):
        return f"expected float32 bytes, got {type(raw).__name__}"
    got = array.array("f")
    got.frombytes(bytes(raw))
    want = expected_sum(world_size, case)
    if len(got) != len(want):
        return f"expected {len(want)} elements, got {len(got)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"element {i}: got {g}, expected {w}"
    return None


def pool_allreduce(ctx: Any, case: int) -> bytes:
    """Warm-pool case (runs on every rank): one 4 KB all_reduce in the pool's live group.

    Returns raw bytes rather than the tensor: a tensor sent through a multiprocessing pipe would
    go through torch's shared-memory reductions, which is not what is being measured.
    """
    import torch.distributed as dist

    tensor = _contribution(ctx.rank, case)
    dist.all_reduce(tensor)
    return tensor.numpy().tobytes()


def _die_with_parent() -> None:
    """SIGKILL this spawned rank if the controller dies, so no rank outlives a killed benchmark."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def spawn_rank_main(rank: int, world_size: int, store_path: str, out_dir: str, case: int) -> None:
    """Spawn-per-case rank: what a MultiProcessTestCase child does for one small test.

    Fresh interpreter: import torch, FileStore rendezvous, init gloo, all_reduce, destroy. The
    result (or the traceback) goes to a file in out_dir for the controller to check.
    """
    _die_with_parent()
    try:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # as the pool's ranks do
        import torch.distributed as dist

        store = dist.FileStore(store_path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=INIT_TIMEOUT_S))
        tensor = _contribution(rank, case)
        dist.all_reduce(tensor)
        data = tensor.numpy().tobytes()
        dist.destroy_process_group()
        tmp = os.path.join(out_dir, f"rank{rank}.bin.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, os.path.join(out_dir, f"rank{rank}.bin"))
    except BaseException:  # noqa: BLE001 - reported to the controller through the error file
        with open(os.path.join(out_dir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)


def _by_module_name(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The same function, but from `benchmarks.pool_overhead` rather than `__main__`.

    The pool starts ranks without re-importing __main__, so functions it runs must be
    importable by their module name.
    """
    if fn.__module__ != "__main__":
        return fn
    return getattr(importlib.import_module(MODULE_NAME), fn.__name__)


# --------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was actually observed."""
    ordered = sorted(values)
    index = max(math.ceil(q / 100.0 * len(ordered)) - 1, 0)
    return ordered[index]


@dataclass
class SpawnResult:
    """Spawn-per-case figures for one world size (seconds per case)."""

    cases: int = 0
    seconds: list[float] = field(default_factory=list)
    median_s: float | None = None
    min_s: float | None = None
    failures: list[str] = field(default_factory=list)


@dataclass
class PoolResult:
    """Warm-pool figures for one world size (start-up in seconds, cases in milliseconds)."""

    backend: str = "gloo"
    start_s: float | None = None
    warmup_cases: int = 0
    cases: int = 0
    median_ms: float | None = None
    p90_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    in_rank_median_ms: float | None = None
    failures: list[str] = field(default_factory=list)


@dataclass
class WorldResult:
    """Everything measured at one world size, and the headline ratio."""

    world_size: int
    spawn: SpawnResult
    pool: PoolResult
    spawn_over_warm: float | None = None


# --------------------------------------------------------------------------- spawn per case
def run_spawn_case(world_size: int, case: int, timeout: float) -> float:
    """One spawn-per-case case, wall clock from creating the temp dir to removing it.

    Raises CaseFailure (after killing every rank and removing the temp dir) on any rank's error,
    non-zero exit, wrong value or timeout.
    """
    ctx = multiprocessing.get_context("spawn")
    target = _by_module_name(spawn_rank_main)
    start = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="pool_overhead_spawn_")
    procs: list[Any] = []
    problems: list[str] = []
    try:
        store_path = os.path.join(tmp, "store")
        for rank in range(world_size):
            proc = ctx.Process(target=target, args=(rank, world_size, store_path, tmp, case),
                               name=f"spawn-rank{rank}", daemon=True)
            proc.start()
            procs.append(proc)
        deadline = start + timeout
        pending = {proc.sentinel: proc for proc in procs}
        while pending:
            ready = wait(list(pending), max(deadline - time.perf_counter(), 0.0))
            if not ready:
                late = sorted(int(p.name.removeprefix("spawn-rank")) for p in pending.values())
                problems.append(f"rank(s) {late} did not finish within {timeout:g}s")
                break
            for sentinel in ready:
                pending.pop(sentinel).join()
        for rank, proc in enumerate(procs):
            err = os.path.join(tmp, f"rank{rank}.err")
            out = os.path.join(tmp, f"rank{rank}.bin")
            if os.path.exists(err):
                with open(err) as f:
                    problems.append(f"rank {rank} raised:\n{f.read().rstrip()}")
            elif proc.exitcode not in (0, None):
                problems.append(f"rank {rank} exited with code {proc.exitcode}")
            elif os.path.exists(out):
                with open(out, "rb") as f:
                    wrong = check_result(f.read(), world_size, case)
                if wrong:
                    problems.append(f"rank {rank} wrong result: {wrong}")
            elif proc.exitcode == 0:
                problems.append(f"rank {rank} exited 0 without a result")
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join(5.0)
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.perf_counter() - start
    if problems:
        raise CaseFailure("; ".join(problems))
    return elapsed


def measure_spawn(world_size: int, cases: int, timeout: float) -> SpawnResult:
    """Run `cases` spawn-per-case cases; stop at the first failure (each costs seconds)."""
    result = SpawnResult()
    for case in range(cases):
        try:
            seconds = run_spawn_case(world_size, case, timeout)
        except CaseFailure as exc:
            result.failures.append(f"spawn case {case}: {exc}")
            _log(f"  ranks={world_size} spawn case {case}: FAILED")
            break
        result.seconds.append(seconds)
        _log(f"  ranks={world_size} spawn case {case}: {seconds:.2f} s")
    result.cases = len(result.seconds)
    if result.seconds:
        result.median_s = statistics.median(result.seconds)
        result.min_s = min(result.seconds)
    return result


# --------------------------------------------------------------------------- warm pool
def make_binding(backend: str) -> Any:
    """The pool binding for `backend`; "sim" must import first, and says so when it does not."""
    from simgpu.pool import Binding

    if backend == "sim":
        try:
            importlib.import_module("simgpu.backend")
        except ImportError as exc:
            raise SystemExit(
                f"error: --backend sim is unavailable: importing simgpu.backend failed "
                f"({type(exc).__name__}: {exc}). The sim backend has not landed in this checkout;"
                f" use --backend gloo.") from exc
    return Binding(backend)


def _run_checked(pool: Any, fn: Callable[..., Any], world_size: int, case: int) -> tuple[float, float]:
    """One pool.run of the case; (controller wall seconds, slowest rank's in-rank seconds).

    The check runs after the clock stops; any rank's error or wrong value raises CaseFailure.
    """
    from simgpu.pool import RankPoolError

    start = time.perf_counter()
    try:
        outcomes = pool.run(fn, case)
    except RankPoolError as exc:
        raise CaseFailure(str(exc)) from exc
    elapsed = time.perf_counter() - start
    problems = []
    if len(outcomes) != world_size:
        problems.append(f"expected {world_size} outcomes, got {len(outcomes)}")
    for out in outcomes:
        if not out.ok:
            problems.append(out.describe() + ("\n" + out.traceback.rstrip() if out.traceback else ""))
        else:
            wrong = check_result(out.value, world_size, case)
            if wrong:
                problems.append(f"rank {out.rank} wrong result: {wrong}")
    if problems:
        raise CaseFailure("; ".join(problems))
    return elapsed, max(out.seconds for out in outcomes)


def warm_fork_server(backend: str) -> float:
    """Start the pool's fork server (it imports torch once) with a 1-rank pool; seconds taken.

    Paid once per controller process, so it is reported apart from the per-world-size pool
    start-up; it also proves the backend initialises before minutes go into spawn cases.
    """
    from simgpu.pool import RankPool

    pool = RankPool(1, make_binding(backend), timeout=INIT_TIMEOUT_S)
    start = time.perf_counter()
    try:
        pool.start()
        elapsed = time.perf_counter() - start
        _run_checked(pool, _by_module_name(pool_allreduce), 1, 0)
    finally:
        pool.close()
    return elapsed


def measure_pool(world_size: int, backend: str, cases: int, warmup: int, timeout: float) -> PoolResult:
    """Start one pool, run `warmup` unrecorded then `cases` recorded cases, close it."""
    from simgpu.pool import RankPool

    result = PoolResult(backend=backend)
    fn = _by_module_name(pool_allreduce)
    pool = RankPool(world_size, make_binding(backend), timeout=timeout)
    walls: list[float] = []
    in_rank: list[float] = []
    try:
        start = time.perf_counter()
        pool.start()
        result.start_s = time.perf_counter() - start
        for case in range(warmup + cases):
            wall, inner = _run_checked(pool, fn, world_size, case)
            if case >= warmup:
                walls.append(wall)
                in_rank.append(inner)
            else:
                result.warmup_cases += 1
    except Exception as exc:  # noqa: BLE001 - a failed start or case is a result, not a crash
        done = len(walls)
        what = "start-up" if result.start_s is None else f"case {result.warmup_cases + done}"
        result.failures.append(f"warm pool {what}: {type(exc).__name__}: {exc}")
        _log(f"  ranks={world_size} warm pool {what}: FAILED")
    finally:
        pool.close()
    result.cases = len(walls)
    if walls:
        ms = [w * 1e3 for w in walls]
        result.median_ms = statistics.median(ms)
        result.p90_ms = percentile(ms, 90)
        result.min_ms = min(ms)
        result.max_ms = max(ms)
        result.in_rank_median_ms = statistics.median(s * 1e3 for s in in_rank)
    if result.start_s is not None:
        _log(f"  ranks={world_size} warm pool: start {result.start_s:.2f} s, {result.cases} cases,"
             f" median {_fmt(result.median_ms, '.2f')} ms")
    return result


# --------------------------------------------------------------------------- report
def environment(backend: str) -> dict[str, Any]:
    """What the figures depend on, recorded next to them."""
    from realgpu.environment import host_run_facts, process_environment

    return {**process_environment(backend), **host_run_facts(REPO_ROOT), "pool_backend": backend,
            "spawn_backend": "gloo",
            "payload": f"all_reduce of {NUMEL} float32 ({NUMEL * 4} bytes), result checked exactly"}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_table(results: list[WorldResult], fork_server_s: float | None, backend: str) -> str:
    """A plain-text table: one row per world size."""
    header = ("ranks", "spawn med s", "spawn min s", "n", "pool start s", "warm med ms", "warm p90 ms",
              "in-rank med ms", "n", "spawn/warm")
    rows = [header]
    for r in results:
        rows.append((
            str(r.world_size), _fmt(r.spawn.median_s, ".2f"), _fmt(r.spawn.min_s, ".2f"), str(r.spawn.cases),
            _fmt(r.pool.start_s, ".2f"), _fmt(r.pool.median_ms, ".2f"), _fmt(r.pool.p90_ms, ".2f"),
            _fmt(r.pool.in_rank_median_ms, ".2f"), str(r.pool.cases),
            "-" if r.spawn_over_warm is None else f"{r.spawn_over_warm:,.0f}x",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(f"spawn: spawn start method + FileStore + gloo per case; warm pool: RankPool backend {backend!r}.")
    if fork_server_s is not None:
        lines.append(f"fork server start (imports torch once per controller, not in 'pool start'):"
                     f" {fork_server_s:.2f} s")
    lines.append("warm ms: controller wall clock of pool.run (dispatch + collective + result back);"
                 " in-rank ms: inside fn on the slowest rank.")
    return "\n".join(lines)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _reap_leftovers() -> list[str]:
    """Kill and name any child process this script still owns (there should be none)."""
    leftovers = []
    for proc in multiprocessing.active_children():
        leftovers.append(f"{proc.name} (pid {proc.pid})")
        proc.kill()
        proc.join(5.0)
    return leftovers


def _stop_multiprocessing_helpers() -> None:
    """Stop and reap the fork server and resource tracker multiprocessing started for us.

    Left alone they exit on their own once this process has gone (EOF on their pipes), i.e.
    just after the script; stopping them here means nothing at all outlives it. These are
    CPython's own stop hooks (used by its test suite), hence the guards.
    """
    from multiprocessing import forkserver, resource_tracker

    for helper in (getattr(forkserver, "_forkserver", None), getattr(resource_tracker, "_resource_tracker", None)):
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            try:
                stop()
            except (OSError, ChildProcessError):
                pass


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="world sizes (default: 2 4)")
    parser.add_argument("--cases", type=int, default=200, help="recorded warm-pool cases per world size")
    parser.add_argument("--warmup", type=int, default=5, help="unrecorded warm-pool cases first (default 5)")
    parser.add_argument("--spawn-cases", type=int, default=3,
                        help="spawn-per-case cases per world size (default 3; 0 skips them)")
    parser.add_argument("--backend", default="gloo",
                        help="warm pool backend: gloo (default), sim, or a registered backend name")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds allowed for one case, spawn or warm (default 120)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures and environment as JSON")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.ranks):
        parser.error("--ranks must be >= 1")
    if args.cases < 1 or args.warmup < 0 or args.spawn_cases < 0:
        parser.error("--cases must be >= 1, --warmup and --spawn-cases >= 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        make_binding(args.backend)  # fail before anything is started if the backend is missing
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    env = environment(args.backend)
    _log(f"torch {env['torch']}, python {env['python']}, {env['usable_cpus']} usable CPUs;"
         f" warm pool backend {args.backend!r}")
    failures: list[str] = []
    results: list[WorldResult] = []
    fork_server_s: float | None = None
    try:
        try:
            fork_server_s = warm_fork_server(args.backend)
            _log(f"fork server + 1-rank pool started in {fork_server_s:.2f} s")
        except Exception as exc:  # noqa: BLE001 - the backend cannot run a case: stop here
            failures.append(f"warm pool 1-rank check: {type(exc).__name__}: {exc}")
        if not failures:
            for world_size in args.ranks:
                spawn = measure_spawn(world_size, args.spawn_cases, args.timeout)
                pool = measure_pool(world_size, args.backend, args.cases, args.warmup, args.timeout)
                ratio = None
                if spawn.median_s is not None and pool.median_ms:
                    ratio = spawn.median_s / (pool.median_ms / 1e3)
                results.append(WorldResult(world_size, spawn, pool, ratio))
                failures += spawn.failures + pool.failures
    finally:
        leftovers = _reap_leftovers()
        _stop_multiprocessing_helpers()
    if leftovers:
        failures.append(f"processes left running (killed): {', '.join(leftovers)}")

    print(render_table(results, fork_server_s, args.backend))
    if failures:
        print(f"\n{len(failures)} FAILURE(S):", file=sys.stderr)
        for failure in failures:
            print(f"- {failure}", file=sys.stderr)
    if args.json:
        report = {"environment": env, "settings": {k: v for k, v in vars(args).items() if k != "json"},
                  "fork_server_start_s": fork_server_s, "results": [asdict(r) for r in results],
                  "failures": failures, "ok": not failures}
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        _log(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
