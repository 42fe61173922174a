"""torch._scaled_mm_v2 (float8 matmul with per-tensor, per-row or blockwise scales) on simulated GPUs, where the
installed torch has no CPU kernel for it (torch 2.11: `Could not run 'aten::_scaled_mm_v2' with arguments from
the 'CPU' backend`; from 2.13 on the host has one and this is not used).

CUDA's formula (cuBLASLt's scaled GEMM): each operand is decoded by its scales, the product accumulated in
float32, the bias added, the result rounded once to `out_dtype`. The scale layouts are those of torch's
`ScalingType` as its OpInfo samples lay them out: TensorWise one value; RowWise (M, 1) for A and (1, N) for B;
BlockWise1x128 (M, K/128) for A and (N, K/128) for B (one value per row or column and 128 of K);
BlockWise128x128 (K/128 rounded up to 4, M/128) for A and (K/128 rounded up, N/128) for B. Swizzled scales and
the microscaling recipes (1x16, 1x32: MXFP8, NVFP4) need Blackwell's kernels and are refused in one line.
"""
from __future__ import annotations

from typing import Any

import torch

from simgpu.cuda_sim import cuda_build

Tensor = torch.Tensor
aten = torch.ops.aten

TENSOR_WISE, ROW_WISE, BLOCK_1X128, BLOCK_128X128 = 0, 1, 4, 5
NO_SWIZZLE = 0


def _refuse(why: str) -> None:
    raise NotImplementedError(f"simgpu: torch._scaled_mm_v2 {why} cannot run on simulated GPUs: only tensorwise, "
                              f"rowwise and 1x128/128x128 blockwise scales without swizzling are simulated")


def decode_scales(scale: Tensor, recipe: int, rows: int, cols: int, operand: str) -> Tensor:
    """The (rows, cols) float32 factor each element of the operand is multiplied by. `operand` is "a" (M, K)
    or "b" (K, N); the scale layouts are the module docstring's."""
    s = scale.to(torch.float32)
    if recipe == TENSOR_WISE:
        return s.reshape(()).expand(rows, cols)
    if recipe == ROW_WISE:
        return (s.reshape(rows, 1) if operand == "a" else s.reshape(1, cols)).expand(rows, cols)
    k = cols if operand == "a" else rows  # the contracted dimension
    outer = rows if operand == "a" else cols
    k_block = torch.arange(k) // 128
    if recipe == BLOCK_1X128:  # (outer, K/128)
        per = s[torch.arange(outer)[:, None], k_block[None, :]]  # (outer, K)
    elif recipe == BLOCK_128X128:  # (K/128 padded, outer/128)
        per = s[k_block[None, :], (torch.arange(outer) // 128)[:, None]]  # (outer, K)
    else:
        _refuse(f"with scaling recipe {recipe}")
    return per if operand == "a" else per.t()


def scaled_mm_v2(mat_a: Tensor, mat_b: Tensor, scale_a: list[Tensor], recipe_a: list[int], swizzle_a: list[int],
                 scale_b: list[Tensor], recipe_b: list[int], swizzle_b: list[int], bias: Tensor | None = None,
                 out_dtype: torch.dtype | None = None, contraction_dim: list[int] = (),  # type: ignore[assignment]
                 use_fast_accum: bool = False) -> Tensor:
    """aten::_scaled_mm_v2 by CUDA's formula (the module docstring); fast accumulation is exact here."""
    if len(scale_a) != 1 or len(scale_b) != 1:
        _refuse("with two-level scales")
    if any(s != NO_SWIZZLE for s in (*swizzle_a, *swizzle_b)):
        _refuse("with swizzled scales")
    if tuple(contraction_dim) not in ((), (1, 0), (-1, 0), (1, -2), (-1, -2)):
        raise RuntimeError(f"_scaled_mm_v2: contraction_dim must be empty or (1, 0), got {list(contraction_dim)}")
    (m, k), n = mat_a.shape, mat_b.shape[1]
    a = mat_a.to(torch.float32) * decode_scales(scale_a[0], recipe_a[0], m, k, "a")
    b = mat_b.to(torch.float32) * decode_scales(scale_b[0], recipe_b[0], k, n, "b")
    out = a @ b
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out.to(out_dtype or mat_a.dtype)


STAND_INS: dict[Any, Any] = {aten._scaled_mm_v2: scaled_mm_v2} if cuda_build.host_lacks("_scaled_mm_v2") else {}
