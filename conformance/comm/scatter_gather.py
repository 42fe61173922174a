"""torch.cuda.comm.scatter and gather (as torch documents them).

scatter: without chunk_sizes, tensor.chunk(len(devices), dim): chunks of ceil(N/k), so FEWER results
than devices when the tensor is short; with chunk_sizes, one (possibly empty) chunk per device. The chunk
for the source's own device is a VIEW of the input; the others are copies. Negative dims wrap; out=
takes the chunk sizes from the out tensors.
gather: cat(tensors, dim) on destination (None: the CURRENT CUDA device, 'cpu' or -1: the host, -1 with
a FutureWarning), in the FIRST tensor's dtype; out= may be on the host.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from conformance.comm import checks as c
from conformance.comm.cells import SPCase, SPCell, cuda_error, register, reject
from conformance.comm.draw import (CAST_DTYPES, Draw, MOVE_DTYPES, device_form, device_list, sentinel,
                                   source_device, tensor, tensor_shape)
from conformance.comm.worker import HOST, Outcome, TensorInfo, Tracker, device_arg, streams_for


def chunk_sizes(size: int, parts: int) -> list[int]:
    """torch.chunk's rule: pieces of ceil(size/parts), the last one shorter, none empty (a size-0 dim: `parts`
    empty ones)."""
    if size == 0:
        return [0] * parts
    step = -(-size // parts)
    return [min(step, size - start) for start in range(0, size, step)]


def _scatter_source(draw: Draw, n: int) -> tuple[Any, np.ndarray, int]:
    """A source tensor of at least one dim, its api view and a dim of that view (negative half the time)."""
    dtype = draw(st.sampled_from(MOVE_DTYPES), label="dtype")
    src = tensor(draw, dtype, tensor_shape(draw, min_dims=1), source_device(draw, n), label="source")
    view, _ = c.api_view(src.values, src.dtype)
    dim = draw(st.integers(-view.ndim, view.ndim - 1), label="dim")
    return src, view, dim


def _streams(draw: Draw, devices: list[int]) -> list[Any] | None:
    """None, or per position None or a new stream on that position's device (the only stream it may take)."""
    if not draw(st.booleans(), label="use_streams"):
        return None
    return [draw(st.sampled_from([None, d]), label="stream") for d in devices]


# ----------------------------------------------------------------------------- scatter
def draw_chunk(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    src, view, dim = _scatter_source(draw, n)
    devices = device_list(draw, n, unique=False)
    params = {"devices": [device_form(draw, d) for d in devices], "_indices": devices, "dim": dim,
              "streams": _streams(draw, devices)}
    if cell.op == "chunk_sizes":
        size = view.shape[dim]
        cuts = sorted(draw(st.lists(st.integers(0, size), min_size=len(devices) - 1,
                                    max_size=len(devices) - 1), label="cuts"))
        params["chunk_sizes"] = [b - a for a, b in zip([0] + cuts, cuts + [size])]
    return [SPCase(cell.api, src.layout, draw(st.integers(0, n - 1), label="current"), [src], params)]


def run_scatter(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.comm as comm

    p = case.params
    x = t.tensor(case.tensors[0])
    x = (x,) if p.get("_as_tuple") else x  # a sequence where one tensor belongs
    out = [t.tensor(s) for s in p["_out"]] if "_out" in p else None
    devices = None if p.get("devices") is None else [device_arg(d) for d in p["devices"]]
    streams = streams_for(p.get("streams"))
    kwargs = {"out": out} if out is not None else {}
    return lambda: comm.scatter(x, devices, p.get("chunk_sizes"), p["dim"], streams, **kwargs)


def _pieces(view: np.ndarray, dim: int, sizes: list[int]) -> list[np.ndarray]:
    return np.split(view, np.cumsum(sizes)[:-1], axis=dim) if sizes else []


def check_scatter(case: SPCase, outcome: Outcome) -> list[str]:
    src = case.tensors[0]
    view, dtype = c.api_view(src.values, src.dtype)
    p = case.params
    dim = p["dim"] % view.ndim
    devices = p["_indices"]
    sizes = p.get("chunk_sizes") or chunk_sizes(view.shape[dim], len(devices))
    result = outcome.result
    if len(result) != len(sizes):
        return [f"{len(result)} chunks, expected {len(sizes)} (sizes {sizes} along dim {dim})"]
    problems, start = [], 0
    for i, (info, piece) in enumerate(zip(result, _pieces(view, dim, sizes))):
        what = f"chunk[{i}]"
        problems += c.on_device(info, devices[i], what) + c.same_data(info, piece, dtype, what)
        if devices[i] == src.device:
            problems += _is_view(info, outcome.tensors[0], src.dtype != dtype, dim, start, what)
        else:
            problems += c.fresh_memory(info, outcome, what)
        start += sizes[i]
    return problems


def _is_view(info: TensorInfo, base: TensorInfo, real_view: bool, dim: int, start: int, what: str) -> list[str]:
    """`info` is base.narrow(dim, start, ...) (of base's real view for complex): same memory, strides, offset."""
    if 0 in (info.values.size, base.values.size):  # empty tensors own no memory: nothing to compare
        return []
    stride, offset = list(base.stride), base.offset
    if real_view:  # view_as_real: offsets and strides in units of the real part, plus the trailing dim of 2
        stride, offset = [2 * s for s in stride] + [1], 2 * offset
    problems = c.shares_memory(info, base, what)
    expected_offset = offset + start * stride[dim]
    if not problems and (list(info.stride) != stride or info.offset != expected_offset):
        problems.append(f"{what}: strides {list(info.stride)} offset {info.offset}, expected the input's view "
                        f"(strides {stride}, offset {expected_offset})")
    return problems


def draw_scatter_out(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    src, view, dim = _scatter_source(draw, n)
    size, wrapped = view.shape[dim], dim % view.ndim
    devices = device_list(draw, n, unique=False)
    cuts = sorted(draw(st.lists(st.integers(0, size), min_size=len(devices) - 1, max_size=len(devices) - 1),
                       label="cuts"))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [size])]
    _, dtype = c.api_view(src.values, src.dtype)
    outs = [sentinel(view.shape[:wrapped] + (s,) + view.shape[wrapped + 1:], dtype, d,
                     draw(st.sampled_from(["contiguous", "strided"]), label="out_layout"))
            for s, d in zip(sizes, devices)]
    params = {"_out": outs, "dim": dim, "out_sizes": sizes, "_indices": devices, "streams": _streams(draw, devices)}
    return [SPCase(cell.api, src.layout, draw(st.integers(0, n - 1), label="current"), [src], params)]


def check_scatter_out(case: SPCase, outcome: Outcome) -> list[str]:
    view, dtype = c.api_view(case.tensors[0].values, case.tensors[0].dtype)
    return c.out_tensors_hold(outcome, _pieces(view, case.params["dim"] % view.ndim, case.params["out_sizes"]), dtype)


def draw_scatter_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    src, view, dim = _scatter_source(draw, n)
    size, wrapped = view.shape[dim], dim % view.ndim
    _, dtype = c.api_view(src.values, src.dtype)
    devices = device_list(draw, n, unique=False)
    current = draw(st.integers(0, n - 1), label="current")
    ints = [("int", d) for d in devices]
    other = next((d for d in range(n) if d != devices[0]), None)
    outs = [sentinel(view.shape[:wrapped] + (size if i == 0 else 0,) + view.shape[wrapped + 1:], dtype, d)
            for i, d in enumerate(devices)]

    def case(variant: str, expect: Any, **params: Any) -> SPCase:
        return SPCase(cell.api, variant, current, [src], {"dim": dim, **params}, expect)

    def out_error(variant: str, pattern: str, reason: str, bad: Any) -> SPCase:
        return case(variant, reject("RuntimeError", pattern, reason), _out=bad)

    flat = view.shape[:wrapped] + view.shape[wrapped + 1:]
    cases = [
        case("no_devices", reject("RuntimeError", r"Expected at least one device to scatter to", "devices=[]"),
             devices=[]),
        case("neither", reject("TypeError", r"not iterable", "neither devices nor out"), devices=None),
        case("sizes_count", reject("RuntimeError", r"Expected devices and chunk_sizes to be of same length",
                                   "one chunk size too many"), devices=ints, chunk_sizes=[size] + [0] * len(devices)),
        case("sizes_sum", reject("RuntimeError", r"split_with_sizes expects split_sizes to sum exactly to",
                                 "chunk sizes one too many"), devices=ints,
             chunk_sizes=[size + 1] + [0] * (len(devices) - 1)),
        case("sizes_negative", reject("RuntimeError", r"split_with_sizes expects split_sizes have only non-negative",
                                      "a negative chunk size"), devices=ints + [("int", devices[0])],
             chunk_sizes=[size + 1] + [0] * (len(devices) - 1) + [-1]),
        case("dim_range", reject("IndexError", r"Dimension out of range", "dim past the last"), devices=ints,
             dim=view.ndim),
        case("devices_with_out", reject("RuntimeError", r"'devices' must not be specified when 'out' is specified",
                                        "devices and out"), devices=ints, _out=outs),
        case("sizes_with_out", reject("RuntimeError", r"'chunk_sizes' must not be specified when 'out' is specified",
                                      "chunk_sizes and out"), chunk_sizes=[size], _out=outs),
        out_error("no_out", r"Expected at least one output tensor to scatter to", "out=[]", []),
        out_error("cpu_out", r"Expected all output tensors to be CUDA tensors", "an out tensor on the host",
                  outs + [sentinel(outs[0].shape, dtype, HOST)]),
        out_error("out_shape", r"has incorrect shape", "an out tensor with another dim count",
                  outs + [sentinel(flat + (1, 1), dtype, devices[0])]),
        out_error("out_total", r"Total size for output tensors along scatter dim", "out sizes one too many",
                  outs + [sentinel(view.shape[:wrapped] + (1,) + view.shape[wrapped + 1:], dtype, devices[0])]),
        case("tuple", reject("AttributeError", r"has no attribute", "a tuple of tensors (that is nn.parallel.scatter)"),
             devices=ints, _as_tuple=True),
        case("bad_index", reject(cuda_error(), r"invalid device ordinal", f"cuda:{n} does not exist"),
             devices=[("int", n)], chunk_sizes=[size]),
    ]
    if src.device != HOST:  # -1 is the source's own "device" when the source is on the host
        cases.append(case("negative_index", reject("RuntimeError", r"Expected non-negative device index",
                                                   "device -1"), devices=[("int", -1)], chunk_sizes=[size]))
    if other is not None and devices[0] != src.device:  # streams are only checked for chunks that move
        cases.append(case("stream_device", reject("RuntimeError", r"Expected the device associated with the stream "
                                                  r"at index 0", "a stream of another device"),
                          devices=[("int", devices[0])], chunk_sizes=[size], streams=[other]))
    return cases


# ----------------------------------------------------------------------------- gather
DESTINATIONS = ["none", "int", "str", "device", "cpu", "minus_one"]


def _gather_inputs(draw: Draw, n: int, dtypes: list[str], small_ints: bool) -> tuple[list[Any], int]:
    devices = device_list(draw, n, unique=False, max_size=n + 1)
    base = tensor_shape(draw, min_dims=1)
    ndim = len(base) + (1 if dtypes[0] == "complex64" else 0)
    dim = draw(st.integers(-ndim, ndim - 1), label="dim")
    tensors = []
    for i, d in enumerate(devices):
        dtype = dtypes[0] if i == 0 or len(dtypes) == 1 else draw(st.sampled_from(dtypes), label="dtype")
        shape = list(base)
        if dim % ndim < len(base):
            shape[dim % ndim] = draw(st.integers(0, 4), label="size_along_dim")
        tensors.append(tensor(draw, dtype, tuple(shape), d, small_ints=small_ints, label=f"input{i}"))
    return tensors, dim


def _destination(draw: Draw, n: int) -> tuple[Any, int | None]:
    """A destination argument and the device it means (None: the current device)."""
    kind = draw(st.sampled_from(DESTINATIONS), label="destination")
    index = draw(st.integers(0, n - 1), label="destination_index")
    return {"none": (None, None), "int": (("int", index), index), "str": (("str", f"cuda:{index}"), index),
            "device": (("device", f"cuda:{index}"), index), "cpu": ("cpu", HOST), "minus_one": (-1, HOST)}[kind]


def draw_gather(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    if cell.op == "mixed_dtypes":
        first = draw(st.sampled_from(CAST_DTYPES), label="first_dtype")
        tensors, dim = _gather_inputs(draw, n, [first] + CAST_DTYPES, small_ints=True)
    else:
        tensors, dim = _gather_inputs(draw, n, [draw(st.sampled_from(MOVE_DTYPES), label="dtype")], False)
    current = draw(st.integers(0, n - 1), label="current")
    params: dict[str, Any] = {"dim": dim}
    if cell.op == "out":
        shape = _gathered(tensors, dim).shape
        params["_out"] = sentinel(shape, c.api_view(tensors[0].values, tensors[0].dtype)[1],
                                  draw(st.integers(HOST, n - 1), label="out_device"))
    else:
        params["destination"], params["_where"] = _destination(draw, n)
    variant = "mixed_layouts" if len({t.layout for t in tensors}) > 1 else tensors[0].layout
    return [SPCase(cell.api, variant, current, tensors, params)]


def _gathered(tensors: list[Any], dim: int) -> np.ndarray:
    views = [c.api_view(t.values, t.dtype)[0] for t in tensors]
    first = c.api_view(tensors[0].values, tensors[0].dtype)[0]
    return np.concatenate([v.astype(first.dtype) for v in views], axis=dim)


def run_gather(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.comm as comm

    p = case.params
    tensors = [t.tensor(s) for s in case.tensors]
    if "_out" in p:
        out = t.tensor(p["_out"])
        return lambda: comm.gather(tensors, p["dim"], device_arg(p.get("destination")), out=out)
    return lambda: comm.gather(tensors, p["dim"], device_arg(p.get("destination")))


def check_gather(case: SPCase, outcome: Outcome) -> list[str]:
    p, info = case.params, outcome.result
    expected = _gathered(case.tensors, p["dim"])
    dtype = c.api_view(case.tensors[0].values, case.tensors[0].dtype)[1]
    problems = c.same_data(info, expected, dtype, "result")
    if "_out" in p:
        return problems + c.is_case_tensor(info, len(case.tensors), "result")
    where = case.current if p["_where"] is None else p["_where"]
    problems += c.on_device(info, where, "result") + c.fresh_memory(info, outcome, "result")
    if not info.contiguous:
        problems.append("result: not contiguous")
    deprecated = [w for w in outcome.warnings if w.startswith("FutureWarning") and "-1 to represent CPU" in w]
    if bool(deprecated) != (p["destination"] == -1):
        problems.append(f"warnings {outcome.warnings}: a FutureWarning exactly when destination=-1")
    return problems


def draw_gather_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    tensors, dim = _gather_inputs(draw, n, [draw(st.sampled_from(MOVE_DTYPES), label="dtype")], False)
    first = tensors[0]
    view = c.api_view(first.values, first.dtype)[0]
    current = draw(st.integers(0, n - 1), label="current")
    ndim = view.ndim

    def case(variant: str, expect: Any, inputs: list[Any], **params: Any) -> SPCase:
        return SPCase(cell.api, variant, current, inputs, {"dim": dim, **params}, expect)

    grown = first.values.reshape(first.values.shape + (1,))
    on_host = type(first)(first.values, first.dtype, first.layout, HOST)
    cases = [
        case("no_tensors", reject("RuntimeError", r"Expected at least one tensor to gather from", "tensors=[]"), []),
        case("host_input", reject("RuntimeError", r"Expected all input tensors to be CUDA tensors",
                                  "an input on the host"), tensors + [on_host]),
        case("ndim", reject("RuntimeError", r"Expected all input tensors to have the same number of dimensions",
                            "an input with one more dim"), tensors + [type(first)(grown, first.dtype, "contiguous",
                                                                                   first.device)]),
        case("dim_range", reject("IndexError", r"Dimension out of range", "dim past the last"), tensors, dim=ndim),
        case("out_and_destination", reject("RuntimeError", r"'destination' must not be specified when 'out'",
                                           "out and destination"), tensors, destination=("int", 0),
             _out=sentinel(_gathered(tensors, dim).shape, c.api_view(first.values, first.dtype)[1], 0)),
        case("out_shape", reject("RuntimeError", r"Expected out tensor to have shape", "out one element too long"),
             tensors, _out=sentinel(tuple(s + 1 for s in _gathered(tensors, dim).shape),
                                   c.api_view(first.values, first.dtype)[1], 0)),
    ]
    off_dim = [k for k in range(first.values.ndim) if k != dim % ndim]
    if off_dim:  # sizes may differ along dim only
        wider = list(first.values.shape)
        wider[off_dim[0]] += 1
        cases.append(case("shape", reject("RuntimeError", r"Input tensor at index \d+ has invalid shape",
                                          "an input one longer off dim"),
                          tensors + [sentinel(tuple(wider), first.dtype, first.device)]))
    return cases



register(
    SPCell("comm", "comm.scatter", "chunk", draw_chunk, run_scatter, check_scatter),
    SPCell("comm", "comm.scatter", "chunk_sizes", draw_chunk, run_scatter, check_scatter),
    SPCell("comm", "comm.scatter", "out", draw_scatter_out, run_scatter, check_scatter_out),
    SPCell("comm", "comm.scatter", "errors", draw_scatter_errors, run_scatter, c.error_cell),
    SPCell("comm", "comm.gather", "destination", draw_gather, run_gather, check_gather),
    SPCell("comm", "comm.gather", "mixed_dtypes", draw_gather, run_gather, check_gather),
    SPCell("comm", "comm.gather", "out", draw_gather, run_gather, check_gather),
    SPCell("comm", "comm.gather", "errors", draw_gather_errors, run_gather, c.error_cell),
)
