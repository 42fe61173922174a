"""RankPool lifecycle (simgpu/pool.py) on real gloo ranks: reuse, per-rank arguments, errors reported per
rank, replacement after a crash or a hang, stack dumps, start failures, and nothing left running.

The functions the ranks run live in tests/rank_fns.py (ranks import them by name).
"""
from __future__ import annotations

import os
import re
import time

import pytest

from simgpu.pool import Binding, RankPool, RankPoolError
from tests import rank_fns
from tests.processes import all_gone, running

GLOO = Binding("gloo", init_timeout=30.0)


@pytest.fixture
def pool():
    p = RankPool(2, GLOO, timeout=10.0, straggler_grace=0.5)
    yield p
    p.close(force=True)


def test_reuse_keeps_the_same_processes(pool: RankPool) -> None:
    first = pool.run(rank_fns.whoami)
    pids = [o.value["pid"] for o in first]
    assert pids == pool.pids() and len(set(pids)) == 2 and os.getpid() not in pids
    assert [o.value["rank"] for o in first] == [0, 1]
    assert all(o.value["world"] == 2 and o.value["backend"] == "gloo" for o in first)
    for i in range(2, 31):
        outcomes = pool.run(rank_fns.whoami)
        assert [o.value["pid"] for o in outcomes] == pids
        assert [o.value["calls"] for o in outcomes] == [i, i]  # state survives between calls
    assert pool.run(rank_fns.gloo_sum, 5)[1].value == [5 + 6, 2]  # the process group is live
    assert pool.starts == 1 and pool.calls == 31 and pool.pids() == pids


def test_per_rank_args(pool: RankPool) -> None:
    outcomes = pool.run_per_rank(rank_fns.echo, [("a", 10), ("b", 20)])
    assert [o.value for o in outcomes] == [(0, "a", 10), (1, "b", 20)]
    same = pool.run(rank_fns.echo, {"k": [1, 2]})
    assert [o.value for o in same] == [(0, {"k": [1, 2]}), (1, {"k": [1, 2]})]
    with pytest.raises(ValueError, match="2 ranks"):
        pool.run_per_rank(rank_fns.echo, [("only one",)])


def test_the_same_arguments_are_pickled_once_unless_they_pass_handles(pool: RankPool) -> None:
    """pool.run gives every rank the same arguments: one pickle for all (a conformance case of megabytes),
    except where the pickle hands over a file descriptor a process may take only once (a tensor): then one
    each, and every rank still gets its tensor."""
    import torch

    from simgpu import protocol

    big = {"data": list(range(1000))}
    shared = protocol.payloads(rank_fns.echo, [(big,)] * 3)
    assert shared[0] is shared[1] is shared[2]
    tensor = torch.arange(4.0)
    own = protocol.payloads(rank_fns.echo, [(tensor,)] * 2)
    assert own[0] is not own[1]
    outcomes = pool.run(rank_fns.echo, tensor)
    assert all(o.ok and o.value[1].tolist() == [0.0, 1.0, 2.0, 3.0] for o in outcomes), [o.describe() for o in outcomes]


def test_exception_on_one_rank_is_reported_not_fatal(pool: RankPool) -> None:
    pids = pool.pids() or [o.value["pid"] for o in pool.run(rank_fns.whoami)]
    outcomes = pool.run(rank_fns.raise_on, 1, "rank one is unhappy")
    assert outcomes[0].ok and outcomes[0].value == "rank 0 fine"
    bad = outcomes[1]
    assert not bad.ok and bad.rank == 1
    assert bad.error_type == "tests.rank_fns.RankFailure"
    assert bad.error == "rank one is unhappy"
    assert "explode_here" in bad.traceback and "raise_on" in bad.traceback and "RankFailure" in bad.traceback
    assert bad.describe().startswith("rank 1: tests.rank_fns.RankFailure: rank one is unhappy")
    # the pool is still the same pool
    assert [o.value["pid"] for o in pool.run(rank_fns.whoami)] == pids and pool.starts == 1


def test_crash_is_reported_and_the_pool_replaced(pool: RankPool) -> None:
    old = [o.value["pid"] for o in pool.run(rank_fns.whoami)]
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_fns.exit_on, 1, 7)
    err = info.value
    assert err.kind == "crash" and err.cause_ranks == [1]
    assert "rank 1 exited with code 7" in str(err)
    assert not pool.alive
    assert all_gone(old)
    again = pool.run(rank_fns.whoami)
    new = [o.value["pid"] for o in again]
    assert all(o.ok for o in again) and not set(new) & set(old)
    assert [o.value["calls"] for o in again] == [1, 1]  # fresh processes
    assert pool.starts == 2


def test_hang_times_out_with_a_stack_dump(pool: RankPool) -> None:
    old = [o.value["pid"] for o in pool.run(rank_fns.whoami)]
    start = time.monotonic()
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_fns.hang_forever_on, 1, timeout=1.0)
    elapsed = time.monotonic() - start
    err = info.value
    assert err.kind == "timeout" and err.cause_ranks == [1] and err.collateral_ranks == [0]
    assert elapsed >= 1.0, elapsed  # not before the deadline (how long after it depends on the machine's load)
    assert "did not finish within 1.0s" in str(err)
    assert "hang_forever" in err.stacks[1] and "hang_forever_on" in err.stacks[1]
    assert "hang_forever" in str(err)
    assert all_gone(old)
    assert [o.value["calls"] for o in pool.run(rank_fns.whoami)] == [1, 1] and pool.starts == 2


def test_hang_after_error_names_the_raising_rank(pool: RankPool) -> None:
    pool.start()
    old = pool.pids()
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_fns.raise_or_block_in_barrier, 1)   # rank 0 waits in a barrier rank 1 never joins
    err = info.value
    assert err.kind == "hang after error"  # straggler_grace ended it: the 10 s call timeout gives kind "timeout"
    assert err.cause_ranks == [1] and err.collateral_ranks == [0]
    assert err.outcomes[1] is not None and err.outcomes[1].error_type == "ValueError"
    assert "rank 1 refuses to join" in str(err)
    assert "blocked_in_barrier" in err.stacks[0]
    assert all_gone(old)
    assert pool.run(rank_fns.gloo_sum, 1)[0].value == [3, 2]  # the replacement's group works


def test_close_leaves_nothing_behind() -> None:
    pool = RankPool(3, GLOO, timeout=10.0)
    outcomes = pool.run(rank_fns.spawn_sleeper)
    sleepers = [o.value for o in outcomes]
    ranks = pool.pids()
    assert all(running(p) for p in ranks + sleepers)
    pool.close()
    assert not pool.alive and pool.pids() == []
    assert all_gone(ranks), [p for p in ranks if running(p)]
    assert all_gone(sleepers), [p for p in sleepers if running(p)]  # the ranks' own children too


def test_close_after_forced_teardown_and_context_manager() -> None:
    with RankPool(2, GLOO, timeout=10.0) as pool:
        pids = pool.pids()
        assert pool.starts == 1 and all(running(p) for p in pids)
    assert all_gone(pids)
    pool.close()  # closing twice is harmless


@pytest.mark.parametrize("binding,named", [
    (Binding("nosuchbackend", init_timeout=30.0), "nosuchbackend"),
    (Binding("gloo", backend_module="tests.no_such_module_here", init_timeout=30.0), "tests.no_such_module_here"),
])
def test_start_failure_names_the_backend_and_the_rank(binding: Binding, named: str) -> None:
    pool = RankPool(2, binding, timeout=10.0)
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_fns.whoami)
    err = info.value
    assert err.kind == "start failure"
    assert named in str(err)
    m = re.search(r"rank (\d) failed to initialise backend '(\w+)'", err.summary)
    assert m is not None, err.summary
    assert err.cause_ranks == [int(m.group(1))] and m.group(2) == binding.backend
    assert not pool.alive and pool.starts == 0


def test_world_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="world_size"):
        RankPool(0, GLOO)


# ----------------------------------------------------------------------------- staying in step
def test_ensure_in_step_keeps_a_healthy_pool():
    from simgpu.in_step import ensure_in_step

    with RankPool(2, Binding("gloo"), timeout=20) as pool:
        pids = pool.pids()
        ensure_in_step(pool)
        assert pool.alive and pool.pids() == pids and pool.starts == 1


def test_ensure_in_step_replaces_ranks_that_answer_wrong():
    """A group whose all_reduce answers wrong (here: the deliberately wrong backend) is not trusted."""
    from simgpu.in_step import ensure_in_step

    with RankPool(2, Binding("wrongsum", "tests.wrong_backend"), timeout=20) as pool:
        pids = pool.pids()
        ensure_in_step(pool)
        assert not pool.alive and all_gone(pids)
