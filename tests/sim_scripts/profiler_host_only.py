"""Run under `simgpu run --gpus 1`: torch.profiler with CUDA activity records the host's ops, with no
flood of CUDA-event failures, and says once that GPU activity is left out."""
import torch
from torch.profiler import ProfilerActivity, profile, record_function

m = torch.nn.Linear(32, 32).cuda()
for activities in ([ProfilerActivity.CPU, ProfilerActivity.CUDA], [ProfilerActivity.CUDA, ProfilerActivity.CPU]):
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        with record_function("step"):
            m(torch.randn(8, 32, device="cuda")).sum().backward()
    names = {event.key for event in prof.key_averages()}
    assert {"step", "aten::addmm"} <= names, sorted(names)
    assert "aten::addmm" in prof.key_averages().table(sort_by="cuda_time_total", row_limit=50)
with torch.autograd.profiler.profile(use_device="cuda") as old:
    m(torch.randn(8, 32, device="cuda"))
assert any(event.key == "aten::addmm" for event in old.key_averages())
print("OK profiler_host_only")
