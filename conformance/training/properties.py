"""The training properties, one entry each: how cases are drawn, the smallest world, the judge.

Each is one row of the capability report (property x dtype x optimizer) and one pytest test per
dtype (conformance/test_training.py, selected by `-k ddp`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from conformance.training import strategies
from conformance.training.case import TrainingCase
from conformance.training.check import check_naive_mean, check_training
from conformance.training.oracle import reference


@dataclass(frozen=True)
class TrainingProperty:
    name: str
    cases: Callable[..., TrainingCase]   # (draw, world_size, dtype) -> TrainingCase
    judge: Callable[[TrainingCase, list[dict]], list[str]]   # every rank's result -> failure lines
    min_world: int = 1
    doc: str = ""


def _whole_batch(case: TrainingCase, outputs: list[dict]) -> list[str]:
    return check_training(case, outputs, reference(case, global_mean=True))


def _naive(case: TrainingCase, outputs: list[dict]) -> list[str]:
    return check_naive_mean(case, outputs, reference(case, global_mean=False))


PROPERTIES = {p.name: p for p in (
    TrainingProperty("ddp_equivalence", strategies.equivalence_case, _whole_batch, 1,
                     "DDP on n ranks, loss weighted by shard size, equals one process on the whole batch "
                     "(step-1 gradients, parameters after k steps); replicas bitwise equal; rank 0's "
                     "parameters and buffers win over perturbed replicas"),
    TrainingProperty("ddp_uneven_naive_mean", strategies.naive_mean_case, _naive, 2,
                     "each rank's plain mean over an uneven split gives the per-rank-weighted gradient "
                     "the split rule predicts, which lies more than 10 tolerances from the whole-batch mean"),
    TrainingProperty("ddp_unused_parameters", strategies.unused_case, _whole_batch, 1,
                     "find_unused_parameters=True with a branch used by some ranks or none: averaged "
                     "gradients where used anywhere, None and untouched parameters where used nowhere"),
    TrainingProperty("ddp_no_sync", strategies.no_sync_case, _whole_batch, 1,
                     "micro-batches under no_sync() accumulate locally (ranks differ), the last backward "
                     "synchronises: the whole-batch gradient"),
)}
