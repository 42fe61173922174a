"""What simgpu/cuda_sim/tf32_kernels.py assumes of TF32 beyond tf32_probe.py's one mm, printed as JSON: with CUDA
matmul TF32 on, for each GEMM form (bmm, baddbmm, addmm with a 1-D bias (cuBLASLt's path) and with a 2-D C,
nn.Linear on a 3-D input, a transposed operand), matrix-vector products (mv) and subnormal inputs, the largest
relative difference of the result from float64 of candidate formulas: "fp32" (no rounding), "rne" (the matrix
operands rounded to TF32 by round-to-nearest-even, the added operand not), "rne_bias" (the added operand rounded
too) and, for subnormals, "rne_ftz" (subnormal inputs flushed to zero, then rounded). The formula within float32
accumulation (~1e-6) is the GPU's; "specials" records where inf and NaN inputs lead.

    python benchmarks/cuda_references/tf32_ops_probe.py                       # on a GPU (one, any)
    simgpu run --gpus 1 python benchmarks/cuda_references/tf32_ops_probe.py   # the simulation's answers
"""
from __future__ import annotations

import json
from typing import Callable

import torch
import torch.nn.functional as F


def rne(x: torch.Tensor) -> torch.Tensor:
    """float32 -> the nearest TF32 value (ties to even), kept in float32; inf and NaN kept."""
    bits = x.float().contiguous().view(torch.int32)
    out = ((bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isnan(x), x, out)


def ftz(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(x), x)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference relative to the larger of the two (0 where both are all zeros: a flushed result)."""
    scale = max(a.double().abs().max().item(), b.double().abs().max().item())
    return 0.0 if scale == 0 else (a.double() - b.double()).abs().max().item() / scale


def main() -> None:
    torch.manual_seed(0)
    gpu = torch.device("cuda")
    a, b = torch.randn(256, 512), torch.randn(512, 128)
    a3, b3, c3 = torch.randn(4, 64, 256), torch.randn(4, 256, 32), torch.randn(4, 64, 32)
    bias, c2 = torch.randn(128) * 100, torch.randn(256, 128) * 100  # large: rounding them would show
    x3, w = torch.randn(3, 7, 512), torch.randn(128, 512)
    v = torch.randn(512)
    tiny = torch.randn(64, 256) * 1e-39  # mostly subnormal
    big = torch.randn(256, 32) * 1e30
    d = torch.float64
    same = lambda t: t  # noqa: E731
    # name -> (the GPU's op, its float64 formula given how the matrix operands (f) and the added one (g) are taken)
    cases: dict[str, tuple[Callable[[], torch.Tensor], Callable[[Callable, Callable], torch.Tensor]]] = {
        "bmm": (lambda: torch.bmm(a3.to(gpu), b3.to(gpu)), lambda f, g: f(a3).to(d) @ f(b3).to(d)),
        "baddbmm": (lambda: torch.baddbmm(c3.to(gpu), a3.to(gpu), b3.to(gpu), beta=0.5),
                    lambda f, g: 0.5 * g(c3).to(d) + f(a3).to(d) @ f(b3).to(d)),
        "addmm_bias1d": (lambda: torch.addmm(bias.to(gpu), a.to(gpu), b.to(gpu)),
                         lambda f, g: g(bias).to(d) + f(a).to(d) @ f(b).to(d)),
        "addmm_c2d_beta": (lambda: torch.addmm(c2.to(gpu), a.to(gpu), b.to(gpu), beta=0.5),
                           lambda f, g: 0.5 * g(c2).to(d) + f(a).to(d) @ f(b).to(d)),
        "linear3d": (lambda: F.linear(x3.to(gpu), w.to(gpu), bias.to(gpu)),
                     lambda f, g: f(x3).to(d) @ f(w).to(d).t() + g(bias).to(d)),
        "mm_transposed": (lambda: b.t().to(gpu) @ a.t().to(gpu), lambda f, g: f(b).to(d).t() @ f(a).to(d).t()),
        "mv": (lambda: a.to(gpu) @ v.to(gpu), lambda f, g: f(a).to(d) @ f(v).to(d)),
        "mm_subnormal": (lambda: tiny.to(gpu) @ big.to(gpu), lambda f, g: f(tiny).to(d) @ f(big).to(d)),
    }
    torch.backends.cuda.matmul.allow_tf32 = True
    out: dict[str, object] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                              "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32}
    for name, (run, formula) in cases.items():
        got = run().cpu()
        answers = {"fp32": rel(got, formula(same, same)), "rne": rel(got, formula(rne, same)),
                   "rne_bias": rel(got, formula(rne, rne))}
        if name == "mm_subnormal":
            answers["rne_ftz"] = rel(got, formula(lambda t: rne(ftz(t)), same))
        out[name] = answers
    special = a.clone()
    special[0, 0], special[1, 0] = float("inf"), float("nan")
    got = (special.to(gpu) @ b.abs().to(gpu)).cpu()
    out["specials"] = {"inf_row_all_inf": bool(torch.isinf(got[0]).all()), "nan_row_all_nan": bool(torch.isnan(got[1]).all()),
                       "other_rows_finite": bool(torch.isfinite(got[2:]).all())}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
