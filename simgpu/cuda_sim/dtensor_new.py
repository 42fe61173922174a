"""A DTensor's device is fixed when it is made, as on GPUs.

From torch 2.13 DTensor is built by C++ (`torch.Tensor._dtensor__new__`, which DTensor.__new__ is), not
through Python's `_make_wrapper_subclass` (tensors.py), so the wrapper was left unlabelled and its
device was read through to its local tensor at every `.device` (devices.device_of). On GPUs a
wrapper's device is the local tensor's device at construction and stays so when code later swaps the
local tensor: FSDP2 with CPUOffloadPolicy(pin_memory=True) moves a loaded GPU shard's local tensor to
pinned host memory inside the same DTensor, and then refuses it at lazy init ("Found following
parameters on non-CPU device") because the DTensor still says cuda. Read-through made that DTensor
say cpu, and the program went on where a GPU run stops. Labelling the wrapper at construction with
its local tensor's simulated GPU gives the GPU answer.
"""
from __future__ import annotations

import sys
from typing import Any

import torch

from simgpu.cuda_sim import devices

_original: dict[str, Any] = {}


def _dtensor_new(cls: type, local_tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    wrapper = _original["new"](cls, local_tensor, *args, **kwargs)
    index = devices.device_of(local_tensor) if isinstance(local_tensor, torch.Tensor) else None
    if index is not None:
        setattr(wrapper.untyped_storage(), devices.LABEL, index)  # as tensors._make_wrapper_subclass
    return wrapper


def install() -> None:
    new = getattr(torch.Tensor, "_dtensor__new__", None)
    if new is None or "new" in _original:  # torch before 2.13 builds DTensors through _make_wrapper_subclass
        return
    _original["new"] = new
    torch.Tensor._dtensor__new__ = staticmethod(_dtensor_new)
    api = sys.modules.get("torch.distributed.tensor._api")
    if api is not None and api.DTensor.__dict__.get("__new__") == new:  # imported before the simulation
        api.DTensor.__new__ = staticmethod(_dtensor_new)
