"""Fake tensors made from tensors on simulated GPUs are host fakes.

Torch makes FakeTensors of real tensors where it traces a function without running it: the autograd
of control-flow higher-order operators (torch.cond, while_loop, scan, map traced by make_fx to build
their schema and backward graphs), torch.export. The fake takes its device from `Tensor.device`,
which says `cuda:i` for a simulated tensor, so the fake is a CUDA tensor to torch's C++. On the CPU
wheel the autograd engine then asks CUDA's device guard for a stream, which that wheel lacks: the
process aborts ("PyTorch is not linked with support for cuda devices", a C++ terminate), e.g. at the
first `torch.cond` of a tensor that requires grad.

The simulated tensor is host memory below Python (tensors.py), and its fake is too: its describing step
(torch._subclasses.meta_utils, which every fake conversion goes through) records the C++ device. The
traced graph only serves to analyse the function; the real run places every op on the GPU (placement.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

_TensorBase = torch._C.TensorBase


def _host_described(original: Callable) -> Callable:
    def describe_tensor(self: Any, t: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        desc = original(self, t, *args, **kwargs)
        if desc.device.type == "cuda":
            below = _TensorBase.device.__get__(t)
            if below.type != "cuda":  # a simulated GPU's tensor: host memory to torch's C++
                desc = dataclasses.replace(desc, device=below)
        return desc

    describe_tensor.__wrapped__ = original  # type: ignore[attr-defined]
    return describe_tensor


def install() -> None:
    """Describe simulated tensors to torch's fake-tensor machinery by their C++ (host) device."""
    try:
        from torch._subclasses.meta_utils import MetaTensorDescriber
    except ImportError:  # torch without the describer (< 2.3): its fakes are made another way
        return
    if not hasattr(MetaTensorDescriber.describe_tensor, "__wrapped__"):
        MetaTensorDescriber.describe_tensor = _host_described(MetaTensorDescriber.describe_tensor)
