"""Controller-side judgement of single-process calls: the outcome vocabulary of conformance/driver.py,
and the checks every API shares (values, device, dtype, aliasing), against the NumPy oracle.
"""
from __future__ import annotations

import numpy as np

from conformance.comm.cells import Check, SPCase
from conformance.comm.worker import HOST, RAW_DTYPES, Outcome, TensorInfo, TensorSpec
from conformance.dtypes import DTYPES
from conformance.oracle import check_exact_copy, check_reduction, exact_reduce


def judge(case: SPCase, outcome: Outcome, check: Check) -> tuple[str, str]:
    """(outcome, detail) in the capability report's words: pass, rejected, FAIL or should-work."""
    if case.expect is not None:
        wanted = f"{'/'.join(case.expect.errors)} matching /{case.expect.pattern}/ ({case.expect.reason})"
        if outcome.ok:
            return "FAIL", f"accepted, but must raise {wanted}"
        if case.expect.matches(outcome.error_type, outcome.error):
            return "rejected", outcome.describe()
        return "FAIL", f"expected {wanted}; got {outcome.describe()}"
    if not outcome.ok:
        return "should-work", outcome.describe()
    problems = check(case, outcome)
    return ("FAIL", "wrong result: " + "; ".join(problems)) if problems else ("pass", "")


def api_view(values: np.ndarray, dtype: str) -> tuple[np.ndarray, str]:
    """What torch.cuda.comm hands on for a tensor: complex ones as their real view (float, trailing dim 2)."""
    if DTYPES[dtype].kind == "complex":
        return np.stack([values.real, values.imag], axis=-1).astype(np.float32), "float32"
    return values, dtype


def raw_bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    """The bytes a RAW_DTYPES tensor holds for these carrier values (what the worker sends back)."""
    if dtype == "bool":
        return values.astype(np.uint8)
    import torch

    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(getattr(torch, dtype))
    return t.view(torch.uint8).numpy().reshape(values.shape)


def values_of(spec: TensorSpec) -> np.ndarray:
    """A case tensor's values as the worker reports them (bytes for RAW_DTYPES)."""
    return raw_bytes(spec.values, spec.dtype) if spec.dtype in RAW_DTYPES else spec.values


def same_data(info: TensorInfo, values: np.ndarray, dtype: str, what: str) -> list[str]:
    """`info` holds exactly `values` (carrier of `dtype`), with that dtype and shape."""
    if info.dtype != dtype:
        return [f"{what}: dtype {info.dtype}, expected {dtype}"]
    if info.shape != tuple(values.shape):
        return [f"{what}: shape {list(info.shape)}, expected {list(values.shape)}"]
    expected = raw_bytes(values, dtype) if dtype in RAW_DTYPES else values
    verdict = check_exact_copy(info.values.reshape(expected.shape), expected, what)
    return [] if verdict.ok else [verdict.message]


def reduced(info: TensorInfo, inputs: list[np.ndarray], op: str, dtype: str, what: str,
            shape: tuple[int, ...] | None = None) -> list[str]:
    """`info` holds the reduction of `inputs` (carriers of `dtype`, any shapes of one size) by `op`.

    NCCL reduces bool and fp8 as raw bytes (ncclUint8): the oracle works on their bytes too.
    """
    shape = tuple(inputs[0].shape) if shape is None else shape
    if info.dtype != dtype or info.shape != shape:
        return [f"{what}: {info.dtype}{list(info.shape)}, expected {dtype}{list(shape)}"]
    flat = [x.reshape(-1) for x in inputs]
    if dtype in RAW_DTYPES:
        expected = exact_reduce(op, [raw_bytes(x, dtype) for x in flat], DTYPES["uint8"], "nccl")
        verdict = check_exact_copy(info.values.reshape(-1), expected, what)
    else:
        actual = info.values.reshape(-1)
        if DTYPES[dtype].kind == "complex":
            actual, flat = _complex_specials(actual, flat)
        verdict = check_reduction(actual, flat, op, DTYPES[dtype], "nccl")
        verdict = verdict if verdict.ok else type(verdict)(False, f"{what}: {verdict.message}")
    return [] if verdict.ok else [verdict.message]


def _complex_specials(actual: np.ndarray, inputs: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Complex arithmetic spreads a NaN or inf of one part into the other ((0+0j) + 1*(0+nanj) is nan+nanj):
    where an input has one, the result only has to be non-finite too; those positions are then left out."""
    special = ~np.all([np.isfinite(x) for x in inputs], axis=0)
    if not special.any():
        return actual, inputs
    bad = special & np.isfinite(actual)
    keep = ~special | bad  # a finite result where an input was not stays in, and fails the bound
    return actual[keep], [x[keep] for x in inputs]


def on_device(info: TensorInfo, device: int, what: str) -> list[str]:
    if info.device == device:
        return []
    return [f"{what}: on {device_name(info.device)}, expected {device_name(device)}"]


def device_name(index: int) -> str:
    return "cpu" if index == HOST else f"cuda:{index}"


def is_case_tensor(info: TensorInfo, index: int, what: str) -> list[str]:
    """`info` is case tensor `index` itself (the same Python object)."""
    if info.is_tensor == index:
        return []
    return [f"{what}: a new tensor, expected case tensor {index} itself"]


def out_tensors_hold(outcome: Outcome, pieces: list[np.ndarray], dtype: str) -> list[str]:
    """The call returned its out= tensors (case tensors 1, 2, ... after the source) holding `pieces`, in order."""
    if len(outcome.result) != len(pieces):
        return [f"{len(outcome.result)} results for {len(pieces)} out tensors"]
    return [problem for i, (info, piece) in enumerate(zip(outcome.result, pieces))
            for problem in is_case_tensor(info, i + 1, f"out[{i}]") + same_data(info, piece, dtype, f"out[{i}]")]


def shares_memory(info: TensorInfo, case_info: TensorInfo, what: str) -> list[str]:
    """`info` uses the memory of a case tensor (empty tensors own no memory: nothing to check)."""
    if info.storage == case_info.storage or 0 in (info.values.size, case_info.values.size):
        return []
    return [f"{what}: new memory, expected the input's memory (a view or the input itself)"]


def fresh_memory(info: TensorInfo, outcome: Outcome, what: str, *others: TensorInfo) -> list[str]:
    """`info` shares memory with none of the case's tensors nor with `others`."""
    taken = {t.storage for t in outcome.tensors} | {o.storage for o in others}
    if info.storage < 0 or info.values.size == 0 or info.storage not in taken:
        return []
    return [f"{what}: shares memory with an input or another result, expected a copy of its own"]


def unchanged(outcome: Outcome, case: SPCase, indices: list[int], what: str) -> list[str]:
    """Case tensors that the call must not have written to."""
    problems = []
    for i in indices:
        spec = case.tensors[i]
        problems += same_data(outcome.tensors[i], spec.values, spec.dtype, f"{what} {i} (must be untouched)")
    return problems


def error_cell(case: SPCase, outcome: Outcome) -> list[str]:
    """The check of cells whose every case must raise: judge() never calls it (a returning case is FAIL first)."""
    return ["an error case returned"]
