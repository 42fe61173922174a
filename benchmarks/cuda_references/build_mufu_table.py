"""Build simgpu/cuda_sim/data/mufu_sin_quarter.xz, the GPU's MUFU.SIN over one quarter period, from what
random_streams_device.sh brought back from a GPU box (sin0.xz .. sin2.xz: sincos_table_pack.py's int32
differences from float32(sin(2 pi q 2^-25)) for every q < 2^25 + 1).

The quarter is 2^23 cells in 64 segments of 2^17; the hardware interpolates each segment with a quadratic.
The file holds, xz-compressed: 64 x 3 float64 coefficients (c0, c1, c2 of c0 + c1 x + c2 x^2 in the cell
offset x, fitted by least squares in units of the value's last place) followed by 2^23 int8: each cell's
float32 bits minus the bits of float32(c0 + c1 x + c2 * (x * x)) computed in float64. cuda_math.py reads it.
    python benchmarks/cuda_references/build_mufu_table.py DIR_WITH_sin0.xz [OUT]"""
from __future__ import annotations

import lzma
import sys
from pathlib import Path

import numpy as np

QUARTER, SEGMENT = 1 << 23, 1 << 17


def quarter(dump: Path) -> np.ndarray:
    parts = [np.frombuffer(lzma.decompress((dump / f"sin{i}.xz").read_bytes()), np.int32) for i in range(3)]
    residual = np.concatenate(parts)[:QUARTER].astype(np.int64)
    q = np.arange(QUARTER, dtype=np.float64)
    reference = np.sin(2 * np.pi * q * 2.0**-25).astype(np.float32).view(np.uint32).astype(np.int64)
    return (reference + residual).astype(np.uint32).view(np.float32)


def pack(values: np.ndarray) -> bytes:
    x = np.arange(SEGMENT, dtype=np.float64)
    coefficients, residuals = [], []
    for i in range(QUARTER // SEGMENT):
        y = values[i * SEGMENT:(i + 1) * SEGMENT].astype(np.float64)
        columns = [x, x * x] if i == 0 else [np.ones(SEGMENT), x, x * x]  # segment 0 starts at sin(0) = 0
        fit_rows = y != 0
        weight = 1 / np.spacing(np.abs(y[fit_rows]).astype(np.float32)).astype(np.float64)
        design = np.stack(columns, 1)[fit_rows] * weight[:, None]
        c = np.linalg.lstsq(design, y[fit_rows] * weight, rcond=None)[0]
        c = np.concatenate([[0.0], c]) if i == 0 else c
        fit = (c[0] + c[1] * x + c[2] * (x * x)).astype(np.float32)
        r = values[i * SEGMENT:(i + 1) * SEGMENT].view(np.int32).astype(np.int64) - fit.view(np.int32)
        if np.abs(r).max() > 127:
            raise SystemExit(f"segment {i}: a cell is {np.abs(r).max()} ulps from the fit (int8 holds 127)")
        coefficients.append(c)
        residuals.append(r.astype(np.int8))
    blob = np.asarray(coefficients, "<f8").tobytes() + np.concatenate(residuals).tobytes()
    return lzma.compress(blob, preset=9 | lzma.PRESET_EXTREME)


def main() -> None:
    dump = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else \
        Path(__file__).resolve().parents[2] / "simgpu" / "cuda_sim" / "data" / "mufu_sin_quarter.xz"
    values = quarter(dump)
    out.write_bytes(pack(values))
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
