"""LU without pivoting on simulated GPUs: CUDA has the kernel (cuSOLVER/MAGMA getrf without a pivot array), the
host refuses it ("linalg.lu_factor: LU without pivoting is not implemented on the CPU").

`torch.linalg.lu(A, pivot=False)`, `lu_factor(A, pivot=False)` and `lu_factor_ex(A, pivot=False)` reach
`linalg_lu` and `linalg_lu_factor_ex`. Here both follow CUDA's outputs: Doolittle's elimination over the
batch (no row exchanges), L unit lower triangular (m x k), U upper triangular (k x n), k = min(m, n), P
empty (torch's meta function and CUDA give (0,)); lu_factor's pivots are the trivial permutation 1..k
(int32, LAPACK's 1-based form, as CUDA fills them), info the 1-based index of the first zero pivot (0 when
none), as getrf reports it. A zero pivot's column is not divided (LAPACK's getf2 skips it; on an H200 the
factors of [[0, 1], [1, 0]] stay finite, benchmarks/cuda_references/integer_remainder_by_zero.py), and
lu_factor, which checks info, raises torch's own error. Calls with pivoting, and host tensors, run the
host's kernel.
"""
from __future__ import annotations

from typing import Any

import torch

Tensor = torch.Tensor
aten = torch.ops.aten


def lu_no_pivot(A: Tensor) -> tuple[Tensor, Tensor]:
    """(LU packed as getrf gives it: U on and above the diagonal, L's multipliers below, info) for A's batch."""
    lu = A.clone(memory_format=torch.contiguous_format)
    m, n = A.shape[-2], A.shape[-1]
    info = torch.zeros(A.shape[:-2], dtype=torch.int32)
    for j in range(min(m, n)):
        pivot = lu[..., j, j]
        info = torch.where((info == 0) & (pivot == 0), torch.tensor(j + 1, dtype=torch.int32), info)
        if j + 1 < m:
            # a zero pivot's column is left unscaled (LAPACK's getf2 does so, and an H200's factors stay finite)
            lu[..., j + 1:, j] /= torch.where(pivot == 0, torch.ones((), dtype=lu.dtype), pivot).unsqueeze(-1)
            if j + 1 < n:
                lu[..., j + 1:, j + 1:] -= lu[..., j + 1:, j:j + 1] * lu[..., j:j + 1, j + 1:]
    return lu, info


def _on_a_gpu(A: Tensor) -> bool:
    """Whether A is on a simulated GPU: a host tensor gets the host's kernel (and its refusal)."""
    from simgpu.cuda_sim import devices

    return devices.device_of(A) is not None


def _like(template: Tensor, value: Tensor) -> Tensor:
    """`value` in a host tensor with the shape and strides of torch's meta output `template` (CUDA's layout:
    LU column-major, as cuSOLVER writes it)."""
    out = torch.empty_strided(template.shape, template.stride(), dtype=template.dtype)
    return out.copy_(value)


def linalg_lu(A: Tensor, *, pivot: bool = True, **out: Any) -> Any:
    """aten::linalg_lu: CUDA's (P, L, U) without pivoting; the host's otherwise."""
    if pivot or out or not _on_a_gpu(A):
        return (aten.linalg_lu.out if out else aten.linalg_lu.default)(A, pivot=pivot, **out)
    meta = _checked(aten.linalg_lu.default, A)
    lu, _ = lu_no_pivot(A)
    k = min(A.shape[-2], A.shape[-1])
    lower = lu[..., :, :k].tril(-1) + torch.eye(A.shape[-2], k, dtype=A.dtype)
    upper = lu[..., :k, :].triu()
    # P is empty without pivoting (torch's meta function says so; CUDA returns it so)
    return _like(meta[0], torch.empty(0, dtype=A.dtype)), _like(meta[1], lower), _like(meta[2], upper)


def linalg_lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False, **out: Any) -> Any:
    """aten::linalg_lu_factor_ex: CUDA's (LU, pivots, info) without pivoting; the host's otherwise."""
    if pivot or out or not _on_a_gpu(A):
        return (aten.linalg_lu_factor_ex.out if out else aten.linalg_lu_factor_ex.default)(
            A, pivot=pivot, check_errors=check_errors, **out)
    meta = _checked(aten.linalg_lu_factor_ex.default, A)
    lu, info = lu_no_pivot(A)
    k = min(A.shape[-2], A.shape[-1])
    pivots = torch.arange(1, k + 1, dtype=torch.int32).expand(*A.shape[:-2], k)
    if check_errors:
        torch._linalg_check_errors(info, "torch.linalg.lu_factor_ex", is_matrix=A.dim() == 2)
    return _like(meta[0], lu), _like(meta[1], pivots), _like(meta[2], info)


_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def _checked(op: Any, A: Tensor) -> Any:
    """torch's meta outputs for the call, after its own checks of the arguments (the dimensions, a floating
    dtype), and the dtypes the factorization has kernels for (not half precision, on CUDA as on the host)."""
    meta = op(A.to("meta"), pivot=False)
    if A.dtype not in _DTYPES:
        raise NotImplementedError(f'"lu_factor" not implemented for \'{_C_NAMES.get(A.dtype, A.dtype)}\'')
    return meta


_C_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.complex32: "ComplexHalf"}


STAND_INS = {aten.linalg_lu: linalg_lu, aten.linalg_lu_factor_ex: linalg_lu_factor_ex}
