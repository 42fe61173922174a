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
        evidence="conformance run, torch 2.13.0+cpu on sim: funcol.reduce_scatter_tensor_coalesced float32 SUM, "
                 "world 3, one (1, 0) tensor with scatter_dim 1: results right, but the caller's list then held a "
                 "(2, 0) tensor. The assignment is in torch's Python layer (reduce_scatter_single_coalesced in "
                 "2.13; reduce_scatter_tensor_coalesced in the c10d_functional era before it), so every backend "
                 "shows it; the tensors themselves are untouched.",
        detail_pattern=r"^wrong result: (?:rank \d+: the caller's input list was changed[^;]*(?:; |$))+$",
        collectives=frozenset({"funcol.reduce_scatter_tensor_coalesced"}),
    )
    for backend in _EVERY_BACKEND
]

MODERN_FINDINGS += [
    Finding(
        id=f"funcol-act-wait-drops-autograd-{backend}",
        backend=backend,
        summary="AsyncCollectiveTensor.wait() on all_gather_tensor_autograd's result returns a tensor cut from "
                "the autograd graph where all_gather takes its view path (gather_dim > 0, the dims before it of "
                "size 1): backward then raises; wait_tensor() and first use keep the graph",
        evidence="conformance run, torch 2.13.0+cpu on sim: funcol.all_gather_tensor_autograd bfloat16, world 1, "
                 "input (1, 0), gather_dim 1, y.wait(): RuntimeError 'element 0 of tensors does not require grad'. "
                 "Probe, world 2, float32: input (1, 3) with gather_dim 1 fails the same way with y.wait(), while "
                 "wait_tensor(y) and y.clone() give x.grad = 2; inputs (2, 3) (no view path) and gather_dim 0 work. "
                 "ACT.wait() returns its inner tensor, which a view made below autograd (__torch_dispatch__) has "
                 "no grad_fn on. Earlier torch versions not checked.",
        outcome="should-work",
        detail_pattern=r"does not require grad and does not have a grad_fn",
        collectives=frozenset({"funcol.all_gather_tensor_autograd"}),
        torch_min="2.13",
    )
    for backend in _EVERY_BACKEND
]
