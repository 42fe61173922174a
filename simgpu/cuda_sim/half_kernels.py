"""CUDA kernels for half-precision dtypes that the host's kernels lack, computed wide and rounded.

CUDA implements some ops for complex32 (ComplexHalf), float16 or bfloat16 where torch's CPU kernels do
not ("cos_vml_cpu" not implemented for 'ComplexHalf'). CUDA's kernels compute such dtypes in their
"opmath" type (complex64 / float32) and round the result once; on a simulated GPU these ops do the same:
the inputs are widened, the host kernel runs, and floating results are rounded back to the input's dtype.
Only the (op, dtype) pairs listed, which CUDA runs (the OpInfo sweep's CUDA record says so), are widened:
elsewhere the host's refusal stands, as CUDA's would. Host tensors are never widened.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten
_WIDE = {torch.complex32: torch.complex64, torch.float16: torch.float32, torch.bfloat16: torch.float32}
_HALF_FLOATS = frozenset({torch.float16, torch.bfloat16})
# op packet -> the dtypes CUDA computes that the host cannot (torch 2.11 CUDA record; host: torch 2.13 CPU)
CUDA_ONLY_DTYPES: dict[Any, frozenset[torch.dtype]] = {
    **{getattr(aten, name): frozenset({torch.complex32})
       for name in ("cos", "cosh", "acos", "acosh", "atanh", "pow", "sum", "prod")},
    **{getattr(aten, name): _HALF_FLOATS
       for name in ("multi_margin_loss", "multi_margin_loss_backward", "multilabel_margin_loss_forward",
                    "multilabel_margin_loss_backward") if hasattr(aten, name)},
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
            out = torch.utils._pytree.tree_map(
                lambda t: t.to(narrow) if isinstance(t, torch.Tensor) and t.dtype == wide else t, out)
        return out if index is None else placement.label(out, index)

    return handle


def install() -> None:
    """Hand the listed ops to placement.py with the widening handler."""
    from simgpu.cuda_sim import placement

    for packet, dtypes in CUDA_ONLY_DTYPES.items():
        placement.special(packet, _handler(dtypes))
