"""Measured rates of one GPU for the ops a training step spends its time in: the table `simgpu run
--plan` prices each op against (issue 33, docs/plan-mode.md).

    python benchmarks/plan_reference/calibrate.py --out calibrate.json             # on the GPU box
    python benchmarks/plan_reference/calibrate.py --device cpu --quick --out x.json  # a smoke run

Plain torch (no simgpu import). Each case: warm-up runs, then `--repeats` runs timed with CUDA events
(wall time around a synchronize on the CPU), median and spread in milliseconds. With each case its
FLOPs as torch.utils.flop_counter counts them (the count the plan mode will use, so the rate is in
the same units) and the bytes it must move at least (inputs read once, outputs written once), so one
file gives both the achieved TFLOP/s and GB/s of every case. One JSON file, `--out`.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}


class Timer:
    """Median time of a callable: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device, warmup: int, repeats: int):
        self.device, self.warmup, self.repeats = device, warmup, repeats

    def __call__(self, fn: Callable[[], Any]) -> dict[str, float]:
        for _ in range(self.warmup):
            fn()
        times = []
        cuda = self.device.type == "cuda"
        for _ in range(self.repeats):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        times.sort()
        return {"median_ms": statistics.median(times), "min_ms": times[0], "max_ms": times[-1],
                "repeats": len(times)}


def flops_of(fn: Callable[[], Any]) -> int:
    """The FLOPs torch's flop counter gives the call (0 for ops it has no formula for)."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def record(timer: Timer, kind: str, params: dict, fn: Callable[[], Any], moved_bytes: int) -> dict:
    """Time `fn`, count its FLOPs, and derive the achieved rates; a case that fails (out of memory, no
    kernel for this GPU) is recorded with its error, and the run goes on."""
    try:
        flops = flops_of(fn)
        timing = timer(fn)
    except (RuntimeError, torch.OutOfMemoryError) as error:
        return {"kind": kind, **params, "error": str(error).splitlines()[0][:200]}
    seconds = timing["median_ms"] / 1e3
    return {"kind": kind, **params, "flops": flops, "bytes": moved_bytes, **timing,
            "tflops": flops / seconds / 1e12 if seconds else None,
            "gbps": moved_bytes / seconds / 1e9 if seconds else None}


def matmuls(timer: Timer, device: torch.device, quick: bool) -> list[dict]:
    """torch.mm at square, large and skinny shapes (M, N, K), in each dtype; fp32 with and without TF32."""
    shapes = [(256, 256, 256), (64, 512, 512)] if quick else [
        (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
        (8192, 2048, 8192), (8192, 8192, 2048), (16384, 4096, 4096), (32768, 1024, 4096),
        (16, 8192, 8192), (128, 8192, 8192), (1024, 8192, 8192), (8192, 8192, 128), (8192, 50304, 1024)]
    out = []
    for name in ("bf16", "fp16", "tf32", "fp32"):
        if quick and name in ("fp16", "tf32"):
            continue
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        for m, n, k in shapes:
            if name == "fp32" and m * n * k > 4096 ** 3:
                continue  # full fp32 is ~15x slower than bf16: its large shapes add minutes, no information
            a = torch.randn(m, k, device=device, dtype=DTYPES[name])
            b = torch.randn(k, n, device=device, dtype=DTYPES[name])
            c = torch.empty(m, n, device=device, dtype=DTYPES[name])
            out.append(record(timer, "mm", {"dtype": name, "shape": [m, n, k]},
                              lambda: torch.mm(a, b, out=c), nbytes(a, b, c)))
            del a, b, c
    torch.backends.cuda.matmul.allow_tf32 = False
    return out


def attention(timer: Timer, device: torch.device, quick: bool) -> list[dict]:
    """scaled_dot_product_attention, forward and forward+backward, per backend (flash, efficient), causal."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shapes = [(2, 4, 64, 32)] if quick else [
        (8, 16, 1024, 64), (4, 16, 2048, 128), (4, 16, 2048, 64), (1, 32, 4096, 128), (2, 16, 8192, 128)]
    backends = {"math": SDPBackend.MATH} if device.type == "cpu" else {
        "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    out = []
    for label, backend in backends.items():
        for b, h, s, d in shapes:
            for causal in (True, False):
                q, k, v = (torch.randn(b, h, s, d, device=device, dtype=torch.bfloat16, requires_grad=True)
                           for _ in range(3))
                grad = torch.randn(b, h, s, d, device=device, dtype=torch.bfloat16)
                params = {"backend": label, "dtype": "bf16", "shape": [b, h, s, d], "causal": causal}

                def forward():
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def forward_backward():
                    forward().backward(grad)

                out.append(record(timer, "sdpa_fwd", params, forward, nbytes(q, k, v, grad)))
                out.append(record(timer, "sdpa_fwd_bwd", params, forward_backward, 3 * nbytes(q, k, v, grad)))
                del q, k, v, grad
    return out


def memory_bound(timer: Timer, device: torch.device, quick: bool) -> list[dict]:
    """Elementwise ops, a reduction, layernorm/RMSNorm forward+backward, embedding, cross-entropy, AdamW."""
    out = []
    sizes = [1 << 16] if quick else [1 << 20, 1 << 24, 1 << 27]
    for dtype_name in ("fp32", "bf16"):
        dtype = DTYPES[dtype_name]
        for n in sizes:
            x = torch.randn(n, device=device, dtype=dtype)
            y = torch.randn(n, device=device, dtype=dtype)
            z = torch.empty_like(x)
            params = {"dtype": dtype_name, "numel": n}
            out.append(record(timer, "add", params, lambda: torch.add(x, y, out=z), nbytes(x, y, z)))
            out.append(record(timer, "copy", params, lambda: z.copy_(x), nbytes(x, z)))
            out.append(record(timer, "mul_scalar", params, lambda: torch.mul(x, 0.5, out=z), nbytes(x, z)))
            out.append(record(timer, "gelu", params, lambda: F.gelu(x), nbytes(x, z)))
            out.append(record(timer, "sum", params, lambda: x.sum(), nbytes(x)))
            del x, y, z
    rows = [(512, 256)] if quick else [(8192, 1024), (8192, 4096), (16384, 8192)]
    for (tokens, width), dtype_name in ((row, name) for row in rows for name in ("fp32", "bf16")):
        dtype = DTYPES[dtype_name]  # fp32: a norm under autocast; bf16: under FSDP2's bf16 parameters
        x = torch.randn(tokens, width, device=device, dtype=dtype, requires_grad=True)
        grad = torch.randn_like(x)
        for label, norm in (("layernorm", torch.nn.LayerNorm(width)), ("rmsnorm", torch.nn.RMSNorm(width))):
            norm = norm.to(device, dtype)
            params = {"dtype": dtype_name, "shape": [tokens, width]}
            out.append(record(timer, f"{label}_fwd", params, lambda: norm(x), 2 * nbytes(x)))
            out.append(record(timer, f"{label}_fwd_bwd", params, lambda: norm(x).backward(grad), 5 * nbytes(x)))
        del x, grad
    vocab_rows = [(128, 64, 256)] if quick else [(32768, 1024, 8192), (32768, 2048, 8192), (50304, 4096, 8192)]
    for vocab, width, tokens in vocab_rows:
        emb = torch.nn.Embedding(vocab, width).to(device)
        ids = torch.randint(0, vocab, (tokens,), device=device)
        grad = torch.randn(tokens, width, device=device)
        params = {"dtype": "fp32", "vocab": vocab, "width": width, "tokens": tokens}
        out.append(record(timer, "embedding_fwd", params, lambda: emb(ids), 2 * nbytes(grad)))
        out.append(record(timer, "embedding_fwd_bwd", params, lambda: emb(ids).backward(grad),
                          4 * nbytes(grad) + nbytes(emb.weight)))
        logits = torch.randn(tokens, vocab, device=device, dtype=torch.bfloat16, requires_grad=True)
        out.append(record(timer, "cross_entropy_fwd_bwd", {"dtype": "bf16", "vocab": vocab, "tokens": tokens},
                          lambda: F.cross_entropy(logits.float(), ids).backward(), 4 * nbytes(logits)))
        del emb, ids, grad, logits
    counts = [(8, 1 << 14)] if quick else [(64, 1 << 20), (16, 1 << 24)]
    for tensors, numel in counts:
        for fused in ((False, True) if device.type == "cuda" else (False,)):
            ps = [torch.randn(numel, device=device, requires_grad=True) for _ in range(tensors)]
            for p in ps:
                p.grad = torch.randn_like(p)
            opt = torch.optim.AdamW(ps, lr=1e-3, fused=fused or None, foreach=None if fused else True)
            opt.step()  # creates the state
            out.append(record(timer, "adamw_step", {"fused": fused, "tensors": tensors, "numel": numel,
                                                    "dtype": "fp32"},
                              opt.step, 7 * 4 * tensors * numel))  # p, grad, m, v read; p, m, v written
            del ps, opt
    return out


def environment(device: torch.device) -> dict:
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(gpu=props.name, total_memory=props.total_memory, sm_count=props.multi_processor_count,
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                   nccl=str(torch.cuda.nccl.version()))
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny shapes: a smoke run of the script")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        if device.index is None:  # set_device needs an index ("cuda" alone raises ValueError)
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    timer = Timer(device, args.warmup, args.repeats)
    started = time.perf_counter()
    results = {"environment": environment(device), "warmup": args.warmup, "repeats": args.repeats}
    for name, section in (("matmul", matmuls), ("attention", attention), ("memory_bound", memory_bound)):
        t0 = time.perf_counter()
        results[name] = section(timer, device, args.quick)
        print(f"calibrate: {name}: {len(results[name])} cases in {time.perf_counter() - t0:.1f} s", flush=True)
    results["seconds"] = time.perf_counter() - started
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    best = max((r["tflops"] for r in results["matmul"] if r["dtype"] == "bf16"), default=math.nan)
    print(f"calibrate: wrote {args.out} in {results['seconds']:.1f} s; best bf16 mm {best:.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
