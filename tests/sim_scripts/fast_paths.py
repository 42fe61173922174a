"""Run under `simgpu run --gpus 2`: the per-op decisions the simulation caches (placement's _Op.plain, the
dispatch types' subclass check, the function mode's per-function kind, a thread's cuBLAS workspace charge)
give what the uncached rules give, on the first call and on every later one."""
import threading

import torch

from simgpu.cuda_sim import devices, placement, tensors, workspaces

aten = torch.ops.aten


def raises(fn, words):
    try:
        fn()
    except RuntimeError as exc:
        assert words in str(exc), str(exc)
        return
    raise AssertionError(f"no error containing {words!r}")


# which overloads take the plain rule (the inputs' GPU) and which keep a rule of their own
plain = {op: placement._Op(op).plain for op in (aten.add.Tensor, aten.mul.Scalar, aten.view.default)}
assert all(plain.values()), plain
for op, why in [(aten.mm.default, "cuBLAS workspace"), (aten.addmm.default, "cuBLAS workspace"),
                (aten.empty.memory_format, "device="), (aten.uniform_.default, "random"),
                (aten.copy_.default, "special"), (aten._foreach_add_.Scalar, "pairs lists"),
                (aten._efficientzerotensor.default, "zero tensor"), (aten.sum.default, "half kernel")]:
    assert not placement._Op(op).plain, (op, why)

a0, b0 = torch.ones(4, device="cuda:0"), torch.ones(4, device="cuda:0")
a1, host = torch.ones(4, device="cuda:1"), torch.ones(4)
for _ in range(3):  # the first call decides and caches; the later ones take the cached path
    out = a0 + b0
    assert out.device == torch.device("cuda:0") and devices.device_of(out) == 0
    assert (a1 * 2).device == torch.device("cuda:1")
    raises(lambda: a0 + a1, "cuda:0 and cuda:1")        # the program's call: the function mode's rule
    raises(lambda: a0 + host, "cuda:0 and cpu")        # CUDA's host-tensor rule
    with torch._C.DisableTorchFunction():  # below the program's calls (C++'s ops): placement's own rule
        raises(lambda: aten.add.Tensor(a0, a1), "cuda:0 and cuda:1")
        raises(lambda: aten.cat.default([a0, a1]), "cuda:0 and cuda:1")  # tensors inside a list argument
        joined = aten.add.Tensor(a0, host)  # C++ builds tensors from a simulated tensor's host options
    assert joined.device == torch.device("cuda:0")
    assert (host + host).device == torch.device("cpu")
    assert torch.cat([a0, b0]).device == torch.device("cuda:0")
    assert tensors._GENERIC[torch.Tensor.add] is False and tensors._GENERIC[torch.cat] is False

# a tensor subclass among the dispatch types still dispatches first, however often the types come back
assert not placement._subclass_among((torch.Tensor,)) and not placement._subclass_among([torch.Tensor])
from torch.distributed.tensor import DTensor  # noqa: E402

assert placement._subclass_among((torch.Tensor, DTensor)) and placement._subclass_among((torch.Tensor, DTensor))

# memory: a plain op's result is charged on its GPU and given back when it goes
before = torch.cuda.memory_allocated(1)
c = a1 + a1
assert torch.cuda.memory_allocated(1) == before + 512
del c
assert torch.cuda.memory_allocated(1) == before

# cuBLAS workspaces: charged once per thread (and stream), also once this thread's charge is cached
m = torch.ones(8, 8, device="cuda:0")
m @ m
held = torch.cuda.memory_allocated(0)
m @ m
assert torch.cuda.memory_allocated(0) == held, "a thread's second cuBLAS call charged a workspace again"
side = torch.cuda.Stream(0)
with torch.cuda.stream(side):
    m @ m
on_side = torch.cuda.memory_allocated(0)
assert on_side == held + workspaces.cublas_workspace_bytes(), "another stream of the same thread: a workspace of its own"
seen = []
worker = threading.Thread(target=lambda: seen.append(((m @ m).device, torch.cuda.memory_allocated(0))))
worker.start()
worker.join()
assert seen[0][0] == torch.device("cuda:0")
assert seen[0][1] == on_side + workspaces.cublas_workspace_bytes(), "a new thread's handle: a workspace of its own"
print("OK fast_paths")
