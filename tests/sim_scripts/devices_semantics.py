"""Run under `simgpu run --gpus 3`: CUDA device semantics the simulator must reproduce."""
import threading

import pytest
import torch

assert torch.cuda.is_available() and torch.cuda.device_count() == 3

# transfers copy; staying put returns the same tensor
h = torch.arange(6.0).reshape(2, 3)
g = h.cuda(1)
assert g.device == torch.device("cuda:1") and g.is_cuda and g.get_device() == 1 and not h.is_cuda
g[0, 0] = 100.0
assert h[0, 0] == 0.0, "a host-to-device copy must not alias the host tensor"
assert g.cuda(1) is g and g.to("cuda:1") is g and g.to(torch.float64).device == g.device
assert g.to("cuda:2").get_device() == 2 and g.to("cuda:2").data_ptr() != g.data_ptr()
back = g.cpu()
assert back.device.type == "cpu" and back[0, 0] == 100.0 and back.get_device() == -1
assert g.t().get_device() == 1 and g[1].get_device() == 1 and g.view(-1).is_cuda, "views share the device"
assert torch.device(2) == torch.device("cuda", 2) and isinstance(torch.device("cpu"), torch.device)
assert torch.zeros(2, device=2).get_device() == 2

# CUDA's same-device rule, CPU scalars excepted
with pytest.raises(RuntimeError, match="same device.*cuda:1 and cuda:2"):
    g + g.to("cuda:2")
with pytest.raises(RuntimeError, match="same device.*cuda:1 and cpu"):
    g + h
assert (g + torch.tensor(1.0)).get_device() == 1
with pytest.raises(TypeError, match="can't convert cuda:1 device type tensor to numpy"):
    g.numpy()
with pytest.raises(RuntimeError, match="invalid device ordinal.*cuda:5"):
    torch.ones(1, device="cuda:5")

# the current device: per thread, set_device, contexts, streams
assert torch.cuda.current_device() == 0
with torch.cuda.device(2):
    assert torch.ones(1, device="cuda").get_device() == 2 and torch.ones(1).cuda().get_device() == 2
seen = []
torch.cuda.set_device(1)
t = threading.Thread(target=lambda: seen.append((torch.cuda.current_device(), torch.ones(1).cuda().get_device())))
t.start(); t.join()
assert seen == [(0, 0)], f"a new thread starts on device 0, as with CUDA: {seen}"
assert torch.cuda.current_device() == 1
s = torch.cuda.Stream(device=2)
with torch.cuda.stream(s):
    assert torch.cuda.current_device() == 2 and torch.cuda.current_stream(2) is s
assert torch.cuda.current_device() == 1
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(); end.record(); end.synchronize()
assert start.elapsed_time(end) >= 0.0

# gradients live with their parameters; memory is counted per device
m = torch.nn.Linear(4, 2).cuda(2)
m(torch.randn(3, 4, device="cuda:2")).sum().backward()
assert m.weight.grad.get_device() == 2 and m.bias.grad.is_cuda
before = torch.cuda.memory_allocated(0)
big = torch.empty(1024, 1024, device="cuda:0")
assert torch.cuda.memory_allocated(0) - before == 4 * 1024 * 1024
del big
assert torch.cuda.memory_allocated(0) == before and torch.cuda.max_memory_allocated(0) >= before + 4 * 2**20

# each GPU draws from its own generator, seeded by torch.manual_seed
torch.manual_seed(3)
a = torch.randn(4, device="cuda:0")
cpu_draw = torch.randn(4)
torch.manual_seed(3)
assert torch.equal(torch.randn(4, device="cuda:0").cpu(), a.cpu()), "same seed, same GPU values"
assert torch.equal(torch.randn(4), cpu_draw), "GPU draws leave the host generator alone"
# nn.Module.to passes (device, dtype=None, ...) positionally
m2 = torch.nn.Linear(3, 2).to("cuda:1")
assert m2.weight.get_device() == 1 and m2.to(dtype=torch.float64).weight.get_device() == 1

# meta is torch's own device, not the host: meta-device init allocates nothing, to_empty places
assert torch.empty(3, device="meta").is_meta and torch.zeros(2, device=torch.device("meta")).device.type == "meta"
with torch.device("meta"):
    lazy = torch.nn.Linear(4, 4)
assert lazy.weight.is_meta and not lazy.weight.is_cuda
assert torch.ones(2, device="cuda:1").to("meta").is_meta and torch.empty_like(g, device="meta").is_meta
before = torch.cuda.memory_allocated(2)
lazy.to_empty(device="cuda:2")
assert lazy.weight.get_device() == 2 and not lazy.weight.is_meta
assert torch.cuda.memory_allocated(2) - before == 2 * 512  # two storages, each a 512-byte block as on CUDA
# FakeTensor (torch.export, the pipelining tracer) makes meta tensors of symbolic sizes
exported = torch.export.export(torch.nn.Linear(3, 2), (torch.ones(5, 3),),
                               dynamic_shapes=({0: torch.export.Dim("batch")},))
assert exported.module()(torch.ones(7, 3)).shape == (7, 2)
print("OK devices_semantics")
