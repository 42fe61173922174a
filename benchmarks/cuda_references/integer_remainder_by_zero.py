"""What CUDA answers where the host raises or differs (issue 26's op-layer fixes), printed as JSON lines so a GPU run
and a simulated run can be compared line by line:

    python benchmarks/cuda_references/integer_remainder_by_zero.py > gpu.json                    # on a GPU
    python -m simgpu run --gpus 1 python benchmarks/cuda_references/integer_remainder_by_zero.py > sim.json
    diff gpu.json sim.json

It prints: integer remainder, fmod and `%` by zero for every integer dtype (the simulation gives the
dividend); LU without pivoting's P shape, pivots, info for a zero pivot and lu_factor's error; half-precision
batch/layer norm statistics' dtypes and shapes in training and evaluation; trace's dtype under autocast.
"""
from __future__ import annotations

import json

import torch

aten = torch.ops.aten


def main() -> None:
    out: dict[str, object] = {"torch": torch.__version__}
    dividend = [7, -7, 0, 127, -128, 5]
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        a = torch.tensor([abs(v) if dtype == torch.uint8 else v for v in dividend], dtype=dtype, device="cuda")
        zero = torch.zeros_like(a)
        name = str(dtype).replace("torch.", "")
        out[f"remainder|{name}"] = torch.remainder(a, zero).tolist()
        out[f"fmod|{name}"] = torch.fmod(a, zero).tolist()
        out[f"rmod_scalar|{name}"] = (3 % zero).tolist()
        out[f"remainder_scalar0|{name}"] = torch.remainder(a, 0).tolist()
    A = torch.tensor([[2.0, 1.0], [4.0, 5.0]], device="cuda", dtype=torch.float64)
    P, L, U = torch.linalg.lu(A, pivot=False)
    out["lu_no_pivot"] = {"P": list(P.shape), "L": L.tolist(), "U": U.tolist()}
    LU, pivots, info = torch.linalg.lu_factor_ex(torch.tensor([[0.0, 1.0], [1.0, 0.0]], device="cuda"), pivot=False)
    out["lu_zero_pivot"] = {"pivots": pivots.tolist(), "info": info.item(), "LU_finite": bool(LU.isfinite().all())}
    try:
        torch.linalg.lu_factor(torch.tensor([[0.0, 1.0], [1.0, 0.0]], device="cuda"), pivot=False)
        out["lu_factor_zero_pivot"] = "no error"
    except RuntimeError as e:
        out["lu_factor_zero_pivot"] = str(e)[:60]
    x = torch.randn(4, 3, 5, device="cuda", dtype=torch.float16)
    rm, rv = torch.zeros(3, device="cuda", dtype=torch.float16), torch.ones(3, device="cuda", dtype=torch.float16)
    for training in (True, False):
        stats = aten.native_batch_norm(x, None, None, rm, rv, training, 0.1, 1e-5)
        out[f"batch_norm_fp16_training={training}"] = [[str(t.dtype), list(t.shape)] for t in stats]
    stats = aten.native_layer_norm(x, [5], None, None, 1e-5)
    out["layer_norm_fp16"] = [[str(t.dtype), list(t.shape)] for t in stats]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out["trace_autocast_fp16"] = str(torch.trace(x[0, :, :3]).dtype)
    for key in sorted(out):  # one line per answer: the two runs diff line by line
        print(json.dumps({key: out[key]}))


if __name__ == "__main__":
    main()
