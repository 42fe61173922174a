"""torch.fft in half precision on simulated GPUs, as cuFFT computes it.

cuFFT transforms float16 and complex32 (ComplexHalf) tensors whose transformed sizes are powers of two,
and refuses other sizes ("cuFFT only supports dimensions whose sizes are powers of two when computing in
half precision"). The host's FFT has no half precision: torch refuses it before any kernel runs
("Unsupported dtype Half"). On simulated GPUs a torch.fft call with a float16 or complex32 input computes
in float32 / complex64 and rounds its result to float16 / complex32, CUDA's output dtypes; the sizes are
checked where torch's FFT primitives (`_fft_r2c`, `_fft_c2c`, `_fft_c2r`) see them, as cuFFT checks them.
Gradients flow through the widening and the rounding.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from simgpu.cuda_sim import devices

aten = torch.ops.aten
_NAMES = ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn", "irfftn",
          "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn")
FUNCTIONS = frozenset(getattr(torch.fft, name) for name in _NAMES if hasattr(torch.fft, name))
_WIDE = {torch.float16: torch.float32, torch.complex32: torch.complex64}
_NARROW = {torch.float32: torch.float16, torch.complex64: torch.complex32}
_state = threading.local()


def applies(func: Callable, args: tuple, kwargs: dict) -> bool:
    """A torch.fft call whose input is float16 or complex32 on a simulated GPU (without out=)."""
    if func not in FUNCTIONS or "out" in kwargs:
        return False
    x = args[0] if args else kwargs.get("input")
    return isinstance(x, torch.Tensor) and x.dtype in _WIDE and devices.device_of(x) is not None


def run(func: Callable, args: tuple, kwargs: dict) -> Any:
    """The call computed in float32 / complex64, its result rounded to float16 / complex32."""
    if args:
        args = (args[0].to(_WIDE[args[0].dtype]), *args[1:])
    else:
        kwargs = {**kwargs, "input": kwargs["input"].to(_WIDE[kwargs["input"].dtype])}
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        out = func(*args, **kwargs)
    finally:
        _state.depth -= 1
    return out.to(_NARROW[out.dtype]) if out.dtype in _NARROW else out


def _check_sizes(sizes: list[int]) -> None:
    if getattr(_state, "depth", 0) and any(n <= 0 or n & (n - 1) for n in sizes):
        raise RuntimeError(f"cuFFT only supports dimensions whose sizes are powers of two when computing in half "
                           f"precision, but got a signal size of{list(sizes)}")


def _primitive(signal_sizes: Callable[..., list[int]]) -> Callable:
    """A placement handler for an FFT primitive: cuFFT's size rule in half precision, then the op, placed."""
    def handle(run_op: Callable, args: tuple, kwargs: dict) -> Any:
        from simgpu.cuda_sim import placement

        _check_sizes(signal_sizes(*args, **kwargs))
        out = run_op(*args, **kwargs)
        index = placement.gpu_of(placement.tensors_of(args, kwargs))
        return out if index is None else placement.label(out, index)

    return handle


def _sizes(x: torch.Tensor, dim: list[int], *rest: Any, **kwargs: Any) -> list[int]:
    return [x.shape[d] for d in dim]


def _c2r_sizes(x: torch.Tensor, dim: list[int], normalization: int, last_dim_size: int, **kwargs: Any) -> list[int]:
    return [x.shape[d] for d in dim[:-1]] + [last_dim_size]


def install() -> None:
    """Check cuFFT's size rule where the FFT primitives run (placement.py hands them here)."""
    from simgpu.cuda_sim import placement

    placement.special(aten._fft_r2c, _primitive(_sizes))
    placement.special(aten._fft_c2c, _primitive(_sizes))
    placement.special(aten._fft_c2r, _primitive(_c2r_sizes))
