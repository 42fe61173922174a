"""Compare what the ranks hold with the reference, under stated tolerances; every failure names
the rank, the parameter and the step.

Tolerances (docs/training-properties.md has the reasoning and the measurements), eps the dtype's
machine epsilon, ULPS = 100:
- Step-1 gradient of a parameter: max|g - g_ref| <= ULPS * eps * S, S the largest entry of the
  gradient's magnitude bound (oracle.gradient_scale: the backward pass on |W|, |o| + |y|, and
  derivative bounds), the quantity rounding errors are relative to, even where g cancels to ~0.
- Parameters after k steps: max|p - p_ref| <= ULPS * eps * sqrt(k) * max|p_ref - p_0|   (relative
  to the distance trained, a random walk over k steps)
  + 4 * k * eps * max|p_ref|                      (the parameter's rounding: half an ulp a step on the
                                                   ranks and as much in a float64 reference, x4)
  + gain(optimizer, k) * ULPS * eps * S           (step 1's gradient tolerance carried through the
                                                   optimizer: SGD lr (1 + momentum) k^2, Adam lr k^2 / eps_adam).
- Replicas: every rank holds bit-for-bit the same gradients (after a synchronising backward),
  parameters and buffers as rank 0; buffers equal rank 0's initial ones exactly.
- None-ness: a gradient is None on the ranks exactly where the reference says no rank used it.
"""
from __future__ import annotations

import math

import numpy as np

from conformance.training.case import OptimizerSpec, TrainingCase
from conformance.training.oracle import Grads, Params, Reference

ROUNDING = {"float32": float(np.finfo(np.float32).eps), "float64": float(np.finfo(np.float64).eps)}
ULPS = 100  # the docs give the worst seen on the simulator, in units of this bound
GRAD_RTOL = {dtype: ULPS * eps for dtype, eps in ROUNDING.items()}   # float32 1.2e-5, float64 2.2e-14
PARAM_RTOL = dict(GRAD_RTOL)


def _worst(got: np.ndarray, ref: np.ndarray) -> str:
    """Where got is furthest from ref, and both values there."""
    diff = np.abs(got.astype(np.float64) - ref)
    if not diff.size:
        return "max |got - ref| = 0"
    at = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), diff.shape)
    index = [int(i) for i in at]
    return f"max |got - ref| = {diff[at]:.3g} at {index} (got {float(got[at]):.9g}, ref {float(ref[at]):.9g})"


def _presence(where: str, got: np.ndarray | None, ref: np.ndarray | None) -> str | None:
    if (got is None) == (ref is None):
        return None
    return f"{where}: gradient is {'None' if got is None else 'set'}, the reference says " \
           f"{'None (no rank used the parameter)' if ref is None else 'set (some rank used it)'}"


def compare_grads(where: str, got: Grads, ref: Grads, scales: dict[str, float], dtype: str) -> list[str]:
    """Gradients of one rank against the reference: presence, then the bound relative to scales[name]."""
    lines = []
    for name, r in ref.items():
        g = got.get(name)
        label = f"{where}, parameter {name}"
        missing = _presence(label, g, r)
        if missing or r is None:
            lines += [missing] if missing else []
            continue
        allowed = GRAD_RTOL[dtype] * scales[name]
        if not np.all(np.isfinite(g)) or float(np.abs(g.astype(np.float64) - r).max(initial=0.0)) > allowed:
            lines.append(f"{label}: {_worst(g, r)} > allowed {allowed:.3g} "
                         f"({GRAD_RTOL[dtype]:.3g} x magnitude bound {scales[name]:.3g})")
    return lines


def gain(opt: OptimizerSpec, steps: int) -> float:
    """A bound on how much a gradient error moves the parameters over `steps` steps of the optimizer."""
    if opt.name == "adam":
        return opt.lr * steps ** 2 / opt.eps  # |d update / d g| <= lr / eps, where g ~ 0
    return opt.lr * (1 + opt.momentum) * steps ** 2


def param_allowance(ref: np.ndarray, initial: np.ndarray, steps: int, dtype: str, opt: OptimizerSpec,
                    grad_scale: float) -> float:
    """The bound on max|p - p_ref| after `steps` steps (module docstring)."""
    trained = float(np.abs(ref - initial).max(initial=0.0))
    size = float(np.abs(ref).max(initial=0.0))
    return (PARAM_RTOL[dtype] * math.sqrt(steps) * trained + 4 * steps * ROUNDING[dtype] * size
            + gain(opt, steps) * GRAD_RTOL[dtype] * grad_scale)


def compare_params(where: str, got: Params, ref: Reference, case: TrainingCase) -> list[str]:
    lines = []
    for name, r in ref.params.items():
        p = got[name]
        allowed = param_allowance(r, ref.initial[name], case.steps, case.dtype, case.optimizer,
                                  ref.grad_scale.get(name, 0.0))
        if not np.all(np.isfinite(p)) or float(np.abs(p.astype(np.float64) - r).max(initial=0.0)) > allowed:
            lines.append(f"{where}, parameter {name}: {_worst(p, r)} > allowed {allowed:.3g}")
    return lines


def compare_replicas(what: str, values: list[dict], exact_to: dict | None = None) -> list[str]:
    """Every rank's arrays bit-for-bit equal to rank 0's (or to `exact_to`, e.g. initial buffers)."""
    lines = []
    base = values[0] if exact_to is None else exact_to
    whom = "rank 0" if exact_to is None else "rank 0's initial value"
    for rank, arrays in enumerate(values):
        if exact_to is None and rank == 0:
            continue
        for name, b in base.items():
            a = arrays.get(name)
            if (a is None) != (b is None):
                lines.append(f"rank {rank}, {what} {name}: {'None' if a is None else 'set'} where {whom} "
                             f"has {'None' if b is None else 'a value'}")
            elif a is not None and (a.dtype != b.dtype or a.tobytes() != b.tobytes()):
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0.0)
                lines.append(f"rank {rank}, {what} {name}: differs bitwise from {whom} (max diff {diff:.3g})")
    return lines


def check_training(case: TrainingCase, outputs: list[dict], ref: Reference) -> list[str]:
    """Every failure of the ranks' results against the reference and each other; [] when all hold."""
    lines: list[str] = []
    lines += compare_replicas("step 1 gradient of", [o["grads"] for o in outputs])
    lines += compare_replicas(f"after step {case.steps}, parameter", [o["params"] for o in outputs])
    buffers = {k: case.state[k] for k in case.model.buffer_shapes()}
    lines += compare_replicas(f"after step {case.steps}, buffer", [o["buffers"] for o in outputs], exact_to=buffers)
    for rank, out in enumerate(outputs):
        lines += compare_grads(f"rank {rank}, step 1 gradient", out["grads"], ref.grads, ref.grad_scale, case.dtype)
        lines += compare_params(f"rank {rank}, after step {case.steps}", out["params"], ref, case)
        if ref.local_grads:
            lines += compare_grads(f"rank {rank}, step 1 gradient inside no_sync (local, before the last "
                                   f"micro-batch)", out["local_grads"] or {}, ref.local_grads[rank],
                                   ref.local_scale[rank], case.dtype)
    return lines


GAP_FACTOR = 10.0  # naive-mean cases must predict a gap of more than this many gradient tolerances


def predicted_gap(prediction: Reference, whole_batch: Reference, dtype: str) -> float:
    """How far the per-rank-mean prediction's step-1 gradient lies from the whole-batch mean's, in
    gradient tolerances (the largest over parameters). Above 2, no result can be within tolerance
    of both, so matching the prediction proves the plain per-rank mean is not the whole-batch mean."""
    gaps = [float(np.abs(p - whole_batch.grads[n]).max(initial=0.0)) / (GRAD_RTOL[dtype] * whole_batch.grad_scale[n])
            for n, p in prediction.grads.items() if p is not None and whole_batch.grad_scale[n] > 0]
    return max(gaps, default=0.0)


def check_naive_mean(case: TrainingCase, outputs: list[dict], prediction: Reference) -> list[str]:
    """The ranks hold what the per-rank weighting of the split rule predicts (case.py)."""
    return [f"against the per-rank-mean prediction: {ln}" for ln in check_training(case, outputs, prediction)]
