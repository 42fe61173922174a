"""Isolation and blame you can trust (issue 28). Every call starts from quiescent ranks: a call that
leaves a collective or point-to-point op pending fails itself, naming the rank, the op and its line, and
the ranks are replaced, so no call's outcome depends on the calls before it on the same warm pool. A
rank that dies after the last answer fails an xdist run too; with default settings a hung or departed
rank is named; two ranks that both send first are a P2PDeadlock; nothing the ranks start outlives
the session."""
from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simgpu.pool import Binding, RankPool
from tests import isolation_fns as fns

SIM = Binding("sim", init_timeout=60.0)


def _pool(world_size: int) -> RankPool:
    return RankPool(world_size, SIM, timeout=60.0, straggler_grace=2.0, quiesce_grace=1.0)


def _line_of(marker: str) -> int:
    with open(fns.__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line)


def test_a_leftover_async_collective_fails_its_own_call_not_the_next() -> None:
    with _pool(2) as pool:
        starts = pool.starts
        leak = pool.run(fns.one_rank_async, 0)
        assert leak[1].ok and not leak[0].ok and leak[0].poisoned
        assert leak[0].error_type == "simgpu.pool.UnfinishedOperations"
        assert "rank 0 left 1 operation(s) pending" in leak[0].error
        assert f"all_reduce(float32[1], op=SUM) at tests/isolation_fns.py:{_line_of('leak-site')}" in leak[0].error
        after = pool.run(fns.all_reduce_token, 1.0)
        assert [o.value for o in after] == [2.0, 2.0]  # not 101: the leftover is gone with the old ranks
        assert pool.starts == starts + 1


def test_an_unmatched_send_fails_its_call_and_the_next_is_clean() -> None:
    with _pool(2) as pool:
        leak = pool.run(fns.unmatched_isend, 1, 0)
        assert leak[0].ok and not leak[1].ok and "send(float32[1], dst=0) at tests/isolation_fns.py" in leak[1].error
        assert [o.value for o in pool.run(fns.ring_exchange)] == [1, 0]


def test_ops_every_rank_issued_end_on_their_own() -> None:
    with _pool(2) as pool:
        starts = pool.starts
        assert all(o.ok for o in pool.run(fns.all_issue_never_wait))
        assert [o.value for o in pool.run(fns.all_reduce_token, 3.0)] == [6.0, 6.0] and pool.starts == starts


# ----------------------------------------------------------------------------- property
def _call(world: int) -> st.SearchStrategy:
    rank = st.integers(0, world - 1)
    return st.one_of(
        st.tuples(st.just("all_reduce_token"), st.integers(1, 9).map(float)),
        st.tuples(st.just("ring_exchange")),
        st.tuples(st.just("all_issue_never_wait")),
        st.tuples(st.just("one_rank_async"), rank),
        st.tuples(st.just("unmatched_isend"), rank, rank).filter(lambda c: c[1] != c[2]),
        st.tuples(st.just("mismatch")),
        st.tuples(st.just("raise_on"), rank),
    )


def _expected(call: tuple, world: int) -> list[Any]:
    """What each rank gives on fresh ranks: its value, or the name of the error it raises."""
    name, *args = call
    if name == "all_reduce_token":
        return [args[0] * world] * world
    if name == "ring_exchange":
        return [(r - 1) % world for r in range(world)]
    if name == "all_issue_never_wait":
        return ["issued"] * world
    if name in ("one_rank_async", "unmatched_isend"):
        bad = args[0]
        return ["UnfinishedOperations" if r == bad else "returned" for r in range(world)]
    if name == "mismatch":
        return ["CollectiveMismatch"] * world
    return ["RuntimeError" if r == args[0] else "returned" for r in range(world)]


_POOLS: dict[int, RankPool] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_pools():
    yield
    for pool in _POOLS.values():
        pool.close(force=True)


@settings(max_examples=6, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.integers(2, 4).flatmap(lambda w: st.tuples(st.just(w), st.lists(_call(w), min_size=2, max_size=4))))
def test_no_call_depends_on_the_calls_before_it(world_and_calls: tuple) -> None:
    world, calls = world_and_calls
    pool = _POOLS.setdefault(world, _pool(world))  # warm across examples: what one leaves, the next meets
    for call in calls:
        outcomes = pool.run(getattr(fns, call[0]), *call[1:])
        got = [o.value if o.ok else (o.error_type or "").rsplit(".", 1)[-1] for o in outcomes]
        assert got == _expected(call, world), f"{call} after {calls[:calls.index(call)]}"


# ----------------------------------------------------------------------------- after the last test, under xdist
@pytest.mark.parametrize("dist", ["loadfile", "load", "each"])
def test_a_rank_dying_after_the_last_answer_fails_an_xdist_run(tmp_path, dist: str) -> None:
    """The worker finds the death when its pools close; the controller's exit status and report say so."""
    import subprocess
    import sys
    import textwrap

    from tests.processes import child_env
    from tests.test_pool_interrupted import DYING_RANKS

    (tmp_path / "test_dying.py").write_text(textwrap.dedent(DYING_RANKS).lstrip())
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist", dist,
                           "-k", "the_last_tests_rank_dies", "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path,
                          env=child_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out[-4000:]
    passed = "2 passed" if dist == "each" else "1 passed"  # --dist each runs the test on both workers
    assert passed in out and "a rank failed after the last test's answer" in out, out[-4000:]
    assert "rank 1 exited with code 7 after answering call #1 (test_dying.rank_exit_later)" in out, out[-4000:]


# ----------------------------------------------------------------------------- blame with default settings
def test_default_strict_deadline_sits_below_the_calls(monkeypatch) -> None:
    from simgpu import settings

    monkeypatch.delenv("SIMGPU_STRICT_TIMEOUT", raising=False)
    assert settings.strict_deadline_below(60.0) == "30"  # the ranks fixture's default: the documented 30 s
    assert settings.strict_deadline_below(10.0) == "5"
    assert settings.strict_deadline_below(10.0, {"SIMGPU_STRICT_TIMEOUT": "7"}) is None  # the user's wins


def test_a_quiet_hang_is_blamed_on_the_hung_rank_by_default(monkeypatch) -> None:
    from simgpu.pool import RankPoolError

    monkeypatch.delenv("SIMGPU_STRICT_TIMEOUT", raising=False)
    with RankPool(3, SIM, timeout=12.0, straggler_grace=1.0) as pool:
        with pytest.raises(RankPoolError) as info:
            pool.run(fns.quiet_hang, 2)
    err = info.value
    assert err.kind == "timeout" and err.cause_ranks == [2] and err.collateral_ranks == [0, 1], str(err)
    assert "rank(s) [2] did not arrive" in str(err)


def test_a_rank_that_returns_early_is_named_by_default(monkeypatch) -> None:
    from simgpu.outcomes import RanksFailed, values_or_raise

    monkeypatch.delenv("SIMGPU_STRICT_TIMEOUT", raising=False)
    with RankPool(2, SIM, timeout=12.0, straggler_grace=1.0) as pool:
        outcomes = pool.run(fns.return_early, 1)
    assert outcomes[1].ok and outcomes[0].error_type == "simgpu.strict.CollectiveTimeout"
    with pytest.raises(RanksFailed, match=r"cause: rank\(s\) \[1\], which never reached the collective"):
        values_or_raise(outcomes)


def test_simgpu_run_names_the_hung_rank_before_its_timeout(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.processes import child_env

    env = child_env()
    env.pop("SIMGPU_STRICT_TIMEOUT", None)
    script = Path(__file__).parent / "sim_scripts" / "blame.py"
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--gpus", "2", "--timeout", "120", str(script), "hang",
                           str(tmp_path / "rendezvous")], env=env, capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode not in (0, 124), done.stderr[-3000:]  # the program failed; it was not killed at 120 s
    assert "CollectiveTimeout" in done.stderr and "rank(s) [1] did not arrive" in done.stderr, done.stderr[-3000:]


# ----------------------------------------------------------------------------- two ranks that both send first
@pytest.mark.parametrize("numel", [1, 1 << 20])  # 4 bytes and 4 MiB
def test_two_ranks_that_both_send_first_raise_p2p_deadlock(numel: int) -> None:
    with _pool(2) as pool:
        outcomes = pool.run(fns.both_send_first, numel)
        assert [o.error_type for o in outcomes] == ["simgpu.p2p_pairs.P2PDeadlock"] * 2, [o.describe() for o in outcomes]
        line = _line_of("send-first-site")
        for o in outcomes:
            assert "rank 0 send(dst=1) at tests/isolation_fns.py:%d waits for rank 1" % line in o.error, o.error
            assert "rank 1 send(dst=0) at tests/isolation_fns.py:%d waits for rank 0" % line in o.error, o.error
        assert [o.value for o in pool.run(fns.send_then_recv_paired, numel)] == [1.0, 0.0]


def test_simgpu_run_reports_two_ranks_that_both_send_first(tmp_path) -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.processes import child_env

    script = Path(__file__).parent / "sim_scripts" / "blame.py"
    done = subprocess.run([sys.executable, "-m", "simgpu", "run", "--gpus", "2", "--timeout", "120", str(script),
                           "send_first", str(tmp_path / "rendezvous"), "1"], env=child_env(), capture_output=True,
                          text=True, timeout=300, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode not in (0, 124), done.stderr[-3000:]
    assert "P2PDeadlock" in done.stderr and "rank 0 send(dst=1)" in done.stderr, done.stderr[-3000:]


# ----------------------------------------------------------------------------- nothing the ranks start outlives the session
ESCAPING_CHILDREN = '''
    import subprocess


    def start_escapees(ctx, pidfile):
        """A child in a new session (setsid) and a double-forked one (its parent shell exits at once)."""
        setsid = subprocess.Popen(["setsid", "sleep", "300"])
        out = subprocess.run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
        with open(f"{pidfile}.{ctx.rank}", "w") as f:
            f.write(f"{setsid.pid} {out.stdout.strip()}")
        return ctx.rank


    def test_ranks_start_children_that_escape_their_group(ranks, tmp_path_factory):
        assert ranks.run(start_escapees, PIDFILE) == [0, 1]
'''


def test_the_ranks_fixture_reaps_what_its_ranks_started(tmp_path) -> None:
    import subprocess
    import sys
    import textwrap

    from tests.processes import all_gone, child_env

    pidfile = tmp_path / "pids"
    (tmp_path / "test_escape.py").write_text(f"PIDFILE = {str(pidfile)!r}\n" + textwrap.dedent(ESCAPING_CHILDREN))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-p", "no:xdist",
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, env=child_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pids = [int(p) for rank in (0, 1) for p in (tmp_path / f"pids.{rank}").read_text().split()]
    assert len(pids) == 4
    try:
        assert all_gone(pids, within=10.0), [p for p in pids if os.path.exists(f"/proc/{p}")]
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
