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
                 "torch24, same test and case; tox-matrix.md, \"torch 2.4\"). With the view at a storage offset in a "
                 "sentinel-filled buffer (torch 2.13.0+cpu, 2026-11-25): reduce_scatter bool SUM on strided views "
                 "changed 14 elements of the buffer outside the view (the gaps between its elements).",
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
        id="gloo-bool-sum-bytes",
        backend="gloo",
        summary="gloo SUM on bool adds the bytes: True + True comes back as byte 2 (an invalid bool), not 1",
        evidence="probe, torch 2.13.0+cpu, 2 ranks: all_reduce SUM of [True, True, False] on both ranks left the "
                 "bytes [2, 2, 0]; reduce SUM gave [2, 2, 0] on the root. Conformance run, torch 2.13.0+cpu "
                 "(2026-11-25): reduce bool SUM, rank 3 of 4 held bytes 2 and 3; reduce_scatter bool SUM, world 2, "
                 "inputs [True] and [True]: byte 2. NCCL and the simulator give 0/1 (SUM on bool is OR). The same "
                 "probe on torch 2.4.1+cu121 and 2.14.1+cu130 (CPU tensors, gloo) gave the same bytes; the versions "
                 "between were not probed, the range assumes they behave alike.",
        detail_pattern=r"^wrong result: .*invalid bool",
        collectives=frozenset({"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor",
                               "reduce_scatter_single"}),
        dtype="bool",
        op="sum",
        torch_min="2.4",
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

# The first GPU run: 4x H200, torch 2.11.0+cu130, NCCL 2.28.9, driver 580.159.04 (evidence run2, log.txt),
# and the probes recorded in conformance/results/nccl-calibration.md (same machine kind and versions).
_RUN2 = "GPU run 2 (4x H200, torch 2.11.0+cu130, NCCL 2.28.9, driver 580.159.04)"
FINDINGS += [
    Finding(
        id="nccl-bf16-premul-sum-zero",
        backend="nccl",
        summary="PREMUL_SUM on bfloat16 returns zeros: the factor is lost (every group size, sync and async)",
        evidence=f"{_RUN2}: all_reduce bfloat16 PREMUL_SUM(3.0), world 3, inputs [0.5,-inf,1000], [-0,0,-8.47e37], "
                 "[249,-5.9e-39,1e-5]: every rank got 0.0 at (0,), expected 748.5; reduce bfloat16 PREMUL_SUM(0.5), "
                 "world 3, got nan where -inf was expected (-inf * 0). Probe on the same machine kind: all_reduce "
                 "bfloat16 PREMUL_SUM(2.0) of 1..12 gave twelve 0.0 on groups of 1, 2 and 3 ranks, async or not, "
                 "while float16 and float32 gave the right values; with the repro inputs above bfloat16 gave "
                 "[0, nan, 0] and float32 [748.5, -inf, -2.54e38].",
        detail_pattern=r"^wrong result",
        collectives=frozenset({"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"}),
        dtype="bfloat16",
        op="premul_sum",
        torch_min="2.11",
        torch_max="2.12",
    ),
    Finding(
        id="nccl-size1-reduce-scatter-premul",
        backend="nccl",
        summary="reduce_scatter / reduce_scatter_tensor on a group of one rank ignore the op: PREMUL_SUM(f) "
                "returns x, not f*x",
        evidence=f"{_RUN2}: reduce_scatter float16 PREMUL_SUM(2.0), world 1: 19 elements wrong, first got -1.0, "
                 "expected -2.0. Probe: reduce_scatter and reduce_scatter_tensor PREMUL_SUM(2.0) of 1..12 on one "
                 "rank gave 1..12 for float16 and float32 (all_reduce and reduce on one rank gave 2..24). The "
                 "same path accepts int16/uint32/complex, bitwise ops, AVG on bool and PREMUL_SUM on integers "
                 "and copies the input (in the table: nccl-calibration.md, rule S1).",
        detail_pattern=r"^wrong result",
        collectives=frozenset({"reduce_scatter", "reduce_scatter_tensor"}),
        op="premul_sum",
        torch_min="2.11",
        torch_max="2.12",
    ),
    Finding(
        id="nccl-reduce-scatter-tensor-noncontiguous",
        backend="nccl",
        summary="reduce_scatter_tensor does not check contiguity: transposed or strided tensors are accepted "
                "and reduced in memory order (wrong values; on one rank a transposed output is not written)",
        evidence=f"{_RUN2}: reduce_scatter_tensor accepted every transposed example at group sizes 1-4 (e.g. "
                 "float16 PREMUL_SUM, world 4, input (28, 2) transposed); no example was rejected. Probe, 2 "
                 "ranks, float32 SUM, input (8, 3) and output (4, 3) transposed: [102,110,118,104,...] where "
                 "[102,104,106,...] was due; strided: half the output left as the sentinel; one rank, transposed: "
                 "the output left untouched. The table keeps 'Tensors must be contiguous' (the simulator raises "
                 "it) so that code green on the simulator is right on NCCL.",
        detail_pattern=r"^accepted, but .*NCCL needs contiguous tensors",
        collectives=frozenset({"reduce_scatter_tensor", "reduce_scatter_single"}),
        torch_min="2.11",
        torch_max="2.12",
    ),
    Finding(
        id="nccl-scatter-strided",
        backend="nccl",
        summary="scatter does not check that tensors are dense: strided views are accepted and non-root ranks "
                "receive raw memory (wrong elements)",
        evidence=f"{_RUN2}: scatter bool, world 3, strided (4, 4) views: accepted. Probe, 2 ranks, float32 (4, 3) "
                 "strided views: the root's own part right, rank 1 got [21..26, 106..111] (its source read as raw "
                 "memory, then the sentinel) instead of 21..32. Transposed (dense) views scatter right and are in "
                 "the table as working; on one rank scatter is a local copy and right.",
        detail_pattern=r"^accepted, but .*NCCL needs contiguous tensors",
        layout="strided",
        collectives=frozenset({"scatter"}),
        torch_min="2.11",
        torch_max="2.12",
    ),
    Finding(
        id="nccl-silent-after-grouped-error",
        backend="nccl",
        summary="after 'Unconvertible NCCL type' (gather/scatter/all_to_all*) or a P2P error inside "
                "batch_isend_irecv, later collectives of that process silently do nothing",
        evidence=f"{_RUN2}: all_to_all_single float16/bfloat16/float32/float64, world 1, async, explicit splits: "
                 "output left as the sentinel 0.0 where the input was NaN (the world-1 pool had raised "
                 "'Unconvertible NCCL type' for int16/uint16/uint32/uint64 before); isend_irecv int32/int64, "
                 "world 2: both ranks hung copying the received tensor (pool timeout) after strided P2P examples "
                 "raised 'Tensors for P2P must be non-overlapping and dense'. Probe: in a fresh process the same "
                 "all_to_all_single was right 20/20; after a ValueError inside batch_isend_irecv, dist.isend "
                 "returned None and an all_reduce on the pair left its inputs unchanged; after 'Unconvertible' "
                 "in all_to_all, later all_to_all calls on that rank left their outputs unwritten. The driver now "
                 "replaces the ranks after such errors (conformance/driver.py), so the suite should not see it.",
        detail_pattern=r"^wrong result: .* got (0\.0|0|False), expected",
        collectives=frozenset({"all_to_all_single", "all_to_all"}),
        torch_min="2.11",
        torch_max="2.12",
    ),
]


def known_finding(backend: str, cell: Any, layout: str, outcome: str, detail: str,
                  torch_version: str) -> Finding | None:
    """The finding that explains this failing example of `cell` (a conformance.spec.Cell), if any."""
    return next((f for f in FINDINGS if f.matches(backend, cell, layout, outcome, detail, torch_version)), None)

from conformance.findings_modern import MODERN_FINDINGS  # noqa: E402 - they need Finding, defined above

FINDINGS += MODERN_FINDINGS
