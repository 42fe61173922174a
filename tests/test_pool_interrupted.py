"""A call into a RankPool is read in full or the pool is replaced: no call ever receives another call's
replies (issue 19, item 1), and a rank that dies after answering fails a call, naming the call it
answered (item 2).

Interruptions come from a real signal (as pytest-timeout's and Ctrl-C's do) and, in the property
test, from any point of the controller's side of a call: sending to a rank, waiting, reading a
rank's reply. Replies fail in every way a rank can fail them: an exception, a value the rank
cannot pickle, one the controller cannot unpickle, an exception whose __str__ raises.
"""
from __future__ import annotations

import itertools
import signal
import time
from contextlib import contextmanager
from typing import Any, Iterator
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simgpu import pool as pool_module
from simgpu import protocol
from simgpu.pool import Binding, RankPool, RankPoolError
from tests import rank_fns
from tests.processes import all_gone

GLOO = Binding("gloo", init_timeout=60.0)
KINDS = ["ok", "raise", "unpicklable", "unloadable", "unprintable"]
_tokens = itertools.count(1000)


@pytest.fixture(scope="module")
def pool() -> Iterator[RankPool]:
    p = RankPool(2, GLOO, timeout=60.0, straggler_grace=5.0)
    yield p
    p.close(force=True)


class Interrupted(Exception):
    """What the signal handler raises, as pytest-timeout's signal method does."""


def _expect_in_step(pool: RankPool) -> None:
    """The next call gets its own replies, every rank's."""
    token = next(_tokens)
    assert [o.value for o in pool.run(rank_fns.answer, ["ok"] * pool.world_size, token)] == \
        [(r, token) for r in range(pool.world_size)]


def test_a_signal_during_a_call_replaces_the_ranks(pool: RankPool) -> None:
    _expect_in_step(pool)
    old = pool.pids()

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted("the test's time is up")

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(Interrupted):
            pool.run(rank_fns.answer, ["ok", "ok"], next(_tokens), 3.0)  # the replies come after the signal
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not pool.alive and all_gone(old, within=10.0)
    _expect_in_step(pool)  # before issue 19's fix: the interrupted call's values came back here


def test_an_unloadable_reply_fails_that_rank_and_the_pool_stays_in_step(pool: RankPool) -> None:
    _expect_in_step(pool)
    pids = pool.pids()
    token = next(_tokens)
    first, second = pool.run(rank_fns.answer, ["ok", "unloadable"], token)
    assert first.ok and first.value == (0, token)
    assert not second.ok and second.error_type == "simgpu.protocol.UnreadableReply"
    assert "could not unpickle rank 1's reply" in second.error and "cannot be rebuilt here" in second.error
    _expect_in_step(pool)
    assert pool.pids() == pids


def test_an_unpicklable_argument_names_its_rank_and_sends_nothing(pool: RankPool) -> None:
    _expect_in_step(pool)
    pids = pool.pids()
    with pytest.raises(TypeError, match=r"cannot send tests\.rank_fns\.echo to rank 1: .*nothing was sent"):
        pool.run_per_rank(rank_fns.echo, [(1,), (lambda: 0,)])
    _expect_in_step(pool)
    assert pool.pids() == pids


def test_an_exception_whose_str_raises_is_still_reported(pool: RankPool) -> None:
    _expect_in_step(pool)
    pids = pool.pids()
    first, second = pool.run(rank_fns.answer, ["ok", "unprintable"], 1)
    assert first.ok and not second.ok
    assert second.error_type == "tests.rank_fns.UnprintableError"
    assert "its __str__ raised RuntimeError: __str__ of UnprintableError is broken" in second.error
    assert pool.pids() == pids  # the rank survived and answered


@contextmanager
def _interrupt_at(where: str, nth: int) -> Iterator[None]:
    """Raise KeyboardInterrupt at the nth send / wait / reply-read of the controller (where="none": never)."""
    module, name = {"send": (protocol, "send"), "wait": (pool_module, "wait"),
                    "recv": (protocol, "recv_bytes")}.get(where, (None, None))
    if module is None:
        yield
        return
    original = getattr(module, name)
    seen = itertools.count(1)

    def interrupting(*args: Any, **kwargs: Any) -> Any:
        if next(seen) == nth:
            raise KeyboardInterrupt(f"injected at {where} #{nth}")
        return original(*args, **kwargs)

    with mock.patch.object(module, name, interrupting):
        yield


def _check_outcomes(outcomes: list, kinds: list[str], token: int) -> None:
    """An uninterrupted call's outcomes are exactly its own, rank by rank."""
    for rank, (out, kind) in enumerate(zip(outcomes, kinds)):
        assert out.rank == rank
        if kind == "ok":
            assert out.ok and out.value == (rank, token), out
        elif kind == "raise":
            assert not out.ok and out.error == f"rank {rank} refuses call {token}", out
        elif kind == "unpicklable":
            assert not out.ok and "pickle" in out.error, out
        elif kind == "unloadable":
            assert not out.ok and out.error_type == "simgpu.protocol.UnreadableReply", out
        else:
            assert not out.ok and out.error_type == "tests.rank_fns.UnprintableError", out


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=2, max_size=2),
       where=st.sampled_from(["none", "send", "wait", "recv"]), nth=st.integers(1, 3),
       slow=st.booleans())
def test_no_call_ever_receives_another_calls_replies(pool: RankPool, kinds: list[str], where: str, nth: int,
                                                      slow: bool) -> None:
    token = next(_tokens)
    try:
        with _interrupt_at(where, nth):
            outcomes = pool.run(rank_fns.answer, kinds, token, 0.05 if slow else 0.0)
    except KeyboardInterrupt:
        assert not pool.alive  # interrupted: torn down, never reused
    except RankPoolError:
        assert not pool.alive
    else:
        _check_outcomes(outcomes, kinds, token)
    _expect_in_step(pool)


# ----------------------------------------------------------------------------- ranks that die after answering
def _wait_dead(pool: RankPool, rank: int) -> None:
    """Until the pool itself can see that `rank` exited (its exit status reached the fork server)."""
    process = pool._ranks[rank].process
    deadline = time.monotonic() + 30.0
    while process.is_alive():
        assert time.monotonic() < deadline, f"rank {rank} still running"
        time.sleep(0.02)


def test_a_rank_that_died_after_answering_fails_the_next_call_naming_the_call_it_answered(pool: RankPool) -> None:
    _expect_in_step(pool)
    assert pool.run(rank_fns.exit_after_answer, 1, 7, 0.2)[1].value == "answered"
    answered = pool.calls
    _wait_dead(pool, 1)
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_fns.echo)
    err = info.value
    assert err.kind == "crash" and err.cause_ranks == [1] and err.collateral_ranks == [0]
    assert f"rank 1 exited with code 7 after answering call #{answered} (tests.rank_fns.exit_after_answer)" \
        in err.summary
    assert not pool.alive
    _expect_in_step(pool)


def test_check_alive_between_calls_fails_with_the_dead_rank(pool: RankPool) -> None:
    _expect_in_step(pool)
    pool.run(rank_fns.exit_after_answer, 0, 9, 0.2)
    _wait_dead(pool, 0)
    with pytest.raises(RankPoolError, match="rank 0 exited with code 9 after answering"):
        pool.check_alive()
    assert not pool.alive


def test_close_reports_a_rank_that_died_after_the_last_answer() -> None:
    p = RankPool(2, GLOO, timeout=60.0)
    try:
        p.run(rank_fns.exit_after_answer, 1, 7, 0.2)
        pids = p.pids()
        _wait_dead(p, 1)
        with pytest.raises(RankPoolError, match=r"rank 1 exited with code 7 after answering call #1 .*when the pool "
                                                r"closed") as info:
            p.close()
        assert info.value.cause_ranks == [1]
        assert not p.alive and all_gone(pids, within=10.0)
    finally:
        p.close(force=True)


DYING_RANKS = '''
    import os
    import threading
    import time

    import pytest

    PIDS = []


    def rank_exit_later(ctx, after_s):
        if ctx.rank == 1:
            threading.Timer(after_s, os._exit, (7,)).start()
        return ctx.rank


    def wait_gone(pid):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in "ZX":
                        return
            except (ProcessLookupError, FileNotFoundError):
                return
            time.sleep(0.02)


    @pytest.fixture(scope="session")
    def outlive():
        yield
        for pid in PIDS:  # after the last test's teardown: only the pool's close can see the death
            wait_gone(pid)


    def test_a_rank_dies_after_answering(ranks):
        assert ranks.run(rank_exit_later, 0.2) == [0, 1]
        wait_gone(ranks.pool.pids()[1])


    def test_b_the_last_tests_rank_dies_after_its_teardown(outlive, ranks):
        assert ranks.run(rank_exit_later, 1.0) == [0, 1]
        PIDS.append(ranks.pool.pids()[1])
'''


def test_a_dying_rank_fails_its_own_test_and_a_dying_last_test_fails_the_run(tmp_path) -> None:
    import subprocess
    import sys
    import textwrap

    from tests.processes import child_env

    (tmp_path / "test_dying.py").write_text(textwrap.dedent(DYING_RANKS).lstrip())
    env = child_env()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "-p", "no:xdist",
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out[-4000:]
    assert "ERROR at teardown of test_a_rank_dies_after_answering" in out, out[-4000:]
    assert "rank 1 exited with code 7 after answering call #1 (test_dying.rank_exit_later)" in out, out[-4000:]
    assert "a rank failed after the last test's answer" in out, out[-4000:]
    assert "rank 1 exited with code 7 after answering call #2 (test_dying.rank_exit_later) (found when the pool " \
           "closed)" in out, out[-4000:]
