"""TF32 for float32 matmuls on simulated GPUs: where the program's setting lets cuBLAS use TF32, the matrix
inputs of a float32 GEMM are rounded to TF32 (10-bit mantissa) before the product, as a GPU's tensor cores do.

The setting is the one CUDA's kernels read: torch's fp32 precision for ("cuda", "matmul") being "tf32", which
`torch.backends.cuda.matmul.allow_tf32 = True`, `torch.set_float32_matmul_precision("high")` or "medium",
`torch.backends.cuda.matmul.fp32_precision = "tf32"` and `torch.backends.fp32_precision = "tf32"` (inherited)
all set (torch's Context: cuBLAS's math mode and cuBLASLt's compute type follow it). What an H200 computes then
(torch 2.11, benchmarks/cuda_references/tf32_probe.py, recorded in
benchmarks/results/plan33-host-h200-2026-11-27/tf32-h200.json): float64's product of the inputs rounded to TF32
by round-to-nearest-even within 2.4e-7 (float32 accumulation), 3.2e-4 away from the float32 product. So here
the inputs are rounded that way and the host's float32 kernel computes the product; a bias (addmm's `self`,
baddbmm's) enters in float32, as cuBLAS's C operand does.

GEMMs only (mm, addmm, bmm, baddbmm, addbmm, _addmm_activation, and matmul/linear/einsum through them):
matrix-vector and dot products (mv, addmv, dot) are cuBLAS's gemv/dot, not tensor-core GEMMs, and are left in
float32; convolutions too (cuDNN picks TF32 per algorithm: with its default allow_tf32 the probe's convolution
came out in float32 accuracy). Storage-less tensors (a plan) have no values to round; other dtypes (autocast's
bf16/fp16 inputs) are untouched.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten
Tensor = torch.Tensor

# op packet -> the positions of its matrix operands (the ones cuBLAS reads as A and B; not the added C)
MATRIX_ARGS: dict[Any, tuple[int, int]] = {
    aten.mm: (0, 1),
    aten.bmm: (0, 1),
    aten.addmm: (1, 2),
    aten.baddbmm: (1, 2),
    aten.addbmm: (1, 2),
    aten._addmm_activation: (1, 2),
}

_PRECISION = getattr(torch._C, "_get_fp32_precision_getter", None)  # torch's new fp32 precision API (2.9 on)
_LOW_BITS = 0x1FFF  # the 13 mantissa bits float32 has beyond TF32's 10


def enabled() -> bool:
    """Whether CUDA's float32 matmuls use TF32 under the program's settings (legacy and new APIs alike)."""
    if _PRECISION is not None:
        return _PRECISION("cuda", "matmul") == "tf32"
    return bool(torch._C._get_cublas_allow_tf32())


def round_to_tf32(x: Tensor) -> Tensor:
    """float32 `x` rounded to TF32's 10-bit mantissa by round-to-nearest-even, still float32 (its layout kept).
    Infinities stay infinite, NaNs NaN; finite values past TF32's largest round to infinity, subnormals are
    rounded as the bits fall (not flushed)."""
    bits = x.view(torch.int32)
    rounded = bits >> 13
    rounded &= 1
    rounded += 0xFFF
    rounded += bits  # wraps only for NaNs (all exponent bits set), which are kept below
    rounded &= ~_LOW_BITS
    return torch.where(torch.isnan(x), x, rounded.view(torch.float32))


def _roundable(t: Any) -> bool:
    from simgpu.cuda_sim import placement

    return isinstance(t, Tensor) and t.dtype == torch.float32 and t.layout == torch.strided \
        and not placement.storage_less(t)


def _handler(packet: Any, positions: tuple[int, int]) -> Callable[[Callable, tuple, dict], Any]:
    """placement.py's rule for a cuBLAS op (results on the inputs' GPU, the ops inside meeting CUDA autocast,
    the workspace charged), with the matrix operands rounded to TF32 first where the setting asks for it."""
    def handle(run_op: Callable, args: tuple, kwargs: dict) -> Any:
        from simgpu.cuda_sim import autocast, placement, workspaces

        target = placement.gpu_of_call(args, kwargs)
        if target is None:
            return run_op(*args, **kwargs)
        run_args = args
        if enabled() and all(_roundable(args[i]) for i in positions if i < len(args)):
            run_args = tuple(round_to_tf32(a) if i in positions else a for i, a in enumerate(args))
        if autocast.enabled_here():
            with autocast.inner_ops_cast():
                out = placement.label(run_op(*run_args, **kwargs), target)
        else:
            out = placement.label(run_op(*run_args, **kwargs), target)
        workspaces.charge(packet, target, args, kwargs)
        return out

    return handle


def install() -> None:
    """Hand the GEMM ops to placement.py with the TF32 handler."""
    from simgpu.cuda_sim import placement

    for packet, positions in MATRIX_ARGS.items():
        placement.special(packet, _handler(packet, positions))
