"""Candidate B: TorchDispatchMode labelling.

Tensors are real CPU tensors; torch.Tensor.device / is_cuda are Python
properties reading a label stored on t.untyped_storage() (same as candidate A).
A TorchDispatchMode sees every aten op -- including those issued by the
autograd engine, tensor hooks, custom Function.backward and the C++ foreach
kernels used by optimizers -- rewrites a device= kwarg of cuda to cpu and
labels the outputs with the cuda device of the inputs / of the kwarg.

Needed Python-level patches (recorded as separate steps):
  * torch.cuda._lazy_init: the C++ binding of every factory call with a cuda
    device calls it before the dispatcher is reached.
  * Tensor.cuda / Tensor.to with an integer device: the CPU wheel's argument
    parser rejects them ("Cannot access accelerator device ...").
  * Tensor.to("cpu") / .cpu() of a labelled tensor: C++ sees device cpu ==
    cpu and returns self (no aten op), so the label would stick.

By default (like any TorchDispatchMode) the mode is popped while its handler
runs, so when it forwards an op on a DTensor, DTensor's __torch_dispatch__
computes the local shards with no mode active: they come out unlabelled (cpu).
Variant PROBE_B_DEFER_TO_SUBCLASSES=1: when a tensor subclass is among the
arguments the mode re-pushes itself and calls the subclass's
__torch_dispatch__ directly, hoping the local ops get labelled -- measured:
RecursionError in steps 4b/5a on 2.13 (DTensor re-dispatches on DTensors). (Returning
NotImplemented instead, FakeTensorMode's pattern, fails here: "Multiple
dispatch failed ... all __torch_dispatch__ handlers returned NotImplemented".)

Run: python benchmarks/cuda_sim_probes/probe_dispatch_mode.py
     VENV214/bin/python benchmarks/cuda_sim_probes/probe_dispatch_mode.py   # a venv with torch 2.14.1+cu130
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402
import _common as C  # noqa: E402

_LABEL = "_sim_device"
_real_device = torch._C.TensorBase.device
_real_is_cuda = torch._C.TensorBase.is_cuda


def _label_of(t):
    try:
        return getattr(t.untyped_storage(), _LABEL, None)
    except Exception:  # noqa: BLE001
        return None


def _set_label(t, dev):
    try:
        setattr(t.untyped_storage(), _LABEL, dev)
    except Exception:  # noqa: BLE001
        pass


def _device(self):
    lab = _label_of(self)
    return lab if lab is not None else _real_device.__get__(self)


def _is_cuda(self):
    lab = _label_of(self)
    return lab.type == "cuda" if lab is not None else _real_is_cuda.__get__(self)


torch.Tensor.device = property(_device)
torch.Tensor.is_cuda = property(_is_cuda)

RESPECT_SUBCLASSES = os.environ.get("PROBE_B_DEFER_TO_SUBCLASSES") == "1"
_PLAIN = (torch.Tensor, torch.nn.Parameter)
_DEVICE_OPS_TO_CPU = {torch.ops.aten._to_copy.default}


class SimCudaDispatchMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # Let tensor subclasses (DTensor, FSDP2's params) run their own
        # __torch_dispatch__ first, with this mode still active, so the plain
        # local ops they issue are labelled too (FakeTensorMode does the same).
        if RESPECT_SUBCLASSES:
            subs = [t for t in types if t not in _PLAIN]
            if subs:
                with self:  # re-push: the subclass's inner (local) ops get labelled
                    return subs[0].__torch_dispatch__(func, types, args, kwargs)
        kwargs = kwargs or {}
        target = None
        d = kwargs.get("device")
        if d is not None:
            d = torch.device(d)
            if d.type == "cuda":
                target = torch.device("cuda", 0 if d.index is None else d.index)
                kwargs = dict(kwargs, device=torch.device("cpu"))
            elif d.type == "cpu" and func in _DEVICE_OPS_TO_CPU:
                return func(*args, **kwargs)  # explicit copy to cpu: unlabelled
        if target is None:
            flat, _ = tree_flatten((args, kwargs))
            for a in flat:
                if isinstance(a, torch.Tensor):
                    lab = _label_of(a)
                    if lab is not None:
                        target = lab
                        break
        out = func(*args, **kwargs)
        if target is not None:
            flat, _ = tree_flatten(out)
            for o in flat:
                if isinstance(o, torch.Tensor) and _label_of(o) is None:
                    _set_label(o, target)
        return out


MODE = SimCudaDispatchMode()


def patch_lazy_init():
    import torch.cuda
    torch.cuda._lazy_init = lambda: None


_orig_cuda = torch.Tensor.cuda
_orig_to = torch.Tensor.to
_orig_cpu = torch.Tensor.cpu


def patch_tensor_methods():
    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        if device is None:
            device = torch.cuda.current_device() if C.SHIM else 0
        if isinstance(device, int):
            device = torch.device("cuda", device)
        return _orig_to(self, device, non_blocking=non_blocking, memory_format=memory_format)

    def to(self, *args, **kwargs):
        args = tuple(torch.device("cuda", a) if isinstance(a, int) and not isinstance(a, bool) and i == 0 else a
                     for i, a in enumerate(args))
        if isinstance(kwargs.get("device"), int):
            kwargs["device"] = torch.device("cuda", kwargs["device"])
        dev = args[0] if args and isinstance(args[0], (str, torch.device)) else kwargs.get("device")
        if dev is not None and torch.device(dev).type == "cpu" and _label_of(self) is not None:
            return _orig_to(self, *args, **kwargs).clone()
        return _orig_to(self, *args, **kwargs)

    def cpu(self, memory_format=torch.preserve_format):
        if _label_of(self) is not None:
            return self.clone(memory_format=memory_format)  # (label dropped below)
        return _orig_cpu(self, memory_format=memory_format)

    torch.Tensor.cuda = cuda
    torch.Tensor.to = to
    # .cpu(): clone under the mode would be labelled; do an unlabelled copy
    def cpu2(self, memory_format=torch.preserve_format):
        if _label_of(self) is not None:
            with torch.utils._python_dispatch._disable_current_modes():
                return _orig_cpu(self, memory_format=memory_format).clone(memory_format=memory_format)
        return _orig_cpu(self, memory_format=memory_format)
    torch.Tensor.cpu = cpu2


def main():
    C.maybe_install_cuda_shim()

    def factory_without_patch():
        with MODE:
            return C.dev_str(torch.ones(2, device="cuda:1"))
    C.record("0a factory device='cuda:1' in mode, lazy_init NOT patched", factory_without_patch)

    def cpu_before_patch():
        with MODE:
            t = torch.ones(2, device="cuda:1")
            return f"t.cpu().device={C.dev_str(t.cpu())}, t.to('cpu') is t: {t.to('cpu') is t}"
    patch_lazy_init()
    C.record("0b t.cpu() of labelled tensor, Tensor methods NOT patched", cpu_before_patch)

    def int_dev_unpatched():
        with MODE:
            return C.dev_str(torch.ones(2).cuda(1)) + " / " + C.dev_str(torch.ones(2).to(1))
    C.record("0c t.cuda(1) / t.to(1) in mode, Tensor methods NOT patched", int_dev_unpatched)

    patch_tensor_methods()
    C.record("0d after patches: t.cuda(1) / t.to(1) / t.cpu()", lambda: (
        lambda a, b, c: f"{C.dev_str(a)} / {C.dev_str(b)} / {C.dev_str(c)}")(
        *(lambda: (lambda t: (t, torch.ones(2).to(1), t.cpu()))(torch.ones(2).cuda(1)))()) if MODE.__enter__() or True else None)
    MODE.__exit__(None, None, None)

    C.run_standard_steps(lambda: MODE)
    C.time_ratio(lambda: MODE)
    C.finish("B: TorchDispatchMode + storage label" +
             (" (variant: mode defers to subclasses)" if RESPECT_SUBCLASSES else ""))


if __name__ == "__main__":
    main()
