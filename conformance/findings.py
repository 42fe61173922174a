"""Confirmed defects of a backend, with their evidence and the versions they were seen on.

A failing example that matches a finding counts as `known` in the capability report and the
test is reported as XFAIL with the finding's reason, for the listed versions only. Nothing else
is excused: a finding never matches a different outcome, backend, layout or version.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from conformance.version_guard import release


@dataclass(frozen=True)
class Finding:
    id: str
    backend: str
    summary: str
    evidence: str
    outcome: str = "FAIL"
    detail_pattern: str = "."
    layout: str | None = None
    collectives: frozenset[str] | None = None
    dtype: str | None = None
    op: str | None = None
    torch_min: str = "0"
    torch_max: str | None = None   # exclusive

    def matches(self, backend: str, cell: Any, layout: str, outcome: str, detail: str,
                torch_version: str) -> bool:
        return (backend == self.backend and outcome == self.outcome
                and (self.dtype is None or cell.dtype == self.dtype)
                and (self.op is None or cell.op == self.op)
                and (self.layout is None or layout == self.layout)
                and (self.collectives is None or cell.collective in self.collectives)
                and _in_range(torch_version, self.torch_min, self.torch_max)
                and re.search(self.detail_pattern, detail, re.S) is not None)


def _in_range(version: str, low: str, high: str | None) -> bool:
    v = release(version)
    return v >= release(low) and (high is None or v < release(high))


FINDINGS = [
    Finding(
        id="gloo-strided-views",
        backend="gloo",
        summary="gloo accepts non-contiguous strided views (x[..., ::2]) and reads/writes the wrong elements",
        evidence="conformance run, torch 2.13.0+cpu: all_reduce int8 SUM on a strided view of [0,0] and [1,1] "
                 "gave [1,0] instead of [1,1]; broadcast and reduce likewise. Transposed views (dense storage) "
                 "come out right. NCCL rejects both with ValueError 'Tensors must be contiguous'. "
                 "Same on torch 2.11.0 (tox env torch211: broadcast float32 on a strided view, "
                 "conformance/results/tox-matrix.md). Same on torch 2.9.1+cu128 (tox env torch29, "
                 "tests/test_plugin_cli.py gloo run: broadcast float32 on a strided view of [0,0] from root 0, "
                 "rank 1 got 1.0 at (1,), expected 0.0). Same on torch 2.6.0+cu124 (tox env torch26, "
                 "tests/test_plugin_cli.py gloo run: broadcast float32 on a strided view, rank 1 got 1.0 at (1,), "
                 "expected 0.0; conformance/results/tox-matrix.md, \"torch 2.6\"). Same on torch 2.4.1+cu121 (tox env "
                 "torch24, same test and case; tox-matrix.md, \"torch 2.4\").",
        detail_pattern=r"^wrong result",
        layout="strided",
        torch_min="2.4",
    ),
    Finding(
        id="gloo-transposed-reduce-scatter",
        backend="gloo",
        summary="gloo reduce_scatter_tensor on a transposed input splits raw memory, not rows",
        evidence="conformance run, torch 2.13.0+cpu: reduce_scatter_tensor MAX/MIN on transposed (2k, m) inputs "
                 "returned values from the wrong rows; the contiguous layout is right.",
        detail_pattern=r"^wrong result",
        layout="transposed",
        collectives=frozenset({"reduce_scatter_tensor", "reduce_scatter_single"}),
        torch_min="2.13",
    ),
    Finding(
        id="gloo-complex-avg",
        backend="gloo",
        summary="gloo AVG on raw complex tensors (reduce, reduce_scatter) returns NaN/garbage",
        evidence="conformance run, torch 2.13.0+cpu: reduce complex64 AVG gave nan where the mean is 0.0706; "
                 "complex SUM is right. all_reduce is unaffected (torch passes it a real view).",
        detail_pattern=r"^wrong result",
        collectives=frozenset({"reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"}),
        dtype="complex64",
        op="avg",
        torch_min="2.13",
    ),
    Finding(
        id="gloo-zero-size-recv",
        backend="gloo",
        summary="gloo recv of a zero-element tensor fails an internal check and leaves the sender blocked",
        evidence="conformance run, torch 2.13.0+cpu: recv of shape (0,) raised RuntimeError "
                 "'[enforce fail at gloo/transport/tcp/unbound_buffer.cc:184] offset < this->size. 0 vs 0' "
                 "while the sending rank hung in send.",
        outcome="broken",
        detail_pattern=r"offset < this->size",
        collectives=frozenset({"send_recv"}),
        torch_min="2.13",
    ),
]


def known_finding(backend: str, cell: Any, layout: str, outcome: str, detail: str,
                  torch_version: str) -> Finding | None:
    """The finding that explains this failing example of `cell` (a conformance.spec.Cell), if any."""
    return next((f for f in FINDINGS if f.matches(backend, cell, layout, outcome, detail, torch_version)), None)
