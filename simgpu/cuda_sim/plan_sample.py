"""`--ranks auto`: the plan chooses its sample of ranks itself (one or two processes per role, whole
pipelines) from the layout the program creates, then runs the sample as `--ranks SPEC` would.

How: a first, short run of rank 0 alone (the others exit as they start, as under `--ranks 0`) stops
at the program's first root DeviceMesh (`init_device_mesh`, `DeviceMesh(...)`, fully_shard's default
mesh) and writes its shape, dimension names and ranks to a file; or, if none is made by rank 0's first
optimizer step, that it found none. From that (`choose`):

- dimensions named as a pipeline (`PIPELINE_DIMS`: pp, pipeline, pipe) are taken whole: a stage's
  messages go to its neighbours, so every stage of a sampled pipeline runs;
- every other dimension (dp, dp_shard, dp_replicate, cp, tp, ep, an unnamed one) is taken as symmetric:
  its members run the same program path on shards of equal shape. The sample holds the pipeline at
  coordinate 0 of all of them and, for each such dimension of size > 1, the pipeline at its last
  coordinate (0 elsewhere): each of these dimensions' groups at coordinate 0 of the others then has two
  sampled members, the first and the last, whose collective sequences plan_roles.check compares. Rank 0
  (work only rank 0 does: saving, logging) is always in the sample.
- no DeviceMesh: the world is one data-parallel dimension: ranks 0 and world-1.

What it cannot see (docs/plan-mode.md): a layout the program lays out in its own process groups
(`new_group`) rather than a DeviceMesh, a pipeline dimension under another name (its messages to a rank
outside the sample are refused naming both: give --ranks), several meshes of different shapes (the
first decides).
"""
from __future__ import annotations

import itertools
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PIPELINE_DIMS = ("pp", "pipeline", "pipe")
AUTO = "auto"


@dataclass(frozen=True)
class Mesh:
    """A DeviceMesh as the discovery run saw it: its shape, dimension names and global ranks (row-major)."""
    shape: tuple[int, ...]
    names: tuple[str, ...]
    ranks: tuple[int, ...]

    def describe(self) -> str:
        return "(" + ", ".join(f"{n}={s}" for n, s in zip(self.names, self.shape)) + ")"


def choose(mesh: Mesh | None, world: int) -> tuple[list[int], list[str]]:
    """The sample for a world of `world` ranks laid out as `mesh` (None: no DeviceMesh), and the lines
    that say which ranks and why the others are equal; ValueError when the mesh does not cover the world."""
    if mesh is None:
        sample = sorted({0, world - 1})
        return sample, [f"simgpu plan --ranks auto: rank 0 made no DeviceMesh by its first optimizer step: the world is "
                        f"taken as one data-parallel dimension; ranks {', '.join(map(str, sample))} run (the first and "
                        f"the last replica; every rank between them is taken to run the same program on equal shards)"]
    if sorted(mesh.ranks) != list(range(world)):
        raise ValueError(f"--ranks auto: the program's first DeviceMesh {mesh.describe()} holds {len(mesh.ranks)} of the "
                         f"{world} ranks; give the sample with --ranks SPEC")
    strides = [1] * len(mesh.shape)
    for d in range(len(mesh.shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * mesh.shape[d + 1]
    pipes = [d for d, name in enumerate(mesh.names) if name in PIPELINE_DIMS]
    others = [d for d in range(len(mesh.shape)) if d not in pipes and mesh.shape[d] > 1]
    corners: list[dict[int, int]] = [{}] + [{d: mesh.shape[d] - 1} for d in others]
    sample: set[int] = set()
    for corner in corners:
        for stage in itertools.product(*(range(mesh.shape[d]) for d in pipes)):
            at = {**corner, **dict(zip(pipes, stage))}
            sample.add(mesh.ranks[sum(at.get(d, 0) * strides[d] for d in range(len(mesh.shape)))])
    names = [mesh.names[d] for d in others]
    where = ", ".join("(" + ", ".join(f"{mesh.names[d]}={corner.get(d, 0)}" for d in others) + ")" for corner in corners)
    if pipes:
        stages = " x ".join(f"{mesh.shape[d]} {mesh.names[d]}" for d in pipes)
        what = f"whole pipelines (all {stages} stages)" + (f" at {where}" if others else "")
    else:
        what = f"the ranks at {where}" if others else "every rank"
    lines = [f"simgpu plan --ranks auto: the program's first DeviceMesh is {mesh.describe()} (found by a first run of "
             f"rank 0 up to its creation); {len(sample)} of {world} ranks run: {what}"]
    if names:
        lines.append(f"simgpu plan --ranks auto: every other rank differs from a sampled one only along "
                     f"{', '.join(names)}, whose members run the same program path on shards of equal shape: taken "
                     f"as alike; the {', '.join(names)} groups at coordinate 0 of the other dimensions have their first "
                     f"and last member in the sample, and the check below compares their collectives")
    return sorted(sample), lines


# ----------------------------------------------------------------------------- the discovery run (rank 0)
def install_discovery(path: str) -> None:
    """In the discovery run's rank 0: write the first root DeviceMesh to `path` and exit; or, at the first
    optimizer step without one, write that there is none and exit."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(lambda *_: _found(path, {"mesh": None}))
    try:
        from torch.distributed import device_mesh
    except ImportError:  # a torch without DeviceMesh: no mesh to find
        return
    cls = device_mesh.DeviceMesh
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if kwargs.get("_root_mesh") is None:  # a root mesh, not a slice of one
            ranks = self.mesh
            names = self.mesh_dim_names or tuple(f"dim{d}" for d in range(ranks.dim()))
            _found(path, {"shape": list(ranks.shape), "names": list(names), "ranks": ranks.flatten().tolist()})

    cls.__init__ = __init__


def _found(path: str, what: dict) -> None:
    """The discovery run ends here: nothing after the layout is needed."""
    Path(path).write_text(json.dumps(what))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def read(path: str | Path) -> Mesh | None:
    """What the discovery run wrote: its mesh, or None (none made by the first optimizer step, or the
    program ended without one: no file)."""
    path = Path(path)
    if not path.exists():
        return None
    found = json.loads(path.read_text())
    if "shape" not in found:
        return None
    return Mesh(tuple(found["shape"]), tuple(found["names"]), tuple(found["ranks"]))


def discovery_environment(path: str) -> dict[str, str]:
    """The environment (beside the plan's own) of the discovery run: rank 0 alone, stopping at the mesh."""
    from simgpu.cuda_sim import plan

    return {plan.ENV_RANKS: "0", plan.ENV_DISCOVER: path}
