"""Run one drawn Case on a rank pool and decide what happened, against the oracle and the support table.

Outcomes (the capability report's vocabulary):
  pass          worked and every member rank matches the oracle
  rejected      raised the error the backend's table names, on every member rank
  FAIL          wrong values, the wrong error, ranks that disagree, an accepted case the table rejects
  should-work   raised on every rank although the table says the backend supports it
  unsupported   (probed backends only) raised the same error type on every member rank
  broken        the pool crashed or hung (a rank died, or never came back)
  known         a failure that matches a confirmed defect in conformance/findings.py
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from conformance.backends import Profile
from conformance.spec import Case, CollectiveSpec, Reject
from simgpu.in_step import ensure_in_step
from simgpu.pool import RankOutcome, RankPool, RankPoolError

FAILING = ("FAIL", "should-work", "broken")


@dataclass
class CaseResult:
    outcome: str
    detail: str
    layout: str

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING


def execute(pool: RankPool, spec: CollectiveSpec, case: Case, profile: Profile | None) -> CaseResult:
    """Run the case on every rank and classify the result (never raises for a rank's error)."""
    expected = _expectation(spec, case, profile)
    try:
        outcomes = pool.run(spec.run, case)
    except RankPoolError as exc:
        return CaseResult("broken", str(exc), case.layout)
    members = [outcomes[r] for r in case.participants]
    errors = [o for o in members if not o.ok]
    if any(o is not None and not o.ok for o in outcomes) and pool.binding.backend != "sim":
        if _leaves_process_stuck(spec, outcomes):
            pool.close(force=True)  # the next call starts fresh ranks
        else:
            ensure_in_step(pool)
    if not errors:
        return _judge_success(spec, case, members, expected, profile)
    if len(errors) < len(members):
        return CaseResult("FAIL", "ranks disagree: " + "; ".join(o.describe() for o in members), case.layout)
    return _judge_errors(errors, expected, profile, case)


# Errors after which ProcessGroupNCCL (torch 2.11) leaves the process's NCCL state half-open: a
# torch::cuda::nccl helper throwing between ncclGroupStart and ncclGroupEnd ("Unconvertible NCCL type"),
# an error inside batch_isend_irecv's coalescing, or an NCCL error. Later collectives of that process
# then silently do nothing, which the in-step all_reduce cannot see on one rank (finding
# nccl-silent-after-grouped-error); such ranks are replaced instead.
_STUCK_ERRORS = re.compile(r"Unconvertible NCCL type|Tensors for P2P|NCCL error|DistBackendError")
_P2P = frozenset({"send_recv", "isend_irecv", "batch_isend_irecv"})


def _leaves_process_stuck(spec: CollectiveSpec, outcomes: list[RankOutcome]) -> bool:
    failed = [o for o in outcomes if o is not None and not o.ok]
    return spec.name in _P2P or any(_STUCK_ERRORS.search(f"{o.error_type} {o.error}") for o in failed)


def _expectation(spec: CollectiveSpec, case: Case, profile: Profile | None) -> Reject | None:
    return spec.expect(profile, case) if profile is not None else None


def _judge_success(spec: CollectiveSpec, case: Case, members: list[RankOutcome], expected: Reject | None,
                   profile: Profile | None) -> CaseResult:
    if expected is not None:
        return CaseResult("FAIL", f"accepted, but {profile.name} must raise {'/'.join(expected.errors)}"
                                  f" ({expected.reason})", case.layout)
    damaged = [f"rank {r}: wrote outside the view: " + "; ".join(o.value["outside_view"])
               for r, o in zip(case.participants, members) if isinstance(o.value, dict) and o.value.get("outside_view")]
    if damaged:
        return CaseResult("FAIL", "wrong result: " + "; ".join(damaged), case.layout)
    flavor = profile.flavor if profile is not None else "nccl"
    verdicts = spec.check(case, [o.value for o in members], flavor)
    bad = [f"rank {r}: {v.message}" for r, v in zip(case.participants, verdicts) if not v.ok]
    if bad:
        return CaseResult("FAIL", "wrong result: " + "; ".join(bad), case.layout)
    return CaseResult("pass", "", case.layout)


def _judge_errors(errors: list[RankOutcome], expected: Reject | None, profile: Profile | None,
                  case: Case) -> CaseResult:
    first = errors[0]
    said = f"{first.error_type.rsplit('.', 1)[-1]}: {_first_line(first.error)}"
    if profile is None:
        if len({o.error_type for o in errors}) == 1:
            return CaseResult("unsupported", said, case.layout)
        return CaseResult("FAIL", "ranks raised different errors: " + "; ".join(o.describe() for o in errors),
                          case.layout)
    if expected is None:
        tb = (first.traceback or "").rstrip().splitlines()[-8:]
        return CaseResult("should-work", f"{said}\n" + "\n".join(tb), case.layout)
    wrong = [o for o in errors if not expected.matches(o.error_type, o.error)]
    if wrong:
        return CaseResult("FAIL", f"expected {'/'.join(expected.errors)} matching /{expected.pattern}/"
                                  f" ({expected.reason}); got " + "; ".join(o.describe() for o in wrong), case.layout)
    return CaseResult("rejected", said, case.layout)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:200] if text and text.strip() else ""
