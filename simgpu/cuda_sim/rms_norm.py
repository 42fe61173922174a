"""RMSNorm on simulated GPUs as CUDA runs it: one fused kernel, and autograd saving only its statistics.

`F.rms_norm` (nn.RMSNorm, Llama-style models) calls `aten::_fused_rms_norm`, which CUDA runs as one kernel
whose autograd node keeps the input, the weight and the per-row `rstd` (FusedRmsNormBackward, then
`_fused_rms_norm_backward`). The host has no kernel for it, so torch's composite runs instead: six ops
(pow, mean, add, rsqrt, mul, mul) whose autograd graph keeps two more tensors of the input's size for the
backward. On simulated GPUs that put the composite's memory on the GPU's books: a Llama stage at 2048
tokens a microbatch held 5 MiB a norm and microbatch more than the H200 (+0.16-0.24 GiB a pipeline stage of
llama_3d.py, found by comparing the allocator's history of a plan with the H200's), and a plan priced six
kernels for one.

Here, for tensors on simulated GPUs, `_fused_rms_norm` is CUDA's: its autograd kernel (registered for the
host's and, in a plan, the meta device's autograd keys, ahead of the composite, as attention.py does for
scaled_dot_product_attention) records one node that saves what CUDA's saves, and the op reaches placement.py
as one op, whose stand-in computes it with torch's own decomposition of the fused op (torch._decomp: the
reference for CUDA's kernel, statistics in float32 for half inputs). Host tensors keep torch's composite.
"""
from __future__ import annotations

from typing import Any

import torch

from simgpu.cuda_sim import cuda_build, devices

Tensor = torch.Tensor
aten = torch.ops.aten
_library: Any = None


def _decomposition(name: str) -> Any:
    from torch._decomp import decomposition_table

    return decomposition_table[getattr(aten, name).default]


def fused_rms_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,  # noqa: A002 - aten's names
                   eps: float | None = None) -> tuple[Tensor, Tensor]:
    """CUDA's _fused_rms_norm: (output in the input's dtype, rstd in the accumulation type, kept dims). Its
    float32 intermediates are the kernel's registers on CUDA: computed outside the simulation, so that only
    the outputs are placed on the GPU and charged (placement.py labels them)."""
    from simgpu.cuda_sim import placement

    with placement.suspended():
        return _decomposition("_fused_rms_norm")(input, normalized_shape, weight, eps)


def fused_rms_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Any, rstd: Tensor,  # noqa: A002
                            weight: Tensor | None, output_mask: Any) -> tuple[Tensor | None, Tensor | None]:
    """CUDA's _fused_rms_norm_backward: (grad_input, grad_weight) as `output_mask` asks; intermediates as above."""
    from simgpu.cuda_sim import placement

    with placement.suspended():
        return _decomposition("_fused_rms_norm_backward")(grad_out, input, normalized_shape, rstd, weight,
                                                          output_mask)


def _below_autograd(input: Tensor, normalized_shape: Any, weight: Tensor | None, eps: float | None) -> tuple:
    with torch._C._AutoDispatchBelowAutograd():  # to placement.py as one op, as CUDA's kernel is one
        return aten._fused_rms_norm.default(input, normalized_shape, weight, eps)


class _FusedRmsNorm(torch.autograd.Function):
    """CUDA's autograd node for _fused_rms_norm: saves the input, the weight and rstd."""

    @staticmethod
    def forward(ctx: Any, input: Tensor, normalized_shape: Any, weight: Tensor | None,  # noqa: A002
                eps: float | None) -> tuple[Tensor, Tensor]:
        out, rstd = _below_autograd(input, normalized_shape, weight, eps)
        ctx.save_for_backward(input, weight, rstd)
        ctx.normalized_shape = normalized_shape
        ctx.mark_non_differentiable(rstd)
        return out, rstd

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor, _grad_rstd: Any) -> tuple:
        input, weight, rstd = ctx.saved_tensors  # noqa: A001
        mask = [ctx.needs_input_grad[0], weight is not None and ctx.needs_input_grad[2]]
        grad_input, grad_weight = aten._fused_rms_norm_backward.default(
            grad_out, input, ctx.normalized_shape, rstd, weight, mask)
        return grad_input, None, grad_weight, None


def _autograd_kernel(input: Tensor, normalized_shape: Any, weight: Tensor | None = None,  # noqa: A002
                     eps: float | None = None) -> tuple[Tensor, Tensor]:
    """aten::_fused_rms_norm above autograd: CUDA's node on simulated GPUs, torch's composite elsewhere."""
    if not devices.any_on_gpu(input, weight) or torch._C._are_functorch_transforms_active():  # vmap, grad too
        return _COMPOSITE(input, normalized_shape, weight, eps)
    if torch.is_grad_enabled() and (input.requires_grad or (weight is not None and weight.requires_grad)):
        return _FusedRmsNorm.apply(input, normalized_shape, weight, eps)
    return _below_autograd(input, normalized_shape, weight, eps)


STAND_INS: dict[Any, Any] = {}
_COMPOSITE: Any = None  # torch's own (CompositeImplicitAutograd), for host tensors
if hasattr(aten, "_fused_rms_norm") and cuda_build.host_lacks("_fused_rms_norm"):  # torch >= 2.8, a CPU build
    STAND_INS = {aten._fused_rms_norm: fused_rms_norm, aten._fused_rms_norm_backward: fused_rms_norm_backward}
    _COMPOSITE = aten._fused_rms_norm.default.decompose


def install() -> None:
    """Register the autograd kernel (where this torch has the fused op and the host lacks its kernel)."""
    from simgpu.cuda_sim import placement

    global _library
    if _library is not None or not STAND_INS:
        return
    _library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - a kernel for aten's own op
    _library.impl("_fused_rms_norm", _autograd_kernel, "AutogradCPU")
    if placement._storage_less:  # a plan's GPU tensors are meta below Python
        _library.impl("_fused_rms_norm", _autograd_kernel, "AutogradMeta")
