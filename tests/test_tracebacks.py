"""A failing rank's traceback shows the user's frame first, simgpu's plumbing folded into one line,
and ranks that failed identically share one traceback (simgpu/tracebacks.py, simgpu/outcomes.py)."""
from __future__ import annotations

import os

import simgpu
import torch

from simgpu import tracebacks
from simgpu.outcomes import RanksFailed
from simgpu.protocol import RankOutcome

SIMGPU = os.path.dirname(simgpu.__file__)
TORCH = os.path.dirname(torch.__file__)
USER = "/srv/project/tests/test_model.py"


def frame(path: str, line: int, fn: str, source: str) -> str:
    return f'  File "{path}", line {line}, in {fn}\n    {source}\n'


def mismatch_traceback(user_line: int) -> str:
    """The shape of a real one (a strict mismatch raised inside dist.all_reduce), as a rank sends it."""
    return ("Traceback (most recent call last):\n"
            + frame(f"{SIMGPU}/rank.py", 252, "_serve", "value = fn(ctx, *args)")
            + "            ^^^^^^^^^^^^^^\n"
            + frame(f"{SIMGPU}/testing.py", 98, "_call_on_rank", "return _lookup(...)(ctx, *args)")
            + frame(USER, user_line, "step", "dist.all_reduce(t)")
            + frame(f"{SIMGPU}/cuda_sim/distributed.py", 53, "collective", "return original(*args, **kwargs)")
            + frame(f"{TORCH}/distributed/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)")
            + frame(f"{TORCH}/distributed/distributed_c10d.py", 3252, "all_reduce", "work.wait()")
            + frame(f"{SIMGPU}/strict.py", 312, "_settle", "raise CollectiveMismatch(...)")
            + "simgpu.strict.CollectiveMismatch: ranks disagree at collective #1\n"
              "  rank | call\n")


def test_the_users_frame_comes_first_and_simgpu_folds_to_one_line() -> None:
    lines = tracebacks.fold(mismatch_traceback(12))
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1] == f'  File "{USER}", line 12, in step'  # rank.py and testing.py are gone
    assert lines[3] == "  ... 4 frame(s) of simgpu and torch folded (innermost: simgpu/strict.py:312)"
    assert lines[4:] == ["simgpu.strict.CollectiveMismatch: ranks disagree at collective #1", "  rank | call"]


def test_torch_frames_that_raise_without_simgpu_stay() -> None:
    """torch rejecting the user's call is the user's business: its frames are kept."""
    text = ("Traceback (most recent call last):\n"
            + frame(f"{SIMGPU}/rank.py", 252, "_serve", "value = fn(ctx, *args)")
            + frame(USER, 5, "step", "dist.all_to_all_single(out, t)")
            + frame(f"{TORCH}/distributed/distributed_c10d.py", 4500, "all_to_all_single", "_check(...)")
            + "ValueError: Tensors must be contiguous\n")
    lines = tracebacks.fold(text)
    assert [ln for ln in lines if ln.startswith("  File")] == [
        f'  File "{USER}", line 5, in step', f'  File "{TORCH}/distributed/distributed_c10d.py", line 4500, '
                                             "in all_to_all_single"]
    assert not any("folded" in ln for ln in lines)


def test_a_failure_inside_simgpu_alone_keeps_a_folded_line() -> None:
    """No user frame at all (e.g. the rank could not import the test module): nothing is dropped silently."""
    text = ("Traceback (most recent call last):\n"
            + frame(f"{SIMGPU}/rank.py", 252, "_serve", "value = fn(ctx, *args)")
            + frame(f"{SIMGPU}/testing.py", 110, "_module_on_rank", "raise ImportError(...)")
            + "ImportError: simgpu.testing: rank 1 could not import test_x\n")
    lines = tracebacks.fold(text)
    assert lines[1] == "  ... 2 frame(s) of simgpu and torch folded (innermost: simgpu/testing.py:110)"
    assert lines[-1].startswith("ImportError: simgpu.testing: rank 1")


def test_text_that_is_not_a_traceback_is_unchanged() -> None:
    assert tracebacks.fold("rank 2 was killed by SIGKILL\n") == ["rank 2 was killed by SIGKILL"]


def test_a_long_traceback_keeps_its_end_and_says_what_was_cut() -> None:
    text = "Traceback (most recent call last):\n" + "".join(
        frame(USER, i, f"level{i}", "deeper()") for i in range(40)) + "RecursionError: too deep\n"
    lines = tracebacks.shown(text)
    assert len(lines) == tracebacks.MAX_LINES + 1
    assert lines[0] == f"({1 + 80 + 1 - tracebacks.MAX_LINES} earlier line(s) cut)" and lines[-1] == "RecursionError: too deep"


def failed(rank: int, tb: str) -> RankOutcome:
    return RankOutcome(rank, False, error_type="simgpu.strict.CollectiveMismatch", error="disagree", traceback=tb,
                       seconds=0.1 * rank)


def test_ranks_that_failed_the_same_way_share_one_traceback() -> None:
    message = str(RanksFailed("3 of 3 rank(s) failed", [failed(0, mismatch_traceback(12)),
                                                         failed(1, mismatch_traceback(12)),
                                                         failed(2, mismatch_traceback(14))]))
    assert "--- ranks 0, 1: the same traceback ---" in message and "--- rank 2 traceback ---" in message
    assert message.count("CollectiveMismatch: ranks disagree at collective #1") == 2  # once per distinct story
    assert "rank.py" not in message and "_call_on_rank" not in message
