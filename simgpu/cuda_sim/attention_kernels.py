"""Host stand-ins for CUDA's fused attention kernels, with CUDA's signatures: FlashAttention-2 and the
memory-efficient kernel, forward and backward, at both of torch's levels (`_scaled_dot_product_flash_attention`
over [batch, heads, sequence, dim] and `_flash_attention_forward` over [batch, sequence, heads, dim]).

torch has these ops for CUDA only. Simulated GPUs run them (placement.py) so that what is keyed on them
applies as on a GPU: DTensor's sharding rules, context parallelism's ring attention (which merges the
blocks' outputs by their logsumexp and runs the backward on the merged output and logsumexp), autograd's
formulas. The outputs are CUDA's: the attention in [batch, sequence, heads, dim] memory viewed as
[batch, heads, sequence, dim], the logsumexp in float32 (the memory-efficient kernel's padded to a multiple
of 32 rows, padding +inf), Philox seed and offset tensors (flash: uint64 on the GPU; memory-efficient:
int64 on the host), the sequence lengths.

The numbers: softmax(scale * q k^T + bias) v with float32 accumulation, computed by torch's CPU flash
kernel where it applies (no dropout, equal head dims) and written out otherwise. Causal masks are aligned
as the kernels align them (flash: bottom-right; memory-efficient: as `custom_mask_type` says). A row that
attends to nothing gives 0 and logsumexp +inf. Dropout keeps each weight with probability 1 - p, drawn
from the GPU's generator at a (seed, offset) that the backward draws again: the same rule as CUDA, other
numbers (docs/cuda-simulation.md). The backward takes the given output and logsumexp as the truth
(D = rowsum(dO * O)), as the CUDA kernels do, which is what makes ring attention's merged backward exact.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensor

from simgpu.cuda_sim import cuda_build, devices, generators

Tensor = torch.Tensor
aten = torch.ops.aten
_TOP_LEFT, _BOTTOM_RIGHT = 1, 2  # the memory-efficient kernel's custom_mask_type values (0: no mask)
_LSE_ALIGN = 32  # the memory-efficient kernel's logsumexp rows come in blocks of 32


# ---- the computation -------------------------------------------------------------------------------
def _allowed(lq: int, lk: int, causal: int, left: int | None, right: int | None) -> Tensor | None:
    """Which keys each query may see (bool [lq, lk]), None when all. `causal` aligns the diagonal at the
    top left or the bottom right; left/right bound a sliding window around it (None: unbounded), aligned at
    the bottom right without a causal mask, as FlashAttention aligns it."""
    if not causal and left is None and right is None:
        return None
    shift = 0 if causal == _TOP_LEFT else lk - lq
    distance = torch.arange(lk)[None, :] - (torch.arange(lq)[:, None] + shift)  # key minus diagonal
    allowed = torch.ones(lq, lk, dtype=torch.bool)
    if causal:
        right = 0 if right is None else min(right, 0)
    if right is not None:
        allowed &= distance <= right
    if left is not None:
        allowed &= distance >= -left
    return allowed


def _cpu_kernel_mask(q: Tensor, k: Tensor, bias: Tensor | None, causal: int, left: int | None,
                     right: int | None, allowed: Tensor | None) -> tuple[Tensor | None, bool]:
    """(attn_mask, is_causal) for torch's CPU flash kernel, whose causal mask is aligned at the top left."""
    if causal and left is None and right is None and (causal == _TOP_LEFT or q.size(2) == k.size(2)):
        return _float_mask(bias, None, q.dtype), True
    return _float_mask(bias, allowed, q.dtype), False


def _groups(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, int]:
    """k and v repeated over the query heads they serve (grouped-query attention), and the group size."""
    group = q.size(1) // k.size(1)
    if group == 1:
        return k, v, 1
    return k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), group


def _ungroup(grad: Tensor, group: int) -> Tensor:
    if group == 1:
        return grad
    b, h, s, d = grad.shape
    return grad.reshape(b, h // group, group, s, d).sum(2)


def _float_mask(bias: Tensor | None, allowed: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """bias and allowed as one additive mask (-inf where not allowed)."""
    if allowed is None:
        return None if bias is None else bias.to(dtype)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, float("-inf"))
    return mask if bias is None else bias.to(dtype) + mask


def _keep(rng: tuple[int, int], shape: torch.Size, dropout_p: float) -> Tensor:
    """The dropout mask of one call, the same every time it is drawn from the same (seed, offset)."""
    return torch.rand(shape, generator=generators.host_generator(*rng)) >= dropout_p


def _scores(q: Tensor, k: Tensor, scale: float, mask: Tensor | None) -> Tensor:
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    return s if mask is None else s + mask.float()


def _empty_rows(lse: Tensor) -> Tensor:
    return torch.isneginf(lse) | torch.isnan(lse)


def forward(q: Tensor, k: Tensor, v: Tensor, *, scale: float, bias: Tensor | None = None, causal: int = 0,
            left: int | None = None, right: int | None = None, dropout_p: float = 0.0,
            rng: tuple[int, int] | None = None) -> tuple[Tensor, Tensor]:
    """Attention over [batch, heads, sequence, dim] tensors: (output in q's dtype, float32 logsumexp)."""
    k, v, _ = _groups(q, k, v)
    allowed = _allowed(q.size(2), k.size(2), causal, left, right)
    if dropout_p == 0.0 and q.size(-1) == v.size(-1):
        mask, is_causal = _cpu_kernel_mask(q, k, bias, causal, left, right, allowed)
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal, attn_mask=mask,
                                                                    scale=scale)
        if allowed is not None:  # the CPU kernel gives empty rows logsumexp 0
            empty = ~allowed.any(-1)
            if bool(empty.any()):
                lse = lse.masked_fill(empty, float("inf"))
        return out, lse
    s = _scores(q, k, scale, _float_mask(bias, allowed, torch.float32))
    lse = torch.logsumexp(s, -1)
    empty = _empty_rows(lse)
    lse = lse.masked_fill(empty, float("inf"))
    p = torch.exp(s - lse[..., None])
    if dropout_p > 0.0:
        p = p * _keep(rng, p.shape, dropout_p) / (1.0 - dropout_p)
    if q.dtype in (torch.float16, torch.bfloat16):  # the kernels round the weights before the second product
        p = p.to(q.dtype).float()
    return (p @ v.float()).to(q.dtype), lse


def backward(grad_out: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, *, scale: float,
             bias: Tensor | None = None, causal: int = 0, left: int | None = None, right: int | None = None,
             dropout_p: float = 0.0, rng: tuple[int, int] | None = None,
             bias_grad: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """Gradients of `forward` for q, k, v (and the bias), from the given output and logsumexp; none for an
    undefined output gradient, as the CUDA kernels return."""
    if grad_out is None:
        return None, None, None, None
    k_full, v_full, group = _groups(q, k, v)
    allowed = _allowed(q.size(2), k.size(2), causal, left, right)
    lse = lse[..., :q.size(2)].float()
    if dropout_p == 0.0 and q.size(-1) == v.size(-1) and not bias_grad:
        mask, is_causal = _cpu_kernel_mask(q, k, bias, causal, left, right, allowed)
        dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out.to(q.dtype), q, k_full, v_full, out, lse.contiguous(), 0.0, is_causal, attn_mask=mask,
            scale=scale)
        return dq, _ungroup(dk, group), _ungroup(dv, group), None
    s = _scores(q, k_full, scale, _float_mask(bias, allowed, torch.float32))
    p = torch.exp(s - lse[..., None])
    d_out = grad_out.float()
    dp = d_out @ v_full.float().transpose(-1, -2)
    dropped = p
    if dropout_p > 0.0:
        keep = _keep(rng, p.shape, dropout_p) / (1.0 - dropout_p)
        dropped, dp = p * keep, dp * keep
    row = (d_out * out.float()).sum(-1, keepdim=True)  # rowsum(dO * O): the output's own softmax statistics
    ds = p * (dp - row)
    dq = (ds @ k_full.float()) * scale
    dk = (ds.transpose(-1, -2) @ q.float()) * scale
    dv = dropped.transpose(-1, -2) @ d_out
    dbias = ds.sum_to_size(bias.shape).to(bias.dtype) if bias_grad and bias is not None else None
    return (dq.to(q.dtype), _ungroup(dk, group).to(k.dtype), _ungroup(dv, group).to(v.dtype), dbias)


# ---- CUDA's ops -------------------------------------------------------------------------------------
def _scale(q: Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.size(-1)) if scale is None else scale


def _bmhk(t: Tensor) -> Tensor:
    """t [batch, heads, sequence, dim] in the kernels' memory layout, [batch, sequence, heads, dim]."""
    return t.transpose(1, 2).contiguous().transpose(1, 2)


def _rng(q: Tensor, dropout_p: float, batch: int | None = None) -> tuple[int, int] | None:
    """The Philox (seed, offset) a kernel with dropout takes from its GPU's generator: it moves the offset
    by batch * heads * 32, as FlashAttention and the memory-efficient kernel do."""
    if dropout_p <= 0.0:
        return None
    index = devices.device_of(q)
    increment = (q.size(0) if batch is None else batch) * q.size(1) * 32
    return generators.default(index if index is not None else 0).philox_state(increment)


def _flash_rng_tensors(rng: tuple[int, int] | None) -> tuple[Tensor, Tensor]:
    seed, offset = rng or (0, 0)
    return torch.tensor([seed, offset], dtype=torch.uint64), torch.tensor(offset, dtype=torch.uint64)


def _flash_rng(rng_state: Tensor, dropout_p: float) -> tuple[int, int] | None:
    if dropout_p <= 0.0:
        return None
    seed, offset = rng_state.tolist()
    return int(seed), int(offset)


def _efficient_rng(seed: Tensor, offset: Tensor, dropout_p: float) -> tuple[int, int] | None:
    return (int(seed.item()) % 2**64, int(offset.item())) if dropout_p > 0.0 else None


def _no_debug_mask(op: str, return_debug_mask: bool) -> None:
    if return_debug_mask:
        raise NotImplementedError(f"simgpu: aten::{op} with return_debug_mask=True: the kernel's debug mask of "
                                  f"dropped weights is not simulated")


def _not_simulated(op: str, **extras: Any) -> None:
    given = [name for name, value in extras.items() if value is not None]
    if given:
        raise NotImplementedError(f"simgpu: aten::{op} with {', '.join(given)}: paged, ALiBi, sliding-window or "
                                  f"key-length-limited attention is not simulated")


def sdp_flash(query: Tensor, key: Tensor, value: Tensor, dropout_p: float = 0.0, is_causal: bool = False,
              return_debug_mask: bool = False, *, scale: float | None = None) -> tuple:
    _no_debug_mask("_scaled_dot_product_flash_attention", return_debug_mask)
    rng = _rng(query, dropout_p)
    out, lse = forward(query, key, value, scale=_scale(query, scale), causal=_BOTTOM_RIGHT if is_causal else 0,
                       dropout_p=dropout_p, rng=rng)
    rng_state, unused = _flash_rng_tensors(rng)
    return (_bmhk(out), lse, None, None, query.size(2), key.size(2), rng_state, unused,
            torch.empty(0, dtype=query.dtype))


def sdp_flash_backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, logsumexp: Tensor,
                       cum_seq_q: Any, cum_seq_k: Any, max_q: int, max_k: int, dropout_p: float, is_causal: bool,
                       philox_seed: Tensor, philox_offset: Tensor, *, scale: float | None = None) -> tuple:
    dq, dk, dv, _ = backward(grad_out, query, key, value, out, logsumexp, scale=_scale(query, scale),
                             causal=_BOTTOM_RIGHT if is_causal else 0, dropout_p=dropout_p,
                             rng=_flash_rng(philox_seed, dropout_p))
    return _grads(_bmhk, dq, dk, dv)


def _grads(layout: Callable[[Tensor], Tensor], *grads: Tensor | None) -> tuple:
    return tuple(None if g is None else layout(g) for g in grads)


def _padded_lse(lse: Tensor, compute: bool, rows: int | None = None) -> Tensor:
    """The memory-efficient kernel's logsumexp: `rows` (default: lse's) rounded up to 32, padding +inf."""
    b, h, filled = lse.shape
    rows = filled if rows is None else rows
    padded = torch.full((b, h, -(-rows // _LSE_ALIGN) * _LSE_ALIGN if compute else 0), float("inf"))
    if compute:
        padded[..., :filled] = lse
    return padded


def _efficient_rng_tensors(rng: tuple[int, int] | None) -> tuple[Tensor, Tensor]:
    seed, offset = rng or (0, 0)
    signed = seed - 2**64 if seed >= 2**63 else seed
    return torch.tensor(signed, dtype=torch.int64), torch.tensor(offset, dtype=torch.int64)


def sdp_efficient(query: Tensor, key: Tensor, value: Tensor, attn_bias: Tensor | None, compute_log_sumexp: bool,
                  dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None) -> tuple:
    rng = _rng(query, dropout_p)
    out, lse = forward(query, key, value, scale=_scale(query, scale), bias=attn_bias,
                       causal=_TOP_LEFT if is_causal else 0, dropout_p=dropout_p, rng=rng)
    return (_bmhk(out), _padded_lse(lse, compute_log_sumexp), *_efficient_rng_tensors(rng))


def sdp_efficient_backward(grad_out_: Tensor, query: Tensor, key: Tensor, value: Tensor, attn_bias: Tensor | None,
                           out: Tensor, logsumexp: Tensor, philox_seed: Tensor, philox_offset: Tensor,
                           dropout_p: float, grad_input_mask: Any, is_causal: bool = False, *,
                           scale: float | None = None) -> tuple:
    bias_grad = bool(grad_input_mask[3]) and attn_bias is not None
    dq, dk, dv, dbias = backward(grad_out_, query, key, value, out, logsumexp, scale=_scale(query, scale),
                                 bias=attn_bias, causal=_TOP_LEFT if is_causal else 0, dropout_p=dropout_p,
                                 rng=_efficient_rng(philox_seed, philox_offset, dropout_p), bias_grad=bias_grad)
    return (*_grads(_bmhk, dq, dk, dv), dbias)


def _bhmk(t: Tensor) -> Tensor:
    return t.transpose(1, 2)


def _maybe(layout: Callable[[Tensor], Tensor], t: Tensor | None) -> Tensor | None:
    return None if t is None else layout(t)


def _window(size: int | None) -> int | None:
    return None if size is None or size < 0 else int(size)


def _segments(cu_q: Tensor | None, cu_k: Tensor | None) -> list[tuple[slice, slice]]:
    """The (query, key) sequence ranges attended separately: the whole batch, or each packed sequence of a
    variable-length batch (cumulative offsets cu_q, cu_k)."""
    if cu_q is None:
        return [(slice(None), slice(None))]
    q, k = cu_q.tolist(), cu_k.tolist()
    return [(slice(q[i], q[i + 1]), slice(k[i], k[i + 1])) for i in range(len(q) - 1)]


def _segment_rng(rng: tuple[int, int] | None, index: int) -> tuple[int, int] | None:
    return None if rng is None else ((rng[0] + index * 0x9E3779B97F4A7C15) % 2**64, rng[1])


def _forward_pieces(q: Tensor, k: Tensor, v: Tensor, segments: list, rng: tuple[int, int] | None,
                    **options: Any) -> tuple[Tensor, list[Tensor]]:
    """`forward` over [batch, heads, sequence, dim] tensors, segment by segment: (output, logsumexps)."""
    if len(segments) == 1 and segments[0][0] == slice(None):
        out, lse = forward(q, k, v, rng=rng, **options)
        return out, [lse]
    out = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    lses = []
    for index, (sq, sk) in enumerate(segments):
        out[:, :, sq], lse = forward(q[:, :, sq], k[:, :, sk], v[:, :, sk], rng=_segment_rng(rng, index), **options)
        lses.append(lse)
    return out, lses


def _backward_pieces(grad_out: Tensor | None, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lses: list[Tensor],
                     segments: list, rng: tuple[int, int] | None, **options: Any) -> tuple:
    """`backward` segment by segment; keys no segment attends to get zero gradients."""
    if grad_out is None:
        return None, None, None, None
    if len(segments) == 1 and segments[0][0] == slice(None):
        return backward(grad_out, q, k, v, out, lses[0], rng=rng, **options)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for index, ((sq, sk), lse) in enumerate(zip(segments, lses)):
        dq[:, :, sq], dk[:, :, sk], dv[:, :, sk], _ = backward(
            grad_out[:, :, sq], q[:, :, sq], k[:, :, sk], v[:, :, sk], out[:, :, sq], lse,
            rng=_segment_rng(rng, index), **options)
    return dq, dk, dv, None


def _packed(t: Tensor) -> Tensor:
    """A variable-length [total, heads, dim] tensor as [1, heads, total, dim]."""
    return t.unsqueeze(0).transpose(1, 2)


def _unpacked(t: Tensor) -> Tensor:
    return t.transpose(1, 2)[0]


def flash_forward(query: Tensor, key: Tensor, value: Tensor, cum_seq_q: Tensor | None, cum_seq_k: Tensor | None,
                  max_q: int, max_k: int, dropout_p: float, is_causal: bool, return_debug_mask: bool, *,
                  scale: float | None = None, window_size_left: int | None = None,
                  window_size_right: int | None = None, seqused_k: Tensor | None = None,
                  alibi_slopes: Tensor | None = None, block_table: Tensor | None = None,
                  num_splits: int | None = None) -> tuple:
    """aten::_flash_attention_forward over [batch, sequence, heads, dim] (variable length: [total, heads, dim],
    the logsumexp then [heads, total])."""
    _no_debug_mask("_flash_attention_forward", return_debug_mask)
    _not_simulated("_flash_attention_forward", seqused_k=seqused_k, alibi_slopes=alibi_slopes, block_table=block_table)
    varlen = cum_seq_q is not None
    q, k, v = (_packed(t) if varlen else _bhmk(t) for t in (query, key, value))
    rng = _rng(q, dropout_p, len(cum_seq_q) - 1 if varlen else None)
    out, lses = _forward_pieces(q, k, v, _segments(cum_seq_q, cum_seq_k), rng, scale=_scale(q, scale),
                                causal=_BOTTOM_RIGHT if is_causal else 0, left=_window(window_size_left),
                                right=_window(window_size_right), dropout_p=dropout_p)
    if varlen:
        lse = torch.full((q.size(1), q.size(2)), float("inf"))
        for (sq, _), piece in zip(_segments(cum_seq_q, cum_seq_k), lses):
            lse[:, sq] = piece[0]
        return (_unpacked(_bmhk(out)), lse, *_flash_rng_tensors(rng), torch.empty(0, dtype=query.dtype))
    return (_bhmk(_bmhk(out)), lses[0], *_flash_rng_tensors(rng), torch.empty(0, dtype=query.dtype))


def flash_backward(grad_out: Tensor, query: Tensor, key: Tensor, value: Tensor, out: Tensor, logsumexp: Tensor,
                   cum_seq_q: Tensor | None, cum_seq_k: Tensor | None, max_q: int, max_k: int, dropout_p: float,
                   is_causal: bool, rng_state: Tensor, unused: Tensor, *, scale: float | None = None,
                   window_size_left: int | None = None, window_size_right: int | None = None) -> tuple:
    varlen = cum_seq_q is not None
    layout, back = (_packed, _unpacked) if varlen else (_bhmk, _bhmk)
    q, k, v = layout(query), layout(key), layout(value)
    segments = _segments(cum_seq_q, cum_seq_k)
    lses = [logsumexp[:, sq][None] for sq, _ in segments] if varlen else [logsumexp]
    dq, dk, dv, _ = _backward_pieces(_maybe(layout, grad_out), q, k, v, layout(out), lses, segments,
                                     _flash_rng(rng_state, dropout_p), scale=_scale(q, scale),
                                     causal=_BOTTOM_RIGHT if is_causal else 0, left=_window(window_size_left),
                                     right=_window(window_size_right), dropout_p=dropout_p)
    return _grads(lambda t: back(_bmhk(t)), dq, dk, dv)


def efficient_forward(query: Tensor, key: Tensor, value: Tensor, bias: Tensor | None, cu_seqlens_q: Tensor | None,
                      cu_seqlens_k: Tensor | None, max_seqlen_q: int | None, max_seqlen_k: int | None,
                      dropout_p: float, custom_mask_type: int, compute_log_sumexp: bool = False, *,
                      scale: float | None = None, seqlen_k: Tensor | None = None,
                      window_size: int | None = None) -> tuple:
    """aten::_efficient_attention_forward over [batch, sequence, heads, dim] (variable length: batch 1, the
    logsumexp then one row per sequence)."""
    _not_simulated("_efficient_attention_forward", seqlen_k=seqlen_k, window_size=window_size)
    varlen = cu_seqlens_q is not None
    if varlen and bias is not None:
        raise NotImplementedError("simgpu: aten::_efficient_attention_forward with both a bias and cu_seqlens_q")
    q, k, v = _bhmk(query), _bhmk(key), _bhmk(value)
    segments = _segments(cu_seqlens_q, cu_seqlens_k)
    rng = _rng(q, dropout_p, len(segments))
    out, lses = _forward_pieces(q, k, v, segments, rng, scale=_scale(q, scale), bias=bias,
                                causal=int(custom_mask_type), dropout_p=dropout_p)
    rows = max_seqlen_q if varlen else q.size(2)
    lse = torch.cat([_padded_lse(piece, compute_log_sumexp, rows) for piece in lses])
    return (_bhmk(_bmhk(out)), lse, *_efficient_rng_tensors(rng), rows,
            max_seqlen_k if varlen and max_seqlen_k is not None else k.size(2))


def efficient_backward(grad_out_: Tensor, query: Tensor, key: Tensor, value: Tensor, bias: Tensor | None,
                       out: Tensor, cu_seqlens_q: Tensor | None, cu_seqlens_k: Tensor | None, max_seqlen_q: int,
                       max_seqlen_k: int, logsumexp: Tensor, dropout_p: float, philox_seed: Tensor,
                       philox_offset: Tensor, custom_mask_type: int, bias_requires_grad: bool, *,
                       scale: float | None = None, num_splits_key: int | None = None,
                       window_size: int | None = None, shared_storage_dqdkdv: bool = False) -> tuple:
    _not_simulated("_efficient_attention_backward", window_size=window_size)
    q, k, v = _bhmk(query), _bhmk(key), _bhmk(value)
    segments = _segments(cu_seqlens_q, cu_seqlens_k)
    lses = ([logsumexp[i:i + 1, :, :sq.stop - sq.start] for i, (sq, _) in enumerate(segments)]
            if cu_seqlens_q is not None else [logsumexp])
    dq, dk, dv, dbias = _backward_pieces(_maybe(_bhmk, grad_out_), q, k, v, _bhmk(out), lses, segments,
                                         _efficient_rng(philox_seed, philox_offset, dropout_p),
                                         scale=_scale(q, scale), bias=bias, causal=int(custom_mask_type),
                                         dropout_p=dropout_p, bias_grad=bias_requires_grad)
    return (*_grads(lambda t: _bhmk(_bmhk(t)), dq, dk, dv), dbias)


def _on_gpus_only(packet: Any, kernel: Callable) -> Callable:
    """The stand-in for tensors on simulated GPUs; host tensors get torch's own answer (no CPU kernel), and so
    do fake tensors (DTensor's sharding propagation, tracers): torch's meta kernel gives CUDA's shapes."""
    def run(*args: Any, **kwargs: Any) -> Any:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        on_gpu = any(devices.device_of(a) is not None for a in tensors)
        if not on_gpu or any(isinstance(a, FakeTensor) for a in tensors):
            return packet.default(*args, **kwargs)
        return kernel(*args, **kwargs)

    run.host_outputs = getattr(kernel, "host_outputs", ())  # type: ignore[attr-defined]
    return run


# outputs CUDA leaves in host memory (the memory-efficient kernel's Philox seed and offset)
sdp_efficient.host_outputs = (2, 3)  # type: ignore[attr-defined]
efficient_forward.host_outputs = (2, 3)  # type: ignore[attr-defined]

_KERNELS = {
    "_scaled_dot_product_flash_attention": sdp_flash,
    "_scaled_dot_product_flash_attention_backward": sdp_flash_backward,
    "_scaled_dot_product_efficient_attention": sdp_efficient,
    "_scaled_dot_product_efficient_attention_backward": sdp_efficient_backward,
    "_flash_attention_forward": flash_forward,
    "_flash_attention_backward": flash_backward,
    "_efficient_attention_forward": efficient_forward,
    "_efficient_attention_backward": efficient_backward,
}
STAND_INS: dict[Any, Callable] = {
    getattr(aten, name): _on_gpus_only(getattr(aten, name), kernel) for name, kernel in _KERNELS.items()
    if cuda_build.host_lacks(name)
}
