"""Functional collectives (torch.distributed._functional_collectives, the _c10d_functional ops): the
result is a new tensor (an AsyncCollectiveTensor in eager mode), the input is left alone.

  funcol.all_reduce(x, op)                  y = (+)_j x_j
  funcol.all_reduce_coalesced([x..], op)    each tensor of the list reduced
  funcol.all_gather_tensor(x, gather_dim)   y = cat_j x_j along gather_dim (any dim)
  funcol.all_gather_into_tensor_coalesced   each tensor gathered along dim 0
  funcol.reduce_scatter_tensor(x, op, d)    y_r = chunk_r((+)_j x_j) along d; torch asserts that
                                            x.size(d) divides by the group size (AssertionError)
  funcol.reduce_scatter_tensor_coalesced    each tensor reduce-scattered along its own dim
  funcol.all_to_all_single(x, out, in)      rows out in pieces, uneven and zero splits, or even (None)
  funcol.broadcast(x, src)                  y = x_src (src: a group rank)
  funcol.permute_tensor(x, src_dst)         y_r = x_s where src_dst[s] = r; torch passes numel() as the
                                            dim-0 split size, so a tensor whose numel is not its dim 0
                                            raises c10d's "Split sizes doesn't match total dim 0 size"

The group is a ProcessGroup, a list of ranks or a DeviceMesh dimension (conformance/collectives/groups.py);
the result is read after a wait drawn from: wait_tensor(y), y.wait(), or first use (clone) with or
without a view in between: the AsyncCollectiveTensor contract, right once waited however it is waited.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st

from conformance.collectives.groups import draw_group, group_size_of, groups_of, resolve
from conformance.dtypes import DTYPES
from conformance.oracle import OK, Verdict, check_exact_copy, check_reduction
from conformance.spec import Case, Cell, CollectiveSpec, Reject, register
from conformance.strategies import shapes, values
from conformance.tensors import arrays, make

WAITS = ("wait_tensor", "method", "first_use", "view_use")
REDUCE_DTYPES = ("float32", "bfloat16", "int32", "int16")   # int16: outside NCCL's and gloo's tables
DATA_DTYPES = ("float32", "int64", "int16")
FUNCOL_OPS = ("sum", "avg", "max", "band")                  # band: NCCL has no bitwise ops


def funcol(*names: str) -> Any:
    """The first of `names` that torch.distributed._functional_collectives has (2.13 renamed a few)."""
    import torch.distributed._functional_collectives as fc

    for name in names:
        if hasattr(fc, name):
            return getattr(fc, name)
    raise AttributeError(f"_functional_collectives has none of {names}")


def missing(*names: str) -> Callable[[], str | None]:
    """requires(): why this torch cannot run the entry (no functional collectives, or not `names`)."""
    def why() -> str | None:
        try:
            import torch.distributed._functional_collectives as fc
        except ImportError as exc:
            return f"torch.distributed._functional_collectives does not import here ({exc})"
        absent = [n for n in names if not any(hasattr(fc, alt) for alt in n.split("|"))]
        return f"this torch's _functional_collectives lacks {', '.join(absent)}" if absent else None

    return why


# ----------------------------------------------------------------------------- drawing
def _frame(draw: Any, world_size: int, cell: Cell) -> Case:
    case = draw_group(draw, world_size, cell)
    case.params["wait"] = draw(st.sampled_from(WAITS), label="wait")
    return case


def _inputs(draw: Any, case: Case, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [draw(values(case.dtype, shape, case.op), label=f"input {i}") for i in range(case.size)]


def one_tensor(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = _frame(draw, world_size, cell)
    shape = draw(shapes(min_dims=0, max_side=5), label="shape")
    case.inputs = _inputs(draw, case, shape)
    if cell.collective == "funcol.broadcast":
        case.root = draw(st.integers(0, group_size_of(case) - 1), label="src")
    return case


def tensor_list(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = _frame(draw, world_size, cell)
    count = draw(st.integers(1, 3), label="tensors")
    tensor_shapes = [draw(shapes(min_dims=1, max_side=5), label=f"shape {k}") for k in range(count)]
    case.inputs = [[draw(values(case.dtype, s, case.op)) for s in tensor_shapes] for _ in range(case.size)]
    return case


def gather_tensor(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = _frame(draw, world_size, cell)
    shape = draw(shapes(min_dims=1, max_dims=3, max_side=4), label="shape")
    case.params["dim"] = draw(st.integers(0, len(shape) - 1), label="gather_dim")
    case.inputs = _inputs(draw, case, shape)
    return case


def _scatter_shape(draw: Any, case: Case, label: str) -> tuple[tuple[int, ...], int]:
    g = group_size_of(case)
    shape = list(draw(shapes(min_dims=1, max_dims=3, max_side=3), label=f"{label} shape"))
    dim = draw(st.integers(0, len(shape) - 1), label=f"{label} scatter_dim")
    shape[dim] *= g
    return tuple(shape), dim


def scatter_tensor(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = _frame(draw, world_size, cell)
    shape, dim = _scatter_shape(draw, case, "input")
    if group_size_of(case) > 1 and draw(st.integers(0, 4), label="uneven") == 0:
        shape = (*shape[:dim], shape[dim] + 1, *shape[dim + 1:])
    case.params["dim"] = dim
    case.params["uneven"] = shape[dim] % group_size_of(case) != 0
    case.inputs = _inputs(draw, case, shape)
    return case


def scatter_list(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = _frame(draw, world_size, cell)
    drawn = [_scatter_shape(draw, case, f"tensor {k}") for k in range(draw(st.integers(1, 3), label="tensors"))]
    case.params["dims"] = [d for _, d in drawn]
    case.inputs = [[draw(values(case.dtype, s, case.op)) for s, _ in drawn] for _ in range(case.size)]
    return case


def all_to_all(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    """m[i][j]: rows group rank i sends to group rank j (the same matrix in every mesh slice)."""
    case = _frame(draw, world_size, cell)
    g = group_size_of(case)
    tail = draw(shapes(min_dims=0, max_dims=1, max_side=3), label="trailing shape")
    even = draw(st.booleans(), label="splits None")
    if even:
        k = draw(st.integers(0, 2), label="rows per piece")
        m = [[k] * g for _ in range(g)]
    else:
        m = [[draw(st.integers(0, 3)) for _ in range(g)] for _ in range(g)]
    case.params.update(rows=m, even=even, tail=tail)
    ranks = [grp.index(r) for r, grp in zip(case.members, groups_of(case))]
    case.inputs = [draw(values(case.dtype, (sum(m[i]), *tail)), label=f"input {i}") for i in ranks]
    return case


def permute(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = _frame(draw, world_size, cell)
    g = group_size_of(case)
    case.params["src_dst"] = draw(st.permutations(range(g)), label="src_dst")
    shape = draw(shapes(min_dims=1, max_dims=2, max_side=4), label="shape")
    case.inputs = _inputs(draw, case, shape)
    return case


# ----------------------------------------------------------------------------- ranks
def settle(y: Any, mode: str) -> Any:
    """Wait for a functional collective's result as drawn; every mode must give the data."""
    import torch.distributed._functional_collectives as fc

    if mode == "wait_tensor":
        return fc.wait_tensor(y)
    if mode == "method":
        return y.wait() if isinstance(y, fc.AsyncCollectiveTensor) else y
    if mode == "view_use":
        return y.view(y.shape).clone()
    return y.clone()


def _call(case: Case, x: Any, group: Any, me: int) -> Any:
    name, op = case.collective, case.op
    if name == "funcol.all_reduce":
        return funcol("all_reduce")(x, op, group)
    if name == "funcol.all_reduce_coalesced":
        return funcol("all_reduce_coalesced")(x, op, group)
    if name == "funcol.all_gather_tensor":
        return funcol("all_gather_tensor", "all_gather_single")(x, case.params["dim"], group)
    if name == "funcol.all_gather_into_tensor_coalesced":
        return funcol("all_gather_into_tensor_coalesced", "all_gather_single_coalesced")(x, group)
    if name == "funcol.reduce_scatter_tensor":
        return funcol("reduce_scatter_tensor", "reduce_scatter_single")(x, op, case.params["dim"], group)
    if name == "funcol.reduce_scatter_tensor_coalesced":
        fn = funcol("reduce_scatter_tensor_coalesced", "reduce_scatter_single_coalesced")
        return fn(x, op, case.params["dims"], group)
    if name == "funcol.all_to_all_single":
        if case.params["even"]:
            return funcol("all_to_all_single")(x, None, None, group)
        m = case.params["rows"]
        return funcol("all_to_all_single")(x, [m[j][me] for j in range(len(m))], list(m[me]), group)
    if name == "funcol.broadcast":
        return funcol("broadcast")(x, case.root, group)
    if name == "funcol.permute_tensor":
        return funcol("permute_tensor")(x, list(case.params["src_dst"]), group)
    raise ValueError(name)


def run(ctx: Any, case: Case) -> dict | None:
    """Every rank: resolve the group, call the functional collective, wait as drawn, return the data."""
    found = resolve(ctx, case)
    if found is None:
        return None
    group, me = found
    mine = case.inputs[case.members.index(ctx.rank)]
    if isinstance(mine, list):
        x = [make(a, case.dtype, "contiguous", ctx.device) for a in mine]
        given, before = list(x), [t.clone() for t in x]
        ys = _call(case, x, group, me)
        out = [settle(y, case.params["wait"]) for y in ys]
        replaced = [k for k, (t, g) in enumerate(zip(x, given)) if t is not g]
    else:
        x = given = make(mine, case.dtype, "contiguous", ctx.device)
        before, replaced = x.clone(), []
        out = settle(_call(case, x, group, me), case.params["wait"])
    return {"out": arrays(out), "input_after": arrays(given), "input_before": arrays(before), "replaced": replaced}


# ----------------------------------------------------------------------------- oracle
def _chunk(a: np.ndarray, r: int, g: int, dim: int) -> np.ndarray:
    rows = a.shape[dim] // g
    return np.take(a, range(r * rows, (r + 1) * rows), axis=dim)


def expected(case: Case, pos: int) -> tuple[str, Any]:
    """('reduce', contributions) or ('copy', array) or lists of them: what member `pos` must hold."""
    group = groups_of(case)[pos]
    me = group.index(case.members[pos])
    ins = [case.inputs[case.members.index(r)] for r in group]
    name = case.collective
    if name == "funcol.all_reduce":
        return "reduce", ins
    if name == "funcol.all_reduce_coalesced":
        return "reduce_list", [[x[k] for x in ins] for k in range(len(ins[0]))]
    if name == "funcol.all_gather_tensor":
        return "copy", np.concatenate(ins, axis=case.params["dim"])
    if name == "funcol.all_gather_into_tensor_coalesced":
        return "copy_list", [np.concatenate([x[k] for x in ins]) for k in range(len(ins[0]))]
    if name == "funcol.reduce_scatter_tensor":
        return "reduce", [_chunk(x, me, len(group), case.params["dim"]) for x in ins]
    if name == "funcol.reduce_scatter_tensor_coalesced":
        return "reduce_list", [[_chunk(x[k], me, len(group), d) for x in ins]
                               for k, d in enumerate(case.params["dims"])]
    if name == "funcol.all_to_all_single":
        m = case.params["rows"]
        pieces = [x[sum(m[j][:me]):sum(m[j][:me + 1])] for j, x in enumerate(ins)]
        return "copy", np.concatenate(pieces) if pieces else ins[me]
    if name == "funcol.broadcast":
        return "copy", ins[case.root]
    if name == "funcol.permute_tensor":
        return "copy", ins[list(case.params["src_dst"]).index(me)]
    raise ValueError(name)


def check_rank(case: Case, pos: int, out: dict, flavor: str) -> Verdict:
    kind, want = expected(case, pos)
    got = out["out"]
    dtype = DTYPES[case.dtype]
    if not isinstance(got, list):
        got, want = [got], [want]
        kind = kind + "_list"
    if len(got) != len(want):
        return Verdict(False, f"{len(got)} results for {len(want)} tensors")
    for k, (g, w) in enumerate(zip(got, want)):
        v = (check_reduction(g, w, case.op, dtype, flavor) if kind == "reduce_list"
             else check_exact_copy(g, w, f"result {k}"))
        if not v.ok:
            return Verdict(False, f"result {k}: {v.message}")
    for k, (a, b) in enumerate(zip(_listed(out["input_after"]), _listed(out["input_before"]))):
        v = check_exact_copy(a, b, f"input {k} after the call")
        if not v.ok:
            return Verdict(False, "the input must be left unmodified: " + v.message)
    if out.get("replaced"):
        return Verdict(False, f"the caller's input list was changed: entries {out['replaced']} replaced by other "
                              "tensors (the call must leave its arguments alone)")
    return OK


def _listed(x: Any) -> list:
    return x if isinstance(x, list) else [x]


def check(case: Case, outputs: list, flavor: str) -> list[Verdict]:
    return [check_rank(case, pos, out, flavor) for pos, out in enumerate(outputs)]


# ----------------------------------------------------------------------------- expectations
BACKEND_COLLECTIVE = {
    "funcol.all_reduce": "all_reduce", "funcol.all_reduce_coalesced": "all_reduce",
    "funcol.all_gather_tensor": "all_gather_into_tensor",
    "funcol.all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "funcol.reduce_scatter_tensor": "reduce_scatter_tensor",
    "funcol.reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "funcol.all_to_all_single": "all_to_all_single", "funcol.broadcast": "broadcast",
    "funcol.permute_tensor": "all_to_all_single",
}
UNEVEN_SCATTER = Reject(("AssertionError",), r"must be a multiple of group_size",
                        "torch's functional reduce_scatter needs the scatter dim to divide by the group size")
PERMUTE_ND = Reject(("RuntimeError",), r"Split sizes doesn't match total dim 0 size",
                    "permute_tensor passes numel() as dim-0 split sizes: only tensors whose numel is dim 0 work")


def expect(profile: Any, case: Case) -> Reject | None:
    """The backend's table for the c10d call underneath, and torch's own checks in front of it."""
    rejects: list[Reject | None] = []
    if profile is not None:
        rejects.append(profile.reject(BACKEND_COLLECTIVE[case.collective], case.dtype, case.op, "contiguous",
                                      size=group_size_of(case), empty=_all_empty(case)))
    if case.params.get("uneven"):
        rejects.append(UNEVEN_SCATTER)
    if case.collective == "funcol.permute_tensor":
        shape = case.inputs[0].shape
        if int(np.prod(shape)) != shape[0]:
            rejects.append(PERMUTE_ND)
    return Reject.any_of([r for r in rejects if r is not None])


def _all_empty(case: Case) -> bool:
    flat = [a for x in case.inputs for a in _listed(x)]
    return bool(flat) and all(a.size == 0 for a in flat)


ENTRIES = (
    ("funcol.all_reduce", "reduce", one_tensor, FUNCOL_OPS, ("all_reduce",)),
    ("funcol.all_reduce_coalesced", "reduce", tensor_list, ("sum", "max"), ("all_reduce_coalesced",)),
    ("funcol.all_gather_tensor", "data", gather_tensor, None, ("all_gather_tensor|all_gather_single",)),
    ("funcol.all_gather_into_tensor_coalesced", "data", tensor_list, None,
     ("all_gather_into_tensor_coalesced|all_gather_single_coalesced",)),
    ("funcol.reduce_scatter_tensor", "reduce", scatter_tensor, ("sum", "avg", "min"),
     ("reduce_scatter_tensor|reduce_scatter_single",)),
    ("funcol.reduce_scatter_tensor_coalesced", "reduce", scatter_list, ("sum", "max"),
     ("reduce_scatter_tensor_coalesced|reduce_scatter_single_coalesced",)),
    ("funcol.all_to_all_single", "data", all_to_all, None, ("all_to_all_single",)),
    ("funcol.broadcast", "data", one_tensor, None, ("broadcast",)),
    ("funcol.permute_tensor", "data", permute, None, ("permute_tensor",)),
)

for _name, _family, _cases, _ops, _needs in ENTRIES:
    register(CollectiveSpec(
        name=_name, family=_family, cases=_cases, run=run, check=check, check_rank=check_rank, expect=expect,
        doc=__doc__, dtypes=REDUCE_DTYPES if _family == "reduce" else DATA_DTYPES,
        ops=_ops, requires=missing(*_needs)))
