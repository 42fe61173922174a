"""The three ways the modern APIs name a group, drawn and resolved: a ProcessGroup, a list of global
ranks, a DeviceMesh dimension (docs/modern-collectives.md).

A mesh case runs on every rank at once, one collective per slice of the mesh along the drawn
dimension: `groups_of(case)` says, for every participant, which global ranks its collective spans,
in group-rank order, so that the oracle can check each slice on its own.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from conformance.spec import Case, Cell
from conformance.strategies import subgroups

GROUP_KINDS = ("pg", "ranks", "mesh")


def mesh_shapes(world_size: int) -> list[tuple[int, ...]]:
    """1-D (n,) and every 2-D factorisation (a, b) of n, (1, n) and (n, 1) included."""
    return [(world_size,)] + [(a, world_size // a) for a in range(1, world_size + 1) if world_size % a == 0]


def draw_group(draw: Any, world_size: int, cell: Cell, kinds: tuple[str, ...] = GROUP_KINDS) -> Case:
    """A Case whose group is a ProcessGroup (subgroup or world), a rank list, or a mesh dimension."""
    kind = draw(st.sampled_from(kinds), label="group kind")
    case = Case(cell.collective, world_size, cell.dtype, cell.op)
    case.params["group_kind"] = kind
    if kind == "mesh":
        shape = draw(st.sampled_from(mesh_shapes(world_size)), label="mesh shape")
        case.params["mesh"] = shape
        case.params["mesh_dim"] = draw(st.integers(0, len(shape) - 1), label="mesh dim")
    else:
        case.group = draw(subgroups(world_size), label="group")
    return case


def groups_of(case: Case) -> list[tuple[int, ...]]:
    """For each member (in case.members order), the global ranks of its collective's group."""
    if case.params.get("group_kind") != "mesh":
        return [case.members] * case.size
    shape, dim = case.params["mesh"], case.params["mesh_dim"]
    grid = np.arange(case.world_size).reshape(shape)
    found = []
    for rank in case.members:
        coords = list(np.argwhere(grid == rank)[0])
        coords[dim] = slice(None)
        found.append(tuple(int(r) for r in grid[tuple(coords)]))
    return found


def group_size_of(case: Case) -> int:
    """The size of every collective group of the case (mesh slices along one dim are all equal)."""
    return len(groups_of(case)[0])


def mesh(ctx: Any, shape: tuple[int, ...], names: tuple[str, ...] | None = None) -> Any:
    """This rank's DeviceMesh of `shape` over all ranks (built once per pool, collectively)."""
    from torch.distributed.device_mesh import init_device_mesh

    cache = ctx.__dict__.setdefault("_meshes", {})
    key = (tuple(shape), names)
    if key not in cache:
        cache[key] = init_device_mesh(_mesh_device(ctx), tuple(shape), mesh_dim_names=names)
    return cache[key]


def _mesh_device(ctx: Any) -> str:
    device = str(ctx.device)
    return "cuda" if device.startswith("cuda") else "cpu"


def resolve(ctx: Any, case: Case) -> tuple[Any, int] | None:
    """Rank side: (the group argument for the call, this rank's rank in it); None for non-members.

    Every rank takes part in creating the case's subgroup (new_group is collective) first.
    """
    import torch.distributed as dist

    kind = case.params["group_kind"]
    if kind == "mesh":
        m = mesh(ctx, case.params["mesh"])
        dim = case.params["mesh_dim"]
        return (m, dim), groups_of(case)[case.members.index(ctx.rank)].index(ctx.rank)
    pg = ctx.group(case.group)
    if ctx.rank not in case.members:
        return None
    me = case.members.index(ctx.rank)
    if kind == "ranks":
        return list(case.members), me
    return (pg if pg is not None else dist.group.WORLD), me
