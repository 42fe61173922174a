"""Candidate C: __torch_dispatch__ wrapper subclass (FakeTensor's pattern).

SimCudaTensor = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=...,
device=torch.device("cuda", 1)) holding an inner CPU tensor; its
__torch_dispatch__ unwraps, computes on CPU, rewraps. A TorchDispatchMode
turns factory calls with device="cuda:i" into SimCudaTensors (as FakeTensorMode
does), so the unmodified program creates them.

Each part runs in its own child process because some failures are C++ aborts
(std::terminate) that kill the process. Steps are run twice in separate processes: without and with
torch._C._ensureCUDADeviceGuardSet() (PROBE_C_GUARD=1), which registers a
no-op CUDA DeviceGuardImpl when none is registered (FakeTensorMode calls it).

Run: python benchmarks/cuda_sim_probes/probe_wrapper_subclass.py
     PROBE_C_GUARD=1 python benchmarks/cuda_sim_probes/probe_wrapper_subclass.py
     (same with a torch 2.14 CUDA build's python)
"""
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402
import _common as C  # noqa: E402

GUARD = os.environ.get("PROBE_C_GUARD") == "1"


class SimCudaTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, inner, device):
        return torch.Tensor._make_wrapper_subclass(
            cls, inner.shape, strides=inner.stride(), storage_offset=inner.storage_offset(),
            dtype=inner.dtype, layout=inner.layout, device=device,
            requires_grad=inner.requires_grad)

    def __init__(self, inner, device):
        self.inner = inner

    def __repr__(self):
        return f"SimCudaTensor({self.inner!r}, device={self.device})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def _dispatch(func, args, kwargs):
    target = None
    d = kwargs.get("device")
    if d is not None:
        d = torch.device(d)
        if d.type == "cuda":
            target = torch.device("cuda", 0 if d.index is None else d.index)
            kwargs = dict(kwargs, device=torch.device("cpu"))
        elif func is torch.ops.aten._to_copy.default:
            # copy to cpu: unwrap, plain result
            return func(*tree_map(_unwrap, args), **kwargs)

    def unwrap(a):
        nonlocal target
        if isinstance(a, SimCudaTensor):
            target = target or a.device
            return a.inner
        return a
    uargs = tree_map(unwrap, args)
    ukw = tree_map(unwrap, kwargs)
    out = func(*uargs, **ukw)
    if target is None:
        return out
    return tree_map(lambda o: SimCudaTensor(o, target) if isinstance(o, torch.Tensor)
                    and not isinstance(o, SimCudaTensor) else o, out)


def _unwrap(a):
    return a.inner if isinstance(a, SimCudaTensor) else a


class SimCudaFactoryMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


MODE = SimCudaFactoryMode()


def main():
    part = os.environ.get("PROBE_PART")
    name = "C: wrapper subclass" + (" + _ensureCUDADeviceGuardSet" if GUARD else "")
    if part is None:  # parent: each part in its own process (C++ aborts happen)
        C.run_parts_in_subprocesses(os.path.abspath(__file__),
                                    ["0a", "0b", "0c", "0d", "0e", "std", "time"], name)
        return
    C.maybe_install_cuda_shim()
    if GUARD:
        C.record("0 _ensureCUDADeviceGuardSet()", lambda: torch._C._ensureCUDADeviceGuardSet())
    torch.cuda._lazy_init = lambda: None  # factories with a cuda device call it from C++

    def make():
        t = SimCudaTensor(torch.randn(4, 4), torch.device("cuda", 1))
        return f"device={t.device}, is_cuda={t.is_cuda}"

    def autograd_min():
        x = SimCudaTensor(torch.randn(4, 4), torch.device("cuda", 1)).requires_grad_()
        (x * 2).sum().backward()
        return f"x.grad.device={x.grad.device}, type={type(x.grad).__name__}"

    def storage_resize():
        t = SimCudaTensor(torch.randn(16), torch.device("cuda", 1))
        s = t.untyped_storage()
        before = s.size()
        s.resize_(0)
        s.resize_(64)
        return f"storage nbytes {before} -> 0 -> {s.size()}, storage.device={s.device}"

    def data_ptr():
        t = SimCudaTensor(torch.randn(16), torch.device("cuda", 1))
        return f"data_ptr={t.data_ptr()}"

    def save():
        t = SimCudaTensor(torch.randn(16), torch.device("cuda", 1))
        buf = io.BytesIO()
        torch.save(t, buf)
        buf.seek(0)
        u = torch.load(buf, weights_only=False)
        return f"reloaded type={type(u).__name__} device={u.device}"

    if part == "0a":
        C.record("0a _make_wrapper_subclass(device=cuda:1)", make)
    elif part == "0b":
        C.record("0b minimal backward on a wrapper tensor", autograd_min)
    elif part == "0c":
        C.record("0c untyped_storage().resize_ (FSDP2 free/alloc)", storage_resize)
    elif part == "0d":
        C.record("0d data_ptr()", data_ptr)
    elif part == "0e":
        C.record("0e torch.save / torch.load", save)
    elif part == "std":
        C.run_standard_steps(lambda: MODE)
    elif part == "time":
        C.time_ratio(lambda: MODE)
    C.finish(name)


if __name__ == "__main__":
    main()
