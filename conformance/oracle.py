"""The NumPy oracle: what every rank must hold after a collective (shared/semantics.md section 4).

Exact types are computed exactly (integers wrap modulo 2**bits, as both backends do).
Floating results are checked against forward-error bounds for any summation order, per dtype
and world size, never a blanket rtol:
  SUM   |y - S| <= (n-1) u sum|x|          (+ (n-1) tiny absolute slack for subnormal flush)
  PROD  |y - P| <= gamma_{n-1} |P|          gamma_k = k u / (1 - k u)
  AVG   |y - S/n| <= (n+1) u sum|x| / n
  PREMUL_SUM(f) |y - f S| <= n u sum|f x|
  MIN/MAX exact (+0 and -0 both accepted)
Where sum|x| may pass the largest finite value, an infinite result is accepted too (for float8_e4m3fn,
which has no infinity, the saturated largest finite value or NaN).

NCCL flavour, fp8 [nccl-run, torch 2.11 / NCCL 2.28.9 on H200]: NCCL's fp8 reductions saturate. An
infinite input counts as the largest finite value of its sign, +-57344 (e5m2) / +-448 (e4m3fn), so
inf + -inf is 0 and not NaN (full run 2026-11-22: reduce_scatter e5m2 SUM gave 57344 and AVG 0.0
where IEEE says NaN); a result that overflows is that largest value, for SUM, AVG, PRODUCT and
MIN/MAX alike (MIN(-0, -inf) = -57344); NaN stays NaN. AVG is NCCL's PREMUL_SUM(1/n): each input is
scaled first and saturated after, so an infinite input counts as the largest finite value, not as
that value / n (x2 run 2026-11-22: all_reduce e5m2 AVG of -inf and 14336 on 2 ranks gave -49152, not
-21504). The oracle clips the inputs the same way and accepts the saturated value wherever the result
may overflow.

One contribution (a group of one rank): the reduction of one tensor is that tensor, whatever the op;
so where NCCL accepts an op it cannot compute for n > 1 (reduce_scatter on one rank skips the op:
bitwise ops, AVG on bool, PREMUL_SUM on integers and fp8) the expected result is an exact copy.
PREMUL_SUM on a floating dtype stays f * x.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from conformance.dtypes import DType

REDUCE_OPS = ["sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum"]

# How a backend family rounds and treats NaN: "nccl" (NCCL and the simulator) or "gloo".
FLAVORS = ("nccl", "gloo")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str = ""


OK = Verdict(True)


# Large arrays (the benchmark checks buffers of up to gigabytes) are checked in flat blocks of this
# many elements: every rule here is elementwise, and the float64 temporaries stay bounded.
BLOCK_ELEMENTS = 1 << 20


def _in_blocks(check: Callable[..., Verdict]) -> Callable[..., Verdict]:
    """Run an elementwise check block by block over the flattened arrays; stop at the first failing block."""
    @functools.wraps(check)
    def blocked(actual: np.ndarray, others: Any, *rest: Any, **kw: Any) -> Verdict:
        arrays = others if isinstance(others, list) else [others]
        if actual.size <= BLOCK_ELEMENTS or any(a.shape != actual.shape for a in arrays):
            return check(actual, others, *rest, **kw)
        flat, flat_others = actual.reshape(-1), [a.reshape(-1) for a in arrays]
        for start in range(0, flat.size, BLOCK_ELEMENTS):
            part = slice(start, start + BLOCK_ELEMENTS)
            block = [a[part] for a in flat_others]
            verdict = check(flat[part], block if isinstance(others, list) else block[0], *rest, **kw)
            if not verdict.ok:
                return Verdict(False, f"flat elements from {start} of shape {actual.shape}: {verdict.message}")
        return OK

    return blocked


def _wrap_int(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Exact integer arithmetic modulo 2**bits: compute in (u)int64 (itself modular), cast down."""
    return values.astype(dtype.carrier)


def _as_real(a: np.ndarray) -> np.ndarray:
    """Complex arrays are checked component-wise, as torch reduces their real view."""
    return np.stack([a.real, a.imag], axis=-1) if np.iscomplexobj(a) else a


def exact_reduce(op: str, inputs: list[np.ndarray], dtype: DType, flavor: str) -> np.ndarray:
    """The exact result for integer and bool dtypes (and MIN/MAX of any dtype)."""
    stack = np.stack(inputs)
    if dtype.kind == "bool":
        truth = stack.view(np.uint8) != 0
        if op in ("sum", "max", "bor"):
            return truth.any(axis=0)
        if op in ("product", "min", "band"):
            return truth.all(axis=0)
        if op == "bxor":
            return np.logical_xor.reduce(truth, axis=0)
        raise ValueError(f"no exact bool result for {op}")
    if dtype.is_integral:
        wide = stack.astype(np.uint64 if dtype.kind == "uint" else np.int64)
        if op == "sum":
            return _wrap_int(wide.sum(axis=0), dtype)
        if op == "product":
            return _wrap_int(np.prod(wide, axis=0), dtype)
        if op == "min":
            return stack.min(axis=0)
        if op == "max":
            return stack.max(axis=0)
        if op == "band":
            return np.bitwise_and.reduce(stack, axis=0)
        if op == "bor":
            return np.bitwise_or.reduce(stack, axis=0)
        if op == "bxor":
            return np.bitwise_xor.reduce(stack, axis=0)
        if op == "avg":
            wrapped = _wrap_int(wide.sum(axis=0), dtype).astype(np.int64 if dtype.kind == "int" else np.uint64)
            n = len(inputs)
            floor = wrapped // n  # no abs(): |INT64_MIN| does not fit
            toward_zero = floor + ((wrapped - floor * n != 0) & (wrapped < 0)).astype(floor.dtype)
            return _wrap_int(toward_zero, dtype)
        raise ValueError(f"no exact integer result for {op}")
    if op in ("min", "max"):
        return _float_minmax(op, stack, flavor)
    raise ValueError(f"{op} on {dtype.name} has no exact result")


def _float_minmax(op: str, stack: np.ndarray, flavor: str) -> np.ndarray:
    """NCCL ignores NaN (NaN only where every input is NaN); see check_reduction for gloo."""
    fn = np.fmin if op == "min" else np.fmax
    return fn.reduce(stack.astype(np.float64), axis=0)


@_in_blocks
def check_reduction(actual: np.ndarray, inputs: list[np.ndarray], op: str, dtype: DType, flavor: str,
                    factor: float | None = None) -> Verdict:
    """Compare one rank's reduced tensor with the oracle for n = len(inputs) contributions."""
    if actual.shape != inputs[0].shape:
        return Verdict(False, f"shape {actual.shape}, expected {inputs[0].shape}")
    if len(inputs) == 1 and (op in ("band", "bor", "bxor") or (op == "avg" and dtype.kind == "bool")
                             or (op == "premul_sum" and (dtype.is_integral or dtype.bits == 8))):
        return check_exact_copy(actual, inputs[0])
    if dtype.kind == "bool":
        raw = actual.view(np.uint8)
        if flavor == "nccl" and raw.size and raw.max() > 1:
            return Verdict(False, f"bool result holds raw bytes {sorted(set(raw.ravel().tolist()))[:6]}, NCCL gives 0/1")
        return _compare_exact(raw != 0, exact_reduce(op, inputs, dtype, flavor))
    if dtype.is_integral:
        return _compare_exact(actual, exact_reduce(op, inputs, dtype, flavor))
    real_actual = _as_real(actual).astype(np.float64)
    real_inputs = [_as_real(x).astype(np.float64) for x in inputs]
    saturates = flavor == "nccl" and dtype.bits == 8  # fp8 on NCCL, see the module docstring
    if saturates and len(inputs) > 1:  # an infinite input counts as the largest finite value of its
        # sign (NaN stays NaN); one rank's "reduction" is NCCL's copy, infinities included
        if op == "avg":  # NCCL's float AVG is PREMUL_SUM(1/n): the scaling comes first (inf/n is inf), then
            # the saturation: e5m2 AVG(-inf, 14336) over 2 ranks is -57344 + 7168 -> -49152
            n = len(inputs)
            real_inputs = [np.clip(x / n, -dtype.max_finite, dtype.max_finite) for x in real_inputs]
            op, factor = "premul_sum", 1.0
        else:
            real_inputs = [np.clip(x, -dtype.max_finite, dtype.max_finite) for x in real_inputs]
    if op in ("min", "max"):
        return _check_minmax(real_actual, real_inputs, op, flavor, dtype.max_finite if saturates else None)
    return _check_float_bound(real_actual, real_inputs, op, dtype, factor, saturates)


def _compare_exact(actual: np.ndarray, expected: np.ndarray) -> Verdict:
    if actual.shape == expected.shape and np.array_equal(actual, expected):
        return OK
    return Verdict(False, _first_difference(actual, expected))


def _check_minmax(actual: np.ndarray, inputs: list[np.ndarray], op: str, flavor: str,
                  saturation: float | None = None) -> Verdict:
    stack = np.stack(inputs)
    ignoring_nan = _float_minmax(op, stack, flavor)
    good = (actual == ignoring_nan) | (np.isnan(actual) & np.isnan(ignoring_nan))
    if saturation is not None:  # NCCL fp8: an infinite extreme comes back as the largest finite value
        good |= np.isinf(ignoring_nan) & (actual == np.sign(ignoring_nan) * saturation)
    if flavor == "gloo":
        # gloo folds std::min/max in an order of its own: where an input is NaN, the result is NaN or
        # one of the inputs (semantics.md: depends on rank order). Elsewhere it must be exact.
        has_nan = np.isnan(stack).any(axis=0)
        good |= has_nan & (np.isnan(actual) | (stack == actual).any(axis=0))
    if good.all():
        return OK
    return Verdict(False, _first_difference(actual, ignoring_nan, mask=~good))


def _check_float_bound(actual: np.ndarray, inputs: list[np.ndarray], op: str, dtype: DType,
                       factor: float | None, saturates: bool = False) -> Verdict:
    n = len(inputs)
    stack = np.stack(inputs)
    if op != "product":  # fast path: an exact result from finite inputs is within every bound below
        scale = {"sum": 1.0, "avg": 1.0 / n, "premul_sum": float(factor if factor is not None else 1.0)}[op]
        with np.errstate(all="ignore"):
            exact = stack.sum(axis=0) * scale
        if np.isfinite(exact).all() and np.array_equal(actual, exact):
            return OK
    u, tiny = dtype.unit_roundoff, dtype.tiny
    special = ~np.isfinite(stack).all(axis=0)
    finite = np.where(np.isfinite(stack), stack, 0.0)  # bounds from finite inputs; specials are exact below
    with np.errstate(all="ignore"):
        if op == "product":
            exact = np.prod(stack, axis=0)
            gamma = (n - 1) * u / (1 - (n - 1) * u)
            bound = gamma * np.abs(np.prod(finite, axis=0)) + n * tiny
            magnitude = np.abs(np.prod(finite, axis=0))
        else:
            scale = {"sum": 1.0, "avg": 1.0 / n, "premul_sum": float(factor if factor is not None else 1.0)}[op]
            exact = stack.sum(axis=0) * scale
            abs_sum = np.abs(finite).sum(axis=0) * abs(scale)
            steps = {"sum": n - 1, "avg": n + 1, "premul_sum": n}[op]
            bound = steps * u * abs_sum + steps * tiny
            magnitude = abs_sum
        err = np.abs(actual - exact)
        good = ~special & (err <= bound)
        # inputs with inf/nan: the result is the IEEE special value (NaN for nan or inf-inf)
        good |= special & ((actual == exact) | (np.isnan(actual) & np.isnan(exact)))
        # results that may overflow the dtype on the way: infinity is a legitimate answer
        may_overflow = magnitude * (1 + 2 * n * u) >= dtype.max_finite
        good |= ~special & may_overflow & ~np.isfinite(actual)
        # with an infinite input, the finite part may overflow to the opposite infinity first: NaN
        good |= special & may_overflow & np.isnan(actual)
        if not dtype.has_inf and not saturates:  # saturation at the largest finite value
            good |= ~special & may_overflow & (np.abs(actual) == dtype.max_finite)
        if saturates and op != "product" and n > 2:
            # NCCL fp8 (inputs already clipped): every partial sum is saturated, so where one may
            # overflow the result depends on the order, but stays between the (saturated) sums of
            # the negative and of the positive contributions (two contributions: one addition, no order)
            low = np.maximum(np.where(finite < 0, finite, 0.0).sum(axis=0), -dtype.max_finite) * abs(scale)
            high = np.minimum(np.where(finite > 0, finite, 0.0).sum(axis=0), dtype.max_finite) * abs(scale)
            good |= ~special & may_overflow & (actual >= low - bound) & (actual <= high + bound)
        elif saturates:
            good |= ~special & may_overflow & (actual == np.sign(exact) * dtype.max_finite)
    if good.all():
        return OK
    return Verdict(False, _first_difference(actual, exact, mask=~good, bound=bound))


def _first_difference(actual: np.ndarray, expected: np.ndarray, mask: np.ndarray | None = None,
                      bound: np.ndarray | None = None) -> str:
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if mask is None:
        with np.errstate(all="ignore"):
            mask = ~((actual == expected) | (np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64)))
                     if actual.dtype.kind in "fc" or expected.dtype.kind in "fc" else actual == expected)
    if actual.ndim == 0:
        actual, expected, mask = actual.reshape(1), expected.reshape(1), np.reshape(mask, 1)
        bound = None if bound is None else np.reshape(bound, 1)
    bad = np.argwhere(mask)
    if bad.size == 0:
        return "values differ"
    idx = tuple(int(i) for i in bad[0])
    text = f"{len(bad)} element(s) wrong; first at {idx}: got {actual[idx].item()!r}, expected {expected[idx].item()!r}"
    if bound is not None:
        text += f" (allowed error {bound[idx]:.3g})"
    return text


@_in_blocks
def check_exact_copy(actual: np.ndarray, expected: np.ndarray, what: str = "") -> Verdict:
    """Data movement must be bit-faithful: same shape, same values, NaN where NaN, same sign of zero."""
    where = f"{what}: " if what else ""
    if actual.shape != expected.shape:
        return Verdict(False, f"{where}shape {actual.shape}, expected {expected.shape}")
    if actual.dtype.kind == "b" or expected.dtype.kind == "b":
        return _prefix(where, _compare_exact(actual.view(np.uint8) != 0, expected.view(np.uint8) != 0))
    if actual.dtype.kind in "fc":
        a, e = _as_real(actual), _as_real(expected)
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        same &= (np.signbit(a) == np.signbit(e)) | np.isnan(a)
        if same.all():
            return OK
        return Verdict(False, where + _first_difference(a, e, mask=~same))
    return _prefix(where, _compare_exact(actual, expected))


def _prefix(where: str, verdict: Verdict) -> Verdict:
    return verdict if verdict.ok or not where else Verdict(False, where + verdict.message)
