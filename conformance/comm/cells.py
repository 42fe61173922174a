"""What a single-process cell is made of, and the registry the tests read.

A cell is one API x option group (comm, training) or one function x dtype x raw op (nccl):
  draw(draw, n, cell)   hypothesis, in the controller: the cases of one example (several for an
                        error cell: one per precondition, each violating exactly that one)
  run(case, tracker)    in the worker: build the case's tensors, return the call (conformance/comm/worker.py)
  check(case, outcome)  in the controller: what is wrong with a call that worked (empty list: nothing)
A case that must fail carries its Reject; any other case must work and pass `check`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from conformance.comm.worker import Outcome, Runner, TensorSpec
from conformance.spec import Reject


@dataclass
class SPCase:
    """One call: the tensors it needs, its arguments (params), the current device, and what it must do."""

    api: str  # e.g. "comm.scatter", "nccl.all_reduce", "train.data_parallel"
    variant: str  # the report's layout column: the tensors' layout, or the precondition violated
    current: int = 0  # the current CUDA device while the call runs
    tensors: list[TensorSpec] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    expect: Reject | None = None

    def summary(self) -> str:
        tensors = ", ".join(f"{t.dtype}{list(t.shape)}@{'cpu' if t.device < 0 else t.device}"
                            + ("" if t.layout == "contiguous" else f"/{t.layout}") for t in self.tensors)
        params = {k: v for k, v in self.params.items() if not k.startswith("_")}
        must = f"must raise {'/'.join(self.expect.errors)} /{self.expect.pattern}/" if self.expect else "must work"
        return f"{self.api}[{self.variant}](current=cuda:{self.current}, tensors=[{tensors}], params={params}; {must})"


Check = Callable[[SPCase, Outcome], list[str]]


@dataclass(frozen=True)
class SPCell:
    """One test and one capability-report cell (api, dtype, op), see the module docstring.

    op is the option group for comm (e.g. "chunk_sizes", "errors"), the raw reduction op for nccl.
    """

    test: str  # "comm", "nccl" or "training": the test function that runs it
    api: str
    op: str | None
    draw: Callable[..., list[SPCase]]
    run: Runner
    check: Check
    dtype: str | None = None
    min_devices: int = 1

    def id(self) -> str:
        return "-".join(x for x in (self.api.split(".", 1)[1], self.dtype, self.op) if x)


CELLS: dict[str, list[SPCell]] = {"comm": [], "nccl": [], "training": []}


def register(*cells: SPCell) -> None:
    for cell in cells:
        if any(c.id() == cell.id() for c in CELLS[cell.test]):
            raise ValueError(f"single-process cell {cell.test}[{cell.id()}] registered twice")
        CELLS[cell.test].append(cell)


def cells(test: str) -> list[SPCell]:
    """The cells of one test function (importing conformance.comm registers them all)."""
    import conformance.comm  # noqa: F401

    return list(CELLS[test])


def reject(error: str, pattern: str, reason: str) -> Reject:
    return Reject(tuple(error.split("|")), pattern, reason)


def cuda_error() -> str:
    """The type CUDA builds raise a CUDA error as: torch.AcceleratorError where torch has it (seen on 2.11 for
    an invalid device ordinal), RuntimeError before."""
    import torch

    return "AcceleratorError" if hasattr(torch, "AcceleratorError") else "RuntimeError"
