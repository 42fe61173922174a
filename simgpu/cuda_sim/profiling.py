"""torch.profiler on simulated GPUs: the host's activity is recorded, GPU activity is not, and a line says so.

A program that profiles with `ProfilerActivity.CUDA` (or the older `use_device="cuda"` / `use_cuda=True`)
asks torch to record CUDA events and kernels. Simulated GPUs run no kernels, and torch's C++ would try
CUDA's event calls on every op and print a warning with a C++ stack trace each time (hundreds per step),
on a CPU build and on a CUDA build alike. So the CUDA activity is taken out before the profiler starts,
the host activity (every op, shapes, memory, stacks, as asked) is recorded as usual, also where only CUDA
activity was asked for, and the first such profiler of a process prints one line saying what was left out.
"""
from __future__ import annotations

import functools
import sys
from typing import Any

_said = False
NOTE = ("simgpu: the profiler records host activity only on simulated GPUs: ProfilerActivity.CUDA "
        "(use_device='cuda') has no kernels or CUDA events to record, so device times read 0")


def _host_only(init: Any) -> Any:
    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        global _said
        if kwargs.get("use_device") == "cuda" or kwargs.get("use_cuda"):
            kwargs["use_device"] = None
            if "use_cuda" in kwargs:  # deprecated, and gone from newer torch
                kwargs["use_cuda"] = False
            # activities=[ProfilerActivity.CUDA] alone (use_cpu=False): what is left to record is the host's
            # activity, which CUDA's kernels would have stood for (with nothing, torch asserts "No activities")
            kwargs["use_cpu"] = True
            if not _said:
                _said = True
                print(NOTE, file=sys.stderr)
        init(self, *args, **kwargs)
    __init__._simgpu_host_only = True  # type: ignore[attr-defined]
    return __init__


def install() -> None:
    """Wrap torch.autograd.profiler.profile, which torch.profiler.profile and record-function users start."""
    import torch.autograd.profiler as autograd_profiler

    init = autograd_profiler.profile.__init__
    if not getattr(init, "_simgpu_host_only", False):
        autograd_profiler.profile.__init__ = _host_only(init)
