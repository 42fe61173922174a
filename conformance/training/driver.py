"""Run one TrainingCase on a rank pool and classify it in the capability report's vocabulary.

DDP training must work on every backend the suite tests, so there is no support table here:
  pass         every rank matched the reference and each other
  FAIL         wrong values, ranks that disagree, or only some ranks raised
  should-work  every rank raised (a backend with a table); `unsupported` for a probed backend
               whose ranks all raised the same error type
  broken       a rank crashed or hung; the pool was replaced
"""
from __future__ import annotations

from dataclasses import dataclass, field

from conformance.backends import Profile
from conformance.driver import CaseResult
from simgpu.in_step import ensure_in_step
from conformance.training.case import TrainingCase
from conformance.training.properties import TrainingProperty
from conformance.training.ranks import train_ddp
from simgpu.pool import RankOutcome, RankPool, RankPoolError

LAYOUT = "-"  # training cases have no tensor layout; the report's key needs one
MAX_LINES = 12


@dataclass
class TrainingResult:
    """The classification, every failure line, and what the ranks returned."""

    result: CaseResult
    lines: list[str] = field(default_factory=list)
    values: list[dict] | None = None


def execute_training(pool: RankPool, prop: TrainingProperty, case: TrainingCase,
                     profile: Profile | None) -> TrainingResult:
    """Train the case on every rank and judge it (never raises for a rank's error)."""
    try:
        outcomes = pool.run(train_ddp, case)
    except RankPoolError as exc:
        return TrainingResult(CaseResult("broken", str(exc), LAYOUT), [str(exc)])
    errors = [o for o in outcomes if not o.ok]
    if errors:
        if pool.binding.backend != "sim":
            ensure_in_step(pool)
        return TrainingResult(_judge_errors(errors, len(outcomes), profile), [o.describe() for o in errors])
    values = [o.value for o in outcomes]
    lines = prop.judge(case, values)
    if lines:
        shown = lines[:MAX_LINES] + ([f"... and {len(lines) - MAX_LINES} more"] if len(lines) > MAX_LINES else [])
        return TrainingResult(CaseResult("FAIL", "; ".join(shown[:2]), LAYOUT), shown, values)
    return TrainingResult(CaseResult("pass", "", LAYOUT), [], values)


def _judge_errors(errors: list[RankOutcome], world: int, profile: Profile | None) -> CaseResult:
    first = errors[0]
    said = f"rank {first.rank}: {first.error_type.rsplit('.', 1)[-1]}: {(first.error or '').strip()[:300]}"
    if len(errors) < world:
        return CaseResult("FAIL", "ranks disagree: " + "; ".join(o.describe() for o in errors)
                          + f"; the other {world - len(errors)} rank(s) finished", LAYOUT)
    if profile is None and len({o.error_type for o in errors}) == 1:
        return CaseResult("unsupported", said, LAYOUT)
    tb = (first.traceback or "").rstrip().splitlines()[-8:]
    return CaseResult("should-work", said + "\n" + "\n".join(tb), LAYOUT)
