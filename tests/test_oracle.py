"""The NumPy oracle (conformance/oracle.py) against hand-computed cases (NCCL's and torch.distributed's documented semantics).

Every expected value here is worked out by hand or in float64 from the published rules, never by
calling the oracle's own helpers: the oracle is what is under test.
"""
from __future__ import annotations

import numpy as np
import pytest

from conformance.dtypes import DTYPES, representable
from conformance.oracle import check_exact_copy, check_reduction, exact_reduce

NAN, INF = float("nan"), float("inf")


def arrs(dtype: str, *rows: list) -> list[np.ndarray]:
    """One carrier array per rank."""
    carrier = DTYPES[dtype].carrier
    return [np.array(r, dtype=carrier) for r in rows]


def reduce_ok(actual: list, inputs: list[np.ndarray], op: str, dtype: str, flavor: str = "nccl",
              factor: float | None = None, carrier: str | None = None) -> bool:
    got = np.array(actual, dtype=carrier or DTYPES[dtype].carrier)
    return check_reduction(got, inputs, op, DTYPES[dtype], flavor, factor).ok


# ----------------------------------------------------------------------------- integers: exact, wrapping
@pytest.mark.parametrize("flavor", ["nccl", "gloo"])
def test_int8_sum_wraps(flavor: str) -> None:
    inputs = arrs("int8", [100, -100, 127, 0], [100, -100, 1, 0])
    expected = np.array([-56, 56, -128, 0], dtype=np.int8)
    assert np.array_equal(exact_reduce("sum", inputs, DTYPES["int8"], flavor), expected)
    assert reduce_ok([-56, 56, -128, 0], inputs, "sum", "int8", flavor)
    # the unwrapped (saturated or widened) answers are wrong
    assert not reduce_ok([127, -128, 127, 0], inputs, "sum", "int8", flavor)
    assert not reduce_ok([-55, 56, -128, 0], inputs, "sum", "int8", flavor)


def test_uint8_sum_wraps() -> None:
    inputs = arrs("uint8", [200, 255, 1], [100, 1, 2], [0, 255, 3])
    expected = np.array([44, 255, 6], dtype=np.uint8)  # 300-256, 511-256, 6
    assert np.array_equal(exact_reduce("sum", inputs, DTYPES["uint8"], "nccl"), expected)
    assert reduce_ok([44, 255, 6], inputs, "sum", "uint8")
    assert not reduce_ok([255, 255, 6], inputs, "sum", "uint8")


def test_wide_integer_sum_wraps() -> None:
    i32 = arrs("int32", [2**31 - 1], [1])
    assert reduce_ok([-(2**31)], i32, "sum", "int32")
    assert not reduce_ok([2**31 - 1], i32, "sum", "int32")
    i64 = arrs("int64", [2**63 - 1], [2])
    assert reduce_ok([-(2**63) + 1], i64, "sum", "int64")


@pytest.mark.parametrize("dtype,rows,expected", [
    ("int8", [[16, 100, -128, 3], [16, 3, -1, -3]], [0, 44, -128, -9]),       # 256, 300, 128, -9
    ("uint8", [[16, 255], [17, 255]], [16, 1]),                               # 272, 65025 = 254*256+1
    ("int32", [[65536, -65536], [65536, 65537]], [0, -65536]),                # 2**32; -(2**32 + 65536)
    ("int64", [[2**32, 3], [2**32, -5]], [0, -15]),
])
def test_integer_prod_wraps(dtype: str, rows: list, expected: list) -> None:
    inputs = arrs(dtype, *rows)
    assert np.array_equal(exact_reduce("product", inputs, DTYPES[dtype], "nccl"),
                          np.array(expected, dtype=DTYPES[dtype].carrier))
    assert reduce_ok(expected, inputs, "product", dtype)
    wrong = list(expected)
    wrong[0] += 1
    assert not reduce_ok(wrong, inputs, "product", dtype)


def test_integer_min_max_bitwise() -> None:
    inputs = arrs("int8", [5, -3, 0b0110], [-7, 9, 0b0011])
    assert reduce_ok([-7, -3, 0b0011], inputs, "min", "int8")
    assert reduce_ok([5, 9, 0b0110], inputs, "max", "int8")
    assert not reduce_ok([5, 9, 0b0110], inputs, "min", "int8")
    assert reduce_ok([5 & -7, -3 & 9, 0b0010], inputs, "band", "int8")
    assert reduce_ok([5 | -7, -3 | 9, 0b0111], inputs, "bor", "int8")
    assert reduce_ok([5 ^ -7, -3 ^ 9, 0b0101], inputs, "bxor", "int8")
    assert not reduce_ok([5 | -7, -3 | 9, 0b0110], inputs, "bxor", "int8")


# ----------------------------------------------------------------------------- integer AVG (NCCL truncates)
def test_nccl_integer_avg_truncates_toward_zero() -> None:
    inputs = arrs("int32", [7, -7, 3, -3], [14, -14, 0, 0])
    expected = [10, -10, 1, -1]  # 21/2 = 10.5 -> 10, -21/2 -> -10 (not floor's -11), 1.5 -> 1, -1.5 -> -1
    assert np.array_equal(exact_reduce("avg", inputs, DTYPES["int32"], "nccl"), np.array(expected, np.int32))
    assert reduce_ok(expected, inputs, "avg", "int32", "nccl")
    assert not reduce_ok([10, -11, 1, -2], inputs, "avg", "int32", "nccl")   # floor division
    assert not reduce_ok([11, -11, 2, -2], inputs, "avg", "int32", "nccl")   # rounding half away


def test_nccl_integer_avg_divides_the_wrapped_sum() -> None:
    # int8: 100 + 100 wraps to -56 first, then -56 / 2 = -28 (not 100)
    assert reduce_ok([-28], arrs("int8", [100], [100]), "avg", "int8", "nccl")
    assert not reduce_ok([100], arrs("int8", [100], [100]), "avg", "int8", "nccl")
    # uint8: 200 + 100 = 300 -> 44, 44 / 2 = 22 (not 150); 3 ranks: 1+1+0 = 2, 2 / 3 -> 0
    assert reduce_ok([22], arrs("uint8", [200], [100]), "avg", "uint8", "nccl")
    assert reduce_ok([0], arrs("uint8", [1], [1], [0]), "avg", "uint8", "nccl")
    # int64 near the limits: (2**62 + 2**62) wraps to -2**63; NCCL divides its magnitude: -2**62
    assert reduce_ok([-(2**61) - 1], arrs("int64", [-(2**62) - 1], [-1]), "avg", "int64", "nccl")


def test_nccl_int64_avg_of_int64_min() -> None:
    # wrap(2**62 + 2**62) = -2**63; trunc(-2**63 / 2) = -2**62 (NCCL's FuncSumPostDiv divides |x| as unsigned)
    inputs = arrs("int64", [2**62], [2**62])
    assert exact_reduce("avg", inputs, DTYPES["int64"], "nccl").tolist() == [-(2**62)]


# ----------------------------------------------------------------------------- bool
@pytest.mark.parametrize("flavor", ["nccl", "gloo"])
def test_bool_reductions(flavor: str) -> None:
    a, b = [True, True, False, False], [True, False, True, False]
    inputs = arrs("bool", a, b)
    expected = {"sum": [1, 1, 1, 0], "max": [1, 1, 1, 0], "product": [1, 0, 0, 0], "min": [1, 0, 0, 0]}
    for op, want in expected.items():
        assert reduce_ok([bool(x) for x in want], inputs, op, "bool", flavor), op
        flipped = [not x for x in want]
        assert not reduce_ok(flipped, inputs, op, "bool", flavor), op
    # SUM is OR, not XOR: True + True is True
    assert not reduce_ok([False, True, True, False], inputs, "sum", "bool", flavor)


@pytest.mark.parametrize("flavor", ["nccl", "gloo"])
def test_bool_raw_bytes_above_one_are_wrong_on_every_backend(flavor: str) -> None:
    inputs = arrs("bool", [True, True], [True, False])
    raw = np.array([2, 1], dtype=np.uint8).view(np.bool_)   # "True" stored as byte 2 (a plain byte add)
    verdict = check_reduction(raw, inputs, "sum", DTYPES["bool"], flavor)
    assert not verdict.ok and "invalid bool" in verdict.message and "[2]" in verdict.message
    three = np.array([3, 0], dtype=np.uint8).view(np.bool_)
    assert not check_reduction(three, arrs("bool", [True, False], [True, False], [True, False]), "sum",
                               DTYPES["bool"], flavor).ok
    clean = np.array([1, 1], dtype=np.uint8).view(np.bool_)
    assert check_reduction(clean, inputs, "sum", DTYPES["bool"], flavor).ok


def test_bool_copy_with_a_byte_above_one_is_wrong() -> None:
    """Data movement too: a broadcast or gather that hands back byte 2 for True did not copy the bool."""
    want = np.array([True, False, True])
    assert check_exact_copy(want.copy(), want).ok
    got = np.array([2, 0, 1], dtype=np.uint8).view(np.bool_)
    verdict = check_exact_copy(got, want, "gather_list[1]")
    assert not verdict.ok and verdict.message.startswith("gather_list[1]: invalid bool")


# ----------------------------------------------------------------------------- float bounds at the edge
def _edge(exact: float, bound: float) -> float:
    """The largest float64 y >= exact with y - exact <= bound (y - exact computed exactly)."""
    y = exact + bound
    while y - exact > bound:
        y = np.nextafter(y, -INF)
    while np.nextafter(y, INF) - exact <= bound:
        y = np.nextafter(y, INF)
    return float(y)


def _check64(value: float, inputs: list[np.ndarray], op: str, dtype: str, factor: float | None = None) -> bool:
    return check_reduction(np.array([value], np.float64), inputs, op, DTYPES[dtype], "nccl", factor).ok


@pytest.mark.parametrize("dtype,values", [
    ("float32", [1.0, 1.0, 2.0]),
    ("float32", [1000.0, -3.5, 0.125, 7.0]),
    ("float16", [1.0, 1.0, 2.0]),
    ("float16", [1024.0, -1024.0, 2048.0]),
    ("bfloat16", [3.0, 5.0, 1.5]),
    ("float64", [1.0, 2.0, 4.0, 8.0]),
])
def test_sum_bound_edge_in_float64(dtype: str, values: list[float]) -> None:
    """|y - S| <= (n-1) u sum|x| + (n-1) tiny: exactly at the edge passes, the next float64 beyond fails
    (three non-zero terms or more: with two, one rounding is all and the tolerance is zero, below)."""
    d = DTYPES[dtype]
    n = len(values)
    inputs = [np.array([v], dtype=d.carrier) for v in values]
    exact = float(sum(values))
    bound = (n - 1) * d.unit_roundoff * sum(abs(v) for v in values) + (n - 1) * d.tiny
    hi = _edge(exact, bound)
    lo = -_edge(-exact, bound)
    assert _check64(hi, inputs, "sum", dtype) and _check64(lo, inputs, "sum", dtype)
    assert not _check64(float(np.nextafter(hi, INF)), inputs, "sum", dtype)
    assert not _check64(float(np.nextafter(lo, -INF)), inputs, "sum", dtype)
    # and a slip of 1% of the bound past it is wrong too (the bound is not blanket-loose)
    assert not _check64(exact + 1.01 * bound, inputs, "sum", dtype)


@pytest.mark.parametrize("dtype,np_dtype", [("float32", np.float32), ("float16", np.float16)])
def test_sum_bound_edge_in_the_dtype(dtype: str, np_dtype: type) -> None:
    """[1, 1, 2]: S = 4, (n-1) u sum|x| = 8u = one ulp of 4 in both formats. 4 +- 1 ulp passes, +- 2 ulps fails."""
    inputs = arrs(dtype, [1.0], [1.0], [2.0])
    four = np_dtype(4.0)
    up1, up2 = np.nextafter(four, np_dtype(INF)), np.nextafter(np.nextafter(four, np_dtype(INF)), np_dtype(INF))
    # below 4 the ulp halves: 1 ulp of 4 = 2 ulps below
    down2 = np.nextafter(np.nextafter(four, np_dtype(-INF)), np_dtype(-INF))
    down3 = np.nextafter(down2, np_dtype(-INF))
    for ok_value in (four, up1, down2):
        assert check_reduction(np.array([ok_value]), inputs, "sum", DTYPES[dtype], "nccl").ok, ok_value
    for bad_value in (up2, down3):
        assert not check_reduction(np.array([bad_value]), inputs, "sum", DTYPES[dtype], "nccl").ok, bad_value


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"])
def test_two_terms_are_rounded_once_to_nearest_even(dtype: str) -> None:
    """At most two non-zero terms: one rounding in any order, so only RN(a + b) passes; at a tie the even
    neighbour, never the one toward zero when that is odd (a backend that rounds toward zero fails)."""
    d = DTYPES[dtype]
    p = round(-np.log2(d.unit_roundoff))
    odd = 1.0 + 2.0 ** (1 - p)            # 1 + one ulp: its last bit is odd
    half_ulp = 2.0 ** -p
    inputs = [np.array([x], dtype=d.carrier) for x in (odd, 0.0, half_ulp, -0.0)]
    up = 1.0 + 2.0 ** (2 - p)              # the tie odd + half an ulp goes to the even neighbour, up
    assert _check64(up, inputs, "sum", dtype)
    assert not _check64(odd, inputs, "sum", dtype)  # toward zero: one rounding, the wrong way
    assert not _check64(float(np.nextafter(up, INF)), inputs, "sum", dtype)
    # the same for a negative sum, and for a sum that is not a tie: a + b three quarters of an ulp up
    negative = [-x for x in inputs]
    assert _check64(-up, negative, "sum", dtype) and not _check64(-odd, negative, "sum", dtype)
    three_quarters = [np.array([x], dtype=d.carrier) for x in (1.0, 0.75 * 2.0 ** (1 - p))]
    if float(representable(three_quarters[1], d)[0]) == 0.75 * 2.0 ** (1 - p):
        assert _check64(odd, three_quarters, "sum", dtype) and not _check64(1.0, three_quarters, "sum", dtype)


def test_a_subnormal_term_keeps_the_bound() -> None:
    """A backend may flush subnormals: with one among the terms, the bound applies, not correct rounding."""
    d = DTYPES["float32"]
    inputs = [np.array([1.0], np.float32), np.array([d.tiny / 4], np.float32)]
    assert _check64(1.0, inputs, "sum", "float32")


def test_product_of_two_factors_and_powers_of_two_is_rounded_once() -> None:
    """Factors that are powers of two scale exactly: 1.1 * 1.3 * 2 * 0.5 is RN(1.1 * 1.3) in float32, and
    a PRODUCT through logarithms (a few ulps off) fails, while three such factors keep the gamma bound."""
    f32 = np.float32
    a, b = f32(1.1), f32(1.3)
    inputs = [np.array([x], f32) for x in (a, b, f32(2.0), f32(0.5))]
    right = float(f32(float(a) * float(b)))
    assert _check64(right, inputs, "product", "float32")
    assert not _check64(float(np.nextafter(f32(right), f32(INF))), inputs, "product", "float32")
    logs = float(np.exp(np.log(a) + np.log(b) + np.log(f32(2.0)) + np.log(f32(0.5))).astype(f32))
    assert logs != right and not _check64(logs, inputs, "product", "float32")
    three = inputs[:2] + [np.array([f32(1.7)], f32)]
    exact = float(a) * float(b) * float(f32(1.7))
    assert _check64(float(np.nextafter(f32(exact), f32(INF))), three, "product", "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_avg_bound_edge(dtype: str) -> None:
    """|y - S/n| <= (n+1) u sum|x| / n (+ slack for tiny values)."""
    d = DTYPES[dtype]
    values = [3.0, 5.0, -1.0, 9.0]
    n = len(values)
    inputs = [np.array([v], dtype=d.carrier) for v in values]
    exact = sum(values) / n
    bound = (n + 1) * d.unit_roundoff * sum(abs(v) for v in values) / n + (n + 1) * d.tiny
    hi = _edge(exact, bound)
    assert _check64(hi, inputs, "avg", dtype)
    assert not _check64(float(np.nextafter(hi, INF)), inputs, "avg", dtype)
    # AVG is not SUM: the sum itself (what a backend that forgot to divide returns) is wrong
    assert not _check64(sum(values), inputs, "avg", dtype)


def test_prod_bound_edge() -> None:
    """|y - P| <= gamma_{n-1} |P|, gamma_k = k u / (1 - k u) (float32; the tiny slack is below float64's ulp here)."""
    d = DTYPES["float32"]
    values = [1.5, -1.25, 1.75]
    n = len(values)
    inputs = [np.array([v], dtype=np.float32) for v in values]
    exact = 1.5 * -1.25 * 1.75
    gamma = (n - 1) * d.unit_roundoff / (1 - (n - 1) * d.unit_roundoff)
    bound = gamma * abs(exact)
    lo = -_edge(-exact, bound)
    assert _check64(lo, inputs, "product", "float32")
    assert not _check64(float(np.nextafter(lo, -INF)), inputs, "product", "float32")
    assert not _check64(exact * (1 + 2 * gamma), inputs, "product", "float32")
    assert not _check64(-exact, inputs, "product", "float32")


def test_premul_sum_factor() -> None:
    inputs = arrs("float32", [1.0, -4.0], [2.0, 8.0])
    assert reduce_ok([1.5, 2.0], inputs, "premul_sum", "float32", factor=0.5)
    assert not reduce_ok([3.0, 4.0], inputs, "premul_sum", "float32", factor=0.5)      # factor forgotten
    assert not reduce_ok([1.5, 2.0], inputs, "premul_sum", "float32", factor=-1.0)
    assert reduce_ok([-3.0, -4.0], inputs, "premul_sum", "float32", factor=-1.0)
    # the bound scales with |f x|: n u sum|f x| = 2 u * 1.5 * 3 at [1.0, 2.0] * 3
    d = DTYPES["float32"]
    bound = 2 * d.unit_roundoff * 9.0 + 2 * d.tiny
    edge = _edge(9.0, bound)
    ins = [np.array([1.0], np.float32), np.array([2.0], np.float32)]
    assert _check64(edge, ins, "premul_sum", "float32", factor=3.0)
    assert not _check64(float(np.nextafter(edge, INF)), ins, "premul_sum", "float32", factor=3.0)


# ----------------------------------------------------------------------------- MIN / MAX
@pytest.mark.parametrize("flavor", ["nccl", "gloo"])
def test_minmax_exact_with_signed_zeros(flavor: str) -> None:
    inputs = arrs("float32", [0.0, -0.0, 1.5, -2.0], [-0.0, 0.0, 1.25, -2.0])
    for zeros in ([0.0, 0.0], [-0.0, -0.0], [0.0, -0.0], [-0.0, 0.0]):
        assert reduce_ok(zeros + [1.25, -2.0], inputs, "min", "float32", flavor)
        assert reduce_ok(zeros + [1.5, -2.0], inputs, "max", "float32", flavor)
    # exact: one ulp off is wrong, and so is the other extreme
    assert not reduce_ok([0.0, 0.0, float(np.nextafter(np.float32(1.25), np.float32(2))), -2.0],
                         inputs, "min", "float32", flavor)
    assert not reduce_ok([0.0, 0.0, 1.5, -2.0], inputs, "min", "float32", flavor)


def test_minmax_nan_nccl_ignores_nan() -> None:
    inputs = arrs("float32", [NAN, 1.0, NAN], [2.0, NAN, NAN], [3.0, 0.5, NAN])
    assert reduce_ok([2.0, 0.5, NAN], inputs, "min", "float32", "nccl")
    assert reduce_ok([3.0, 1.0, NAN], inputs, "max", "float32", "nccl")
    assert not reduce_ok([NAN, 0.5, NAN], inputs, "min", "float32", "nccl")     # NaN where a number exists
    assert not reduce_ok([2.0, 0.5, 0.0], inputs, "min", "float32", "nccl")     # a number where all are NaN
    assert not reduce_ok([3.0, 0.5, NAN], inputs, "min", "float32", "nccl")     # an input, but not the min


def test_minmax_nan_gloo_accepts_nan_or_an_input() -> None:
    inputs = arrs("float32", [NAN, 4.0], [2.0, 5.0], [3.0, 6.0])
    for first in (NAN, 2.0, 3.0):  # std::min folded in some order: NaN, or whichever input survived
        assert reduce_ok([first, 4.0], inputs, "min", "float32", "gloo"), first
    assert not reduce_ok([1.0, 4.0], inputs, "min", "float32", "gloo")          # not an input
    assert not reduce_ok([2.0, 5.0], inputs, "min", "float32", "gloo")          # no NaN in column 2: exact
    assert not reduce_ok([2.0, NAN], inputs, "min", "float32", "gloo")
    assert not reduce_ok([NAN, 4.0], inputs, "min", "float32", "nccl")          # the same NaN fails nccl


# ----------------------------------------------------------------------------- NaN / inf / overflow in SUM
@pytest.mark.parametrize("flavor", ["nccl", "gloo"])
@pytest.mark.parametrize("op", ["sum", "avg", "product"])
def test_nan_input_gives_nan(flavor: str, op: str) -> None:
    inputs = arrs("float32", [NAN, 1.0], [1.0, 1.0])
    want = {"sum": 2.0, "avg": 1.0, "product": 1.0}[op]
    assert reduce_ok([NAN, want], inputs, op, "float32", flavor)
    for wrong in (1.0, 0.0, INF):
        assert not reduce_ok([wrong, want], inputs, op, "float32", flavor), wrong


def test_nan_result_from_finite_inputs_is_wrong() -> None:
    inputs = arrs("float32", [1.0, 3.0], [2.0, 4.0])
    assert not reduce_ok([NAN, 7.0], inputs, "sum", "float32")
    assert not reduce_ok([3.0, INF], inputs, "sum", "float32")


def test_infinite_inputs() -> None:
    inputs = arrs("float32", [INF, -INF, INF], [1.0, 2.0, -INF])
    assert reduce_ok([INF, -INF, NAN], inputs, "sum", "float32")
    assert not reduce_ok([INF, -INF, 0.0], inputs, "sum", "float32")
    assert reduce_ok([1.0, -INF, -INF], inputs, "min", "float32")
    assert reduce_ok([INF, 2.0, INF], inputs, "max", "float32")
    assert not reduce_ok([INF, -INF, -INF], inputs, "min", "float32")


@pytest.mark.parametrize("op,rows,wrong", [
    ("sum", ([INF], [1.0]), NAN),         # inf + 1 is +inf in every order
    ("sum", ([INF], [1.0]), -INF),
    ("sum", ([INF], [-INF]), INF),        # inf - inf is NaN in every order
    ("sum", ([INF], [1.0]), 1.0),         # the bound (n-1) u sum|x| is itself inf: any finite value passes
    ("sum", ([-INF], [2.0]), 0.0),
    ("avg", ([INF], [1.0]), 0.5),
    ("product", ([INF], [2.0]), 2.0),     # gamma |P| = inf as well
])
def test_infinite_inputs_wrong_result_rejected(op: str, rows: tuple, wrong: float) -> None:
    inputs = arrs("float32", *rows)
    assert not reduce_ok([wrong], inputs, op, "float32")


@pytest.mark.parametrize("dtype,values", [
    ("float16", [40000.0, 40000.0]),                 # exact 80000 > 65504
    ("float16", [60000.0, 60000.0, -60000.0]),       # exact 60000, but (a + b) overflows first
    ("float32", [3e38, 3e38, -3e38]),
    ("bfloat16", [3.0e38, 3.0e38, -3.0e38]),
])
def test_overflow_to_inf_accepted_when_sum_abs_exceeds_max(dtype: str, values: list[float]) -> None:
    d = DTYPES[dtype]
    inputs = [np.array([v], dtype=d.carrier) for v in values]
    assert sum(abs(v) for v in values) > d.max_finite
    assert check_reduction(np.array([INF], dtype=d.carrier), inputs, "sum", d, "nccl").ok
    # but a finite answer must still be near the exact one
    if abs(sum(values)) <= d.max_finite:
        assert check_reduction(np.array([sum(values)], dtype=d.carrier), inputs, "sum", d, "nccl").ok
        assert not check_reduction(np.array([0.0], dtype=d.carrier), inputs, "sum", d, "nccl").ok


def test_inf_rejected_when_sum_abs_is_far_below_max() -> None:
    inputs = arrs("float16", [30000.0], [-2000.0])
    assert not reduce_ok([INF], inputs, "sum", "float16")
    assert reduce_ok([28000.0], inputs, "sum", "float16")


# ----------------------------------------------------------------------------- complex: per component
def test_complex_sum_checked_componentwise() -> None:
    inputs = arrs("complex64", [1 + 2j, 1e6 + 1j], [3 - 1j, -1e6 + 1j])
    assert reduce_ok([4 + 1j, 0 + 2j], inputs, "sum", "complex64")
    assert not reduce_ok([4 - 1j, 0 + 2j], inputs, "sum", "complex64")         # conjugated
    assert not reduce_ok([1 + 4j, 0 + 2j], inputs, "sum", "complex64")         # parts swapped
    # two terms per component: one rounding, so 1e6 - 1e6 is exactly 0, not "0 within u * 2e6"
    assert not reduce_ok([4 + 1j, 0.1 + 2j], inputs, "sum", "complex64")
    # with a third term the bound applies per component: the real part may be off by up to 2 u * 2e6 ~ 0.24
    # (cancellation), the imaginary part only by ~4e-7
    three = arrs("complex64", [1 + 2j, 1e6 + 1j], [3 - 1j, -1e6 + 1j], [0.5 + 0.5j, 0.25 + 0.5j])
    assert reduce_ok([4.5 + 1.5j, 0.35 + 2.5j], three, "sum", "complex64")
    assert not reduce_ok([4.5 + 1.5j, 0.25 + 2.51j], three, "sum", "complex64")


def test_shape_mismatch_rejected() -> None:
    inputs = arrs("float32", [1.0, 2.0], [3.0, 4.0])
    verdict = check_reduction(np.array([4.0, 6.0, 0.0], np.float32), inputs, "sum", DTYPES["float32"], "nccl")
    assert not verdict.ok and "shape" in verdict.message


# ----------------------------------------------------------------------------- exact copies
def test_exact_copy_signed_zero_and_nan_placement() -> None:
    want = np.array([0.0, -0.0, NAN, 1.0], np.float32)
    assert check_exact_copy(want.copy(), want).ok
    assert check_exact_copy(np.array([0.0, -0.0, -NAN, 1.0], np.float32), want).ok   # any NaN payload/sign
    v = check_exact_copy(np.array([0.0, 0.0, NAN, 1.0], np.float32), want, "out")
    assert not v.ok and v.message.startswith("out: ") and "-0.0" in v.message
    assert not check_exact_copy(np.array([-0.0, -0.0, NAN, 1.0], np.float32), want).ok
    assert not check_exact_copy(np.array([0.0, -0.0, 1.0, NAN], np.float32), want).ok   # NaN moved
    assert not check_exact_copy(np.array([0.0, -0.0, 0.0, 1.0], np.float32), want).ok   # NaN lost
    assert not check_exact_copy(np.array([0.0, -0.0, NAN, 1.0000001], np.float32), want).ok
    assert not check_exact_copy(want.reshape(2, 2), want).ok


def test_exact_copy_complex_and_ints() -> None:
    want = np.array([complex(0.0, -0.0), 1 + 1j], np.complex64)
    assert check_exact_copy(want.copy(), want).ok
    assert not check_exact_copy(np.array([complex(0.0, 0.0), 1 + 1j], np.complex64), want).ok
    assert not check_exact_copy(np.array([5, 6], np.int8), np.array([5, 7], np.int8)).ok
    assert check_exact_copy(np.array([5, -6], np.int8), np.array([5, -6], np.int8)).ok


def test_finite_part_overflowing_against_an_infinite_input_may_give_nan() -> None:
    """f16 PREMUL_SUM x3 of 16376, 16376 and -inf: the finite part overflows to +inf first, +inf-inf = NaN
    (seen on the sim in the torch 2.11 tox env); an ordinary finite result there is still wrong."""
    inputs = [np.array([16376.0], np.float16), np.array([16376.0], np.float16), np.array([-np.inf], np.float16)]
    f16 = DTYPES["float16"]
    assert check_reduction(np.array([np.nan], np.float16), inputs, "premul_sum", f16, "nccl", 3.0).ok
    assert check_reduction(np.array([-np.inf], np.float16), inputs, "premul_sum", f16, "nccl", 3.0).ok
    assert not check_reduction(np.array([1.0], np.float16), inputs, "premul_sum", f16, "nccl", 3.0).ok
    small = [np.array([1.0], np.float16), np.array([-np.inf], np.float16)]
    assert not check_reduction(np.array([np.nan], np.float16), small, "sum", f16, "nccl").ok
