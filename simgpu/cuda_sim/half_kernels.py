"""CUDA kernels for dtypes that the host's kernels lack: half precision computed wide and rounded, and
CUDA's formula where the host refuses a dtype outright.

CUDA implements some ops for complex32 (ComplexHalf), float16 or bfloat16 where torch's CPU kernels do
not ("cos_vml_cpu" not implemented for 'ComplexHalf'). CUDA's kernels compute such dtypes in their
"opmath" type (complex64 / float32) and round the result once; on a simulated GPU these ops do the same:
the inputs are widened, the host kernel runs, and floating results are rounded back to the input's dtype.
abs of bool (the identity on CUDA, "abs_cpu" not implemented for 'Bool' on the host) is widened the same
way, to uint8. nansum of complex inputs, which the host refuses ("nansum on CPU does not support complex
inputs"), follows CUDA's reduction: NaN elements (a NaN real or imaginary part) count as zero.
Only the (op, dtype) pairs listed, which CUDA runs (the OpInfo sweep's CUDA record says so), are handled:
elsewhere the host's refusal stands, as CUDA's would. Host tensors are never widened.
HANDLERS holds CUDA's formula for ops whose CUDA kernel answers otherwise than the host's: trace (CUDA's
diagonal().sum(), which meets CUDA autocast's sum), integer remainder/fmod by zero (all ones, as an H200 gives, where the
host raises) and rrelu_with_noise (float16 computed wide, its noise from the GPU's generator).
"""
from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten
_INTS = frozenset({torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
_WIDE = {torch.complex32: torch.complex64, torch.float16: torch.float32, torch.bfloat16: torch.float32,
         torch.bool: torch.uint8, **{t: torch.float64 for t in _INTS}}
# a complex32 op's real result (angle) comes back in the wide type's real dtype: rounded to the half one
_WIDE_REAL = {torch.complex32: (torch.float32, torch.float16)}
_HALF_FLOATS = frozenset({torch.float16, torch.bfloat16})
# op packet -> the dtypes CUDA computes that the host cannot (torch 2.11 CUDA record; host: torch 2.13 CPU;
# the every-sample sweep on torch 2.11+cu130 found the second half of the complex32 names and the rest)
CUDA_ONLY_DTYPES: dict[Any, frozenset[torch.dtype]] = {
    **{getattr(aten, name): frozenset({torch.complex32})
       for name in ("cos", "cosh", "acos", "acosh", "atanh", "pow", "sum", "prod", "sigmoid",
                    "log", "asin", "asinh", "atan", "sin", "sinh", "tan", "tanh", "exp", "sqrt", "rsqrt", "angle",
                    "div", "logaddexp", "lerp")},
    **{getattr(aten, name): _HALF_FLOATS
       for name in ("multi_margin_loss", "multi_margin_loss_backward", "multilabel_margin_loss_forward",
                    "multilabel_margin_loss_backward", "avg_pool3d", "avg_pool3d_backward",
                    "_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa_backward") if hasattr(aten, name)},
    aten.abs: frozenset({torch.bool}),
    aten.histc: _INTS,
}
_COMPLEX = frozenset({torch.complex32, torch.complex64, torch.complex128})


def _nansum(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *,
            dtype: torch.dtype | None = None) -> torch.Tensor:
    """CUDA's nansum of a complex tensor: the sum with NaN elements taken as zero (complex32 summed in complex64
    and rounded once, as CUDA's accumulation type does)."""
    wide = x.to(_WIDE.get(x.dtype, x.dtype))
    clean = torch.where(torch.isnan(wide), torch.zeros((), dtype=wide.dtype), wide)
    out = aten.sum.dim_IntList(clean, dim, keepdim, dtype=_WIDE.get(dtype, dtype))
    return out.to(dtype or x.dtype)


# op packet -> (the dtypes of its first argument CUDA computes and the host refuses, CUDA's formula for the
# functional overload; an out= overload keeps the host's answer)
CUDA_FORMULAS: dict[Any, tuple[frozenset[torch.dtype], Callable[..., Any]]] = {
    aten.nansum: (_COMPLEX, _nansum),
}


def _narrow_dtype(args: tuple, kwargs: dict, allowed: frozenset[torch.dtype]) -> torch.dtype | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and a.dtype in allowed:
            return a.dtype
    return None


def _handler(allowed: frozenset[torch.dtype]) -> Callable[[Callable, tuple, dict], Any]:
    def handle(run_op: Callable, args: tuple, kwargs: dict) -> Any:
        from simgpu.cuda_sim import placement

        index = placement.gpu_of(placement.tensors_of(args, kwargs))
        narrow = None if index is None or "out" in kwargs else _narrow_dtype(args, kwargs, allowed)
        if narrow is None:
            out = run_op(*args, **kwargs)
        else:
            wide = _WIDE[narrow]
            widen = lambda a: a.to(wide) if isinstance(a, torch.Tensor) and a.dtype == narrow else a  # noqa: E731
            kwargs = {k: (wide if k == "dtype" and v == narrow else widen(v)) for k, v in kwargs.items()}
            out = run_op(*(widen(a) for a in args), **kwargs)
            real_wide, real_narrow = _WIDE_REAL.get(narrow, (None, None))
            out = torch.utils._pytree.tree_map(
                lambda t: (t.to(narrow) if t.dtype == wide else t.to(real_narrow) if t.dtype == real_wide else t)
                if isinstance(t, torch.Tensor) else t, out)
        return out if index is None else placement.label(out, index)

    return handle


def _formula_handler(dtypes: frozenset[torch.dtype],
                     formula: Callable[..., Any]) -> Callable[[Callable, tuple, dict], Any]:
    def handle(run_op: Callable, args: tuple, kwargs: dict) -> Any:
        from simgpu.cuda_sim import placement

        index = placement.gpu_of(placement.tensors_of(args, kwargs))
        if index is None or "out" in kwargs or not isinstance(args[0], torch.Tensor) or args[0].dtype not in dtypes:
            out = run_op(*args, **kwargs)
        else:
            out = formula(*args, **kwargs)
        return out if index is None else placement.label(out, index)

    return handle


def _trace(run_op: Callable, args: tuple, kwargs: dict) -> Any:
    """CUDA's trace kernel is `self.diagonal().sum()` (TriangularOps.cu), the host's a loop of its own: on a
    simulated GPU it is CUDA's formula, so every dtype CUDA's sum takes works (bool, half, complex32: the
    host's trace refuses them), and under CUDA autocast the inner sum meets autocast as on CUDA (sum is in
    its fp32 list: a half-precision trace gives float32 there)."""
    from simgpu.cuda_sim import autocast, placement

    index = placement.gpu_of(placement.tensors_of(args, kwargs))
    if index is None or kwargs:
        return run_op(*args, **kwargs)
    if args[0].dim() != 2:
        raise RuntimeError("expected a matrix")  # trace_cuda's check
    with placement.PlacementMode():
        if autocast.enabled_here():
            with autocast.inner_ops_cast():
                return aten.sum.default(aten.diagonal.default(args[0]))
        return aten.sum.default(aten.diagonal.default(args[0]))


def _integer_remainder(run_op: Callable, args: tuple, kwargs: dict) -> Any:
    """remainder/fmod of integers by zero: the host raises ZeroDivisionError, CUDA's kernel divides (an integer
    division by zero does not trap on a GPU). What an H200 returns there (torch 2.11+cu130,
    benchmarks/cuda_references/integer_remainder_by_zero.py): all ones for the 8-, 16- and 32-bit types (-1;
    255 for uint8, whose arithmetic is done in int), and for int64 0xFFFFFFFF (4294967295) where the dividend is
    not negative and -1 where it is; remainder's sign fix-up adds the zero divisor, so fmod and remainder agree."""
    from simgpu.cuda_sim import placement

    index = placement.gpu_of(placement.tensors_of(args, kwargs))
    if index is None or kwargs or len(args) != 2:
        return run_op(*args, **kwargs)
    dividend, divisor = args
    dtype = torch.result_type(dividend, divisor)
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return placement.label(run_op(*args), index)
    if any(placement.storage_less(t) for t in placement.tensors_of(args, {})):
        return placement.label(run_op(*args), index)  # a plan: shapes only, no values to test
    zero = divisor == 0 if isinstance(divisor, torch.Tensor) else torch.tensor(divisor == 0)
    if not bool(zero.any()):
        return placement.label(run_op(*args), index)
    safe = torch.where(zero, torch.ones((), dtype=divisor.dtype), divisor) if isinstance(divisor, torch.Tensor) else 1
    by_zero = _remainder_by_zero(torch.as_tensor(dividend), dtype)
    return placement.label(torch.where(zero, by_zero, run_op(dividend, safe)).to(dtype), index)


def _remainder_by_zero(dividend: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """CUDA's integer remainder of `dividend` by zero, in `dtype` (see _integer_remainder)."""
    if dtype == torch.int64:
        return torch.where(dividend < 0, torch.tensor(-1, dtype=dtype), torch.tensor(0xFFFFFFFF, dtype=dtype))
    return torch.full((), -1, dtype=torch.int64).to(dtype)  # all ones: -1, or 255 for uint8


def _rrelu_with_noise(run_op: Callable, args: tuple, kwargs: dict) -> Any:
    """rrelu_with_noise on a simulated GPU: its noise drawn from the GPU's generator (as CUDA draws it), and in
    float16, which the host lacks ("rrelu_with_noise_out_cpu" not implemented for 'Half'), computed in float32:
    the noise, which the op writes in place, is copied back rounded, the output rounded once."""
    from simgpu.cuda_sim import generators, placement

    index = placement.gpu_of(placement.tensors_of(args, kwargs))
    if index is None or "out" in kwargs:
        return run_op(*args, **kwargs)
    names = ("self", "noise", "lower", "upper", "training", "generator")
    bound = {**dict(zip(names, args)), **kwargs}
    x, noise = bound.pop("self"), bound.pop("noise")
    wide = x.dtype == torch.float16
    x_run, noise_run = (x.float(), noise.float()) if wide else (x, noise)
    # in evaluation rrelu draws nothing (a fixed slope), and CUDA's generator does not advance
    stream = generators.stream_for(bound.get("generator"), index) if bound.get("training", False) else None
    if stream is None:
        out = run_op(x_run, noise_run, **bound)
    else:
        out = stream.run(lambda g: run_op(x_run, noise_run, **{**bound, "generator": g}))
    if wide:
        noise.copy_(noise_run)
        out = out.to(x.dtype)
    return placement.label(out, index)


# op packet -> a handler of its own (CUDA's formula where the host's kernel differs or refuses)
HANDLERS: dict[Any, Callable[[Callable, tuple, dict], Any]] = {
    aten.trace: _trace,
    aten.remainder: _integer_remainder,
    aten.fmod: _integer_remainder,
    aten.rrelu_with_noise: _rrelu_with_noise,
}


def install() -> None:
    """Hand the listed ops to placement.py with the widening handler, or CUDA's formula."""
    from simgpu.cuda_sim import placement

    for packet, dtypes in CUDA_ONLY_DTYPES.items():
        placement.special(packet, _handler(dtypes))
    for packet, (dtypes, formula) in CUDA_FORMULAS.items():
        placement.special(packet, _formula_handler(dtypes, formula))
    for packet, handler in HANDLERS.items():
        placement.special(packet, handler)
