"""all_to_all family: member r sends its j-th piece to member j.

all_to_all(out_list, in_list): out_list[j] <- in_list_j[r] (pieces may differ in size).
all_to_all_single(out, in, output_split_sizes, input_split_sizes): rows of `in` go out in pieces;
splits default to n equal pieces.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from conformance.collectives.common import (async_verdict, draw_frame, draw_layout, expect, large, large_inputs,
                                            members_only, output, per_rank, tensor)
from conformance.oracle import OK, Verdict, check_exact_copy
from conformance.dtypes import DTYPES
from conformance.spec import Case, CollectiveSpec, register
from conformance.strategies import large_numel, shapes, values
from conformance.tensors import arrays


def _draw_matrix(draw: Any, n: int, collective: str, profile: Any) -> list[list[int]]:
    """m[i][j]: rows member i sends to member j: equal; uneven in every row and column (a backend that
    rejects uneven pieces then rejects on every rank); or, where the table allows uneven pieces, random."""
    k = draw(st.integers(0, 3), label="rows per piece")
    kinds = ["equal", "diagonal"]
    if profile is None or profile.reject(collective, None, None, "contiguous", frozenset({"uneven"})) is None:
        kinds.append("random")
    kind = draw(st.sampled_from(kinds), label="splits")
    if kind == "equal" or n == 1:
        return [[k] * n for _ in range(n)]
    if kind == "diagonal":
        return [[k + (1 if (i + j) % n == 0 else 0) for j in range(n)] for i in range(n)]
    return [[draw(st.integers(0, 3)) for _ in range(n)] for _ in range(n)]


def _uneven(m: list[list[int]]) -> bool:
    return len({x for row in m for x in row}) > 1


def _draw_rows(draw: Any, case: Case, cell: Any, profile: Any) -> tuple[tuple[int, ...], list[list[int]]]:
    """(trailing shape, rows matrix); large: 1-D pieces of an odd share of a size past 1 MiB per member,
    plus the drawn matrix (so equal, diagonal and random splits keep their shape)."""
    if not large(cell):
        return draw(shapes(min_dims=0, max_dims=1), label="trailing shape"), _draw_matrix(
            draw, case.size, cell.collective, profile)
    share = -(-draw(large_numel(case.dtype), label="large numel") // case.size) | 1
    matrix = _draw_matrix(draw, case.size, cell.collective, profile)
    itemsize = max(1, DTYPES[case.dtype].bits // 8)
    while all(sum(share + k for k in row) * itemsize % 4096 == 0 for row in matrix):
        share += 2  # the pieces of an even world can add up to whole chunks: keep a partial last one
    return (), [[share + k for k in row] for row in matrix]


def list_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    tail, m = _draw_rows(draw, case, cell, profile)
    case.params["rows"] = m
    case.params["uneven"] = _uneven(m)
    all_shapes = [(m[i][j], *tail) for i in range(case.size) for j in range(case.size)]
    if large(cell):
        flat = large_inputs(draw, case, all_shapes, min(sum(row) for row in m))
        case.inputs = [flat[i * case.size:(i + 1) * case.size] for i in range(case.size)]
        return case
    draw_layout(draw, case, *all_shapes)
    case.inputs = [[draw(values(case.dtype, (m[i][j], *tail))) for j in range(case.size)] for i in range(case.size)]
    return case


@members_only
def run_list(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    ins = [tensor(ctx, case, x) for x in case.inputs[me]]
    outs = [output(ctx, case, case.inputs[j][me].shape) for j in range(case.size)]
    work = dist.all_to_all(outs, ins, group=group, async_op=case.async_op)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(outs), "waited": waited}


def check_list(case: Case, outputs: list[dict], flavor: str) -> list[Verdict]:
    verdicts = []
    for me, out in enumerate(outputs):
        bad = async_verdict(case, out)
        for j in range(case.size):
            if bad is None:
                v = check_exact_copy(out["out"][j], case.inputs[j][me], f"output_tensor_list[{j}]")
                bad = None if v.ok else v
        verdicts.append(bad or OK)
    return verdicts


def single_cases(draw: Any, world_size: int, cell: Any, profile: Any) -> Case:
    case = draw_frame(draw, world_size, cell)
    tail, m = _draw_rows(draw, case, cell, profile)
    case.params["default_splits"] = not _uneven(m) and draw(st.booleans(), label="splits=None")
    case.params["rows"] = m
    in_shapes = [(sum(m[i]), *tail) for i in range(case.size)]
    out_shapes = [(sum(m[i][j] for i in range(case.size)), *tail) for j in range(case.size)]
    case.params["out_shapes"] = out_shapes
    if large(cell):
        case.inputs = large_inputs(draw, case, in_shapes, min(s[0] for s in in_shapes))
        return case
    draw_layout(draw, case, *in_shapes, *out_shapes)
    case.inputs = [draw(values(case.dtype, s)) for s in in_shapes]
    return case


@members_only
def run_single(ctx: Any, case: Case, group: Any, me: int) -> dict:
    import torch.distributed as dist

    m = case.params["rows"]
    t = tensor(ctx, case, case.inputs[me])
    out = output(ctx, case, case.params["out_shapes"][me])
    splits: dict[str, Any] = {}
    if not case.params["default_splits"]:
        splits = {"input_split_sizes": list(m[me]), "output_split_sizes": [m[i][me] for i in range(case.size)]}
    work = dist.all_to_all_single(out, t, group=group, async_op=case.async_op, **splits)
    waited = work.wait() if case.async_op else None
    return {"out": arrays(out), "waited": waited}


def check_single(case: Case, me: int, out: dict, flavor: str) -> Verdict:
    m = case.params["rows"]
    pieces = []
    for i in range(case.size):
        start = sum(m[i][:me])
        pieces.append(case.inputs[i][start:start + m[i][me]])
    return async_verdict(case, out) or check_exact_copy(out["out"], np.concatenate(pieces))


register(CollectiveSpec(
    name="all_to_all", family="data", cases=list_cases, run=run_list, check=check_list,
    expect=lambda profile, case: expect(profile, case, "uneven" if case.params["uneven"] else ""), doc=__doc__,
    conditions=("large",)))
register(CollectiveSpec(
    name="all_to_all_single", family="data", cases=single_cases, run=run_single, check=per_rank(check_single), check_rank=check_single,
    expect=lambda profile, case: expect(profile, case), doc=__doc__, conditions=("large",)))
