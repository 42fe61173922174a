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

A fake made on a simulated GPU (a factory with device="cuda" under FakeTensorMode or a tracer) says cuda:i
in Python; when torch's C++ asks it for its device (prim.device) it answers the host, as the GPU's real
tensors do (tensors._make_subclass gives it the host's dispatch keys).
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


def _host_device_for_cpp(original: Callable) -> Callable:
    """FakeTensor answers C++'s question for its device (prim.device) with its fake device; for a fake on a
    simulated GPU the answer to C++ is the host, as for the GPU's real tensors: a CUDA device would make
    torch's device guards ask a CUDA runtime (the CPU wheel aborts), and the fake's meta storage as its C++
    device made autograd copy gradients to "meta" (a traced joint graph, flex attention's backward).
    Python's Tensor.device still says cuda:i (FakeTensor.device, tensors.device_of)."""
    def __torch_dispatch__(cls: type, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = original(func, types, args, kwargs if kwargs is not None else {})
        if func is torch.ops.prim.device.default and isinstance(out, torch.device) and out.type == "cuda":
            return torch.device("cpu")
        return out

    __torch_dispatch__._simgpu_original = original  # type: ignore[attr-defined]
    return classmethod(__torch_dispatch__)


def _host_answer(handler: Callable) -> Callable:
    def device_handler(args: Any) -> Any:
        out = handler(args)
        return torch.device("cpu") if isinstance(out, torch.device) and out.type == "cuda" else out

    device_handler._simgpu_original = handler  # type: ignore[attr-defined]
    return device_handler


def _simulated_gpu_context(original: Callable) -> Callable:
    def init_gpu_context(device: torch.device) -> None:
        """A FakeTensor on a GPU makes one real tensor there first (fake_tensor.init_gpu_context), from inside
        the fake mode's dispatch, where no simgpu mode sees it: on a CUDA build of torch that reached the CUDA
        runtime ("No CUDA GPUs are available"). A simulated GPU needs no context: nothing to do."""
        if torch.device(device).type != "cuda":
            original(device)

    init_gpu_context._simgpu_original = original  # type: ignore[attr-defined]
    return init_gpu_context


def install() -> None:
    """Describe simulated tensors to torch's fake-tensor machinery by their C++ (host) device."""
    from torch._subclasses import fake_tensor
    from torch._subclasses.fake_tensor import FakeTensor

    original_init = getattr(fake_tensor, "init_gpu_context", None)
    if original_init is not None and not hasattr(original_init, "_simgpu_original"):
        fake_tensor.init_gpu_context = _simulated_gpu_context(original_init)

    if not hasattr(FakeTensor.__torch_dispatch__, "_simgpu_original"):
        FakeTensor.__torch_dispatch__ = _host_device_for_cpp(FakeTensor.__torch_dispatch__)
    handlers = getattr(fake_tensor, "_DISPATCH_META_HANDLERS", {})  # FakeTensorMode answers it too
    device_handler = handlers.get(torch.ops.prim.device.default)
    if device_handler is not None and not hasattr(device_handler, "_simgpu_original"):
        handlers[torch.ops.prim.device.default] = _host_answer(device_handler)
    try:
        from torch._subclasses.meta_utils import MetaTensorDescriber
    except ImportError:  # torch without the describer (< 2.3): its fakes are made another way
        return
    if not hasattr(MetaTensorDescriber.describe_tensor, "__wrapped__"):
        MetaTensorDescriber.describe_tensor = _host_described(MetaTensorDescriber.describe_tensor)
