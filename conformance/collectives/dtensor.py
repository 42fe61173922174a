"""DTensor placements over the backend: redistribution and an op whose output is Partial.

dtensor.redistribute: a 1-D or 2-D DeviceMesh over every rank, a global array, source and target
placements per mesh dim. Sources: Shard(d) over any tensor dim (uneven shards included), Replicate,
Partial(op); targets: Shard(d) or Replicate (torch 2.13 refuses a Partial target: "for internal use
only"). The DTensor is built with distribute_tensor(global) or, per rank, DTensor.from_local(local shard,
shape=, stride=) (uneven shards, and the only way to a Partial source: rank c holds contribution c of
the Partial mesh dims). Oracle: Shard(d) on mesh dim i gives coordinate c its torch.chunk piece
(ceil(L/k) rows, the last ones short or empty), applied mesh dim by mesh dim; Partial(op) reduces the
contributions with op. Checked: the source's local shard, the target's local shard on every rank, the
target's full_tensor() and its global shape. AVG is drawn on one Partial mesh dim at most (an average of
averages rounds, and truncates integers, twice).
dtensor.matmul: A (m, k) Shard(1) @ B (k, p) Shard(0) on a 1-D mesh: C must be Partial(sum) (where k is at
least the mesh size: a shorter dim counts as unshardable and another strategy may win), each rank's
local C the product of its own pieces, C.full_tensor() = A @ B (small integers: exact in float32).
This tests torch's DTensor over each backend as much as the backend: a disagreement between backends is a
finding.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import strategies as st

from conformance.collectives import groups
from conformance.dtypes import DTYPES
from conformance.oracle import OK, Verdict, check_exact_copy, check_reduction
from conformance.spec import Case, Cell, CollectiveSpec, Reject, register
from conformance.strategies import shapes, values

Placement = tuple  # ("S", dim) | ("R",) | ("P", op)


def api() -> Any:
    """The DTensor module of this torch: torch.distributed.tensor (2.5+) or torch.distributed._tensor."""
    import importlib

    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "distribute_tensor") and hasattr(module, "DTensor"):
            return module
    raise ImportError("no DTensor API in this torch")


def partial_class(module: Any) -> Any:
    for holder in (module, getattr(module, "placement_types", None)):
        for name in ("Partial", "_Partial"):
            if holder is not None and hasattr(holder, name):
                return getattr(holder, name)
    raise ImportError("no Partial placement in this torch")


def requires() -> str | None:
    try:
        partial_class(api())
        from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
    except ImportError as exc:
        return f"DTensor unavailable: {exc}"
    import inspect

    if "shape" not in inspect.signature(api().DTensor.from_local).parameters:
        return "DTensor.from_local has no shape= (uneven shards cannot be built)"
    return None


# ----------------------------------------------------------------------------- the oracle's placements
def chunk(a: np.ndarray, index: int, parts: int, dim: int) -> np.ndarray:
    """torch.chunk's piece `index` of `parts` along dim (empty where torch.chunk has fewer pieces)."""
    size = -(-a.shape[dim] // parts) if a.shape[dim] else 0
    start, stop = min(index * size, a.shape[dim]), min((index + 1) * size, a.shape[dim])
    return np.take(a, range(start, stop), axis=dim)


def piece(a: np.ndarray, placements: list, coords: tuple[int, ...], mesh: tuple[int, ...]) -> np.ndarray:
    for i, p in enumerate(placements):
        if p[0] == "S":
            a = chunk(a, coords[i], mesh[i], p[1])
    return a


def coords_of(rank: int, mesh: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(c) for c in np.unravel_index(rank, mesh))


def partial_key(placements: list, coords: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(c for p, c in zip(placements, coords) if p[0] == "P")


def contributions(case: Case) -> list[np.ndarray]:
    return [case.params["contrib"][k] for k in sorted(case.params["contrib"])]


# ----------------------------------------------------------------------------- drawing
def _placements(draw: Any, ndim: int, mesh: tuple[int, ...], op: str | None, source: bool) -> list:
    options = [("R",)] + [("S", d) for d in range(ndim)]
    chosen = []
    for i in range(len(mesh)):
        partial_ok = source and op is not None and not (op == "avg" and any(p[0] == "P" for p in chosen))
        chosen.append(draw(st.sampled_from(options + ([("P", op)] * 2 if partial_ok else [])),
                           label=f"{'source' if source else 'target'} placement {i}"))
    return chosen


def redistribute_cases(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = Case(cell.collective, world_size, cell.dtype, cell.op)
    mesh = draw(st.sampled_from(groups.mesh_shapes(world_size)), label="mesh shape")
    shape = draw(shapes(min_dims=1, max_dims=2, max_side=6), label="global shape")
    src = _placements(draw, len(shape), mesh, cell.op, source=True)
    tgt = _placements(draw, len(shape), mesh, cell.op, source=False)
    partial_dims = [i for i, p in enumerate(src) if p[0] == "P"]
    keys = list(itertools.product(*[range(mesh[i]) for i in partial_dims]))
    contrib = {k: draw(values(case.dtype, shape, cell.op), label=f"contribution {k}") for k in keys}
    construct = "from_local" if partial_dims else draw(st.sampled_from(["distribute", "from_local"]), label="build")
    case.params.update(mesh=mesh, shape=shape, src=src, tgt=tgt, contrib=contrib, construct=construct)
    case.inputs = [piece(contrib[partial_key(src, coords_of(r, mesh))], src, coords_of(r, mesh), mesh)
                   for r in range(world_size)]
    return case


def _place(module: Any, p: Placement) -> Any:
    if p[0] == "S":
        return module.Shard(p[1])
    if p[0] == "R":
        return module.Replicate()
    return partial_class(module)(p[1])


def run_redistribute(ctx: Any, case: Case) -> dict:
    from conformance.tensors import arrays, make

    dt = api()
    mesh = groups.mesh(ctx, case.params["mesh"])
    src = [_place(dt, p) for p in case.params["src"]]
    tgt = [_place(dt, p) for p in case.params["tgt"]]
    shape = case.params["shape"]
    if case.params["construct"] == "distribute":
        whole = make(case.params["contrib"][()], case.dtype, "contiguous", ctx.device)
        d = dt.distribute_tensor(whole, mesh, src)
    else:
        local = make(case.inputs[ctx.rank], case.dtype, "contiguous", ctx.device)
        stride = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
        d = dt.DTensor.from_local(local, mesh, src, run_check=False, shape=tuple(shape), stride=stride)
    e = d.redistribute(mesh, tgt)
    return {"src_local": arrays(d.to_local()), "local": arrays(e.to_local()), "full": arrays(e.full_tensor()),
            "shape": tuple(e.shape)}


def _reduced(case: Case, actual: np.ndarray, pieces: list[np.ndarray], flavor: str, what: str) -> Verdict:
    if len(pieces) == 1 and not any(p[0] == "P" for p in case.params["src"]):
        verdict = check_exact_copy(actual, pieces[0])
    else:
        verdict = check_reduction(actual, pieces, case.op, DTYPES[case.dtype], flavor)
    return verdict if verdict.ok else Verdict(False, f"{what}: {verdict.message}")


def check_redistribute(case: Case, rank: int, out: dict, flavor: str) -> Verdict:
    mesh, tgt = case.params["mesh"], case.params["tgt"]
    coords = coords_of(rank, mesh)
    if tuple(out["shape"]) != tuple(case.params["shape"]):
        return Verdict(False, f"DTensor shape {out['shape']}, expected {case.params['shape']}")
    source = check_exact_copy(out["src_local"], case.inputs[rank], "source local shard")
    if not source.ok:
        return source
    local = _reduced(case, out["local"], [piece(c, tgt, coords, mesh) for c in contributions(case)], flavor,
                     f"target local shard at mesh coordinate {coords}")
    return local if not local.ok else _reduced(case, out["full"], contributions(case), flavor, "full_tensor()")


def expect_redistribute(profile: Any, case: Case) -> Reject | None:
    """The backend's table for the reductions a Partial source needs (all_reduce or reduce_scatter)."""
    mesh = case.params["mesh"]
    if profile is None or not any(p[0] == "P" and mesh[i] > 1 for i, p in enumerate(case.params["src"])):
        return None  # nothing to reduce across ranks: DTensor runs no reduction
    return Reject.any_of([r for r in (profile.reject(c, case.dtype, case.op, "contiguous")
                                      for c in ("all_reduce", "reduce_scatter_tensor")) if r is not None])


# ----------------------------------------------------------------------------- matmul
def matmul_cases(draw: Any, world_size: int, cell: Cell, profile: Any) -> Case:
    case = Case(cell.collective, world_size, cell.dtype, None)
    m, k, p = (draw(st.integers(1, 5), label=x) for x in ("m", "k", "p"))  # empty: another strategy may win
    small = st.integers(-8, 8).map(float)
    case.params["a"] = np.array(draw(st.lists(small, min_size=m * k, max_size=m * k)), np.float32).reshape(m, k)
    case.params["b"] = np.array(draw(st.lists(small, min_size=k * p, max_size=k * p)), np.float32).reshape(k, p)
    return case


def run_matmul(ctx: Any, case: Case) -> dict:
    from conformance.tensors import arrays, make

    dt = api()
    mesh = groups.mesh(ctx, (case.world_size,))
    a = dt.distribute_tensor(make(case.params["a"], case.dtype, "contiguous", ctx.device), mesh, [dt.Shard(1)])
    b = dt.distribute_tensor(make(case.params["b"], case.dtype, "contiguous", ctx.device), mesh, [dt.Shard(0)])
    c = a @ b
    return {"placements": [type(p).__name__ + ":" + str(getattr(p, "reduce_op", "")) for p in c.placements],
            "local": arrays(c.to_local()), "full": arrays(c.full_tensor())}


def check_matmul(case: Case, rank: int, out: dict, flavor: str) -> Verdict:
    a, b, n = case.params["a"], case.params["b"], case.world_size
    # DTensor's sharding propagation takes a dim shorter than the mesh as unshardable (is_tensor_shardable):
    # then it may pick another strategy; with k >= n the Partial one costs nothing and must win
    if n > 1 and out["placements"] != ["Partial:sum"] and a.shape[1] >= n:
        return Verdict(False, f"placements {out['placements']}, expected [Partial(sum)]")
    if out["placements"] == ["Partial:sum"]:
        verdict = _same(out["local"], chunk(a, rank, n, 1) @ chunk(b, rank, n, 0), "local partial product")
        if not verdict.ok:
            return verdict
    return _same(out["full"], a @ b, "full_tensor()")


def _same(got: np.ndarray, want: np.ndarray, what: str) -> Verdict:
    """Small integers: every sum is exact, whatever the order (a zero's sign may differ)."""
    if got.shape == want.shape and np.array_equal(got, want.astype(np.float32)):
        return OK
    return Verdict(False, f"{what}: got {got.tolist()}, expected {want.tolist()}")


def _all(check_one: Any) -> Any:
    def check(case: Case, outputs: list, flavor: str) -> list[Verdict]:
        return [check_one(case, r, out, flavor) for r, out in enumerate(outputs)]

    return check


register(CollectiveSpec(
    name="dtensor.redistribute", family="reduce", cases=redistribute_cases, run=run_redistribute,
    check=_all(check_redistribute), check_rank=check_redistribute, expect=expect_redistribute,
    doc=__doc__, dtypes=("float32", "int32"), ops=("sum", "avg", "max", "min"),
    requires=requires))
register(CollectiveSpec(
    name="dtensor.matmul", family="data", cases=matmul_cases, run=run_matmul, check=_all(check_matmul),
    check_rank=check_matmul, expect=lambda profile, case: None, doc=__doc__,
    dtypes=("float32",), requires=requires))
