"""The pytest integration for users' suites (simgpu/testing.py): the `ranks` fixture and the world_size marker.

In-process tests use the fixture as a user would (the plugin comes from the package's entry point);
the user's view of pytest's output (xdist, a failing rank, a bad marker, faults across tests, the
README's example) is checked in one pytest subprocess, started with this module.
Functions named `rank_*` run on the ranks.
"""
from __future__ import annotations

import os
import re
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from simgpu import Binding, RankPool, RankPoolError, faults
from simgpu.outcomes import RanksFailed
from realgpu.leases import Lease
from simgpu.testing import FunctionRef, Ranks, _call_on_rank, _skip_without_gpus, _sys_path_root
from tests.processes import REPO, child_env, run_bounded, run_once

MISMATCH = "simgpu.strict.CollectiveMismatch"


# ----------------------------------------------------------------------------- on the ranks
def rank_sum(ctx, base):
    import torch
    import torch.distributed as dist

    t = torch.tensor([base + ctx.rank], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t)
    return {"rank": ctx.rank, "world": ctx.world_size, "sum": t.item(), "pid": os.getpid()}


def rank_devices(ctx):
    import torch

    return str(ctx.device), str(torch.ones(1, device=ctx.device).device)


def rank_skip(ctx, skipping):
    if ctx.rank in skipping:
        pytest.skip(f"rank {ctx.rank} has nothing to do")
    return ctx.rank


def rank_mismatch(ctx):
    import torch
    import torch.distributed as dist

    t = torch.ones(2, device=ctx.device)
    if ctx.rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)


def rank_armed(ctx):
    return [fault.describe() for fault, _ in faults.armed()]


# ----------------------------------------------------------------------------- the fixture in-process
@pytest.mark.world_size(1, 3)
def test_every_rank_value_comes_back_per_world_size(ranks, request) -> None:
    n = ranks.world_size
    assert request.node.callspec.id == f"ws{n}"
    values = ranks.run(rank_sum, 10)
    assert [(v["rank"], v["world"], v["sum"]) for v in values] == [(r, n, 10 * n + n * (n - 1) // 2)
                                                                   for r in range(n)]


def test_without_the_marker_two_ranks(ranks, request) -> None:
    assert ranks.world_size == 2 and not hasattr(request.node, "callspec")
    assert ranks.backend == "sim"


def test_each_rank_works_on_its_own_device(ranks) -> None:
    for rank, (device, tensor_device) in enumerate(ranks.run(rank_devices)):
        assert tensor_device == device
        assert device == f"cuda:{rank}"  # nccl: the rank's GPU; sim: its simulated GPU (simgpu.cuda_sim)


def test_a_skip_on_every_rank_skips_and_a_partial_skip_fails(ranks) -> None:
    with pytest.raises(pytest.skip.Exception, match="every rank skipped; rank 0: rank 0 has nothing to do"):
        ranks.run(rank_skip, [0, 1])
    with pytest.raises(RanksFailed, match=r"ranks disagree about skipping: \[1\] skipped, \[0\] ran"):
        ranks.run(rank_skip, [1])


def test_mismatched_collectives_fail_at_once_on_every_rank(ranks) -> None:
    ranks.run(rank_sum, 0)  # ranks warm: the time below is the check's, not the start-up's
    start = time.monotonic()
    with pytest.raises(RanksFailed) as err:
        ranks.run(rank_mismatch)
    assert time.monotonic() - start < 10  # the strict deadline is 30 s, the pool's 60 s
    assert [o.error_type for o in err.value.outcomes] == [MISMATCH, MISMATCH]
    text = str(err.value)
    for rank in (0, 1):
        assert f"rank {rank}: {MISMATCH}: simgpu: ranks of the default group" in text
    assert "rank 0: all_reduce, rank 1: broadcast" in text
    assert ranks.run(rank_sum, 0)[0]["sum"] == 1  # still in step for the next test


def test_a_killed_rank_is_named_and_the_next_call_gets_fresh_ranks(ranks) -> None:
    before = {v["pid"] for v in ranks.run(rank_sum, 0)}
    assert ranks.inject(faults.kill(1, at=2)) == ["kill on rank 1 at its 2nd collective"]
    ranks.run(rank_sum, 0)
    with pytest.raises(RankPoolError) as err:
        ranks.run(rank_sum, 0)
    assert err.value.kind == "crash" and err.value.cause_ranks == [1]
    assert "rank 1 was killed by SIGKILL" in str(err.value)
    after = ranks.run(rank_sum, 0)
    assert not before & {v["pid"] for v in after} and ranks.run(rank_armed) == [[], []]


def test_faults_that_did_not_fire_are_disarmed_after_the_test(ranks) -> None:
    ranks.inject(faults.raise_(1, at=1))
    assert ranks.run(rank_armed) == [[], ["raise RuntimeError on rank 1 at its 1st collective"]]
    ranks.disarm()  # what the fixture's teardown does
    assert ranks.run(rank_armed) == [[], []] and ranks.run(rank_sum, 0)[1]["sum"] == 1


def test_inject_names_the_bad_argument(ranks) -> None:
    with pytest.raises(TypeError, match="simgpu.faults.Fault objects, got str"):
        ranks.inject("kill rank 1")
    with pytest.raises(ValueError, match=r"names rank 2 \(kill on rank 2 at its 1st collective\), "
                                         r"but the test runs on 2 ranks"):
        ranks.inject(faults.kill(2))


def test_inject_skips_off_the_simulator() -> None:
    runner = Ranks(RankPool(2, Binding("gloo")))  # never started: the skip comes first
    with pytest.raises(pytest.skip.Exception, match="needs the sim backend; this run uses --simgpu-backend=gloo"):
        runner.inject(faults.kill(1))


def test_functions_the_ranks_cannot_import_are_refused(ranks) -> None:
    def local(ctx):
        return ctx.rank

    with pytest.raises(TypeError, match="local is defined inside a function or is a lambda"):
        ranks.run(local)
    with pytest.raises(TypeError, match="lambda"):
        ranks.run(lambda ctx: ctx.rank)


def test_a_module_off_sys_path_loads_on_the_ranks_with_rewritten_asserts(ranks, tmp_path) -> None:
    name = f"simgpu_user_module_{os.getpid()}_{time.monotonic_ns()}"
    path = tmp_path / f"{name}.py"
    path.write_text("def check(ctx, expected):\n    assert ctx.rank == expected\n    return ctx.rank\n")
    ref = FunctionRef(name, "check", str(path), None, rewrite=True)
    outcomes = ranks.pool.run(_call_on_rank, ref, (0,))
    assert outcomes[0].ok and outcomes[0].value == 0
    assert outcomes[1].error_type == "AssertionError" and outcomes[1].error.startswith("assert 1 == 0")


def test_sys_path_root_of_a_module() -> None:
    assert _sys_path_root("pkg.test_x", "/a/b/pkg/test_x.py") == "/a/b"
    assert _sys_path_root("pkg", "/a/b/pkg/__init__.py") == "/a/b"
    assert _sys_path_root("tests.test_x", "/a/b/pkg/test_x.py") is None
    assert _sys_path_root("test_x", None) is None


def test_a_test_needing_more_gpus_than_the_lease_holds_is_skipped() -> None:
    lease = Lease(gpus=("2",), visible=("0", "1", "2", "3"), worker=1, workers=4)
    _skip_without_gpus(SimpleNamespace(stash=pytest.Stash()), SimpleNamespace(lease=lease), 1)
    with pytest.raises(pytest.skip.Exception, match="needs 2 GPUs; xdist worker 1 of 4 holds 1 GPU"):
        _skip_without_gpus(SimpleNamespace(stash=pytest.Stash()), SimpleNamespace(lease=lease), 2)


# ----------------------------------------------------------------------------- users' files in subprocesses
BROKEN = '''
    import torch
    import torch.distributed as dist


    def my_broadcast(ctx):
        t = torch.tensor([float(ctx.rank)], device=ctx.device)
        dist.broadcast(t, src=0)
        assert t.item() == ctx.rank  # the bug: after a broadcast from rank 0 every rank holds 0.0


    def test_broadcast_keeps_my_rank(ranks):
        ranks.run(my_broadcast)
'''
ACROSS_TESTS = '''
    import os

    import torch
    import torch.distributed as dist

    from simgpu import faults

    PIDS = {}


    def steps(ctx, n):
        for _ in range(n):
            dist.all_reduce(torch.ones(2, device=ctx.device))
        return os.getpid()


    def test_1_arms_a_fault_that_never_fires(ranks):
        ranks.inject(faults.raise_(1, at=1))


    def test_2_runs_clean(ranks):
        PIDS["before"] = set(ranks.run(steps, 2))


    def test_3_loses_rank_1(ranks):
        ranks.inject(faults.kill(1, at=2))
        ranks.run(steps, 3)


    def test_4_gets_fresh_ranks(ranks):
        assert not PIDS["before"] & set(ranks.run(steps, 2))
'''
BAD_MARKER = '''
    import pytest


    @pytest.mark.world_size("4")
    def test_bad(ranks):
        pass
'''


def _run_user_suite(tmp: Path) -> dict:
    """One pytest run over a user's suite (the three files above) and the project's examples/, under xdist
    (`-n 2 --dist loadfile`: each file's tests in order on one worker); its exit code and output."""
    for name, text in [("test_broken.py", BROKEN), ("test_across_tests.py", ACROSS_TESTS),
                       ("test_bad_marker.py", BAD_MARKER)]:
        (tmp / name).write_text(textwrap.dedent(text).lstrip())
    done = run_bounded([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "--rootdir", str(tmp),
                        "-n", "2", "--dist", "loadfile", "--continue-on-collection-errors", str(tmp),
                        str(REPO / "examples")], 240, cwd=tmp, env=child_env())
    return {"rc": done.returncode, "out": done.stdout + done.stderr}


@pytest.fixture
def user_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str]:
    """The user suite's result, run once for all the tests that read it."""
    result = run_once(tmp_path_factory, "user_suite", _run_user_suite)
    return result["rc"], result["out"]


def test_the_examples_pass_under_xdist(user_run: tuple[int, str]) -> None:
    rc, out = user_run
    assert re.search(r"\b2 failed, 13 passed, 1 skipped, [12] errors?\b", out), out[-4000:]
    assert not re.search(r"^(FAILED|ERROR) \S*(test_my_allreduce|test_ranks_guide)", out, re.M), out[-4000:]
    passed = re.findall(r"^PASSED \S*?((?:test_my_allreduce|test_ranks_guide)\.py::\S+)", out, re.M)
    assert "test_my_allreduce.py::test_allreduce_sums_every_rank[ws4]" in passed, out[-4000:]
    assert len(passed) == 10, passed
    assert re.search(r"^SKIPPED \[1\] \S*test_ranks_guide.py:\d+: every rank skipped; rank 0: ranks pair up", out,
                     re.M), out[-4000:]  # the skip is reported at the user's test, not inside simgpu


def test_a_wrong_value_on_rank_1_names_rank_1_and_shows_its_assertion(user_run: tuple[int, str]) -> None:
    rc, out = user_run
    assert rc == pytest.ExitCode.TESTS_FAILED, out[-4000:]
    failure = out.split("_ test_broadcast_keeps_my_rank _", 1)[1].split("short test summary")[0]
    assert "RanksFailed: 1 of 2 rank(s) failed; rank 1 first (AssertionError)" in failure, out[-4000:]
    assert "rank 0: passed" in failure and "rank 1: AssertionError: assert 0.0 == 1" in failure
    assert "assert t.item() == ctx.rank  # the bug" in failure  # rank 1's source line, from its traceback
    assert "simgpu/outcomes.py" not in failure.split("--- rank 1 traceback ---")[0]  # no plumbing frames
    traceback = failure.split("--- rank 1 traceback ---", 1)[1].splitlines()
    assert "test_broken.py\", line " in traceback[2] and "in my_broadcast" in traceback[2]  # the user's frame first
    assert "simgpu/rank.py" not in failure and "_call_on_rank" not in failure  # the rank's plumbing is folded away


def test_faults_stay_in_their_test_and_a_killed_rank_is_replaced(user_run: tuple[int, str]) -> None:
    rc, out = user_run
    for name in ("test_1_arms_a_fault_that_never_fires", "test_2_runs_clean", "test_4_gets_fresh_ranks"):
        assert re.search(rf"^PASSED \S*test_across_tests.py::{name}$", out, re.M), out[-4000:]
    assert re.search(r"^FAILED \S*test_across_tests.py::test_3_loses_rank_1 ", out, re.M), out[-4000:]
    failure = out.split("_ test_3_loses_rank_1 _", 1)[1]
    assert "RankPoolError: rank pool crash: rank 1 was killed by SIGKILL" in failure, out[-4000:]


def test_a_bad_world_size_marker_is_a_collection_error_naming_the_test(user_run: tuple[int, str]) -> None:
    rc, out = user_run
    assert ("test_bad_marker.py::test_bad: @pytest.mark.world_size takes world sizes as ints >= 1, "
            "got ('4',)") in out, out[-4000:]


def test_the_readme_example_is_the_examples_file() -> None:
    """The README's few lines are examples/test_my_allreduce.py, which the xdist run above executes."""
    readme = (REPO / "README.md").read_text()
    example = (REPO / "examples" / "test_my_allreduce.py").read_text()
    body = example.split('"""', 2)[2].strip()
    assert textwrap.indent(body, "    ") in readme  # an indented code block


def test_the_guide_code_runs_in_the_examples() -> None:
    """Every test shown in docs/testing-your-code.md stands, as written, in a file under examples/."""
    guide = (REPO / "docs" / "testing-your-code.md").read_text()
    examples = "\n".join(p.read_text() for p in (REPO / "examples").glob("test_*.py"))
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    shown = [b for b in blocks if "def test_" in b]
    assert shown, "the guide shows no test"
    for block in shown:
        assert block.strip() in examples, block
