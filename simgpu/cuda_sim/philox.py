"""cuRAND's Philox4x32-10 and the draws torch's CUDA kernels make from it, vectorised over threads.

A CUDA kernel thread calls `curand_init(seed, subsequence=thread, offset)` and then `curand4` (or a
transform of it) once per grid-stride round: the k-th call of thread t returns Philox4x32-10 of the
128-bit counter (offset / 4 + k, t) under the 64-bit key `seed` (curand_kernel.h, curand_philox4x32_x.h;
torch's offsets are always multiples of 4, so every call starts a fresh block of four 32-bit outputs).
`block(seed, offset, calls, threads)` computes those outputs for calls [first, first + calls) of threads
[0, threads): lanes x, y, z, w, each a uint32 array of shape (calls, threads).

The DRAWS turn one call's four lanes into what the kernel's `dist_func` returns: curand_uniform4 (four
floats in (0, 1]), curand_uniform2_double, curand_normal4 (Box-Muller in float), curand_normal2_double,
the raw uint4, and the two 64-bit integers torch packs from it; each gives an array (per_call, calls, threads).
"""
from __future__ import annotations

import sys
from typing import Callable

import numpy as np

from simgpu.cuda_sim import cuda_math

_MASK = 0xFFFFFFFF
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_SHIFT = np.uint64(32)
_LO, _HI = (0, 1) if sys.byteorder == "little" else (1, 0)  # the halves of a uint64 viewed as two uint32


def block(seed: int, offset: int, first: int, calls: int, threads: int | np.ndarray) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 outputs (x, y, z, w) of calls first..first+calls-1 of threads 0..threads-1 (or of the
    threads whose indices are given)."""
    if offset % 4:
        raise ValueError(f"simgpu: a CUDA generator's Philox offset must be a multiple of 4 (got {offset})")
    counter = np.arange(first, first + calls, dtype=np.uint64)[:, None] + np.uint64(offset // 4)
    c0 = counter & np.uint64(_MASK)
    c1 = counter >> _SHIFT
    ids = np.arange(threads, dtype=np.uint64) if isinstance(threads, int) else threads.astype(np.uint64)
    shape = (calls, ids.size)
    c2 = np.broadcast_to((ids & np.uint64(_MASK))[None, :], shape)
    c3 = np.broadcast_to((ids >> _SHIFT)[None, :], shape)
    c0, c1 = np.broadcast_to(c0, shape), np.broadcast_to(c1, shape)
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    c0, c1, c2, c3 = (np.ascontiguousarray(c, dtype=np.uint32) for c in (c0, c1, c2, c3))
    for round_ in range(10):
        p0 = c0.astype(np.uint64)
        p0 *= _M0
        p1 = c2.astype(np.uint64)
        p1 *= _M1
        halves0, halves1 = p0.view(np.uint32), p1.view(np.uint32)
        lo0, hi0 = halves0[..., _LO::2], halves0[..., _HI::2]
        lo1, hi1 = halves1[..., _LO::2], halves1[..., _HI::2]
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint32(k0), lo1.copy(), hi0 ^ c3 ^ np.uint32(k1), lo0.copy()
        k0, k1 = (k0 + _W0) & _MASK, (k1 + _W1) & _MASK
    return c0, c1, c2, c3


# ---- what one call of a thread draws (the kernels' dist_func) ------------------------------------
_INV32 = np.float32(2.0**-32)
_HALF_INV32 = np.float32(2.0**-33)
_INV32_2PI = np.float32(np.float32(6.2831855) * np.float32(2.0**-32))  # CURAND_2POW32_INV_2PI
_HALF_INV32_2PI = np.float32(_INV32_2PI / np.float32(2))
_INV53 = 2.0**-53


def _uniform(x: np.ndarray) -> np.ndarray:
    """_curand_uniform: x * 2^-32 + 2^-32 / 2 in float, in (0, 1]."""
    return x.astype(np.float32) * _INV32 + _HALF_INV32


def uniform4(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.stack([_uniform(x), _uniform(y), _uniform(z), _uniform(w)])


def _uniform_double(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """_curand_uniform_double_hq: 53 random bits, in (0, 1]."""
    bits = lo.astype(np.uint64) ^ (hi.astype(np.uint64) << np.uint64(21))
    return bits.astype(np.float64) * _INV53 + _INV53 / 2


def uniform2_double(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.stack([_uniform_double(x, y), _uniform_double(z, w)])


def _box_muller(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """_curand_box_muller on the device: sqrtf(-2 logf(u)) times __sincosf(v)."""
    u = _uniform(a)
    v = cuda_math.fma32(b.astype(np.float32), _INV32_2PI, _HALF_INV32_2PI)
    s = np.sqrt(np.float32(-2) * cuda_math.logf(u))
    sin, cos = cuda_math.sincosf_fast(v)
    return sin * s, cos * s


def normal4(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    r0, r1 = _box_muller(x, y)
    r2, r3 = _box_muller(z, w)
    return np.stack([r0, r1, r2, r3])


def _sincospi(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sin(pi v), cos(pi v) with an exact reduction to |r| <= 1/4 (CUDA's sincospi is within an ulp)."""
    n = np.rint(2 * v)
    r = v - n / 2
    s, c = np.sin(np.pi * r), np.cos(np.pi * r)
    quadrant = n.astype(np.int64) & 3
    sin = np.choose(quadrant, [s, c, -s, -c])
    cos = np.choose(quadrant, [c, -s, -c, s])
    return sin, cos


def normal2_double(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """_curand_box_muller_double: sqrt(-2 log(u)) times sincospi(v), v in (0, 2]."""
    u = _uniform_double(x, y)
    v = (z.astype(np.uint64) ^ (w.astype(np.uint64) << np.uint64(21))).astype(np.float64) * (2 * _INV53) + _INV53
    s = np.sqrt(-2.0 * np.log(u))
    sin, cos = _sincospi(v)
    return np.stack([sin * s, cos * s])


def raw4(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.stack([x, y, z, w])


def raw2_64(x: np.ndarray, y: np.ndarray, z: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Two 64-bit integers: (x << 32) | y and (z << 32) | w, as torch's 64-bit random kernels pack them."""
    wide = [lane.astype(np.uint64) for lane in (x, y, z, w)]
    return np.stack([(wide[0] << _SHIFT) | wide[1], (wide[2] << _SHIFT) | wide[3]])


Draw = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]
PER_CALL: dict[Draw, int] = {uniform4: 4, uniform2_double: 2, normal4: 4, normal2_double: 2, raw4: 4, raw2_64: 2}
