"""The host's side of a plan's step time: eager PyTorch issues every op and collective from Python,
and a GPU that finishes its queue faster than the host fills it waits (small models, TP's DTensor
dispatch, FSDP2's per-module hooks). A plan's step is the longer of its GPU timeline (plan.Recorder)
and the host's launch time:

    host_us = ops x OP_US + collectives x COLLECTIVE_US + messages x P2P_US
    step_us = max(gpu_step_us, host_us)

OP_US and COLLECTIVE_US are fitted (`fit`) on the recorded H200 runs of benchmarks/plan_reference/
step_reference.py (measured in benchmarks/results/plan33-h200-x4-2026-11-26, planned in
plan33-rates-2core-2026-11-27: 3 sizes x 5-6 layouts at 2 and 4 GPUs, the pipeline layout left out), by
`benchmarks/plan_reference/host_fit.py`, which reprints them with the ratios before and after. COLLECTIVE_US is not NCCL's launch alone (tens of
microseconds): it is the host work a collective stands for in these programs -- FSDP2's pre/post hooks
and copy-in/out around each all-gather and reduce-scatter, DTensor's redistribution around TP's
all-reduces, DDP's reducer around each bucket -- which scales with the collective count in every layout
measured. An op's own launch fits at a few microseconds (the ops of these programs mostly overlap with
their GPU time). Fitted on one host CPU (the H200 box's) with torch 2.11: another host, another torch
or a compiled program (torch.compile, CUDA graphs) launches differently.

P2P_US, a point-to-point message (a send or a recv; counted under --ranks, where messages are priced),
is fitted the same way on the pipeline rows of those runs (step_reference's `pp`: 2 stages under 1F1B,
planned with --ranks so that stages wait for each other), with OP_US and COLLECTIVE_US held (`fit_p2p`): what is left
of a pipeline's step once its bubbles are on the GPU timeline is the host work each message stands for
in torch.distributed.pipelining -- the schedule's per-microbatch forward_one_chunk/backward_one_chunk
(autograd.backward of the stage's outputs), the P2POp lists and batch_isend_irecv's coalescing around
each message -- not NCCL's launch of it (tens of microseconds). Checked on 2-stage pipelines only: on
llama_3d.py's 4-stage pipeline and pipeline x FSDP the model gives 0.32-0.47 of the H200's step
(docs/plan-mode.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

OP_US = 4.0  # host time to issue one priced aten op (fitted; docs/plan-mode.md)
COLLECTIVE_US = 1950.0  # host time per collective, with the Python machinery around it (fitted)
P2P_US = 2300.0  # host time per point-to-point message in a pipeline schedule (fitted on the pp rows)
SOURCE = "fitted on 4x H200 step_reference runs (plan33-h200-x4-2026-11-26, plan33-rates-2core-2026-11-27, host_fit.py)"


@dataclass(frozen=True)
class Row:
    """One measured step: what the plan counted and predicted for a rank, and what the GPU took."""
    ops: int
    collectives: int
    gpu_step_us: float  # the plan's GPU timeline for the step (compute and exposed communication)
    measured_us: float
    p2p: int = 0  # point-to-point messages (sends and recvs) of the step


def host_us(ops: int, collectives: int, op_us: float = OP_US, collective_us: float = COLLECTIVE_US,
            p2p: int = 0, p2p_us: float = P2P_US) -> float:
    """The host's time to issue a step's ops, collectives and point-to-point messages."""
    if ops < 0 or collectives < 0 or p2p < 0:
        raise ValueError(f"plan_host.host_us: counts must be >= 0, got ops={ops}, collectives={collectives}, p2p={p2p}")
    return ops * op_us + collectives * collective_us + p2p * p2p_us


def step_us(gpu_step_us: float, ops: int, collectives: int, op_us: float = OP_US,
            collective_us: float = COLLECTIVE_US, p2p: int = 0, p2p_us: float = P2P_US) -> float:
    """A step's time: the GPU's timeline unless the host issues slower than the GPU runs."""
    return max(gpu_step_us, host_us(ops, collectives, op_us, collective_us, p2p, p2p_us))


def typical_error(ratios: Iterable[float]) -> float:
    """exp(mean |log ratio|) - 1: the geometric-mean relative error, over and under alike."""
    logs = [abs(math.log(r)) for r in ratios]
    if not logs:
        raise ValueError("plan_host.typical_error: no ratios")
    return math.exp(sum(logs) / len(logs)) - 1


def ratios(rows: Sequence[Row], op_us: float, collective_us: float, p2p_us: float = P2P_US) -> list[float]:
    """predicted / measured for each row under the given constants."""
    return [step_us(r.gpu_step_us, r.ops, r.collectives, op_us, collective_us, r.p2p, p2p_us) / r.measured_us
            for r in rows]


def fit(rows: Sequence[Row], op_grid: Sequence[float] = tuple(float(u) for u in range(0, 101)),
        collective_grid: Sequence[float] = tuple(25.0 * k for k in range(0, 161))) -> tuple[float, float, float]:
    """The (op_us, collective_us) on the grids that minimise the typical error over `rows`, and that
    error. A grid search: the model is a max of two linear terms, not differentiable where they cross."""
    if not rows:
        raise ValueError("plan_host.fit: no rows to fit")
    best: tuple[float, float, float] | None = None
    for op_us in op_grid:
        for collective_us in collective_grid:
            error = typical_error(ratios(rows, op_us, collective_us))
            if best is None or error < best[2] - 1e-12:
                best = (op_us, collective_us, error)
    assert best is not None
    return best


def fit_p2p(rows: Sequence[Row], op_us: float = OP_US, collective_us: float = COLLECTIVE_US,
            grid: Sequence[float] = tuple(25.0 * k for k in range(0, 201))) -> tuple[float, float]:
    """The p2p_us on the grid that minimises the typical error over `rows` (pipeline rows), the other two
    constants held; and that error."""
    if not rows:
        raise ValueError("plan_host.fit_p2p: no rows to fit")
    best: tuple[float, float] | None = None
    for p2p_us in grid:
        error = typical_error(ratios(rows, op_us, collective_us, p2p_us))
        if best is None or error < best[1] - 1e-12:
            best = (p2p_us, error)
    assert best is not None
    return best
