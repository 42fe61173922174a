"""torch.cuda.comm.reduce_add and reduce_add_coalesced (as torch documents them).

reduce_add: the sum, a new tensor on destination (default: the CURRENT device, not cuda:0), which must
hold one of the inputs; one input is returned as is. Two paths: inputs contiguous on distinct devices go
through NCCL reduce (same dtype required; bool summed as raw bytes; no complex), the rest through
`inputs[root] + ...` with type promotion (bool + bool is OR).
reduce_add_coalesced: one list per device, summed position by position in buffers of buffer_size bytes;
lists of different lengths raise ValueError from torch 2.11 (zip strict).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from conformance.comm import checks as c
from conformance.comm.cells import SPCase, SPCell, register, reject
from conformance.comm.draw import (CAST_DTYPES, SUM_DTYPES, Draw, contiguous, device_form, device_list, tensor,
                                   tensor_shape)
from conformance.comm.worker import HOST, Outcome, Tracker, device_arg
from conformance.dtypes import DTYPES

DEFAULT_BUFFER = 10485760
NOT_NCCL = ["complex64", "int16"]  # fine for `+`, "Unconvertible NCCL type" on the NCCL path


def nccl_path(specs: list[Any]) -> bool:
    """torch.cuda.nccl.is_available(inputs): all contiguous, on distinct devices."""
    return all(contiguous(s) for s in specs) and len({s.device for s in specs}) == len(specs)


def _destination(draw: Draw, devices: list[int], n: int) -> tuple[Any, int, int]:
    """(destination argument, the device it means, the current device): None means the current device."""
    target = draw(st.sampled_from(devices), label="destination")
    if draw(st.booleans(), label="destination_is_current"):
        return None, target, target
    return device_form(draw, target), target, draw(st.integers(0, n - 1), label="current")


# ----------------------------------------------------------------------------- reduce_add
def draw_reduce_add(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    unique = cell.op == "nccl_path" or draw(st.booleans(), label="unique_devices")
    devices = device_list(draw, n, unique=unique, min_size=1 if cell.op == "nccl_path" else 2)
    shape = tensor_shape(draw)
    if cell.op == "mixed_dtypes":
        devices = (devices * 2)[:2] if len(devices) < 2 else devices[:2]
        first, second = draw(st.permutations(CAST_DTYPES), label="dtypes")[:2]
        specs = [tensor(draw, dt, shape, d, small_ints=True, label=f"input{i}")
                 for i, (dt, d) in enumerate(zip([first, second], devices))]
    else:
        dtype = draw(st.sampled_from(SUM_DTYPES + NOT_NCCL), label="dtype")
        layout = "contiguous" if cell.op == "nccl_path" else None
        specs = [tensor(draw, dtype, shape, d, layout=layout, label=f"input{i}") for i, d in enumerate(devices)]
    if cell.op == "fallback_path" and nccl_path(specs):
        specs.append(tensor(draw, specs[0].dtype, shape, specs[0].device, layout="contiguous", label="repeat"))
    destination, target, current = _destination(draw, [s.device for s in specs], n)
    case = SPCase(cell.api, _variant(specs), current, specs, {"destination": destination, "_target": target,
                                                              "_nccl": nccl_path(specs)})
    if case.params["_nccl"] and len(specs) > 1:
        if len({s.dtype for s in specs}) > 1:
            case.expect = reject("RuntimeError", r"all inputs and outputs must be of the same Tensor dtype",
                                 "NCCL path, two dtypes")
        elif specs[0].dtype in NOT_NCCL:
            case.expect = reject("RuntimeError", r"Unconvertible NCCL type", "NCCL path, a dtype NCCL lacks")
    return [case]


def _variant(specs: list[Any]) -> str:
    layouts = {s.layout for s in specs}
    return layouts.pop() if len(layouts) == 1 else "mixed_layouts"


def run_reduce_add(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.comm as comm

    inputs = [t.tensor(s) for s in case.tensors]
    return lambda: comm.reduce_add(inputs, device_arg(case.params["destination"]))


def check_reduce_add(case: SPCase, outcome: Outcome) -> list[str]:
    info, specs = outcome.result, case.tensors
    problems = c.on_device(info, case.params["_target"], "result")
    problems += c.unchanged(outcome, case, list(range(len(specs))), "input")
    if len(specs) == 1:
        return problems + c.is_case_tensor(info, 0, "result")
    problems += c.fresh_memory(info, outcome, "result")
    dtypes = [s.dtype for s in specs]
    if len(set(dtypes)) > 1:  # the fallback path: `a + b` promotes; small integers make it exact
        import torch

        promoted = str(torch.promote_types(*(getattr(torch, d) for d in dtypes))).removeprefix("torch.")
        total = sum(s.values.astype(np.float64) for s in specs).astype(DTYPES[promoted].carrier)
        return problems + c.same_data(info, total, promoted, "result")
    if dtypes[0] == "bool" and not case.params["_nccl"]:  # bool + bool is OR
        return problems + c.same_data(info, np.logical_or.reduce([s.values for s in specs]), "bool", "result")
    return problems + c.reduced(info, [s.values for s in specs], "sum", dtypes[0], "result")


def draw_reduce_add_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    devices = device_list(draw, n, unique=True)
    dtype = draw(st.sampled_from(SUM_DTYPES), label="dtype")
    shape = tensor_shape(draw)
    specs = [tensor(draw, dtype, shape, d, label=f"input{i}") for i, d in enumerate(devices)]
    current = draw(st.integers(0, n - 1), label="current")
    absent = [d for d in range(n) if d not in devices]

    def case(variant: str, expect: Any, inputs: list[Any], destination: Any) -> SPCase:
        return SPCase(cell.api, variant, current, inputs, {"destination": destination}, expect)

    first = ("int", devices[0])
    cases = [
        case("host_input", reject("AssertionError", r"reduce_add expects all inputs to be on GPUs|^$",
                                  "an input on the host"), specs + [type(specs[0])(specs[0].values, dtype,
                                                                                    "contiguous", HOST)], first),
        case("size", reject("ValueError", r"input \d+ has invalid size", "an input of another shape"),
             specs + [tensor(draw, dtype, shape + (2,), devices[0], label="odd")], first),
        case("cpu_destination", reject("ValueError", r"Expected a non cpu device", "destination='cpu'"), specs, "cpu"),
        case("no_inputs", reject("IndexError", r"list index out of range", "inputs=[]"), [], first),
    ]
    if absent:
        cases.append(case("destination", reject("RuntimeError", r"destination to be on the same GPU with one of",
                                                "no input on destination"), specs, ("int", absent[0])))
    return cases


# ----------------------------------------------------------------------------- reduce_add_coalesced
COALESCED_DTYPES = ["float32", "float64", "float16", "int64", "int32", "uint8"]


def draw_coalesced(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    devices = device_list(draw, n, unique=draw(st.booleans(), label="unique_devices"))
    count = draw(st.integers(1, 4), label="tensors_per_device")
    kinds = [(draw(st.sampled_from(COALESCED_DTYPES), label="dtype"), tensor_shape(draw)) for _ in range(count)]
    specs = [tensor(draw, dtype, shape, d, label=f"input{i}_{j}")
             for i, d in enumerate(devices) for j, (dtype, shape) in enumerate(kinds)]
    destination, target, current = _destination(draw, devices, n)
    buffer = draw(st.sampled_from([1, 16, 64, DEFAULT_BUFFER]), label="buffer_size")
    params = {"destination": destination, "_target": target, "buffer_size": buffer, "lengths": [count] * len(devices)}
    return [SPCase(cell.api, "small_buffer" if buffer < DEFAULT_BUFFER else "default_buffer", current, specs, params)]


def run_coalesced(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.comm as comm

    flat = [t.tensor(s) for s in case.tensors]
    lists, start = [], 0
    for length in case.params["lengths"]:
        lists.append(flat[start:start + length])
        start += length
    return lambda: comm.reduce_add_coalesced(lists, device_arg(case.params["destination"]),
                                             case.params["buffer_size"])


def check_coalesced(case: SPCase, outcome: Outcome) -> list[str]:
    count, lists = case.params["lengths"][0], len(case.params["lengths"])
    if len(outcome.result) != count:
        return [f"{len(outcome.result)} results for {count} tensors per device"]
    problems = []
    for j, info in enumerate(outcome.result):
        column = [case.tensors[i * count + j] for i in range(lists)]
        what = f"result[{j}]"
        problems += c.on_device(info, case.params["_target"], what)
        problems += c.reduced(info, [s.values for s in column], "sum", column[0].dtype, what)
    return problems


def draw_coalesced_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    import torch

    from conformance.version_guard import release

    devices = device_list(draw, n, unique=True, min_size=min(2, n))
    dtype = draw(st.sampled_from(COALESCED_DTYPES), label="dtype")
    shape = tensor_shape(draw)
    specs = [tensor(draw, dtype, shape, d, label=f"input{i}") for i, d in enumerate(devices)]
    absent = [d for d in range(n) if d not in devices]
    cases = []
    if absent:
        cases.append(SPCase(cell.api, "destination", 0, specs,
                            {"destination": ("int", absent[0]), "buffer_size": DEFAULT_BUFFER,
                             "lengths": [1] * len(devices)},
                            reject("RuntimeError", r"destination to be on the same GPU", "no input on destination")))
    if len(devices) > 1 and release(torch.__version__)[:2] >= (2, 11):  # zip(strict=True) from torch 2.11
        extra = tensor(draw, dtype, shape, devices[0], label="extra")
        cases.append(SPCase(cell.api, "lengths", 0, [specs[0], extra] + specs[1:],
                            {"destination": ("int", devices[0]), "buffer_size": DEFAULT_BUFFER,
                             "lengths": [2] + [1] * (len(devices) - 1)},
                            reject("ValueError", r"zip\(\) argument \d+ is (shorter|longer)", "lists of two lengths")))
    return cases



register(
    SPCell("comm", "comm.reduce_add", "nccl_path", draw_reduce_add, run_reduce_add, check_reduce_add),
    SPCell("comm", "comm.reduce_add", "fallback_path", draw_reduce_add, run_reduce_add, check_reduce_add),
    SPCell("comm", "comm.reduce_add", "mixed_dtypes", draw_reduce_add, run_reduce_add, check_reduce_add),
    SPCell("comm", "comm.reduce_add", "errors", draw_reduce_add_errors, run_reduce_add, c.error_cell),
    SPCell("comm", "comm.reduce_add_coalesced", "buffer", draw_coalesced, run_coalesced, check_coalesced),
    SPCell("comm", "comm.reduce_add_coalesced", "errors", draw_coalesced_errors, run_coalesced, c.error_cell,
           min_devices=2),
)
