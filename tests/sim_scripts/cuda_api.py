"""Run under `simgpu run --gpus 2`: the torch.cuda calls training programs make around their model."""
import json
import re
from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint

with torch.cuda.nvtx.range("step"):
    torch.cuda.nvtx.range_push("inner")
    torch.cuda.nvtx.range_pop()
stats = torch.cuda.memory_stats()
big = torch.empty(1024, device="cuda")
assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == stats["allocated_bytes.all.current"] + 4096
summary = torch.cuda.memory_summary()   # CUDA's table, every row filled from the allocator model
assert "PyTorch CUDA memory summary, device ID 0" in summary and "from small pool" in summary, summary
size, unit = re.search(r"\| Allocated memory +\| +(\d+) (B|KiB|MiB)", summary).groups()
assert int(size) << {"B": 0, "KiB": 10, "MiB": 20}[unit] == torch.cuda.memory_allocated(), summary
torch.cuda.reset_accumulated_memory_stats()
assert torch.cuda.memory_stats()["allocation.all.allocated"] == 0
# streams and events answer what an H200 answered (tests/cuda_reference/stream-event-2.11.0+cu130.json)
recorded = json.loads((Path(__file__).parent.parent / "cuda_reference/stream-event-2.11.0+cu130.json").read_text())
assert list(torch.cuda.Stream.priority_range()) == recorded["priority_range"]
assert [torch.cuda.Stream(priority=p).priority for p in (0, -10, 5, -1)] == [
    recorded["priority_default"], recorded["priority_-10"], recorded["priority_5"], recorded["priority_-1"]]
assert torch.cuda.default_stream().cuda_stream == recorded["default_cuda_stream"] == 0
side = torch.cuda.Stream()
assert isinstance(side.cuda_stream, int) and side.cuda_stream != 0
event = torch.cuda.Event()
assert (event.cuda_event, event.device, event.event_id) == (0, None, 0)
with torch.cuda.device(1):
    event.record()
assert event.cuda_event != 0 and event.event_id != 0 and event.device == torch.device("cuda:1")
try:
    event.ipc_handle()
    raise AssertionError("ipc_handle of an ordinary event must fail, as on CUDA")
except RuntimeError as error:
    assert "invalid resource handle" in str(error)
torch.cuda.set_per_process_memory_fraction(0.5)
torch.cuda.reset_max_memory_allocated()
assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()
assert torch.cuda.can_device_access_peer(0, 1) and torch.cuda.is_bf16_supported()
g = torch.Generator(device="cuda").manual_seed(5)
assert g.device == torch.device("cuda:0") and isinstance(g, torch.Generator)
a = torch.randn(3, device="cuda", generator=g)
assert a.device == torch.device("cuda:0")
assert torch.equal(torch.randn(3, device="cuda", generator=torch.Generator(device="cuda").manual_seed(5)).cpu(), a.cpu())
assert torch.Generator().device == torch.device("cpu")

# activation checkpointing saves and restores the GPU's random state around dropout
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1)).cuda(1)
x = torch.randn(4, 8, device="cuda:1", requires_grad=True)  # the reentrant variant needs an input that does
torch.cuda.manual_seed_all(1)
plain = model(x).sum()
plain.backward()
expected = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
for reentrant in (False, True):
    torch.cuda.manual_seed_all(1)
    checkpoint(model, x, use_reentrant=reentrant).sum().backward()
    for p, e in zip(model.parameters(), expected):
        assert p.grad.device == torch.device("cuda:1") and torch.allclose(p.grad, e), reentrant
    model.zero_grad()

# legacy CUDA tensor types, as older training code builds tensors
z = torch.cuda.FloatTensor(3).fill_(1.0)
assert z.device == torch.device("cuda:0") and z.type() == "torch.cuda.FloatTensor" and z.cpu().type() == "torch.FloatTensor"
assert isinstance(z, torch.cuda.FloatTensor) and not isinstance(z, torch.cuda.LongTensor)
assert not isinstance(z.cpu(), torch.cuda.FloatTensor) and torch.cuda.LongTensor([1, 2]).sum().item() == 3
w = torch.ones(2, requires_grad=True)
moved = w.type(torch.cuda.DoubleTensor)
assert moved.device == torch.device("cuda:0") and moved.dtype == torch.float64 and z.type(torch.FloatTensor).device.type == "cpu"
moved.sum().backward()
assert w.grad.device.type == "cpu" and w.grad.tolist() == [1.0, 1.0]
assert z.type("torch.cuda.HalfTensor").dtype == torch.float16

# attention restricted to a GPU-only kernel (no CPU memory-efficient attention) runs on the host's kernels
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
q = torch.randn(2, 4, 16, 8, device="cuda")
with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
    fast = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
with sdpa_kernel(SDPBackend.MATH):
    math = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
assert fast.device == q.device and torch.allclose(fast, math, atol=1e-5)

# torch.compile's dynamo (torch <= 2.12, imported by FSDP2 and DTensor) reads these off Tensor.grad's
# getter at import, which simgpu replaces: they must say what the C getter says
getter = torch.Tensor.grad.__get__
assert getter.__self__.__objclass__ is torch._C.TensorBase and getter.__self__.__name__ == "grad"
import torch._dynamo  # noqa: E402,F401

# set_device needs an index, as CUDA's torch says (a device without one passed under simulation only)
for no_index in ("cuda", torch.device("cuda")):
    try:
        torch.cuda.set_device(no_index)
    except ValueError as exc:
        assert str(exc) == "Expected a torch.device with a specified index or an integer, but got:cuda", exc
    else:
        raise AssertionError(f"set_device({no_index!r}) was taken")
torch.cuda.set_device("cuda:1")
assert torch.cuda.current_device() == 1
torch.cuda.set_device(torch.device("cuda", 0))
print("OK cuda_api")
