"""Tensors on simulated GPUs as a program sees them: device arguments, transfers, and checks.

Three layers, each where torch lets it see what it must:
- placement.py (a TorchDispatchMode) gives every aten op's results the device of its inputs,
  wherever the op was called from;
- torch.Tensor's transfer methods (`cuda`, `cpu`, `to`, `type_as`, `numpy`, `pin_memory`, ...)
  are replaced on the class, so they behave as CUDA's wherever Python calls them: a transfer is a
  copy, staying put returns the tensor itself, a GPU tensor refuses `.numpy()`;
- a TorchFunctionMode sees the program's own torch calls: a bare index or "cuda" in `device=`
  (which a CPU build of torch cannot parse), and CUDA's same-device rule for host tensors
  (`model(x)` with x still on the host fails as on a GPU).
Python properties on torch.Tensor report the label: `device`, `is_cuda`, `is_cpu`, `get_device()`.

Torch modes are per thread, so both are entered in every thread the program starts (threads are
how nn.DataParallel drives its replicas); the autograd engine inherits the dispatch mode.
"""
from __future__ import annotations

import sys
import threading
import types
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

from simgpu.cuda_sim import attention, devices, generators, half_fft, host_register, legacy_types, placement, plan_host
from simgpu.cuda_sim.errors import SimulationError
from simgpu.cuda_sim.placement import suspended  # noqa: F401  (the simulator's plumbing imports it from here)

TensorBase = torch._C.TensorBase
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_HOST = "host"  # an explicit host target (device="cpu"), as opposed to "no device argument"
# A device that is neither host memory nor a GPU ("meta"): torch's own, the call goes to it unchanged.
# (Taking it for the host made meta-device init allocate every parameter, p.is_meta False, and
# FakeTensor's meta tensors real CPU ones: torch.export and the pipelining tracer failed.)
_ELSEWHERE = "elsewhere"


_CUDA_DEVICES: dict[int, torch.device] = {}


def _cuda_device(index: int) -> torch.device:
    """torch.device("cuda", index), made once per index: `t.device` returns it on every read, and making
    one went through the torch function modes (2 us; torch.device is immutable)."""
    device = _CUDA_DEVICES.get(index)
    if device is None:
        device = _CUDA_DEVICES[index] = torch.device("cuda", index)
    return device


def device_of(t: torch.Tensor) -> torch.device:
    if placement._storage_less and placement.in_kernel():
        return TensorBase.device.__get__(t)
    index = devices.device_of(t)
    return TensorBase.device.__get__(t) if index is None else _cuda_device(index)


def _target(device: Any) -> Any:
    """What a device argument asks for: a simulated GPU index, _HOST, _ELSEWHERE (meta), or None
    (not a device)."""
    if device is None:
        return None
    index = devices.resolve(device)
    if index is not None:
        return index
    if isinstance(device, (str, torch.device)):
        return _HOST if torch.device(device).type == "cpu" else _ELSEWHERE
    return None


def common_device(tensors: list[torch.Tensor]) -> int | None:
    """The simulated GPU a program's call on these tensors runs on; CUDA's error when they disagree.

    CPU tensors of dimension 0 (scalars) may join a GPU op, as on CUDA; other host tensors may not.
    """
    found: int | None = None
    host_tensor = False
    for t in tensors:
        index = devices.device_of(t)
        if index is None:
            host_tensor = host_tensor or t.dim() > 0
            continue
        if found is None:
            found = index
        elif found != index:
            raise placement.mixed_devices(f"cuda:{found}", f"cuda:{index}")
    if found is not None and host_tensor:
        raise placement.mixed_devices(f"cuda:{found}", "cpu")
    return found


def _same_device(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], int | None]:
    """The call's tensors and their simulated GPU: common_device(list(placement.tensors_of(args, kwargs)))
    without the generators (most of the program's calls pay it); one tensor's GPU is not checked against others."""
    tensors = []
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, (list, tuple)):
            tensors += [item for item in value if isinstance(item, torch.Tensor)]
    if not tensors:
        return tensors, None
    unwrapped = [placement.underlying(t) if _is_wrapped(t) else t for t in tensors]
    return tensors, common_device(unwrapped) if len(unwrapped) > 1 else devices.device_of(unwrapped[0])


_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _plain(t: Any) -> bool:
    return type(t) in _PLAIN


def _copy_on(t: torch.Tensor, index: int | None) -> torch.Tensor:
    with suspended():
        if placement._storage_less and placement.storage_less(t):
            # a plan: a storage-less tensor stays one on a GPU, and comes back to the host as zeros (plan.py)
            moved = t.clone() if index is not None else torch.zeros(t.shape, dtype=t.dtype)
        elif placement._storage_less and index is not None:
            moved = t.to(placement.copy_backing(t), copy=True)  # floating: no data kept
        else:
            moved = t.clone(memory_format=torch.preserve_format)
    if index is not None:
        devices.place(moved, index)
    return moved


class _TensorBaseProperty(property):
    """A property that says it belongs to TensorBase, as the C getter it replaces does: dynamo of
    torch <= 2.12 reads `Tensor.grad.__get__.__self__`'s `__objclass__` and `__name__` on import."""

    __objclass__ = TensorBase


class _Transfer(torch.autograd.Function):
    """A copy between devices that autograd sees as one: the gradient travels back to the source
    device, as CUDA's `_to_copy` backward does."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, index: int | None) -> torch.Tensor:  # type: ignore[override]
        ctx.source = devices.device_of(t)
        ctx.target = index  # where its output lives (placement.py's search for a backward node's GPU reads it)
        return _copy_on(t, index)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return _copy_on(grad, ctx.source), None


def _transfer(t: torch.Tensor, index: int | None) -> torch.Tensor:
    """A copy of `t` on `index` (None: host), or `t` itself when it is already there."""
    if devices.device_of(t) == index:
        return t
    if t.requires_grad and torch.is_grad_enabled():
        return _Transfer.apply(t, index)
    return _copy_on(t, index)


# ---- torch.Tensor's transfer methods, replaced on the class --------------------------------------
_original: dict[str, Callable] = {}


def _cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
    index = devices.current() if device is None else devices.resolve(device)
    if index is None:
        raise RuntimeError(f"Invalid device, must be cuda device (got {device!r})")
    if not _plain(self):  # DTensor.cuda(): torch's own method would ask the CUDA runtime for the device
        return _subclass_to(self, (_cuda_device(index),), kwargs)
    return _transfer(self, index)


def _cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if not _plain(self):  # DTensor, AsyncCollectiveTensor: a host result, as on CUDA
        return _subclass_to(self, ("cpu",), {})
    return _transfer(self, None)


def _parse_to(args: tuple, kwargs: dict) -> tuple[Any, dict]:
    """Tensor.to's forms: (device, dtype, non_blocking, copy), (dtype, ...), (tensor, ...), keywords.
    Returns the device target (an index, _HOST, or None: stays) and what to convert on the host."""
    rest = list(args)
    kwargs = dict(kwargs)
    target: Any = None
    if len(rest) > 1 and rest[0] is None:  # to(None, torch.bfloat16): no device, then the dtype (nn.Module.to)
        rest.pop(0)
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        index = devices.device_of(other)
        target = _HOST if index is None else index
        kwargs["dtype"] = other.dtype
        kwargs.update(zip(("non_blocking", "copy"), rest))
    elif rest and (isinstance(rest[0], (str, torch.device)) or (isinstance(rest[0], int) and not isinstance(rest[0], bool))):
        target = _target(rest.pop(0))
        kwargs.update(zip(("dtype", "non_blocking", "copy"), rest))
    else:
        kwargs.update(zip(("dtype", "non_blocking", "copy"), rest))
    if "device" in kwargs:
        target = _target(kwargs.pop("device"))
    if kwargs.get("dtype", 0) is None:  # nn.Module.to passes dtype=None for integer tensors
        del kwargs["dtype"]
    return target, kwargs


def _to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    if placement.is_suspended() or (placement._storage_less and placement.in_kernel()):
        # the simulation's own work, or inside a plan's Python meta kernel (a type promotion's converted input):
        # the kernel's intermediates, not tensors CUDA allocates (placement charges the op's outputs)
        return _original["to"](self, *args, **kwargs)
    if not _plain(self):
        return _subclass_to(self, args, kwargs)
    target, parsed = _parse_to(args, kwargs)
    if target == _ELSEWHERE:
        with placement.elsewhere_requested():
            moved = _original["to"](self, *args, **kwargs)
            if moved is self and devices.device_of(self) is not None:
                # a plan: a simulated GPU's storage-less tensor is meta below Python already, so C++ handed
                # it back; on CUDA `t.to("meta")` is a new tensor on the meta device (it pickles without
                # data: torch 2.11's pipelining sends its stages' outputs so, as shapes)
                moved = _original["to"](self, device="meta", **{**parsed, "copy": True})
            return moved
    kwargs = parsed
    here = devices.device_of(self)
    index = here if target is None else (None if target == _HOST else target)
    kwargs.pop("non_blocking", None)
    if index != here:
        kwargs.pop("copy", None)  # a transfer always copies
    converted = TensorBase.to(self, **kwargs) if kwargs else self  # dtype, copy=, memory_format, where it is
    return _transfer(converted, index)


class _FakeTransfer(torch.autograd.Function):
    """A fake tensor's move to another device (FakeTensorMode), its gradient sent back to the source device
    and dtype: C++ sees fake tensors on the host (_make_subclass), so its own backward would not know the GPU."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, device: torch.device, options: tuple) -> torch.Tensor:  # type: ignore[override]
        ctx.source, ctx.dtype = t.device, t.dtype
        return _original["to"](t, device=device, **dict(options))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        return _original["to"](grad, device=ctx.source, dtype=ctx.dtype), None, None


def _subclass_move(self: torch.Tensor, device: Any, kwargs: dict) -> torch.Tensor:
    if getattr(self, "fake_device", None) is not None and self.requires_grad and torch.is_grad_enabled():
        return _FakeTransfer.apply(self, torch.device(device), tuple(kwargs.items()))
    return _original["to"](self, device=device, **kwargs)


def _subclass_to(self: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    """Tensor.to on a tensor subclass (DTensor): its own `to` runs on its inner tensors, with the
    device spelled so a CPU build of torch takes it, and a host target meaning the host."""
    target, parsed = _parse_to(args, kwargs)
    if target == _ELSEWHERE:
        return _original["to"](self, *args, **kwargs)
    kwargs = parsed
    if target is None:
        return _original["to"](self, **kwargs)
    if target == _HOST:
        with placement.host_requested():
            return _subclass_move(self, "cpu", {**kwargs, "copy": True}) if devices.device_of(self) is not None \
                else _original["to"](self, device="cpu", **kwargs)
    if target == devices.device_of(self) and not kwargs.get("copy"):
        return _original["to"](self, **kwargs) if kwargs else self
    return _subclass_move(self, _cuda_device(target), kwargs)


def _gpu_fake(t: torch.Tensor) -> bool:
    """A FakeTensor on a simulated GPU: its C++ device is the host, its fake_device cuda:i (_make_subclass),
    so torch's C++ Tensor.type() and type_as() would answer for the host."""
    return not _plain(t) and getattr(getattr(t, "fake_device", None), "type", None) == "cuda"


def _type(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
    """Tensor.type(): the type name (torch.cuda.FloatTensor on a simulated GPU), or a conversion to a
    legacy type, the CUDA ones included (onto the current GPU, as CUDA does)."""
    if dtype is None and _gpu_fake(self):
        return legacy_types.type_name(self, True) or _original["type"](self)
    if not _plain(self):
        return _original["type"](self, dtype, non_blocking, **kwargs)
    here = devices.device_of(self)
    if dtype is None:
        return legacy_types.type_name(self, here is not None) or _original["type"](self)
    legacy = legacy_types.parse(dtype)
    if legacy is None:
        return _original["type"](self, dtype, non_blocking, **kwargs)
    dtype, on_gpu = legacy
    target = (here if here is not None else devices.current()) if on_gpu else None
    converted = TensorBase.to(self, dtype=dtype) if self.dtype != dtype else self
    return _transfer(converted, target)


def _type_as(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    if _gpu_fake(other) or _gpu_fake(self):  # C++ would take other's options, the host's (_gpu_fake)
        return self.to(device=other.device, dtype=other.dtype)
    if not (_plain(self) and _plain(other)):
        return _original["type_as"](self, other)
    return _to(self, other)


def _numpy(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    index = devices.device_of(self) if _plain(self) else None
    if index is not None:
        raise TypeError(f"can't convert cuda:{index} device type tensor to numpy. "
                        "Use Tensor.cpu() to copy the tensor to host memory first.")
    return _original["numpy"](self, *args, **kwargs)


def _array(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    _numpy(self)  # refuses GPU tensors as CUDA does
    return _original["__array__"](self, *args, **kwargs)


def _pin_memory(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    index = devices.device_of(self)
    if index is not None:
        raise RuntimeError(f"cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned "
                           f"(simgpu: tensor on cuda:{index})")
    with suspended():
        pinned = self.clone(memory_format=torch.preserve_format)
    return _pinned(pinned)


def _pinned(t: Any) -> Any:
    """Mark a host tensor's storage pinned (host memory is host memory here; is_pinned() reports it)."""
    if isinstance(t, torch.Tensor):
        if devices.device_of(t) is not None:
            raise RuntimeError("pin_memory=True is only for host tensors (simgpu: the result is on a simulated GPU; "
                               "CUDA refuses a pinned GPU allocation the same way)")
        t.untyped_storage()._simgpu_pinned = True
    return t


def _is_pinned(self: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
    if getattr(self.untyped_storage(), "_simgpu_pinned", False):
        return True
    # host memory pinned in place (cudaHostRegister, simgpu.cuda_sim.host_register), as CUDA reports it
    return devices.device_of(self) is None and self.data_ptr() != 0 and host_register.is_registered(self.data_ptr())


def _record_stream(self: torch.Tensor, stream: Any) -> None:
    if devices.device_of(self) is None:
        raise RuntimeError("record_stream is only supported for CUDA tensors (simgpu: the tensor is on the host)")


def _make_wrapper_subclass(cls: type, *args: Any, **kwargs: Any) -> torch.Tensor:
    """Tensor subclasses that wrap others (DTensor, AsyncCollectiveTensor) are made on the host, their
    own storage labelled with the simulated GPU: torch's C++ (the autograd engine above all) would
    otherwise look for a CUDA device that is not there."""
    device = kwargs.get("device")
    index = devices.resolve(device) if device is not None else None
    if index is not None:
        kwargs["device"] = torch.device("cpu")
    wrapper = _original["_make_wrapper_subclass"](cls, *args, **kwargs)
    if index is not None:
        setattr(wrapper.untyped_storage(), devices.LABEL, index)
    return wrapper


def _make_subclass(*args: Any, **kwargs: Any) -> torch.Tensor:  # (cls, data, ...): dynamo's polyfill
    # of torch.Tensor._make_subclass accepts a replacement whose signature is (*args, **kwargs) only
    """A subclass made over another tensor with a device for its dispatch keys (FakeTensor: a fake tensor
    on "cuda:i" is metadata over a meta tensor) is given the host in C++ and the simulated GPU as its
    in Python (FakeTensor.fake_device; devices.device_of reads it); C++ asks Python for the device and hears
    the host (fake_tensors.py): a CUDA device in C++ would make torch's device guards ask the CUDA runtime
    (a CPU build of torch aborts the process, a CUDA build without a GPU fails). The storage is not
    labelled: it is the meta tensor's, which stays on "meta"."""
    device = kwargs.get("device_for_backend_keys")
    index = devices.resolve(device) if device is not None else None
    if index is not None:  # C++ asks Python for its device, and hears the host (fake_tensors.py)
        kwargs.update(device_for_backend_keys=torch.device("cpu"))
    return _original["_make_subclass"](*args, **kwargs)


_TENSOR_METHODS: dict[str, Callable] = {
    "cuda": _cuda, "cpu": _cpu, "to": _to, "type": _type, "type_as": _type_as, "numpy": _numpy, "__array__": _array,
    "pin_memory": _pin_memory, "is_pinned": _is_pinned, "record_stream": _record_stream,
}


# ---- the program's own calls: device arguments and the host-tensor rule ----------------------------
_RANDOM = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal, torch.bernoulli,
           torch.multinomial, torch.rand_like, torch.randn_like, torch.randint_like}

# Calls on which CUDA does not apply the same-device rule (copies, indexing with host indices,
# metadata and storage swaps), or which report properties.
_NO_DEVICE_RULE = {
    TensorBase.copy_, TensorBase.__setitem__, TensorBase.index_put_, TensorBase.__getitem__, TensorBase.set_,
    TensorBase.index_put, torch.index_put, torch.index_put_,  # indices may be host tensors, as on CUDA
    TensorBase.data.__set__, torch._has_compatible_shallow_copy_type, torch.is_same_size, TensorBase.is_set_to,
    TensorBase.size, TensorBase.dim, TensorBase.shape.__get__,
    TensorBase.numel, TensorBase.stride, TensorBase.dtype.__get__, TensorBase.requires_grad.__get__,
    TensorBase.is_contiguous, TensorBase.element_size, TensorBase.storage_offset, TensorBase.data_ptr,
    TensorBase.untyped_storage, TensorBase.__len__, TensorBase.layout.__get__, TensorBase.grad.__get__,
    # split points given as a tensor must be a host tensor on CUDA too
    torch.tensor_split, TensorBase.tensor_split,
    # a graph may cross devices: the gradients of inputs on one GPU, of outputs on another
    torch.autograd.grad, torch.autograd.backward,
}


_CPP_FUNCTIONS = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
_SPECIAL_CALL = "special"
_GENERIC: dict[Any, Any] = {}  # a function the mode has seen -> _SPECIAL_CALL, else whether it pairs tensor lists


def _generic(func: Callable) -> Any:
    """What SimCudaMode needs to know of a function, worked out once: _SPECIAL_CALL for those with a case of
    their own below (whatever their arguments), else whether it pairs its tensor lists element by element."""
    name = getattr(func, "__name__", "")
    if (func is torch._C._nn._parse_to or func is torch._C._nn.unflatten_dense_tensors or func is TensorBase.new_tensor
            or func in half_fft.FUNCTIONS or not isinstance(name, str) or name.startswith("to_sparse")):
        return _SPECIAL_CALL
    return placement.pairs_lists(name)


def _issued_on(index: int, func: Callable, args: tuple, kwargs: dict) -> Any:
    """Call a C++ function whose tensors are all plain ones on GPU `index`: what its C++ makes from the
    inputs' options alone is on that GPU (placement.issue_on). A Python function or a tensor subclass may
    make host tensors of its own, which stay host tensors, so they are not called this way."""
    previous = placement.issue_on(index)
    try:
        return func(*args, **kwargs)
    finally:
        placement.issue_on(previous)


_DEVICE_CONSTRUCTORS = _device_constructors()  # the factories torch.set_default_device gives a device


def _default_gpu() -> torch.device | None:
    """The simulated GPU that torch.set_default_device made the default, if it did.

    torch puts that device's DeviceContext at the bottom of the mode stack, below this mode, which so saw
    factories without their device and left them to torch's C++ ("PyTorch is not linked with support for
    cuda devices"); a `with torch.device("cuda")` block's context lies above and passes its device on."""
    context = getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)
    device = getattr(context, "device", None)
    return device if isinstance(device, torch.device) and device.type == "cuda" else None


# What SimCudaMode does with a function, worked out once per function (_kind): most calls take the first
# three, which need no more than the function's identity and the call's tensors.
_NO_RULE = 0      # _NO_DEVICE_RULE: called as is
_SAME_CPP = 1     # C++ (a builtin): CUDA's same-device rule, then issued on the tensors' GPU (_issued_on)
_SAME_PY = 2      # a Python function: CUDA's same-device rule only
_PAIRS = 3        # pairs its tensor lists element by element (foreach): called as is
_GENERAL = 4      # a case of its own (_SPECIAL_CALL) or a factory torch.set_default_device reaches: the full rule
_KIND: dict[Any, int] = {}


def _kind(func: Callable) -> int:
    if func in _NO_DEVICE_RULE:
        return _NO_RULE
    pairs = _GENERIC[func] = _generic(func)
    if pairs is _SPECIAL_CALL or func in _DEVICE_CONSTRUCTORS:
        return _GENERAL
    if pairs:
        return _PAIRS
    return _SAME_CPP if isinstance(func, _CPP_FUNCTIONS) else _SAME_PY


class SimCudaMode(TorchFunctionMode):
    """The program's torch calls: device arguments and CUDA's host-tensor rule (module docstring)."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if plan_host.SIM.active:
            plan_host.note_call()  # a plan's measured host takes this mode's own cost per call off
        kwargs = kwargs or {}
        kind = _KIND.get(func)
        if kind is None:
            kind = _KIND[func] = _kind(func)
        if kind is _NO_RULE or placement.is_suspended():
            return func(*args, **kwargs)
        if kind is not _GENERAL and "device" not in kwargs and not kwargs.get("pin_memory"):
            # most calls: no device argument and nothing of the cases below, only CUDA's same-device rule
            if kind is _PAIRS:
                return func(*args, **kwargs)
            tensors, index = _same_device(args, kwargs)
            if index is not None and kind is _SAME_CPP and all(type(t) in _PLAIN for t in tensors):
                return _issued_on(index, func, args, kwargs)
            return func(*args, **kwargs)
        return self._general(func, args, kwargs)

    def _general(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        """A call with a device argument, pin_memory, or a case of its own (_kind)."""
        pairs = _GENERIC.get(func)
        if pairs is None:
            pairs = _GENERIC[func] = _generic(func)
        if "device" not in kwargs and func in _DEVICE_CONSTRUCTORS:
            default = _default_gpu()
            if default is not None:  # torch.set_default_device("cuda"): its mode lies below this one
                kwargs = {**kwargs, "device": default}
        if pairs is not _SPECIAL_CALL and "device" not in kwargs and not kwargs.get("pin_memory"):
            # a factory without a device (torch.set_default_device's not a GPU): the same-device rule only
            if not pairs:
                tensors, index = _same_device(args, kwargs)
                if index is not None and isinstance(func, _CPP_FUNCTIONS) and all(type(t) in _PLAIN for t in tensors):
                    return _issued_on(index, func, args, kwargs)
            return func(*args, **kwargs)
        if func is torch._C._nn._parse_to:
            return _parse_to_for_module(args, kwargs)
        if kwargs.get("pin_memory"):  # torch.empty(..., pin_memory=True): pinned host memory, as Tensor.pin_memory()
            return _pinned(self.__torch_function__(func, (), args, {**kwargs, "pin_memory": False}))
        if half_fft.applies(func, args, kwargs):  # cuFFT's half precision, which the host's FFT lacks
            return half_fft.run(func, args, kwargs)
        if func is torch._C._nn.unflatten_dense_tensors:
            # views of the flat buffer, except empty tensors, which C++ makes afresh from host options
            out = func(*args, **kwargs)
            index = devices.device_of(args[0])
            return out if index is None else placement.label(out, index)
        if func is TensorBase.new_tensor and "device" not in kwargs and devices.device_of(args[0]) is not None:
            kwargs = {**kwargs, "device": _cuda_device(devices.device_of(args[0]))}  # new_* make on self's device
        if getattr(func, "__name__", "").startswith("to_sparse") and args and devices.device_of(args[0]) is not None:
            raise SimulationError(f"simgpu: Tensor.{func.__name__} of a tensor on a simulated GPU: sparse tensors are "
                                  f"not simulated (convert on the host: t.cpu().{func.__name__}())")
        target = _target(kwargs["device"]) if "device" in kwargs else None
        if target is not None and target != _HOST and getattr(func, "__name__", "").startswith("sparse_"):
            raise SimulationError(f"simgpu: torch.{func.__name__} on a simulated GPU: sparse tensors are not "
                                  f"simulated (make it on the host, or dense with .to_dense())")
        if target is None or target == _ELSEWHERE:
            tensors = list(placement.tensors_of(args, kwargs))
            if len(tensors) > 1 and not placement.pairs_lists(getattr(func, "__name__", "")):
                index = common_device(tensors)  # one tensor cannot mix devices
            else:
                index = devices.device_of(tensors[0]) if len(tensors) == 1 else None
            if target == _ELSEWHERE:
                with placement.elsewhere_requested():
                    return func(*args, **kwargs)
            if index is not None and isinstance(func, _CPP_FUNCTIONS) and all(type(t) in _PLAIN for t in tensors):
                return _issued_on(index, func, args, kwargs)
            return func(*args, **kwargs)
        if target != _HOST and (placement.infra_mode_active() or placement.program_mode_active()
                                or not all(type(t) in _PLAIN for t in placement.tensors_of(args, kwargs))):
            # a tensor subclass (DTensor) hands the call to its inner tensors, and a dispatch mode of the
            # program's (LocalTensorMode: one tensor per rank) makes its own: placement.py places them; under
            # FakeTensorMode or a tracer the result is a fake on the GPU, as on CUDA, and a traced graph keeps
            # the GPU for its replay
            return func(*args, **{**kwargs, "device": _cuda_device(target)})
        kwargs = {**kwargs, "device": "cpu"}
        if target != _HOST and placement._storage_less:
            kwargs["device"] = placement.factory_backing(func, args, kwargs)
        if target == _HOST:
            with placement.host_requested():  # a host result, whatever the inputs' devices
                return func(*args, **kwargs)
        try:
            if func in _RANDOM:  # drawn by the op placement sees, from that GPU's generator (random_ops.py)
                with placement.random_factory_on(target):
                    return placement.label(func(*args, **kwargs), target)
            with suspended():
                out = func(*args, **kwargs)
        except RuntimeError as exc:  # a request larger than the host's memory: CUDA's OOM if the GPU can't hold it
            oom = placement.refused_on(exc, target)
            if oom is None:
                raise
            raise oom from None
        return placement.label(out, target)


def _parse_to_for_module(args: tuple, kwargs: dict) -> tuple:
    """nn.Module.to parses its arguments with torch._C._nn._parse_to, which a CPU build of torch
    refuses for a CUDA index (`model.to(rank)`): the same answer, with the device as CUDA's."""
    rest = list(args)
    device = kwargs.pop("device", None)
    if rest and (isinstance(rest[0], (str, torch.device)) or (isinstance(rest[0], int) and not isinstance(rest[0], bool))):
        device = rest.pop(0)
    elif rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        device = other.device
        rest.insert(0, other.dtype)
    index = devices.resolve(device) if device is not None else None
    parsed_device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*rest, **kwargs) if (rest or kwargs) \
        else (None, None, False, None)
    if index is not None:
        parsed_device = _cuda_device(index)
    elif device is not None:
        parsed_device = torch.device(device)
    return parsed_device, dtype, non_blocking, memory_format


# ---- threads ------------------------------------------------------------------------------------
_thread_modes = threading.local()


def enter_mode() -> None:
    """Make the calling thread see simulated devices."""
    placement.enter()
    if not any(isinstance(m, SimCudaMode) for m in torch.overrides._get_current_function_mode_stack()):
        _thread_modes.function_mode = SimCudaMode()  # kept alive: see placement.enter
        _thread_modes.function_mode.__enter__()


def _thread_bootstrap(original: Callable) -> Callable:
    def bootstrap_inner(self: threading.Thread) -> None:
        enter_mode()
        original(self)

    return bootstrap_inner


def _compile(original: Callable) -> Callable:
    """torch.compile under simulation runs the program eagerly, and says so once: its kernels would
    target CUDA or Triton, and dynamo cannot trace through the simulation's Python (on torch 2.4 it
    fails outright). The compiled object keeps its type and attributes (OptimizedModule, _orig_mod)."""
    def compile(*args: Any, **kwargs: Any) -> Any:  # noqa: A001 - torch's name
        import torch._dynamo

        if not torch._dynamo.config.disable:
            torch._dynamo.config.disable = True
            sys.stderr.write("simgpu: torch.compile runs eagerly on simulated GPUs (no CUDA/Triton kernels here)\n")
        return original(*args, **kwargs)

    compile.__doc__ = original.__doc__
    compile.__wrapped__ = original  # type: ignore[attr-defined]
    return compile


def _range(original: Callable) -> Callable:
    """torch.range (deprecated) parses its device in C++ before any mode sees the call, so a CPU build
    refuses "cuda": made on the host, then moved (the values are the same)."""
    def range(*args: Any, device: Any = None, **kwargs: Any) -> torch.Tensor:  # noqa: A001 - torch's name
        out = original(*args, **kwargs)
        return out if device is None else out.to(device)

    range.__doc__ = original.__doc__
    return range


def install() -> None:
    """Report labels through torch.Tensor's Python attributes, replace its transfer methods, and
    enter the modes in this thread and every thread started from now on."""
    for name, method in _TENSOR_METHODS.items():
        _original[name] = getattr(torch.Tensor, name)
        setattr(torch.Tensor, name, method)
    _original["_make_wrapper_subclass"] = torch.Tensor._make_wrapper_subclass
    torch.Tensor._make_wrapper_subclass = staticmethod(_make_wrapper_subclass)
    _original["_make_subclass"] = torch.Tensor._make_subclass
    torch.Tensor._make_subclass = staticmethod(_make_subclass)
    torch.Tensor.device = property(device_of, doc="The tensor's device (simulated GPUs: cuda:i).")
    torch.Tensor.is_cuda = property(lambda t: devices.device_of(t) is not None,
                                    doc="True on a simulated GPU.")
    torch.Tensor.is_cpu = property(lambda t: devices.device_of(t) is None and TensorBase.is_cpu.__get__(t))
    if placement._storage_less:  # a plan: a simulated GPU's tensor is meta below Python, not to the program
        torch.Tensor.is_meta = property(lambda t: placement.storage_less(t) and (
            placement.in_kernel() or devices.device_of(t) is None))
    torch.Tensor.get_device = lambda t: -1 if devices.device_of(t) is None else devices.device_of(t)
    base_grad = TensorBase.grad

    def get_grad(t: torch.Tensor) -> torch.Tensor | None:
        """A gradient lives with its parameter (DDP's reducer hands out views of buckets it made in C++),
        unless the program gave a host parameter a host gradient (set_grad): that one stays on the host
        when the parameter's `.data` later moves to a GPU, as on CUDA (FSDP1's CPU-offloaded `_cpu_grad`)."""
        grad = base_grad.__get__(t)
        if grad is not None and type(grad) in _PLAIN and devices.device_of(grad) is None and not devices.host_grad(grad):
            index = devices.device_of(t)
            if index is not None:
                devices.adopt(grad, index)
        return grad

    def set_grad(t: torch.Tensor, grad: torch.Tensor | None) -> None:
        base_grad.__set__(t, grad)
        if grad is not None and _plain(grad) and devices.device_of(grad) is None and devices.device_of(t) is None:
            devices.mark_host_grad(grad)

    torch.Tensor.grad = _TensorBaseProperty(get_grad, set_grad, base_grad.__delete__, base_grad.__doc__)
    torch.Tensor.grad.__name__ = "grad"
    threading.Thread._bootstrap_inner = _thread_bootstrap(threading.Thread._bootstrap_inner)
    torch.compile = _compile(torch.compile)
    torch.range = _range(torch.range)
    enter_mode()
