"""torch._scaled_mm_v2 by CUDA's formula (simgpu/cuda_sim/scaled_mm_kernels.py), the simulated GPU's kernel where
the installed torch has no CPU one (torch 2.11): checked against torch's own CPU kernel where it has one
(tensorwise, rowwise) and against a block-by-block float64 reference for the blockwise recipes."""
from __future__ import annotations

import pytest
import torch

from simgpu.cuda_sim import scaled_mm_kernels as smk

M, K, N = 256, 512, 384


def _fp8(*shape: int) -> torch.Tensor:
    return (torch.randn(*shape) * 4).to(torch.float8_e4m3fn)


def _blockwise_reference(a, b, sa, ra, sb, rb) -> torch.Tensor:
    """Each (row, 128 of K) or (128 rows, 128 of K) block decoded by its own scale, summed in float64."""
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for kb in range(a.shape[1] // 128):
        ks = slice(kb * 128, (kb + 1) * 128)
        a_part = a[:, ks].double()
        b_part = b[ks, :].double()
        fa = sa[:, kb:kb + 1].double() if ra == smk.BLOCK_1X128 else \
            sa[kb].double().repeat_interleave(128)[:, None]
        fb = sb[:, kb][None, :].double() if rb == smk.BLOCK_1X128 else \
            sb[kb].double().repeat_interleave(128)[None, :]
        out += (a_part * fa) @ (b_part * fb)
    return out


@pytest.mark.parametrize("recipes", [(smk.BLOCK_1X128, smk.BLOCK_1X128), (smk.BLOCK_128X128, smk.BLOCK_1X128),
                                     (smk.BLOCK_1X128, smk.BLOCK_128X128)])
def test_blockwise_scales_decode_each_block(recipes) -> None:
    torch.manual_seed(0)
    ra, rb = recipes
    a, b = _fp8(M, K), _fp8(K, N)
    pad = -(-(K // 128) // 4) * 4  # K/128 rounded up to 4, as the 128x128 layout pads it
    sa = torch.rand(M, K // 128) + 0.5 if ra == smk.BLOCK_1X128 else torch.rand(pad, M // 128) + 0.5
    sb = torch.rand(N, K // 128) + 0.5 if rb == smk.BLOCK_1X128 else torch.rand(pad, N // 128) + 0.5
    got = smk.scaled_mm_v2(a, b, [sa], [ra], [0], [sb], [rb], [0], None, torch.float32)
    want = _blockwise_reference(a, b, sa, ra, sb, rb)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("recipe", [smk.TENSOR_WISE, smk.ROW_WISE])
def test_tensorwise_and_rowwise_equal_torchs_cpu_kernel(recipe) -> None:
    if not hasattr(torch.ops.aten, "_scaled_mm_v2") or smk.STAND_INS:
        pytest.skip("this torch has no CPU _scaled_mm_v2 to compare with (the box's 2.11 sweep checks it there)")
    torch.manual_seed(1)
    a, b = _fp8(15, 16), _fp8(32, 16).t()
    sa, sb = (torch.rand(1) + 0.5, torch.rand(1) + 0.5) if recipe == smk.TENSOR_WISE else \
        (torch.rand(15, 1) + 0.5, torch.rand(1, 32) + 0.5)
    bias = torch.randn(32).to(torch.bfloat16)
    args = (a, b, [sa], [recipe], [0], [sb], [recipe], [0], bias, torch.bfloat16)
    torch.testing.assert_close(smk.scaled_mm_v2(*args), torch.ops.aten._scaled_mm_v2(*args), rtol=1e-2, atol=1e-2)


def test_the_stand_in_is_used_only_where_the_host_lacks_the_kernel() -> None:
    has_cpu = hasattr(torch.ops.aten, "_scaled_mm_v2") and torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::_scaled_mm_v2", "CPU")
    assert bool(smk.STAND_INS) == (hasattr(torch.ops.aten, "_scaled_mm_v2") and not has_cpu)


def test_swizzled_and_microscaling_recipes_are_refused_in_one_line() -> None:
    a, b = _fp8(32, 128), _fp8(128, 32)
    s = torch.ones(1)
    with pytest.raises(NotImplementedError, match=r"^simgpu: torch._scaled_mm_v2 with swizzled scales cannot run"):
        smk.scaled_mm_v2(a, b, [s], [0], [1], [s], [0], [0])
    with pytest.raises(NotImplementedError, match=r"scaling recipe 3 cannot run on simulated GPUs"):
        smk.scaled_mm_v2(a, b, [torch.ones(32, 4)], [3], [0], [s], [0], [0])
