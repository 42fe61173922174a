"""A small DDP or FSDP2 training program for tests/test_plan.py, run with and without `--plan`: each rank
prints one JSON line with its GPU's allocator peaks and its losses (zeros under a plan)."""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--wrap", choices=["ddp", "fsdp2"], required=True)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--same-count", action="store_true", help="every rank sends 1 (a symmetric program: plan --ranks)")
args = parser.parse_args()
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.LayerNorm(256), nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
                        for _ in range(2)]).cuda()
if args.wrap == "ddp":
    model = nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
else:
    from torch.distributed.fsdp import fully_shard

    for block in model:
        fully_shard(block)
    fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(8, 64, 256, device="cuda")
losses = []
for _ in range(args.steps):
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
count = torch.tensor([1 if args.same_count else rank + 1], device="cuda")  # an integer value sent across ranks: kept under a plan
dist.all_reduce(count)
line = json.dumps({"rank": rank, "max_allocated": torch.cuda.max_memory_allocated(),
                   "max_reserved": torch.cuda.max_memory_reserved(), "losses": losses, "count": count.item()})
os.write(1, (line + "\n").encode())  # one write: the two ranks' lines do not interleave
dist.destroy_process_group()
