"""Every rank accounted for: skips must be unanimous, any failing rank fails the test, and an
exception that dies in a rank's background thread fails the call even though the function returned."""
from __future__ import annotations

import pytest

from simgpu.outcomes import RanksFailed, values_or_raise
from simgpu.pool import Binding, RankPool
from tests import rank_fns


@pytest.fixture(scope="module")
def pool():
    with RankPool(3, Binding("gloo"), timeout=30) as p:
        yield p


def test_all_ranks_passing_gives_every_value(pool):
    assert values_or_raise(pool.run(rank_fns.skip_on, [])) == ["ran"] * 3


def test_unanimous_skip_skips(pool):
    with pytest.raises(pytest.skip.Exception, match="every rank skipped; rank 0: rank 0 has no GPU"):
        values_or_raise(pool.run(rank_fns.skip_on, [0, 1, 2]))


def test_split_skip_is_an_error_showing_the_disagreement(pool):
    with pytest.raises(RanksFailed) as info:
        values_or_raise(pool.run(rank_fns.skip_on, [1]))
    text = str(info.value)
    assert "ranks disagree about skipping: [1] skipped, [0, 2] ran" in text
    assert "rank 1: skipped (rank 1 has no GPU of the right kind)" in text and "rank 0: passed" in text


def test_one_failing_rank_fails_the_test_and_is_named(pool):
    with pytest.raises(RanksFailed) as info:
        values_or_raise(pool.run(rank_fns.raise_on, 2, "only rank 2 is wrong"))
    text = str(info.value)
    assert "1 of 3 rank(s) failed; rank 2 first" in text
    assert "rank 2: tests.rank_fns.RankFailure: only rank 2 is wrong" in text and "--- rank 2 traceback ---" in text


def test_background_thread_exception_fails_the_call(pool):
    outcomes = pool.run(rank_fns.leak_thread_exception, 1)
    assert outcomes[0].ok and outcomes[2].ok
    assert not outcomes[1].ok and outcomes[1].error_type == "simgpu.rank.BackgroundThreadError"
    assert "leaky-worker" in outcomes[1].error and "background failure on rank 1" in outcomes[1].error
    with pytest.raises(RanksFailed, match="rank 1 first"):
        values_or_raise(outcomes)
    # reported once: the next call on the same ranks is clean
    assert values_or_raise(pool.run(rank_fns.skip_on, [])) == ["ran"] * 3
