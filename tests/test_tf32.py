"""TF32 for float32 matmuls on simulated GPUs (simgpu/cuda_sim/tf32_kernels.py): the rounding against an independent
round-to-nearest-even, the recorded H200 answer the simulation follows, programs under `simgpu run` (with data and
as a plan, which has no values to round)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch

from simgpu.cuda_sim.tf32_kernels import round_to_tf32
from tests.test_simgpu_run import SCRIPTS, simgpu_run

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "benchmarks" / "results" / "plan33-host-h200-2026-11-27" / "tf32-h200.json"
H200_OPS = H200.with_name("tf32-ops-h200.json")  # benchmarks/cuda_references/tf32_ops_probe.py on an H200


def _rne_reference(x: float) -> float:
    """x to 11 significant bits (TF32's 10 stored and the implicit one), ties to even, by Python's arithmetic."""
    if not math.isfinite(x) or x == 0.0:
        return x
    mantissa, exponent = math.frexp(x)  # |mantissa| in [0.5, 1): 11 bits are mantissa * 2**11's integer part
    return math.ldexp(round(mantissa * 2 ** 11), exponent - 11)  # round(): half to even, exact in float64


def test_round_to_tf32_is_round_to_nearest_even() -> None:
    torch.manual_seed(0)
    bits = torch.randint(-2 ** 31, 2 ** 31 - 1, (20000,), dtype=torch.int32)
    ties = (bits & ~0x1FFF) | 0x1000  # exactly halfway between two TF32 values: even wins
    normal = torch.cat([bits, ties]).view(torch.float32)
    normal = normal[torch.isfinite(normal) & (normal.abs() >= torch.finfo(torch.float32).tiny)
                    & (normal.abs() < 3.39e38)]  # past TF32's largest, float32's exponent range ends
    got = round_to_tf32(normal)
    want = torch.tensor([_rne_reference(v) for v in normal.tolist()], dtype=torch.float32)
    assert torch.equal(got, want)
    assert (got.view(torch.int32) & 0x1FFF == 0).all()


def test_round_to_tf32_keeps_specials_and_layout() -> None:
    nan_bits = torch.tensor([0x7FFFFFFF, -1, 0x7F800001, 0x7FC00000], dtype=torch.int32)  # wrap-prone NaNs
    assert torch.isnan(round_to_tf32(nan_bits.view(torch.float32))).all()
    big = torch.finfo(torch.float32).max
    x = torch.tensor([math.inf, -math.inf, 0.0, -0.0, big, -big, 1e-40, -1e-45])
    got = round_to_tf32(x)
    assert got[:2].tolist() == [math.inf, -math.inf]
    assert got[2:4].tolist() == [0.0, -0.0] and math.copysign(1, got[3].item()) == -1
    assert got[4:6].tolist() == [math.inf, -math.inf]  # beyond TF32's largest: rounds up to infinity
    assert got[6:7].view(torch.int32).item() == 0x12000  # subnormal 0x116C2 rounded as its bits fall, not flushed
    assert got[7].item() == 0.0 and math.copysign(1, got[7].item()) == -1  # the smallest subnormal rounds to -0
    t = torch.randn(8, 6).t()  # a transposed operand keeps its strides (the host's kernel sees the same layout)
    assert round_to_tf32(t).stride() == t.stride() and torch.equal(round_to_tf32(t), round_to_tf32(t.contiguous()))


def test_recorded_h200_answer_is_the_one_simulated() -> None:
    """The H200's record (benchmarks/cuda_references/tf32_probe.py, torch 2.11): with matmul TF32 on, mm equals
    float64 of the RNE-rounded inputs (not truncated ones) to float32 accumulation and is far from float32's;
    with it off, float32's; the convolution with cuDNN's TF32 allowed came out in float32 accuracy (not rounded
    here)."""
    record = json.loads(H200.read_text())
    assert record["gpu"] == "NVIDIA H200" and record["matmul.allow_tf32 default"] is False
    on, off = record["mm|tf32=True"], record["mm|tf32=False"]
    assert on["rne"] < 1e-6 and on["fp32"] > 1e-4 and on["rz"] > 1e-4
    assert off["fp32"] < 1e-6 and off["rne"] > 1e-4
    assert record["conv|tf32=True"]["fp32"] < 1e-6 and record["conv|tf32=True"]["rne"] > 1e-4


def test_recorded_h200_gemm_forms_are_the_ones_simulated() -> None:
    """The H200's answers for every GEMM form tf32_kernels rounds (tf32_ops_probe.py, torch 2.11): each within
    float32 accumulation of its matrix operands rounded by RNE with the added operand (bias, C) not rounded, far
    from plain float32; mv not rounded; subnormals rounded, not flushed; inf and NaN rows stay so."""
    record = json.loads(H200_OPS.read_text())
    assert record["gpu"] == "NVIDIA H200" and record["matmul.allow_tf32"] is True
    for form in ("bmm", "baddbmm", "addmm_bias1d", "addmm_c2d_beta", "linear3d", "mm_transposed", "mm_subnormal"):
        assert record[form]["rne"] < 2e-6 and record[form]["fp32"] > 1e-5, form
    for form in ("baddbmm", "addmm_bias1d", "addmm_c2d_beta", "linear3d"):
        assert record[form]["rne_bias"] > 1e-5, form  # the added operand is not rounded
    assert record["mv"]["fp32"] < 1e-6 and record["mv"]["rne"] > 1e-5
    assert record["mm_subnormal"]["rne_ftz"] > 1e-2
    assert all(record["specials"].values())


def test_tf32_matmuls_on_a_simulated_gpu() -> None:
    done = simgpu_run(1, str(SCRIPTS / "tf32_matmul.py"))
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK tf32_matmul" in done.stdout


def test_a_plan_with_tf32_rounds_nothing() -> None:
    """Storage-less tensors hold no values: a plan's matmuls under TF32 run their meta kernels, as without it."""
    program = ("import torch\n"
               "from simgpu.cuda_sim import tf32_kernels\n"
               "tf32_kernels.round_to_tf32 = None  # called on a storage-less tensor: a TypeError\n"
               "torch.backends.cuda.matmul.allow_tf32 = True\n"
               "lin = torch.nn.Linear(256, 48).cuda()\n"
               "y = lin(torch.randn(64, 256, device='cuda') @ torch.randn(256, 256, device='cuda'))\n"
               "y.sum().backward()\n"
               "assert tf32_kernels.enabled() and y.shape == (64, 48) and lin.weight.grad.shape == (48, 256)\n"
               "print('OK plan tf32')\n")
    done = simgpu_run(1, "--plan", "h100-80g", sys.executable, "-c", program)
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert "OK plan tf32" in done.stdout
