"""The legacy tensor types of CUDA: torch.cuda.FloatTensor and its kin, and the type names
`Tensor.type()` gives and takes ("torch.cuda.FloatTensor"). Older training code still builds
tensors with them (`Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`).
"""
from __future__ import annotations

from typing import Any

import torch

_NAMES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
          "Long": torch.int64, "Int": torch.int32, "Short": torch.int16, "Char": torch.int8, "Byte": torch.uint8,
          "Bool": torch.bool}
_BY_DTYPE = {dtype: name for name, dtype in _NAMES.items()}


class _LegacyCudaType(type):
    """isinstance(t, torch.cuda.FloatTensor): t is a float32 tensor on a simulated GPU."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) and obj.is_cuda and obj.dtype == cls.dtype

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


def _make(name: str, dtype: torch.dtype) -> type:
    cpu_type = getattr(torch, f"{name}Tensor")

    def __new__(cls: type, *args: Any, **kwargs: Any) -> torch.Tensor:  # noqa: N807 - a constructor
        """torch.cuda.FloatTensor(3) or (data): the host type's tensor, on the current GPU."""
        return cpu_type(*args, **kwargs).cuda()

    return _LegacyCudaType(f"{name}Tensor", (), {"__new__": __new__, "dtype": dtype, "is_cuda": True,
                                                "__module__": "torch.cuda"})


CUDA_TYPES: dict[str, type] = {f"{name}Tensor": _make(name, dtype) for name, dtype in _NAMES.items()}


def type_name(t: torch.Tensor, on_gpu: bool) -> str | None:
    """What Tensor.type() says: torch.cuda.FloatTensor on a simulated GPU (None: torch's own answer)."""
    name = _BY_DTYPE.get(t.dtype)
    return f"torch.cuda.{name}Tensor" if on_gpu and name else None


def parse(target: Any) -> tuple[torch.dtype, bool] | None:
    """A Tensor.type() argument naming a legacy type: (dtype, on a GPU); None for anything else."""
    if isinstance(target, type) and isinstance(target, _LegacyCudaType):
        return target.dtype, True
    name = target if isinstance(target, str) else getattr(target, "__module__", "") + "." + getattr(target, "__name__", "")
    for prefix, on_gpu in (("torch.cuda.", True), ("torch.", False)):
        if name.startswith(prefix) and name.endswith("Tensor") and name[len(prefix):-len("Tensor")] in _NAMES:
            return _NAMES[name[len(prefix):-len("Tensor")]], on_gpu
    return None
