"""Measured rates for the ops a plan would misprice at one large-matmul rate and one streaming bandwidth
(plan.Recorder.op): attention kernels and the optimizers' foreach kernels. Both from the H200's
calibrate.json (benchmarks/results/plan33-h200-x4-2026-11-26, benchmarks/plan_reference/calibrate.py).

- Attention (`_scaled_dot_product_flash_attention`, `_efficient_attention`, their backwards): the
  FLOPs torch.utils.flop_counter counts (a causal mask not discounted) at the rate the H200 reached on
  the nearest calibrated shape (sequence length and head size, on a log scale) of the same kernel,
  mask kind and direction: 151-584 TFLOP/s for FlashAttention in bf16 where the large-matmul rate is
  690, lower for short sequences and small heads. The backward's rate is the forward+backward case less
  the forward one. A GPU is given the H200's rate in proportion to its own bf16 matmul rate (the H100's
  is uncalibrated: the H200's proportions are assumed there), and another dtype the ratio of its matmul
  rate to bf16's.
- Foreach kernels (`_foreach_*`: torch's optimizers with foreach=True): FOREACH_EFFICIENCY of the
  streaming bandwidth, from AdamW's foreach step over 16 fp32 tensors of 16 Mi elements (6.25 ms
  measured; its ops' bytes at 4000 GB/s are 3.76 ms). Judged on the other case measured, 64 tensors of
  1 Mi elements: 1.58 ms predicted against 2.10 ms (launch-bound there: the same 11 kernels on 16 times
  fewer bytes).
"""
from __future__ import annotations

import math
from typing import Any

import torch

H200_BF16_MATMUL = 690.0  # TFLOP/s, the large-matmul rate the table below is relative to (gpu_specs.py)
FOREACH_EFFICIENCY = 0.60  # achieved / streaming bandwidth of a foreach kernel (AdamW foreach, see above)

# (kernel, causal, sequence length, head size, forward TFLOP/s, backward TFLOP/s): calibrate.json's
# sdpa_fwd and sdpa_fwd_bwd medians in bf16 on the H200, shapes [batch, heads, seq, head] with
# batch x seq = 8192 (16 or 32 heads)
ATTENTION = (
    ("efficient", False, 1024, 64, 95, 80), ("efficient", True, 1024, 64, 137, 114),
    ("efficient", False, 2048, 64, 103, 93), ("efficient", True, 2048, 64, 168, 141),
    ("efficient", False, 2048, 128, 147, 121), ("efficient", True, 2048, 128, 239, 185),
    ("efficient", False, 4096, 128, 158, 131), ("efficient", True, 4096, 128, 263, 214),
    ("efficient", False, 8192, 128, 169, 136), ("efficient", True, 8192, 128, 317, 243),
    ("flash", False, 1024, 64, 180, 128), ("flash", True, 1024, 64, 225, 151),
    ("flash", False, 2048, 64, 233, 217), ("flash", True, 2048, 64, 309, 293),
    ("flash", False, 2048, 128, 284, 237), ("flash", True, 2048, 128, 400, 341),
    ("flash", False, 4096, 128, 300, 276), ("flash", True, 4096, 128, 487, 430),
    ("flash", False, 8192, 128, 341, 294), ("flash", True, 8192, 128, 584, 547),
)

_aten = torch.ops.aten
_KERNELS = {  # op packet name -> (kernel, backward?, index of the query among the op's arguments)
    "_scaled_dot_product_flash_attention": ("flash", False, 0),
    "_scaled_dot_product_flash_attention_backward": ("flash", True, 1),
    "_scaled_dot_product_efficient_attention": ("efficient", False, 0),
    "_scaled_dot_product_efficient_attention_backward": ("efficient", True, 1),
}


def attention_tflops(kernel: str, causal: bool, backward: bool, seq: int, head: int) -> float:
    """The H200's bf16 rate for this attention kernel at the nearest calibrated shape."""
    def distance(row: tuple) -> float:
        return abs(math.log2(seq / row[2])) + abs(math.log2(head / row[3]))

    rows = [r for r in ATTENTION if r[0] == kernel and r[1] == causal]
    best = min(rows, key=distance)
    return float(best[5] if backward else best[4])


def _argument(func: Any, args: tuple, kwargs: dict, name: str, default: Any) -> Any:
    """An op's argument by its schema name (positional or keyword)."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == name:
            if name in kwargs:
                return kwargs[name]
            return args[i] if i < len(args) else default
    return default


def packet(func: Any) -> Any:
    """An aten op's overload packet (`aten.mm` for `aten.mm.default`); a higher-order operator (flex
    attention) is its own: flop_counter's formulas are registered under either."""
    return getattr(func, "overloadpacket", func)


def seconds(func: Any, args: tuple, kwargs: dict, flops: int, moved: int, gpu: Any, dtype: str) -> float | None:
    """This op's time on `gpu` where a measured rate applies (attention, foreach), else None."""
    name = packet(func).__name__
    if name.startswith("_foreach_"):
        return moved / (gpu.bandwidth * FOREACH_EFFICIENCY)
    kernel = _KERNELS.get(name)
    if kernel is None or not flops:
        return None
    which, backward, at = kernel
    query = args[at] if at < len(args) else None
    if not isinstance(query, torch.Tensor) or query.dim() != 4:
        return None
    causal = bool(_argument(func, args, kwargs, "is_causal", False))
    tflops = attention_tflops(which, causal, backward, query.shape[-2], query.shape[-1])
    rate = tflops * 1e12 * gpu.matmul_rate("bf16") / (H200_BF16_MATMUL * 1e12) * (
        gpu.matmul_rate(dtype) / gpu.matmul_rate("bf16"))
    return max(flops / rate, moved / gpu.bandwidth)
