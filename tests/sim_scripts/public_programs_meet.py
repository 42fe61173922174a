"""What public-style programs met on simulated GPUs (r31; docs/simulated-device-suite.md), each as CUDA has it.
Run under `simgpu run --gpus 1`.

- An OOM guard's probe larger than the host's memory: torch.cuda.OutOfMemoryError with CUDA's message and
  num_ooms counted (the host allocator's RuntimeError came through before), for factories, random
  factories and ops; the same request on the host keeps the host's error; the GPU stays usable.
- torch.profiler with ProfilerActivity.CUDA alone: the host's activity is recorded (torch asserted "No
  activities specified for the profiler").
- torch.set_default_device("cuda"): factories without a device make GPU tensors (torch.tensor raised
  "PyTorch is not linked with support for cuda devices"), torch.get_default_device() answers the GPU."""
import torch
from torch.profiler import ProfilerActivity, profile

HUGE = 1 << 45  # 32 TiB: more than any host here and any simulated GPU

x = torch.zeros(4, device="cuda")
for make in (lambda: torch.empty(HUGE, dtype=torch.uint8, device="cuda"),
             lambda: torch.randn(HUGE // 4, device="cuda"),
             lambda: x.new_empty(HUGE // 4),
             lambda: torch.zeros(HUGE, dtype=torch.uint8, device=torch.device("cuda", 0))):
    before = torch.cuda.memory_stats()["num_ooms"]
    try:
        make()
    except torch.cuda.OutOfMemoryError as exc:
        assert str(exc).startswith("CUDA out of memory. Tried to allocate "), str(exc)[:200]
    else:
        raise AssertionError("no OutOfMemoryError")
    assert torch.cuda.memory_stats()["num_ooms"] == before + 1
try:
    torch.empty(HUGE, dtype=torch.uint8)
except torch.cuda.OutOfMemoryError:
    raise AssertionError("a host allocation must keep the host's error")
except RuntimeError as exc:
    assert "DefaultCPUAllocator" in str(exc), exc
assert (x + 1).sum().item() == 4 and torch.cuda.memory_allocated() > 0

m = torch.nn.Linear(16, 16).cuda()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    m(torch.randn(4, 16, device="cuda")).sum().backward()
assert "aten::addmm" in {event.key for event in prof.key_averages()}
torch.set_default_device("cuda")
try:
    assert torch.tensor([1.0]).device == torch.device("cuda", 0)
    assert torch.get_default_device() == torch.device("cuda", 0)
    layer = torch.nn.Linear(4, 4)
    assert layer.weight.device.type == "cuda" and torch.randn(3).device.type == "cuda"
    assert torch.arange(5).device.type == "cuda" and torch.full((2,), 3.0).device.type == "cuda"
    with torch.device("cpu"):
        assert torch.zeros(2).device.type == "cpu"
    with torch.device("meta"):
        assert torch.nn.Linear(2, 2).weight.is_meta
    assert (layer(torch.ones(2, 4)) - layer(torch.ones(2, 4))).abs().sum().item() == 0
finally:
    torch.set_default_device(None)
assert torch.tensor([1.0]).device.type == "cpu" and torch.get_default_device() == torch.device("cpu")
print("OK public_programs_meet")
