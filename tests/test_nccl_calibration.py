"""The NCCL table and oracle rules settled by the first GPU run (conformance/results/nccl-calibration.md)."""
from __future__ import annotations

import numpy as np

from conformance.backends import NCCL
from conformance.dtypes import DTYPES
from conformance.oracle import check_reduction


def test_dtype_error_depends_on_the_collective():
    """D1: torch::cuda::nccl's helpers say RuntimeError 'Unconvertible', the rest TypeError (P2P too)."""
    for collective in ("gather", "scatter", "all_to_all", "all_to_all_single"):
        r = NCCL.reject(collective, "int16", None, "contiguous", size=2)
        assert r.matches("RuntimeError", "Unconvertible NCCL type Short")
    for collective in ("all_reduce", "broadcast", "send_recv", "batch_isend_irecv"):
        r = NCCL.reject(collective, "uint32", "sum" if collective == "all_reduce" else None, "contiguous", size=2)
        assert r.matches("TypeError", "Input tensor data type is not supported for NCCL process group: UInt32")
    assert NCCL.reject("gather", "complex64", None, "contiguous", size=2).matches(
        "RuntimeError", "Unconvertible NCCL type ComplexFloat")


def test_groups_of_one_rank_skip_checks():
    """S1/S2: reduce_scatter* and scatter on one rank accept what they refuse on more."""
    for collective in ("reduce_scatter", "reduce_scatter_tensor"):
        assert NCCL.reject(collective, "int16", "sum", "contiguous", size=1) is None
        assert NCCL.reject(collective, "float32", "band", "contiguous", size=1) is None
        assert NCCL.reject(collective, "bool", "avg", "contiguous", size=1) is None
        assert NCCL.reject(collective, "int32", "premul_sum", "contiguous", size=1) is None
        assert NCCL.reject(collective, "int32", "premul_sum", "contiguous", size=2) is not None
    assert NCCL.reject("reduce_scatter", "float32", "sum", "transposed", size=1) is not None
    assert NCCL.reject("scatter", "uint16", None, "strided", size=1) is None
    assert NCCL.reject("scatter", "float32", None, "transposed", size=3) is None
    assert NCCL.reject("scatter", "float32", None, "strided", size=3) is not None


def test_layout_rules():
    """L1/L2: list all_to_all needs contiguous tensors; P2P needs dense ones (transposed works)."""
    assert NCCL.reject("all_to_all", "float32", None, "transposed", size=2).matches(
        "ValueError", "Tensors must be contiguous")
    for collective in ("send_recv", "isend_irecv", "batch_isend_irecv"):
        assert NCCL.reject(collective, "float32", None, "transposed", size=2) is None
        assert NCCL.reject(collective, "float32", None, "strided", size=2).matches(
            "ValueError", "Tensors for P2P must be non-overlapping and dense")


def test_reduce_complex_and_fp8_avg_and_premul_message():
    """D3, S3, O1."""
    assert NCCL.reject("reduce", "complex64", "sum", "contiguous", size=2) is None
    assert NCCL.reject("reduce", "complex64", "max", "contiguous", size=2).matches(
        "RuntimeError", "reduce does not support\x04on complex tensors")
    assert NCCL.reject("all_reduce", "float8_e5m2", "avg", "contiguous", size=1).matches(
        "DistBackendError", "NCCL error in: ProcessGroupNCCL.cpp:3780, invalid argument")
    assert NCCL.reject("all_reduce", "float8_e5m2", "avg", "contiguous", size=2) is None
    # [nccl-run x2] zero elements: NCCL returns before it checks the op
    assert NCCL.reject("reduce", "float8_e4m3fn", "avg", "contiguous", size=1, empty=True) is None
    assert NCCL.reject("all_reduce", "int8", "premul_sum", "contiguous", size=1).matches(
        "TypeError", "PreMulSum Data type must be half, float, bfloat16 or double")


def test_fp8_saturation_is_accepted_on_nccl_only():
    """N1: NCCL's e5m2 MIN(-0, -inf) is -57344; gloo's flavour keeps IEEE."""
    e5m2 = DTYPES["float8_e5m2"]
    inputs = [np.array([-0.0], dtype=np.float32), np.array([-np.inf], dtype=np.float32)]
    got = np.array([-57344.0], dtype=np.float32)
    assert check_reduction(got, inputs, "min", e5m2, "nccl").ok
    assert not check_reduction(got, inputs, "min", e5m2, "gloo").ok
    summed = [np.array([np.inf], dtype=np.float32), np.array([1.0], dtype=np.float32)]
    assert check_reduction(np.array([57344.0], dtype=np.float32), summed, "sum", e5m2, "nccl").ok
    assert not check_reduction(np.array([-57344.0], dtype=np.float32), summed, "sum", e5m2, "nccl").ok
    # two ranks, one operation on the raw values, saturated after (probe run2: e5m2 SUM of inf and -inf
    # is NaN, of inf and -80 is 57344); AVG scales and saturates first, so inf and -inf average to 0
    opposite = [np.array([np.inf], dtype=np.float32), np.array([-np.inf], dtype=np.float32)]
    assert check_reduction(np.array([np.nan], dtype=np.float32), opposite, "sum", e5m2, "nccl").ok
    assert not check_reduction(np.array([0.0], dtype=np.float32), opposite, "sum", e5m2, "nccl").ok
    assert check_reduction(np.array([0.0], dtype=np.float32), opposite, "avg", e5m2, "nccl").ok
    assert not check_reduction(np.array([0.0], dtype=np.float32), opposite, "sum", e5m2, "gloo").ok
    raw = [np.array([x], dtype=np.float32) for x in (np.inf, -57344.0)]
    assert check_reduction(np.array([57344.0], dtype=np.float32), raw, "sum", e5m2, "nccl").ok
    assert not check_reduction(np.array([0.0], dtype=np.float32), raw, "sum", e5m2, "nccl").ok
    # NCCL's fp8 never returns an infinity, and overflow never flips the sign
    big = [np.array([x], dtype=np.float32) for x in (32768.0, 40960.0)]
    assert check_reduction(np.array([57344.0], dtype=np.float32), big, "sum", e5m2, "nccl").ok
    for wrong in (np.inf, -np.inf, np.nan, -57344.0):
        assert not check_reduction(np.array([wrong], dtype=np.float32), big, "sum", e5m2, "nccl").ok
    # full run 2026-11-22, four ranks: reduce_scatter SUM with +inf and -inf gave 57344 (a partial sum
    # saturated before the other infinity came); NaN is possible in another order, a wrong sign is not
    four = [np.array([x], dtype=np.float32) for x in (np.inf, 1.0, -np.inf, 2.0)]
    for got in (57344.0, 0.0, -57344.0, np.nan):
        assert check_reduction(np.array([got], dtype=np.float32), four, "sum", e5m2, "nccl").ok
    positive = [np.array([x], dtype=np.float32) for x in (14336.0, np.inf, 14336.0, 1.0)]
    assert check_reduction(np.array([57344.0], dtype=np.float32), positive, "avg", e5m2, "nccl").ok
    for wrong in (0.0, -12288.0, np.nan):  # all contributions positive: the sum can only grow
        assert not check_reduction(np.array([wrong], dtype=np.float32), positive, "avg", e5m2, "nccl").ok
    # where partial sums saturate the order decides, but never outside [sum of negatives, sum of positives]
    three = [np.array([x], dtype=np.float32) for x in (np.inf, np.inf, -np.inf)]
    for got in (0.0, 57344.0):
        assert check_reduction(np.array([got], dtype=np.float32), three, "sum", e5m2, "nccl").ok
    assert not check_reduction(np.array([57344.0], dtype=np.float32),
                               [np.array([x], dtype=np.float32) for x in (-np.inf, 1.0)], "sum", e5m2, "nccl").ok
    # [nccl-run x2] AVG = PREMUL_SUM(1/n): scaled first, saturated after, so -inf counts as -57344 whole
    mixed = [np.array([x], dtype=np.float32) for x in (-np.inf, 14336.0)]
    assert check_reduction(np.array([-49152.0], dtype=np.float32), mixed, "avg", e5m2, "nccl").ok
    assert not check_reduction(np.array([-21504.0], dtype=np.float32), mixed, "avg", e5m2, "nccl").ok
    both_negative = [np.array([x], dtype=np.float32) for x in (-14336.0, -np.inf)]
    assert check_reduction(np.array([-57344.0], dtype=np.float32), both_negative, "avg", e5m2, "nccl").ok


def test_one_contribution_is_a_copy():
    """N2: bitwise ops and AVG on bool over one tensor give that tensor; float PREMUL_SUM stays f * x."""
    x = np.array([3, -5], dtype=np.int32)
    assert check_reduction(x.copy(), [x], "bxor", DTYPES["int32"], "nccl").ok
    b = np.array([True, False])
    assert check_reduction(b.copy(), [b], "avg", DTYPES["bool"], "nccl").ok
    f = np.array([1.5], dtype=np.float32)
    assert not check_reduction(f.copy(), [f], "premul_sum", DTYPES["float32"], "nccl", 2.0).ok
    assert check_reduction(f * 2, [f], "premul_sum", DTYPES["float32"], "nccl", 2.0).ok
