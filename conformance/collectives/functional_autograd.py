"""Autograd through functional collectives: values and gradients against the NumPy oracle.

Each rank calls the collective on x (requires_grad), waits as drawn, then y.backward(G_r) with an
upstream gradient G_r drawn per rank. The gradient of a collective is its adjoint:
  all_gather_tensor_autograd(x, d)        grad x_r = (+)_j chunk_r(G_j) along d   (a reduce_scatter)
  reduce_scatter_tensor_autograd(x, sum, d) grad x_r = cat_j G_j along d          (an all_gather)
  all_to_all_single_autograd(x, out, in)  grad x_r = the pieces of every G_j that came from r (the
                                          all_to_all with the splits swapped)
torch's reduce_scatter backward supports SUM only, hence the one op.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from conformance.collectives import functional as fn
from conformance.collectives.groups import groups_of, resolve
from conformance.dtypes import DTYPES
from conformance.oracle import OK, Verdict, check_exact_copy, check_reduction
from conformance.spec import Case, Cell, CollectiveSpec, register
from conformance.strategies import values
from conformance.tensors import arrays, make

AUTOGRAD_DTYPES = ("float32", "bfloat16")


def _out_shape(case: Case, pos: int) -> tuple[int, ...]:
    """The shape of member `pos`'s result (what its upstream gradient must have)."""
    group = groups_of(case)[pos]
    shape = list(case.inputs[pos].shape)
    name = case.collective
    if name == "funcol.all_gather_tensor_autograd":
        shape[case.params["dim"]] *= len(group)
    elif name == "funcol.reduce_scatter_tensor_autograd":
        shape[case.params["dim"]] //= len(group)
    else:
        me = group.index(case.members[pos])
        shape[0] = sum(row[me] for row in case.params["rows"])
    return tuple(shape)


def cases(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    base = Cell(cell.collective.replace("_autograd", ""), cell.dtype, cell.op)
    drawer = {"funcol.all_gather_tensor": fn.gather_tensor, "funcol.reduce_scatter_tensor": _even_scatter,
              "funcol.all_to_all_single": fn.all_to_all}[base.collective]
    case = drawer(draw, world_size, base, profile)
    case.collective = cell.collective
    case.params["grads"] = [draw(values(case.dtype, _out_shape(case, pos)), label=f"grad {pos}")
                            for pos in range(case.size)]
    return case


def _even_scatter(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = fn._frame(draw, world_size, cell)
    shape, dim = fn._scatter_shape(draw, case, "input")
    case.params["dim"] = dim
    case.inputs = fn._inputs(draw, case, shape)
    return case


def run(ctx: Any, case: Case) -> dict | None:
    """Every rank: y = collective(x), y.backward(G_r); returns y and x.grad."""
    found = resolve(ctx, case)
    if found is None:
        return None
    group, me = found
    pos = case.members.index(ctx.rank)
    x = make(case.inputs[pos], case.dtype, "contiguous", ctx.device).requires_grad_()
    name = case.collective
    if name == "funcol.all_gather_tensor_autograd":
        y = fn.funcol("all_gather_tensor_autograd", "all_gather_single_autograd")(x, case.params["dim"], group)
    elif name == "funcol.reduce_scatter_tensor_autograd":
        call = fn.funcol("reduce_scatter_tensor_autograd", "reduce_scatter_single_autograd")
        y = call(x, case.op, case.params["dim"], group)
    else:
        m = case.params["rows"]
        out_splits, in_splits = [m[j][me] for j in range(len(m))], list(m[me])
        if case.params["even"]:
            out_splits = in_splits = None
        y = fn.funcol("all_to_all_single_autograd")(x, out_splits, in_splits, group)
    y = fn.settle(y, case.params["wait"])
    y.backward(make(case.params["grads"][pos], case.dtype, "contiguous", ctx.device))
    return {"out": arrays(y), "grad": None if x.grad is None else arrays(x.grad)}


def check_rank(case: Case, pos: int, out: dict, flavor: str) -> Verdict:
    group = groups_of(case)[pos]
    me = group.index(case.members[pos])
    grads = [case.params["grads"][case.members.index(r)] for r in group]
    value = _value_verdict(case, pos, out["out"], flavor)
    if not value.ok:
        return Verdict(False, f"value: {value.message}")
    if out["grad"] is None:
        return Verdict(False, "x.grad is None after backward")
    name, dtype = case.collective, DTYPES[case.dtype]
    if name == "funcol.all_gather_tensor_autograd":
        verdict = check_reduction(out["grad"], [fn._chunk(g, me, len(group), case.params["dim"]) for g in grads],
                                  "sum", dtype, flavor)
    elif name == "funcol.reduce_scatter_tensor_autograd":
        verdict = check_exact_copy(out["grad"], np.concatenate(grads, axis=case.params["dim"]))
    else:
        m = case.params["rows"]
        pieces = [g[sum(m[i][j] for i in range(me)):][:m[me][j]] for j, g in enumerate(grads)]
        verdict = check_exact_copy(out["grad"], np.concatenate(pieces))
    return verdict if verdict.ok else Verdict(False, f"gradient: {verdict.message}")


def _value_verdict(case: Case, pos: int, got: np.ndarray, flavor: str) -> Verdict:
    """The forward value, as the non-autograd entry's oracle has it."""
    base = Case(**{**case.__dict__, "collective": case.collective.replace("_autograd", "")})
    kind, want = fn.expected(base, pos)
    if kind == "reduce":
        return check_reduction(got, want, case.op, DTYPES[case.dtype], flavor)
    return check_exact_copy(got, want)


def check(case: Case, outputs: list, flavor: str) -> list[Verdict]:
    return [check_rank(case, pos, out, flavor) for pos, out in enumerate(outputs)]


def expect(profile: Any, case: Case) -> Any:
    base = case.collective.replace("_autograd", "")
    return profile.reject(fn.BACKEND_COLLECTIVE[base], case.dtype, case.op, "contiguous",
                          size=len(groups_of(case)[0])) if profile is not None else None


NEEDS = {"funcol.all_gather_tensor_autograd": "all_gather_tensor_autograd|all_gather_single_autograd",
         "funcol.reduce_scatter_tensor_autograd": "reduce_scatter_tensor_autograd|reduce_scatter_single_autograd",
         "funcol.all_to_all_single_autograd": "all_to_all_single_autograd"}

for _name, _family, _ops in (("funcol.all_gather_tensor_autograd", "data", None),
                             ("funcol.reduce_scatter_tensor_autograd", "reduce", ("sum",)),
                             ("funcol.all_to_all_single_autograd", "data", None)):
    register(CollectiveSpec(
        name=_name, family=_family, cases=cases, run=run, check=check, check_rank=check_rank, expect=expect,
        doc=__doc__, dtypes=AUTOGRAD_DTYPES, ops=_ops, requires=fn.missing(NEEDS[_name])))
