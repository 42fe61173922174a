"""Turn every rank's outcome into one test verdict: a test passes only if every rank passed.

A skip must be unanimous (every rank skipped: the test is skipped with rank 0's reason); ranks that
disagree about skipping, or any rank that failed, fail the test with a line per rank, the rank that
failed first named as the cause.
"""
from __future__ import annotations

from typing import Any

from simgpu import tracebacks
from simgpu.pool import RankOutcome

SKIP_TYPES = ("Skipped", "SkipTest")  # pytest.skip (its class says it lives in builtins), unittest


def _skipped(o: RankOutcome) -> bool:
    return not o.ok and (o.error_type or "").rsplit(".", 1)[-1] in SKIP_TYPES


class RanksFailed(AssertionError):
    """One or more ranks failed (or ranks disagreed about skipping); the message has every rank's line."""

    def __init__(self, summary: str, outcomes: list[RankOutcome]):
        self.outcomes = outcomes
        lines = [summary] + [f"  {_line(o)}" for o in outcomes]
        for ranks, shown in _tracebacks(outcomes):
            lines.append(f"  --- rank {ranks[0]} traceback ---" if len(ranks) == 1
                         else f"  --- ranks {', '.join(map(str, ranks))}: the same traceback ---")
            lines.extend("    " + ln for ln in shown)
        super().__init__("\n".join(lines))


def _tracebacks(outcomes: list[RankOutcome]) -> list[tuple[list[int], list[str]]]:
    """Each failing rank's traceback, simgpu's frames folded, shown once for all ranks whose folded
    tracebacks are identical (a collective that fails everywhere the same way is one story)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for o in outcomes:
        if not o.ok and o.traceback and not _skipped(o):
            groups.setdefault(tuple(tracebacks.shown(o.traceback)), []).append(o.rank)
    return [(ranks, list(shown)) for shown, ranks in groups.items()]


def _line(o: RankOutcome) -> str:
    if o.ok:
        return f"rank {o.rank}: passed"
    if _skipped(o):
        return f"rank {o.rank}: skipped ({o.error})"
    return f"rank {o.rank}: {o.error_type}: {(o.error or '').splitlines()[0] if o.error else ''}"


def values_or_raise(outcomes: list[RankOutcome]) -> list[Any]:
    """Every rank's return value; pytest.skip if every rank skipped; RanksFailed otherwise."""
    skipped = [o for o in outcomes if _skipped(o)]
    failed = [o for o in outcomes if not o.ok and not _skipped(o)]
    if failed:
        first = min(failed, key=lambda o: o.seconds)  # the fastest to fail is the likeliest cause
        missing = sorted({r for o in failed for r in o.missing_ranks or ()})
        blame = (f"; cause: rank(s) {missing}, which never reached the collective the others waited in"
                 if missing and all(o.missing_ranks for o in failed) else "")
        raise RanksFailed(f"{len(failed)} of {len(outcomes)} rank(s) failed; rank {first.rank} first "
                          f"({first.error_type}){blame}", outcomes)
    if skipped and len(skipped) < len(outcomes):
        raise RanksFailed(f"ranks disagree about skipping: {[o.rank for o in skipped]} skipped, "
                          f"{[o.rank for o in outcomes if o.ok]} ran", outcomes)
    if skipped:
        import pytest

        pytest.skip(f"every rank skipped; rank 0: {skipped[0].error}")
    return [o.value for o in outcomes]
