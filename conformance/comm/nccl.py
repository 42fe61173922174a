"""torch.cuda.nccl: one process driving several GPUs (as torch documents it).

One cell per function x dtype x RAW NCCL op (0 SUM, 1 PROD, 2 MAX, 3 MIN, 4 AVG: ncclRedOp_t, not
torch.distributed.ReduceOp), plus one error cell per function. Inputs: one tensor per distinct device,
contiguous, one dtype, one element count (their shapes may differ). bool and fp8 travel as raw bytes
(ncclUint8), so a bool SUM can hold 2; dtypes outside NCCL's map raise "Unconvertible NCCL type".
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from conformance.comm import checks as c
from conformance.comm.cells import SPCase, SPCell, register, reject
from conformance.comm.draw import Draw, device_list, sentinel
from conformance.comm.worker import HOST, Outcome, TensorSpec, Tracker, streams_for
from conformance.strategies import values

RAW_OPS = {"SUM": 0, "PROD": 1, "MAX": 2, "MIN": 3, "AVG": 4}  # ncclRedOp_t
ORACLE_OP = {"SUM": "sum", "PROD": "product", "MAX": "max", "MIN": "min", "AVG": "avg"}
NCCL_DTYPES = ["float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bfloat16", "bool",
               "float8_e4m3fn", "float8_e5m2"]
NOT_NCCL_DTYPES = ["int16", "uint16", "uint32", "uint64", "complex64"]
REDUCING = ("all_reduce", "reduce", "reduce_scatter")
FUNCTIONS = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter")


def _shapes(draw: Draw, numel: int, count: int) -> list[tuple[int, ...]]:
    """Shapes of `numel` elements for `count` tensors: NCCL checks element counts only."""
    options = [(numel,), (1, numel)] + ([(2, numel // 2)] if numel % 2 == 0 and numel else [])
    return [draw(st.sampled_from(options), label="shape") for _ in range(count)]


def draw_call(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    fn = cell.api.split(".", 1)[1]
    devices = device_list(draw, n, unique=True)
    k, dtype, op = len(devices), cell.dtype, ORACLE_OP.get(cell.op or "")
    m = draw(st.integers(0, 6), label="numel")
    in_numel = m * k if fn == "reduce_scatter" else m
    tensors = [TensorSpec(draw(values(dtype, shape, op), label=f"input{i}"), dtype, "contiguous", d)
               for i, (shape, d) in enumerate(zip(_shapes(draw, in_numel, k), devices))]
    params: dict[str, Any] = {"fn": fn, "inputs": list(range(k)), "outputs": None, "op": RAW_OPS.get(cell.op or ""),
                              "root": draw(st.integers(0, k - 1), label="root"),
                              "streams": draw(st.sampled_from([None, devices]), label="streams")}

    def outputs(numel: int) -> list[int]:
        return _add(tensors, [sentinel(s, dtype, d) for s, d in zip(_shapes(draw, numel, k), devices)])

    if fn in ("all_gather", "reduce_scatter"):
        variant = "out_of_place"
        params["outputs"] = outputs(m * k if fn == "all_gather" else m)
    elif fn == "all_reduce":
        variant = draw(st.sampled_from(["in_place", "out_of_place"]), label="output_form")
        params["outputs"] = outputs(m) if variant == "out_of_place" else None
    elif fn == "broadcast":
        variant = "first_root" if params["root"] == 0 else "other_root"
    else:
        variant = draw(st.sampled_from(["in_place", "output", "output_list", "outputs_kw"]), label="output_form")
        root = params["root"]
        if variant == "output":
            params["outputs"] = _add(tensors, [sentinel(tensors[root].shape, dtype, devices[root])])
        elif variant != "in_place":
            params["outputs"] = _add(tensors, [sentinel(t.shape, dtype, d) for t, d in zip(tensors[:k], devices)])
        params["output_form"] = variant
    case = SPCase(cell.api, variant, draw(st.integers(0, n - 1), label="current"), tensors, params)
    if dtype in NOT_NCCL_DTYPES:
        case.expect = reject("RuntimeError", r"Unconvertible NCCL type", "dtype outside NCCL's type map")
    return [case]


def _add(tensors: list[TensorSpec], more: list[TensorSpec]) -> list[int]:
    """Append tensors to the case; their indices."""
    tensors.extend(more)
    return list(range(len(tensors) - len(more), len(tensors)))


def run_call(case: SPCase, t: Tracker) -> Callable[[], Any]:
    import torch.cuda.nccl as nccl

    p = case.params
    built = [t.tensor(s) for s in case.tensors]
    inputs = [built[i] for i in p["inputs"]]
    arg: Any = inputs[0] if p.get("not_a_sequence") else inputs
    outputs = None if p["outputs"] is None else [built[i] for i in p["outputs"]]
    streams = streams_for(p["streams"])
    fn, op, root = p["fn"], p["op"], p["root"]
    if fn == "all_reduce":
        return lambda: nccl.all_reduce(arg, outputs, op=op, streams=streams)
    if fn == "broadcast":
        return lambda: nccl.broadcast(arg, root=root, streams=streams)
    if fn == "all_gather":
        return lambda: nccl.all_gather(arg, outputs, streams=streams)
    if fn == "reduce_scatter":
        return lambda: nccl.reduce_scatter(arg, outputs, op=op, streams=streams)
    form = p.get("output_form", "in_place")
    if form == "in_place":
        return lambda: nccl.reduce(arg, root=root, op=op, streams=streams)
    if form == "output":
        return lambda: nccl.reduce(arg, outputs[0], root=root, op=op, streams=streams)
    if form == "output_list":  # the deprecated positional list of outputs
        return lambda: nccl.reduce(arg, outputs, root, op, streams)
    return lambda: nccl.reduce(arg, root=root, op=op, streams=streams, outputs=outputs)


def check_call(case: SPCase, outcome: Outcome) -> list[str]:
    p = case.params
    fn, dtype, op = p["fn"], case.tensors[0].dtype, ORACLE_OP.get(_op_name(p.get("op")))
    inputs = [case.tensors[i].values for i in p["inputs"]]
    k, after = len(inputs), outcome.tensors

    def shape(i: int) -> tuple[int, ...]:
        return case.tensors[i].shape

    if fn == "all_reduce":
        targets = p["outputs"] or p["inputs"]
        problems = [x for j, i in enumerate(targets) for x in c.reduced(after[i], inputs, op, dtype, f"result {j}",
                                                                        shape(i))]
        return problems + (c.unchanged(outcome, case, p["inputs"], "input") if p["outputs"] else [])
    if fn == "broadcast":
        source = inputs[p["root"]].reshape(-1)
        return [x for j, i in enumerate(p["inputs"])
                for x in c.same_data(after[i], source.reshape(shape(i)), dtype, f"tensor {j} (root {p['root']})")]
    if fn == "all_gather":
        gathered = np.concatenate([x.reshape(-1) for x in inputs])
        problems = [x for j, i in enumerate(p["outputs"])
                    for x in c.same_data(after[i], gathered.reshape(shape(i)), dtype, f"output {j}")]
        return problems + c.unchanged(outcome, case, p["inputs"], "input")
    if fn == "reduce_scatter":
        m = inputs[0].size // k
        problems = [x for j, i in enumerate(p["outputs"])
                    for x in c.reduced(after[i], [v.reshape(-1)[j * m:(j + 1) * m] for v in inputs], op, dtype,
                                       f"output {j}", shape(i))]
        return problems + c.unchanged(outcome, case, p["inputs"], "input")
    return _check_reduce(case, outcome, inputs, op, dtype)


def _check_reduce(case: SPCase, outcome: Outcome, inputs: list[np.ndarray], op: str, dtype: str) -> list[str]:
    p, root = case.params, case.params["root"]
    form = p["output_form"]
    if form == "in_place":
        target = p["inputs"][root]
    else:  # one output tensor, or a list of them of which reduce writes the root's
        target = p["outputs"][0 if form == "output" else root]
    problems = c.reduced(outcome.tensors[target], inputs, op, dtype, "output", case.tensors[target].shape)
    others = [i for i in p["inputs"] + (p["outputs"] or []) if i != target]
    problems += c.unchanged(outcome, case, others, "tensor")
    deprecated = any(w.startswith("FutureWarning") for w in outcome.warnings)
    if deprecated != (form in ("output_list", "outputs_kw")):
        problems.append(f"warnings {outcome.warnings}: a FutureWarning exactly for a list of outputs")
    return problems


def _op_name(raw: int | None) -> str:
    return next((name for name, value in RAW_OPS.items() if value == raw), "")


# ----------------------------------------------------------------------------- preconditions
def draw_errors(draw: Draw, n: int, cell: SPCell) -> list[SPCase]:
    """Every precondition of check_inputs and python_nccl.cpp, each broken alone on an otherwise good call."""
    fn = cell.api.split(".", 1)[1]
    devices = device_list(draw, n, unique=True)
    k, m = len(devices), draw(st.integers(2, 6), label="numel")
    has_outputs = fn in ("all_reduce", "all_gather", "reduce_scatter")
    current = draw(st.integers(0, n - 1), label="current")
    data = draw(values("float32", (m * (k + 1),)), label="values")

    def sizes(count: int) -> tuple[int, int]:
        """Element counts of each input and each output for `count` inputs."""
        return (m * count if fn == "reduce_scatter" else m), (m * count if fn == "all_gather" else m)

    def good(devs: list[int]) -> tuple[list[TensorSpec], dict[str, Any]]:
        in_numel, out_numel = sizes(len(devs))
        tensors = [TensorSpec(data[:in_numel], "float32", "contiguous", d) for d in devs]
        params = {"fn": fn, "inputs": list(range(len(devs))), "outputs": None, "op": 0, "root": 0, "streams": None,
                  "output_form": "in_place"}
        if has_outputs:
            params["outputs"] = _add(tensors, [sentinel((out_numel,), "float32", d) for d in devs])
        return tensors, params

    cases: list[SPCase] = []
    in_numel, out_numel = sizes(k)
    first = devices[0]

    def case(variant: str, error: str, pattern: str, reason: str,
             change: Callable[[list[TensorSpec], dict[str, Any]], Any] = lambda ts, ps: None,
             devs: list[int] = devices) -> None:
        tensors, params = good(devs)
        change(tensors, params)
        cases.append(SPCase(cell.api, variant, current, tensors, params, reject(error, pattern, reason)))

    def put(index: int, spec: TensorSpec) -> Callable[[list[TensorSpec], dict[str, Any]], None]:
        return lambda ts, ps: ts.__setitem__(index, spec)

    case("host_tensor", "RuntimeError", r"input and output elements have to be cuda dense Tensors",
         "an input on the host", put(0, sentinel((in_numel,), "float32", HOST)))
    case("non_contiguous", "RuntimeError", r"all inputs and outputs have to be contiguous", "a strided input",
         put(0, sentinel((in_numel,), "float32", first, "strided")))
    case("duplicate_device", "RuntimeError", r"inputs must be on unique devices", "two inputs on one device",
         devs=devices + [first])
    case("not_a_sequence", "TypeError", r"Inputs should be a collection of tensors", "a tensor for inputs",
         lambda ts, ps: ps.update(not_a_sequence=True))
    case("streams_count", "RuntimeError", r"number of streams is not equal to number of inputs",
         "one stream too many", lambda ts, ps: ps.update(streams=[None] * (k + 1)))
    def with_output(**change: Any) -> Callable[[list[TensorSpec], dict[str, Any]], None]:
        """reduce(inputs, output, ...) with an output tensor of its own on the first device."""
        return lambda ts, ps: ps.update(change, output_form="output",
                                        outputs=_add(ts, [sentinel((m,), "float32", first)]))

    if fn == "reduce":  # the root check comes first: an empty list has no valid root
        case("empty", "RuntimeError", r"invalid root", "no inputs (explicit output)", with_output(inputs=[]))
        case("root_index", "IndexError", r"list index out of range", "root past the inputs (output=None)",
             lambda ts, ps: ps.update(root=k))
        case("root_output", "RuntimeError", r"invalid root", "root past the inputs (explicit output)",
             with_output(root=k))
    elif fn == "broadcast":
        case("empty", "RuntimeError", r"invalid root", "no inputs", lambda ts, ps: ps.update(inputs=[]))
        case("root", "RuntimeError", r"invalid root", "root past the inputs", lambda ts, ps: ps.update(root=k))
        case("negative_root", "RuntimeError", r"invalid root", "root -1", lambda ts, ps: ps.update(root=-1))
    else:
        case("empty", "RuntimeError", r"input sequence can't be empty", "no inputs",
             lambda ts, ps: ps.update(inputs=[], outputs=[]))
    if k > 1:
        case("dtype", "RuntimeError", r"all inputs and outputs must be of the same Tensor dtype",
             "an input of another dtype", put(1, sentinel((in_numel,), "float64", devices[1])))
        case("numel", "RuntimeError", r"all inputs must have the same number of elements", "an input one longer",
             put(1, sentinel((in_numel + 1,), "float32", devices[1])))
    if has_outputs:
        case("length", "RuntimeError", r"inputs and outputs sequences have to be of the same length",
             "one output missing", lambda ts, ps: ps.update(outputs=ps["outputs"][:-1]))
        case("output_size", "RuntimeError", r"output must be of size input_size \* size_multiplier",
             "an output one longer", put(k, sentinel((out_numel + 1,), "float32", first)))
        if k > 1:
            case("output_device", "RuntimeError", r"input and output must be on the same device",
                 "an output on another device", put(k, sentinel((out_numel,), "float32", devices[1])))
    return cases



def _cells() -> list[SPCell]:
    cells = []
    for fn in FUNCTIONS:
        api = f"nccl.{fn}"
        for dtype in NCCL_DTYPES:
            for op in (RAW_OPS if fn in REDUCING else [None]):
                cells.append(SPCell("nccl", api, op, draw_call, run_call, check_call, dtype=dtype))
        for dtype in NOT_NCCL_DTYPES:
            cells.append(SPCell("nccl", api, "SUM" if fn in REDUCING else None, draw_call, run_call, check_call,
                                dtype=dtype))
        cells.append(SPCell("nccl", api, "errors", draw_errors, run_call, c.error_cell))
    return cells


register(*_cells())
