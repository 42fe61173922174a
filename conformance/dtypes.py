"""The dtypes the suite draws, how they travel between controller and ranks, and their rounding units.

Values travel as NumPy arrays. Types NumPy lacks (bfloat16, float8) travel as float32 arrays that
hold exactly representable values, so the oracle sees the very inputs the ranks used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """One tensor dtype as the suite sees it."""

    name: str          # torch attribute name: torch.<name>
    kind: str          # "bool" | "int" | "uint" | "float" | "complex"
    carrier: str       # numpy dtype of the arrays that carry the values
    bits: int = 0      # integer width (wraparound) or float storage width
    unit_roundoff: float = 0.0  # u: half an ulp at 1.0 (floats); 0 for exact types
    max_finite: float = 0.0
    tiny: float = 0.0  # smallest positive normal
    has_inf: bool = True  # float8_e4m3fn has none: overflow saturates (torch's cast) or is NaN

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "complex")

    @property
    def is_integral(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    def torch_dtype(self):  # noqa: ANN201 - torch imported lazily (controller may stay light)
        import torch

        return getattr(torch, self.name)


def _f(name: str, carrier: str, bits: int, u: float, max_finite: float, tiny: float) -> DType:
    return DType(name, "float", carrier, bits, u, max_finite, tiny)


DTYPES: dict[str, DType] = {d.name: d for d in [
    DType("bool", "bool", "bool", 8),
    DType("uint8", "uint", "uint8", 8),
    DType("int8", "int", "int8", 8),
    DType("int16", "int", "int16", 16),
    DType("int32", "int", "int32", 32),
    DType("int64", "int", "int64", 64),
    DType("uint16", "uint", "uint16", 16),
    DType("uint32", "uint", "uint32", 32),
    DType("uint64", "uint", "uint64", 64),
    _f("float16", "float16", 16, 2.0**-11, 65504.0, 2.0**-14),
    _f("bfloat16", "float32", 16, 2.0**-8, 3.3895313892515355e38, 2.0**-126),
    _f("float32", "float32", 32, 2.0**-24, float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)),
    _f("float64", "float64", 64, 2.0**-53, float(np.finfo(np.float64).max), float(np.finfo(np.float64).tiny)),
    DType("complex64", "complex", "complex64", 64, 2.0**-24, float(np.finfo(np.float32).max),
          float(np.finfo(np.float32).tiny)),
    DType("float8_e4m3fn", "float", "float32", 8, 2.0**-4, 448.0, 2.0**-6, has_inf=False),
    _f("float8_e5m2", "float32", 8, 2.0**-3, 57344.0, 2.0**-14),
]}

# The dtypes of the core list: every backend's table says something about each of these.
CORE_DTYPES = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "complex64"]


def representable(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Round carrier values to what `dtype` can hold (bfloat16/float8 need torch's rounding)."""
    if dtype.carrier != "float32" or dtype.name == "float32":
        return values.astype(dtype.carrier)
    import torch

    t = torch.from_numpy(np.array(values, dtype=np.float32, order="C"))
    return t.to(dtype.torch_dtype()).to(torch.float32).numpy().reshape(np.shape(values))


def to_torch(values: np.ndarray, dtype: DType):  # noqa: ANN201
    """Carrier array -> torch tensor of the real dtype (rank side)."""
    import torch

    t = torch.from_numpy(np.array(values, order="C"))
    return t.to(dtype.torch_dtype())


def to_numpy(tensor) -> np.ndarray:  # noqa: ANN001
    """torch tensor -> carrier array (rank side); bfloat16/float8 widen exactly to float32."""
    import torch

    t = tensor.detach().cpu()
    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.to(torch.float32)
    return t.contiguous().numpy().copy()
