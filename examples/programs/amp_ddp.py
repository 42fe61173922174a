"""DDP with automatic mixed precision: the forward pass under torch.autocast("cuda", float16) and
the loss scaled by torch.amp.GradScaler("cuda"), the usual AMP recipe.

    torchrun --nproc-per-node 2 amp_ddp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 32
STEPS = 4


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")

    g = torch.Generator().manual_seed(13)
    per_rank = GLOBAL_BATCH // world_size
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 16, generator=g)
        y = torch.randint(0, 8, (GLOBAL_BATCH,), generator=g)
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(x)
            loss = F.cross_entropy(output, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        logged = loss.detach().float()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {logged.item():.6f}", flush=True)

    total = sum(p.detach().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
