"""Collective buffers a GPU frees, for tests/test_plan.py, run with and without `--plan`: each rank prints
one JSON line with the bytes still allocated after an async all_reduce of a buffer it let go of, and the
peak a functional all-gather (wrapped and waited for, as DTensor's redistribute does) adds; then a
functional all-reduce (6 collectives in all)."""
import json
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
base = torch.cuda.memory_allocated()
scratch = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
work = dist.all_reduce(scratch, async_op=True)
work.wait()
del work, scratch  # a GPU frees it now: nothing but the finished work held it
for _ in range(3):
    dist.all_reduce(torch.ones(1, device="cuda"))
left = torch.cuda.memory_allocated() - base
x = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_allocated()
gathered = fc.all_gather_tensor(x, 0, dist.group.WORLD)
gathered = gathered.wait() if isinstance(gathered, fc.AsyncCollectiveTensor) else gathered
reduced = fc.all_reduce(torch.ones(4, device="cuda"), "sum", dist.group.WORLD)
reduced = reduced.wait() if isinstance(reduced, fc.AsyncCollectiveTensor) else reduced
line = json.dumps({"rank": dist.get_rank(), "left_after_all_reduce": left,
                   "all_gather_peak": torch.cuda.max_memory_allocated() - before, "gathered": gathered.numel()})
os.write(1, (line + "\n").encode())  # one write: the two ranks' lines do not interleave (print's can)
dist.destroy_process_group()
