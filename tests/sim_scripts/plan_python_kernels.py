"""scaled_dot_product_attention under a plan (tests/test_plan.py): the simulation's Python around it (CUDA's
kernel choice, torch's checks run on meta copies, which dispatch ~30 ops) is the simulation's, not the
program's: a step of `calls` SDPA calls, each of a new shape, against a step without them. Prints each
step's counted dispatches and torch calls."""
import json
import sys

import torch
import torch.nn.functional as F

from simgpu.cuda_sim import plan

calls = int(sys.argv[1])
w = torch.randn(8, device="cuda", requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):
    if step == 1:
        with torch.no_grad():
            for i in range(calls):  # a new signature each call: torch's checks run for every one
                q = torch.randn(1, 2, 16 + 8 * i, 8, device="cuda", dtype=torch.bfloat16)
                F.scaled_dot_product_attention(q, q, q, is_causal=True)
    (w * 2).sum().backward()
    opt.step()
    opt.zero_grad()
print(json.dumps([{k: s[k] for k in ("dispatches", "torch_calls", "ops")} for s in plan.RECORDER.steps]))
