"""DDP with torch.compile: the DDP-wrapped model compiled with torch.compile (default backend).

    torchrun --nproc-per-node 2 compile_ddp.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 16
STEPS = 3


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    model = DDP(Model().to(device), device_ids=[local_rank])
    model = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    g = torch.Generator().manual_seed(9)
    per_rank = GLOBAL_BATCH // world_size
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 10, generator=g)
        y = torch.randn(GLOBAL_BATCH, 4, generator=g)
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device)
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        logged = loss.detach().clone()
        dist.all_reduce(logged, op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {logged.item():.6f}", flush=True)

    total = sum(p.detach().sum() for p in model.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
