"""Run under `simgpu run --gpus 2`: the function mode's per-function kinds (tensors._kind) and the cheaper
reads of a tensor's GPU decide as the full rules do: the same-device rule on C++ and Python functions, foreach
calls pairing their lists, factories with and without a device, pin_memory, the issued GPU of C++ functions;
`t.device` is CUDA's device (one object per GPU) and reads no storage through the program's modes."""
import torch
from torch.overrides import TorchFunctionMode

from simgpu.cuda_sim import devices, placement, tensors


def raises(fn, words):
    try:
        fn()
    except RuntimeError as exc:
        assert words in str(exc), str(exc)
        return
    raise AssertionError(f"no error containing {words!r}")


F = torch.nn.functional  # F.layer_norm: a Python function that hands its call to the modes (handle_torch_function)
a0, b0 = torch.ones(4, 4, device="cuda:0"), torch.ones(4, 4, device="cuda:0")
a1, host = torch.ones(4, 4, device="cuda:1"), torch.ones(4, 4)
for _ in range(3):  # the first call works the kind out; the later ones take it cached
    assert torch.mm(a0, b0).device == torch.device("cuda:0")
    raises(lambda: torch.mm(a0, a1), "cuda:0 and cuda:1")
    raises(lambda: torch.mm(a0, host), "cuda:0 and cpu")
    assert F.layer_norm(a1, (4,), weight=a1[0]).device == torch.device("cuda:1")
    raises(lambda: F.layer_norm(a0, (4,), weight=a1[0]), "cuda:0 and cuda:1")
    outs = torch._foreach_add([a0, a1], [b0, a1])  # foreach pairs its lists: each element keeps its GPU
    assert [o.device for o in outs] == [torch.device("cuda:0"), torch.device("cuda:1")]
    assert torch.zeros(3).device == torch.device("cpu")
    assert torch.zeros(3, device="cuda:1").device == torch.device("cuda:1")
    assert torch.empty(3, device="cuda:0", pin_memory=False).device == torch.device("cuda:0")
    with torch.device("cuda:1"):
        assert torch.ones(2).device == torch.device("cuda:1")
    assert torch.ones(2, pin_memory=True).is_pinned()
    # C++ making a tensor from its input's options alone lands on the input's GPU (the issued GPU)
    assert torch.linalg.norm(torch.ones(0, 3, device="cuda:1")).device == torch.device("cuda:1")
    assert getattr(placement._state, "issued", None) is None  # the mark is given back after the call
    with placement.suspended():  # the simulation's plumbing: calls untouched
        assert (host + host).device == torch.device("cpu")

assert tensors._KIND[torch.mm] == tensors._SAME_CPP and tensors._KIND[F.layer_norm] == tensors._SAME_PY
assert tensors._KIND[torch._foreach_add] == tensors._PAIRS and tensors._KIND[torch.zeros] == tensors._GENERAL

# t.device: CUDA's device, the same object on every read of a GPU
assert a1.device == torch.device("cuda", 1) and a1.device is a1.device and a1.device.index == 1
assert host.device == torch.device("cpu")


class Seen(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


with Seen() as seen:  # the program's own mode sees its own calls, not the simulation's storage reads
    assert a0.device == torch.device("cuda:0") and devices.device_of(a1) == 1
    c = a0 + b0
assert c.device == torch.device("cuda:0")
assert "untyped_storage" not in seen.calls, seen.calls
assert "add" in seen.calls or "__add__" in seen.calls, seen.calls
print("OK call_paths")
