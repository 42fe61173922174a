"""Tensors on simulated GPUs: device arguments, transfers, and CUDA's same-device rule.

A TorchFunctionMode sees every torch call made from Python. It turns `device="cuda:i"` into a CPU
allocation labelled cuda:i, makes `.cuda()`, `.to()` and `.cpu()` copy between host and devices
as CUDA does (a transfer is a copy; moving to where a tensor already is returns it), labels each
result with the device of its inputs, and raises CUDA's error when an op mixes devices. Python
properties on torch.Tensor report the label: `device`, `is_cuda`, `get_device()`, and `grad`
(autograd creates gradients in C++, where no label is set, on the parameter's device).

Torch function modes are per thread, so the mode is entered in every thread the program starts
(threads are how nn.DataParallel drives its replicas).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from simgpu.cuda_sim import api, devices

TensorBase = torch._C.TensorBase
_HOST = "host"  # an explicit host target (device="cpu"), as opposed to "no device argument"
_suspended = threading.local()


def _cuda_device(index: int) -> torch.device:
    return torch.device("cuda", index)


def device_of(t: torch.Tensor) -> torch.device:
    index = devices.device_of(t)
    return TensorBase.device.__get__(t) if index is None else _cuda_device(index)


class suspended:
    """Run torch calls untouched by the simulation (the simulator's own plumbing uses it)."""

    def __enter__(self) -> None:
        _suspended.depth = getattr(_suspended, "depth", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _suspended.depth -= 1


def _target(device: Any) -> Any:
    """What a device= argument asks for: a simulated GPU index, _HOST, or None (not a device)."""
    if device is None:
        return None
    index = devices.resolve(device)
    if index is not None:
        return index
    if isinstance(device, (str, torch.device)):
        return _HOST
    return None


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, torch.Tensor)]


def _mixed_devices(a: str, b: str) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def common_device(tensors: list[torch.Tensor]) -> int | None:
    """The simulated GPU an op on these tensors runs on; CUDA's error when they disagree.

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
            raise _mixed_devices(f"cuda:{found}", f"cuda:{index}")
    if found is not None and host_tensor:
        raise _mixed_devices(f"cuda:{found}", "cpu")
    return found


def _put_outputs(out: Any, target: Any, inputs: list[torch.Tensor]) -> Any:
    """Label every tensor of `out` with `target`; an output that aliases an input on another
    device is copied first (a transfer never aliases)."""
    if target is None:
        return out
    index = None if target == _HOST else target
    input_storages = {id(t.untyped_storage()) for t in inputs}

    def put(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
            return x
        placed = devices.device_of(x)
        if placed != index and (placed is not None or id(x.untyped_storage()) in input_storages):
            x = x.clone(memory_format=torch.preserve_format)
        if index is not None:
            devices.place(x, index)
        return x

    return tree_map(put, out)


def _transfer(t: torch.Tensor, index: int | None) -> torch.Tensor:
    """A copy of `t` on `index` (None: host), or `t` itself when it is already there."""
    if devices.device_of(t) == index:
        return t
    copy = t.clone(memory_format=torch.preserve_format)
    if index is not None:
        devices.place(copy, index)
    return copy


def _cuda(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    self, *rest = args
    device = rest[0] if rest else kwargs.get("device")
    index = devices.current() if device is None else devices.resolve(device)
    if index is None:
        raise RuntimeError(f"Invalid device, must be cuda device (got {device!r})")
    return _transfer(self, index)


def _cpu(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    return _transfer(args[0], None)


def _to(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    """Tensor.to in all its forms: (device, dtype), (dtype), (tensor), with copy= and non_blocking=."""
    self, *rest = args
    kwargs = dict(kwargs)
    target: Any = None
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        target = devices.device_of(other)
        target = _HOST if target is None else target
        rest.insert(0, other.dtype)
    elif rest and (isinstance(rest[0], (str, torch.device)) or (isinstance(rest[0], int) and not isinstance(rest[0], bool))):
        target = _target(rest.pop(0))
        kwargs.update(zip(("dtype", "non_blocking", "copy"), rest))  # what followed the device, by name
        rest = []
        if "dtype" in kwargs and kwargs["dtype"] is None:  # nn.Module.to passes dtype=None for int tensors
            del kwargs["dtype"]
    if "device" in kwargs:
        target = _target(kwargs.pop("device"))
    converted = func(self, *rest, **kwargs)  # dtype, copy, memory_format, on the host storage
    if target is None:  # a dtype or layout change stays on the tensor's device
        target = devices.device_of(self)
    return _put_outputs(converted, target, [self])


def _type_as(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    self, other = args
    return _to(TensorBase.to, (self, other), {})


def _to_numpy(func: Callable, args: tuple, kwargs: dict) -> Any:
    t = args[0]
    index = devices.device_of(t)
    if index is not None:
        raise TypeError(f"can't convert cuda:{index} device type tensor to numpy. "
                        "Use Tensor.cpu() to copy the tensor to host memory first.")
    return func(*args, **kwargs)


def _pin_memory(func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
    t = args[0]
    if devices.device_of(t) is not None:
        raise RuntimeError(f"cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned "
                           f"(simgpu: tensor on cuda:{devices.device_of(t)})")
    pinned = t.clone(memory_format=torch.preserve_format)
    pinned.untyped_storage()._simgpu_pinned = True
    return pinned


def _is_pinned(func: Callable, args: tuple, kwargs: dict) -> bool:
    return bool(getattr(args[0].untyped_storage(), "_simgpu_pinned", False))


def _record_stream(func: Callable, args: tuple, kwargs: dict) -> None:
    if devices.device_of(args[0]) is None:
        raise RuntimeError("record_stream is only supported for CUDA tensors (simgpu: the tensor is on the host)")


def _same_device_of_self(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Indexing: index tensors may be on the host; the result lives with the indexed tensor."""
    out = func(*args, **kwargs)
    index = devices.device_of(args[0])
    return out if index is None else _put_outputs(out, index, _tensors(args[1:]))


_RANDOM = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal, torch.bernoulli, torch.multinomial,
           TensorBase.uniform_, TensorBase.normal_, TensorBase.random_, TensorBase.bernoulli_,
           TensorBase.exponential_, TensorBase.geometric_, TensorBase.log_normal_, TensorBase.cauchy_}

def _untouched(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Metadata and storage swaps: legal across devices, results need no placement."""
    return func(*args, **kwargs)


_SPECIAL: dict[Any, Callable[[Callable, tuple, dict], Any]] = {
    torch._has_compatible_shallow_copy_type: _untouched,
    TensorBase.data.__set__: _untouched,
    TensorBase.set_: _untouched,
    torch.is_same_size: _untouched,
    TensorBase.is_set_to: _untouched,
    TensorBase.cuda: _cuda,
    TensorBase.cpu: _cpu,
    TensorBase.to: _to,
    TensorBase.type_as: _type_as,
    TensorBase.copy_: _untouched,  # copies between any two devices; the destination stays put
    TensorBase.numpy: _to_numpy,
    torch.Tensor.__array__: _to_numpy,
    TensorBase.pin_memory: _pin_memory,
    TensorBase.is_pinned: _is_pinned,
    TensorBase.record_stream: _record_stream,
    TensorBase.__getitem__: _same_device_of_self,
    torch._C._nn.unflatten_dense_tensors: _same_device_of_self,  # the tensors only give shapes; views of flat
    TensorBase.__setitem__: _untouched,
    TensorBase.index_put_: _untouched,
}


class SimCudaMode(TorchFunctionMode):
    """Device placement and checks for every torch call made from Python (see module docstring)."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(_suspended, "depth", 0):
            return func(*args, **kwargs)
        special = _SPECIAL.get(func)
        if special is not None:
            return special(func, args, kwargs)
        inputs = _tensors((args, kwargs))
        if "device" in kwargs:
            target = _target(kwargs["device"])
            if target is not None:
                kwargs = {**kwargs, "device": "cpu"}
        else:
            target = common_device(inputs) if inputs else None
        if isinstance(target, int) and func in _RANDOM and kwargs.get("generator") is None:
            kwargs = {**kwargs, "generator": api.generator(target)}  # each GPU has its own random stream
        return _put_outputs(func(*args, **kwargs), target, inputs)


_mode = SimCudaMode()


def enter_mode() -> None:
    """Make the calling thread see simulated devices."""
    if _mode not in torch.overrides._get_current_function_mode_stack():
        _mode.__enter__()


def _thread_bootstrap(original: Callable) -> Callable:
    def bootstrap_inner(self: threading.Thread) -> None:
        enter_mode()
        original(self)

    return bootstrap_inner


def _record_output_devices(original: Callable) -> Callable:
    """Custom autograd Functions (nn.DataParallel's among them): remember where each output lives,
    so the gradients autograd hands their backward (made in C++, unlabelled) can be placed there."""
    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        out = original(cls, *args, **kwargs)
        outputs = out if isinstance(out, tuple) else (out,)
        places = [devices.device_of(o) if isinstance(o, torch.Tensor) else None for o in outputs]
        for o in outputs:
            if isinstance(o, torch.Tensor) and o.grad_fn is not None and any(p is not None for p in places):
                o.grad_fn._simgpu_output_devices = places
                break
        return out

    return classmethod(apply)


def _backward_on_devices(original: Callable) -> Callable:
    def apply(node: Any, *grads: Any) -> Any:
        places = getattr(node, "_simgpu_output_devices", ())
        for grad, index in zip(grads, places):
            if isinstance(grad, torch.Tensor) and index is not None and devices.device_of(grad) is None:
                devices.place(grad, index)
        with SimCudaMode():  # the engine runs backward outside any torch function mode
            return original(node, *grads)

    return apply


def install() -> None:
    """Report labels through torch.Tensor's Python attributes and enter the mode in every thread."""
    torch.Tensor.device = property(device_of, doc="The tensor's device (simulated GPUs: cuda:i).")
    torch.Tensor.is_cuda = property(lambda t: devices.device_of(t) is not None,
                                    doc="True on a simulated GPU.")
    torch.Tensor.is_cpu = property(lambda t: devices.device_of(t) is None and TensorBase.is_cpu.__get__(t))
    torch.Tensor.get_device = lambda t: -1 if devices.device_of(t) is None else devices.device_of(t)
    base_grad = TensorBase.grad

    def get_grad(t: torch.Tensor) -> torch.Tensor | None:
        grad = base_grad.__get__(t)
        index = devices.device_of(t)
        if grad is not None and index is not None and devices.device_of(grad) is None:
            devices.place(grad, index)
        return grad

    torch.Tensor.grad = property(get_grad, base_grad.__set__, base_grad.__delete__, base_grad.__doc__)
    function = torch.autograd.function
    function.Function.apply = _record_output_devices(function.Function.__dict__["apply"].__func__)
    function.BackwardCFunction.apply = _backward_on_devices(function.BackwardCFunction.apply)
    threading.Thread._bootstrap_inner = _thread_bootstrap(threading.Thread._bootstrap_inner)
    enter_mode()
