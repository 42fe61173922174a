"""Coalesced c10d calls: several tensors in one call, every tensor of the block checked.

  coalesced.all_reduce      a `_coalescing_manager` block of dist.all_reduce, or dist.all_reduce_coalesced:
                            every tensor reduced with the block's op. NCCL needs one dtype for the whole
                            block (TypeError "Tensors must have identical type"); all_reduce_coalesced
                            checks that itself (ValueError "Invalid usage of tensors with different dtypes").
  coalesced.all_gather      a block of dist.all_gather_into_tensor (each output = cat_j x_j along dim 0), or
                            dist.all_gather_coalesced (output lists), which NCCL does not implement
                            (NotImplementedError).
  coalesced.reduce_scatter  a block of dist.reduce_scatter_tensor (each output = chunk_r of the reduction).
A block that mixes collective types must raise torch's RuntimeError "Coalescing manager requires all
collectives to be the same type" where this torch has that check (2.13 has it; without it the block is
undefined and is not drawn).
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
from hypothesis import strategies as st

from conformance.collectives.common import draw_frame, reduce_op
from conformance.dtypes import DTYPES
from conformance.oracle import OK, Verdict, check_exact_copy, check_reduction
from conformance.spec import Case, Cell, CollectiveSpec, Reject, register
from conformance.strategies import shapes, values
from conformance.tensors import arrays, empty, make

MIXED_TYPES = Reject(("RuntimeError",), r"requires all collectives to be the same type",
                     "torch's _coalescing_manager refuses a block of mixed collective types")
# What each backend raises for an all_reduce block of several dtypes (ProcessGroupNCCL::allreduce_coalesced
# checks the tensors with check_gpu_tensors_same_device).
MIXED_DTYPES = {"nccl": Reject(("TypeError",), r"Tensors must have identical type",
                               "NCCL's allreduce_coalesced needs one dtype"),
                "gloo": Reject(("RuntimeError", "TypeError", "ValueError"), r"same type|identical type|type",
                               "gloo's allreduce_coalesced needs one dtype")}
TORCH_SAME_DTYPE = Reject(("ValueError",), r"Invalid usage of tensors with different dtypes",
                          "torch's all_reduce_coalesced checks the dtypes itself")
NO_GATHER_COALESCED = {"nccl": Reject(("NotImplementedError", "RuntimeError"), r"does not support allgather_coalesced",
                                      "ProcessGroupNCCL has no allgather_coalesced")}
BASE = {"coalesced.all_reduce": "all_reduce", "coalesced.all_gather": "all_gather_into_tensor",
        "coalesced.reduce_scatter": "reduce_scatter_tensor"}


@functools.lru_cache(maxsize=None)
def refuses_mixed_types() -> bool:
    """Whether this torch's _coalescing_manager checks that a block holds one collective type."""
    import inspect

    from torch.distributed import distributed_c10d

    return "same type" in inspect.getsource(distributed_c10d._coalescing_manager)


def has_manager() -> str | None:
    from torch.distributed import distributed_c10d

    return None if hasattr(distributed_c10d, "_coalescing_manager") else "no _coalescing_manager in this torch"


def cases(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    name = cell.collective
    vias = ["manager", "function"] if name != "coalesced.reduce_scatter" else ["manager"]
    case.params["via"] = draw(st.sampled_from(vias), label="via")
    count = draw(st.integers(1, 4), label="tensors")
    tensor_shapes = [draw(shapes(min_dims=1, max_side=4), label=f"shape {k}") for k in range(count)]
    if name == "coalesced.reduce_scatter":
        tensor_shapes = [(s[0] * case.size, *s[1:]) for s in tensor_shapes]
    mixes = ["none", "none"]
    if case.params["via"] == "manager" and refuses_mixed_types():
        mixes.append("types")
    if name == "coalesced.all_reduce" and count > 1:
        mixes.append("dtypes")
    case.params["mix"] = draw(st.sampled_from(mixes), label="mix")
    dtypes = [case.dtype] * count
    if case.params["mix"] == "dtypes":
        dtypes[-1] = "float32" if case.dtype != "float32" else "int32"
    case.params["dtypes"] = dtypes
    case.inputs = [[draw(values(d, s, case.op)) for d, s in zip(dtypes, tensor_shapes)] for _ in range(case.size)]
    return case


def run(ctx: Any, case: Case) -> dict | None:
    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _coalescing_manager

    group = ctx.group(case.group)
    if ctx.rank not in case.members:
        return None
    me, n = case.members.index(ctx.rank), case.size
    dtypes, name, async_op = case.params["dtypes"], case.collective, case.async_op
    xs = [make(a, d, "contiguous", ctx.device) for a, d in zip(case.inputs[me], dtypes)]
    op = reduce_op(case.op) if case.op else None
    waited = None
    if name == "coalesced.all_reduce":
        outs = xs
    elif name == "coalesced.all_gather" and case.params["via"] == "function":
        # output_tensor_lists[j][k]: member j's tensor k
        outs = [[empty(x.shape, d, "contiguous", ctx.device) for x, d in zip(xs, dtypes)] for _ in range(n)]
    elif name == "coalesced.all_gather":
        outs = [empty((n * x.shape[0], *x.shape[1:]), d, "contiguous", ctx.device) for x, d in zip(xs, dtypes)]
    else:
        outs = [empty((x.shape[0] // n, *x.shape[1:]), d, "contiguous", ctx.device) for x, d in zip(xs, dtypes)]
    if case.params["via"] == "function":
        if name == "coalesced.all_reduce":
            work = dist.all_reduce_coalesced(xs, op=op, group=group, async_op=async_op)
        else:
            work = dist.all_gather_coalesced(outs, xs, group=group, async_op=async_op)
        if async_op:  # the *_coalesced functions hand back work.get_future(): its wait() gives the tensors
            waited = work.wait()
            waited = True if isinstance(work, torch._C.Future) and isinstance(waited, list) else waited
    else:
        with _coalescing_manager(group, async_ops=async_op) as cm:
            for x, out in zip(xs, outs):
                if name == "coalesced.all_reduce":
                    dist.all_reduce(x, op=op, group=group)
                elif name == "coalesced.all_gather":
                    dist.all_gather_into_tensor(out, x, group=group)
                else:
                    dist.reduce_scatter_tensor(out, x, op=op, group=group)
            if case.params["mix"] == "types":  # one collective of another type closes the block
                spare = xs[0].reshape(-1)[:0]
                if name == "coalesced.all_gather":
                    dist.all_reduce(spare, group=group)
                else:
                    dist.all_gather_into_tensor(spare.new_empty(0), spare, group=group)
        if async_op:
            cm.wait()
            waited = True
    return {"out": arrays(outs), "waited": waited}


def check_rank(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    if case.async_op and case.params["via"] == "function" and out.get("waited") is not True:
        return Verdict(False, f"Work.wait() returned {out.get('waited')!r}, expected True")
    got, name = out["out"], case.collective
    if name == "coalesced.all_gather" and case.params["via"] == "function":
        got = [[member[k] for member in got] for k in range(len(case.inputs[me]))]  # by tensor, then member
    if len(got) != len(case.inputs[me]):
        return Verdict(False, f"{len(got)} outputs for a block of {len(case.inputs[me])}")
    for k, dtype in enumerate(case.params["dtypes"]):
        mine = [x[k] for x in case.inputs]
        if name == "coalesced.all_reduce":
            verdict = check_reduction(got[k], mine, case.op, DTYPES[dtype], flavor)
        elif name == "coalesced.all_gather" and case.params["via"] == "function":
            verdict = next((v for v in (check_exact_copy(g, w, f"from member {j}")
                                        for j, (g, w) in enumerate(zip(got[k], mine))) if not v.ok), OK)
        elif name == "coalesced.all_gather":
            verdict = check_exact_copy(got[k], np.concatenate(mine))
        else:
            rows = mine[0].shape[0] // case.size
            verdict = check_reduction(got[k], [x[me * rows:(me + 1) * rows] for x in mine], case.op, DTYPES[dtype],
                                      flavor)
        if not verdict.ok:
            return Verdict(False, f"tensor {k} of the block: {verdict.message}")
    return OK


def check(case: Case, outputs: list, flavor: str) -> list[Verdict]:
    return [check_rank(case, me, out, flavor) for me, out in enumerate(outputs)]


def expect(profile: Any, case: Case) -> Reject | None:
    found: list[Reject | None] = []
    if case.params["mix"] == "types":
        found.append(MIXED_TYPES)
    flavor = profile.name if profile is not None else None
    if case.params["mix"] == "dtypes":
        found.append(MIXED_DTYPES.get(flavor) if case.params["via"] == "manager" else TORCH_SAME_DTYPE)
    if case.collective == "coalesced.all_gather" and case.params["via"] == "function":
        found.append(NO_GATHER_COALESCED.get(flavor))
    if profile is not None:
        empty = all(x.size == 0 for xs in case.inputs for x in xs)
        found.extend(profile.reject(BASE[case.collective], d, case.op, "contiguous", size=case.size, empty=empty)
                     for d in sorted(set(case.params["dtypes"])))
    return Reject.any_of([r for r in found if r is not None])


for _name, _family, _dtypes, _ops in (
        ("coalesced.all_reduce", "reduce", ("float32", "int32", "int16"), ("sum", "avg", "max")),
        ("coalesced.all_gather", "data", ("float32", "int64", "int16"), None),
        ("coalesced.reduce_scatter", "reduce", ("float32", "int32", "int16"), ("sum", "max"))):
    register(CollectiveSpec(
        name=_name, family=_family, cases=cases, run=run, check=check, check_rank=check_rank, expect=expect,
        doc=__doc__, dtypes=_dtypes, ops=_ops, requires=has_manager))
