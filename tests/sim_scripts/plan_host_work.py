"""A training-like step whose Python does `argv[1]` seconds of CPU work between its GPU ops (tests/test_plan.py):
prints the plan's record of its last step beside the busy CPU it measured itself."""
import json
import sys
import time

import torch

from simgpu.cuda_sim import plan

busy_seconds = float(sys.argv[1])
w = torch.randn(256, 256, device="cuda", requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
x = torch.randn(64, 256, device="cuda")
busy_cpu = 0.0
for step in range(3):
    busy_cpu = 0.0
    for _ in range(4):
        started = time.thread_time()
        end = started + busy_seconds / 4
        while time.thread_time() < end:  # the program's own host work (a framework's Python)
            pass
        busy_cpu += time.thread_time() - started
        x = torch.tanh(x @ w)
    x.sum().backward()
    opt.step()
    opt.zero_grad()
    x = x.detach()
last = plan.RECORDER.steps[-1]
print(json.dumps({"busy_cpu_us": busy_cpu * 1e6, "reference_probe_us": plan.RECORDER.host_model.reference_probe_us,
                  **{k: last[k] for k in ("program_cpu_us", "host_us", "step_us", "host_idle_us", "probe_us")}}))
