"""torch.cuda.comm.broadcast and broadcast_coalesced (as torch documents them).

broadcast: out[i] is a copy of the tensor on devices[i]; where devices[i] is the tensor's own device the
entry IS the input (its real view for complex). Devices in any order, repeats allowed (each repeat of
another device gets its own copy). broadcast_coalesced: every tensor on devices[0]; that entry is the
input list itself; the others are copies, grouped into buffers of buffer_size bytes.
"""
from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from conformance.comm import checks as c
from conformance.comm.cells import SPCase, SPCell, cuda_error, register, reject
from conformance.comm.draw import (Draw, MOVE_DTYPES, device_form, device_list, sentinel, source_device, tensor,
                                   tensor_shape)
from conformance.comm.worker import HOST, Outcome, Tracker, device_arg

DEFAULT_BUFFER = 10485760


def _source(draw: Draw, n: int) -> Any:
    dtype = draw(st.sampled_from(MOVE_DTYPES), label="dtype")
    return tensor(draw, dtype, tensor_shape(draw), source_device(draw, n), label="source")


# ----------------------------------------------------------------------------- broadcast(tensor, devices)
def draw_devices(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    src = _source(draw, n)
    devices = device_list(draw, n, unique=False)
    return [SPCase(cell.api, src.layout, draw(st.integers(0, n - 1), label="current"), [src],
                   {"devices": [device_form(draw, d) for d in devices], "_indices": devices})]


def run_broadcast(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.comm as comm

    x = t.tensor(case.tensors[0])
    out = [t.tensor(s) for s in case.params.get("_out", [])] or None
    devices = case.params.get("devices")
    devices = None if devices is None else [device_arg(d) for d in devices]
    return lambda: comm.broadcast(x, devices, out=out)


def check_devices(case: SPCase, outcome: Outcome) -> list[str]:
    src = case.tensors[0]
    values, dtype = c.api_view(src.values, src.dtype)
    devices, result = case.params["_indices"], outcome.result
    if len(result) != len(devices):
        return [f"{len(result)} results for {len(devices)} devices"]
    problems = []
    for i, (info, d) in enumerate(zip(result, devices)):
        what = f"out[{i}]"
        problems += c.on_device(info, d, what) + c.same_data(info, values, dtype, what)
        if d == src.device:
            problems += c.shares_memory(info, outcome.tensors[0], what)
            if dtype == src.dtype:
                problems += c.is_case_tensor(info, 0, what)
        else:
            others = [r for r, e in zip(result, devices) if r is not info and e != src.device]
            problems += c.fresh_memory(info, outcome, what, *others)
            if not info.contiguous:
                problems.append(f"{what}: a non-contiguous copy (comm.cpp allocates contiguous outputs)")
    return problems


# ----------------------------------------------------------------------------- broadcast(tensor, out=...)
def draw_out(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    src = _source(draw, n)
    view, dtype = c.api_view(src.values, src.dtype)
    outs = [sentinel(view.shape, dtype, d, draw(st.sampled_from(["contiguous", "strided"]), label="out_layout"))
            for d in device_list(draw, n, unique=False)]
    return [SPCase(cell.api, src.layout, draw(st.integers(0, n - 1), label="current"), [src],
                   {"_out": outs, "out_devices": [o.device for o in outs]})]


def check_out(case: SPCase, outcome: Outcome) -> list[str]:
    values, dtype = c.api_view(case.tensors[0].values, case.tensors[0].dtype)
    return c.out_tensors_hold(outcome, [values] * len(case.params["_out"]), dtype)


# ----------------------------------------------------------------------------- preconditions
def draw_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    src = _source(draw, n)
    view, dtype = c.api_view(src.values, src.dtype)
    good = device_list(draw, n, unique=False)
    current = draw(st.integers(0, n - 1), label="current")
    out = [sentinel(view.shape, dtype, d) for d in good]
    bad_shape = tuple(view.shape) + (1,)
    exactly_one = reject("RuntimeError", r"Exactly one of 'devices' and 'out'", "devices xor out")

    def case(variant: str, expect: Any, **params: Any) -> SPCase:
        return SPCase(cell.api, variant, current, [src], params, expect)

    return [
        case("neither", exactly_one, devices=None),
        case("both", exactly_one, devices=[("int", d) for d in good], _out=out),
        case("cpu_out", reject("RuntimeError", r"Expected all output tensors to be CUDA tensors", "out on the host"),
             _out=out + [sentinel(view.shape, dtype, HOST)]),
        case("out_shape", reject("RuntimeError", r"same shape as the source tensor", "an out tensor of another shape"),
             _out=out + [sentinel(bad_shape, dtype, good[0])]),
        case("negative_index", reject("RuntimeError", r"Expected non-negative device index", "device -1"),
             devices=[("int", d) for d in good] + [("int", -1)]),
        case("cpu_device", reject("ValueError", r"Expected a non cpu device", "devices=['cpu']"), devices=["cpu"]),
        case("no_index", reject("ValueError", r"specified index or an integer", "devices=['cuda'] (no index)"),
             devices=["cuda"]),
        case("bad_index", reject(cuda_error(), r"invalid device ordinal", f"cuda:{n} does not exist"),
             devices=[("int", n)]),
    ]


# ----------------------------------------------------------------------------- broadcast_coalesced
def draw_coalesced(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    devices = device_list(draw, n, unique=False)
    count = draw(st.integers(1, 4), label="tensor_count")
    tensors = [tensor(draw, draw(st.sampled_from(MOVE_DTYPES), label="dtype"), tensor_shape(draw), devices[0],
                      label=f"tensor{i}") for i in range(count)]
    buffer = draw(st.sampled_from([1, 16, 64, DEFAULT_BUFFER]), label="buffer_size")
    variant = "small_buffer" if buffer < DEFAULT_BUFFER else "default_buffer"
    return [SPCase(cell.api, variant, draw(st.integers(0, n - 1), label="current"), tensors,
                   {"devices": [device_form(draw, d) for d in devices], "_indices": devices, "buffer_size": buffer})]


def run_coalesced(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.comm as comm

    tensors = [t.tensor(s) for s in case.tensors]
    devices = [device_arg(d) for d in case.params["devices"]]
    return lambda: comm.broadcast_coalesced(tensors, devices, case.params["buffer_size"])


def check_coalesced(case: SPCase, outcome: Outcome) -> list[str]:
    devices, result = case.params["_indices"], outcome.result
    if len(result) != len(devices) or any(len(row) != len(case.tensors) for row in result):
        return [f"result shaped {[len(r) for r in result]}, expected {len(devices)} lists of {len(case.tensors)}"]
    problems = []
    for j, spec in enumerate(case.tensors):
        values, dtype = c.api_view(spec.values, spec.dtype)
        for i, d in enumerate(devices):
            info, what = result[i][j], f"result[{i}][{j}]"
            problems += c.on_device(info, d, what) + c.same_data(info, values, dtype, what)
            if i == 0:
                problems += (c.is_case_tensor(info, j, what) if dtype == spec.dtype
                             else c.shares_memory(info, outcome.tensors[j], what))
            elif d != devices[0]:
                problems += c.fresh_memory(info, outcome, what)
    return problems


def draw_coalesced_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    devices = device_list(draw, n, unique=False)
    dtype = draw(st.sampled_from(MOVE_DTYPES), label="dtype")
    home = tensor(draw, dtype, tensor_shape(draw), devices[0], label="home")
    elsewhere = draw(st.sampled_from([d for d in range(HOST, n) if d != devices[0]]), label="elsewhere")
    stray = tensor(draw, dtype, tensor_shape(draw), elsewhere, label="stray")
    expect = reject("RuntimeError", rf"All tensors must be on devices\[0\]: {devices[0]}", "a tensor elsewhere")
    variant = "host_tensor" if elsewhere == HOST else "other_device"
    return [SPCase(cell.api, variant, 0, [home, stray], {"devices": [("int", d) for d in devices],
                                                         "buffer_size": DEFAULT_BUFFER}, expect)]



register(
    SPCell("comm", "comm.broadcast", "devices", draw_devices, run_broadcast, check_devices),
    SPCell("comm", "comm.broadcast", "out", draw_out, run_broadcast, check_out),
    SPCell("comm", "comm.broadcast", "errors", draw_errors, run_broadcast, c.error_cell),
    SPCell("comm", "comm.broadcast_coalesced", "buffer", draw_coalesced, run_coalesced, check_coalesced),
    SPCell("comm", "comm.broadcast_coalesced", "errors", draw_coalesced_errors, run_coalesced, c.error_cell,
           min_devices=1),
)
