"""Confirmed defects of the single-process APIs, added to conformance.findings.FINDINGS (where the
collectives' live) when conformance.comm is imported: a failing example that matches one is `known`.
"""
from __future__ import annotations

from conformance.findings import FINDINGS, Finding

SINGLE_PROCESS_FINDINGS = [
    Finding(
        id="nccl-broadcast-root-ignored",
        backend=backend,
        summary="torch.cuda.nccl.broadcast(inputs, root=r) checks r, then broadcasts inputs[0] whatever r is",
        evidence="torch/csrc/cuda/python_nccl.cpp validates root and calls torch::cuda::nccl::broadcast(inputs, "
                 "streams, comms), which has no root and passes 0 to ncclBcast (root dropped in Dec 2017, "
                 "de5f7b7251f); reproduced on torch 2.9.0+cu128 in pytorch/pytorch#179908 (open) and by this suite "
                 "on 4x H200, torch 2.11.0+cu130 (conformance/results/single-process-gpu.md: every tensor held "
                 "inputs[0] for root 2). The simulator copies the behaviour (simgpu/cuda_sim/comm.py), so sim and "
                 "GPU agree; the oracle keeps the documented meaning of root.",
        detail_pattern=r"^wrong result",
        layout="other_root",
        collectives=frozenset({"nccl.broadcast"}),
    )
    for backend in ("sim", "nccl")
]

FINDINGS.extend(f for f in SINGLE_PROCESS_FINDINGS if f not in FINDINGS)
