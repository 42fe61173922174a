"""The reference: one process, the whole batch, float64 NumPy (no torch, no autograd).

Loss of a step: sum_i w_i * ||o_i - y_i||^2 over the whole batch, with per-sample weights w (case.py
says which weights make which loss). Backward by hand, optimizers as torch.optim documents them
(SGD with momentum/nesterov/weight decay, Adam without amsgrad). A parameter whose gradient is None
(used by no rank) is skipped by the optimizer, as torch skips it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.training.case import OptimizerSpec, TrainingCase, local_weights
from conformance.training.model import ModelSpec

Params = dict[str, np.ndarray]
Grads = dict[str, "np.ndarray | None"]


@dataclass
class Reference:
    """What the ranks must hold: step-1 gradients, final parameters and buffers.

    grad_scale: per parameter, the largest entry of the magnitude of everything step 1's gradient
    sums and multiplies (gradient_scale): rounding errors are relative to it, even where the
    gradient itself cancels to near zero (check.py's gradient tolerance is relative to it).
    local_grads / local_scale: per rank, the same for the gradients accumulated under no_sync()
    in step 1 before the synchronising backward (only for micro_batches > 1).
    """

    grads: Grads
    grad_scale: dict[str, float]
    params: Params
    buffers: Params
    initial: Params
    local_grads: list[Grads] = field(default_factory=list)
    local_scale: list[dict[str, float]] = field(default_factory=list)


def _act(name: str, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The activation and its derivative at z."""
    if name == "tanh":
        t = np.tanh(z)
        return t, 1.0 - t * t
    if name == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-z))
        return s, s * (1.0 - s)
    if name == "gelu_tanh":
        k = np.sqrt(2.0 / np.pi)
        inner = k * (z + 0.044715 * z ** 3)
        t = np.tanh(inner)
        return 0.5 * z * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * z * z)
    raise ValueError(f"unknown activation {name!r}")


def _forward(spec: ModelSpec, params: Params, buffers: Params, x: np.ndarray,
             branch_on: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Each layer's input and pre-activation, and the model's output (branch added where branch_on)."""
    inputs, zs, h = [], [], x
    for i in range(spec.layers):
        inputs.append(h)
        zs.append(h @ params[f"layers.{i}.weight"].T + (params[f"layers.{i}.bias"] if spec.bias else 0.0))
        h = _act(spec.activation, zs[i])[0] if i < spec.layers - 1 else zs[i]
    out = h * buffers.get("scale", 1.0)
    if spec.branch:
        out = out + branch_on[:, None] * (x @ params["branch.weight"].T + (params["branch.bias"] if spec.bias else 0.0))
    return inputs, zs, out


def _backward(spec: ModelSpec, params: Params, buffers: Params, x: np.ndarray, d_out: np.ndarray,
              branch_on: np.ndarray, magnitudes: bool = False) -> Grads:
    """Back-propagate d_out (dLoss/dOutput) through the forward pass of x.

    magnitudes=True runs the same pass on magnitudes (gradient_scale): |W|, |inputs|, and
    max(|f'(z)|, 1) for each activation derivative.
    """
    inputs, zs, _ = _forward(spec, params, buffers, x, branch_on)
    mag = np.abs if magnitudes else (lambda a: a)
    grads: Grads = {}
    if spec.branch:
        d_side = d_out * branch_on[:, None]
        used = bool(branch_on.any())
        grads["branch.weight"] = d_side.T @ mag(x) if used else None
        if spec.bias:
            grads["branch.bias"] = d_side.sum(axis=0) if used else None
    delta = d_out * mag(buffers.get("scale", 1.0))
    for i in reversed(range(spec.layers)):
        grads[f"layers.{i}.weight"] = delta.T @ mag(inputs[i])
        if spec.bias:
            grads[f"layers.{i}.bias"] = delta.sum(axis=0)
        if i > 0:
            slope = _act(spec.activation, zs[i - 1])[1]
            slope = np.maximum(np.abs(slope), 1.0) if magnitudes else slope
            delta = (delta @ mag(params[f"layers.{i}.weight"])) * slope
    return {name: grads[name] for name in spec.parameter_shapes()}


def gradients(spec: ModelSpec, params: Params, buffers: Params, x: np.ndarray, y: np.ndarray,
              weights: np.ndarray, branch_on: np.ndarray) -> Grads:
    """Gradient of sum_i weights[i] * ||o_i - y_i||^2 (samples with weight 0 contribute nothing).

    branch_on: per sample, whether its rank adds the branch. The branch's gradient is None when no
    sample uses it (its parameters are then outside every rank's graph).
    """
    out = _forward(spec, params, buffers, x, branch_on)[2]
    return _backward(spec, params, buffers, x, 2.0 * weights[:, None] * (out - y), branch_on)


def gradient_scale(spec: ModelSpec, params: Params, buffers: Params, x: np.ndarray, y: np.ndarray,
                   weights: np.ndarray, branch_on: np.ndarray) -> dict[str, float]:
    """Per parameter, the largest entry of the gradient's magnitude bound (see Reference.grad_scale).

    The backward pass run on magnitudes: |W| for W, max(|f'(z)|, 1) for each activation derivative
    (computed from the activation's output, f' carries an absolute error of order eps, not a relative
    one: tanh' = 1 - t^2 near saturation), and |o| + |y| for the residual o - y. Rounding errors of
    sums and products are bounded relative to exactly these magnitudes (the standard running-error
    bound), however much the signed sums cancel.
    """
    out = _forward(spec, params, buffers, x, branch_on)[2]
    d_out = 2.0 * np.abs(weights)[:, None] * (np.abs(out) + np.abs(y))
    bound = _backward(spec, params, buffers, x, d_out, branch_on, magnitudes=True)
    return {name: float(b.max(initial=0.0)) for name, b in bound.items() if b is not None}


class Optimizer:
    """torch.optim.SGD / Adam on NumPy arrays, following torch's update formulas step for step."""

    def __init__(self, spec: OptimizerSpec):
        self.spec = spec
        self.state: dict[str, dict] = {}

    def step(self, params: Params, grads: Grads) -> None:
        for name, g in grads.items():
            if g is None:
                continue  # torch skips a parameter without a gradient (no state, no decay)
            st = self.state.setdefault(name, {"step": 0})
            st["step"] += 1
            p = params[name]
            if self.spec.weight_decay:
                g = g + self.spec.weight_decay * p
            params[name] = p - self._update(st, g)

    def _update(self, st: dict, g: np.ndarray) -> np.ndarray:
        o = self.spec
        if o.name == "sgd":
            if o.momentum:
                buf = g.copy() if "buf" not in st else o.momentum * st["buf"] + g  # dampening 0
                st["buf"] = buf
                g = g + o.momentum * buf if o.nesterov else buf
            return o.lr * g
        if o.name == "adam":
            b1, b2 = o.betas
            st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
            st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
            t = st["step"]
            denom = np.sqrt(st["v"]) / np.sqrt(1 - b2 ** t) + o.eps
            return (o.lr / (1 - b1 ** t)) * st["m"] / denom
        raise ValueError(f"unknown optimizer {o.name!r}")


def _sample_plan(case: TrainingCase) -> tuple[np.ndarray, np.ndarray]:
    """Per sample of the whole batch: its rank-local loss weight and whether its rank uses the branch."""
    weights = np.zeros(case.batch)
    branch_on = np.zeros(case.batch, dtype=bool)
    for rank, micro in enumerate(local_weights(case)):
        for start, stop, w in micro:
            weights[start:stop] = w
            branch_on[start:stop] = rank in case.branch_ranks
    return weights, branch_on


def reference(case: TrainingCase, global_mean: bool = True) -> Reference:
    """Train the case in one process on the whole batch.

    global_mean=True: the plain whole-batch mean loss (weights 1/(N*out)), independent of the split:
    what DDP must match. False: the weights the split rule and case.weighting give each sample
    (case.py), i.e. the prediction of what DDP computes, equal or not to the whole-batch mean.
    """
    f64 = {k: v.astype(np.float64) for k, v in case.state.items()}
    buffers = {k: f64[k] for k in case.model.buffer_shapes()}
    params = {k: f64[k] for k in case.model.parameter_shapes()}
    initial = dict(params)
    local, branch_on = _sample_plan(case)
    out = case.model.widths[-1]
    weights = np.full(case.batch, 1.0 / (case.batch * out)) if global_mean else local / case.world_size
    opt = Optimizer(case.optimizer)
    first: Grads = {}
    scale: dict[str, float] = {}
    for step in range(case.steps):
        x, y = case.x[step].astype(np.float64), case.y[step].astype(np.float64)
        grads = gradients(case.model, params, buffers, x, y, weights, branch_on)
        if step == 0:
            first, scale = grads, gradient_scale(case.model, params, buffers, x, y, weights, branch_on)
        opt.step(params, grads)
    ref = Reference(first, scale, params, buffers, initial)
    if case.micro_batches > 1:
        _no_sync_grads(case, ref, branch_on)
    return ref


def _no_sync_grads(case: TrainingCase, ref: Reference, branch_on: np.ndarray) -> None:
    """Per rank: step 1's gradients after all micro-batches but the last, accumulated locally (no_sync)."""
    x, y = case.x[0].astype(np.float64), case.y[0].astype(np.float64)
    for micro in local_weights(case):
        w = np.zeros(case.batch)
        for start, stop, weight in micro[:-1]:
            w[start:stop] = weight
        args = (case.model, ref.initial, ref.buffers, x, y, w, branch_on & (w > 0))
        ref.local_grads.append(gradients(*args))
        ref.local_scale.append(gradient_scale(*args))
