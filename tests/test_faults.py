"""Fault injection (simgpu/faults.py) on sim ranks of a warm pool: each fault kind and what it looks like.

Functions named `rank_*` run on the ranks (RankPool calls fn(ctx, *args)); the tests run in the controller.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from simgpu import faults
from simgpu.pool import Binding, RankPool, RankPoolError
from tests.processes import all_gone, running

MISMATCH = "simgpu.strict.CollectiveMismatch"
SEEN_PIDS: set[int] = set()


# ----------------------------------------------------------------------------- on the ranks
def rank_all_reduce(ctx, dtype_name="float32", times=1):
    """`times` SUM all_reduces of [rank + 1, 10 * (rank + 1)]; the last result and this rank's pid."""
    import torch
    import torch.distributed as dist

    t = None
    for _ in range(times):
        t = torch.tensor([ctx.rank + 1, 10 * (ctx.rank + 1)], dtype=getattr(torch, dtype_name))
        dist.all_reduce(t)
    return {"result": t.tolist(), "pid": os.getpid()}


def rank_sequence(ctx, ops):
    """Run the collectives named in `ops` one after another; per call "ok" or the exception's type name."""
    import torch
    import torch.distributed as dist

    results = []
    for name in ops:
        t = torch.ones(3)
        try:
            if name == "all_reduce":
                dist.all_reduce(t)
            elif name == "broadcast":
                dist.broadcast(t, src=0)
            elif name == "barrier":
                dist.barrier()
            results.append("ok")
        except Exception as exc:  # noqa: BLE001 - reported per call
            results.append(type(exc).__name__)
    return results


def rank_logged_all_reduces(ctx, log_dir, times):
    """all_reduce `times` times, appending the number of each finished call to <log_dir>/rank<r>."""
    import torch
    import torch.distributed as dist

    with open(Path(log_dir) / f"rank{ctx.rank}", "a") as log:
        for i in range(1, times + 1):
            dist.all_reduce(torch.ones(2))
            log.write(f"{i}\n")
            log.flush()
    return os.getpid()


def rank_in_process_faults(ctx):
    """install/injected/clear in the rank itself: a one-rank-only raise inside a with-block."""
    import torch
    import torch.distributed as dist

    out = {}
    with faults.injected(faults.raise_(0, ValueError, "in-process", op="barrier"),
                         faults.delay(1, 0.01, op="barrier")):
        out["armed_inside"] = len(faults.armed())
        if ctx.rank == 0:
            try:
                dist.barrier()
            except ValueError as exc:
                out["raised"] = str(exc)
        else:
            try:
                dist.barrier()
            except Exception as exc:  # noqa: BLE001
                out["raised"] = type(exc).__name__
    out["armed_after"] = len(faults.armed())
    dist.all_reduce(torch.ones(1))  # the group still works afterwards
    return out


def rank_pid(ctx):
    return os.getpid()


def rank_armed(ctx):
    return len(faults.armed())


# ----------------------------------------------------------------------------- controller side
@pytest.fixture(scope="module")
def pool():
    p = RankPool(2, Binding("sim"), timeout=20.0, straggler_grace=2.0)
    p.start()
    yield p
    SEEN_PIDS.update(p.pids())
    p.close()


def arm(pool, *fs):
    """Install faults on the pool's ranks (each rank takes its own); remember the pids for the final check."""
    pool.run(faults.clear_on_rank)
    SEEN_PIDS.update(pool.pids())
    return [o.value for o in pool.run(faults.install_on_rank, list(fs))]


def test_fault_json_round_trip_and_validation():
    fs = [faults.kill(1, at=3, op="all_reduce"), faults.delay(0, 0.5), faults.raise_(1, KeyError, "m"),
          faults.hang(0, at=2), faults.corrupt(1, amount=7.0)]
    assert faults.from_json(faults.to_json(*fs)) == fs
    assert faults.env_pair(fs[0]) == ("SIMGPU_FAULTS", '[{"rank": 1, "action": "kill", "at": 3, "op": "all_reduce"}]')
    assert fs[2].exc_type == "KeyError"
    assert faults.raise_(0, RankPoolError).exc_type == "simgpu.pool.RankPoolError"
    with pytest.raises(ValueError, match="unknown action"):
        faults.Fault(0, "explode")
    with pytest.raises(ValueError, match="counts collectives from 1"):
        faults.kill(0, at=0)
    with pytest.raises(ValueError, match="unknown fault field"):
        faults.from_json('[{"rank": 0, "action": "kill", "when": 2}]')


def test_kill_is_a_crash_of_that_rank_and_the_next_call_gets_fresh_ranks(pool):
    assert arm(pool, faults.kill(1)) == [[], ["kill on rank 1 at its 1st collective"]]
    old = pool.pids()
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_all_reduce)  # 20 s call timeout: a crash is seen at once, not at the deadline
    err = info.value
    assert err.kind == "crash" and err.cause_ranks == [1] and "SIGKILL" in err.summary
    outcomes = pool.run(rank_all_reduce)
    assert [o.value["result"] for o in outcomes] == [[3.0, 30.0]] * 2
    assert set(pool.pids()).isdisjoint(old)
    SEEN_PIDS.update(pool.pids())


def test_delay_slows_that_rank_and_the_collective_still_succeeds(pool):
    arm(pool, faults.delay(0, 1.0))
    outcomes = pool.run(rank_all_reduce)
    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    assert [o.value["result"] for o in outcomes] == [[3.0, 30.0]] * 2
    assert outcomes[0].seconds >= 1.0
    assert outcomes[1].seconds >= 0.9  # rank 1 waited for the straggler in the collective
    assert pool.run(rank_armed)[0].value == 0  # fired once: nothing left armed


def test_raise_fails_that_rank_and_the_others_fail_fast(pool):
    arm(pool, faults.raise_(1, ValueError, "injected trouble"))
    outcomes = pool.run(rank_all_reduce)  # rank 0 fails with a mismatch, not a strict timeout: it did not wait
    assert not outcomes[1].ok and outcomes[1].error_type == "ValueError" and outcomes[1].error == "injected trouble"
    assert not outcomes[0].ok and outcomes[0].error_type == MISMATCH
    assert "rank 1 refused its call before communicating: ValueError: injected trouble" in outcomes[0].error
    # the group is still in step: the next call works on the same ranks
    pids = pool.pids()
    assert [o.value["result"] for o in pool.run(rank_all_reduce)] == [[3.0, 30.0]] * 2
    assert pool.pids() == pids


def test_raise_default_names_the_fault(pool):
    arm(pool, faults.raise_(0, op="all_reduce"))
    outcomes = pool.run(rank_all_reduce)
    assert outcomes[0].error_type == "RuntimeError"
    assert outcomes[0].error == ("simgpu fault injected: raise RuntimeError on rank 0 at its 1st all_reduce "
                                 "(here: all_reduce, rank 0)")
    assert outcomes[1].error_type == MISMATCH


def test_a_quiet_hang_blames_the_hung_rank_after_the_strict_timeout():
    """With the strict timeout shorter than the call's, rank 0 raises CollectiveTimeout first; the rank
    it names as missing (the hung one) is the cause, as the README's fault table says (issue 19, item 3)."""
    binding = Binding("sim", env=(("SIMGPU_STRICT_TIMEOUT", "1"),))
    with RankPool(2, binding, timeout=60.0, straggler_grace=1.0) as strict_pool:
        SEEN_PIDS.update(strict_pool.pids())
        arm(strict_pool, faults.hang(1, at=2))
        with pytest.raises(RankPoolError) as info:
            strict_pool.run(rank_all_reduce, "float32", 3)
        err = info.value
        assert err.kind == "timeout" and err.cause_ranks == [1] and err.collateral_ranks == [0], str(err)
        assert err.outcomes[0] is not None and err.outcomes[0].error_type == "simgpu.strict.CollectiveTimeout"
        assert err.outcomes[0].missing_ranks == [1]
        assert "rank(s) [1] never reached the collective" in err.summary
        assert "_hang_injected_fault" in err.stacks[1]
        assert strict_pool.run(rank_all_reduce)[0].ok  # fresh ranks


def test_hang_is_a_timeout_with_the_fault_in_that_rank_stack(pool):
    arm(pool, faults.hang(1))
    with pytest.raises(RankPoolError) as info:
        pool.run(rank_all_reduce, timeout=2.0)
    err = info.value
    # Both ranks are still running at the deadline (rank 0 waits in the strict check for rank 1).
    assert err.kind == "timeout" and 1 in err.cause_ranks
    assert "_hang_injected_fault" in err.stacks[1] and "faults.py" in err.stacks[1]
    assert "_hang_injected_fault" not in err.stacks[0] and "strict.py" in err.stacks[0]
    assert pool.run(rank_all_reduce)[0].ok


@pytest.mark.parametrize("dtype, amount, expected", [
    ("float32", None, [3.0 + 1024.0, 30.0 + 1024.0]),
    ("float64", -0.5, [2.5, 29.5]),
    ("int64", None, [4, 31]),
    ("int32", 100, [103, 130]),
    ("bfloat16", 64.0, [67.0, 94.0]),  # 1024 + 2 would round in bfloat16 (8-bit mantissa)
    ("float16", None, [1027.0, 1054.0]),
])
def test_corrupt_changes_the_result_by_exactly_the_corruption_on_every_rank(pool, dtype, amount, expected):
    arm(pool, faults.corrupt(1, amount=amount))
    outcomes = pool.run(rank_all_reduce, dtype)
    assert [o.value["result"] for o in outcomes] == [expected, expected]
    assert [o.value["result"] for o in pool.run(rank_all_reduce, dtype)] == [[3, 30], [3, 30]]  # fired once


def test_corrupt_bool_flips(pool):
    arm(pool, faults.corrupt(0))
    # bool SUM is OR: rank 0's [True, True] becomes [False, False]; rank 1 sends [True, True]
    assert pool.run(rank_all_reduce, "bool")[0].value["result"] == [True, True]
    arm(pool, faults.corrupt(0), faults.corrupt(1))
    assert [o.value["result"] for o in pool.run(rank_all_reduce, "bool")] == [[False, False]] * 2


def test_fault_fires_exactly_at_the_kth_call(pool):
    ops = ["broadcast", "all_reduce", "barrier", "all_reduce", "all_reduce"]
    arm(pool, faults.raise_(1, at=2, op="all_reduce"))
    outcomes = pool.run(rank_sequence, ops)
    assert outcomes[1].value == ["ok", "ok", "ok", "RuntimeError", "ok"]
    assert outcomes[0].value == ["ok", "ok", "ok", "CollectiveMismatch", "ok"]
    arm(pool, faults.raise_(0, at=3))  # any collective: the barrier is the third
    outcomes = pool.run(rank_sequence, ops)
    assert outcomes[0].value == ["ok", "ok", "RuntimeError", "ok", "ok"]
    assert outcomes[1].value == ["ok", "ok", "CollectiveMismatch", "ok", "ok"]


def test_counting_starts_at_install(pool):
    pool.run(rank_all_reduce, "float32", 3)  # earlier collectives of the warm ranks do not count
    arm(pool, faults.corrupt(0, at=2))
    assert [o.value["result"] for o in pool.run(rank_all_reduce, "float32", 1)] == [[3.0, 30.0]] * 2
    assert [o.value["result"] for o in pool.run(rank_all_reduce, "float32", 1)] == [[1027.0, 1054.0]] * 2


def test_install_injected_and_clear_in_the_rank_itself(pool):
    pool.run(faults.clear_on_rank)
    outcomes = pool.run(rank_in_process_faults)
    assert outcomes[0].value == {"armed_inside": 2, "raised": "in-process", "armed_after": 0}
    assert outcomes[1].value == {"armed_inside": 2, "raised": "CollectiveMismatch", "armed_after": 0}


def test_env_var_form_in_a_fresh_pool(tmp_path):
    binding = Binding("sim", env=(faults.env_pair(faults.kill(1, at=2, op="all_reduce")),))
    with RankPool(2, binding, timeout=20.0, straggler_grace=2.0) as env_pool:
        SEEN_PIDS.update(env_pool.pids())
        with pytest.raises(RankPoolError) as info:
            env_pool.run(rank_logged_all_reduces, str(tmp_path), 4)
        assert info.value.kind == "crash" and info.value.cause_ranks == [1]
        assert (tmp_path / "rank1").read_text() == "1\n"  # the first all_reduce worked, the second killed it
        # every fresh set of ranks reads the environment again: the fault is armed again
        pids = env_pool.pids() or [o.value for o in env_pool.run(rank_pid)]
        SEEN_PIDS.update(pids)
        with pytest.raises(RankPoolError):
            env_pool.run(rank_logged_all_reduces, str(tmp_path), 4)
        env_pool.run(faults.clear_on_rank)
        SEEN_PIDS.update(env_pool.pids())
        assert [o.ok for o in env_pool.run(rank_logged_all_reduces, str(tmp_path), 4)] == [True, True]


def test_no_rank_process_is_left(pool):
    SEEN_PIDS.update(pool.pids())
    pool.close()
    assert SEEN_PIDS
    assert all_gone(sorted(SEEN_PIDS), within=5.0), [p for p in SEEN_PIDS if running(p)]

