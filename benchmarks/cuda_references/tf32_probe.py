"""How a GPU computes float32 matmuls and convolutions under TF32 (the simulation computes them in float32;
docs/simulated-device-suite.md, r31), printed as JSON: for each case, the largest relative difference of the
GPU's result from float64, and from float64 of the inputs rounded to TF32's 10-bit mantissa by
round-to-nearest-even and by truncation. Whichever rounding leaves the GPU within float32 accumulation error
(~1e-6) is the one a simulation of TF32 should apply to the inputs.

    python benchmarks/cuda_references/tf32_probe.py            # on a GPU (one, any)
"""
from __future__ import annotations

import json

import torch
import torch.nn.functional as F


def tf32(x: torch.Tensor, mode: str) -> torch.Tensor:
    """float32 -> the nearest (rne) or the truncated (rz) TF32 value, kept in float32."""
    bits = x.float().contiguous().view(torch.int32)
    if mode == "rne":
        bits = bits + 0xFFF + ((bits >> 13) & 1)
    return (bits & ~0x1FFF).view(torch.float32)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()


def main() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(256, 512), torch.randn(512, 128)
    x, w = torch.randn(4, 8, 16, 16), torch.randn(16, 8, 3, 3)
    out: dict[str, object] = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                              "cudnn.allow_tf32 default": torch.backends.cudnn.allow_tf32,
                              "matmul.allow_tf32 default": torch.backends.cuda.matmul.allow_tf32}
    for allow in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow
        mm = (a.cuda() @ b.cuda()).cpu()
        conv = F.conv2d(x.cuda(), w.cuda(), padding=1).cpu()
        for name, got, exact in (("mm", mm, lambda f: f(a).double() @ f(b).double()),
                                 ("conv", conv, lambda f: F.conv2d(f(x).double(), f(w).double(), padding=1))):
            out[f"{name}|tf32={allow}"] = {mode: rel(got, exact(f)) for mode, f in
                                           (("fp32", lambda t: t), ("rne", lambda t: tf32(t, "rne")),
                                            ("rz", lambda t: tf32(t, "rz")))}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
