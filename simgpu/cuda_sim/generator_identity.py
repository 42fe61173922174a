"""A CUDA generator stays one after a trip through torch's dispatcher.

A generator passed to an op (`tensor.uniform_(a, b, generator=g)`) reaches a tensor subclass's
__torch_dispatch__ (DTensor's) as a new Python wrapper around the same C++ generator: Python
subclasses of torch._C.Generator, such as the simulated CUDA generators (generators.CudaGenerator),
lose their class there. On GPUs the wrapper still wraps a CUDA generator whose get_state() is 16 bytes;
under simulation it wrapped the host generator below the CudaGenerator, whose state is mt19937's 5056
bytes, and DTensor's RNG tracker failed on it (test_random_ops.py::test_init_with_user_generator:
`offset.numel() != 1`, under LocalTensorMode "a Tensor with 631 elements cannot be converted to Scalar").

Each CudaGenerator's own host generator is never drawn from (generators.CudaGenerator._draw makes a
fresh one per draw), so its seed is free to name it: `stamp` seeds it with a token registered here,
`resolve` maps any wrapper back to its CudaGenerator by that token, and DTensor's RNG tracker
(`_distribute_region`, patched when torch.distributed.tensor._random is imported) and the simulated
random ops (generators.stream_for) resolve the generator they are given.
"""
from __future__ import annotations

import functools
import importlib.abc
import itertools
import sys
import weakref
from typing import Any

import torch

_TOKEN_BASE = 0x51_6D_67_70_00_00_00  # "simgp": far from the seeds programs pick
_tokens = itertools.count(1)
_registry: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()
_TARGET = "torch.distributed.tensor._random"


def stamp(generator: Any) -> None:
    """Register a CudaGenerator under a token its host generator's seed carries."""
    token = _TOKEN_BASE + next(_tokens)
    torch._C.Generator.manual_seed(generator, token)
    _registry[token] = generator


def resolve(generator: Any) -> Any:
    """The CudaGenerator a dispatcher-made wrapper stands for, else the generator itself."""
    if generator is None or type(generator) is not torch._C.Generator or generator.device.type != "cpu":
        return generator
    found = _registry.get(torch._C.Generator.initial_seed(generator))
    return generator if found is None else found


def _patch(module: Any) -> None:
    tracker = getattr(module, "OffsetBasedRNGTracker", None)
    original = getattr(tracker, "_distribute_region", None) if tracker is not None else None
    if original is None or getattr(original, "_simgpu", False):
        return

    @functools.wraps(original)
    def _distribute_region(self: Any, spec: Any, generator: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original(self, spec, resolve(generator), *args, **kwargs)

    _distribute_region._simgpu = True  # type: ignore[attr-defined]
    tracker._distribute_region = _distribute_region


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: Any) -> None:
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install() -> None:
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    elif not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())
