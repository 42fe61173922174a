"""CPU stand-ins for the aten ops torch implements for CUDA only, which ordinary programs reach.

SyncBatchNorm (nn.SyncBatchNorm, convert_sync_batchnorm) computes its statistics with five ops that
have a CUDA kernel and no CPU one (`Could not run 'aten::batch_norm_stats' with arguments from the
'CPU' backend`). These follow the CUDA kernels' formulas (aten/src/ATen/native/cuda/Normalization.cu):
statistics in float32 for half-precision inputs, the biased variance for normalising and the unbiased
one for running_var. placement.py runs them in place of the missing kernels and places their results.
FlashAttention's and the memory-efficient kernel's ops are attention_kernels.py's, LU without pivoting
linalg_kernels.py's, RMSNorm's fused kernel rms_norm.py's, _scaled_mm_v2 scaled_mm_kernels.py's (where the host lacks it); cuDNN's attention is refused in one line (cuDNN is not simulated).
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from simgpu.cuda_sim import attention_kernels, cuda_build, linalg_kernels, rms_norm, scaled_mm_kernels
from simgpu.cuda_sim.norm_kernels import wide  # half-precision statistics in float32, as CUDA's

Tensor = torch.Tensor
aten = torch.ops.aten


def _per_channel(t: Tensor, like: Tensor) -> Tensor:
    """A (C,) tensor shaped to broadcast over `like`'s channel dimension (dim 1)."""
    return t.reshape([1, -1] + [1] * (like.dim() - 2))


def _reduce_dims(t: Tensor) -> list[int]:
    return [0] + list(range(2, t.dim()))


def batch_norm_stats(input: Tensor, eps: float) -> tuple[Tensor, Tensor]:  # noqa: A002 - aten's names
    x = wide(input)
    dims = _reduce_dims(x)
    mean = x.mean(dims)
    var = x.var(dims, unbiased=False)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(input: Tensor, mean: Tensor, invstd: Tensor, running_mean: Tensor | None,  # noqa: A002
                                        running_var: Tensor | None, momentum: float, eps: float,
                                        counts: Tensor) -> tuple[Tensor, Tensor]:
    counts = counts.to(mean.dtype).reshape(-1, 1)
    total = counts.sum()
    global_mean = (mean * counts).sum(0) / total
    var_each = invstd.pow(-2) - eps
    var = (counts * (var_each + (mean - global_mean).pow(2))).sum(0) / total
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(global_mean.to(running_mean.dtype), alpha=momentum)
    if running_var is not None:
        unbiased = var * total / (total - 1).clamp(min=1)
        running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return global_mean, torch.rsqrt(var + eps)


def batch_norm_elemt(input: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor,  # noqa: A002
                     invstd: Tensor, eps: float) -> Tensor:
    out = (wide(input) - _per_channel(mean, input)) * _per_channel(invstd, input)
    if weight is not None:
        out = out * _per_channel(weight.float() if weight.dtype != out.dtype else weight, input)
    if bias is not None:
        out = out + _per_channel(bias.float() if bias.dtype != out.dtype else bias, input)
    return out.to(input.dtype).contiguous(memory_format=_format(input))


def batch_norm_backward_reduce(grad_out: Tensor, input: Tensor, mean: Tensor, invstd: Tensor,  # noqa: A002
                               weight: Tensor | None, input_g: bool, weight_g: bool,
                               bias_g: bool) -> tuple[Tensor | None, ...]:
    dims = _reduce_dims(input)
    dy = wide(grad_out)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (wide(input) - _per_channel(mean, input))).sum(dims)
    grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) if weight_g and weight is not None else None
    grad_bias = sum_dy.to(weight.dtype if weight is not None else sum_dy.dtype) if bias_g else None
    return (sum_dy if input_g else None, sum_dy_xmu if input_g else None, grad_weight, grad_bias)


def batch_norm_backward_elemt(grad_out: Tensor, input: Tensor, mean: Tensor, invstd: Tensor,  # noqa: A002
                              weight: Tensor | None, sum_dy: Tensor, sum_dy_xmu: Tensor, count: Tensor) -> Tensor:
    total = count.sum().to(sum_dy.dtype)
    mean_dy = _per_channel(sum_dy / total, input)
    mean_dy_xmu = _per_channel(sum_dy_xmu / total, input)
    istd = _per_channel(invstd, input)
    xmu = wide(input) - _per_channel(mean, input)
    grad = (wide(grad_out) - mean_dy - xmu * istd * istd * mean_dy_xmu) * istd
    if weight is not None:
        grad = grad * _per_channel(weight.to(grad.dtype), input)
    return grad.to(input.dtype).contiguous(memory_format=_format(input))


def _format(t: Tensor) -> torch.memory_format:
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
        return torch.channels_last_3d
    return torch.contiguous_format


def _refused(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"simgpu: aten::{name} is cuDNN's attention kernel, and cuDNN is not simulated "
                                  f"(torch.backends.cudnn.is_available() is False); scaled_dot_product_attention "
                                  f"takes FlashAttention or the memory-efficient kernel, as on a GPU without cuDNN")

    return refuse


STAND_INS: dict[Any, Callable[..., Any]] = {
    **attention_kernels.STAND_INS,  # FlashAttention, memory-efficient attention
    **linalg_kernels.STAND_INS,  # LU without pivoting
    **scaled_mm_kernels.STAND_INS,  # float8 scaled matmul, where the host has no kernel (torch 2.11)
    **rms_norm.STAND_INS,  # RMSNorm's fused kernel and its backward
    **{getattr(aten, name): _refused(name) for name in (
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward")
        if cuda_build.host_lacks(name)},
    aten.batch_norm_stats: batch_norm_stats,
    aten.batch_norm_gather_stats_with_counts: batch_norm_gather_stats_with_counts,
    aten.batch_norm_elemt: batch_norm_elemt,
    aten.batch_norm_backward_reduce: batch_norm_backward_reduce,
    aten.batch_norm_backward_elemt: batch_norm_backward_elemt,
}


# ---- allocations that reach CUDA's own kernels --------------------------------------------------------
# A factory with device="cuda" is placed by placement.py whenever a dispatch mode sees it. Some of torch's
# code allocates with the modes switched off: torch.tensor(..., device=x.device) excludes the Python key
# (torch.unravel_index), higher-order operators trace their bodies under _disable_current_modes
# (torch.cond's autograd, flex_attention), and the program's function mode does not see calls nested in
# a torch function it handles. On the CPU wheel those reach a CUDA kernel that does not exist
# ("Could not run 'aten::empty_strided' with arguments from the 'CUDA' backend"). Here the CUDA kernels of
# the two allocation ops every factory and copy ends in: host memory labelled with the GPU asked for.
_library: Any = None


def _gpu_index(device: Any) -> int:
    from simgpu.cuda_sim import devices

    device = torch.device(device)
    return devices.current() if device.index is None else devices.check_index(device.index)


def _empty_on_gpu(size: Any, *, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None,
                  memory_format: Any = None) -> Tensor:
    from simgpu.cuda_sim import devices

    out = aten.empty.memory_format(size, dtype=dtype, layout=layout, device="cpu", memory_format=memory_format)
    return devices.place(out, _gpu_index(device))


def _empty_strided_on_gpu(size: Any, stride: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
                          pin_memory: Any = None) -> Tensor:
    from simgpu.cuda_sim import devices

    out = aten.empty_strided.default(size, stride, dtype=dtype, layout=layout, device="cpu")
    return devices.place(out, _gpu_index(device))


def install() -> None:
    """Register the CUDA allocation kernels: the CPU wheel has none, and a CUDA wheel's would call the CUDA
    runtime. Factories reach them from C++ with device="cuda" where no simgpu mode sees the call (a tracer
    running ops for real below placement, as make_fx does for flex attention's backward)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - kernels for aten's own ops
    with warnings.catch_warnings():  # a CUDA wheel warns that its own kernels are overridden: on purpose
        warnings.simplefilter("ignore")
        _library.impl("empty.memory_format", _empty_on_gpu, "CUDA")
        _library.impl("empty_strided", _empty_strided_on_gpu, "CUDA")
