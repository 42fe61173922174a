"""scaled_dot_product_attention on simulated GPUs: on DTensors, as tensor-parallel programs call it,
and under a program's choice of GPU kernels (sdpa_kernel).

A program may allow only kernels the host lacks (EFFICIENT_ATTENTION: torch has no CPU version), which
on the host is "No viable backend". The kernels compute the same attention (they differ in rounding,
as GPU kernels do among themselves), so the call then runs on the host's kernels (flash, math).

On a GPU, SDPA on DTensors dispatches to the flash or efficient CUDA kernels, for which DTensor
has sharding rules; on the host torch picks its CPU flash kernel, for which DTensor has none
("... _scaled_dot_product_flash_attention_for_cpu.default does not have a sharding strategy").
Attention is independent per batch entry and per head, so when q, k and v are sharded alike on
the batch or head dimension (or replicated), each rank's attention over its own shards is the
answer: it is computed on the local tensors and wrapped back with the same placements
(to_local / from_local carry the gradients). Any other layout goes to torch unchanged.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

_INDEPENDENT_DIMS = (0, 1)  # [batch, heads, sequence, embedding]: attention never mixes these


def _dtensor_type() -> Any:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch < 2.5
        from torch.distributed._tensor import DTensor
    return DTensor


def _shardable(placements: Any, ndim: int) -> bool:
    for p in placements:
        if p.is_replicate():
            continue
        if not p.is_shard() or p.dim % ndim not in _INDEPENDENT_DIMS:
            return False
    return True


def sdpa(original: Callable, args: tuple, kwargs: dict) -> Any:
    """torch.nn.functional.scaled_dot_product_attention, shard by shard where the inputs allow."""
    query, key, value = (list(args) + [kwargs.get(n) for n in ("query", "key", "value")][len(args):])[:3]
    dtensor = _dtensor_type()
    if not all(isinstance(t, dtensor) for t in (query, key, value)):
        return _on_host_kernels(original, args, kwargs)
    mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
    placements = query.placements
    if (key.placements != placements or value.placements != placements or query.device_mesh != key.device_mesh
            or query.dim() != 4 or not _shardable(placements, 4) or isinstance(mask, dtensor)):
        return _on_host_kernels(original, args, kwargs)
    local_args = (query.to_local(), key.to_local(), value.to_local(), *args[3:])
    out = _on_host_kernels(original, local_args, {k: v for k, v in kwargs.items() if k not in ("query", "key", "value")})
    shape = query.shape[:-1] + value.shape[-1:]
    stride = torch.empty(shape, device="meta").stride()
    return dtensor.from_local(out, query.device_mesh, placements, run_check=False, shape=shape, stride=stride)


def _on_host_kernels(original: Callable, args: tuple, kwargs: dict) -> Any:
    """SDPA as the program asked; if it allowed only GPU kernels the host lacks, on the host's kernels."""
    try:
        return original(*args, **kwargs)
    except RuntimeError as exc:
        if "No viable backend for scaled_dot_product_attention" not in str(exc):
            raise
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
            return original(*args, **kwargs)


def install() -> None:
    """FlexAttention's eager path on simulated GPUs.

    flex_attention called eagerly wraps its higher-order operator in torch.compile(fullgraph=True) with
    the "eager" backend. Under simulation torch.compile runs eagerly with dynamo disabled (tensors.py),
    and torch >= 2.11 then refuses the call: "torch.compile with fullgraph=True found no compiled frames",
    unless the compiler's stance is force_eager (the documented way to run compiled code eagerly, which
    skips that check). The operator's own eager kernel then runs on the host's tensors, placed by
    placement.py (its allocations with device=cuda by cuda_kernels.py).
    """
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    if set_stance is not None:
        set_stance("force_eager")
