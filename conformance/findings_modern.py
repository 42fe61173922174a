"""Findings of the modern-collective families (docs/modern-collectives.md): defects of torch's own layers
(functional collectives, DTensor), hence seen on every backend; kept apart from findings.py's backend
defects, which they join (FINDINGS)."""
from __future__ import annotations

from conformance.findings import Finding

_EVERY_BACKEND = ("sim", "gloo", "nccl")

MODERN_FINDINGS = [
    Finding(
        id=f"funcol-reduce-scatter-coalesced-replaces-inputs-{backend}",
        backend=backend,
        summary="_functional_collectives.reduce_scatter_tensor_coalesced replaces the caller's list entries "
                "whose scatter_dim is not 0 (inputs[idx] = torch.cat(...)): the docstring says the inputs are "
                "left unmodified",
        evidence="conformance run, torch 2.13.0+cpu on sim: funcol_reduce_scatter_tensor_coalesced float32 SUM, "
                 "world 3, one (1, 0) tensor with scatter_dim 1: results right, but the caller's list then held a "
                 "(2, 0) tensor. The assignment is in torch's Python layer (reduce_scatter_single_coalesced in "
                 "2.13; reduce_scatter_tensor_coalesced in the c10d_functional era before it), so every backend "
                 "shows it; the tensors themselves are untouched.",
        detail_pattern=r"^wrong result: (?:rank \d+: the caller's input list was changed[^;]*(?:; |$))+$",
        collectives=frozenset({"funcol_reduce_scatter_tensor_coalesced"}),
    )
    for backend in _EVERY_BACKEND
]
