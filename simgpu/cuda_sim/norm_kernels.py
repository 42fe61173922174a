"""Batch and layer norm on simulated GPUs with CUDA's statistics: kept in the accumulation type, and given in
evaluation too.

CUDA's kernels (aten/src/ATen/native/cuda/Normalization.cu, layer_norm_kernel.cu) return the saved mean and
inverse standard deviation of a float16/bfloat16 input in float32 (`toAccumulateType(..., is_cuda=true)`); the
host's return them in the input's dtype, and the host's backward kernels take only those. In evaluation
(training=False) CUDA's batch norm returns the running mean (in the accumulation type) and
rsqrt(running_var + eps) as save_mean/save_invstd, shape (C,), where the host returns empty tensors.

On a simulated GPU these ops compute a half-precision call in float32 (inputs, affine parameters and running
statistics widened; the running statistics written back rounded, as CUDA's update kernel stores them) and
round the output once to the input's dtype, so the statistics come out as CUDA's. The backward ops, which
autograd gives those float32 statistics, compute wide the same way and round each gradient to its
parameter's dtype. Float32/float64 calls run the host kernel; only evaluation's statistics are filled in.
Out= overloads keep the host's behaviour.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

Tensor = torch.Tensor
aten = torch.ops.aten
_HALF = (torch.float16, torch.bfloat16)
_OUT_KWARGS = ("out", "save_mean", "save_invstd", "reserve", "out0", "out1", "out2", "out3")


def wide(t: Any) -> Any:
    """A float16/bfloat16 tensor in CUDA's accumulation type (float32); anything else as it is."""
    return t.float() if isinstance(t, Tensor) and t.dtype in _HALF else t


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in _HALF else dtype


def batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,  # noqa: A002
               running_var: Tensor | None, training: bool, momentum: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """CUDA's batch_norm_cuda: (output, save_mean, save_invstd), the statistics in the accumulation type."""
    half = input.dtype in _HALF
    wide_mean, wide_var = (wide(running_mean), wide(running_var)) if half else (running_mean, running_var)
    out, mean, invstd = aten.native_batch_norm.default(
        wide(input) if half else input, wide(weight) if half else weight, wide(bias) if half else bias,
        wide_mean, wide_var, training, momentum, eps)
    if training:
        for narrow, widened in ((running_mean, wide_mean), (running_var, wide_var)):
            if narrow is not None and widened is not narrow:
                narrow.copy_(widened)  # the update computed wide, stored in the running statistics' dtype
    elif running_mean is not None and running_var is not None:
        acc = _acc(input.dtype)
        mean = running_mean.to(acc, copy=True)
        invstd = torch.rsqrt(running_var.to(acc) + eps)
    return out.to(input.dtype), mean, invstd


def batch_norm_backward(grad_out: Tensor, input: Tensor, weight: Tensor | None, *rest: Any,  # noqa: A002
                        run: Callable[..., Any]) -> tuple[Tensor | None, ...]:
    """A batch norm backward op (native_batch_norm_backward, batch_norm_backward) of a half input: computed in
    float32 on float32 statistics, each gradient rounded to its tensor's dtype."""
    grads = run(wide(grad_out), wide(input), wide(weight), *(wide(r) for r in rest))
    param = weight.dtype if weight is not None else input.dtype
    return tuple(None if g is None else g.to(dtype) for g, dtype in zip(grads, (input.dtype, param, param)))


def layer_norm(input: Tensor, normalized_shape: Any, weight: Tensor | None, bias: Tensor | None,  # noqa: A002
               eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """CUDA's layer norm of a half input: output in its dtype, mean and rstd in float32."""
    out, mean, rstd = aten.native_layer_norm.default(wide(input), normalized_shape, wide(weight), wide(bias), eps)
    return out.to(input.dtype), mean, rstd


def layer_norm_backward(grad_out: Tensor, input: Tensor, normalized_shape: Any, mean: Tensor, rstd: Tensor,  # noqa: A002
                        weight: Tensor | None, bias: Tensor | None, output_mask: Any) -> tuple[Tensor | None, ...]:
    grads = aten.native_layer_norm_backward.default(wide(grad_out), wide(input), normalized_shape, wide(mean),
                                                     wide(rstd), wide(weight), wide(bias), output_mask)
    dtypes = (input.dtype, (weight if weight is not None else input).dtype, (bias if bias is not None else input).dtype)
    return tuple(None if g is None else g.to(dtype) for g, dtype in zip(grads, dtypes))


def _no_reserve() -> Tensor:
    """_batch_norm_with_update's fourth output, cuDNN's workspace: empty without cuDNN (CUDA's record: uint8 (0,))."""
    return torch.empty(0, dtype=torch.uint8)


# CUDA's versions of the functional overloads, with their arguments as aten passes them
def _legit(input: Tensor, weight: Any, bias: Any, *rest: Any) -> Any:  # noqa: A002
    if len(rest) == 3:  # .no_stats(input, weight, bias, training, momentum, eps)
        return batch_norm(input, weight, bias, None, None, *rest)
    return batch_norm(input, weight, bias, *rest)


def _legit_no_training(input: Tensor, weight: Any, bias: Any, running_mean: Tensor, running_var: Tensor,  # noqa: A002
                       momentum: float, eps: float) -> Any:
    return batch_norm(input, weight, bias, running_mean, running_var, False, momentum, eps)


def _with_update(input: Tensor, weight: Any, bias: Any, running_mean: Tensor, running_var: Tensor,  # noqa: A002
                 momentum: float, eps: float) -> Any:
    return (*batch_norm(input, weight, bias, running_mean, running_var, True, momentum, eps), _no_reserve())


def _no_update(input: Tensor, weight: Any, bias: Any, running_mean: Any, running_var: Any,  # noqa: A002
               momentum: float, eps: float) -> Any:
    training = running_mean is None
    return (*batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps), _no_reserve())


def _in_evaluation(args: tuple, training_at: int | None) -> bool:
    """Whether a batch norm call with running statistics is in evaluation, where CUDA fills in the statistics
    the host leaves empty (`training_at`: where the op takes `training`; None: never trains). Without running
    statistics (_native_batch_norm_legit.no_stats) evaluation is refused by both alike."""
    if training_at is None:
        return True
    return training_at >= 0 and len(args) == 8 and args[training_at] is False


# packet -> (CUDA's version, the position of its `training` argument: None = always evaluation, -1 = never)
FORWARD: dict[Any, tuple[Callable[..., Any], int | None]] = {
    aten.native_batch_norm: (batch_norm, 5),
    aten._native_batch_norm_legit: (_legit, 5),
    aten._native_batch_norm_legit_no_training: (_legit_no_training, None),
    aten._batch_norm_with_update: (_with_update, -1),
    aten._batch_norm_no_update: (_no_update, None),
    aten.native_layer_norm: (layer_norm, -1),
}


def _forward_handler(cuda: Callable[..., Any], training_at: int | None) -> Callable[[Callable, tuple, dict], Any]:
    def handle(run_op: Callable, args: tuple, kwargs: dict) -> Any:
        from simgpu.cuda_sim import placement

        index = placement.gpu_of(placement.tensors_of(args, kwargs))
        if index is None or any(k in kwargs for k in _OUT_KWARGS) or not isinstance(args[0], Tensor):
            out = run_op(*args, **kwargs)
        elif args[0].dtype in _HALF or _in_evaluation(args, training_at):
            out = cuda(*args, **kwargs)
        else:
            out = run_op(*args, **kwargs)
        return out if index is None else placement.label(out, index)

    return handle


def _backward_handler(packet: Any) -> Callable[[Callable, tuple, dict], Any]:
    def handle(run_op: Callable, args: tuple, kwargs: dict) -> Any:
        from simgpu.cuda_sim import placement

        index = placement.gpu_of(placement.tensors_of(args, kwargs))
        if index is None or kwargs or not isinstance(args[1], Tensor) or args[1].dtype not in _HALF:
            out = run_op(*args, **kwargs)
        elif packet is aten.native_layer_norm_backward:
            out = layer_norm_backward(*args)
        else:
            out = batch_norm_backward(*args, run=run_op)
        return out if index is None else placement.label(out, index)

    return handle


def install() -> None:
    """Hand the norm ops to placement.py."""
    from simgpu.cuda_sim import placement

    for packet, (cuda, training_at) in FORWARD.items():
        placement.special(packet, _forward_handler(cuda, training_at))
    for packet in (aten.native_batch_norm_backward, aten.batch_norm_backward, aten.native_layer_norm_backward):
        placement.special(packet, _backward_handler(packet))
