"""Names of torch._C that a CUDA build of torch has and its own Python modules import.

Under simulation torch.backends.cuda.is_built() is True (api.BACKENDS_CUDA), as on a CUDA build, so
torch's modules take their CUDA branch. Where that branch imports a C++ binding the CPU wheel lacks,
the import would fail inside torch, far from the program: torch._inductor.cudagraph_trees imports
`_cuda_CUDAAllocator_AllocatorState` at module level, and torch._dynamo.reset() imports that module
whenever torch.cuda.is_available(), which every FSDPTest in PyTorch's own suite calls before and
after each test. The stand-ins here make those imports succeed; they are opaque types that only CUDA
graphs use, and CUDA graphs are refused under simulation (surface.py), so nothing ever calls them.

The same question for ops, `host_lacks`: an aten op the installed torch has with no CPU kernel (CUDA-only
ops, or ones a torch version has only for CUDA) is one a simulated GPU must run itself, by CUDA's formula
(attention_kernels.py, scaled_mm_kernels.py) or with a one-line refusal (cuda_kernels.py).
"""
from __future__ import annotations

import torch


class AllocatorState:
    """torch._C._cuda_CUDAAllocator_AllocatorState: the caching allocator's checkpointed state, which
    only CUDA-graph trees take; never made under simulation."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("simgpu: CUDA-graph allocator states are not simulated (CUDA graphs are refused)")


STAND_INS = {"_cuda_CUDAAllocator_AllocatorState": AllocatorState}


def host_lacks(name: str) -> bool:
    """Whether this torch has the op aten::`name` but no CPU kernel for it."""
    return hasattr(torch.ops.aten, name) and not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CPU")


def install() -> None:
    for name, value in STAND_INS.items():
        if not hasattr(torch._C, name):  # a CUDA build of torch keeps its own
            setattr(torch._C, name, value)
