"""torch.autocast("cuda") on simulated GPUs: CUDA's cast policies, applied where CUDA applies them.

CUDA autocast is a dispatch key (AutocastCUDA) that only CUDA tensors carry; simulated GPU tensors are
host tensors, so it never sees them and a bf16/fp16 autocast program would compute in fp32 (and crash
where it relies on the cast: "mat1 and mat2 must have the same dtype"). CUDA's policy is per aten op:
every op, including those torch's C++ composites call (F.cross_entropy's log_softmax, nn.MultiheadAttention's
linear), and above autograd, so the casts are recorded and gradients flow back in the source dtype.

The same place here is the PreDispatch key: above autograd, and seen by every op while it is in the
thread's included set. While CUDA autocast is enabled (torch.set_autocast_enabled("cuda", True), which
torch.autocast, torch.amp.autocast, torch.cuda.amp.autocast and their decorator forms all call), the key
is included and the ops of CUDA's table run through `_cast_then_run`: eligible arguments (floating tensors
on a simulated GPU, not float64) are cast as autocast_mode.cpp's policies say, then the op runs below the
key (its inner ops are not cast again, as under AutocastCUDA). CPU autocast (AutocastCPU) is untouched.
The autograd engine and checkpoint recomputation copy the key with the thread's dispatch state, as they
copy CUDA's autocast state.

The table is data, checked against the installed torch's AutocastCUDA registrations by
tests/test_autocast_table.py: a torch whose lists change fails there.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import torch

from simgpu.cuda_sim import devices, plan_host

# aten/src/ATen/autocast_mode.h and .cpp (torch 2.13), as "name" or "name.overload"
LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr", "matmul",
    "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention", "cudnn_convolution",
    "cudnn_convolution_transpose",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt", "sinh",
    "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm", "native_layer_norm",
    "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm",
    "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
# fp32 unless the call names its own dtype: the op's optional `dtype` argument is set to float32
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList",
)
# fp32 by calling the overload that takes a dtype
FP32_APPEND_DTYPE = {"norm.Scalar": "norm.ScalarOpt_dtype", "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}
# the widest floating dtype of the eligible arguments (float32 over the autocast dtype)
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put", "tensordot",
           "scatter_add")
BANNED = {"binary_cross_entropy": (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")}


# What a later torch or a CUDA build with cuDNN autocasts beyond torch 2.13's CPU wheel, each with its policy:
# in the table where the installed torch registers it. linalg_matrix_sqrth (torch 2.14+): fp32, probed on
# 2.14.1's CUDA build with FakeTensorMode's CUDA tensors (float16 and float32 in, float32 out, as exp; mm
# float16); _cudnn_rnn: autocast_mode's _cudnn_rnn_cast_reflatten casts the input and weights to half
# (cuDNN is not simulated, so simulated GPUs never reach it).
LATER = {"linalg_matrix_sqrth": "fp32", "_cudnn_rnn": "lower_precision_fp"}


def _registered(name: str) -> bool:
    """Whether the installed torch has a CUDA autocast kernel for aten::name (compiled into the CPU wheel too)."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCUDA")
    except RuntimeError:  # no such operator in this build
        return False


def table() -> dict[str, str]:
    """Each op of CUDA's autocast lists ("aten::name[.overload]") and its policy: torch 2.13's lists, and what
    the installed torch adds of LATER."""
    policies = {"lower_precision_fp": LOWER_PRECISION_FP, "fp32": FP32, "fp32_set_opt_dtype": FP32_SET_OPT_DTYPE,
                "fp32_append_dtype": tuple(FP32_APPEND_DTYPE), "promote": PROMOTE, "banned": tuple(BANNED)}
    listed = {f"aten::{name}": policy for policy, names in policies.items() for name in names}
    return {**listed, **{f"aten::{name}": policy for name, policy in LATER.items() if _registered(f"aten::{name}")}}


_KEY = torch._C.DispatchKey.PreDispatch
_BELOW = torch._C.DispatchKeySet(_KEY)
_CAST_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _eligible(t: Any) -> bool:
    """CUDA's is_eligible: a floating tensor on the autocast device, not float64."""
    if not isinstance(t, torch.Tensor) or t.dtype not in _CAST_DTYPES:
        return False
    if getattr(_inside, "depth", 0):  # an intermediate of a GPU op's kernel (no label: placement never saw it)
        return True
    from simgpu.cuda_sim.placement import underlying

    return devices.device_of(underlying(t)) is not None


# ---- the cast cache: fp32 weights cast once per autocast region, as CUDA's cached_cast -------------------
_cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
_cache_lock = threading.Lock()


def _cast(t: Any, dtype: torch.dtype) -> Any:
    if isinstance(t, (list, tuple)):
        return type(t)(_cast(x, dtype) for x in t)
    if not _eligible(t) or t.dtype == dtype:
        return t
    cacheable = (dtype != torch.float32 and t.dtype == torch.float32 and t.requires_grad and t.is_leaf
                 and not t._is_view() and torch.is_autocast_cache_enabled())
    if not cacheable:
        with plan_host.PROGRAM:  # a cast kernel CUDA launches too
            return t.to(dtype)
    with _cache_lock:
        hit = _cache.get(id(t))
        if hit is not None and hit[0]() is t:
            return hit[1]
        with plan_host.PROGRAM:
            cast = t.to(dtype)
        _cache[id(t)] = (weakref.ref(t), cast)
        return cast


def _flat(values: Any) -> list:
    out: list = []
    for v in values:
        out.extend(v if isinstance(v, (list, tuple)) else [v])
    return out


def _widest(values: list, lower: torch.dtype) -> torch.dtype:
    """CUDA's promote_type over the eligible arguments."""
    current = lower
    for t in _flat(values):
        if not _eligible(t):
            continue
        if current == torch.float32 or t.dtype == torch.float32:
            current = torch.float32
        elif current != t.dtype:
            raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _named(op: Any, args: tuple, kwargs: dict) -> dict:
    """Every argument by name, defaults filled in (the dtype overload of norm takes keepdim without one)."""
    schema = op._schema.arguments
    named = {**{a.name: a.default_value for a in schema if a.has_default_value()},
             **dict(zip((a.name for a in schema), args)), **kwargs}
    return named


def _kernel(op: Any, policy: str) -> Callable:
    name = op.name().split("::")[1]
    append = getattr(torch.ops.aten.norm, FP32_APPEND_DTYPE[name].split(".")[1]) if policy == "fp32_append_dtype" else None

    def cast_then_run(*args: Any, **kwargs: Any) -> Any:
        # CUDA's policy is C++: a plan counts the casts and the op as the program's host time, not this Python
        with plan_host.SIM, torch._C._ExcludeDispatchKeyGuard(_BELOW), _below_a_cast():
            if policy == "banned":
                raise RuntimeError(BANNED[name])
            if policy in ("fp32_set_opt_dtype", "fp32_append_dtype"):
                first = args[0] if args else next(iter(kwargs.values()), None)
                if not _eligible(first):
                    with plan_host.PROGRAM:
                        return op(*args, **kwargs)
                named = _named(op, args, kwargs)
                if policy == "fp32_append_dtype":
                    with plan_host.PROGRAM:
                        return append(**named, dtype=torch.float32)
                if named.get("dtype") is None:
                    named["dtype"] = torch.float32
                with plan_host.PROGRAM:
                    return op(**named)
            lower = torch.get_autocast_dtype("cuda")
            dtype = {"lower_precision_fp": lower, "fp32": torch.float32}.get(policy) \
                or _widest([*args, *kwargs.values()], lower)
            cast_args, cast_kwargs = [_cast(a, dtype) for a in args], {k: _cast(v, dtype) for k, v in kwargs.items()}
            with plan_host.PROGRAM:
                return op(*cast_args, **cast_kwargs)

    return cast_then_run


_inside = threading.local()


class _below_a_cast:
    """While a listed op runs after its casts: nothing beneath it is cast again (AutocastCUDA stays
    excluded below its kernels), so inner_ops_cast stands aside."""

    def __enter__(self) -> None:
        _inside.below = getattr(_inside, "below", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _inside.below -= 1


class inner_ops_cast:
    """Around the kernel of an op on a simulated GPU, run by placement.py: let the ops it calls meet the key
    again, their tensors (intermediates placement never labels) counting as the GPU's. A dispatch mode runs
    below every key above Python (they are excluded while it handles an op), but on CUDA the ops a kernel
    calls (linalg_pinv's matmul) meet AutocastCUDA afresh."""

    __slots__ = ("active",)

    def __enter__(self) -> None:
        self.active = torch._C._dispatch_tls_is_dispatch_key_excluded(_KEY) and not getattr(_inside, "below", 0)
        if self.active:
            torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, False)
            _inside.depth = getattr(_inside, "depth", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        if self.active:
            _inside.depth -= 1
            torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, True)


def enabled_here() -> bool:
    """Whether CUDA autocast's key is on in this thread (cheap: one thread-local read)."""
    return torch._C._dispatch_tls_is_dispatch_key_included(_KEY)


# ---- switching the key with CUDA's autocast state ----------------------------------------------------
_library: Any = None
_original: dict[str, Callable] = {}


def _follow(enabled: bool) -> None:
    if enabled:
        _let_higher_order_ops_pass()
    torch._C._dispatch_tls_set_dispatch_key_included(_KEY, enabled)


def _set_autocast_enabled(*args: Any) -> None:
    """torch.set_autocast_enabled(device_type, enabled) (or the legacy (enabled) form, meaning CUDA)."""
    _original["set_autocast_enabled"](*args)
    device, enabled = args if len(args) == 2 else ("cuda", args[0])
    if device == "cuda":
        _follow(bool(enabled))


def _clear_autocast_cache() -> None:
    _original["clear_autocast_cache"]()
    with _cache_lock:
        _cache.clear()


_hops_passed = 0  # how many higher-order operators existed when they were last given the pass


def _let_higher_order_ops_pass() -> None:
    """Higher-order operators (torch.cond, checkpoint's tags, flex_attention) have no PreDispatch kernel
    outside tracing: pass the key on to their next one, as they pass AutocastCUDA (their bodies' ops are
    still cast, as under CUDA autocast). Each autocast region enables the key: the walk over torch's
    operators runs only when new ones were made since the last (it cost tens of microseconds a region)."""
    global _hops_passed
    hops = torch._ops._higher_order_ops
    if len(hops) == _hops_passed:
        return
    with plan_host.SIM:
        for hop in list(hops.values()):
            if _KEY not in hop.py_kernels:
                hop.py_impl(_KEY)(_passing(hop))
        _hops_passed = len(hops)


def _passing(hop: Any) -> Callable:
    def next_key(*args: Any, **kwargs: Any) -> Any:
        keys = torch._ops._compute_keyset(args, kwargs, hop.non_fallthrough_keys.remove(_KEY))
        return hop.dispatch(keys.highestPriorityTypeId(), *args, **kwargs)

    return next_key


def installed_lists() -> set[str] | None:
    """The table's ops that the installed torch's CUDA autocast handles (its AutocastCUDA kernels, compiled
    into the CPU wheel too), or None where it registers none of them (nothing to follow: the whole table).
    The table is torch 2.13's lists; an older torch lacks some (rms_norm): CUDA does not cast those there."""
    found = {name for name in table() if _registered(name)}
    return found or None


def install() -> None:
    """Register the table's kernels at the PreDispatch key and make the key follow CUDA's autocast state."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - kernels for aten's own ops
    listed = installed_lists()
    for qualified, policy in table().items():
        name, _, overload = qualified.split("::")[1].partition(".")
        packet = getattr(torch.ops.aten, name, None)
        if packet is None or not hasattr(packet, overload or "default"):
            continue  # an op this build lacks (cudnn_* on some wheels): CUDA's list names it all the same
        if listed is not None and qualified not in listed:
            continue  # an older torch whose CUDA autocast leaves it alone (rms_norm before 2.13)
        _library.impl(qualified.split("::")[1], _kernel(getattr(packet, overload or "default"), policy), "PreDispatch")
    _original["set_autocast_enabled"] = torch.set_autocast_enabled
    _original["clear_autocast_cache"] = torch.clear_autocast_cache
    torch.set_autocast_enabled = _set_autocast_enabled
    torch.clear_autocast_cache = _clear_autocast_cache
    if torch.is_autocast_enabled("cuda"):
        _follow(True)
