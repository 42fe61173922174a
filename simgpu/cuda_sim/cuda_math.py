"""The float arithmetic of CUDA's random-number transforms, bit for bit, on numpy arrays.

cuRAND and torch's distribution kernels compute with fused multiply-adds (nvcc contracts `a * b + c`),
CUDA's own `logf` (a sequence of FFMAs, read from the machine code nvcc 13.0 emits for sm_90:
benchmarks/cuda_references/curand_math_probe.cu), and `__sincosf`, which is the GPU's MUFU.SIN/COS unit:
its result depends only on q = floor(RZ(v / 2pi) * 2^25), through a measured table of one quarter period
(data/mufu_sin_quarter.xz, made by benchmarks/cuda_references/build_mufu_table.py from an H200's answers
for every q). Everything else here is IEEE single or double arithmetic, which numpy does exactly.

What is not bit for bit: torch's own transforms call at::log/exp/tan, which on a float are the fast
intrinsics __logf, __expf, __tanf (ATen/NumericUtils.h), i.e. MUFU.LG2, MUFU.EX2 and MUFU.RCP, of which no
table was measured: the correctly rounded function stands in for each (`fast_*`), within an ulp or two.
Double precision log, exp, tan and sincospi are numpy's (CUDA's are within an ulp of them).
"""
from __future__ import annotations

import functools
import lzma
from pathlib import Path

import numpy as np

_TABLE = Path(__file__).resolve().parent / "data" / "mufu_sin_quarter.xz"
QUARTER = 1 << 23  # MUFU cells per quarter period (q has 25 bits)
SEGMENT = 1 << 17  # cells per interpolation segment of the quarter table (64 segments)


def _round_to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """s + err (s = RN(exact), err the exact remainder) rounded to odd: the neighbour with an odd last bit.
    Rounding that to a format at least 2 bits narrower gives the correctly rounded exact value."""
    bits = s.view(np.int64)
    fix = (err != 0) & ((bits & 1) == 0)
    if fix.any():
        outward = (err > 0) == (s > 0)
        bits = bits + np.where(fix, np.where(outward, 1, -1), 0)
    return bits.view(np.float64)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray | float) -> np.ndarray:
    """float32 fused multiply-add, correctly rounded: the product is exact in double, the sum rounds to odd."""
    p = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32).astype(np.float64)
    s, err = _two_sum(p, np.broadcast_to(np.asarray(c, np.float32).astype(np.float64), p.shape))
    return _round_to_odd(s, err).astype(np.float32)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = a * 134217729.0  # 2^27 + 1 (Veltkamp)
    hi = t - (t - a)
    return hi, a - hi


def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray | float) -> np.ndarray:
    """float64 fused multiply-add (Boldo and Melquiond's emulation: exact product, one sum rounded to odd)."""
    a = np.asarray(a, np.float64)
    b = np.broadcast_to(np.asarray(b, np.float64), a.shape)
    c = np.broadcast_to(np.asarray(c, np.float64), a.shape)
    uh = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
    th, tl = _two_sum(c, uh)
    v, err = _two_sum(tl, ul)
    return th + _round_to_odd(v, err)


def mul_rz32(a: np.ndarray, b: float) -> np.ndarray:
    """float32 product rounded toward zero (FMUL.RZ)."""
    p = np.asarray(a, np.float32).astype(np.float64) * float(np.float32(b))
    r = p.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(p)
    return np.where(over, np.nextafter(r, np.float32(0)), r)


def _f32(value: float) -> np.float32:
    return np.float32(value)


# logf as nvcc 13.0 emits it for sm_90 (curand_math_probe.cu's k_logf): what cuRAND's Box-Muller calls
_LOGF = [_f32(v) for v in (0.14084610342979431152, -0.12148627638816833496, 0.13980610668659210205,
                           -0.16684235632419586182, 0.20012299716472625732, -0.24999669194221496582,
                           0.33333182334899902344, -0.5)]
_LOGF_LEAD = np.uint32(0x3E055027).view(np.float32)
_LN2 = _f32(0.69314718246459960938)


def _log_core(r: np.ndarray, e: np.ndarray) -> np.ndarray:
    p = fma32(r, -_LOGF_LEAD, _LOGF[0])
    for k in _LOGF[1:]:
        p = fma32(r, p, k)
    p = r * p
    p = fma32(r, p, r)
    return fma32(e, _LN2, p)


def logf(x: np.ndarray) -> np.ndarray:
    """CUDA's logf for finite positive float32 (what the random transforms give it)."""
    x = np.asarray(x, np.float32)
    small = x < np.float32(1.175494350822287508e-38)
    x = np.where(small, x * np.float32(8388608), x)
    bits = x.view(np.int32)
    exponent_bits = (bits - np.int32(0x3F2AAAAB)) & np.int32(-8388608)  # & 0xff800000
    r = (bits - exponent_bits).view(np.float32) - np.float32(1)
    e = fma32(exponent_bits.astype(np.float32), np.float32(1.1920928955078125e-07),
              np.where(small, np.float32(-23), np.float32(0)))
    out = _log_core(r, e)
    return np.where(x == 0, np.float32(-np.inf), out)


def fast_logf(x: np.ndarray) -> np.ndarray:
    """__logf (at::log of a float on CUDA): MUFU.LG2, then times ln 2 rounded to float. MUFU.LG2 is
    approximated by the correctly rounded log2 (no table of it was measured): the result is within an ulp
    or two of the GPU's, often equal."""
    lg2 = np.log2(np.asarray(x, np.float32).astype(np.float64)).astype(np.float32)
    return lg2 * np.float32(0.693147182)


def fast_expf(x: np.ndarray) -> np.ndarray:
    """__expf (at::exp of a float on CUDA): times log2(e) rounded to float, then MUFU.EX2, approximated by
    the correctly rounded exp2 (no table of it was measured)."""
    t = np.asarray(x, np.float32) * np.float32(1.44269502)
    return np.exp2(t.astype(np.float64)).astype(np.float32)


def fast_tanf(x: np.ndarray) -> np.ndarray:
    """__tanf (at::tan of a float on CUDA): __sinf(x) / __cosf(x) with the fast division, sin and cos from
    the measured MUFU table, the reciprocal (MUFU.RCP) approximated by the correctly rounded one."""
    x = np.asarray(x, np.float32)
    sin, cos = sincosf_fast(np.abs(x))
    sin = np.where(x < 0, -sin, sin)
    with np.errstate(divide="ignore"):
        return sin * (np.float32(1) / cos)


@functools.lru_cache(maxsize=1)
def _quarter_table() -> np.ndarray:
    """MUFU.SIN over the first quarter period, one float32 per cell (module docstring)."""
    raw = lzma.decompress(_TABLE.read_bytes())
    coefficients = np.frombuffer(raw[:64 * 3 * 8], "<f8").reshape(64, 3)
    residual = np.frombuffer(raw[64 * 3 * 8:], np.int8).astype(np.int32)
    x = np.arange(SEGMENT, dtype=np.float64)
    fit = (coefficients[:, :1] + coefficients[:, 1:2] * x + coefficients[:, 2:3] * (x * x)).astype(np.float32)
    return (fit.reshape(-1).view(np.int32) + residual).view(np.float32)


def sincosf_fast(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """__sincosf(v) on the GPU: FMUL.RZ by 1/(2 pi), then MUFU.SIN and MUFU.COS, for 0 <= v <= 2 pi."""
    z = mul_rz32(v, 0.15915494).astype(np.float64)
    q = np.floor(z * 33554432.0).astype(np.int64)
    table = _quarter_table()

    def unit(cell: np.ndarray) -> np.ndarray:
        quadrant = (cell >> 23) & 3
        t = cell & (QUARTER - 1)
        value = table[np.where(quadrant & 1, (QUARTER - 1) - t, t)]
        return np.where(quadrant >= 2, -value, value)

    return unit(q), unit(q + QUARTER)
