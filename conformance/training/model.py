"""The model family the training properties train: a small MLP with optional bias, buffer and branch.

Smooth activations only: with ReLU a pre-activation within rounding of zero takes a different side
of the kink in float32 than in the float64 reference, and the gradient jumps by a whole term, so no
stated tolerance could hold. BatchNorm is left out on purpose: its batch statistics are per rank
under DDP (equivalence would need SyncBatchNorm, which is out of scope); the buffer here is a
fixed output scale, which DDP must broadcast from rank 0 like any buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

ACTIVATIONS = ("tanh", "sigmoid", "gelu_tanh")


@dataclass(frozen=True)
class ModelSpec:
    """widths: (in, hidden..., out), at least (in, out); one Linear per consecutive pair.

    scale_buffer: a non-trainable buffer `scale` (out,) multiplying the output.
    branch: an extra Linear(in, out) `branch`, added to the output on the ranks that turn it on.
    """

    widths: tuple[int, ...]
    activation: str = "tanh"
    bias: bool = True
    scale_buffer: bool = False
    branch: bool = False

    @property
    def layers(self) -> int:
        return len(self.widths) - 1

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter by its torch name, in registration order (the order DDP sees them)."""
        shapes: dict[str, tuple[int, ...]] = {}
        for i, (fan_in, fan_out) in enumerate(zip(self.widths, self.widths[1:])):
            shapes[f"layers.{i}.weight"] = (fan_out, fan_in)
            if self.bias:
                shapes[f"layers.{i}.bias"] = (fan_out,)
        if self.branch:
            shapes["branch.weight"] = (self.widths[-1], self.widths[0])
            if self.bias:
                shapes["branch.bias"] = (self.widths[-1],)
        return shapes

    def buffer_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"scale": (self.widths[-1],)} if self.scale_buffer else {}

    def describe(self) -> str:
        extras = [x for x, on in (("bias", self.bias), ("scale buffer", self.scale_buffer),
                                  ("branch", self.branch)) if on]
        return f"MLP {'-'.join(map(str, self.widths))} {self.activation}" + (f" +{'+'.join(extras)}" if extras else "")


def initial_state(spec: ModelSpec, rng: np.random.Generator, dtype: str) -> dict[str, np.ndarray]:
    """Parameters (torch's Linear init range, U(+-1/sqrt(fan_in))) and buffers, exactly representable in dtype."""
    state: dict[str, np.ndarray] = {}
    for name, shape in spec.parameter_shapes().items():
        fan_in = spec.widths[0] if name.startswith("branch") else spec.widths[int(name.split(".")[1])]
        bound = 1.0 / np.sqrt(fan_in)
        state[name] = rng.uniform(-bound, bound, size=shape).astype(dtype)
    for name, shape in spec.buffer_shapes().items():
        state[name] = rng.uniform(0.5, 1.5, size=shape).astype(dtype)
    return state


def _torch_module_class() -> type:
    import torch
    from torch import nn

    class TrainingModel(nn.Module):
        """The torch side of ModelSpec; forward(x, branch_on) -> (N, out)."""

        def __init__(self, spec: ModelSpec, device: Any, dtype: Any):
            super().__init__()
            kw = {"device": device, "dtype": dtype}
            self.activation = spec.activation
            self.layers = nn.ModuleList(nn.Linear(a, b, bias=spec.bias, **kw)
                                        for a, b in zip(spec.widths, spec.widths[1:]))
            if spec.branch:
                self.branch = nn.Linear(spec.widths[0], spec.widths[-1], bias=spec.bias, **kw)
            if spec.scale_buffer:
                self.register_buffer("scale", torch.ones(spec.widths[-1], **kw))

        def forward(self, x: Any, branch_on: bool = False) -> Any:
            h = x
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i < len(self.layers) - 1:
                    h = _activate(self.activation, h)
            if hasattr(self, "scale"):
                h = h * self.scale
            if branch_on:
                h = h + self.branch(x)
            return h

    return TrainingModel


def _activate(name: str, h: Any) -> Any:
    import torch
    import torch.nn.functional as F

    if name == "tanh":
        return torch.tanh(h)
    if name == "sigmoid":
        return torch.sigmoid(h)
    if name == "gelu_tanh":
        return F.gelu(h, approximate="tanh")
    raise ValueError(f"unknown activation {name!r}; choose one of {ACTIVATIONS}")


_MODULE_CLASS: type | None = None


def build_module(spec: ModelSpec, state: dict[str, np.ndarray], device: Any, shift: float = 0.0) -> Any:
    """The torch module on `device`, holding `state` (+ shift on every entry, to make replicas differ).

    Built with factory kwargs rather than Module.to(device), so the same code runs on CPU ranks,
    real GPUs and simulated ones.
    """
    import torch

    global _MODULE_CLASS
    if _MODULE_CLASS is None:
        _MODULE_CLASS = _torch_module_class()
    dtype = getattr(torch, next(iter(state.values())).dtype.name)
    module = _MODULE_CLASS(spec, device, dtype)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            tensor.copy_(torch.from_numpy(state[name] + np.asarray(shift, dtype=state[name].dtype)))
    return module
