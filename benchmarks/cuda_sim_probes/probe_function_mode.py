"""Candidate A: TorchFunctionMode only.

Tensors are real CPU tensors. torch.Tensor.device / is_cuda are replaced by
Python properties that read a label stored on t.untyped_storage(). A
TorchFunctionMode rewrites device="cuda:i" arguments to cpu and labels the
outputs of every Python-level torch call. Anything created below Python
(autograd engine, C++ foreach kernels) is not labelled unless a Python-level
call wraps it.

Run: python benchmarks/cuda_sim_probes/probe_function_mode.py
     VENV214/bin/python benchmarks/cuda_sim_probes/probe_function_mode.py   # a venv with torch 2.14.1+cu130
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._pytree import tree_map, tree_flatten  # noqa: E402
import _common as C  # noqa: E402

_LABEL = "_sim_device"
_real_device = torch._C.TensorBase.device  # getset descriptor
_real_is_cuda = torch._C.TensorBase.is_cuda


def _label_of(t):
    try:
        return getattr(t.untyped_storage(), _LABEL, None)
    except Exception:  # noqa: BLE001 (e.g. wrapper subclasses, meta)
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


def _as_dev(d):
    if isinstance(d, int):
        return torch.device("cuda", d)
    if isinstance(d, (str, torch.device)):
        d = torch.device(d)
        if d.type == "cuda" and d.index is None:
            d = torch.device("cuda", 0)
        return d
    return None


class SimCudaFunctionMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        target = None
        # device= kwarg (factories, .to(device=...))
        if "device" in kwargs:
            d = _as_dev(kwargs["device"])
            if d is not None and d.type == "cuda":
                target = d
                kwargs["device"] = "cpu"
        name = getattr(func, "__name__", "")
        # Tensor.cuda(i) / Tensor.to("cuda:i") positional device
        if name == "cuda":
            target = _as_dev(args[1] if len(args) > 1 else kwargs.pop("device", 0) or 0)
            return self._label(args[0].clone() if _label_of(args[0]) != target else args[0], target)
        if name == "to" and len(args) > 1 and isinstance(args[1], (str, torch.device, int)):
            d = _as_dev(args[1])
            if d is not None and d.type == "cuda":
                target = d
                args = (args[0], "cpu") + tuple(args[2:])
            elif d is not None and d.type == "cpu" and _label_of(args[0]) is not None:
                return func(args[0].clone(), *args[1:], **kwargs)  # .to('cpu') of a labelled tensor: unlabelled copy
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
            tree_map(lambda o: self._label(o, target) if isinstance(o, torch.Tensor) else o, out)
        return out

    @staticmethod
    def _label(t, dev):
        if _label_of(t) is None:
            _set_label(t, dev)
        return t


MODE = SimCudaFunctionMode()


def main():
    C.maybe_install_cuda_shim()
    # storage label persistence sanity check (PyObject preservation of storages)
    def storage_label_persists():
        t = torch.ones(3)
        _set_label(t, torch.device("cuda", 1))
        v = t.view(3)
        return f"view sees label={_label_of(v)}; label on fresh untyped_storage() object={_label_of(t)}"
    C.record("0 storage label persists across untyped_storage() calls", storage_label_persists)

    C.run_standard_steps(lambda: MODE)
    C.time_ratio(lambda: MODE)

    # Explicit check: is the function mode active inside autograd hooks /
    # custom Function.backward?  (the tensors made there are what matters)
    def hook_mode_check():
        seen = {}
        with MODE:
            x = torch.randn(3, device="cuda:1", requires_grad=True)
            y = x * 2
            def h(g):
                from torch.overrides import _get_current_function_mode_stack
                seen["stack"] = [type(m).__name__ for m in _get_current_function_mode_stack()]
                seen["made"] = C.dev_str(torch.zeros(1))  # no device arg
                seen["like"] = C.dev_str(torch.zeros_like(g))
                return g
            y.register_hook(h)
            y.sum().backward()
        return f"stack in hook={seen['stack']}, zeros_like(g)={seen['like']}, x.grad={C.dev_str(x.grad)}"
    C.record("8 function-mode stack inside hook (explicit)", hook_mode_check)

    def int_device_cpu_wheel():
        return C.dev_str(torch.ones(2).cuda(1)) + " / " + C.dev_str(torch.ones(2).to(1))
    C.record("9 t.cuda(1) / t.to(1) outside the mode (no patch)", int_device_cpu_wheel)

    def int_device_in_mode():
        with MODE:
            return C.dev_str(torch.ones(2).cuda(1)) + " / " + C.dev_str(torch.ones(2).to(1))
    C.record("9b t.cuda(1) / t.to(1) inside the mode", int_device_in_mode)

    C.finish("A: TorchFunctionMode + storage label")


if __name__ == "__main__":
    main()
