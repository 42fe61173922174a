"""scaled_dot_product_attention on simulated GPUs, dispatched as CUDA dispatches it.

On a GPU, `aten::scaled_dot_product_attention` picks a kernel by torch's rules (sdp_utils: FlashAttention for
float16/bfloat16 without a mask, then the memory-efficient kernel, then the math composite; the flags of
`torch.nn.attention.sdpa_kernel` and the priority order say which may run) and calls CUDA's op for it,
`_scaled_dot_product_flash_attention` or `_scaled_dot_product_efficient_attention`. What is keyed on those
ops sees them: their autograd formulas, DTensor's sharding rules, context parallelism's ring attention.
On the host torch would pick its CPU flash kernel instead, for which DTensor has no sharding rule, so
context parallelism failed ("_scaled_dot_product_flash_attention_for_cpu.default does not have a sharding
strategy registered").

Here the op's kernel for host memory (AutogradCPU, ahead of torch's composite) makes that choice for tensors
on simulated GPUs and calls CUDA's ops, which attention_kernels.py computes on the host; host tensors get
torch's own composite. cuDNN is not simulated (torch.backends.cudnn.is_available() is False), so its kernel
is never picked, as on a GPU machine without cuDNN.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch
import torch.backends.cuda

from simgpu.cuda_sim import devices, placement, plan_host

aten = torch.ops.aten
Tensor = torch.Tensor
MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3  # torch.nn.attention.SDPBackend's values
_HALF = (torch.float16, torch.bfloat16)
_DEFAULT_ORDER = (FLASH, EFFICIENT, MATH, CUDNN)
_library: Any = None


# ---- the choice (torch's aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, on compute capability 9.0) ----
def _common_reasons(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, enable_gqa: bool,
                    singleton_head_dim_any_stride: bool) -> list[str]:
    """What rules out both fused kernels: shapes, batch and head counts, strides."""
    if not q.dim() == k.dim() == v.dim() == 4:
        return [f"All fused kernels requires query, key and value to be 4 dimensional, but got Query dim: "
                f"{q.dim()}, Key dim: {k.dim()}, Value dim: {v.dim()} instead."]
    reasons = []
    if q.size(-2) == 0 or k.size(-2) == 0:
        reasons.append("All fused kernels do not support zero seq_len_q or seq_len_kv.")
    strides_ok = all(t.stride(-1) == 1 for t in (q, k, v)) or (singleton_head_dim_any_stride and q.size(-1) == 1)
    if not strides_ok or (mask is not None and mask.stride(-1) != 1):
        reasons.append("All fused kernels require the last dimension of the input to have stride 1.")
    if not q.size(0) == k.size(0) == v.size(0):
        reasons.append("For dense inputs, both fused kernels require query, key and value to have the same batch_size.")
    elif enable_gqa:
        if k.size(-3) != v.size(-3) or q.size(-3) % k.size(-3):
            reasons.append("Grouped query attention needs the number of key/value heads to divide the number of "
                           "query heads, and key and value to have as many heads as each other.")
    elif not q.size(-3) == k.size(-3) == v.size(-3):
        reasons.append("For dense input, both fused kernels require query, key and value to have the same num_heads.")
    return reasons


def _dtype_reason(q: Tensor, k: Tensor, v: Tensor, allowed: tuple[torch.dtype, ...]) -> list[str]:
    if q.dtype == k.dtype == v.dtype and q.dtype in allowed:
        return []
    return [f"Expected query, key and value to all be of dtype: {{{', '.join(map(str, allowed))}}}. Got Query dtype: "
            f"{q.dtype}, Key dtype: {k.dtype}, and Value dtype: {v.dtype} instead."]


def flash_reasons(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, is_causal: bool,
                  enable_gqa: bool) -> list[str]:
    """Why FlashAttention cannot run these inputs (empty: it can)."""
    if not torch.backends.cuda.flash_sdp_enabled():
        return ["Flash attention has been runtime disabled."]
    reasons = _common_reasons(q, k, v, mask, enable_gqa, singleton_head_dim_any_stride=True)
    if q.dim() != 4:
        return reasons
    if mask is not None:
        reasons.append("Flash Attention does not support non-null attn_mask.")
    if not (q.size(-1) == k.size(-1) == v.size(-1) and q.size(-1) <= 256):
        reasons.append("Flash attention requires q,k,v to have the same last dimension and to be less than or "
                       "equal to 256.")
    if is_causal and q.size(-2) != k.size(-2):
        reasons.append("Flash attention does not support the is_causal flag when seqlen_q != seqlen_k.")
    return reasons + _dtype_reason(q, k, v, _HALF)


def efficient_reasons(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float, is_causal: bool,
                      enable_gqa: bool) -> list[str]:
    """Why the memory-efficient kernel cannot run these inputs (empty: it can)."""
    if not torch.backends.cuda.mem_efficient_sdp_enabled():
        return ["Memory Efficient attention has been runtime disabled."]
    reasons = _common_reasons(q, k, v, mask, enable_gqa, singleton_head_dim_any_stride=False)
    if q.dim() != 4:
        return reasons
    align = 8 if q.dtype in _HALF else 4  # minimum_gemm_alignment on sm80 and newer
    if not (q.size(-1) == k.size(-1) and q.size(-1) % align == 0 and v.size(-1) % align == 0
            and q.size(-1) > 0 and v.size(-1) > 0):
        reasons.append(f"Mem efficient attention requires last dimension of inputs to be divisible by {align}.")
    elif any(t.numel() and t.storage_offset() % align for t in (q, k, v)):
        reasons.append(f"Mem efficient attention on sm80 or newer requires q, k, and v storage offsets * "
                       f"element_size to be aligned to {align * q.element_size()} bytes.")
    return reasons + _dtype_reason(q, k, v, (torch.float16, torch.float32, torch.bfloat16))


def _order() -> tuple[int, ...]:
    getter = getattr(torch._C, "_get_sdp_priority_order", None)  # torch >= 2.6 (sdpa_kernel(set_priority=True))
    return tuple(int(b) for b in getter()) if getter is not None else _DEFAULT_ORDER


def choose(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0,
           is_causal: bool = False, enable_gqa: bool = False) -> tuple[int, dict[str, list[str]]]:
    """The kernel CUDA runs (an SDPBackend value, -1 for none) and why each fused kernel was passed over."""
    why: dict[str, list[str]] = {}
    for backend in _order():
        if backend == FLASH:
            why["Flash attention"] = flash_reasons(q, k, v, mask, dropout_p, is_causal, enable_gqa)
            if not why["Flash attention"]:
                return FLASH, why
        elif backend == EFFICIENT:
            why["Memory efficient"] = efficient_reasons(q, k, v, mask, dropout_p, is_causal, enable_gqa)
            if not why["Memory efficient"]:
                return EFFICIENT, why
        elif backend == MATH and torch.backends.cuda.math_sdp_enabled():
            return MATH, why
    why["cuDNN attention"] = ["cuDNN is not simulated (simgpu: torch.backends.cudnn.is_available() is False)."]
    return -1, why


def _params(params: Any) -> tuple:
    return (params.query, params.key, params.value, params.attn_mask, params.dropout, params.is_causal,
            getattr(params, "enable_gqa", False))


def can_use_flash_attention(params: Any, debug: bool = False) -> bool:
    """torch.backends.cuda.can_use_flash_attention, by the rules the simulated GPUs dispatch with."""
    return _verdict("Flash attention", flash_reasons(*_params(params)), debug)


def can_use_efficient_attention(params: Any, debug: bool = False) -> bool:
    """torch.backends.cuda.can_use_efficient_attention, by the rules the simulated GPUs dispatch with."""
    return _verdict("Memory efficient attention", efficient_reasons(*_params(params)), debug)


def _verdict(kernel: str, reasons: list[str], debug: bool) -> bool:
    if debug:
        for reason in reasons:
            warnings.warn(f"{kernel}: {reason}", stacklevel=3)
    return not reasons


# ---- the op ---------------------------------------------------------------------------------------------
def _meta(t: Any) -> Any:
    return torch.empty(t.shape, dtype=t.dtype, device="meta") if isinstance(t, Tensor) else t


def _signature(t: Any) -> Any:
    return (tuple(t.shape), t.dtype) if isinstance(t, Tensor) else t


_VALID: set[tuple] = set()  # the argument signatures torch's checks passed (they read shapes and dtypes only)
_VALID_MAX = 1024


def _validate(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, dropout_p: float,
              is_causal: bool, scale: float | None, enable_gqa: bool) -> None:
    """torch's own checks of the arguments (its messages), run on meta copies: its composite on the meta
    device, a few milliseconds of Python a call, so once per signature of shapes, dtypes and flags."""
    where = {devices.device_of(t) for t in (query, key, value)}
    if len(where) > 1:
        raise RuntimeError(f"Expected query, key, and value to have the same device type, but got query.device: "
                           f"{query.device} key.device: {key.device} and value.device: {value.device} instead.")
    signature = (*map(_signature, (query, key, value, attn_mask)), dropout_p, is_causal, scale, enable_gqa)
    if signature in _VALID:
        return
    with torch.no_grad(), placement.elsewhere_requested():  # on torch's meta device, also in a plan
        _COMPOSITE(_meta(query), _meta(key), _meta(value), _meta(attn_mask), dropout_p, is_causal, scale=scale,
                   **_gqa(enable_gqa))
    if len(_VALID) >= _VALID_MAX:
        _VALID.clear()
    _VALID.add(signature)


def _gqa(enable_gqa: bool) -> dict:
    """enable_gqa as a keyword only when set: torch < 2.5 has no such argument."""
    return {"enable_gqa": True} if enable_gqa else {}


def _pad_head_dim(t: Tensor) -> Tensor:
    """FlashAttention's inputs with the head dimension padded to a multiple of 8, as torch pads them."""
    extra = -t.size(-1) % 8
    return t if extra == 0 else torch.nn.functional.pad(t, (0, extra))


def _boolean_as_bias(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """A boolean mask as the additive one the fused kernels take (0 where attended, -inf elsewhere)."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask.logical_not(), float("-inf"))


def _needs_logsumexp(*tensors: Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """aten::scaled_dot_product_attention for host memory: CUDA's dispatch for tensors on simulated GPUs.
    The choice is the simulation's Python where CUDA's is C++: a plan does not count it as the program's
    host time (plan_host.SIM), only the op it runs."""
    if not devices.any_on_gpu(query, key, value):
        return _COMPOSITE(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, **_gqa(enable_gqa))
    with plan_host.SIM:
        _validate(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        backend, why = choose(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        if backend == FLASH:
            head_dim = query.size(-1)
            scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
            padded = _pad_head_dim(query), _pad_head_dim(key), _pad_head_dim(value)
            with plan_host.PROGRAM:
                out = aten._scaled_dot_product_flash_attention(*padded, dropout_p, is_causal, False, scale=scale)[0]
            return out if out.size(-1) == head_dim else out[..., :head_dim]
        if backend == EFFICIENT:
            bias = _boolean_as_bias(attn_mask, query.dtype)
            if bias is not None:  # expanded to [batch, heads, q, k], as torch hands it to the kernel
                bias = bias.expand(query.size(0), query.size(1), query.size(2), key.size(2))
            with plan_host.PROGRAM:
                return aten._scaled_dot_product_efficient_attention(query, key, value, bias,
                                                                    _needs_logsumexp(query, key, value), dropout_p,
                                                                    is_causal, scale=scale)[0]
        if backend == MATH:
            bias = _boolean_as_bias(attn_mask, query.dtype)
            with plan_host.PROGRAM:
                return aten._scaled_dot_product_attention_math(query, key, value, bias, dropout_p, is_causal, None,
                                                               scale=scale, **_gqa(enable_gqa))[0]
    for kernel, reasons in why.items():
        warnings.warn(f"{kernel} kernel not used because: {' '.join(reasons)}", stacklevel=2)
    raise RuntimeError("No available kernel. Aborting execution.")


def _fused_sdp_choice(run: Any, args: tuple, kwargs: dict) -> int:
    """aten::_fused_sdp_choice on simulated GPUs: CUDA's choice (placement.py hands it here)."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
    bound = {**dict(zip(names, args)), **kwargs}
    if not devices.any_on_gpu(bound["query"], bound["key"], bound["value"]):
        return run(*args, **kwargs)
    backend, _ = choose(bound["query"], bound["key"], bound["value"], bound.get("attn_mask"),
                        bound.get("dropout_p", 0.0), bound.get("is_causal", False), bound.get("enable_gqa", False))
    if backend < 0:
        raise RuntimeError("No viable backend for scaled_dot_product_attention was found. This is likely due to "
                           "turning off both the math kernel and the fused kernels.")
    return backend


_COMPOSITE = aten.scaled_dot_product_attention.default.decompose  # torch's own (CompositeImplicitAutograd)


def install() -> None:
    """Dispatch scaled_dot_product_attention on simulated GPUs as CUDA does; FlexAttention's eager path.

    flex_attention called eagerly wraps its higher-order operator in torch.compile(fullgraph=True) with
    the "eager" backend. Under simulation torch.compile runs eagerly with dynamo disabled (tensors.py),
    and torch >= 2.11 then refuses the call: "torch.compile with fullgraph=True found no compiled frames",
    unless the compiler's stance is force_eager (the documented way to run compiled code eagerly, which
    skips that check). The operator's own eager kernel then runs on the host's tensors, placed by
    placement.py (its allocations with device=cuda by cuda_kernels.py).
    """
    global _library
    set_stance = getattr(torch.compiler, "set_stance", None)  # torch >= 2.6
    if set_stance is not None:
        set_stance("force_eager")
    if _library is None:
        _library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - a kernel for aten's own op
        _library.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradCPU")
        if placement._storage_less:  # a plan's GPU tensors are meta below Python: CUDA's choice there too
            _library.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradMeta")
        placement.special(aten._fused_sdp_choice, _fused_sdp_choice)
