"""Confirmed defects of a backend, with their evidence and the versions they were seen on.

A failing example that matches a finding counts as `known` in the capability report and the
test is reported as XFAIL with the finding's reason, for the listed versions only. Nothing else
is excused: a finding never matches a different outcome, backend, layout or version.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


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
    torch_min: str = "0"
    torch_max: str | None = None   # exclusive

    def matches(self, backend: str, collective: str, layout: str, outcome: str, detail: str,
                torch_version: str) -> bool:
        return (backend == self.backend and outcome == self.outcome
                and (self.layout is None or layout == self.layout)
                and (self.collectives is None or collective in self.collectives)
                and _in_range(torch_version, self.torch_min, self.torch_max)
                and re.search(self.detail_pattern, detail, re.S) is not None)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


def _in_range(version: str, low: str, high: str | None) -> bool:
    v = _version(version)
    return v >= _version(low) and (high is None or v < _version(high))


FINDINGS = [
    Finding(
        id="gloo-strided-views",
        backend="gloo",
        summary="gloo accepts non-contiguous strided views (x[..., ::2]) and reads/writes the wrong elements",
        evidence="conformance run, torch 2.13.0+cpu: all_reduce int8 SUM on a strided view of [0,0] and [1,1] "
                 "gave [1,0] instead of [1,1]; broadcast and reduce likewise. Transposed views (dense storage) "
                 "come out right. NCCL rejects both with ValueError 'Tensors must be contiguous'.",
        detail_pattern=r"^wrong result",
        layout="strided",
        torch_min="2.13",
    ),
]


def known_finding(backend: str, collective: str, layout: str, outcome: str, detail: str,
                  torch_version: str) -> Finding | None:
    return next((f for f in FINDINGS if f.matches(backend, collective, layout, outcome, detail, torch_version)), None)
