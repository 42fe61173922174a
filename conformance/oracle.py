"""The NumPy oracle: what every rank must hold after a collective (NCCL's and torch.distributed's documented semantics).

Exact types are computed exactly (integers wrap modulo 2**bits, as both backends do).
Floating results are checked against forward-error bounds for any summation order, per dtype
and world size, never a blanket rtol:
  SUM   |y - S| <= (n-1) u sum|x|          (+ (n-1) tiny absolute slack for subnormal flush)
  PROD  |y - P| <= gamma_{n-1} |P|          gamma_k = k u / (1 - k u)
  AVG   |y - S/n| <= (n+1) u sum|x| / n
  PREMUL_SUM(f) |y - f S| <= n u sum|f x|
  MIN/MAX exact (+0 and -0 both accepted)
(u: the dtype's unit roundoff, 2**-p for p significand bits; n: the reduction's length, the number of
contributions: the SUM bound is Jeannerod and Rump's for any order of summation in round-to-nearest, valid
also for a backend that adds in a wider type and rounds once.)
One rounding, any order: where a SUM has at most two non-zero contributions, or a PRODUCT at most two
factors that are not powers of two (and no partial product leaves the normal range), every order of
evaluation rounds exactly once, so the result must be the exact value rounded to nearest, ties to even,
with no tolerance: RN(a + b) and RN(a * b). A wider accumulator changes nothing (a single +, * rounded to
p' >= 2p + 2 bits, then to p, is correctly rounded). The suite draws such cases on purpose (full-mantissa
values with zeros among them; sums at a rounding tie, strategies.tied_contributions), so a backend that
rounds toward zero, or half away from zero, or computes PRODUCT through logarithms, fails. Subnormal inputs
or results, and results past the largest finite value, keep the bounds above.
Where sum|x| may pass the largest finite value, an infinite result is accepted too (for float8_e4m3fn,
which has no infinity, the saturated largest finite value or NaN).

NCCL flavour, fp8 [nccl-run, torch 2.11 / NCCL 2.28.9 on H200]: every operation of NCCL's fp8
reductions saturates its result: an overflow or an infinity comes back as the largest finite value of
its sign, +-57344 (e5m2) / +-448 (e4m3fn); NaN stays NaN; NCCL never returns an infinity. On two ranks
there is one operation on the inputs as they are (probe run2: e5m2 inf + -inf is NaN, inf - 80 is
57344). From three ranks on, partial sums saturate before the next input comes, so an infinite input
counts as +-max (full run, 4 GPUs: reduce_scatter SUM of +inf, -inf, ... gave 57344 where IEEE says
NaN), the result depends on the order, and the oracle accepts what some order can give: between the
saturated sums of the negative and of the positive contributions, grown by the roundings on the way,
and NaN only where two opposite infinities (or, for PRODUCT, an infinity and a zero) could meet first.
AVG is NCCL's PREMUL_SUM(1/n): each input is scaled first and saturated after, so an infinite input
counts as the largest finite value whole, not that value / n (2-GPU run: all_reduce e5m2 AVG of -inf
and 14336 gave -49152, not -21504).

bool results are 0/1 bytes on every backend (invalid_bool): a byte 2 after a SUM is a wrong result.

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

from conformance.dtypes import DTYPES, DType, representable

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
        invalid = invalid_bool(actual)
        if invalid is not None:
            return invalid
        return _compare_exact(actual.view(np.uint8) != 0, exact_reduce(op, inputs, dtype, flavor))
    if dtype.is_integral:
        return _compare_exact(actual, exact_reduce(op, inputs, dtype, flavor))
    real_actual = _as_real(actual).astype(np.float64)
    real_inputs = [_as_real(x).astype(np.float64) for x in inputs]
    # fp8 on NCCL, see the module docstring; one rank's "reduction" is NCCL's copy, infinities included
    saturates = flavor == "nccl" and dtype.bits == 8 and len(inputs) > 1
    prescaled, nan_ok = False, None
    if saturates:
        real_inputs, prescaled, nan_ok = _nccl_fp8_contributions(real_inputs, op, dtype)
    if op in ("min", "max"):
        return _check_minmax(real_actual, real_inputs, op, flavor, dtype.max_finite if saturates else None)
    return _check_float_bound(real_actual, real_inputs, op, dtype, factor, saturates, prescaled, nan_ok)


def _nccl_fp8_contributions(inputs: list[np.ndarray], op: str, dtype: DType
                            ) -> tuple[list[np.ndarray], bool, np.ndarray | None]:
    """What NCCL's fp8 reduction adds up, n > 1 (module docstring): (contributions, already scaled by
    1/n, positions where NaN is a legitimate answer of some order).

    Every operation NCCL applies saturates its result (+-inf becomes +-max). AVG scales each input
    first (PREMUL_SUM(1/n)), so its contributions are clip(x / n): an infinite input counts as +-max
    whole. Two ranks apply one operation to the inputs as they are (e5m2 inf + -inf is NaN, inf - 57344
    is inf, saturated to 57344): the contributions stay raw and the result is that one operation,
    saturated. From three ranks on, a partial sum saturates before the next input comes, so an infinite
    input counts as +-max, except that the first operation may still meet two raw infinities (NaN).
    """
    top = dtype.max_finite
    n = len(inputs)
    if op == "avg":
        return [np.clip(x / n, -top, top) for x in inputs], True, None
    if n == 2:
        return inputs, False, None
    stack = np.stack(inputs)
    if op == "product":
        nan_ok = np.isinf(stack).any(axis=0) & (stack == 0).any(axis=0)
    else:
        nan_ok = (stack == np.inf).any(axis=0) & (stack == -np.inf).any(axis=0)
    return [np.clip(x, -top, top) for x in inputs], False, nan_ok


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
        # one of the inputs (NCCL: depends on rank order). Elsewhere it must be exact.
        has_nan = np.isnan(stack).any(axis=0)
        good |= has_nan & (np.isnan(actual) | (stack == actual).any(axis=0))
    if good.all():
        return OK
    return Verdict(False, _first_difference(actual, ignoring_nan, mask=~good))


def _check_float_bound(actual: np.ndarray, inputs: list[np.ndarray], op: str, dtype: DType,
                       factor: float | None, saturates: bool = False, prescaled: bool = False,
                       nan_ok: np.ndarray | None = None) -> Verdict:
    """saturates: NCCL's fp8 (see _nccl_fp8_contributions); prescaled: AVG's inputs already divided by n;
    nan_ok: positions where NaN is a legitimate answer although no input is NaN."""
    n = len(inputs)
    stack = np.stack(inputs)
    scale = {"sum": 1.0, "avg": 1.0 if prescaled else 1.0 / n,
             "premul_sum": float(factor if factor is not None else 1.0)}.get(op, 1.0)
    if op != "product":  # fast path: an exact result from finite inputs is within every bound below
        with np.errstate(all="ignore"):
            exact = stack.sum(axis=0) * scale
        if np.isfinite(exact).all() and np.array_equal(actual, exact):
            return OK
    u, tiny = dtype.unit_roundoff, dtype.tiny
    if op == "product":  # fast path: an exact product from finite inputs is within every bound below
        with np.errstate(all="ignore"):
            exact = np.prod(stack, axis=0)
        if np.isfinite(exact).all() and np.array_equal(actual, exact):
            return OK
    special = ~np.isfinite(stack).all(axis=0)
    finite = np.where(np.isfinite(stack), stack, 0.0)  # bounds from finite inputs; specials are exact below
    with np.errstate(all="ignore"):
        if op == "product":
            exact = np.prod(stack, axis=0)
            gamma = (n - 1) * u / (1 - (n - 1) * u)
            bound = gamma * np.abs(np.prod(finite, axis=0)) + n * tiny
            magnitude = np.abs(np.prod(finite, axis=0))
        else:
            exact = stack.sum(axis=0) * scale
            abs_sum = np.abs(finite).sum(axis=0) * abs(scale)
            steps = {"sum": n - 1, "avg": n + 1, "premul_sum": n}[op]
            bound = steps * u * abs_sum + steps * tiny
            magnitude = abs_sum
        err = np.abs(actual - exact)
        good = ~special & (err <= bound)
        # results that may overflow the dtype on the way
        may_overflow = magnitude * (1 + 2 * n * u) >= dtype.max_finite
        if not saturates:
            # inputs with inf/nan: the result is the IEEE special value (NaN for nan or inf-inf)
            good |= special & ((actual == exact) | (np.isnan(actual) & np.isnan(exact)))
            good |= ~special & may_overflow & ~np.isfinite(actual)  # infinity is a legitimate answer
            # with an infinite input, the finite part may overflow to the opposite infinity first: NaN
            good |= special & may_overflow & np.isnan(actual)
            if not dtype.has_inf:  # float8_e4m3fn without NCCL's saturation: the largest finite value
                good |= ~special & may_overflow & (np.abs(actual) == dtype.max_finite)
        else:
            # NCCL fp8 never returns an infinity: a special result is the IEEE one, saturated
            saturated = np.clip(exact, -dtype.max_finite, dtype.max_finite)
            good |= special & ((actual == saturated) | (np.isnan(actual) & np.isnan(exact)))
            if nan_ok is not None:
                good |= nan_ok & np.isnan(actual)
            if op != "product" and n > 2:
                good |= ~special & may_overflow & _within_saturated_sums(actual, finite * abs(scale), dtype)
            else:  # one operation (two ranks) or a product: overflow gives the largest value of its sign
                good |= ~special & may_overflow & (actual == np.sign(exact) * dtype.max_finite)
    once = None if prescaled else _one_rounding(stack, op, dtype)
    if once is not None:
        where, rounded = once
        good = np.where(where, actual == rounded, good)
        bound = np.where(where, 0.0, bound)
    if good.all():
        return OK
    message = _first_difference(actual, exact, mask=~good, bound=bound)
    if once is not None and (once[0] & ~good).any():
        idx = tuple(int(i) for i in np.argwhere(once[0] & ~good)[0]) if actual.ndim else ()
        message += (f"; {int((once[0] & ~good).sum())} of them rounded once in any order (at most two non-zero "
                    f"terms, or factors other than powers of two), so correctly rounded: first at {idx}, "
                    f"got {actual[idx].item()!r}, correctly rounded {once[1][idx].item()!r}")
    return Verdict(False, message)


def _one_rounding(stack: np.ndarray, op: str, dtype: DType) -> tuple[np.ndarray, np.ndarray] | None:
    """(positions whose result is one rounding of the exact value whatever the order, that value rounded to
    nearest even in the dtype), or None for ops without such positions (module docstring).

    SUM: at most two non-zero contributions (every partial sum before the last is exact). PRODUCT: at most
    two factors that are not powers of two (scaling by a power of two is exact) and no partial product,
    in any order, outside the normal range. Subnormal inputs or results and results out of range are left
    to the bounds: a backend may flush subnormals, and overflow has rules of its own."""
    if op not in ("sum", "product"):
        return None
    if dtype.kind == "complex":  # reduced as its real view: float32 components
        dtype = DTYPES["float32"]
    finite = np.isfinite(stack).all(axis=0)
    x = np.where(np.isfinite(stack), stack, 0.0)
    magnitude = np.abs(x)
    normal_inputs = ((magnitude == 0) | (magnitude >= dtype.tiny)).all(axis=0)
    with np.errstate(all="ignore"):
        if op == "sum":
            exact = x.sum(axis=0)
            few = (x != 0).sum(axis=0) <= 2
        else:
            exact = np.prod(x, axis=0)
            few = ((np.frexp(magnitude)[0] != 0.5) & (magnitude != 0)).sum(axis=0) <= 2
            smallest = np.where((magnitude > 0) & (magnitude < 1), magnitude, 1.0).prod(axis=0)
            largest = np.where(magnitude > 1, magnitude, 1.0).prod(axis=0)
            few &= (smallest >= dtype.tiny) & (largest <= dtype.max_finite)
        rounded = representable(exact, dtype).astype(np.float64)
        size = np.abs(rounded)
        in_range = np.isfinite(rounded) & ((size == 0) | ((size >= dtype.tiny) & (size <= dtype.max_finite)))
    return finite & normal_inputs & few & in_range, rounded


def _within_saturated_sums(actual: np.ndarray, contributions: np.ndarray, dtype: DType) -> np.ndarray:
    """NCCL fp8 from three ranks on: every partial sum saturates, so where one may overflow the result
    depends on the order. Whatever the order (chain or tree), it lies between the sum of the negative
    and the sum of the positive contributions, each grown by the roundings on the way and saturated;
    with contributions of one sign only, the partial sums only grow, so the result is at least that
    sum shrunk by the roundings (two per operation: half precision, then fp8)."""
    n = contributions.shape[0]
    u, top = dtype.unit_roundoff, dtype.max_finite
    grow, shrink = (1 + 2 * u) ** (n + 1), (1 - 2 * u) ** (n + 1)
    pos = np.where(contributions > 0, contributions, 0.0).sum(axis=0)
    neg = np.where(contributions < 0, contributions, 0.0).sum(axis=0)
    low = np.where(neg < 0, np.maximum(neg * grow, -top), np.minimum(pos, top) * shrink)
    high = np.where(pos > 0, np.minimum(pos * grow, top), np.maximum(neg, -top) * shrink)
    slack = n * dtype.tiny
    return (actual >= low - slack) & (actual <= high + slack)


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


def invalid_bool(actual: np.ndarray) -> Verdict | None:
    """torch's bool is one byte holding 0 or 1, on every backend: a result holding another byte (a SUM
    that added bytes, e.g. 2 for True + True) is an invalid bool (torch reads it unpredictably), so a
    wrong result, never "some non-zero byte, hence True"."""
    raw = actual.view(np.uint8)
    if raw.size and raw.max() > 1:
        bad = np.argwhere(raw.reshape(actual.shape) > 1)[0] if actual.ndim else ()
        return Verdict(False, f"invalid bool: raw byte(s) {sorted(set(raw.ravel().tolist()) - {0, 1})[:6]} "
                              f"(first at {tuple(int(i) for i in bad)}); a bool holds 0 or 1")
    return None


@_in_blocks
def check_exact_copy(actual: np.ndarray, expected: np.ndarray, what: str = "") -> Verdict:
    """Data movement must be bit-faithful: same shape, same values, NaN where NaN, same sign of zero."""
    where = f"{what}: " if what else ""
    if actual.shape != expected.shape:
        return Verdict(False, f"{where}shape {actual.shape}, expected {expected.shape}")
    if actual.dtype.kind == "b" or expected.dtype.kind == "b":
        invalid = invalid_bool(actual) if actual.dtype.kind == "b" else None
        return _prefix(where, invalid or _compare_exact(actual.view(np.uint8) != 0, expected.view(np.uint8) != 0))
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
