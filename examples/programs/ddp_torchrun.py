"""DDP launched by torchrun: LOCAL_RANK from the environment, Adam, the trained weights saved with
torch.save(model.module.state_dict()) and reloaded into a fresh model.

    torchrun --nproc-per-node 2 ddp_torchrun.py
"""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

GLOBAL_BATCH = 16
STEPS = 4


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank)

    torch.manual_seed(0)
    model = Net().to(device)
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    g = torch.Generator().manual_seed(42)
    per_rank = GLOBAL_BATCH // world_size
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 8, generator=g)
        y = torch.randint(0, 3, (GLOBAL_BATCH,), generator=g)
        x = x[rank * per_rank:(rank + 1) * per_rank].to(device)
        y = y[rank * per_rank:(rank + 1) * per_rank].to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        dist.all_reduce(loss.detach(), op=dist.ReduceOp.AVG)
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)

    # save the unwrapped weights on rank 0; every rank reloads them into a fresh model
    path = os.path.join(tempfile.gettempdir(), f"ddp_torchrun_{os.environ['MASTER_PORT']}.pt")
    if rank == 0:
        torch.save(model.module.state_dict(), path)
    dist.barrier()
    fresh = Net().to(device)
    fresh.load_state_dict(torch.load(path, map_location=device))
    dist.barrier()
    if rank == 0:
        os.remove(path)
    total = sum(p.sum() for p in fresh.parameters())
    if rank == 0:
        print(f"final {total.item():.8e}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
