"""What a collective's spec entry is made of, and the registry of entries.

One entry per collective , in conformance/collectives/<name>.py:
  cases(draw, world_size, cell, profile)  hypothesis: draw one Case for this cell
  run(ctx, case)                          on every rank: build tensors, call torch.distributed, return outputs
  check(case, outputs, flavor)            NumPy oracle: a Verdict per rank
  check_rank(case, me, output, flavor)    the same for one rank alone, where a rank's verdict needs no
                                          other rank's output (the benchmark checks on the ranks)
  expect(profile, case)                   None (must work) or a Reject (must raise that)
  busbw_factor(n)                         nccl-tests' bus-bandwidth factor (from simgpu.collective_facts)
Optional: `conditions` names the input classes its `cases` can be asked for (cell.condition): each
profile draws them in a property of their own, a fixed number of examples per cell (plugin.CONDITIONS),
so that every run reaches them; `dtypes` / `ops` narrow the entry's cells (the families of docs/modern-collectives.md draw a
few dtypes and ops, not the whole table); `requires()` returns why this torch cannot run the entry
(its cells then skip with that reason) or None.
The property tests, the capability matrix and the benchmarks all read these entries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from conformance.oracle import Verdict
from simgpu.collective_facts import bus_factor


@dataclass(frozen=True)
class Reject:
    """The error a backend must raise for a case: one of `errors` (type names) with `pattern` in the message."""

    errors: tuple[str, ...]
    pattern: str
    reason: str

    @staticmethod
    def any_of(rejects: list["Reject"]) -> "Reject | None":
        """One Reject that accepts whichever of several applicable errors the backend raises first."""
        if len(rejects) <= 1:
            return rejects[0] if rejects else None
        errors = tuple(dict.fromkeys(e for r in rejects for e in r.errors))
        return Reject(errors, "|".join(f"(?:{r.pattern})" for r in rejects), "; or ".join(r.reason for r in rejects))

    def matches(self, error_type: str, message: str) -> bool:
        import re

        short = error_type.rsplit(".", 1)[-1]
        return short in self.errors and re.search(self.pattern, message or "", re.S) is not None


@dataclass(frozen=True)
class Cell:
    """A cell of the capability matrix: collective x dtype x reduce op (None where no op applies).

    condition: the input class a pinned property asks `cases` for ("large", "arrival", "latecomer"; None:
    the main property's free draw); not part of the cell's id.
    """

    collective: str
    dtype: str | None
    op: str | None
    condition: str | None = None

    def id(self) -> str:
        return "-".join(x for x in (self.collective, self.dtype, self.op) if x)


@dataclass
class Case:
    """One drawn example: everything the ranks need, small and picklable. Inputs are per group rank."""

    collective: str
    world_size: int
    dtype: str | None = None
    op: str | None = None
    group: tuple[int, ...] | None = None   # global ranks passed to new_group, in drawn order; None = the world
    root: int = 0                           # group rank of src/dst where the collective has one
    layout: str = "contiguous"              # contiguous | transposed | strided
    offset: int = 0                         # > 0: every tensor a view this many elements into a larger buffer
    async_op: bool = False
    inputs: list[Any] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def members(self) -> tuple[int, ...]:
        """Global ranks in group-rank order: new_group ranks its members by global rank, whatever the
        order it was given them in, so member j (inputs[j], slot j of a list) is the j-th smallest."""
        return tuple(sorted(self.group)) if self.group is not None else tuple(range(self.world_size))

    @property
    def participants(self) -> tuple[int, ...]:
        """The ranks whose outcome counts (all members, or a point-to-point pair)."""
        return tuple(self.params.get("participants", self.members))

    @property
    def size(self) -> int:
        return len(self.members)

    def summary(self) -> str:
        shapes = [getattr(x, "shape", None) for x in self.inputs[:4]]
        extra = {k: v for k, v in self.params.items() if k not in ("objects",)}
        return (f"{self.collective}(world={self.world_size}, group={self.group}, dtype={self.dtype}, op={self.op}, "
                f"root={self.root}, layout={self.layout}, offset={self.offset}, async={self.async_op}, shapes={shapes}, params={extra})")


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective's whole description (see module docstring)."""

    name: str
    family: str                      # "reduce" (dtype x op), "data" (dtype), "control" (no dtype)
    cases: Callable[..., Case]
    run: Callable[..., Any]
    check: Callable[..., list[Verdict]]
    expect: Callable[..., Reject | None]
    min_world: int = 1
    check_rank: Callable[..., Verdict] | None = None
    available: Callable[[], bool] = lambda: True
    doc: str = ""
    dtypes: tuple[str, ...] | None = None    # None: every dtype of the backend's table
    ops: tuple[str, ...] | None = None       # None: every reduce op (family "reduce")
    requires: Callable[[], str | None] = lambda: None
    conditions: tuple[str, ...] = ()         # pinned input classes its cases draw on request (Cell.condition)

    def busbw_factor(self, n: int) -> float:
        """nccl-tests' bus-bandwidth factor on n ranks (simgpu.collective_facts keeps it once)."""
        return bus_factor(self.name, n)


# Members a pinned input class needs: arrival, a root and two others that can arrive out of order;
# latecomer, two (one arrives last).
CONDITION_MIN_MEMBERS = {"arrival": 3, "latecomer": 2}

SPECS: dict[str, CollectiveSpec] = {}


def register(spec: CollectiveSpec) -> CollectiveSpec:
    if spec.name in SPECS:
        raise ValueError(f"collective {spec.name!r} registered twice")
    SPECS[spec.name] = spec
    return spec


def all_specs() -> dict[str, CollectiveSpec]:
    """Every registered spec (importing the collectives package registers them)."""
    import conformance.collectives  # noqa: F401

    return {name: s for name, s in SPECS.items() if s.available()}
