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


def _fma32_wide(a: np.ndarray, b: np.ndarray | float, c: np.ndarray | float, tiny: bool = True) -> np.ndarray:
    """fma32 on float64 arrays holding float32 values, the result as float64 (float32-valued): the product
    is exact in double; the sum's double rounding can only differ from one rounding where the double lands
    exactly halfway between two floats (or, with `tiny`, below float32's normal range), and only there the
    sum is rounded to odd instead."""
    s = a * b
    s += c
    suspect = np.bitwise_and(s.view(np.int64), 0x1FFFFFFF) == 0x10000000
    if tiny:
        suspect |= (np.abs(s) < 2.0**-125) & (s != 0)
    if suspect.any():
        where = np.nonzero(suspect)
        product = np.broadcast_to(a, s.shape)[where] * np.broadcast_to(b, s.shape)[where]
        exact, err = _two_sum(product, np.broadcast_to(c, s.shape)[where])
        s[where] = _round_to_odd(exact, err)
    return s.astype(np.float32).astype(np.float64)


def fma32(a: np.ndarray, b: np.ndarray | float, c: np.ndarray | float) -> np.ndarray:
    """float32 fused multiply-add, correctly rounded."""
    wide = [np.asarray(x, np.float32).astype(np.float64) for x in (a, b, c)]
    return _fma32_wide(*wide).astype(np.float32)


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


def _f32(value: float) -> np.float32:
    return np.float32(value)


# logf as nvcc 13.0 emits it for sm_90 (curand_math_probe.cu's k_logf): what cuRAND's Box-Muller calls
_LOGF = [_f32(v) for v in (0.14084610342979431152, -0.12148627638816833496, 0.13980610668659210205,
                           -0.16684235632419586182, 0.20012299716472625732, -0.24999669194221496582,
                           0.33333182334899902344, -0.5)]
_LOGF_LEAD = np.uint32(0x3E055027).view(np.float32)
_LN2 = _f32(0.69314718246459960938)


def logf(x: np.ndarray) -> np.ndarray:
    """CUDA's logf for finite positive float32 (what the random transforms give it)."""
    x = np.asarray(x, np.float32)
    small = x < np.float32(1.175494350822287508e-38)
    x = np.where(small, x * np.float32(8388608), x)
    bits = x.view(np.int32)
    exponent_bits = (bits - np.int32(0x3F2AAAAB)) & np.int32(-8388608)  # & 0xff800000
    r = ((bits - exponent_bits).view(np.float32) - np.float32(1)).astype(np.float64)
    e = exponent_bits.astype(np.float64) * 1.1920928955078125e-07 + np.where(small, -23.0, 0.0)  # exact
    # every value here is 0 or at least 2^-50 in magnitude: no float32 subnormals to watch for
    p = _fma32_wide(r, -float(_LOGF_LEAD), float(_LOGF[0]), tiny=False)
    for k in _LOGF[1:]:
        p = _fma32_wide(r, p, float(k), tiny=False)
    p = (r * p).astype(np.float32).astype(np.float64)
    p = _fma32_wide(r, p, r, tiny=False)
    out = _fma32_wide(e, float(_LN2), p, tiny=False).astype(np.float32)
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


@functools.lru_cache(maxsize=1)
def _pair_table() -> np.ndarray:
    """The quarter table paired with its mirror image, f(t) | f(Q - 1 - t) << 32: a sine and its cosine
    come from one read (one cache line) per cell."""
    quarter = _quarter_table().view(np.uint32).astype(np.uint64)
    return quarter | (quarter[::-1] << np.uint64(32))


def sincosf_fast(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """__sincosf(v) on the GPU: FMUL.RZ by 1/(2 pi), then MUFU.SIN and MUFU.COS, for 0 <= v <= 2 pi.

    The cell is q = floor(z * 2^25) of z = RZ(v * c); with p = v * c exact in double, that is floor(p * 2^25)
    below 1/2 (float32 holds every multiple of 2^-25 there, so truncating p to a float never crosses one)
    and 2 * floor(p * 2^24) above (where float32's spacing is 2^-24). With A = f(t), B = f(Q - 1 - t) for
    t = q mod Q, the quadrants 0..3 give sin = A, B, -A, -B and cos = B, -A, -B, A (cos(x) = sin(x + 1/4))."""
    p = np.asarray(v, np.float32).astype(np.float64) * float(np.float32(0.15915494))
    q = (p * 33554432.0).astype(np.int64)
    q &= np.where(q >= 1 << 24, -2, -1)
    pairs = _pair_table()[q & (QUARTER - 1)]
    odd = ((q >> 23) & 1).astype(bool)
    low, high = (pairs & np.uint64(0xFFFFFFFF)).astype(np.uint32), (pairs >> np.uint64(32)).astype(np.uint32)
    first, second = np.where(odd, high, low), np.where(odd, low, high)
    upper = ((q >> 24) & 1).astype(np.uint32)
    sin = first ^ (upper << np.uint32(31))
    cos = second ^ ((upper ^ odd.astype(np.uint32)) << np.uint32(31))
    return sin.view(np.float32), cos.view(np.float32)
